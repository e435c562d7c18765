# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""docs/architecture.md's checkable claims, checked against the code (the API layer's own claims - the one
wait loop, the paths, 404 handling - are in test_api_layer.py).

The claims are read from the document where they are lists (the capability table, the paths and
``file.symbol`` names it gives), so the document and this test cannot drift apart unnoticed.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "architecture.md"
PLUGINS = REPO / "plugins"
MODULE_UTILS = PLUGINS / "module_utils"
HEADER = "# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)"
ROOT_DIRS = ("plugins", "tests", "docs", "roles", "playbooks", "scripts", "benchmarks", "rbac", "meta", "changelogs")
TICKED = re.compile(r"`([^`]+)`")
PACKAGE = re.compile(r"^(?:module_utils/)?(_\w+)/")


def _text():
    return DOC.read_text(encoding="utf-8")


def _says(words):
    return words in " ".join(_text().split())


def _blocks():
    """(section package, block text) for each table row, bullet and paragraph; a section titled with a
    package (``module_utils/_http/``) gives its bare file names (``client.py``) that package."""
    section, lines = None, []
    for line in _text().splitlines() + [""]:
        starts_block = not line.strip() or line.startswith("#") or line.startswith("|") or line.lstrip().startswith("- ") \
            or re.match(r"^\d+\. ", line)
        if starts_block and lines:
            yield section, " ".join(lines)
            lines = []
        if line.startswith("#"):
            heading = PACKAGE.search(" ".join(TICKED.findall(line)))
            section = heading.group(1) if heading else None
        elif line.strip():
            lines.append(line)


def _resolve(token, package):
    """Candidate files for a path as the document writes it: from the repository root, from plugins/
    (``module_utils/...``, ``doc_fragments/...``), from module_utils/ (``_judge/model.py``, ``hashing.py``), in a
    role (``defaults/main.yml``), or for a bare file name, in the package named just before it first."""
    token = token.rstrip("/")
    first = token.split("/")[0]
    if first in ROOT_DIRS:
        return [REPO / token]
    if first in ("module_utils", "doc_fragments", "modules", "filter", "action"):
        return [PLUGINS / token]
    if "/" in token and first.startswith("_"):
        return [MODULE_UTILS / token]
    if "/" in token:  # a role's `defaults/main.yml`
        return sorted((REPO / "roles").glob(f"*/{token}"))
    if package:
        return [MODULE_UTILS / package / token, MODULE_UTILS / token]
    return [MODULE_UTILS / token, *sorted(MODULE_UTILS.glob(f"_*/{token}"))]  # "a `runner.py` where ...": any package's


def _named(path_like):
    """(token, candidates) for each backticked name matching ``path_like``, with the package in force there."""
    for section, block in _blocks():
        package = section
        for token in TICKED.findall(block):
            found = PACKAGE.match(token)
            if path_like(token):
                yield token, _resolve(token, package)
            if found:
                package = found.group(1)


def _is_path(token):
    return " " not in token and "(" not in token and (re.search(r"\.(py|ya?ml|md)$", token) or token.endswith("/"))


def test_every_path_the_document_names_exists():
    named = list(_named(_is_path))
    assert len(named) > 80, "the document's paths were not found; has its format changed?"
    missing = sorted({token for token, candidates in named if not any(c.exists() for c in candidates)})
    assert missing == [], f"docs/architecture.md names files that do not exist: {missing}"


SYMBOL = re.compile(r"^((?:_\w+/)?\w+)\.(\w+)(?:\.(\w+))?(?:\(.*\))?$")


