# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Migration planning against recorded documents of real migrations (kube-apiserver 1.32)."""

import json
import os

import pytest

from ansible_collections.kubeupgrade.storage.plugins.module_utils._migrate import plan, progress
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.crds import crd_from_object
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.model import StorageStateRecord
from ansible_collections.kubeupgrade.storage.plugins.module_utils._rewrite import stored_versions
from ansible_collections.kubeupgrade.storage.plugins.module_utils.resources import GroupResource

RECORDED = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "real-apiserver-1.32")


def recorded(path):
    with open(os.path.join(RECORDED, path), encoding="utf-8") as handle:
        return json.load(handle)


def recorded_body(path):
    return recorded(path)["body"]


@pytest.mark.parametrize("path,phase,reason,message", [
    ("svm-intree/01-create-svm-widgets-201.json", plan.PENDING, "", ""),
    ("svm-intree/02-svm-widgets-get-02.json", plan.SUCCEEDED, "StorageVersionMigrationSucceeded", ""),
    ("svm-intree/04-svm-secrets-get-02.json", plan.SUCCEEDED, "StorageVersionMigrationSucceeded", ""),
    ("svm-intree/10-svm-nonexistent-get-02-still-pending-20min.json", plan.PENDING, "", ""),
    ("svm-intree/16-svm-widgets-blocked-get-01.json", plan.OBSERVED, "", ""),
    ("svm-intree/16-svm-widgets-blocked-get-02.json", plan.FAILED, "StorageVersionMigrationFailed",
     "migration encountered unhandled error"),
    ("svm-intree/17-svm-events-get-01.json", plan.FAILED, "StorageVersionMigrationFailed", "resource not found"),
    ("svm-intree/20-svm-configmaps-with-corrupt-get-03-stuck.json", plan.OBSERVED, "", ""),
    ("svm-intree/21-svm-configmaps-after-repair-get-02-succeeded.json", plan.SUCCEEDED,
     "StorageVersionMigrationSucceeded", ""),
    ("svm-sigs/02-migration-widgets-get-01.json", plan.PENDING, "", ""),
    ("svm-sigs/02-migration-widgets-get-02.json", plan.SUCCEEDED, "", ""),
    ("svm-sigs/05-migration-nonexistent-get-02.json", plan.FAILED, "",
     "failed to list resources: the server could not find the requested resource"),
    ("svm-sigs/18-migration-configmaps-with-corrupt-get-03-stuck-running.json", plan.RUNNING, "", ""),
    ("svm-sigs/19-migration-widgets-with-corrupt-after-repair-get-03.json", plan.SUCCEEDED, "", ""),
])
def test_read_status_of_recorded_migrations(path, phase, reason, message):
    status = plan.read_status(recorded_body(path))
    assert (status.phase, status.reason, status.message) == (phase, reason, message)


def _watch_objects(path):
    capture = recorded(path)
    events = capture.get("events") or []
    return [e.get("object") or {} for e in events if isinstance(e, dict)]


@pytest.mark.parametrize("path,final", [
    ("svm-intree/05-watch-svm-secrets-all-transitions.json", plan.SUCCEEDED),
    ("svm-sigs/03-watch-migration-widgets.json", plan.SUCCEEDED),
    ("svm-sigs/06-watch-migration-nonexistent.json", plan.FAILED),
])
def test_watched_transitions_end_in_the_outcome_and_each_step_changes_the_fingerprint(path, final):
    objects = _watch_objects(path)
    assert objects, "recording has watch events"
    statuses = [plan.read_status(o) for o in objects]
    assert statuses[-1].phase == final
    assert statuses[0].phase in (plan.PENDING, plan.OBSERVED)
    if len(statuses) > 2:
        assert plan.RUNNING in [s.phase for s in statuses]


@pytest.mark.parametrize("conditions,phase", [
    # v1beta1/v1 metav1.Condition shapes (observedGeneration, lastTransitionTime)
    ([{"type": "Running", "status": "True", "reason": "StorageVersionMigrationInProgress",
       "lastTransitionTime": "t", "observedGeneration": 1, "message": ""}], plan.RUNNING),
    ([{"type": "Running", "status": "False", "reason": "StorageVersionMigrationInProgress", "lastTransitionTime": "t"},
      {"type": "Succeeded", "status": "True", "reason": "StorageVersionMigrationSucceeded", "lastTransitionTime": "t"}],
     plan.SUCCEEDED),
    ([{"type": "Failed", "status": "True", "reason": "StorageVersionMigrationFailed",
       "message": "migration encountered unhandled error: x"}], plan.FAILED),
    ([{"type": "Succeeded", "status": "False"}], plan.PENDING),
])
def test_read_status_metav1_conditions(conditions, phase):
    assert plan.read_status({"status": {"conditions": conditions}}).phase == phase


