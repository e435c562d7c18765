# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""StorageState bookkeeping, checked against what the real trigger wrote (svm-sigs/) and the HA case walkthrough of the KEP
"Automated Storage Version Migration with Storage Version Hash"."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe import crds
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.model import StorageStateRecord
from ansible_collections.kubeupgrade.storage.plugins.module_utils._remember import records
from ansible_collections.kubeupgrade.storage.plugins.module_utils.hashing import UNKNOWN, storage_version_hash

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "real-apiserver-1.32"
NOW = datetime(2026, 11, 21, 15, 0, 0, tzinfo=timezone.utc)
V1 = storage_version_hash("batch", "v1", "CronJob")
V2 = storage_version_hash("batch", "v2", "CronJob")
A, B, C = "https://10.0.0.11:6443", "https://10.0.0.12:6443", "https://10.0.0.13:6443"


def recording(relative):
    return json.loads((FIXTURES / relative).read_text(encoding="utf-8"))


def record(persisted, current, heartbeat=NOW - timedelta(seconds=30), observed=None):
    annotations = {}
    if observed is not None:
        annotations[records.OBSERVED_HASHES_ANNOTATION] = records._observed_annotation(observed)
    return StorageStateRecord(name="cronjobs.batch", group="batch", resource="cronjobs", persisted_hashes=list(persisted),
                              current_hash=current, last_heartbeat=records.format_time(heartbeat) if heartbeat else None,
                              annotations=annotations)


@pytest.mark.parametrize("relative", [
    "svm-sigs/08-get-storagestate-configmaps-migrated.json",
    "svm-sigs/08-get-storagestate-deployments.apps-migrated.json",
    "svm-sigs/08-get-storagestate-widgets.example.com-migrated.json",
    "svm-sigs/15-get-storagestate-widgets-after-second-migration.json",
])
def test_record_from_real_objects_and_back(relative):
    obj = recording(relative)["body"]
    rec = records.record_from_object(obj)
    assert rec.name == obj["metadata"]["name"]
    assert (rec.group, rec.resource) == (obj["spec"]["resource"].get("group", ""), obj["spec"]["resource"]["resource"])
    assert rec.persisted_hashes == obj["status"]["persistedStorageVersionHashes"]
    assert rec.current_hash == obj["status"]["currentStorageVersionHash"]
    rebuilt = records.storage_state_object(rec.name, obj["status"])
    for key in ("apiVersion", "kind", "spec", "status"):
        assert rebuilt[key] == obj[key]
    assert rebuilt["metadata"]["name"] == obj["metadata"]["name"]


def test_every_record_the_trigger_wrote_is_read():
    items = recording("svm-sigs/07-list-storagestates-after-trigger-initial-cycle.json")["body"]["items"]
    parsed = [records.record_from_object(item) for item in items]
    assert {r.name for r in parsed} == {item["metadata"]["name"] for item in items}
    assert "configmaps" in {r.name for r in parsed}  # core: no group suffix
    assert all(r.persisted_hashes and r.last_heartbeat for r in parsed)


def test_storage_change_plan_matches_the_trigger():
    """svm-sigs/13: after widgets switched to v2 the trigger wrote [old, new] with current = new."""
    before = records.record_from_object(recording("svm-sigs/08-get-storagestate-widgets.example.com-migrated.json")["body"])
    new_hash = recording("svm-sigs/12-discovery-example.com-v2.json")["body"]["resources"][0]["storageVersionHash"]
    plan = records.plan_record(before, {A: new_hash}, NOW, 600)
    trigger = recording("svm-sigs/13-watch-storagestate-widgets-after-storage-change.json")["events"][0]["object"]["status"]
    assert plan.action == records.UPDATE
    assert plan.status["persistedStorageVersionHashes"] == trigger["persistedStorageVersionHashes"]
    assert plan.status["currentStorageVersionHash"] == trigger["currentStorageVersionHash"]
    after = recording("svm-sigs/15-get-storagestate-widgets-after-second-migration.json")["body"]["status"]
    migrated = records.migrated_status(new_hash, NOW)
    assert migrated["persistedStorageVersionHashes"] == after["persistedStorageVersionHashes"]
    assert migrated["lastHeartbeatTime"] == "2026-11-21T15:00:00Z"


@pytest.mark.parametrize("observed,persisted,current", [
    ({A: V1, B: V1, C: V1}, [UNKNOWN, V1], V1),
    ({A: V2, B: V1, C: V1}, [UNKNOWN, V2, V1], V1),
    ({A: V1, B: V2}, [UNKNOWN, V1, V2], V1),
    ({}, [UNKNOWN], ""),
    ({A: "", B: V1}, [UNKNOWN, V1], V1),
])
def test_create(observed, persisted, current):
    plan = records.plan_record(None, observed, NOW, 600)
    assert plan.action == records.CREATE and plan.changed
    assert plan.status == {"persistedStorageVersionHashes": persisted, "currentStorageVersionHash": current,
                           "lastHeartbeatTime": "2026-11-21T15:00:00Z"}
    assert json.loads(plan.annotations[records.OBSERVED_HASHES_ANNOTATION]) == {k: v for k, v in observed.items() if v}


