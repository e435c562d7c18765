# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Records set from an etcd audit: persisted := what etcd holds, annotated; validation; idempotence; no rollback."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from test_remember_storage_state_io import Store, client_for

from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.model import StorageStateRecord
from ansible_collections.kubeupgrade.storage.plugins.module_utils._remember import records
from ansible_collections.kubeupgrade.storage.plugins.module_utils._remember import storage_state_io as io
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ConfigurationError
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
    with pytest.raises(ConfigurationError) as info:
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


# --- idempotent bookkeeping: a later audit that finds what the record says does not rewrite it ----------------------

EARLIER = "2026-11-21T14:00:00Z"  # the audit that set the record
LATER = "2026-11-21T14:59:00Z"  # the next audited run's


def set_by_audit(persisted, heartbeat=NOW - timedelta(seconds=30), current=V1, observed=None, measured_at=EARLIER,
                 source=ENDPOINT + "/registry"):
    annotations = {records.OBSERVED_HASHES_ANNOTATION: records._observed_annotation(OBSERVED if observed is None else observed)}
    if measured_at:
        annotations.update({records.MEASURED_AT_ANNOTATION: measured_at, records.MEASURED_FROM_ANNOTATION: source})
    return StorageStateRecord(name="deployments.apps", group="apps", resource="deployments", persisted_hashes=persisted,
                              current_hash=current, last_heartbeat=records.format_time(heartbeat) if heartbeat else None,
                              annotations=annotations)


@pytest.mark.parametrize("existing, found, extra, action, fragment", [
    pytest.param(set_by_audit([V1BETA1, V1]), entry(V1BETA1, V1), {}, records.UNCHANGED, "found what the record says",
                 id="same-content-young-heartbeat"),
    pytest.param(set_by_audit([V1BETA1, V1]), entry(V1BETA1, V1), {"endpoint": "https://10.0.0.12:2379"}, records.UNCHANGED,
                 "found what the record says", id="same-content-other-etcd-member"),
    pytest.param(set_by_audit([V1BETA1, V1], heartbeat=NOW - timedelta(seconds=600)), entry(V1BETA1, V1), {}, records.UPDATE,
                 "older than 600s: measured again", id="same-content-heartbeat-due"),
    pytest.param(set_by_audit([V1BETA1, V1], heartbeat=None), entry(V1BETA1, V1), {}, records.UPDATE,
                 "lastHeartbeatTime missing", id="same-content-no-heartbeat"),
    pytest.param(set_by_audit([V1BETA1, V1]), entry(V1), {}, records.UPDATE, "stored as " + V1, id="old-version-gone"),
    pytest.param(set_by_audit([V1]), entry(V1BETA1, V1), {}, records.UPDATE, "stored as " + V1BETA1, id="old-version-back"),
    pytest.param(set_by_audit([V1], current=V1BETA1), entry(V1), {}, records.UPDATE, "measured in etcd", id="current-moved"),
    pytest.param(set_by_audit([V1], observed={"https://a": V1}), entry(V1), {}, records.UPDATE, "measured in etcd",
                 id="apiservers-changed"),
    pytest.param(set_by_audit([V1], measured_at=None), entry(V1), {}, records.UPDATE, "measured in etcd",
                 id="never-set-from-an-audit"),
])
def test_a_later_audit_rewrites_a_record_only_for_a_change_or_a_due_heartbeat(existing, found, extra, action, fragment):
    m = measured({"deployments.apps": found}, measured_at=LATER, **extra).for_resource("deployments.apps", V1, OBSERVED)
    result = records.plan_record_from_audit(existing, OBSERVED, m, NOW, 600)
    assert result.action == action and any(fragment in r for r in result.reasons), result.reasons
    if action == records.UNCHANGED:
        # Nothing moves forward without a write: the record keeps the heartbeat and the measurement that wrote it.
        assert result.status["lastHeartbeatTime"] == existing.last_heartbeat
        assert result.annotations[records.MEASURED_AT_ANNOTATION] == EARLIER
        assert result.annotations[records.MEASURED_FROM_ANNOTATION] == existing.annotations[records.MEASURED_FROM_ANNOTATION]
    else:
        assert result.status["lastHeartbeatTime"] == records.format_time(NOW)
        assert result.annotations[records.MEASURED_AT_ANNOTATION] == LATER
        assert result.status["persistedStorageVersionHashes"] == m.persisted


def writes(client, since=0):
    return [(method, path) for _e, method, path, _q, _b in client.log[since:] if method != "GET"]


