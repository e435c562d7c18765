# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Records set from an etcd audit: persisted := what etcd holds, annotated; validation; idempotence; no rollback."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from test_storage_state_io import Store, client_for

from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.model import StorageStateRecord
from ansible_collections.kubeupgrade.storage.plugins.module_utils._remember import records
from ansible_collections.kubeupgrade.storage.plugins.module_utils._remember import storage_state_io as io
from ansible_collections.kubeupgrade.storage.plugins.module_utils.hashing import UNKNOWN, storage_version_hash

NOW = datetime(2026, 11, 21, 15, 0, tzinfo=timezone.utc)
V1 = storage_version_hash("apps", "v1", "Deployment")
V1BETA1 = storage_version_hash("apps", "v1beta1", "Deployment")
ENDPOINT = "https://10.0.0.11:2379"
OBSERVED = {"https://a": V1, "https://b": V1}


def entry(*hashes, objects=None, unreadable=0):
    return {"objects": len(hashes) if objects is None else objects, "hashes": sorted(set(hashes)), "unreadable": unreadable}


def audit(resources, **extra):
    result = {"changed": False, "keys_scanned": 100, "endpoint": ENDPOINT, "prefix": "/registry",
              "measured_at": "2026-11-21T14:00:00Z", "resources": resources, "outside_layout": 0, "filtered_out": 0}
    result.update(extra)
    return result


def measured(resources, **extra):
    return records.measurement_from_audit(audit(resources, **extra))


@pytest.mark.parametrize("found, observed, expected", [
    pytest.param(None, OBSERVED, [V1], id="nothing-stored-is-current"),
    pytest.param(entry(V1, V1), OBSERVED, [V1], id="only-current"),
    pytest.param(entry(V1BETA1, V1), OBSERVED, [V1BETA1, V1], id="old-and-current"),
    pytest.param(entry(V1BETA1), OBSERVED, [V1BETA1], id="only-old-exactly-what-is-found"),
    pytest.param(entry(V1, unreadable=1, objects=2), OBSERVED, [UNKNOWN, V1], id="unreadable-keeps-unknown"),
    pytest.param(entry(V1), {"https://a": V1, "https://b": V1BETA1}, [V1, V1BETA1], id="disagreeing-apiserver-hash-kept"),
])
def test_persisted_is_what_etcd_holds(found, observed, expected):
    resources = {"deployments.apps": found} if found else {"pods": entry("x")}
    got = measured(resources).for_resource("deployments.apps", V1, observed)
    assert got.persisted == expected
    assert got.measured_at == "2026-11-21T14:00:00Z" and got.source == ENDPOINT + "/registry"


@pytest.mark.parametrize("extra, measures", [
    pytest.param({}, True, id="whole-prefix"),
    pytest.param({"outside_layout": 3}, False, id="keys-outside-layout-may-be-it"),
    pytest.param({"filtered_out": 5}, False, id="filtered-without-invocation"),
    pytest.param({"filtered_out": 5, "invocation": {"module_args": {"resources": ["deployments.apps"]}}}, True,
                 id="filtered-to-it"),
    pytest.param({"filtered_out": 5, "invocation": {"module_args": {"resources": ["pods"]}}}, False,
                 id="filtered-to-others"),
])
def test_an_absent_resource_is_measured_only_when_the_audit_covers_it(extra, measures):
    got = measured({"pods": entry("x")}, **extra).for_resource("deployments.apps", V1, OBSERVED)
    assert (got is not None) == measures
    if measures:
        assert got.persisted == [V1]


def test_events_events_k8s_io_shares_the_core_events_keys():
    core = storage_version_hash("", "v1", "Event")
    got = measured({"events": entry(core)}).for_resource("events.events.k8s.io", core, {"a": core})
    assert got.persisted == [core]


def test_no_current_hash_is_not_measured():
    assert measured({"deployments.apps": entry(V1)}).for_resource("deployments.apps", None, {}) is None


