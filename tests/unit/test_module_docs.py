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

from ansible_collections.kubeupgrade.storage.plugins.module_utils import connection_args

ROOT = Path(__file__).resolve().parents[2]
MODULES = sorted((ROOT / "plugins" / "modules").glob("*.py"))
COLLECTION = "kubeupgrade.storage."


def _docs(path):
    found = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") in ("DOCUMENTATION", "EXAMPLES", "RETURN"):
            found[node.targets[0].id] = node.value.value
    return found


def _fragment(name):
    """A doc fragment's YAML by its ``extends_documentation_fragment`` name (``kubeupgrade.storage.etcd``, ``....connection.endpoints``)."""
    assert name.startswith(COLLECTION), f"{name}: only this collection's fragments are used"
    file_name, _dot, variable = name[len(COLLECTION):].partition(".")
    fragments = importlib.import_module(f"ansible_collections.kubeupgrade.storage.plugins.doc_fragments.{file_name}")
    return yaml.safe_load(getattr(fragments.ModuleDocFragment, (variable or "documentation").upper()))


def merged_documentation(text):
    """DOCUMENTATION with its fragments merged as ansible-doc merges them: a module's own keys of an option win."""
    doc = yaml.safe_load(text)
    for name in doc.get("extends_documentation_fragment") or []:
        fragment = _fragment(name)
        for section in ("options", "attributes"):
            merged = {key: dict(value) for key, value in (fragment.get(section) or {}).items()}
            for key, value in (doc.get(section) or {}).items():
                merged[key] = dict(merged.get(key) or {}, **value)
            if merged:
                doc[section] = merged
    return doc


@pytest.mark.parametrize("path", MODULES, ids=[p.stem for p in MODULES])
def test_module_docs_parse_and_document_every_option(path):
    docs = _docs(path)
    assert set(docs) == {"DOCUMENTATION", "EXAMPLES", "RETURN"}, f"{path.name}: missing {set(docs) ^ {'DOCUMENTATION', 'EXAMPLES', 'RETURN'}}"
    parsed = {name: yaml.safe_load(text) for name, text in docs.items()}
    options = merged_documentation(docs["DOCUMENTATION"]).get("options") or {}
    module = importlib.import_module(f"ansible_collections.kubeupgrade.storage.plugins.modules.{path.stem}")
    spec = module.argument_spec()
    assert set(spec) <= set(options), f"{path.name}: undocumented options {sorted(set(spec) - set(options))}"
    assert parsed["EXAMPLES"] is not None and parsed["RETURN"] is not None
    for name, option in spec.items():  # what ansible-test's validate-modules compares, minutes later
        doc = options[name]
        assert doc.get("description"), f"{path.name}: {name} has no description"
        assert doc.get("default") == option.get("default"), f"{path.name}: {name} default {doc.get('default')!r} != {option.get('default')!r}"
        assert doc.get("type", "str") == option.get("type", "str"), f"{path.name}: {name} type"
        assert bool(doc.get("required")) == bool(option.get("required")), f"{path.name}: {name} required"
        assert sorted(doc.get("aliases") or []) == sorted(option.get("aliases") or []), f"{path.name}: {name} aliases"
        if option.get("choices"):
            assert list(doc.get("choices") or []) == list(option["choices"]), f"{path.name}: {name} choices"


def test_the_etcd_group_is_every_module_documenting_the_etcd_options():
    """``module_defaults: group/kubeupgrade.storage.etcd`` sends the etcd connection options to every member, so each
    member takes all of them (as documented by the fragment), and each module documenting them is a member."""
    runtime = yaml.safe_load((ROOT / "meta" / "runtime.yml").read_text(encoding="utf-8"))
    members = set(runtime["action_groups"]["etcd"])
    shared = set(_fragment(COLLECTION + "etcd")["options"])
    assert shared == set(connection_args.ETCD_ARG_SPEC)
    extending = {path.stem for path in MODULES
                 if COLLECTION + "etcd" in (yaml.safe_load(_docs(path)["DOCUMENTATION"]).get("extends_documentation_fragment") or [])}
    assert members == extending == {"storage_version_audit", "storage_snapshot", "storage_rehearsal"}
    for name in members:
        spec = importlib.import_module(f"ansible_collections.kubeupgrade.storage.plugins.modules.{name}").argument_spec()
        assert shared <= set(spec), f"{name} does not take {sorted(shared - set(spec))}"
        for option in shared - {"etcd_endpoints"}:  # the audit alone requires etcd_endpoints
            assert spec[option] == connection_args.ETCD_ARG_SPEC[option], f"{name}: {option} differs from the shared spec"
