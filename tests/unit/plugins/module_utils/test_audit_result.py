# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one parser of a storage_version_audit result: each malformed shape is one ConfigurationError naming the
option, the field and the next step; a real result parses."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from ansible_collections.kubeupgrade.storage.plugins.module_utils import audit_result as result
from ansible_collections.kubeupgrade.storage.plugins.module_utils._audit import model
from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd import envelope, keys
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ConfigurationError

NEXT_STEP = "pass the result of kubeupgrade.storage.storage_version_audit"


def entry(**changes):
    found = {"group": "apps", "resource": "deployments", "objects": 2, "hashes": ["8aSe+NMegvE="],
             "versions": [{"api_version": "apps/v1", "kind": "Deployment", "count": 2, "hash": "8aSe+NMegvE=", "names": []}],
             "unreadable": 0}
    found.update(changes)
    return found


def audit(**changes):
    found = {"changed": False, "keys_scanned": 9, "endpoint": "https://10.0.0.11:2379", "prefix": "/registry",
             "measured_at": "2026-11-21T14:00:00Z", "resources": {"deployments.apps": entry()}, "crds": {}, "crds_unread": []}
    found.update(changes)
    return found


def without(key):
    found = audit()
    del found[key]
    return found


# (case id, the value, the fields the message names)
MALFORMED = [
    ("string", "{{ audit }}", ["must be a dict, got str"]),
    ("list", [audit()], ["must be a dict, got list"]),
    ("none", None, ["must be a dict, got NoneType"]),
    ("failed", {"failed": True, "msg": "etcd unreachable"}, ["is a failed or skipped audit", "fix the storage_version_audit task"]),
    ("skipped", {"skipped": True}, ["is a failed or skipped audit"]),
    ("no-resources", without("resources"), ["not a storage_version_audit result", "resources must be a dict", "NoneType"]),
    ("resources-list", audit(resources=[1]), ["resources must be a dict", "got list"]),
    ("no-keys-scanned", without("keys_scanned"), ["keys_scanned must be a whole number", "None"]),
    ("keys-scanned-text", audit(keys_scanned="9"), ["keys_scanned must be a whole number", "'9'"]),
    ("keys-scanned-bool", audit(keys_scanned=True), ["keys_scanned must be a whole number", "True"]),
    ("no-endpoint", without("endpoint"), ["endpoint (the etcd it read) must be a URL", "None"]),
    ("endpoint-int", audit(endpoint=5), ["endpoint (the etcd it read) must be a URL", "5"]),
    ("prefix-list", audit(prefix=["/registry"]), ["prefix must be a string"]),
    ("no-measured-at", without("measured_at"), ["measured_at must be an RFC 3339 time", "None"]),
    ("measured-at-text", audit(measured_at="yesterday"), ["measured_at must be an RFC 3339 time", "'yesterday'"]),
    ("entry-int", audit(resources={"pods": 3}), ["resources[pods] is not an audit entry", "got int"]),
    ("entry-objects-missing", audit(resources={"pods": {"hashes": []}}), ["resources[pods].objects must be a whole number"]),
    ("entry-objects-text", audit(resources={"pods": entry(objects="3")}), ["resources[pods].objects must be a whole number", "'3'"]),
    ("entry-hashes-text", audit(resources={"pods": entry(hashes="abc")}), ["resources[pods].hashes must be a list"]),
    ("entry-hashes-ints", audit(resources={"pods": entry(hashes=[5])}), ["resources[pods].hashes must be a list"]),
    ("entry-versions-ints", audit(resources={"pods": entry(versions=[1])}), ["resources[pods].versions must be a list of dicts"]),
    ("entry-versions-dict", audit(resources={"pods": entry(versions={"v1": 1})}), ["resources[pods].versions must be a list"]),
    ("crds-list", audit(crds=[]), ["crds must be a dict", "got list"]),
    ("crds-unread-dict", audit(crds_unread={}), ["crds_unread must be a list", "got dict"]),
]


@pytest.mark.parametrize("value, needles", [(v, n) for _c, v, n in MALFORMED], ids=[c for c, _v, _n in MALFORMED])
@pytest.mark.parametrize("option", ["audit", "objects_from_audit"])
def test_each_malformed_shape_is_one_error_naming_option_field_and_next_step(value, needles, option):
    with pytest.raises(ConfigurationError) as info:
        result.parse(value, option=option)
    message = str(info.value)
    assert message.startswith(f"{option} "), message
    assert info.value.details == {"option": option}
    for needle in needles:
        assert needle in message, (needle, message)
    assert NEXT_STEP in message or "run it again and pass its result" in message, message


def test_a_result_the_audit_returns_parses():
    aggregator = model.AuditAggregator(model.AuditOptions(readable={"deployments.apps": {"v1"}}))
    key = "/registry/deployments/default/web"
    aggregator.add(key, keys.classify_key(key), envelope.Decoded(envelope.JSON, "apps/v1beta1", "Deployment"))
    found = aggregator.result()
    found.update(endpoint="https://10.0.0.11:2379", prefix="/registry", measured_at="2026-11-21T14:00:00Z", revision=7)
    parsed = result.parse(found)
    assert parsed.document is found and parsed.resources is found["resources"] and parsed.keys_scanned == 1
    assert parsed.measured_at == datetime(2026, 11, 21, 14, 0, tzinfo=timezone.utc)
    assert parsed.source == "https://10.0.0.11:2379/registry" and parsed.audited is None


@pytest.mark.parametrize("invocation, audited", [
    pytest.param({"module_args": {"resources": ["pods", "deployments.apps"]}}, {"pods", "deployments.apps"}, id="filtered"),
    pytest.param({"module_args": {"resources": []}}, None, id="not-filtered"),
    pytest.param({"module_args": "x"}, None, id="args-not-a-dict"),
    pytest.param("x", None, id="invocation-not-a-dict"),
])
def test_the_resources_filter_comes_from_the_invocation(invocation, audited):
    parsed = result.parse(audit(invocation=invocation))
    assert (set(parsed.audited) if parsed.audited is not None else None) == audited


@pytest.mark.parametrize("text, expected", [
    ("2026-11-21T14:00:00Z", datetime(2026, 11, 21, 14, 0, tzinfo=timezone.utc)),
    ("2026-11-21T15:00:00.123456789+01:00", datetime(2026, 11, 21, 14, 0, tzinfo=timezone.utc)),
    ("2026-11-21T14:00:00", datetime(2026, 11, 21, 14, 0, tzinfo=timezone.utc)),
    ("t", None),
    (5, None),
    ("", None),
])
def test_parse_time(text, expected):
    assert result.parse_time(text) == expected