@pytest.mark.parametrize("served,requested,backend,api_version", [
    # auto is the client-side migrator whatever the cluster serves: it is the fastest everywhere
    ({"storagemigration.k8s.io": ["v1alpha1", "v1beta1", "v1"], "migration.k8s.io": ["v1alpha1"]}, "auto", "client",
     None),
    ({"migration.k8s.io": ["v1alpha1"]}, "auto", "client", None),
    ({}, "auto", "client", None),
    ({"storagemigration.k8s.io": ["v1alpha1", "v1beta1", "v1"], "migration.k8s.io": ["v1alpha1"]}, "intree", "intree",
     "storagemigration.k8s.io/v1"),
    ({"storagemigration.k8s.io": ["v1alpha1", "v1beta1"]}, "intree", "intree", "storagemigration.k8s.io/v1beta1"),
    ({"storagemigration.k8s.io": ["v1alpha1"]}, "intree", "intree", "storagemigration.k8s.io/v1alpha1"),
    ({"storagemigration.k8s.io": ["v1"], "migration.k8s.io": ["v1alpha1"]}, "sigs", "sigs", "migration.k8s.io/v1alpha1"),
    ({"storagemigration.k8s.io": ["v1"]}, "client", "client", None),
])
def test_choose_backend(served, requested, backend, api_version):
    choice = plan.choose_backend(served, requested)
    assert (choice.backend, choice.api_version) == (backend, api_version)


@pytest.mark.parametrize("requested", ["intree", "sigs", "bogus"])
def test_forced_backend_not_served_is_an_error(requested):
    with pytest.raises(ValueError):
        plan.choose_backend({}, requested)


def test_served_migration_apis_needs_the_migrations_resource_not_only_the_group():
    sigs_doc = recorded_body("svm-sigs/00-discovery-migration.k8s.io-v1alpha1.json")
    only_state = {"resources": [{"name": "storagestates"}, {"name": "storagestates/status"}]}
    assert plan.served_migration_apis({"migration.k8s.io/v1alpha1": sigs_doc}) == {"migration.k8s.io": ["v1alpha1"]}
    assert plan.served_migration_apis({"migration.k8s.io/v1alpha1": only_state}) == {}


@pytest.mark.parametrize("api_version,expected", [
    ("storagemigration.k8s.io/v1alpha1", {"group": "example.com", "resource": "widgets", "version": "v1"}),
    ("storagemigration.k8s.io/v1beta1", {"group": "example.com", "resource": "widgets"}),
    ("storagemigration.k8s.io/v1", {"group": "example.com", "resource": "widgets"}),
    ("migration.k8s.io/v1alpha1", {"group": "example.com", "resource": "widgets", "version": "v1"}),
])
def test_migration_body_per_api(api_version, expected):
    body = plan.migration_body(api_version, GroupResource("example.com", "widgets"), "v1")
    assert body["spec"]["resource"] == expected
    assert body["metadata"]["generateName"] == "widgets.example.com-"
    assert body["apiVersion"] == api_version


def test_migration_body_matches_the_recorded_v1alpha1_shape():
    sent = recorded("svm-intree/01-create-svm-widgets-201.json")["request"]["body"]
    ours = plan.migration_body("storagemigration.k8s.io/v1alpha1", GroupResource("example.com", "widgets"), "v1")
    assert ours["spec"] == sent["spec"]
    core = plan.migration_body("migration.k8s.io/v1alpha1", GroupResource("", "configmaps"), "v1")
    assert core["metadata"]["generateName"] == "configmaps-"  # like the sigs trigger (svm-sigs/09)


def _record(persisted, current="NEW"):
    return StorageStateRecord(name="x", group="", resource="x", persisted_hashes=persisted, current_hash=current)


def _widgets_crd(stored_versions):
    return crd_from_object({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                            "metadata": {"name": "widgets.example.com", "generation": 1},
                            "spec": {"group": "example.com", "scope": "Namespaced",
                                     "names": {"plural": "widgets", "kind": "Widget", "singular": "widget", "listKind": "WidgetList"},
                                     "versions": [{"name": "v1alpha1", "served": True, "storage": False},
                                                  {"name": "v1", "served": True, "storage": True}]},
                            "status": {"storedVersions": stored_versions}})


