# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The API layer (``plugins/module_utils/_http``) is the only place that writes an apiserver path, waits in a loop,
or decides what a 404 means; docs/architecture.md promises it. Read from the source (no import executed):

- an apiserver path (``/api...``, ``/apis...``, ``/version``, ``/readyz``...) as a literal or f-string, or a path
  composed from another path (``f"{CRD_PATH}/{name}"``, ``prefix + "/" + name``) belongs in ``_http/paths.py``;
- a loop whose body (or condition) calls a sleep belongs in ``_http/poll.py`` (``poll_until``);
- a comparison with 404 belongs in ``_http/client.py`` (``none_if_missing``, ``get_or_none``, ``is_missing``).

Each exception is listed below with why it is one.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Iterator, List, Optional, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLUGINS = ROOT / "plugins"
HTTP = "plugins/module_utils/_http/"

API_PATH = re.compile(r"^/(api|apis)(/|$)|^/(version|readyz|livez|healthz)$")
# A name that holds a path: CRD_PATH, LEASE_COLLECTION, api_prefix(...), paths.crd(...), self.list_path.
PATH_HOLDER = re.compile(r"(PATH|COLLECTION|_path\b|path\(|api_prefix|\bpaths\.)")

# (file, function): loops that sleep by design, outside poll_until.
WAIT_LOOPS_ALLOWED = {
    # The retry loop: it sleeps between tries of one request (a backoff, not a wait for a condition) and stops
    # at the caller's Deadline; every retried request of the collection goes through it.
    ("plugins/module_utils/retries.py", "call_with_retries"),
}

# (file, function): comparisons with 404 that are not an apiserver's "missing".
NOT_FOUND_ALLOWED = {
    # etcd's JSON gateway answering 404: not an etcd client URL (an etcd status, not an apiserver's).
    ("plugins/module_utils/_etcd/client.py", "_parse_response"),
}


def _relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _production_files(root: Path = PLUGINS) -> Iterator[Tuple[str, ast.Module]]:
    for path in sorted(root.rglob("*.py")):
        yield _relative(path) if root == PLUGINS else path.as_posix(), ast.parse(path.read_text(encoding="utf-8"))


def _scopes(tree: ast.AST, name: str = "<module>") -> Iterator[Tuple[str, ast.AST]]:
    """Every node with the innermost function (or class) it is written in."""
    for child in ast.iter_child_nodes(tree):
        inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else name
        yield inner, child
        yield from _scopes(child, inner)


def _not_paths(tree: ast.AST) -> set:
    """Docstrings (prose), and the literal parts of f-strings (the f-string is judged whole)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
        if isinstance(node, ast.JoinedStr):
            found.update(id(value) for value in node.values)
    return found


def _is_path_text(text: str) -> bool:
    return not re.search(r"\s", text)


def _literal_parts(node: ast.JoinedStr) -> List[str]:
    return [v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str)]


def _builds_path(node: ast.AST, docstrings: set) -> Optional[str]:
    """The source of ``node`` when it writes an apiserver path or composes one from another path."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
        return node.value if API_PATH.search(node.value) and _is_path_text(node.value) else None
    if isinstance(node, ast.JoinedStr):
        if not all(_is_path_text(part) for part in _literal_parts(node)):
            return None  # a message, not a path
        first = node.values[0]
        if isinstance(first, ast.Constant) and API_PATH.search(first.value.split("{")[0] or "-"):
            return ast.unparse(node)
        if any("/namespaces/" in part for part in _literal_parts(node)):
            return ast.unparse(node)
        if (isinstance(first, ast.FormattedValue) and len(node.values) > 1 and isinstance(node.values[1], ast.Constant)
                and node.values[1].value.startswith("/")
                and (PATH_HOLDER.search(ast.unparse(first.value)) or ast.unparse(first.value) == "prefix")):
            return ast.unparse(node)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        right = node.right
        if (isinstance(right, ast.Constant) and isinstance(right.value, str) and right.value.startswith("/")
                and _is_path_text(right.value) and PATH_HOLDER.search(ast.unparse(node.left))):
            return ast.unparse(node)
    return None


def path_literals(root: Path = PLUGINS) -> List[str]:
    """``file:line: source`` of every apiserver path written outside ``_http/paths.py``."""
    found = []
    for name, tree in _production_files(root):
        if name.endswith("_http/paths.py"):
            continue
        docstrings = _not_paths(tree)
        for _scope, node in _scopes(tree):
            source = _builds_path(node, docstrings)
            if source is not None:
                found.append(f"{name}:{node.lineno}: {source}")
    return found