def _defined(path):
    """Top-level names of a file, and the names each class defines (methods, class and ``self.`` attributes)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names, members = set(), {}
    for node in tree.body:
        targets = [node] if isinstance(node, (ast.FunctionDef, ast.ClassDef)) else getattr(node, "targets", [getattr(node, "target", None)])
        names.update(getattr(t, "name", None) or getattr(t, "id", None) for t in targets if t is not None)
        if isinstance(node, ast.ClassDef):
            members[node.name] = {getattr(n, "name", None) for n in node.body} | {
                t.attr for n in ast.walk(node) if isinstance(n, ast.Assign) for t in n.targets
                if isinstance(t, ast.Attribute) and getattr(t.value, "id", "") == "self"} | {
                t.id for n in node.body if isinstance(n, (ast.Assign, ast.AnnAssign))
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}
    return names, members


def test_every_file_symbol_the_document_names_is_defined_there():
    """``_judge/engine.judge``, ``errors.ApiError``, ``module.module``: the file exists and defines the name (a
    bare ``runner.`` or ``client.`` depends on the sentence, so only package paths and module_utils' own files)."""
    checked, wrong = 0, []
    for token in {t for _section, block in _blocks() for t in TICKED.findall(block)}:
        match = SYMBOL.match(token)
        if not match or _is_path(token):
            continue
        path = MODULE_UTILS / (match.group(1) + ".py")
        if not path.is_file():
            continue
        names, members = _defined(path)
        name, member = match.group(2), match.group(3)
        in_class = any(name in defined for defined in members.values())
        if not (name in names or in_class) or (member and member not in members.get(name, set())):
            wrong.append(token)
        checked += 1
    assert checked > 15
    assert sorted(wrong) == [], f"docs/architecture.md names what these files do not define: {sorted(wrong)}"


def _table():
    """The capability table: {capability: [pure, io, runner, module] cells}."""
    rows = {}
    for line in _text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == 5 and cells[0] not in ("capability", "---"):
            rows[cells[0]] = cells[1:]
    return rows


def _cell_files(row_cells, column):
    """The files of one column, bare names resolved against the package named before them in the row."""
    package, files = None, []
    for index, cell in enumerate(row_cells):
        for token in TICKED.findall(cell):
            if index == column and token.endswith(".py"):
                files.append(next((c for c in _resolve(token, package) if c.exists()), token))
            found = PACKAGE.match(token)
            if found:
                package = found.group(1)
    return files


def _pure_files():
    found = []
    for capability, cells in _table().items():
        exempt = {}  # file -> the functions or classes the I/O column names in it (``profiles._read_profiles_file``)
        for token in TICKED.findall(cells[1]):
            match = SYMBOL.match(token)
            if match and not _is_path(token) and (MODULE_UTILS / (match.group(1) + ".py")).is_file():
                exempt.setdefault(MODULE_UTILS / (match.group(1) + ".py"), set()).add(match.group(2))
        found += [(capability, path, exempt.get(path, set())) for path in _cell_files(cells, 0)]
    return found


PURE = _pure_files()
# What "pure" rules out (the contract: no I/O, no Ansible, never import the API layer's I/O, never read files or
# environment, never sleep or read a clock of their own). Imports of I/O modules are refused whole.
IO_MODULES = {"socket", "ssl", "http", "urllib", "urllib3", "requests", "kubernetes", "subprocess", "shutil", "tempfile", "os",
              "pathlib", "glob", "io", "threading", "signal", "select", "selectors", "ctypes", "ansible"}
API_IO = {"_http.client", "_http.transport", "_http.settings", "module"}
CLOCKS = {("time", "time"), ("time", "monotonic"), ("time", "perf_counter"), ("datetime", "now"), ("datetime", "utcnow"),
          ("date", "today")}


def test_the_table_names_pure_files():
    assert len(PURE) > 25 and all(isinstance(path, Path) for _capability, path, _exempt in PURE), PURE


def _io_imports(node):
    found = []
    for module in ([a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]):
        inner = module.replace("ansible_collections.kubeupgrade.storage.plugins.module_utils.", "")
        imported = {inner} | ({f"{inner}.{a.name}" for a in node.names} if isinstance(node, ast.ImportFrom) else set())
        if module.split(".")[0] in IO_MODULES or imported & API_IO:
            found.append(f"line {node.lineno}: imports {module}")
    return found


def _violations(path, exempt):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}

    def inside_exempt(node):
        while node in parents:
            node = parents[node]
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in exempt:
                return True
        return False

    def a_fallback(node):  # `options.now or datetime.now(...)`: the real clock only when the caller passes none
        parent = parents.get(node)
        return isinstance(parent, ast.BoolOp) and isinstance(parent.op, ast.Or) and parent.values[-1] is node

    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found += _io_imports(node)
        elif isinstance(node, ast.Call) and not inside_exempt(node):
            func = node.func
            owner = getattr(func.value, "id", getattr(func.value, "attr", "")) if isinstance(func, ast.Attribute) else ""
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("open", "getenv") or (owner, name) == ("time", "sleep"):  # a sleep passed in may be called
                found.append(f"line {node.lineno}: calls {name}")
            elif (owner, name) in CLOCKS and not a_fallback(node):
                found.append(f"line {node.lineno}: reads the clock ({owner}.{name})")
        elif isinstance(node, ast.Attribute) and node.attr == "environ":
            found.append(f"line {node.lineno}: reads the environment")
    return found


