# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The storage hash must reproduce every hash the real 1.32 apiservers reported, and map back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ansible_collections.kubeupgrade.storage.plugins.module_utils import hashing

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "real-apiserver-1.32"


def _resource_list_docs():
    """Every legacy APIResourceList recorded (discovery/, crd/, svm-sigs/)."""
    docs = []
    for sub in ("discovery", "crd", "svm-sigs"):
        for path in sorted((FIXTURES / sub).glob("*.json")):
            body = json.loads(path.read_text(encoding="utf-8")).get("body")
            if isinstance(body, dict) and body.get("kind") == "APIResourceList":
                docs.append((f"{sub}/{path.name}", body))
    return docs


def _recorded_hashes():
    rows = []
    for name, doc in _resource_list_docs():
        for item in doc["resources"]:
            if item.get("storageVersionHash"):
                rows.append(pytest.param(doc["groupVersion"], item, id=f"{name}:{item['name']}"))
    return rows


def test_fixtures_are_present():
    assert len(_recorded_hashes()) >= 60


@pytest.mark.parametrize("group,version,kind,expected", [
    ("", "v1", "Pod", "xPOwRZ+Yhw8="),
    ("apps", "v1", "Deployment", "8aSe+NMegvE="),
    ("flowcontrol.apiserver.k8s.io", "v1beta3", "FlowSchema", "9NnFrw7ZEmA="),
    ("flowcontrol.apiserver.k8s.io", "v1", "FlowSchema", "GJVAJZSZBIw="),
    ("apiextensions.k8s.io", "v1beta1", "CustomResourceDefinition", "jfWCUB31mvA="),
    ("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "M5uH+AlWATY="),
    ("storagemigration.k8s.io", "v1beta1", "StorageVersionMigration", "pCjmmKOkLy4="),
    ("cert-manager.io", "v1", "Certificate", "QwYBQGuMyKo="),
    (None, "v1", "Pod", "xPOwRZ+Yhw8="),
])
def test_hash_matches_facts_table(group, version, kind, expected):
    assert hashing.storage_version_hash(group, version, kind) == expected


def test_core_group_needs_the_leading_slash():
    # "v1/Pod" (no leading slash) is the classic mistake: it hashes to something else.
    assert hashing.storage_version_hash("", "v1", "Pod") != "ysOUHjFAK4o="


@pytest.mark.parametrize("version,kind", [("", "Pod"), ("v1", ""), (None, "Pod"), ("v1", None)])
def test_hash_rejects_missing_parts(version, kind):
    with pytest.raises(ValueError):
        hashing.storage_version_hash("", version, kind)


@pytest.mark.parametrize("group_version,item", _recorded_hashes())
def test_some_candidate_of_the_group_reproduces_every_recorded_hash(group_version, item):
    """Every recorded hash is some version of the resource's kind in its group, or core v1 (events)."""
    group = group_version.rpartition("/")[0]
    candidates = ["v1", "v1beta1", "v1beta2", "v1beta3", "v1alpha1", "v1alpha2", "v1alpha3", "v2", "v2beta1", "v2beta2"]
    found = hashing.reverse_lookup(item["storageVersionHash"], group, item["kind"], candidates)
    if found is None:
        found = hashing.reverse_lookup(item["storageVersionHash"], "", item["kind"], candidates)
    assert found is not None
    assert len(item["storageVersionHash"]) == 12 and item["storageVersionHash"].endswith("=")


@pytest.mark.parametrize("hash_value,candidates,expected", [
    ("xPOwRZ+Yhw8=", ["v1beta1", "v1"], "v1"),
    ("xPOwRZ+Yhw8=", ["v2"], None),
    ("Unknown", ["v1"], None),
    ("", ["v1"], None),
    (None, ["v1"], None),
    ("xPOwRZ+Yhw8=", [], None),
    ("xPOwRZ+Yhw8=", ["", "v1"], "v1"),
])
def test_reverse_lookup(hash_value, candidates, expected):
    assert hashing.reverse_lookup(hash_value, "", "Pod", candidates) == expected
