# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The runner's bookkeeping requests: the CRD read before, the record re-read under the Lease, and after a verified
migration the StorageState record saying ``[current]`` and a CRD's storedVersions pruned (or found pruned by the
in-tree controller, which does it itself from Kubernetes 1.35).

Every request goes through ``bookkeeping_client``: the migration's own retry policy (``MIGRATION_RETRY``) and the
task's deadline, so one 503, dropped connection or 429 does not fail a resource whose objects ride it out. A
request given up fails that resource only, with a message naming it, the request and why it was given up.
Recording happens only for a resource whose objects this run verified (every object gone over from the first
one, none failed) while every apiserver agreed on the hash.
"""

from __future__ import annotations

from typing import Optional

from ansible_collections.kubeupgrade.storage.plugins.module_utils._http import paths
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.client import is_missing
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.poll import Deadline, PollTimeout, poll_until
from ansible_collections.kubeupgrade.storage.plugins.module_utils._migrate import plan
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.crds import crd_from_object
from ansible_collections.kubeupgrade.storage.plugins.module_utils._remember import records, storage_state_io
from ansible_collections.kubeupgrade.storage.plugins.module_utils._rewrite.migrator import MIGRATION_RETRY
from ansible_collections.kubeupgrade.storage.plugins.module_utils._rewrite.stored_versions import pruned_meanwhile
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ApiError, KubeUpgradeError, MigrationError
from ansible_collections.kubeupgrade.storage.plugins.module_utils.retries import RetriedClient, RetryClock, why_given_up

CRD_PATH = paths.CRD_COLLECTION  # kept importable; requests use paths.crd(name)
CRD_WAIT = 60.0  # at most this long (and never past the deadline) for a just-installed StorageState CRD


def bookkeeping_client(client, deadline: Deadline, sleep=None) -> RetriedClient:
    """``client`` under the migration's retry policy and the task's deadline. One per resource (and thread)."""
    timing = RetryClock(deadline=deadline)
    if sleep is not None:
        timing.sleep = sleep
    return RetriedClient(client, MIGRATION_RETRY, timing)


def crd_or_none(client, name: str) -> Optional[dict]:
    """The CRD named like the resource (None for a built-in): the storedVersions guard compares it after."""
    try:
        return client.get_or_none(paths.crd(name))
    except ApiError as error:
        raise _unread(client, error, name, f"Migration of {name} not started: its CustomResourceDefinition could not be read") from None


def _unread(client, error: ApiError, name: str, what: str) -> MigrationError:
    """A read the migration needs failed: what could not be read, why the retries gave up, and the apiserver's words."""
    return MigrationError(f"{what} ({why_given_up(client, error)}): {error}",
                          details={"resource": name, "status": error.status, "endpoint": error.endpoint})


def migrated_meanwhile(client, name: str, current_hash: Optional[str], crd: Optional[dict]) -> bool:
    """Read the record again (under the Lease): True when another run recorded every object as ``current_hash``
    since this run observed it (and, for a CRD, pruned its storedVersions), so nothing is left to rewrite."""
    try:
        obj = client.get_or_none(paths.storage_state(name))
    except ApiError as error:
        raise _unread(client, error, name, f"Migration of {name} not started: its StorageState record could not be read again") from None
    record = records.record_from_object(obj) if obj is not None else None
    observed = crd_from_object(crd) if crd is not None else None
    return plan.already_migrated(record, current_hash) and not plan.crd_needs_pruning(observed)


def _crd_wait(client) -> storage_state_io.CrdWait:
    remaining = client.remaining() if hasattr(client, "remaining") else None
    timeout = CRD_WAIT if remaining is None else max(1.0, min(CRD_WAIT, remaining))
    timing = getattr(client, "timing", None)
    if timing is None:
        return storage_state_io.CrdWait(timeout=timeout)
    return storage_state_io.CrdWait(timeout=timeout, clock=timing.clock, sleep=timing.sleep)


def _wait_until_served(client) -> None:
    """The StorageState records answer (the CRD was just installed, by this run's other resource or by another run):
    a CRD is Established a moment before every apiserver serves it, and a write in between is a 404."""
    wait = _crd_wait(client)
    try:
        poll_until(lambda: client.get_or_none(paths.STORAGE_STATE_COLLECTION, query={"limit": 1}), lambda page: page is not None,
                   wait.timeout, wait.interval, wait.clock, wait.sleep)
    except PollTimeout:
        raise KubeUpgradeError(f"the StorageState CRD {storage_state_io.CRD_NAME} is installed, but its records were not "
                               f"served within {wait.timeout:g}s; check the apiserver logs and re-run") from None


def mark_migrated(client, resource: str, current_hash: str) -> str:
    """StorageState persisted := [current]. A migration is the one moment a record can say [current], so a missing
    StorageState CRD is installed first (as a refresh does) rather than the result going unrecorded. Resources
    migrated in parallel may find it missing together: one installs it, the others wait until it is served."""
    for attempt in (1, 2):
        try:
            return storage_state_io.mark_migrated(client, resource, current_hash).action
        except ApiError as error:
            failure = error
        if is_missing(failure) and attempt == 1:
            try:
                if not storage_state_io.crd_installed(client):
                    storage_state_io.ensure_crd(client, install=True, check_mode=False, wait=_crd_wait(client))
                _wait_until_served(client)
                continue
            except ApiError as error:
                failure = error
            except KubeUpgradeError as error:  # installed, but never Established or served
                raise MigrationError(f"{resource} was migrated, but its StorageState record could not be updated: "
                                     f"{error}", details={"resource": resource}) from None
        raise MigrationError(f"{resource} was migrated, but its StorageState record could not be updated "
                             f"({why_given_up(client, failure)}): {failure}",
                             details={"resource": resource, "status": failure.status, "endpoint": failure.endpoint})
    return ""  # not reached


def pruned_by_controller(client, crd_at_start: dict) -> bool:
    """After the in-tree controller finished the migration (``plan.finished_by_controller``): True when it pruned
    ``status.storedVersions`` of the unchanged CRD itself, so the collection's own write would be a second one."""
    name = (crd_at_start.get("metadata") or {}).get("name")
    try:
        crd_now = client.get(paths.crd(name))
    except ApiError as error:
        raise _unread(client, error, name, f"Objects of {name} were migrated, but its CustomResourceDefinition could not be read again") from None
    return pruned_meanwhile(crd_from_object(crd_at_start), crd_from_object(crd_now))
