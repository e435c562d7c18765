# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The docs name only paths that exist, and nothing the collection ships cites internal material.

Shipped means what ``ansible-galaxy collection build`` puts in the tarball: plugins, roles,
playbooks, docs, README and meta. Sources are cited publicly (KEP numbers, Kubernetes source paths,
releases), never by an internal seed, fact sheet or fixture directory.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TOP_LEVEL = ("plugins", "roles", "playbooks", "docs", "tests", "scripts", "benchmarks", "changelogs", "meta")
# `plugins/module_utils/x.py`, [text](docs/y.md), plugins/modules/ in prose: a path from the repository root.
PATH_RE = re.compile(r"(?<![\w./-])((?:" + "|".join(TOP_LEVEL) + r")/[\w./*-]*[\w*/])")
LINK_RE = re.compile(r"\]\((?!https?:|#|mailto:)([^)#\s]+)")
INTERNAL_RE = re.compile(r"seed 0\d*|facts §|\.\./shared|/work/shared|real-apiserver-1\.32|real-etcd-keys")
SHIPPED = ("plugins", "roles", "playbooks", "docs", "meta", "README.md", "galaxy.yml")
KNOWN_CITATIONS: dict = {}


def _docs():
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def _generated(path: str) -> bool:
    """A directory the scripts create and git ignores (``tests/output/``): named by the docs, absent from a clone."""
    ignored = {line.strip().strip("/") for line in (REPO / ".gitignore").read_text(encoding="utf-8").splitlines()
               if line.startswith("/") and line.strip().endswith("/")}
    return path.rstrip("/") in ignored


def _exists(path: str, base: Path) -> bool:
    if _generated(path):
        return True
    for root in (REPO, base):
        candidate = root / path.rstrip("/")
        if "*" in path and list(root.glob(path.rstrip("/"))):
            return True
        if candidate.exists():
            return True
    return False


@pytest.mark.parametrize("doc", _docs(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_path_a_doc_names_exists(doc):
    text = doc.read_text(encoding="utf-8")
    named = set(PATH_RE.findall(text)) | {m for m in LINK_RE.findall(text) if not m.startswith("<")}
    missing = sorted(p for p in named if not _exists(p, doc.parent))
    assert not missing, f"{doc.relative_to(REPO)} names paths that do not exist: {missing}"


def _shipped_files():
    for name in SHIPPED:
        root = REPO / name
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for path in files:
            if "__pycache__" not in path.parts and path.suffix not in (".pyc",):
                yield path


def test_no_shipped_file_cites_internal_material():
    found = {}
    for path in _shipped_files():
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError:
            continue
        hits = [f"{path.relative_to(REPO)}:{n}: {m.group(0)}" for n, line in enumerate(lines, 1) for m in [INTERNAL_RE.search(line)] if m]
        if hits:
            found[str(path.relative_to(REPO))] = hits
    new = [hit for name, hits in found.items() if len(hits) != KNOWN_CITATIONS.get(name) for hit in hits]
    stale = [name for name in KNOWN_CITATIONS if name not in found]
    assert not new, "shipped files cite internal material (cite the KEP, source path or release):\n" + "\n".join(new)
    assert not stale, f"fixed, so remove from KNOWN_CITATIONS: {stale}"


def test_the_checks_see_paths_and_citations():
    """Guard the guards: the patterns match what they are meant to."""
    assert PATH_RE.findall("see `plugins/module_utils/_http/client.py` and roles/migrate/ and docs/x.md.") == [
        "plugins/module_utils/_http/client.py", "roles/migrate/", "docs/x.md"]
    assert INTERNAL_RE.search("as seed 000 showed") and INTERNAL_RE.search("(facts §6)")
    assert not INTERNAL_RE.search("KEP-2339, staging/src/k8s.io/apiserver")