@pytest.mark.parametrize("capability, path, exempt", PURE, ids=[f"{c}:{p.relative_to(MODULE_UTILS)}" for c, p, _e in PURE])
def test_pure_files_do_no_io(capability, path, exempt):
    assert _violations(path, exempt) == [], f"{path.relative_to(REPO)} is listed as pure ({capability})"


def test_every_module_is_in_the_table():
    listed = set(re.findall(r"`(storage_\w+)`", " ".join(cells[3] for cells in _table().values())))
    modules = {p.stem for p in (PLUGINS / "modules").glob("*.py")}
    assert modules - listed == set(), f"modules missing from the capability table: {sorted(modules - listed)}"


def _python_files():
    return sorted(p for root in ("plugins", "tests", "scripts", "benchmarks") for p in (REPO / root).rglob("*.py")
                  if "__pycache__" not in p.parts and "output" not in p.relative_to(REPO).parts[:2])


def test_every_python_file_starts_with_the_gpl_header_line():
    """As the document words it: every Python file but the simulator's and empty ``__init__.py`` files, after a
    module's ``#!/usr/bin/python``."""
    assert _says("Every Python file but the simulator's (`tests/simulator/`) and the empty `__init__.py` files")
    wrong = []
    for path in _python_files():
        text = path.read_text(encoding="utf-8")
        if not text.strip() or path.is_relative_to(REPO / "tests" / "simulator"):
            continue
        lines = text.splitlines()
        if lines[0] != HEADER and not (lines[0].startswith("#!") and lines[1:2] == [HEADER]):
            wrong.append(str(path.relative_to(REPO)))
    assert wrong == [], f"files without the GPL header line: {wrong}"


def _code(tree):
    """The statements after the docstring."""
    body = tree.body
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        body = body[1:]
    return body


def test_future_annotations_at_the_top_of_every_module_utils_file_with_code():
    assert _says("at the top of every module_utils file with code")
    wrong = []
    for path in sorted(MODULE_UTILS.rglob("*.py")):
        body = _code(ast.parse(path.read_text(encoding="utf-8")))
        if not body or path.name == "_release_data.py" or path.name.endswith("_pb2.py"):  # a docstring only; generated
            continue
        first = body[0]
        if not (isinstance(first, ast.ImportFrom) and first.module == "__future__" and any(a.name == "annotations" for a in first.names)):
            wrong.append(str(path.relative_to(REPO)))
    assert wrong == [], f"module_utils files whose first statement is not `from __future__ import annotations`: {wrong}"


def _third_party(module):
    top = module.split(".")[0]
    return top not in sys.stdlib_module_names and top not in ("__future__", "ansible", "ansible_collections")


