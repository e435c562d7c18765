# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The in-tree migration of a CRD's resource with a controller that prunes storedVersions itself (v1beta1 and later).

kube-controller-manager 1.36.2, as measured on the real binaries: the migration says Succeeded while its Running
condition is still True; a moment later the controller's migration runner applies the CRD's StorageMigrating=False and
storedVersions [storage version], and only then sets Running False (reason MigrationCompleted). The collection, which
polls for Succeeded, must neither write storedVersions a second time nor delete the migration before the controller
finished it (the CRD's StorageMigrating would stay True). In-memory apiserver, real runner.
"""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
from kube_fakes import FakeApiClient

from ansible_collections.kubeupgrade.storage.plugins.module_utils._http import paths
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.poll import Deadline
from ansible_collections.kubeupgrade.storage.plugins.module_utils._migrate import plan, runner
from ansible_collections.kubeupgrade.storage.plugins.module_utils._migrate.progress import StatusFile

NAME = "gizmos.example.com"
HASH = "gIwvi5rymmg="
BETA = "storagemigration.k8s.io/v1beta1"
ALPHA = "storagemigration.k8s.io/v1alpha1"
MIGRATION = "gizmos.example.com-x7k2p"
SUCCEEDED = {"type": "Succeeded", "status": "True", "reason": "StorageVersionMigrationSucceeded"}
RUNNING = {"type": "Running", "status": "True", "reason": "MigrationRunning"}
COMPLETED = {"type": "Running", "status": "False", "reason": "MigrationCompleted", "message": "Migration completed"}


class Cluster:
    """The CRD (stored in v1alpha1 and v1, v1 the storage version) and one migration object, which succeeds at once.

    ``finishes_at``: on which GET of the migration the controller finishes it (None: never, kube-controller-manager
    stopped). ``generation_bump``: someone changes the CRD's spec while it migrates."""

    def __init__(self, api_version, finishes_at=None, generation_bump=False):
        self.api_version, self.finishes_at, self.generation_bump = api_version, finishes_at, generation_bump
        self.crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                    "metadata": {"name": NAME, "generation": 2, "resourceVersion": "10"},
                    "spec": {"group": "example.com", "scope": "Namespaced",
                             "names": {"plural": "gizmos", "singular": "gizmo", "kind": "Gizmo", "listKind": "GizmoList"},
                             "versions": [{"name": "v1alpha1", "served": True, "storage": False},
                                          {"name": "v1", "served": True, "storage": True}]},
                    "status": {"storedVersions": ["v1alpha1", "v1"],
                               "conditions": [{"type": "StorageMigrating", "status": "True", "reason": "MigrationRunning",
                                               "observedGeneration": 2}]}}
        self.migration = None
        self.gets = 0
        self.finished = False
        self.status_writes = []  # (who, storedVersions) of every write of the CRD's status
        self.deleted = []  # (name, whether the controller had finished it)
        collection = plan.migration_path(api_version)
        self.client = FakeApiClient("https://10.0.0.11:6443", {
            ("GET", paths.crd(NAME)): lambda *_: (200, copy.deepcopy(self.crd)),
            ("PUT", paths.crd_status(NAME)): self._put_status,
            ("POST", collection): self._create,
            ("GET", f"{collection}/{MIGRATION}"): self._get,
            ("DELETE", f"{collection}/{MIGRATION}"): self._delete,
        })

    def _write_crd(self, who, status):
        self.crd["status"] = status
        self.crd["metadata"]["resourceVersion"] = str(int(self.crd["metadata"]["resourceVersion"]) + 1)
        self.status_writes.append((who, list(status["storedVersions"])))

    def _put_status(self, _method, _path, _query, body):
        if body["metadata"]["resourceVersion"] != self.crd["metadata"]["resourceVersion"]:
            return 409, {"kind": "Status", "reason": "Conflict", "message": "the object has been modified"}
        self._write_crd("collection", body["status"])
        return 200, copy.deepcopy(self.crd)

    def _create(self, _method, _path, _query, body):
        conditions = [RUNNING, SUCCEEDED] if self.api_version == BETA else [dict(RUNNING, status="False"), SUCCEEDED]
        self.migration = dict(body, metadata=dict(body["metadata"], name=MIGRATION),
                              status={"resourceVersion": "42", "conditions": conditions})
        if self.generation_bump:
            self.crd["metadata"]["generation"] += 1
        return 201, copy.deepcopy(self.migration)

    def _finish(self):
        """What the 1.36.2 migration runner does: the CRD first (storedVersions only when the generation it marked at
        the start is still the CRD's), then Running False, reason MigrationCompleted."""
        marked = self.crd["status"]["conditions"][0]["observedGeneration"]
        status = dict(self.crd["status"], conditions=[{"type": "StorageMigrating", "status": "False",
                                                       "reason": "MigrationSucceeded"}])
        if marked == self.crd["metadata"]["generation"]:
            status["storedVersions"] = ["v1"]
        self._write_crd("controller", status)
        self.migration["status"]["conditions"] = [COMPLETED, SUCCEEDED]
        self.finished = True

    def _get(self, *_):
        self.gets += 1
        if self.migration is None:
            return 404, {"kind": "Status", "reason": "NotFound"}
        if self.api_version == BETA and self.finishes_at is not None and self.gets >= self.finishes_at and not self.finished:
            self._finish()
        return 200, copy.deepcopy(self.migration)

    def _delete(self, *_):
        self.deleted.append((MIGRATION, self.finished))
        self.migration = None
        return 200, {}