# The KEP's HA case walkthrough: three apiservers go v1 -> v2, one rolls back, all re-upgrade, migrate.
def test_rolling_upgrade_walkthrough():
    steps = [
        ({A: V1, B: V1, C: V1}, [UNKNOWN, V1], V1),
        ({A: V2, B: V1, C: V1}, [UNKNOWN, V1, V2], V1),  # keep current while someone still reports it
        ({A: V2, B: V2, C: V1}, [UNKNOWN, V1, V2], V1),
        ({A: V2, B: V2, C: V2}, [UNKNOWN, V1, V2], V2),
        ({A: V1, B: V2, C: V2}, [UNKNOWN, V1, V2], V2),  # A rolled back
        ({A: V2, B: V2, C: V2}, [UNKNOWN, V1, V2], V2),
    ]
    existing = None
    for observed, persisted, current in steps:
        plan = records.plan_record(existing, observed, NOW, 600)
        assert plan.status["persistedStorageVersionHashes"] == persisted
        assert plan.status["currentStorageVersionHash"] == current
        existing = records.record_from_object(records.storage_state_object("cronjobs.batch", plan.status, plan.annotations))
    migrated = records.migrated_status(V2, NOW)
    assert migrated["persistedStorageVersionHashes"] == [V2]
    done = records.record_from_object(records.storage_state_object("cronjobs.batch", migrated, existing.annotations))
    assert records.plan_record(done, {A: V2, B: V2, C: V2}, NOW, 600).action == records.UNCHANGED


def test_disagreement_without_the_recorded_current_picks_the_majority():
    plan = records.plan_record(record([V1], V1), {A: V2, B: V2, C: "X" * 11 + "="}, NOW, 600)
    assert plan.status["currentStorageVersionHash"] == V2


@pytest.mark.parametrize("existing,observed,action,reason_fragment", [
    (record([V1], V1, observed={A: V1, B: V1}), {A: V1, B: V1}, records.UNCHANGED, None),
    (record([V1], V1, heartbeat=NOW - timedelta(seconds=601), observed={A: V1}), {A: V1}, records.UPDATE, "older than 600s"),
    (record([V1], V1, heartbeat=None, observed={A: V1}), {A: V1}, records.UPDATE, "missing"),
    (record([V1], V1, observed={A: V1}), {A: V1, B: V1}, records.UPDATE, "per apiserver changed"),
    (record([V1], V1, observed={A: V1}), {A: V2}, records.UPDATE, "appended"),
    (record([], V1, observed={A: V1}), {A: V1}, records.UPDATE, "reset to Unknown"),
    (record([V1], V1), {A: V1}, records.UPDATE, "per apiserver changed"),  # a record written by the real trigger
])
def test_update_or_unchanged(existing, observed, action, reason_fragment):
    plan = records.plan_record(existing, observed, NOW, 600)
    assert plan.action == action
    if reason_fragment:
        assert any(reason_fragment in reason for reason in plan.reasons)
        assert plan.status["lastHeartbeatTime"] == "2026-11-21T15:00:00Z"
    else:
        assert plan.reasons == [] and plan.status["lastHeartbeatTime"] == existing.last_heartbeat


def test_immediate_rerun_is_unchanged():
    first = records.plan_record(None, {A: V1, B: V1}, NOW, 600)
    stored = records.record_from_object(records.storage_state_object("cronjobs.batch", first.status, first.annotations))
    again = records.plan_record(stored, {B: V1, A: V1}, NOW + timedelta(seconds=5), 600)
    assert again.action == records.UNCHANGED and not again.changed
    assert again.status == first.status


def test_unknown_is_never_dropped_by_observation():
    plan = records.plan_record(record([UNKNOWN, V1], V1), {A: V2}, NOW, 600)
    assert plan.status["persistedStorageVersionHashes"] == [UNKNOWN, V1, V2]


@pytest.mark.parametrize("heartbeat,max_age,stale", [
    ("2026-11-21T14:55:00Z", 600, False),
    ("2026-11-21T14:40:00Z", 600, True),
    ("2026-11-21T14:55:00.123456Z", 600, False),
    ("2026-11-21T14:55:00+00:00", 600, False),
    ("garbage", 600, True),
    (None, 600, True),
    ("2020-01-01T00:00:00Z", None, False),
])
def test_is_stale(heartbeat, max_age, stale):
    rec = StorageStateRecord(name="pods", group="", resource="pods", last_heartbeat=heartbeat)
    assert records.is_stale(rec, NOW, max_age) is stale


def test_missing_record_is_stale():
    assert records.is_stale(None, NOW, None)


def test_naive_now_is_taken_as_utc():
    assert records.format_time(datetime(2026, 1, 2, 3, 4, 5)) == "2026-01-02T03:04:05Z"
    assert not records.is_stale(StorageStateRecord("pods", "", "pods", last_heartbeat="2026-01-02T03:00:00Z"), datetime(2026, 1, 2, 3, 4, 5), 600)


def test_storage_state_crd_is_a_valid_crd_matching_the_recorded_discovery():
    crd = crds.crd_from_object(records.STORAGE_STATE_CRD)
    assert (crd.name, crd.scope, crd.storage_version) == ("storagestates.migration.k8s.io", "Cluster", "v1alpha1")
    served = recording("svm-sigs/00-discovery-migration.k8s.io-v1alpha1.json")["body"]["resources"]
    recorded = next(r for r in served if r["name"] == "storagestates")
    assert recorded["storageVersionHash"] == storage_version_hash(crd.group, crd.storage_version, crd.kind)
    assert "storagestates/status" in {r["name"] for r in served}
    assert records.STORAGE_STATE_CRD["spec"]["versions"][0]["subresources"] == {"status": {}}
    status = records.STORAGE_STATE_CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert set(status) == {"currentStorageVersionHash", "lastHeartbeatTime", "persistedStorageVersionHashes"}


def test_record_from_object_without_spec_uses_the_name():
    rec = records.record_from_object({"metadata": {"name": "deployments.apps"}, "status": {}})
    assert (rec.group, rec.resource, rec.persisted_hashes, rec.current_hash) == ("apps", "deployments", [], None)
