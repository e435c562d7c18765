# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Observe a cluster: every apiserver endpoint separately, plus the cluster-wide records.

Discovery is the cost of a pre-flight, so each endpoint gets exactly ``/version``, ``/readyz``,
``/api``, ``/apis`` and one legacy document per group/version (only legacy documents carry
``storageVersionHash``; aggregated discovery, KEP-3352, has none), all fetched concurrently over the client's shared pool. An
endpoint that does not answer, or refuses our credentials, is *reported* (``reachable=False`` with
the HTTP status), never skipped and never raised: the judge then fails closed on it.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Dict, List, Optional, Sequence

from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe import crds as crds_mod
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe import discovery
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.model import (
    EndpointObservation,
    IdentityLease,
    ObjectCount,
    Observation,
    ObservedApiService,
    ObservedStorageVersion,
    StorageVersionEntry,
)
from ansible_collections.kubeupgrade.storage.plugins.module_utils._remember import records as records_mod
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import (
    ApiError,
    EndpointUnreachable,
    KubeUpgradeError,
    is_decode_failure,
)
from ansible_collections.kubeupgrade.storage.plugins.module_utils.resources import GroupResource
from ansible_collections.kubeupgrade.storage.plugins.module_utils.retries import RetryPolicy, call_with_retries

INCLUDE_CHOICES = ("crds", "storage_states", "storage_versions", "leases")
DEFAULT_INCLUDE = INCLUDE_CHOICES

# Few, short retries: a discovery that keeps failing is reported as failed, not waited for.
DISCOVERY_RETRY = RetryPolicy(attempts=3, base_delay=0.1, max_delay=2.0)
LIST_RETRY = RetryPolicy(attempts=4, base_delay=0.2, max_delay=5.0)
LIST_CHUNK = 500
MAX_WORKERS = 16

CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
STORAGE_STATE_PATH = "/apis/migration.k8s.io/v1alpha1/storagestates"
STORAGE_VERSION_GROUP_VERSION = ("internal.apiserver.k8s.io", "v1alpha1")
STORAGE_VERSION_PATH = "/apis/internal.apiserver.k8s.io/v1alpha1/storageversions"
LEASE_PATH = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"
APISERVICE_PATH = "/apis/apiregistration.k8s.io/v1/apiservices"
# Counting needs names only: ask for PartialObjectMetadata, which every apiserver since 1.15 serves.
METADATA_ACCEPT = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1, application/json"
IDENTITY_SELECTOR = "apiserver.kubernetes.io/identity=kube-apiserver"
_AUTH_STATUSES = (401, 403)


def _get(client, path: str, retry: RetryPolicy, sleep, query=None):
    return call_with_retries(lambda: client.get(path, query=query), retry, sleep=sleep)


def _endpoint_failure(endpoint: str, error: ApiError) -> EndpointObservation:
    """Turn a refused or missing answer into a reported endpoint, with the status in the message."""
    status = None if isinstance(error, EndpointUnreachable) else error.status
    if status in _AUTH_STATUSES:
        what = "rejected the credentials (HTTP 401)" if status == 401 else "refused access (HTTP 403)"
        text = f"apiserver {endpoint} {what}: {error}"
    elif status is not None:
        text = f"apiserver {endpoint} answered HTTP {status}: {error}"
    else:
        text = f"apiserver {endpoint} is unreachable: {error}"
    return EndpointObservation(endpoint=endpoint, reachable=False, error=text, status=status)


def _readiness(client, sleep) -> bool:
    """``/readyz`` 200 = ready; any HTTP error status just means not ready (a 500 lists failed checks)."""
    try:
        call_with_retries(lambda: client.get_text("/readyz"),
                          RetryPolicy(attempts=DISCOVERY_RETRY.attempts, base_delay=0.1, max_delay=2.0,
                                      retry_statuses=frozenset({429})), sleep=sleep)
    except EndpointUnreachable:
        raise
    except ApiError as error:
        if error.status in _AUTH_STATUSES:
            raise
        return False
    return True


def _wanted_groups(resources) -> Optional[set]:
    if not resources:
        return None
    return {GroupResource.parse(name).group for name in resources}


class _Head:
    """What the four fixed requests of one endpoint returned."""

    def __init__(self, endpoint: str):
        self.endpoint = endpoint
        self.version = None
        self.ready = False
        self.api = None
        self.apis = None
        self.error: Optional[ApiError] = None


