# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The generated RBAC roles and the RBAC guide must be exactly what scripts/generate_rbac.py writes."""

from __future__ import annotations

from pathlib import Path

import pytest
import repo_scripts
import yaml

from ansible_collections.kubeupgrade.storage.plugins.module_utils import rbac
from ansible_collections.kubeupgrade.storage.plugins.module_utils.profiles import load_profiles

ROOT = Path(__file__).resolve().parents[2]


def _generator():
    return repo_scripts.load("generate_rbac")


GENERATOR = _generator()
FILES = GENERATOR.generated_files()


@pytest.mark.parametrize("path", sorted(FILES), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_shipped_file_is_what_the_generator_writes(path):
    assert path.read_text(encoding="utf-8") == FILES[path], \
        f"{path.relative_to(ROOT)} is stale: run python3 scripts/generate_rbac.py"


def _role(file, name, kind="ClusterRole"):
    items = yaml.safe_load((ROOT / "rbac" / file).read_text(encoding="utf-8"))["items"]
    return next(i for i in items if i["kind"] == kind and i["metadata"]["name"] == name)


def _granted(role, verb):
    return {f"{r}.{g}" if g else r for rule in role["rules"] if verb in rule["verbs"]
            for g in rule["apiGroups"] for r in rule["resources"]}


def test_the_migrate_role_lists_gets_and_writes_every_persisted_builtin_of_1_25_to_1_37_and_the_records():
    profiles = load_profiles()
    assert profiles.releases()[0] == "1.25" and profiles.releases()[-1] == "1.37"
    builtin = {name for release in profiles.releases() for name in profiles.get(release).resources}
    role = _role("migrate.yaml", rbac.MIGRATE_ROLE)
    for verb in ("list", "get", "update", "patch"):
        # events.events.k8s.io is its own rule (group events.k8s.io); the fixed rules add StorageVersionMigrations and
        # CRD status
        fixed = {"storageversionmigrations.migration.k8s.io", "customresourcedefinitions/status.apiextensions.k8s.io"}
        assert _granted(role, verb) - fixed == builtin | {"storagestates.migration.k8s.io"}, verb
    assert "secrets" in builtin and "clustercidrs.networking.k8s.io" in builtin  # removed in 1.31, still persisted before


def test_the_count_role_lists_every_persisted_builtin_but_secrets_and_nothing_else():
    builtin = set(rbac.builtin_resources(load_profiles()))
    role = _role("count-objects.yaml", rbac.COUNT_ROLE)
    assert _granted(role, "list") == builtin - {"secrets"}
    assert {verb for rule in role["rules"] for verb in rule["verbs"]} == {"list"}


def test_no_shipped_rule_has_a_wildcard_or_a_subresource_the_collection_does_not_request():
    touched = {"storagestates/status", "customresourcedefinitions/status"}  # records and CRD storedVersions pruning
    for path in sorted((ROOT / "rbac").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            for item in doc.get("items") or [doc]:
                for rule in item.get("rules") or []:
                    for key in ("verbs", "apiGroups", "resources"):
                        assert not any("*" in value for value in rule.get(key) or []), (path.name, rule)
                    assert {r for r in rule.get("resources") or [] if "/" in r} <= touched, (path.name, rule)


@pytest.mark.parametrize("text,comments", [
    ("rules:\n  # a\n  # b\n  - apiGroups: [x]\n    verbs: [get]\n  - apiGroups: [y]\n", ["a b", ""]),
    ("# head\nitems:\n  # item\n  - apiVersion: v1\n    rules:\n      # url\n      - nonResourceURLs: [/api]\n", ["url"]),
])
def test_each_rule_s_purpose_is_the_comment_block_above_it(text, comments):
    assert GENERATOR.rule_comments(text) == comments


def test_every_shipped_rule_says_what_it_is_for():
    for file, _kind, name, _namespace, rules in GENERATOR.all_roles():
        for rule, purpose in rules:
            assert purpose, f"rbac/{file}: a rule of {name} has no comment above it saying what it is for: {rule}"
