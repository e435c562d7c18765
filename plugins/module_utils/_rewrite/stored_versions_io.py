# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Write a CRD's ``status.storedVersions`` after a verified rewrite of its objects (the value from
``stored_versions.py``): what the migration and the rehearsal's copy both do last."""

from __future__ import annotations

from typing import Optional

from ansible_collections.kubeupgrade.storage.plugins.module_utils._http import paths
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.crds import crd_from_object
from ansible_collections.kubeupgrade.storage.plugins.module_utils._rewrite.stored_versions import stored_versions_value
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ApiError, MigrationError
from ansible_collections.kubeupgrade.storage.plugins.module_utils.retries import why_given_up


def prune_stored_versions(client, crd_at_start: dict) -> Optional[list]:
    """CRD ``status.storedVersions := [storage version]`` via ``/status``, guarded like cmctl.

    Returns the value written, or None when nothing had to change. Raises ``MigrationError`` when the CRD
    changed since the migration started or the value would be invalid (the real /status does not check).
    """
    name = (crd_at_start.get("metadata") or {}).get("name")
    try:
        return _prune(client, name, crd_at_start)
    except ApiError as error:
        raise MigrationError(f"Objects of {name} were migrated, but status.storedVersions was not pruned "
                             f"({why_given_up(client, error)}): {error}",
                             details={"resource": name, "status": error.status, "endpoint": error.endpoint}) from None


def _prune(client, name: str, crd_at_start: dict) -> Optional[list]:
    crd_now = client.get(paths.crd(name))
    value, why = stored_versions_value(crd_from_object(crd_at_start), crd_from_object(crd_now))
    if why:
        raise MigrationError(f"Objects of {name} were migrated, but status.storedVersions was not pruned: {why}",
                             details={"resource": name})
    if list((crd_now.get("status") or {}).get("storedVersions") or []) == value:
        return None
    body = dict(crd_now)
    body["status"] = dict(crd_now.get("status") or {}, storedVersions=value)
    try:
        client.put(paths.crd_status(name), body)
    except ApiError as error:
        if error.status != 409:
            raise
        # Our write may have landed with its answer lost (its retry then conflicts): look before blaming anyone.
        if list((client.get(paths.crd(name)).get("status") or {}).get("storedVersions") or []) == value:
            return value
        raise MigrationError(f"CRD {name} changed while its storedVersions were being pruned; re-run.",
                             details={"resource": name}) from None
    return value