R, C, S = plan.RESOURCES, plan.FROM_CHECK, plan.FROM_RECORDS


@pytest.mark.parametrize("mode,requested,verdicts,records,hashes,served,selected,skipped", [
    (R, ["configmaps", "deployments.apps"], [], {}, {}, None, ["configmaps", "deployments.apps"], []),
    (R, ["configmaps"], [], {"configmaps": _record(["NEW"])}, {"configmaps": "NEW"}, None, [], ["configmaps"]),
    (R, ["configmaps"], [], {"configmaps": _record(["OLD", "NEW"])}, {"configmaps": "NEW"}, None, ["configmaps"], []),
    (R, ["configmaps"], [], {"configmaps": _record(["Unknown"])}, {"configmaps": "NEW"}, None, ["configmaps"], []),
    (R, ["configmaps"], [], {"configmaps": _record(["NEW"])}, {"configmaps": None}, None, ["configmaps"], []),
    (C, [], [{"resource": "a", "verdict": "needs_migration"}, {"resource": "b", "verdict": "unknown"},
             {"resource": "c", "verdict": "safe"}, {"resource": "d", "verdict": "unsafe"}], {}, {}, None,
     ["a", "b"], ["c", "d"]),
    (R, ["configmaps", "configmaps"], [], {}, {}, None, ["configmaps"], []),
    # from_records: what the migrate role selected in Jinja before
    (S, [], [], {"a": _record(["NEW"]), "b": _record(["OLD", "NEW"]), "c": _record(["Unknown"]), "d": _record([]),
                 "e": _record(["OLD"])}, {"a": "NEW", "b": "NEW", "c": "NEW", "d": "NEW", "e": "NEW"}, None,
     ["b", "c", "d", "e"], []),
    # a stale record (no apiserver serves the resource) is skipped, never a failure
    (S, [], [], {"gone": _record(["OLD", "NEW"]), "b": _record(["OLD"])}, {"b": "NEW"}, {"b"}, ["b"], ["gone"]),
    (R, ["gone"], [], {"gone": _record(["OLD"])}, {}, {"b"}, [], ["gone"]),
    (R, ["typo"], [], {}, {}, {"b"}, ["typo"], []),  # no record: left to fail with "check the resource name"
])
def test_select_resources(mode, requested, verdicts, records, hashes, served, selected, skipped):
    given = plan.SelectionInput(mode=mode, requested=requested, verdicts=verdicts, records=records,
                                current_hashes=hashes, served=served)
    selection = plan.select_resources(given)
    assert selection.selected == selected
    assert [s["resource"] for s in selection.skipped] == skipped
    if served is not None and skipped == ["gone"]:
        assert selection.skipped[0]["reason"] == plan.STALE_REASON


@pytest.mark.parametrize("stored,selected", [(["v1alpha1", "v1"], ["widgets.example.com"]), (["v1"], [])])
def test_from_records_selects_crds_with_more_than_one_stored_version(stored, selected):
    given = plan.SelectionInput(mode=plan.FROM_RECORDS, crds={"widgets.example.com": _widgets_crd(stored)})
    assert plan.select_resources(given).selected == selected


@pytest.mark.parametrize("backend,phase,needle", [
    ("intree", plan.PENDING, "does not exist"),
    ("intree", plan.OBSERVED, "cannot decode"),
    ("sigs", plan.PENDING, "not running"),
    ("sigs", plan.RUNNING, "retries a failing LIST forever"),
])
def test_stall_reasons_say_what_to_do(backend, phase, needle):
    text = plan.stall_reason(backend, plan.MigrationStatus(phase), 120)
    assert needle in text and "backend=client" in text and "120s" in text


def test_stall_detector_on_the_recorded_stuck_sigs_migration():
    stuck = plan.read_status(recorded_body("svm-sigs/18-migration-configmaps-with-corrupt-get-03-stuck-running.json"))
    detector = plan.StallDetector(60)
    assert not detector.stalled("m", stuck.fingerprint, 0)
    assert not detector.stalled("m", stuck.fingerprint, 59)
    assert detector.stalled("m", stuck.fingerprint, 60)


def test_stall_detector_resets_on_progress_and_zero_disables():
    detector = plan.StallDetector(10)
    pending = plan.read_status(recorded_body("svm-intree/20-svm-configmaps-with-corrupt-get-01.json")).fingerprint
    observed = plan.read_status(recorded_body("svm-intree/20-svm-configmaps-with-corrupt-get-02.json")).fingerprint
    assert pending != observed
    detector.stalled("m", pending, 0)
    assert not detector.stalled("m", observed, 9.5)
    assert not detector.stalled("m", observed, 19)
    assert detector.stalled("m", observed, 20)
    assert not plan.StallDetector(0).stalled("m", "x", 1e9)


