# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Per-resource results folded from the real 1.32.6 listing, judged against a target, and turned into records."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest
from audit_values import json_value, protobuf_value

from ansible_collections.kubeupgrade.storage.plugins.module_utils import audit_result, hashing
from ansible_collections.kubeupgrade.storage.plugins.module_utils._audit import model
from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd import envelope, keys

LISTING = Path(__file__).resolve().parents[4] / "fixtures" / "real-etcd-keys" / "keys-1.32.6.tsv"
WIDGET_V1 = hashing.storage_version_hash("example.com", "v1", "Widget")
WIDGET_V1ALPHA1 = hashing.storage_version_hash("example.com", "v1alpha1", "Widget")


def _listing():
    for line in LISTING.read_text(encoding="utf-8").splitlines():
        key, encoding, api_version, kind, _rev = line.split("\t")
        value = protobuf_value(api_version, kind) if encoding == "proto" else json_value(api_version, kind)
        yield key, value, api_version


def _audit(options, extra=()):
    aggregator = model.AuditAggregator(options)
    for key, value, *_unused in list(_listing()) + list(extra):
        aggregator.add(key, keys.classify_key(key), lambda v=value, k=key: envelope.decode_value(v, k.encode()))
    return aggregator.result()


def test_counts_per_resource_and_version_equal_the_listing():
    expected = collections.Counter()
    for key, _value, api_version in _listing():
        info = keys.classify_key(key)
        if info.kind == keys.OBJECT:
            expected[(info.resource_name, api_version)] += 1
    result = _audit(model.AuditOptions())
    found = collections.Counter({(name, v["api_version"]): v["count"]
                                 for name, entry in result["resources"].items() for v in entry["versions"]})
    assert found == expected
    assert result["keys_scanned"] == 269 and result["internal_keys"] == {
        "service IP range allocation": 1, "service node port range allocation": 1}
    assert result["objects"] == 267 and result["outside_layout"] == 0 and result["unreadable"] == 0


def test_widgets_stored_in_two_versions_with_their_hashes():
    widgets = _audit(model.AuditOptions())["resources"]["widgets.example.com"]
    assert [(v["api_version"], v["count"], v["hash"]) for v in widgets["versions"]] == [
        ("example.com/v1", 5, WIDGET_V1), ("example.com/v1alpha1", 50, WIDGET_V1ALPHA1)]
    assert widgets["encryption"] == {"identity": 55}
    assert widgets["judged"] is False and widgets["not_readable"] is None


@pytest.mark.parametrize("limit, names", [(3, 3), (0, 0), (-1, 50), (100, 50)])
def test_target_names_objects_it_cannot_decode(limit, names):
    result = _audit(model.AuditOptions(names_limit=limit, readable={"widgets.example.com": {"example.com/v1"}}))
    widgets = result["resources"]["widgets.example.com"]
    assert widgets["not_readable"] == 50 and len(widgets["not_readable_names"]) == names
    assert all(n.startswith("scen-a/") or "/" in n for n in widgets["not_readable_names"])
    assert result["resources"]["secrets"]["judged"] is False  # no readable versions given for it
    assert result["not_readable"] == 50
    assert "50 in a version the target cannot decode" in widgets["summary"]
    assert audit_result.truncated_from_audit(result) == (["widgets.example.com"] if names < 50 else [])


def test_resource_filter_skips_decoding():
    calls = []
    aggregator = model.AuditAggregator(model.AuditOptions(resources={"secrets"}))
    for key, value, _unused in _listing():
        aggregator.add(key, keys.classify_key(key), lambda v=value: calls.append(1) or envelope.decode_value(v))
    result = aggregator.result()
    assert list(result["resources"]) == ["secrets"] and len(calls) == result["resources"]["secrets"]["objects"]
    assert result["filtered_out"] == 267 - len(calls)


GARBAGE_AND_OUTSIDE = [
    ("/registry/secrets/scen-a/broken", b"\x00garbage"),
    ("/registry/secrets/scen-a/sealed", b"k8s:enc:kms:v2:vault:opaque"),
    ("/registry/frobs/x", protobuf_value("v1", "Frob")),
]


