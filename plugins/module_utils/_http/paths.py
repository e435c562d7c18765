# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every apiserver path the collection requests, defined once.

Names say what the path addresses: ``*_COLLECTION`` is a list/create URL, a function returns the URL
of one named object. Group/versions follow the Kubernetes API reference of each release.
"""

from __future__ import annotations

from typing import Optional

# Discovery and health (staging/src/k8s.io/apiserver/pkg/endpoints/discovery, pkg/server/healthz).
VERSION = "/version"
CORE_DISCOVERY = "/api"
GROUP_DISCOVERY = "/apis"
READYZ = "/readyz"

# CustomResourceDefinitions (apiextensions.k8s.io/v1).
CRD_COLLECTION = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"

# StorageState, the collection's own record of what was migrated (migration.k8s.io/v1alpha1, as in
# kube-storage-version-migrator).
MIGRATION_GROUP = "migration.k8s.io"
MIGRATION_VERSION = "v1alpha1"
STORAGE_STATE_CRD_NAME = f"storagestates.{MIGRATION_GROUP}"
STORAGE_STATE_COLLECTION = f"/apis/{MIGRATION_GROUP}/{MIGRATION_VERSION}/storagestates"

# StorageVersion objects of the StorageVersionAPI feature (KEP-2339, internal.apiserver.k8s.io/v1alpha1).
STORAGE_VERSION_COLLECTION = "/apis/internal.apiserver.k8s.io/v1alpha1/storageversions"

# Leases (coordination.k8s.io/v1) in kube-system: the apiservers' identity Leases (KEP-1965) and the migration's
# own Lease per resource.
LEASE_NAMESPACE = "kube-system"
LEASE_COLLECTION = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases"

# APIServices (apiregistration.k8s.io/v1): which group/versions an aggregated server serves.
APISERVICE_COLLECTION = "/apis/apiregistration.k8s.io/v1/apiservices"

# The in-tree storage version migration API (KEP-4192, storagemigration.k8s.io).
STORAGE_MIGRATION_GROUP = "storagemigration.k8s.io"
STORAGE_MIGRATION_RESOURCE = "storageversionmigrations"

NAMESPACE_COLLECTION = "/api/v1/namespaces"


def group_version(group: str, version: str) -> str:
    """Discovery document (and URL prefix) of one group/version: ``/api/v1`` for the core group."""
    return f"/apis/{group}/{version}" if group else f"/api/{version}"


def crd(name: str) -> str:
    """One CustomResourceDefinition, by its full name (``<plural>.<group>``)."""
    return f"{CRD_COLLECTION}/{name}"


def crd_status(name: str) -> str:
    return f"{crd(name)}/status"


STORAGE_STATE_CRD = crd(STORAGE_STATE_CRD_NAME)


def storage_state(name: str) -> str:
    return f"{STORAGE_STATE_COLLECTION}/{name}"


def storage_state_status(name: str) -> str:
    """The ``/status`` subresource of one StorageState: the main endpoint drops status changes."""
    return f"{storage_state(name)}/status"


def lease(name: str) -> str:
    """One Lease in ``LEASE_NAMESPACE``."""
    return f"{LEASE_COLLECTION}/{name}"


def storage_migrations(api_version: str) -> str:
    """Collection of StorageVersionMigrations for ``api_version`` (``group/version``, in-tree or sigs)."""
    return f"/apis/{api_version}/{STORAGE_MIGRATION_RESOURCE}"


def storage_migration(api_version: str, name: str) -> str:
    """One StorageVersionMigration of ``api_version``."""
    return f"{storage_migrations(api_version)}/{name}"


def resource_collection(group: str, version: str, plural: str, namespace: Optional[str] = None) -> str:
    """List URL of a resource, across namespaces unless ``namespace`` is given."""
    prefix = group_version(group, version)
    if namespace:
        return f"{prefix}/namespaces/{namespace}/{plural}"
    return f"{prefix}/{plural}"


def resource_object(group: str, version: str, plural: str, name: str, namespace: Optional[str] = None) -> str:
    """URL of one object of a resource (in ``namespace`` when it is namespaced); ``name`` is used as given."""
    return f"{resource_collection(group, version, plural, namespace)}/{name}"


_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


def rbac_rule(method: str, path: str) -> str:
    """The RBAC rule that allows ``method path``, in the words of a Role, for a 403's next step.

    ``GET /apis/apps/v1/namespaces/x/deployments`` -> ``apiGroups: ["apps"], resources: ["deployments"],
    verbs: ["list"]``; a discovery or health path -> a ``nonResourceURLs`` rule (ClusterRole only).
    """
    parts = [p for p in path.split("?")[0].strip("/").split("/") if p]
    if parts[:1] == ["api"] and len(parts) >= 3:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 4:
        group, rest = parts[1], parts[3:]
    else:
        return f'nonResourceURLs: ["{path.split("?")[0]}"], verbs: ["get"] (in a ClusterRole)'
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        rest = rest[2:]
    resource = rest[0] + (f"/{rest[2]}" if len(rest) >= 3 else "")
    verb = _VERBS.get(method.upper(), "get" if len(rest) >= 2 else "list")
    return f'apiGroups: ["{group}"], resources: ["{resource}"], verbs: ["{verb}"]'