def test_a_second_audited_run_writes_nothing_and_a_real_change_is_still_written():
    store = Store()
    client = client_for(store)
    observed = {"deployments.apps": OBSERVED}
    first = io.apply_records(client, observed, {}, io.ApplyOptions(600, False, NOW, measured({"deployments.apps": entry(V1BETA1, V1)})))
    assert [c.action for c in first] == ["created"] and len(writes(client)) == 2  # POST, then PUT /status

    # The next audited pre-flight, five minutes later: a new audit (new measured_at) that finds the same.
    mark = len(client.log)
    again = measured({"deployments.apps": entry(V1BETA1, V1)}, measured_at="2026-11-21T15:04:00Z")
    second = io.apply_records(client, observed, io.read_records(client), io.ApplyOptions(600, False, NOW + timedelta(minutes=5), again))
    assert [c.action for c in second] == ["unchanged"] and second[0].before == second[0].after
    assert writes(client, mark) == []
    # The same audit a second time: nothing either.
    mark = len(client.log)
    io.apply_records(client, observed, io.read_records(client), io.ApplyOptions(600, False, NOW + timedelta(minutes=6), again))
    assert writes(client, mark) == []

    # The old objects were migrated: the next audit finds only v1, and that is written (annotations, then status).
    mark = len(client.log)
    after = measured({"deployments.apps": entry(V1, V1)}, measured_at="2026-11-21T15:08:00Z")
    third = io.apply_records(client, observed, io.read_records(client), io.ApplyOptions(600, False, NOW + timedelta(minutes=9), after))
    assert [c.action for c in third] == ["updated"]
    path = io.STATES_PATH + "/deployments.apps"
    assert writes(client, mark) == [("PUT", path), ("PUT", path + "/status")]
    obj = store.objects["deployments.apps"]
    assert obj["status"]["persistedStorageVersionHashes"] == [V1]
    assert obj["status"]["lastHeartbeatTime"] == "2026-11-21T15:09:00Z"
    assert obj["metadata"]["annotations"][records.MEASURED_AT_ANNOTATION] == "2026-11-21T15:08:00Z"


def test_records_confirmed_by_each_run_stay_within_record_max_age_and_never_claim_a_later_look():
    """An audited run every 4 minutes for an hour (heartbeat_interval 600): the heartbeat is renewed only when it is
    600 s old, so after every run it is younger than 600 s (record_max_age >= heartbeat_interval keeps trusting a record
    that is looked at), it is always the time of a run that wrote it, and a record nobody refreshes still expires."""
    store = Store()
    client = client_for(store)
    observed = {"deployments.apps": OBSERVED}
    runs = [NOW + timedelta(minutes=4 * i) for i in range(16)]
    written = []
    for when in runs:
        audit_time = records.format_time(when - timedelta(seconds=20))
        options = io.ApplyOptions(600, False, when, measured({"deployments.apps": entry(V1)}, measured_at=audit_time))
        mark = len(client.log)
        change = io.apply_records(client, observed, io.read_records(client), options)[0]
        if writes(client, mark):
            written.append(when)
        rec = records.record_from_object(store.objects["deployments.apps"])
        heartbeat = records.parse_time(rec.last_heartbeat)
        assert heartbeat in written and heartbeat <= when
        assert (when - heartbeat).total_seconds() < 600 and not records.is_stale(rec, when, 600), change.reasons
        measured_at = records.parse_time(rec.annotations[records.MEASURED_AT_ANNOTATION])
        assert measured_at == heartbeat - timedelta(seconds=20)  # written together, from the audit of that run
    assert written == [runs[i] for i in (0, 3, 6, 9, 12, 15)]  # every third run, instead of every run
    rec = records.record_from_object(store.objects["deployments.apps"])
    assert records.is_stale(rec, written[-1] + timedelta(seconds=601), 600)  # nobody looked since: not trusted


def test_a_migration_ends_the_claim_of_the_measurement_and_the_next_audit_makes_its_own():
    """mark_migrated sets persisted to [current]: the record no longer says the audit measured that (the audit found the
    old version too), so the next audit that finds [current] writes its own measured-at once, then nothing."""
    store = Store()
    client = client_for(store)
    observed = {"deployments.apps": OBSERVED}
    io.apply_records(client, observed, {}, io.ApplyOptions(600, False, NOW, measured({"deployments.apps": entry(V1BETA1, V1)})))
    change = io.mark_migrated(client, "deployments.apps", V1, now=NOW + timedelta(minutes=1))
    assert change.action == "updated" and "measured_at" not in change.after and "measured-at" in change.reasons[-1]
    annotations = store.objects["deployments.apps"]["metadata"]["annotations"]
    assert records.MEASURED_AT_ANNOTATION not in annotations and records.MEASURED_FROM_ANNOTATION not in annotations
    assert records.OBSERVED_HASHES_ANNOTATION in annotations  # only the measurement's annotations go

    gate = measured({"deployments.apps": entry(V1, V1)}, measured_at="2026-11-21T15:02:00Z")
    options = io.ApplyOptions(600, False, NOW + timedelta(minutes=3), gate)
    mark = len(client.log)
    assert [c.action for c in io.apply_records(client, observed, io.read_records(client), options)] == ["updated"]
    path = io.STATES_PATH + "/deployments.apps"
    assert writes(client, mark) == [("PUT", path), ("PUT", path + "/status")]  # its annotations, then its heartbeat
    assert store.objects["deployments.apps"]["metadata"]["annotations"][records.MEASURED_AT_ANNOTATION] == "2026-11-21T15:02:00Z"
    mark = len(client.log)
    assert [c.action for c in io.apply_records(client, observed, io.read_records(client), options)] == ["unchanged"]
    assert writes(client, mark) == []