def test_unreadable_and_outside_keys_are_counted_and_named():
    result = _audit(model.AuditOptions(readable={"secrets": {"v1"}}), GARBAGE_AND_OUTSIDE)
    secrets = result["resources"]["secrets"]
    assert secrets["unreadable"] == 2 and secrets["unreadable_names"] == ["scen-a/broken", "scen-a/sealed"]
    assert secrets["encryption"]["kms:v2:vault"] == 1
    assert secrets["not_readable"] == 0  # unreadable is not "readable": reported on its own
    assert result["outside_layout"] == 1 and result["outside_layout_keys"] == ["/registry/frobs/x"]


def test_records_from_audit():
    result = _audit(model.AuditOptions(), GARBAGE_AND_OUTSIDE)
    current = {"widgets.example.com": WIDGET_V1, "configmaps": hashing.storage_version_hash("", "v1", "ConfigMap"),
               "secrets": hashing.storage_version_hash("", "v1", "Secret"), "cronjobs.batch": "h0FGgdZs9eA=",
               "events.events.k8s.io": hashing.storage_version_hash("", "v1", "Event")}
    records = audit_result.records_from_audit(result, current)
    assert records["widgets.example.com"] == [WIDGET_V1ALPHA1, WIDGET_V1]  # exactly what is stored
    assert records["configmaps"] == [current["configmaps"]]  # only the current version stored
    assert records["cronjobs.batch"] == ["h0FGgdZs9eA="]  # nothing stored
    assert records["secrets"] == [hashing.UNKNOWN, current["secrets"]]  # an unreadable value: fail closed
    assert records["events.events.k8s.io"] == [current["events.events.k8s.io"]]  # shares core events' storage


def test_records_when_only_an_old_version_is_stored():
    audit = {"resources": {"flowschemas.flowcontrol.apiserver.k8s.io": {"objects": 3, "hashes": ["old="], "unreadable": 0}}}
    assert audit_result.records_from_audit(audit, {"flowschemas.flowcontrol.apiserver.k8s.io": "new="}) == {
        "flowschemas.flowcontrol.apiserver.k8s.io": ["old="]}
    audit["resources"]["flowschemas.flowcontrol.apiserver.k8s.io"].update(hashes=[], unreadable=3)
    assert audit_result.records_from_audit(audit, {"flowschemas.flowcontrol.apiserver.k8s.io": "new="}) == {
        "flowschemas.flowcontrol.apiserver.k8s.io": [hashing.UNKNOWN]}


def test_objects_from_audit():
    result = _audit(model.AuditOptions(names_limit=-1, readable={"widgets.example.com": {"v1"}, "secrets": {"v1"}}))
    found = audit_result.objects_from_audit(result)
    assert list(found) == ["widgets.example.com"] and len(found["widgets.example.com"]) == 50


@pytest.mark.parametrize("by_scan", [False, True])
def test_memory_is_flat_in_the_number_of_keys(by_scan):
    """Only counters (one bucket per decoded form) and ``names_limit`` names are kept, however many keys pass."""
    aggregator = model.AuditAggregator(model.AuditOptions(names_limit=5, readable={"configmaps": {"v2"}}))
    value = protobuf_value("v1", "ConfigMap")
    pairs = [(f"/registry/configmaps/bulk/cm-{i}", value) for i in range(20000)]
    if by_scan:
        aggregator.fold((key.encode(), value) for key, value in pairs)
    else:
        for key, value in pairs:
            aggregator.add(key, keys.classify_key(key), envelope.decode_value(value), len(value))
    tally = aggregator.tallies["configmaps"]
    assert len(tally.buckets) <= 2 and len(tally.not_readable_names) == 5 and len(tally.versions["v1"][1]) == 5
    result = aggregator.result()["resources"]["configmaps"]
    assert result["not_readable"] == 20000 and result["objects"] == 20000 and result["bytes"] == 20000 * len(value)