class Mod:
    def __init__(self):
        self.warnings = []

    def warn(self, message):
        self.warnings.append(message)


@pytest.fixture(autouse=True)
def no_gate(monkeypatch):
    """The agreement gate has tests of its own; here every apiserver agrees."""
    monkeypatch.setattr(runner, "gate_for", lambda run, name, **_kw: lambda: None)


def migrate(cluster, **params):
    observed = SimpleNamespace(served_versions=["v1alpha1", "v1"], storage_version="v1", namespaced=True, kind="Gizmo")
    run = runner.Run(mod=Mod(), deadline=Deadline.after(60), params={
        "lock": False, "wait": True, "poll_interval": 0.01, "stall_timeout": 30.0, "update_records": False,
        "prune_crd_stored_versions": True, "keep_migration_objects": False, **params})
    run.cluster, run.status = cluster.client, StatusFile(None)
    run.observation = SimpleNamespace(endpoints=[SimpleNamespace(resources={NAME: observed})])
    run.current[NAME] = HASH
    entry = runner.migrate_resource(run, NAME, plan.BackendChoice(plan.INTREE, cluster.api_version))
    return entry, run.mod.warnings


def test_a_controller_that_prunes_a_moment_after_success_is_left_to_it_and_the_crd_is_written_once():
    cluster = Cluster(BETA, finishes_at=2)  # Succeeded on the first GET, finished by the next one
    entry, warnings = migrate(cluster)
    assert entry["status"] == plan.SUCCEEDED, entry
    assert cluster.status_writes == [("controller", ["v1"])]  # the collection wrote nothing
    assert (entry["stored_versions"], entry["stored_versions_pruned_by"]) == (None, "kube-controller-manager")
    assert cluster.deleted == [(MIGRATION, True)] and entry["migration_object_deleted"] is True
    assert warnings == []


def test_a_controller_already_done_when_success_is_seen_costs_one_read_and_no_write():
    cluster = Cluster(BETA, finishes_at=1)
    entry, _warnings = migrate(cluster, keep_migration_objects=True)
    assert cluster.status_writes == [("controller", ["v1"])] and cluster.gets == 2 and cluster.deleted == []
    assert entry["stored_versions_pruned_by"] == "kube-controller-manager"


def test_a_controller_that_never_finishes_leaves_the_prune_to_the_collection_and_the_object_in_place(monkeypatch):
    monkeypatch.setattr(runner, "CONTROLLER_WAIT", 0.1)
    cluster = Cluster(BETA, finishes_at=None)  # kube-controller-manager stopped right after Succeeded
    entry, warnings = migrate(cluster)
    assert cluster.status_writes == [("collection", ["v1"])]
    assert (entry["stored_versions"], entry["stored_versions_pruned_by"]) == (["v1"], "kubeupgrade.storage")
    assert cluster.deleted == [] and entry["migration_object_deleted"] is False
    assert len(warnings) == 1 and f"did not finish {BETA} StorageVersionMigration {MIGRATION}" in warnings[0], warnings


def test_a_crd_changed_during_the_migration_is_pruned_by_nobody():
    cluster = Cluster(BETA, finishes_at=2, generation_bump=True)
    entry, _warnings = migrate(cluster)
    assert cluster.status_writes == [("controller", ["v1alpha1", "v1"])]  # the condition only: "generation mismatch"
    assert entry["status"] == runner.FAILED and "changed (generation 2 -> 3) during the migration" in entry["error"]


def test_the_alpha_api_leaves_the_crd_to_the_collection_without_waiting():
    cluster = Cluster(ALPHA)
    entry, warnings = migrate(cluster)
    assert cluster.gets == 1 and cluster.status_writes == [("collection", ["v1"])] and warnings == []
    assert (entry["stored_versions"], entry["stored_versions_pruned_by"]) == (["v1"], "kubeupgrade.storage")
    assert cluster.deleted == [(MIGRATION, False)]


@pytest.mark.parametrize("conditions, finished", [
    ([RUNNING, SUCCEEDED], False),  # 1.36.2 between the migration and the runner's finish
    ([COMPLETED, SUCCEEDED], True),  # 1.36.2 once the runner finished
    ([SUCCEEDED], True),  # pkg/controller/storageversionmigrator/migrationrunner.go at master removes Running
    ([dict(RUNNING, status="False"), SUCCEEDED], False),  # the migrating controller's own Running=False at master
    ([RUNNING], False),
    ([COMPLETED, {"type": "Failed", "status": "True"}], True),
    ([], False),
])
def test_finished_by_controller(conditions, finished):
    assert plan.finished_by_controller({"status": {"conditions": conditions}}) is finished


@pytest.mark.parametrize("api_version, prunes", [
    (BETA, True), ("storagemigration.k8s.io/v1", True), (ALPHA, False), ("migration.k8s.io/v1alpha1", False), (None, False)])
def test_controller_finishes_crds(api_version, prunes):
    assert plan.controller_finishes_crds(api_version) is prunes
