# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the collection observed about a cluster, as plain data classes.

``observe.py`` fills these from the apiservers; the pure capabilities (verdicts, agreement, records)
read them. Keeping them in one place is the contract between I/O and logic: judging never talks to
a server, and a test can build an ``Observation`` from recorded documents.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Dict, List, Optional, Tuple

from ansible_collections.kubeupgrade.storage.plugins.module_utils.resources import GroupResource


@dataclass
class ObservedResource:
    """One persisted resource as one apiserver endpoint's legacy discovery reports it."""

    name: str  # kubectl-style: "deployments.apps", "pods"
    group: str
    kind: str
    namespaced: bool
    storage_hash: str  # storageVersionHash from discovery ("" if the endpoint reports none)
    served_versions: List[str] = field(default_factory=list)
    storage_version: Optional[str] = None  # the hash mapped back to a version; None = maps to nothing known
    verbs: List[str] = field(default_factory=list)
    # {version: hash} when this endpoint's served versions report different hashes (storage_hash is then
    # ""): the endpoint contradicts itself, so callers must fail closed. Empty when consistent.
    hash_mismatch: Dict[str, str] = field(default_factory=dict)


@dataclass
class EndpointObservation:
    """Everything one apiserver endpoint said, or why it said nothing."""

    endpoint: str  # base URL
    reachable: bool
    error: Optional[str] = None  # operator-facing reason when unreachable / unauthorised / a group failed
    status: Optional[int] = None  # HTTP status of the failure, if any
    problem: Optional[str] = None  # why it could not be read (_http/diagnosis: credentials, anonymous, tls, ...)
    git_version: Optional[str] = None  # /version gitVersion, e.g. "v1.32.0"
    release: Optional[str] = None  # "1.32", derived from git_version: the binary's release
    # Compatibility versions (KEP-4330, 1.31+): the release whose APIs and storage versions the binary emulates
    # (--emulated-version) and the oldest release that must read what it writes; None where /version has neither.
    emulated_release: Optional[str] = None
    min_compatibility_release: Optional[str] = None
    ready: bool = False  # /readyz answered 200
    # Which apiserver answered: the address it advertises in /api and the digest of the certificate it serves.
    server_address: Optional[str] = None
    server_certificate: Optional[str] = None
    resources: Dict[str, ObservedResource] = field(default_factory=dict)  # by kubectl-style name
    failed_groups: List[str] = field(default_factory=list)  # group/versions whose discovery failed
    # Group/versions /apis lists (the APIServices are shared in etcd) that this apiserver answers 404 for while
    # another apiserver serves them: the newer release's versions on an older apiserver during a roll.
    other_release_groups: List[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """True when the endpoint answered and every group/version's discovery succeeded."""
        return self.reachable and not self.failed_groups

    def failed_for(self, group: str, ignore=()) -> List[str]:
        """The failed group/versions of ``group`` (core: ""), except those in ``ignore`` (aggregated APIs)."""
        return [gv for gv in self.failed_groups if group_of(gv) == group and gv not in ignore]

    def covers(self, group: str, ignore=()) -> bool:
        """True when this endpoint's discovery of ``group`` is complete: a failure elsewhere does not concern it."""
        return self.reachable and not self.failed_for(group, ignore)

    def at(self, release: str, emulated: Optional[str] = None) -> bool:
        """Runs ``release`` at ``emulated`` (default: ``release`` itself): the binary's release, and the release it
        emulates when it reports one (a 1.36 binary emulating 1.35 is not at 1.36 yet: it serves and stores as 1.35,
        which is where step 1 of a two-step upgrade wants it)."""
        return self.release == release and (self.emulated_release or release) == (emulated or release)

    @property
    def emulating(self) -> str:
        """``" emulating 1.35"`` for a binary that runs an older release's APIs (KEP-4330), else ``""``: for messages."""
        return f" emulating {self.emulated_release}" if self.emulated_release and self.emulated_release != self.release else ""

    def summary(self) -> dict:
        """The per-endpoint part of a module result: reachable, why not, release and readiness (no resources)."""
        return {"endpoint": self.endpoint, "reachable": self.reachable, "error": self.error, "status": self.status,
                "problem": self.problem,
                "release": self.release, "git_version": self.git_version, "ready": self.ready,
                "emulated_release": self.emulated_release, "min_compatibility_release": self.min_compatibility_release,
                "failed_groups": list(self.failed_groups), "other_release_groups": list(self.other_release_groups)}


def group_of(group_version: str) -> str:
    """``metrics.k8s.io/v1beta1`` -> ``metrics.k8s.io``; ``v1`` -> ``""`` (core)."""
    return group_version.rpartition("/")[0]


@dataclass
class ObservedApiService:
    """An ``apiregistration.k8s.io/v1`` APIService: local (served from this etcd) or aggregated (a service's)."""

    name: str  # "v1beta1.metrics.k8s.io"
    group_version: str  # "metrics.k8s.io/v1beta1"
    service: Optional[str] = None  # "namespace/name" of the backing service; None for a local group
    available: Optional[bool] = None  # the Available condition (None when not reported)
    message: str = ""

    @property
    def aggregated(self) -> bool:
        """Aggregated APIs keep their objects in their own backend, never in this cluster's etcd."""
        return self.service is not None


@dataclass
class ObjectCount:
    """What a metadata-only LIST with ``limit=1`` said about one resource's stored objects."""

    resource: str
    present: Optional[bool]  # True: at least one object; False: none; None: could not be counted
    undecodable: bool = False  # the apiserver failed to decode a stored object (500 "no kind is registered")
    endpoint: Optional[str] = None  # the apiserver that was asked
    detail: str = ""  # the error, or why it could not be counted


@dataclass
class CrdVersion:
    name: str
    served: bool
    storage: bool


@dataclass
class ObservedCrd:
    """A CustomResourceDefinition as stored in the cluster (or as given in a target manifest)."""

    name: str  # "widgets.example.com"
    group: str
    kind: str
    plural: str
    scope: str  # "Namespaced" | "Cluster"
    versions: List[CrdVersion] = field(default_factory=list)
    stored_versions: List[str] = field(default_factory=list)  # status.storedVersions ([] for a manifest)
    generation: Optional[int] = None
    resource_version: Optional[str] = None

    @property
    def storage_version(self) -> Optional[str]:
        storage = [v.name for v in self.versions if v.storage]
        return storage[0] if len(storage) == 1 else None

    @property
    def served_versions(self) -> List[str]:
        return [v.name for v in self.versions if v.served]

    @property
    def version_names(self) -> List[str]:
        return [v.name for v in self.versions]


@dataclass
class StorageStateRecord:
    """A ``migration.k8s.io/v1alpha1`` StorageState object (named like the resource)."""

    name: str
    group: str
    resource: str
    persisted_hashes: List[str] = field(default_factory=list)
    current_hash: Optional[str] = None
    last_heartbeat: Optional[str] = None  # RFC 3339 as stored
    resource_version: Optional[str] = None
    annotations: Dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_object(cls, obj: dict) -> StorageStateRecord:
        """The record of a StorageState object; the name falls back to ``<resource>[.<group>]`` from spec."""
        metadata = obj.get("metadata") or {}
        spec_resource = (obj.get("spec") or {}).get("resource") or {}
        status = obj.get("status") or {}
        group = spec_resource.get("group") or ""
        resource = spec_resource.get("resource") or ""
        name = metadata.get("name") or (GroupResource(group, resource).name if resource else "")
        if not resource and name:
            parsed = GroupResource.parse(name)
            group, resource = parsed.group, parsed.resource
        return cls(name=name, group=group, resource=resource,
                   persisted_hashes=list(status.get("persistedStorageVersionHashes") or []),
                   current_hash=status.get("currentStorageVersionHash") or None,
                   last_heartbeat=status.get("lastHeartbeatTime") or None,
                   resource_version=metadata.get("resourceVersion"),
                   annotations=dict(metadata.get("annotations") or {}))


@dataclass
class StorageVersionEntry:
    """One apiserver's entry in an ``internal.apiserver.k8s.io/v1alpha1`` StorageVersion object."""

    api_server_id: str
    encoding_version: str  # "apps/v1" style
    decodable_versions: List[str] = field(default_factory=list)
    served_versions: List[str] = field(default_factory=list)


@dataclass
class ObservedStorageVersion:
    name: str  # "apps.deployments", "core.configmaps"
    entries: List[StorageVersionEntry] = field(default_factory=list)
    common_encoding_version: Optional[str] = None


@dataclass
class IdentityLease:
    name: str
    holder_identity: Optional[str] = None
    hostname: Optional[str] = None
    renew_time: Optional[str] = None

    def renewed(self) -> Optional[datetime]:
        text = (self.renew_time or "").replace("Z", "+00:00")
        try:
            return datetime.fromisoformat(text)
        except ValueError:
            return None


IDENTITY_LEASE_SECONDS = 3600  # an apiserver renews its identity Lease every 10 s; a stopped one's expires after this


@dataclass
class Observation:
    """One observation of a cluster: every endpoint separately, plus cluster-wide records."""

    endpoints: List[EndpointObservation] = field(default_factory=list)
    crds: Dict[str, ObservedCrd] = field(default_factory=dict)  # by CRD name == resource name
    storage_states: Dict[str, StorageStateRecord] = field(default_factory=dict)  # by resource name
    storage_state_crd_installed: bool = False
    storage_versions: Dict[str, ObservedStorageVersion] = field(default_factory=dict)  # None-served -> empty
    storage_version_api_served: bool = False
    identity_leases: List[IdentityLease] = field(default_factory=list)
    api_services: Dict[str, ObservedApiService] = field(default_factory=dict)  # by group/version
    api_services_read: bool = False  # False: whether a failed group is aggregated cannot be told
    warnings: List[str] = field(default_factory=list)

    def live_identities(self, now: Optional[datetime] = None, duration: int = IDENTITY_LEASE_SECONDS) -> List[str]:
        """The kube-apiserver identity Leases (KEP-1965) renewed within their duration: the apiservers the cluster
        lists (empty when they were not read, or the release or cluster has none: APIServerIdentity off)."""
        now = now or datetime.now(timezone.utc)
        live = []
        for lease in self.identity_leases:
            renewed = lease.renewed()
            if renewed is None or renewed.tzinfo is None or now - renewed < timedelta(seconds=duration):
                live.append(lease.hostname or lease.name)
        return sorted(live)

    def identity_gap(self, now: Optional[datetime] = None) -> Optional[Tuple[List[str], List[str]]]:
        """(the apiservers the cluster lists, the endpoints observed) when the identity Leases outnumber the apiservers
        observed: one answers through a URL that is not its own (a load balancer) or is missing from the endpoints, so
        nothing may be written from this observation. None when they do not, or nothing can be compared (no Leases;
        an endpoint unreachable, which is reported as such)."""
        listed = self.live_identities(now)
        observed = [ep.endpoint for ep in self.endpoints if ep.reachable]
        if not listed or len(listed) <= len(observed) or len(observed) < len(self.endpoints):
            return None
        return listed, observed

    def answered_by_one(self) -> List[List[str]]:
        """Endpoints that reached one apiserver: the same URL given twice, or URLs answered with the same advertised
        address and serving certificate (a host's URL that is another host's apiserver). Each such group hides an
        apiserver the URLs were meant to reach; compared only where /api named the address."""
        groups: Dict[tuple, List[str]] = {}
        for ep in self.endpoints:
            if not ep.reachable:
                continue
            key = (ep.server_address, ep.server_certificate) if ep.server_address else ("url", ep.endpoint.rstrip("/"))
            groups.setdefault(key, []).append(ep.endpoint)
        return [urls for urls in groups.values() if len(urls) > 1]

    def not_observed_summary(self, now: Optional[datetime] = None) -> str:
        """``not_observed_message`` in a few words, for a first line."""
        shared = self.answered_by_one()
        if shared:
            return f"{len(shared[0])} URLs reached one apiserver" + (f", and {len(shared) - 1} more such group(s)" if len(shared) > 1 else "")
        gap = self.identity_gap(now)
        return f"the cluster lists {len(gap[0])} apiservers, {len(gap[1])} observed" if gap else ""

    def not_observed_message(self, now: Optional[datetime] = None) -> str:
        """Why this observation does not cover every apiserver the cluster lists (``answered_by_one``,
        ``identity_gap``), else ``""``."""
        shared = self.answered_by_one()
        if shared:
            by_url = {ep.endpoint: ep for ep in self.endpoints}
            return "; ".join(
                f"{' and '.join(urls)} reached one apiserver (it advertises {by_url[urls[0]].server_address or 'no address'}"
                + (f", serves certificate {by_url[urls[0]].server_certificate}" if by_url[urls[0]].server_certificate else "")
                + ")" for urls in shared) + (": an apiserver meant to be observed through one of them is not, and may write a "
                                             "version no other reports")
        gap = self.identity_gap(now)
        if gap is None:
            return ""
        listed, observed = gap
        return (f"the cluster lists {len(listed)} apiservers (identity Leases in kube-system: {', '.join(listed)}) but "
                f"{len(observed)} were observed ({', '.join(observed)}): an apiserver not observed may write a version no "
                "other reports. Two apiservers behind one URL (a load balancer) look like one.")

    def failed_group_versions(self, ignore=()) -> Dict[str, List[str]]:
        """Each group/version whose discovery failed on a reachable apiserver, with those apiservers (``ignore`` left
        out): what the judge reports as findings and the agreement gate names."""
        failed: Dict[str, List[str]] = {}
        for ep in self.endpoints:
            for gv in ep.failed_groups if ep.reachable else ():
                if gv not in ignore:
                    failed.setdefault(gv, []).append(ep.endpoint)
        return failed

    def releases(self) -> List[str]:
        """The releases the reachable apiservers report, sorted: one - a migration may wait for their agreement;
        several - a rolling upgrade is under way."""
        return sorted({ep.release for ep in self.endpoints if ep.reachable and ep.release})

    def aggregated_group_versions(self) -> set:
        """Group/versions served by aggregated APIServices: their objects are not in this etcd."""
        return {gv for gv, svc in self.api_services.items() if svc.aggregated}

    def to_dict(self) -> dict:
        """Plain JSON-able dict for module results."""
        return asdict(self)
