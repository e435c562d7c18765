# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The kube-apiserver's etcd key layout: which resource a key under the etcd prefix belongs to.

Built-in resources are stored under ``<prefix>/<resource>/[<namespace>/]<name>`` without their
group, except for the prefixes the apiserver overrides (``pkg/registry/core/*/storage`` and
``pkg/kubeapiserver/default_storage_factory_builder.go`` in kubernetes/kubernetes, releases
1.25 to 1.37): nodes under ``minions``, services under ``services/specs``, endpoints under
``services/endpoints``, replication controllers under ``controllers``, ingresses under ``ingress``;
``events.k8s.io`` Events share core Events' ``events``. The apiextensions and kube-aggregator
servers store CRDs, APIServices and custom resources under ``<group>/<resource>``.
``masterleases``, ``peerserverleases`` and ``ranges/*`` hold the apiserver's own bookkeeping, not API objects.

A key that fits none of this is reported as outside the layout, never guessed.
"""

from __future__ import annotations

from typing import Dict, NamedTuple, Optional, Tuple

NAMESPACED = "Namespaced"
CLUSTER = "Cluster"
ANY_SCOPE = None

# key segment(s) -> (group, resource, scope) for every built-in resource of releases 1.25-1.37 whose
# objects are stored without their group. Scope None: not pinned down here, the key's depth decides.
_C, _N = CLUSTER, NAMESPACED
BUILTIN_PREFIXES = {
    # core: the overridden prefixes first
    "minions": ("", "nodes", _C),
    "services/specs": ("", "services", _N),
    "services/endpoints": ("", "endpoints", _N),
    "controllers": ("", "replicationcontrollers", _N),
    "configmaps": ("", "configmaps", _N),
    "events": ("", "events", _N),  # also events.k8s.io Events, stored as core v1 Event
    "limitranges": ("", "limitranges", _N),
    "namespaces": ("", "namespaces", _C),
    "persistentvolumeclaims": ("", "persistentvolumeclaims", _N),
    "persistentvolumes": ("", "persistentvolumes", _C),
    "pods": ("", "pods", _N),
    "podtemplates": ("", "podtemplates", _N),
    "resourcequotas": ("", "resourcequotas", _N),
    "secrets": ("", "secrets", _N),
    "serviceaccounts": ("", "serviceaccounts", _N),
    # admissionregistration.k8s.io
    "mutatingadmissionpolicies": ("admissionregistration.k8s.io", "mutatingadmissionpolicies", _C),
    "mutatingadmissionpolicybindings": ("admissionregistration.k8s.io", "mutatingadmissionpolicybindings", _C),
    "mutatingwebhookconfigurations": ("admissionregistration.k8s.io", "mutatingwebhookconfigurations", _C),
    "validatingadmissionpolicies": ("admissionregistration.k8s.io", "validatingadmissionpolicies", _C),
    "validatingadmissionpolicybindings": ("admissionregistration.k8s.io", "validatingadmissionpolicybindings", _C),
    "validatingwebhookconfigurations": ("admissionregistration.k8s.io", "validatingwebhookconfigurations", _C),
    # apps, autoscaling, batch
    "controllerrevisions": ("apps", "controllerrevisions", _N),
    "daemonsets": ("apps", "daemonsets", _N),
    "deployments": ("apps", "deployments", _N),
    "replicasets": ("apps", "replicasets", _N),
    "statefulsets": ("apps", "statefulsets", _N),
    "horizontalpodautoscalers": ("autoscaling", "horizontalpodautoscalers", _N),
    "cronjobs": ("batch", "cronjobs", _N),
    "jobs": ("batch", "jobs", _N),
    # certificates, coordination, discovery
    "certificatesigningrequests": ("certificates.k8s.io", "certificatesigningrequests", _C),
    "clustertrustbundles": ("certificates.k8s.io", "clustertrustbundles", _C),
    "podcertificaterequests": ("certificates.k8s.io", "podcertificaterequests", _N),
    "leases": ("coordination.k8s.io", "leases", _N),
    "leasecandidates": ("coordination.k8s.io", "leasecandidates", _N),
    "endpointslices": ("discovery.k8s.io", "endpointslices", _N),
    # flowcontrol, internal.apiserver, lifecycle
    "flowschemas": ("flowcontrol.apiserver.k8s.io", "flowschemas", _C),
    "prioritylevelconfigurations": ("flowcontrol.apiserver.k8s.io", "prioritylevelconfigurations", _C),
    "storageversions": ("internal.apiserver.k8s.io", "storageversions", _C),
    "evictionrequests": ("lifecycle.k8s.io", "evictionrequests", ANY_SCOPE),
    "evictions": ("lifecycle.k8s.io", "evictions", ANY_SCOPE),
    # networking, node, policy
    "clustercidrs": ("networking.k8s.io", "clustercidrs", _C),
    "ingress": ("networking.k8s.io", "ingresses", _N),
    "ingressclasses": ("networking.k8s.io", "ingressclasses", _C),
    "ipaddresses": ("networking.k8s.io", "ipaddresses", _C),
    "networkpolicies": ("networking.k8s.io", "networkpolicies", _N),
    "servicecidrs": ("networking.k8s.io", "servicecidrs", _C),
    "runtimeclasses": ("node.k8s.io", "runtimeclasses", _C),
    "poddisruptionbudgets": ("policy", "poddisruptionbudgets", _N),
    # rbac
    "clusterrolebindings": ("rbac.authorization.k8s.io", "clusterrolebindings", _C),
    "clusterroles": ("rbac.authorization.k8s.io", "clusterroles", _C),
    "rolebindings": ("rbac.authorization.k8s.io", "rolebindings", _N),
    "roles": ("rbac.authorization.k8s.io", "roles", _N),
    # resource.k8s.io (dynamic resource allocation, alpha/beta through these releases)
    "deviceclasses": ("resource.k8s.io", "deviceclasses", _C),
    "devicetaintrules": ("resource.k8s.io", "devicetaintrules", _C),
    "podschedulingcontexts": ("resource.k8s.io", "podschedulingcontexts", _N),
    "podschedulings": ("resource.k8s.io", "podschedulings", _N),
    "resourceclaimparameters": ("resource.k8s.io", "resourceclaimparameters", _N),
    "resourceclaims": ("resource.k8s.io", "resourceclaims", _N),
    "resourceclaimtemplates": ("resource.k8s.io", "resourceclaimtemplates", _N),
    "resourceclasses": ("resource.k8s.io", "resourceclasses", _C),
    "resourceclassparameters": ("resource.k8s.io", "resourceclassparameters", _N),
    "resourcepoolstatusrequests": ("resource.k8s.io", "resourcepoolstatusrequests", ANY_SCOPE),
    "resourceslices": ("resource.k8s.io", "resourceslices", _C),
    # scheduling, storage, storagemigration
    "compositepodgroups": ("scheduling.k8s.io", "compositepodgroups", ANY_SCOPE),
    "podgroups": ("scheduling.k8s.io", "podgroups", ANY_SCOPE),
    "priorityclasses": ("scheduling.k8s.io", "priorityclasses", _C),
    "workloads": ("scheduling.k8s.io", "workloads", ANY_SCOPE),
    "csidrivers": ("storage.k8s.io", "csidrivers", _C),
    "csinodes": ("storage.k8s.io", "csinodes", _C),
    "csistoragecapacities": ("storage.k8s.io", "csistoragecapacities", _N),
    "storageclasses": ("storage.k8s.io", "storageclasses", _C),
    "volumeattachments": ("storage.k8s.io", "volumeattachments", _C),
    "volumeattributesclasses": ("storage.k8s.io", "volumeattributesclasses", _C),
    "storageversionmigrations": ("storagemigration.k8s.io", "storageversionmigrations", _C),
}

# Built-ins stored under their group (served by the apiextensions and aggregator servers).
GROUPED_BUILTINS = {
    ("apiextensions.k8s.io", "customresourcedefinitions"): _C,
    ("apiregistration.k8s.io", "apiservices"): _C,
}

# The apiserver's own bookkeeping: key prefix -> what it is (not an API resource).
INTERNAL_PREFIXES = {
    "masterleases": "apiserver endpoint leases (masterleases)",
    # Each apiserver's peer address for the mixed-version proxy (KEP-4020, UnknownVersionInteroperabilityProxy: alpha
    # from 1.28, beta and on by default in 1.36): Endpoints with a TTL, written by the peer endpoint lease reconciler
    # (pkg/controlplane/apiserver/peer.go, staging/src/k8s.io/apiserver/pkg/reconcilers/peer_endpoint_lease.go).
    "peerserverleases": "apiserver peer endpoint leases of the mixed-version proxy (peerserverleases)",
    "ranges/serviceips": "service IP range allocation",
    "ranges/servicenodeports": "service node port range allocation",
}

# Resources that share one storage with another resource (same keys, same stored kind).
SHARED_STORAGE = {"events.events.k8s.io": "events"}

_TWO_SEGMENT_HEADS = {p.split("/")[0] for p in list(BUILTIN_PREFIXES) + list(INTERNAL_PREFIXES) if "/" in p}

OBJECT = "object"
INTERNAL = "internal"
OUTSIDE = "outside"


class KeyInfo(NamedTuple):
    """Where one key belongs. ``kind`` is ``object`` (an API object of ``resource``), ``internal``
    (apiserver bookkeeping, ``what`` says which) or ``outside`` (not in the layout, ``what`` says why).
    A named tuple: one is made per key."""

    kind: str
    group: str = ""
    resource: str = ""
    namespace: Optional[str] = None
    name: str = ""
    what: str = ""

    @property
    def resource_name(self) -> str:
        """kubectl-style name: ``pods``, ``deployments.apps``, ``widgets.example.com``."""
        return f"{self.resource}.{self.group}" if self.group else self.resource


def _outside(why: str) -> KeyInfo:
    return KeyInfo(OUTSIDE, what=why)


def _object(group: str, resource: str, scope, rest: list) -> KeyInfo:
    if len(rest) == 2 and scope in (NAMESPACED, ANY_SCOPE) and all(rest):
        return KeyInfo(OBJECT, group, resource, rest[0], rest[1])
    if len(rest) == 1 and scope in (CLUSTER, ANY_SCOPE) and rest[0]:
        return KeyInfo(OBJECT, group, resource, None, rest[0])
    shape = "<namespace>/<name>" if scope == NAMESPACED else "<name>" if scope == CLUSTER else "[<namespace>/]<name>"
    return _outside(f"{resource}.{group}".rstrip(".") + f" keys end in {shape}")


# An object's directory (its key without the name) -> (group, resource, namespace): the keys of one page share a few,
# so each key after the first of its directory is one dictionary lookup instead of the walk below.
_OBJECT_DIRECTORIES: Dict[Tuple[str, str], Tuple[str, str, Optional[str]]] = {}
_DIRECTORIES_KEPT = 4096


def classify_key(key: str, prefix: str = "/registry/") -> KeyInfo:
    """Map one etcd key (text) to its resource, or say why it is outside the layout."""
    directory, _slash, name = key.rpartition("/")
    found = _OBJECT_DIRECTORIES.get((prefix, directory)) if name else None
    if found is not None:
        return KeyInfo(OBJECT, found[0], found[1], found[2], name)
    info = _classify(key, prefix)
    if len(_OBJECT_DIRECTORIES) < _DIRECTORIES_KEPT and directory_decides(key, info, prefix):
        _OBJECT_DIRECTORIES[(prefix, directory)] = (info.group, info.resource, info.namespace)
    return info


def directory_decides(key: str, info: KeyInfo, prefix: str = "/registry/") -> bool:
    """Whether every key of ``key``'s directory (all but its last segment) whose last segment is not empty classifies
    as ``info``, the answer for ``key``, does: an object of the same resource and namespace, named by that segment.
    Not where the name can change the answer: below a head of two-segment prefixes ("ranges/serviceips"), a key of
    two segments is looked up with its last one."""
    return (info.kind == OBJECT and info.name == key.rpartition("/")[2]
            and (key.count("/", len(prefix)) >= 2 or key[len(prefix):].partition("/")[0] not in _TWO_SEGMENT_HEADS))


def _classify(key: str, prefix: str) -> KeyInfo:
    if not key.startswith(prefix):
        return _outside("not under the prefix")
    parts = key[len(prefix):].split("/")
    head = parts[0]
    if not head:
        return _outside("empty resource segment")
    builtin = BUILTIN_PREFIXES.get(head) if head not in _TWO_SEGMENT_HEADS else None
    if builtin and len(parts) > 1:  # the common case, first
        return _object(builtin[0], builtin[1], builtin[2], parts[1:])
    for depth in (2, 1):
        joined = "/".join(parts[:depth])
        if len(parts) >= depth and joined in INTERNAL_PREFIXES:
            return KeyInfo(INTERNAL, what=INTERNAL_PREFIXES[joined], name="/".join(parts[depth:]))
        builtin = BUILTIN_PREFIXES.get(joined) if len(parts) > depth else None
        if builtin:
            return _object(builtin[0], builtin[1], builtin[2], parts[depth:])
    if "." in head and len(parts) >= 3:
        scope = GROUPED_BUILTINS.get((head, parts[1]), ANY_SCOPE)
        return _object(head, parts[1], scope, parts[2:])
    return _outside(f"no resource is stored under '{head}'")