def _crd(storage="v1", generation=2, versions=("v1alpha1", "v1"), name="widgets.example.com"):
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": name, "generation": generation},
            "spec": {"group": "example.com", "scope": "Namespaced",
                     "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"},
                     "versions": [{"name": v, "storage": v == storage, "served": True} for v in versions]}}


@pytest.mark.parametrize("start,now,value,error", [
    (_crd(), _crd(), ["v1"], None),
    (_crd(), _crd(storage="v1alpha1"), None, "changed its storage version"),
    (_crd(), _crd(generation=3), None, "generation 2 -> 3"),
])
def test_stored_versions_value_guards(start, now, value, error):
    got, why = stored_versions.stored_versions_value(crd_from_object(start), crd_from_object(now))
    assert got == value
    if error:
        assert error in why
    else:
        assert why is None


def test_stored_versions_value_from_recorded_crd():
    crd = recorded_body("crd/09-get-crd-storedVersions-v1alpha1-v1.json")
    assert crd["status"]["storedVersions"] == ["v1alpha1", "v1"]
    assert stored_versions.stored_versions_value(crd_from_object(crd), crd_from_object(crd)) == (["v1"], None)


def test_the_summary_shows_what_moved_and_counts_what_was_skipped_for_one_reason():
    from ansible_collections.kubeupgrade.storage.plugins.module_utils._migrate.progress import summary_table

    moved = [{"resource": "secrets", "status": "succeeded", "backend": "client", "objects_migrated": 3,
              "objects_failed": 0, "seconds": 0.12}]
    safe = [{"resource": f"r{i}.example.com", "reason": "pre-flight verdict is safe"} for i in range(60)]
    stale = [{"resource": "flunders.wardle.example.com", "reason": "not served by any apiserver"}]
    lines = summary_table(moved, safe + stale)
    assert lines[0].split() == ["RESOURCE", "STATUS", "BACKEND", "OBJECTS", "FAILED", "SECONDS"]
    assert lines[1].split() == ["secrets", "succeeded", "client", "3", "0", "0.1"]
    assert lines[2:] == [
        "skipped 60 resources: pre-flight verdict is safe (listed in skipped_resources)",
        "skipped flunders.wardle.example.com: not served by any apiserver",
    ]
    assert summary_table([], stale[:1] + safe[:2]) == [
        "nothing migrated",
        "skipped flunders.wardle.example.com: not served by any apiserver",
        "skipped r0.example.com, r1.example.com: pre-flight verdict is safe",
    ]


@pytest.mark.parametrize("entry, shown", [
    ({"status": "succeeded", "objects_migrated": 0}, False),
    ({"status": "succeeded", "objects_migrated": 3}, True),
    ({"status": "succeeded", "objects_migrated": None}, True),  # the in-tree backend counts no objects
    ({"status": "failed", "objects_migrated": 0}, True),
    ({"status": "succeeded", "objects_migrated": 0, "objects_failed": 1}, True),
], ids=["empty", "moved", "uncounted", "failed", "object-failed"])
def test_only_resources_that_moved_or_failed_get_a_progress_line(entry, shown):
    """A first migration finishes 60-odd resources with nothing stored: a line each would bury the few that moved."""
    assert progress.worth_a_progress_line(entry) is shown


@pytest.mark.parametrize("select,resources,objects,target,mode", [
    ("auto", True, False, None, plan.RESOURCES),
    ("auto", False, True, None, plan.RESOURCES),  # objects_from_audit: resources narrows it
    ("auto", False, False, "1.33", plan.FROM_RECORDS),
    ("auto_from_check", False, False, "1.33", plan.FROM_CHECK),
    ("auto_from_check", True, False, "1.33", plan.SELECTED_NONE),
    ("auto_from_check", False, False, None, plan.SELECTED_NONE),
    ("auto_from_check", False, False, "", plan.SELECTED_NONE),
    ("resources", False, False, None, plan.RESOURCES),  # explicit modes are themselves (their checks follow)
    ("from_check", True, False, None, plan.FROM_CHECK),
    ("from_records", False, False, "1.33", plan.FROM_RECORDS),
])
def test_resolve_select(select, resources, objects, target, mode):
    found, why = plan.resolve_select(select, resources, objects, target)
    assert found == mode
    assert bool(why) is (mode == plan.SELECTED_NONE)