def _fetch_head(pool, client, retry, sleep):
    """Run /version, /readyz, /api and /apis of one endpoint concurrently (4 requests, retried only on faults)."""
    head = _Head(client.endpoint)
    futures = {
        "version": pool.submit(_get, client, "/version", retry, sleep),
        "ready": pool.submit(_readiness, client, sleep),
        "api": pool.submit(_get, client, "/api", retry, sleep),
        "apis": pool.submit(_get, client, "/apis", retry, sleep),
    }
    return head, futures


def _collect_head(head: _Head, futures: dict) -> _Head:
    errors_seen = []
    for key in ("version", "ready", "api", "apis"):
        try:
            setattr(head, key, futures[key].result())
        except ApiError as error:
            errors_seen.append((key, error))
    fatal = [e for k, e in errors_seen if k != "version" or isinstance(e, EndpointUnreachable) or e.status in _AUTH_STATUSES]
    if fatal:
        # Prefer the most telling cause: unreachable, then auth, then anything else.
        fatal.sort(key=lambda e: (not isinstance(e, EndpointUnreachable), e.status not in _AUTH_STATUSES))
        head.error = fatal[0]
    return head


def observe(clients: Sequence, profiles, resources=None, include=DEFAULT_INCLUDE, cluster_client=None,
            retry: RetryPolicy = DISCOVERY_RETRY, sleep=time.sleep, max_workers: int = MAX_WORKERS) -> Observation:
    """Observe every endpoint in ``clients`` and the cluster-wide records; never raises for an endpoint.

    ``resources`` (kubectl-style names) limits discovery to their groups and the result to them.
    CRDs are always read (the reverse hash lookup of custom resources needs their ``spec.versions``);
    ``include`` selects the other cluster-wide reads.
    """
    include = set(include or ())
    unknown = include - set(INCLUDE_CHOICES)
    if unknown:
        raise KubeUpgradeError(f"unknown include value(s) {sorted(unknown)}; choose from {', '.join(INCLUDE_CHOICES)}")
    wanted = set(resources) if resources else None
    groups = _wanted_groups(resources)
    observation = Observation()
    workers = max(1, min(max_workers, 4 * max(1, len(clients))))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        pending = [_fetch_head(pool, client, retry, sleep) for client in clients]
        heads = [_collect_head(head, futures) for head, futures in pending]

        endpoints: List[EndpointObservation] = []
        doc_futures = []
        served_group_versions = set()
        for client, head in zip(clients, heads):
            if head.error is not None:
                endpoints.append(_endpoint_failure(client.endpoint, head.error))
                doc_futures.append(None)
                continue
            git_version = (head.version or {}).get("gitVersion") if isinstance(head.version, dict) else None
            ep = EndpointObservation(endpoint=client.endpoint, reachable=True, git_version=git_version,
                                     release=discovery.release_from_version(head.version), ready=bool(head.ready))
            try:
                gvs = discovery.group_versions(head.api, head.apis)
            except KubeUpgradeError as error:
                endpoints.append(EndpointObservation(endpoint=client.endpoint, reachable=False,
                                                     error=f"apiserver {client.endpoint}: {error}"))
                doc_futures.append(None)
                continue
            served_group_versions.update((g, v) for g, v, _p in gvs)
            if groups is not None:
                gvs = [gv for gv in gvs if gv[0] in groups]
            endpoints.append(ep)
            doc_futures.append([(g, v, path, pool.submit(_get, client, path, retry, sleep)) for g, v, path in gvs])

        reachable = [c for c, e in zip(clients, endpoints) if e.reachable]
        cluster_candidates = ([cluster_client] if cluster_client is not None else []) + reachable
        cluster_future = pool.submit(_read_cluster, cluster_candidates, include, wanted,
                                     STORAGE_VERSION_GROUP_VERSION in served_group_versions, observation, sleep)

        docs_by_endpoint: List[Optional[Dict[str, dict]]] = []
        for ep, futures in zip(endpoints, doc_futures):
            if futures is None:
                docs_by_endpoint.append(None)
                continue
            docs = {}
            for group, version, path, future in futures:
                try:
                    docs[path] = future.result()
                except ApiError as error:
                    ep.failed_groups.append(f"{group}/{version}" if group else version)
                    if ep.status is None and not isinstance(error, EndpointUnreachable):
                        ep.status = error.status
                    observation.warnings.append(f"discovery of {path} failed: {error}")
            docs_by_endpoint.append(docs)
        cluster_future.result()

    for ep, docs in zip(endpoints, docs_by_endpoint):
        if docs is None:
            continue
        try:
            observed = discovery.endpoint_resources(docs)
        except KubeUpgradeError as error:
            ep.reachable = False
            ep.error = f"apiserver {ep.endpoint}: {error}"
            continue
        if wanted is not None:
            observed = {name: res for name, res in observed.items() if name in wanted}
        ep.resources = discovery.map_storage_versions(observed, profiles, observation.crds)
        if ep.failed_groups:
            ep.error = (f"apiserver {ep.endpoint}: discovery failed for {', '.join(ep.failed_groups)}; "
                        "the resources of these group/versions are not observed on this endpoint")
    observation.endpoints = endpoints
    return observation


