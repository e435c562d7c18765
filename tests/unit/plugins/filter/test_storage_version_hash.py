# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.kubeupgrade.storage.plugins.filter.storage_version_hash import FilterModule, storage_version_hash, storage_version_lookup

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "real-apiserver-1.32"


def test_both_filters_are_exported():
    assert set(FilterModule().filters()) == {"storage_version_hash", "storage_version_lookup"}


@pytest.mark.parametrize("value,version,kind,expected", [
    ("", "v1", "Pod", "xPOwRZ+Yhw8="),
    (None, "v1", "Pod", "xPOwRZ+Yhw8="),
    ("/v1/Pod", None, None, "xPOwRZ+Yhw8="),
    ("apps/v1/Deployment", None, None, "8aSe+NMegvE="),
    ("apps", "v1", "Deployment", "8aSe+NMegvE="),
    ({"group": "flowcontrol.apiserver.k8s.io", "version": "v1beta3", "kind": "FlowSchema"}, None, None, "9NnFrw7ZEmA="),
    ({"version": "v1", "kind": "Event"}, None, None, "r2yiGXH7wu8="),
])
def test_hash(value, version, kind, expected):
    assert storage_version_hash(value, version, kind) == expected


@pytest.mark.parametrize("value,version,kind", [("apps", None, None), ("apps", "v1", None), (42, "v1", "Pod")])
def test_hash_errors(value, version, kind):
    with pytest.raises(AnsibleFilterError):
        storage_version_hash(value, version, kind)


def _apps_v1():
    return json.loads((FIXTURES / "discovery/apis-apps_v1-legacy.json").read_text(encoding="utf-8"))["body"]["resources"]


@pytest.mark.parametrize("item", [r for r in _apps_v1() if r.get("storageVersionHash")], ids=lambda r: r["name"])
def test_lookup_recorded_apps_hashes(item):
    assert storage_version_lookup(item["storageVersionHash"], resource=f"{item['name']}.apps") == "v1"
    assert storage_version_lookup(item["storageVersionHash"], group="apps", kind=item["kind"], candidates=["v1beta1", "v1beta2", "v1"]) == "v1"


@pytest.mark.parametrize("hash_value,kwargs,expected", [
    ("9NnFrw7ZEmA=", {"resource": "flowschemas.flowcontrol.apiserver.k8s.io"}, "v1beta3"),
    ("9NnFrw7ZEmA=", {"resource": "flowschemas.flowcontrol.apiserver.k8s.io", "release": "1.25"}, None),
    ("gIwvi5rymmg=", {"group": "example.com", "kind": "Widget", "candidates": ["v1alpha1", "v1"]}, "v1"),
    ("Unknown", {"resource": "pods"}, None),
])
def test_lookup(hash_value, kwargs, expected):
    assert storage_version_lookup(hash_value, **kwargs) == expected


@pytest.mark.parametrize("kwargs,fragment", [
    ({"candidates": ["v1"]}, "needs kind"),
    ({"kind": "Pod"}, "needs candidates"),
    ({"resource": "gizmos.example.org"}, "no release profile has a resource"),
    ({"resource": "pods", "release": "1.99"}, "no release profile for Kubernetes 1.99"),
])
def test_lookup_errors(kwargs, fragment):
    with pytest.raises(AnsibleFilterError, match=fragment):
        storage_version_lookup("xPOwRZ+Yhw8=", **kwargs)