def test_third_party_imports_are_guarded():
    """At a file's top level only inside ``try/except ImportError``; elsewhere only inside the function that needs
    the package (imported at first use, so a module loads without it)."""
    unguarded, lazy = [], set()
    for path in sorted(PLUGINS.rglob("*.py")):
        if path.name.endswith("_pb2.py"):  # protoc's code, imported only inside the etcd layer's guards (checked below)
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for module in filter(_third_party, modules):
                chain, cur = [], node
                while cur in parents:
                    chain.append(parents[cur])
                    cur = parents[cur]
                guarded = any(isinstance(n, ast.Try) and any(
                    "ImportError" in ast.dump(h.type or ast.Name(id="ImportError")) for h in n.handlers) for n in chain)
                in_function = any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) for n in chain)
                if in_function and not guarded:
                    lazy.add(module.split(".")[0])
                elif not guarded:
                    unguarded.append(f"{path.relative_to(REPO)}:{node.lineno} {module}")
    assert unguarded == [], f"third-party imports neither guarded nor at first use: {unguarded}"
    assert lazy <= {"kubernetes", "urllib3", "cryptography", "nacl"}, lazy  # the ones the document names
    assert 'missing_required_lib("kubernetes")' in (MODULE_UTILS / "module.py").read_text(encoding="utf-8")
    generated = [f"{path.relative_to(REPO)}:{node.lineno}" for path in sorted(PLUGINS.rglob("*.py")) if not path.name.endswith("_pb2.py")
                 for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                 if isinstance(node, ast.ImportFrom) and (node.module or "").endswith((".etcdpb", ".k8spb"))]
    # the etcd client (the scratch etcd writes with the client's channel and messages, taken from client.py), and
    # Kubernetes' messages, of the answers and of the stored values (envelope.py takes them from protobuf.py),
    # imported at first use inside a guard
    assert generated == [f"plugins/module_utils/_etcd/client.py:{_etcdpb_import_line('_etcd/client')}",
                         f"plugins/module_utils/_http/protobuf.py:{_etcdpb_import_line('_http/protobuf', 'messages')}"], generated


def _etcdpb_import_line(name, function=None):
    """The line of ``<name>.py``'s import of the generated messages, which must sit in a ``try`` that guards its
    packages: at the file's top level, or inside ``function`` (an import at first use)."""
    tree = ast.parse((MODULE_UTILS / f"{name}.py").read_text(encoding="utf-8"))
    body = tree.body if function is None else next(
        node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == function).body
    for node in body:
        if isinstance(node, ast.Try) and any("ImportError" in ast.dump(h.type) for h in node.handlers):
            for inner in node.body:
                if isinstance(inner, ast.ImportFrom) and (inner.module or "").endswith((".etcdpb", ".k8spb")):
                    return inner.lineno
    return None


def test_imports_inside_the_collection_use_the_full_path():
    wrong = []
    for path in sorted(PLUGINS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level:
                wrong.append(f"{path.relative_to(REPO)}:{node.lineno} relative import")
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            for module in modules:
                if module.split(".")[0] in ("plugins", "module_utils", "kubeupgrade") or (
                        module.startswith("ansible_collections.") and not module.startswith("ansible_collections.kubeupgrade.storage.plugins.")
                        and module.startswith("ansible_collections.kubeupgrade")):
                    wrong.append(f"{path.relative_to(REPO)}:{node.lineno} {module}")
    assert wrong == [], f"collection imports not by the full ansible_collections.kubeupgrade.storage.plugins path: {wrong}"


def test_only_the_engine_decides_what_blocks():
    """docs/architecture.md: `_judge/engine.py` is the only place that decides what blocks (check mode included)."""
    deciding = []
    for path in sorted(PLUGINS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AugAssign) else []
            if any(isinstance(t, ast.Attribute) and t.attr == "blocking" for t in targets):
                deciding.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert deciding and all(place.startswith("plugins/module_utils/_judge/engine.py:") for place in deciding), deciding