def list_all(client, path: str, query=None, retry: RetryPolicy = LIST_RETRY, sleep=time.sleep, chunk: int = LIST_CHUNK) -> List[dict]:
    """Every item of a LIST, in chunks of ``chunk`` with ``continue``; an expired token restarts once."""
    for attempt in (1, 2):
        items: List[dict] = []
        token = None
        try:
            while True:
                params = dict(query or {})
                params["limit"] = chunk
                if token:
                    params["continue"] = token
                page = _get(client, path, retry, sleep, query=params)
                items.extend(page.get("items") or [])
                token = (page.get("metadata") or {}).get("continue")
                if not token:
                    return items
        except ApiError as error:
            if error.status == 410 and attempt == 1:
                continue
            raise
    return []  # not reached


def _read_cluster(candidates, include, wanted, storage_version_api_served, observation: Observation, sleep) -> None:
    """CRDs, StorageStates, StorageVersions and identity Leases through the first client that answers."""
    for index, client in enumerate(candidates):
        try:
            _read_cluster_from(client, include, wanted, storage_version_api_served, observation, sleep)
            return
        except EndpointUnreachable as error:
            if index == len(candidates) - 1:
                observation.warnings.append(f"cluster-wide records not read: {error}")
    if not candidates:
        observation.warnings.append("cluster-wide records (CRDs, StorageStates, StorageVersions, Leases) not read: "
                                    "no apiserver answered")


def _read_cluster_from(client, include, wanted, storage_version_api_served, observation: Observation, sleep) -> None:
    observation.crds = {}
    for obj in _list_or_warn(client, CRD_PATH, None, observation, "CustomResourceDefinitions", sleep):
        # Items of a typed LIST carry no apiVersion/kind (the real apiserver omits them too).
        obj = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", **obj}
        try:
            crd = crds_mod.crd_from_object(obj)
        except KubeUpgradeError as error:
            observation.warnings.append(f"CustomResourceDefinition {(obj.get('metadata') or {}).get('name')}: {error}")
            continue
        observation.crds[crd.name] = crd
    read_api_services(client, observation, sleep)
    if "storage_states" in include:
        read_storage_states(client, observation, wanted, sleep)
    if "storage_versions" in include and storage_version_api_served:
        observation.storage_version_api_served = True
        for obj in _list_or_warn(client, STORAGE_VERSION_PATH, None, observation, "StorageVersions", sleep):
            sv = storage_version_from_object(obj)
            observation.storage_versions[sv.name] = sv
    if "leases" in include:
        observation.identity_leases = [
            lease_from_object(obj)
            for obj in _list_or_warn(client, LEASE_PATH, {"labelSelector": IDENTITY_SELECTOR}, observation,
                                     "identity Leases", sleep)]


def read_api_services(client, observation: Observation, sleep=time.sleep) -> None:
    """APIServices tell which group/versions are aggregated (their objects live in another server's storage).

    Always read, like CRDs: without them a failed discovery of an aggregated API could not be told
    from a failed built-in group, and both would have to block.
    """
    try:
        items = list_all(client, APISERVICE_PATH, sleep=sleep)
    except EndpointUnreachable:
        raise
    except ApiError as error:
        observation.warnings.append(f"APIServices not read ({error}); a group/version whose discovery fails is "
                                    "then judged unknown even when an aggregated server serves it")
        return
    observation.api_services_read = True
    for obj in items:
        service = api_service_from_object(obj)
        if service.group_version:
            observation.api_services[service.group_version] = service


def api_service_from_object(obj: dict) -> ObservedApiService:
    metadata, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    group, version = spec.get("group") or "", spec.get("version") or ""
    ref = spec.get("service")
    service = f"{ref.get('namespace', '')}/{ref.get('name', '')}" if isinstance(ref, dict) else None
    available, message = None, ""
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Available":
            available = condition.get("status") == "True"
            message = condition.get("message") or condition.get("reason") or ""
    group_version = f"{group}/{version}" if group else version
    return ObservedApiService(name=metadata.get("name", ""), group_version=group_version, service=service,
                              available=available, message=message)