@pytest.mark.parametrize("value, fragment", [
    pytest.param("audit", "must be a dict", id="string"),
    pytest.param([], "must be a dict", id="list"),
    pytest.param({"failed": True, "msg": "x"}, "failed or skipped", id="failed-audit"),
    pytest.param({"skipped": True}, "failed or skipped", id="skipped-audit"),
    pytest.param({"resources": {}}, "not a storage_version_audit result", id="no-keys-scanned"),
    pytest.param(audit({"pods": 3}), "resources[pods] is not an audit entry", id="bad-entry"),
    pytest.param(audit({"pods": {"objects": "3"}}), "resources[pods]", id="objects-not-int"),
    pytest.param(audit({}, measured_at="yesterday"), "measured_at", id="bad-time"),
    pytest.param({**audit({}), "resources": [1]}, "not a storage_version_audit result", id="resources-list"),
])
def test_bad_audit_values_are_named(value, fragment):
    with pytest.raises(ValueError) as info:
        records.measurement_from_audit(value)
    assert fragment in str(info.value)


def record(persisted, current=V1, heartbeat=NOW - timedelta(seconds=30), annotations=None):
    return StorageStateRecord(name="deployments.apps", group="apps", resource="deployments", persisted_hashes=persisted,
                              current_hash=current, last_heartbeat=records.format_time(heartbeat),
                              annotations=annotations or {})


def plan(existing, resources, **extra):
    m = measured(resources, **extra).for_resource("deployments.apps", V1, OBSERVED)
    return records.plan_record_from_audit(existing, OBSERVED, m, NOW, 600)


def test_create_update_unchanged_from_an_audit():
    created = plan(None, {"deployments.apps": entry(V1BETA1, V1)})
    assert created.action == records.CREATE
    assert created.status["persistedStorageVersionHashes"] == [V1BETA1, V1]
    assert created.annotations[records.MEASURED_AT_ANNOTATION] == "2026-11-21T14:00:00Z"
    assert created.annotations[records.MEASURED_FROM_ANNOTATION] == ENDPOINT + "/registry"
    updated = plan(record([UNKNOWN, V1]), {})
    assert updated.action == records.UPDATE and updated.status["persistedStorageVersionHashes"] == [V1]
    again = record([V1], annotations=updated.annotations)
    assert plan(again, {}).action == records.UNCHANGED


def test_an_older_audit_does_not_roll_back_a_newer_measurement():
    later = {records.MEASURED_AT_ANNOTATION: "2026-11-21T14:30:00Z"}
    result = plan(record([V1], annotations=later), {"deployments.apps": entry(V1BETA1)})
    assert V1BETA1 not in result.status["persistedStorageVersionHashes"]
    assert any("measured later" in r for r in result.reasons)


def test_io_writes_then_a_second_run_with_the_same_audit_changes_nothing():
    store = Store()
    client = client_for(store)
    options = io.ApplyOptions(600, False, NOW, measured({"deployments.apps": entry(V1BETA1, V1)}))
    first = io.apply_records(client, {"deployments.apps": OBSERVED}, {}, options)
    assert [c.action for c in first] == ["created"]
    obj = store.objects["deployments.apps"]
    assert obj["status"]["persistedStorageVersionHashes"] == [V1BETA1, V1]
    assert obj["metadata"]["annotations"][records.MEASURED_AT_ANNOTATION] == "2026-11-21T14:00:00Z"
    assert first[0].after["measured_from"] == ENDPOINT + "/registry"
    writes = len(client.log)
    second = io.apply_records(client, {"deployments.apps": OBSERVED}, io.read_records(client), options)
    assert [c.action for c in second] == ["unchanged"]
    assert [m for _e, m, _p, _q, _b in client.log[writes:] if m != "GET"] == []


def test_check_mode_plans_from_the_audit_and_writes_nothing():
    store = Store()
    client = client_for(store)
    options = io.ApplyOptions(600, True, NOW, measured({}))
    changes = io.apply_records(client, {"deployments.apps": OBSERVED}, {}, options)
    assert changes[0].action == "created" and changes[0].after["status"]["persistedStorageVersionHashes"] == [V1]
    assert store.objects == {} and client.log == []
