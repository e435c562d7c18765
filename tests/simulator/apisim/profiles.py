"""Release profiles: which built-in resources an apiserver of a given release serves, stores and decodes.

The data comes from the collection's generated ``_release_data.py``, loaded by path so that the simulator does
not import collection code; the storage version hash is computed here independently.
"""

import base64
import functools
import hashlib
import importlib.util
import json
import os
import re
from dataclasses import dataclass

RELEASE_DATA_PATH = os.path.join(
    os.path.dirname(__file__), "..", "..", "..", "plugins", "module_utils", "_release_data.py")

# The release data does not say which resources are cluster-scoped; these are (everything else is namespaced).
CLUSTER_SCOPED = frozenset({
    "/namespaces", "/nodes", "/persistentvolumes", "/componentstatuses",
    "apiextensions.k8s.io/customresourcedefinitions", "apiregistration.k8s.io/apiservices",
    "certificates.k8s.io/certificatesigningrequests", "certificates.k8s.io/clustertrustbundles",
    "flowcontrol.apiserver.k8s.io/flowschemas", "flowcontrol.apiserver.k8s.io/prioritylevelconfigurations",
    "internal.apiserver.k8s.io/storageversions", "networking.k8s.io/ingressclasses",
    "networking.k8s.io/ipaddresses", "networking.k8s.io/servicecidrs", "networking.k8s.io/clustercidrs",
    "node.k8s.io/runtimeclasses", "rbac.authorization.k8s.io/clusterroles",
    "rbac.authorization.k8s.io/clusterrolebindings", "resource.k8s.io/deviceclasses",
    "resource.k8s.io/resourceslices", "resource.k8s.io/devicetaintrules", "resource.k8s.io/resourceclasses",
    "scheduling.k8s.io/priorityclasses", "storage.k8s.io/csidrivers", "storage.k8s.io/csinodes",
    "storage.k8s.io/storageclasses", "storage.k8s.io/volumeattachments",
    "storage.k8s.io/volumeattributesclasses", "storagemigration.k8s.io/storageversionmigrations",
})
CLUSTER_SCOPED_GROUPS = ("admissionregistration.k8s.io",)

# Resources without a /status subresource (an approximation; it only changes discovery and /status routing).
NO_STATUS = frozenset({
    "configmaps", "secrets", "endpoints", "events", "limitranges", "podtemplates", "serviceaccounts",
    "controllerrevisions", "leases", "roles", "rolebindings", "clusterroles", "clusterrolebindings",
    "priorityclasses", "storageclasses", "csidrivers", "csinodes", "csistoragecapacities", "runtimeclasses",
    "ingressclasses", "endpointslices", "mutatingwebhookconfigurations", "validatingwebhookconfigurations",
    "validatingadmissionpolicybindings", "mutatingadmissionpolicybindings", "deviceclasses",
    "resourceclaimtemplates", "resourceslices", "leasecandidates", "clustertrustbundles",
    "volumeattributesclasses",
})

SHORT_NAMES = {
    "configmaps": ["cm"], "namespaces": ["ns"], "pods": ["po"], "services": ["svc"],
    "deployments": ["deploy"], "customresourcedefinitions": ["crd", "crds"], "events": ["ev"],
    "endpoints": ["ep"], "nodes": ["no"], "serviceaccounts": ["sa"], "daemonsets": ["ds"],
    "replicasets": ["rs"], "statefulsets": ["sts"], "persistentvolumeclaims": ["pvc"],
    "persistentvolumes": ["pv"],
}

VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
STATUS_VERBS = ["get", "patch", "update"]


def storage_version_hash(group, version, kind):
    """The discovery hash of a storage GVK: base64(sha256("<group>/<version>/<kind>")[:8])."""
    digest = hashlib.sha256(f"{group}/{version}/{kind}".encode()).digest()
    return base64.b64encode(digest[:8]).decode()


_VERSION_RE = re.compile(r"^v(\d+)(?:(alpha|beta)(\d+))?$")


def version_priority(version):
    """Sort key giving Kubernetes' version order: GA > beta > alpha, higher numbers first, others last."""
    match = _VERSION_RE.match(version)
    if not match:
        return (3, 0, 0, version)
    major, stage, minor = match.groups()
    rank = {None: 0, "beta": 1, "alpha": 2}[stage]
    return (rank, -int(major), -int(minor or 0), version)


def api_version(group, version):
    """The apiVersion string of a group/version ("v1" for the core group)."""
    return f"{group}/{version}" if group else version


@dataclass(frozen=True)
class BuiltinResource:
    """One persisted built-in resource as an apiserver of one release sees it."""

    group: str
    resource: str
    kind: str
    storage: str
    served: tuple
    decodable: frozenset
    storage_group: str
    namespaced: bool

    @property
    def storage_api_version(self):
        return api_version(self.storage_group, self.storage)

    @property
    def hash(self):
        return storage_version_hash(self.storage_group, self.storage, self.kind)

    @property
    def has_status(self):
        return self.resource not in NO_STATUS

    def can_decode(self, encoded_api_version):
        """Whether an object encoded as ``encoded_api_version`` can be read by this release."""
        group, _unused, version = encoded_api_version.rpartition("/")
        return group in (self.storage_group, self.group) and version in self.decodable


@functools.lru_cache(maxsize=1)
def release_data():
    spec = importlib.util.spec_from_file_location("_apisim_release_data", os.path.abspath(RELEASE_DATA_PATH))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return json.loads(module.RELEASE_DATA_JSON)["releases"]


def releases():
    return list(release_data())


@functools.cache
def builtin_resources(release):
    """{(group, resource): BuiltinResource} for a release ("1.32")."""
    data = release_data().get(release)
    if data is None:
        raise ValueError(f"unknown release {release!r}; known: {', '.join(release_data())}")
    result = {}
    for key, info in data["resources"].items():
        group, _unused, resource = key.partition("/")
        namespaced = key not in CLUSTER_SCOPED and group not in CLUSTER_SCOPED_GROUPS
        result[(group, resource)] = BuiltinResource(
            group=group, resource=resource, kind=info["kind"], storage=info["storage"],
            served=tuple(sorted(info["served"], key=version_priority)),
            decodable=frozenset(info["decodable"]) | frozenset(info["served"]) | {info["storage"]},
            storage_group=info.get("storage_group", group), namespaced=namespaced)
    return result


def storage_key(group, resource, release=None):
    """The store bucket of a resource: events.k8s.io events share the core events bucket, as in etcd."""
    if release:
        info = builtin_resources(release).get((group, resource))
        if info:
            return (info.storage_group, resource)
    if group == "events.k8s.io" and resource == "events":
        return ("", "events")
    return (group, resource)