def _list_path(observed) -> str:
    """A LIST path of one served version of the resource (cluster-wide, all namespaces)."""
    gr = GroupResource.parse(observed.name)
    version = observed.storage_version if observed.storage_version in observed.served_versions else observed.served_versions[0]
    return f"/api/{version}/{gr.resource}" if not gr.group else f"/apis/{gr.group}/{version}/{gr.resource}"


def _count_one(client, observed, sleep) -> ObjectCount:
    try:
        page = call_with_retries(
            lambda: client.request("GET", _list_path(observed), query={"limit": 1}, accept=METADATA_ACCEPT).json(),
            DISCOVERY_RETRY, sleep=sleep)
    except ApiError as error:
        if is_decode_failure(error.status, error.api_message):
            return ObjectCount(observed.name, present=True, undecodable=True, endpoint=client.endpoint,
                               detail=error.api_message)
        return ObjectCount(observed.name, present=None, endpoint=client.endpoint, detail=str(error))
    if not isinstance(page, dict):
        return ObjectCount(observed.name, present=None, endpoint=client.endpoint, detail="the LIST answer was not a list")
    present = bool(page.get("items")) or bool((page.get("metadata") or {}).get("continue"))
    return ObjectCount(observed.name, present=present, endpoint=client.endpoint)


def count_objects(clients: Sequence, observation: Observation, names, sleep=time.sleep,
                  max_workers: int = MAX_WORKERS) -> Dict[str, ObjectCount]:
    """Whether each resource in ``names`` has objects stored: one metadata LIST with ``limit=1`` each.

    Asked of an apiserver whose discovery of the resource's group is complete; a resource no running
    apiserver serves cannot be counted this way (``present`` None, with the reason).
    """
    by_endpoint = {client.endpoint: client for client in clients}
    counts: Dict[str, ObjectCount] = {}
    jobs = []
    for name in names:
        server = next((ep for ep in observation.endpoints if name in ep.resources and ep.endpoint in by_endpoint
                       and ep.covers(ep.resources[name].group)), None)
        if server is None:
            counts[name] = ObjectCount(name, present=None, detail=f"no running apiserver serves {name}, so its objects "
                                       "cannot be listed through the API")
            continue
        jobs.append((by_endpoint[server.endpoint], server.resources[name]))
    if jobs:
        with ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(jobs)))) as pool:
            for count in pool.map(lambda job: _count_one(job[0], job[1], sleep), jobs):
                counts[count.resource] = count
    return counts


def read_storage_states(client, observation: Observation, wanted=None, sleep=time.sleep) -> None:
    """Fill ``storage_states`` and ``storage_state_crd_installed`` (404 = CRD not installed)."""
    try:
        items = list_all(client, STORAGE_STATE_PATH, sleep=sleep)
    except EndpointUnreachable:
        raise
    except ApiError as error:
        if error.status == 404:
            observation.storage_state_crd_installed = False
            return
        observation.warnings.append(f"StorageState records not read ({error}); every resource counts as Unknown")
        return
    observation.storage_state_crd_installed = True
    for obj in items:
        record = records_mod.record_from_object(obj)
        if wanted is None or record.name in wanted:
            observation.storage_states[record.name] = record


def _list_or_warn(client, path, query, observation: Observation, what: str, sleep) -> List[dict]:
    try:
        return list_all(client, path, query=query, sleep=sleep)
    except EndpointUnreachable:
        raise
    except ApiError as error:
        observation.warnings.append(f"{what} not read: {error}")
        return []


def storage_version_from_object(obj: dict) -> ObservedStorageVersion:
    """An ``internal.apiserver.k8s.io/v1alpha1`` StorageVersion as plain data."""
    status = obj.get("status") or {}
    entries = [
        StorageVersionEntry(
            api_server_id=str(entry.get("apiServerID", "")),
            encoding_version=str(entry.get("encodingVersion", "")),
            decodable_versions=list(entry.get("decodableVersions") or []),
            served_versions=list(entry.get("servedVersions") or []),
        )
        for entry in status.get("storageVersions") or []
    ]
    return ObservedStorageVersion(name=(obj.get("metadata") or {}).get("name", ""), entries=entries,
                                  common_encoding_version=status.get("commonEncodingVersion"))


def lease_from_object(obj: dict) -> IdentityLease:
    metadata = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    return IdentityLease(name=metadata.get("name", ""), holder_identity=spec.get("holderIdentity"),
                         hostname=(metadata.get("labels") or {}).get("kubernetes.io/hostname"),
                         renew_time=spec.get("renewTime"))