def _calls_sleep(loop: ast.AST) -> bool:
    for node in ast.walk(loop):
        if isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called == "sleep" or called.endswith("_sleep"):
                return True
    return False


def _found_outside(root: Path, owner: str, matches) -> List[Tuple[str, str, int]]:
    """(file, function, line) of every node that ``matches`` in the production files but ``owner``."""
    return [(name, scope, node.lineno) for name, tree in _production_files(root) if not name.endswith(owner)
            for scope, node in _scopes(tree) if matches(node)]


def wait_loops(root: Path = PLUGINS) -> List[Tuple[str, str, int]]:
    """(file, function, line) of every ``while``/``for`` loop that sleeps, outside ``_http/poll.py``."""
    return _found_outside(root, "_http/poll.py", lambda node: isinstance(node, (ast.While, ast.For)) and _calls_sleep(node))


def _mentions_404(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return node.value == 404
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_mentions_404(element) for element in node.elts)
    return False


def not_found_checks(root: Path = PLUGINS) -> List[Tuple[str, str, int]]:
    """(file, function, line) of every comparison with 404 outside ``_http/client.py``."""
    return _found_outside(root, "_http/client.py", lambda node: isinstance(node, ast.Compare)
                          and any(_mentions_404(n) for n in [node.left, *node.comparators]))


def _not_allowed(found, allowed) -> List[str]:
    return [f"{name}:{line} in {scope}" for name, scope, line in found if (name, scope) not in allowed]


def test_no_api_path_is_written_outside_paths_py():
    assert path_literals() == [], "write these paths as names in plugins/module_utils/_http/paths.py"


def test_no_loop_waits_outside_poll_until():
    assert _not_allowed(wait_loops(), WAIT_LOOPS_ALLOWED) == [], (
        "wait with _http/poll.poll_until (one Deadline, the last value in PollTimeout) instead of a loop that sleeps")


def test_no_404_is_decided_outside_the_client():
    assert _not_allowed(not_found_checks(), NOT_FOUND_ALLOWED) == [], (
        "decide 'missing' with _http/client.none_if_missing / get_or_none / is_missing")


@pytest.mark.parametrize("allowed, found", [(WAIT_LOOPS_ALLOWED, wait_loops), (NOT_FOUND_ALLOWED, not_found_checks)])
def test_every_exception_is_still_needed(allowed, found):
    assert allowed - {(name, scope) for name, scope, _line in found()} == set()


# The checks themselves, on code written the ways they must catch (and the ways they must let through).
SAMPLE = '''
"""A docstring naming /apis/apps/v1 is prose."""
import time
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
ONE = f"{CRD_PATH}/{name}"
GV = f"/apis/{group}/{version}"
OBJ = paths.resource_collection(g, v, r) + "/" + name
MESSAGE = f"run kubectl get --raw /apis/{group}"
LABEL = f"{namespace}/{name}"
OBJECT = f"{prefix}/{plural}/{name}"
NAMESPACED = f"{base}/namespaces/{namespace}/{plural}"
KEY = prefix + "/" + name
READY = "/readyz"
ETCD = "/v3/kv/range"

def wait(deadline):
    while not deadline.expired():
        time.sleep(1)

def ticker(event):
    while not event.wait(5):
        renew()

def gone(error):
    return error.status in (404, 409) or error.status != 404
'''


def test_the_checks_catch_what_they_must(tmp_path):
    (tmp_path / "sample.py").write_text(SAMPLE, encoding="utf-8")
    paths_found = [line.split(": ", 1)[1] for line in path_literals(tmp_path)]
    assert paths_found == ['/apis/apiextensions.k8s.io/v1/customresourcedefinitions', "f'{CRD_PATH}/{name}'",
                           "f'/apis/{group}/{version}'", "paths.resource_collection(g, v, r) + '/'",
                           "f'{prefix}/{plural}/{name}'", "f'{base}/namespaces/{namespace}/{plural}'", "/readyz"]
    assert [(scope, line) for _name, scope, line in wait_loops(tmp_path)] == [("wait", 17)]
    assert [(scope, line) for _name, scope, line in not_found_checks(tmp_path)] == [("gone", 25), ("gone", 25)]


if __name__ == "__main__":  # counts, for a before/after measurement
    for label, found in (("paths", path_literals()), ("waits", wait_loops()), ("404s", not_found_checks())):
        print(f"{label}: {len(found)}")
        for item in found:
            print("   ", item)
