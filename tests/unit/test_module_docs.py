# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every module's DOCUMENTATION, EXAMPLES and RETURN is YAML that parses, with every option documented.

ansible-doc and ansible-test sanity find the same, but minutes later; a ": " inside a plain scalar is
the usual slip.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest
import yaml

MODULES = sorted((Path(__file__).resolve().parents[2] / "plugins" / "modules").glob("*.py"))


def _docs(path):
    found = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") in ("DOCUMENTATION", "EXAMPLES", "RETURN"):
            found[node.targets[0].id] = node.value.value
    return found


@pytest.mark.parametrize("path", MODULES, ids=[p.stem for p in MODULES])
def test_module_docs_parse_and_document_every_option(path):
    docs = _docs(path)
    assert set(docs) == {"DOCUMENTATION", "EXAMPLES", "RETURN"}, f"{path.name}: missing {set(docs) ^ {'DOCUMENTATION', 'EXAMPLES', 'RETURN'}}"
    parsed = {name: yaml.safe_load(text) for name, text in docs.items()}
    documented = set(parsed["DOCUMENTATION"].get("options") or {})
    module = importlib.import_module(f"ansible_collections.kubeupgrade.storage.plugins.modules.{path.stem}")
    spec = module.argument_spec()
    assert set(spec) <= documented, f"{path.name}: undocumented options {sorted(set(spec) - documented)}"
    options = parsed["DOCUMENTATION"].get("options") or {}
    for name, option in spec.items():  # what ansible-test's validate-modules compares, minutes later
        doc = options[name]
        assert doc.get("default") == option.get("default"), f"{path.name}: {name} default {doc.get('default')!r} != {option.get('default')!r}"
        assert doc.get("type", "str") == option.get("type", "str"), f"{path.name}: {name} type"
        if option.get("choices"):
            assert list(doc.get("choices") or []) == list(option["choices"]), f"{path.name}: {name} choices"
