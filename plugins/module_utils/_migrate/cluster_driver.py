# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Drive a cluster-side migrator: the in-tree ``storagemigration.k8s.io`` controller or kube-storage-version-migrator.

Both are asked through a StorageVersionMigration object and report through its conditions, which
they fill in differently and sometimes never (a nonexistent resource stays pending forever in-tree;
the sigs migrator retries a failing LIST forever while saying ``Running``). Waiting therefore watches
for *progress*, not only for an outcome, and deletes the object when it stalls or when the
apiservers stop agreeing, so no half-done migration keeps running behind our back. A succeeded
migration object is deleted once its result is recorded, unless the operator keeps them.
"""

from __future__ import annotations

import time
from typing import Callable, NamedTuple, Optional

from ansible_collections.kubeupgrade.storage.plugins.module_utils._http import paths
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.client import none_if_missing
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.poll import Deadline, PollTimeout, poll_until
from ansible_collections.kubeupgrade.storage.plugins.module_utils._migrate import plan
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ApiError, MigrationError
from ansible_collections.kubeupgrade.storage.plugins.module_utils.resources import GroupResource
from ansible_collections.kubeupgrade.storage.plugins.module_utils.retries import RetryPolicy, call_with_retries

POLL_RETRY = RetryPolicy(attempts=5, base_delay=0.2, max_delay=5.0)


def served_migration_apis(client) -> dict:
    """``{group: [versions]}`` serving storageversionmigrations, from legacy discovery of the two groups
    (a group/version missing, or one this user may not read, is not served)."""
    docs = {}
    for group, versions in ((plan.INTREE_GROUP, plan.INTREE_VERSIONS), (plan.SIGS_GROUP, (plan.SIGS_VERSION,))):
        for version in versions:
            try:
                doc = none_if_missing(lambda g=group, v=version: call_with_retries(
                    lambda: client.get(paths.group_version(g, v)), POLL_RETRY))
            except ApiError as error:
                if error.status == 403:
                    continue
                raise
            if doc is not None:
                docs[f"{group}/{version}"] = doc
    return plan.served_migration_apis(docs)


class _Watched(NamedTuple):
    """One StorageVersionMigration being waited for, and how its failures name it."""

    name: str
    resource: str
    label: str
    details: dict
    detector: plan.StallDetector


class ClusterMigrator:
    """Create, wait for and clean up StorageVersionMigration objects of one API (in-tree or sigs)."""

    def __init__(self, client, choice: plan.BackendChoice, poll_interval: float = 2.0, stall_timeout: float = 300.0,
                 sleep=time.sleep):
        if choice.backend not in (plan.INTREE, plan.SIGS) or not choice.api_version:
            raise ValueError("ClusterMigrator drives the in-tree or sigs backend only")
        self.client = client
        self.choice = choice
        self.poll_interval = max(0.05, float(poll_interval))
        self.stall_timeout = float(stall_timeout)
        self.sleep = sleep

    def create(self, group_resource: GroupResource, version: str) -> str:
        """POST the migration object; return the server-generated name."""
        body = plan.migration_body(self.choice.api_version, group_resource, version)
        created = call_with_retries(
            lambda: self.client.post(plan.migration_path(self.choice.api_version), body), POLL_RETRY)
        return (created.get("metadata") or {}).get("name") or ""

    def get(self, name: str) -> Optional[dict]:
        return none_if_missing(lambda: call_with_retries(
            lambda: self.client.get(plan.migration_path(self.choice.api_version, name)), POLL_RETRY))

    def delete(self, name: str) -> bool:
        """Delete a pending or running migration; True if it was there. Best effort: never masks the cause."""
        try:
            call_with_retries(lambda: self.client.delete(plan.migration_path(self.choice.api_version, name)),
                              POLL_RETRY)
            return True
        except ApiError:
            return False

    def wait_finished(self, name: str, deadline: Deadline, timeout: float) -> bool:
        """After success: poll until the controller is done with the migration (``plan.finished_by_controller``:
        kube-controller-manager 1.35+ finishes the CRD first); False when it is not within ``timeout`` (and the
        task's deadline), when the object is gone, or when it cannot be read."""
        limit = Deadline.after(timeout, deadline.clock).earlier(deadline)
        try:
            obj = poll_until(lambda: self.get(name), lambda found: found is None or plan.finished_by_controller(found),
                             limit, self.poll_interval, sleep=self.sleep)
        except (PollTimeout, ApiError):
            return False
        return obj is not None

    def wait(self, name: str, resource: str, deadline: Deadline, gate: Optional[Callable[[], None]] = None,
             progress: Optional[dict] = None) -> plan.MigrationStatus:
        """Poll until Succeeded; raise ``MigrationError`` on Failed, a stall, a timeout or a broken gate.

        ``progress`` (a dict) is updated with the last phase, so a failure still reports how far it got.
        """
        watched = _Watched(name, resource, f"{self.choice.api_version} StorageVersionMigration {name}",
                           {"resource": resource, "backend": self.choice.backend, "name": name},
                           plan.StallDetector(self.stall_timeout))

        def succeeded(status: plan.MigrationStatus) -> bool:
            """Succeeded; otherwise, while time is left, the gate (a broken one deletes the migration)."""
            if status.phase == plan.SUCCEEDED:
                return True
            if gate is not None and not deadline.expired():
                try:
                    gate()
                except Exception:
                    self.delete(name)
                    raise
            return False

        try:
            return poll_until(lambda: self._status_now(watched, deadline, progress), succeeded, deadline,
                              self.poll_interval, sleep=self.sleep)
        except PollTimeout as timeout:
            phase = timeout.last.phase
            raise MigrationError(
                f"Migration of {resource} timed out: {watched.label} is still {phase}. It was left in place and may "
                "still finish; raise 'timeout', or re-run later.", details={**watched.details, "phase": phase}) from None

    def _status_now(self, watched: _Watched, deadline: Deadline, progress: Optional[dict]) -> plan.MigrationStatus:
        """The migration's status; raises on an outcome other than success (gone, Failed, stalled)."""
        name, resource, label, details = watched.name, watched.resource, watched.label, watched.details
        obj = self.get(name)
        if obj is None:
            raise MigrationError(
                f"Migration of {resource} failed: {label} disappeared while running. Someone deleted it (the "
                "kube-storage-version-migrator trigger deletes migrations it did not create). Re-run, or use "
                "backend=client.", details=details)
        status = plan.read_status(obj)
        if progress is not None:
            progress["status"] = status.phase
        if status.phase == plan.SUCCEEDED:
            return status
        if status.phase == plan.FAILED:
            raise MigrationError(
                f"Migration of {resource} failed: {label} reports Failed, reason "
                f"{status.reason or '(none)'}: {status.message or '(no message)'}. Check the controller's log "
                "(kube-controller-manager or the migrator pod), fix the cause (for example an admission policy "
                "denying updates) and re-run; backend=client names the object that fails.",
                details={**details, "reason": status.reason, "message": status.message})
        idle = watched.detector.observe(name, status.fingerprint, deadline.clock())
        if self.stall_timeout > 0 and idle >= self.stall_timeout:
            deleted = self.delete(name)
            raise MigrationError(
                f"Migration of {resource} stalled: {label} {plan.stall_reason(self.choice.backend, status, idle)}"
                + (" The migration object was deleted." if deleted else ""), details={**details, "phase": status.phase})
        return status
