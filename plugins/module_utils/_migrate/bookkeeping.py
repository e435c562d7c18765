# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""After a verified migration: the StorageState record says ``[current]`` and a CRD's storedVersions is pruned.

Only the runner calls this, and only for a resource whose objects this run verified (every object
gone over from the first one, none failed) while every apiserver agreed on the hash.
"""

from __future__ import annotations

from typing import Optional

from ansible_collections.kubeupgrade.storage.plugins.module_utils._migrate import plan
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.crds import crd_from_object
from ansible_collections.kubeupgrade.storage.plugins.module_utils._remember import storage_state_io
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ApiError, MigrationError

CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def crd_or_none(client, name: str) -> Optional[dict]:
    """The CRD named like the resource (None for a built-in): the storedVersions guard compares it after."""
    return client.get_or_none(f"{CRD_PATH}/{name}")


def mark_migrated(client, resource: str, current_hash: str) -> str:
    """StorageState persisted := [current]. A migration is the one moment a record can say [current], so a missing
    StorageState CRD is installed first (as a refresh does) rather than the result going unrecorded."""
    for attempt in (1, 2):
        try:
            return storage_state_io.mark_migrated(client, resource, current_hash).action
        except ApiError as error:
            if error.status == 404 and attempt == 1 and not storage_state_io.crd_installed(client):
                storage_state_io.ensure_crd(client, install=True, check_mode=False)
                continue
            raise MigrationError(f"{resource} was migrated, but its StorageState record could not be updated: {error}",
                                 details={"resource": resource}) from None
    return ""  # not reached


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
