# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Drive a cluster-side migrator: the in-tree ``storagemigration.k8s.io`` controller or kube-storage-version-migrator.

Both are asked through a StorageVersionMigration object and report through its conditions, which
they fill in differently and sometimes never (a nonexistent resource stays pending forever in-tree;
the sigs migrator retries a failing LIST forever while saying ``Running``). Waiting therefore watches
for *progress*, not only for an outcome, and deletes the object when it stalls or when the
apiservers stop agreeing (seed 000), so no half-done migration keeps running behind our back.
"""

from __future__ import annotations

import time
from typing import Callable, Optional

from ansible_collections.kubeupgrade.storage.plugins.module_utils import migration_plan as plan
from ansible_collections.kubeupgrade.storage.plugins.module_utils import storage_state_io
from ansible_collections.kubeupgrade.storage.plugins.module_utils.crds import crd_from_object
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ApiError, MigrationError
from ansible_collections.kubeupgrade.storage.plugins.module_utils.resources import GroupResource
from ansible_collections.kubeupgrade.storage.plugins.module_utils.retries import RetryPolicy, call_with_retries

POLL_RETRY = RetryPolicy(attempts=5, base_delay=0.2, max_delay=5.0)


def served_migration_apis(client) -> dict:
    """``{group: [versions]}`` serving storageversionmigrations, from legacy discovery of the two groups."""
    docs = {}
    for group, versions in ((plan.INTREE_GROUP, plan.INTREE_VERSIONS), (plan.SIGS_GROUP, (plan.SIGS_VERSION,))):
        for version in versions:
            try:
                docs[f"{group}/{version}"] = call_with_retries(
                    lambda g=group, v=version: client.get(f"/apis/{g}/{v}"), POLL_RETRY)
            except ApiError as error:
                if error.status in (404, 403):
                    continue
                raise
    return plan.served_migration_apis(docs)


class ClusterMigrator:
    """Create, wait for and clean up StorageVersionMigration objects of one API (in-tree or sigs)."""

    def __init__(self, client, choice: plan.BackendChoice, poll_interval: float = 2.0, stall_timeout: float = 300.0,
                 sleep=time.sleep, clock=time.monotonic):
        if choice.backend not in (plan.INTREE, plan.SIGS) or not choice.api_version:
            raise ValueError("ClusterMigrator drives the in-tree or sigs backend only")
        self.client = client
        self.choice = choice
        self.poll_interval = max(0.05, float(poll_interval))
        self.stall_timeout = float(stall_timeout)
        self.sleep = sleep
        self.clock = clock

    def create(self, group_resource: GroupResource, version: str) -> str:
        """POST the migration object; return the server-generated name."""
        body = plan.migration_body(self.choice.api_version, group_resource, version)
        created = call_with_retries(
            lambda: self.client.post(plan.migration_path(self.choice.api_version), body), POLL_RETRY)
        return (created.get("metadata") or {}).get("name") or ""

    def get(self, name: str) -> Optional[dict]:
        try:
            return call_with_retries(lambda: self.client.get(plan.migration_path(self.choice.api_version, name)),
                                     POLL_RETRY)
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    def delete(self, name: str) -> bool:
        """Delete a pending or running migration; True if it was there. Best effort: never masks the cause."""
        try:
            call_with_retries(lambda: self.client.delete(plan.migration_path(self.choice.api_version, name)),
                              POLL_RETRY)
            return True
        except ApiError:
            return False

    def wait(self, name: str, resource: str, deadline: float, gate: Optional[Callable[[], None]] = None,
             progress: Optional[dict] = None) -> plan.MigrationStatus:
        """Poll until Succeeded; raise ``MigrationError`` on Failed, a stall, a timeout or a broken gate.

        ``progress`` (a dict) is updated with the last phase, so a failure still reports how far it got.
        """
        detector = plan.StallDetector(self.stall_timeout)
        label = f"{self.choice.api_version} StorageVersionMigration {name}"
        details = {"resource": resource, "backend": self.choice.backend, "name": name}
        while True:
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
            now = self.clock()
            idle = detector.observe(name, status.fingerprint, now)
            if self.stall_timeout > 0 and idle >= self.stall_timeout:
                deleted = self.delete(name)
                raise MigrationError(
                    f"Migration of {resource} stalled: {label} {plan.stall_reason(self.choice.backend, status, idle)}"
                    + (" The migration object was deleted." if deleted else ""), details={**details, "phase": status.phase})
            if now >= deadline:
                raise MigrationError(
                    f"Migration of {resource} timed out: {label} is still {status.phase}. It was left in place and may "
                    "still finish; raise 'timeout', or re-run later.", details={**details, "phase": status.phase})
            if gate is not None:
                try:
                    gate()
                except Exception:
                    self.delete(name)
                    raise
            self.sleep(min(self.poll_interval, max(0.0, deadline - now)))


# -- orchestration: selection, gate, backend, records, CRD storedVersions ----------------------------------------

CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
NO_STORAGE_STATE_CRD = "skipped: the StorageState CRD is not installed (run storage_state with install_crd: true)"


def describe_disagreement(resource: str, agreement, expected: Optional[str] = None) -> str:
    """Which endpoints report what for ``resource`` (and which could not be asked)."""
    hashes = agreement.hashes.get(resource) or {}
    parts = [f"{endpoint}={value}" for endpoint, value in sorted(hashes.items())]
    text = f"storage hashes of {resource}: {', '.join(parts) or 'none reported'}"
    if expected and set(hashes.values()) - {expected}:
        text += f" (the migration targets {expected})"
    if agreement.unreachable:
        text += f"; unreachable: {', '.join(agreement.unreachable)}"
    if agreement.unready:
        text += f"; not ready: {', '.join(agreement.unready)}"
    if agreement.incomplete:
        text += f"; discovery incomplete: {', '.join(agreement.incomplete)}"
    missing = (agreement.missing or {}).get(resource)
    if missing:
        text += f"; not served by: {', '.join(missing)}"
    return text


def gate_for(clients, profiles, resource: str, expected_hash: str, observe_fn, compare_fn):
    """A callable raising ``DisagreementError`` as soon as the endpoints stop agreeing on ``expected_hash``."""
    from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import DisagreementError

    def gate() -> None:
        observation = observe_fn(clients, profiles, resources=[resource], include=())
        agreement = compare_fn(observation.endpoints, [resource], require_ready=True)
        values = set((agreement.hashes.get(resource) or {}).values())
        if not agreement.agreed or values != {expected_hash}:
            raise DisagreementError(
                f"Migration of {resource} stopped: the apiservers stopped agreeing ({describe_disagreement(resource, agreement, expected_hash)}). "
                "An apiserver writing another storage version would undo the migration (seed 000). Finish or roll "
                "back the upgrade so that every apiserver agrees, then re-run.",
                details={"resource": resource, "hashes": agreement.hashes.get(resource) or {},
                         "disagreeing_endpoints": sorted(e for e, h in (agreement.hashes.get(resource) or {}).items()
                                                         if h != expected_hash),
                         "unreachable": agreement.unreachable, "unready": agreement.unready})
    return gate


def mark_migrated(client, resource: str, current_hash: str) -> str:
    """StorageState persisted := [current]; without the StorageState CRD there is no record to update."""
    try:
        return storage_state_io.mark_migrated(client, resource, current_hash).action
    except ApiError as error:
        if error.status == 404:
            return NO_STORAGE_STATE_CRD
        raise


def prune_stored_versions(client, crd_at_start: dict) -> Optional[list]:
    """CRD ``status.storedVersions := [storage version]`` via ``/status``, guarded like cmctl.

    Returns the value written, or None when nothing had to change. Raises ``MigrationError`` when the CRD
    changed since the migration started or the value would be invalid (the real /status does not check).
    """
    name = (crd_at_start.get("metadata") or {}).get("name")
    crd_now = client.get(f"{CRD_PATH}/{name}")
    value, why = plan.stored_versions_value(crd_from_object(crd_at_start), crd_from_object(crd_now))
    if why:
        raise MigrationError(f"Objects of {name} were migrated, but status.storedVersions was not pruned: {why}",
                             details={"resource": name})
    if list((crd_now.get("status") or {}).get("storedVersions") or []) == value:
        return None
    body = dict(crd_now)
    body["status"] = dict(crd_now.get("status") or {}, storedVersions=value)
    try:
        client.put(f"{CRD_PATH}/{name}/status", body)
    except ApiError as error:
        if error.status == 409:
            raise MigrationError(f"CRD {name} changed while its storedVersions were being pruned; re-run.",
                                 details={"resource": name}) from None
        raise
    return value
