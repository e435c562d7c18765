# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The capability packages form layers: no package imports one that imports it back, and the API layer
(``_http``) imports no capability at all. The table in docs/architecture.md draws the same picture."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "plugins" / "module_utils"
IMPORT = re.compile(r"^\s*from ansible_collections\.kubeupgrade\.storage\.plugins\.module_utils(?:\.(\w+))?[\w.]* import (.+)$")


def package_imports() -> dict:
    """package -> the packages (and shared files) its files import, from the source text (no import executed)."""
    found = defaultdict(set)
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT).parts
        package = parts[0] if len(parts) > 1 else path.stem
        for line in path.read_text(encoding="utf-8").splitlines():
            match = IMPORT.match(line)
            if not match:
                continue
            targets = [match.group(1)] if match.group(1) else re.findall(r"(\w+)(?: as \w+)?", match.group(2))
            found[package].update(t for t in targets if t and t != package)
    return found


def test_no_two_packages_import_each_other():
    imports = package_imports()
    cycles = sorted({tuple(sorted((a, b))) for a, deps in imports.items() for b in deps if a in imports.get(b, ())})
    assert cycles == [], f"packages that import each other: {cycles}"


def test_the_api_layer_imports_no_capability():
    capabilities = {p.name for p in ROOT.iterdir() if p.is_dir() and p.name.startswith("_") and p.name != "__pycache__"}
    assert capabilities - {"_http"}, capabilities
    assert package_imports()["_http"] & (capabilities - {"_http"}) == set()
