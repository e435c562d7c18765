# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The packages of module_utils in one order, lowest first: a package imports only packages below it, so no import goes
upward and no chain of imports comes back (not only two packages importing each other). docs/architecture.md ("Layers")
draws the same order; a new package, or an import that needs another place, changes both."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "plugins" / "module_utils"
PREFIX = "ansible_collections.kubeupgrade.storage.plugins.module_utils"

ORDER = (
    # the bytecode cache every module imports first, then shared files that import nothing of the collection, then
    # the option checks on errors
    "_bytecode", "errors", "_release_data", "hashing", "connection_args", "_validate",
    # the I/O layers: the API layer, then the etcd layer (which waits with the API layer's one wait loop)
    "_http", "_etcd",
    # the audit's registered result as the capabilities that take one read it (over the etcd layer's key layout)
    "audit_result",
    # shared files over the API layer: names, RBAC rules, retries, release data and emulation
    "resources", "rbac", "retries", "profiles", "emulation", "verdicts",
    # observing the apiservers, then rewriting objects through them: the primitives the capabilities share
    "_observe", "_rewrite",
    # the capabilities, side by side: none imports another but the records (what the judge reads and the migration
    # writes); a capability that needs another's result takes it as data
    "_hash", "_audit", "_snapshot", "_remember", "_judge", "_migrate", "_rehearse",
    # the module shell
    "module",
)


def _package(path: Path) -> str:
    parts = path.relative_to(ROOT).parts
    return parts[0] if len(parts) > 1 else path.stem


def _targets(node) -> list:
    """The packages (or shared files) of module_utils one import statement names, any form, at any depth."""
    if isinstance(node, ast.Import):
        modules = [alias.name for alias in node.names]
    elif node.module == PREFIX:  # from ...module_utils import errors, hashing
        modules = [f"{PREFIX}.{alias.name}" for alias in node.names]
    else:
        modules = [node.module or ""]
    return [module[len(PREFIX) + 1:].split(".")[0] for module in modules if module.startswith(PREFIX + ".")]


def import_sites() -> dict:
    """(package, imported package) -> the places ("path:line") of every import between two packages, from the source
    (no import executed; imports inside functions and ``try`` blocks count too)."""
    found = defaultdict(list)
    for path in sorted(ROOT.rglob("*.py")):
        package = _package(path)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in _targets(node):
                    if target != package:
                        found[(package, target)].append(f"{path.relative_to(ROOT.parents[1])}:{node.lineno}")
    return found


def package_imports() -> dict:
    """package -> the packages (and shared files) its files import."""
    found = defaultdict(set)
    for package, target in import_sites():
        found[package].add(target)
    return found


def test_every_package_has_its_place_in_the_order():
    packages = {_package(path) for path in ROOT.rglob("*.py")} - {"__init__"}
    assert len(ORDER) == len(set(ORDER)), "a package is named twice in ORDER"
    assert sorted(packages - set(ORDER)) == [], "packages without a place in ORDER (add each where its imports allow)"
    assert sorted(set(ORDER) - packages) == [], "ORDER names packages that do not exist"


def test_no_package_imports_one_above_it():
    place = {package: index for index, package in enumerate(ORDER)}
    upward = [f"{package} imports {target}, which is above it in ORDER ({', '.join(sites)})"
              for (package, target), sites in sorted(import_sites().items())
              if package in place and target in place and place[target] > place[package]]
    assert upward == [], "imports that go upward:\n" + "\n".join(upward)


PRIMITIVES = ("_observe", "_rewrite")
CAPABILITIES = ("_hash", "_audit", "_snapshot", "_remember", "_judge", "_migrate", "_rehearse")
# The records are the one capability others import: the judge reads them and the migration writes them.
SHARED_CAPABILITIES = ("_remember",)
MAX_FLOORS = 8


def floors(imports: dict) -> list:
    """The longest chain of imports between the packages and shared files, its importing end first (a chain that
    comes back, a cycle, counts as endless: it ends with its repeated package marked)."""
    chains = {}

    def chain(package, path):
        if package in path:
            return [f"{package} (again: a cycle)"] + ["..."] * MAX_FLOORS
        if package not in chains:
            below = [chain(target, path + (package,)) for target in sorted(imports.get(package, ()))]
            chains[package] = [package] + max(below, key=len, default=[])
        return chains[package]

    return max((chain(package, ()) for package in sorted(imports)), key=len, default=[])


def test_capabilities_stand_side_by_side():
    crossing = [f"{package} imports {target} ({', '.join(sites)}): take its result as data instead"
                for (package, target), sites in sorted(import_sites().items())
                if package in CAPABILITIES and target in CAPABILITIES and target not in SHARED_CAPABILITIES]
    assert crossing == [], "\n".join(crossing)


def test_the_module_shell_imports_no_primitive_and_no_capability():
    found = sorted(target for target in package_imports()["module"] if target in PRIMITIVES + CAPABILITIES)
    assert found == [], f"module.py imports {found}: a runner builds what it needs (e.g. _observe/apiserver_io.observer_for)"


def test_the_longest_import_chain_has_at_most_8_floors():
    longest = floors(package_imports())
    assert len(longest) <= MAX_FLOORS, f"{len(longest)} floors: {' -> '.join(longest)}"


def test_the_checks_catch_an_upward_import_and_a_long_chain():
    """The checks above on a made-up graph: an import from a capability into another, and a ninth floor."""
    imports = {"_rehearse": {"_migrate"}, "_migrate": {"_judge"}, "_judge": {"_remember"}, "_remember": {"_observe"},
               "_observe": {"rbac"}, "rbac": {"resources"}, "resources": {"_http"}, "_http": {"_validate"},
               "_validate": {"errors"}}
    assert len(floors(imports)) == 10
    assert floors({"a": {"b"}, "b": set()}) == ["a", "b"]
    assert len(floors({"a": {"b"}, "b": {"a"}})) > MAX_FLOORS
