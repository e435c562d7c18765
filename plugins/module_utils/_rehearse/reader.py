# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read every stored object through the rehearsed apiserver: the measurement itself.

Per resource with stored keys: one paged metadata LIST (the apiserver decodes every object to
answer it). Where the LIST fails with a 500 (an object it cannot decode or decrypt), each stored
key of the resource is read with a GET to name exactly the objects that fail. Keys of resources the
target does not serve are the removed ones. Names are bounded by ``names_limit``; counts are exact.
"""

from __future__ import annotations

import copy
import itertools
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterator, List, Set, Tuple, Union
from urllib.parse import quote

from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd import keys as keys_mod
from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd.client import EtcdReader
from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd.settings import EtcdSettings, ScanOptions
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http import paths
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.client import is_missing
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.poll import Deadline, PollTimeout, poll_until
from ansible_collections.kubeupgrade.storage.plugins.module_utils._rehearse.model import ResourceRead
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ApiError, EndpointUnreachable

METADATA_LIST = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io,application/json"
PAGE = 500  # objects per LIST page through the target: the least, and what a resource of few objects gets
LARGE_PAGE = 5000  # the most
PAGE_BYTES = 64 << 20  # stored bytes a page may hold on average: the target apiserver decodes a whole page at once


def page_size(objects: int, average_bytes: float) -> int:
    """Objects per LIST page of a resource of ``objects`` through the target. On every page etcd walks the whole rest
    of the range to count it, whatever the limit (etcd-io/etcd#16510), so a resource costs the scratch etcd
    O(objects² / page): at 1,000,000 ConfigMaps, pages of 500 took 108-168 ms each and the read 305 s. A resource is
    read in about 100 pages at most (between ``PAGE`` and ``LARGE_PAGE`` objects each), and a page holds about
    ``PAGE_BYTES`` of stored data at most, from the copy's average value size."""
    by_bytes = int(PAGE_BYTES / average_bytes) if average_bytes > 0 else LARGE_PAGE
    return max(PAGE, min(LARGE_PAGE, objects // 100, by_bytes))


@dataclass
class StoredKeys:
    """What the copy holds per resource, folded from its keys as they are written or scanned: counts and the key
    prefixes (not the keys)."""

    counts: Dict[str, int] = field(default_factory=dict)
    prefixes: Dict[str, Set[str]] = field(default_factory=dict)  # resource -> key prefixes its objects live under
    outside_layout: int = 0
    keys: int = 0
    data_bytes: int = 0  # the copy's size (its database): with ``keys``, what one object weighs on average

    def average_bytes(self) -> float:
        return self.data_bytes / self.keys if self.keys else 0.0

    def add(self, key: bytes, prefix: str) -> None:
        """One key of the copy, by resource (the audit's key layout)."""
        self.keys += 1
        text = key.decode("utf-8", "replace")
        info = keys_mod.classify_key(text, prefix)
        if info.kind == keys_mod.OUTSIDE:
            self.outside_layout += 1
        if info.kind != keys_mod.OBJECT:
            return
        name = info.resource_name
        self.counts[name] = self.counts.get(name, 0) + 1
        tail = f"{info.namespace}/{info.name}" if info.namespace else info.name
        self.prefixes.setdefault(name, set()).add(text[:len(text) - len(tail)])

    def folding(self, pairs: Iterator[Tuple[bytes, bytes]], prefix: str) -> Iterator[Tuple[bytes, bytes]]:
        """``pairs`` passed on unchanged, each key folded in as it goes by: a copy learns what it holds while it
        writes, without a second scan of its million keys."""
        for pair in pairs:
            self.add(pair[0], prefix)
            yield pair


def stored_keys(pairs: Iterator[Tuple[bytes, bytes]], prefix: str) -> StoredKeys:
    """Fold the copy's keys by resource (the audit's key layout)."""
    found = StoredKeys()
    for key, _value in pairs:
        found.add(key, prefix)
    return found


def objects_under(etcd_url: str, prefixes: Set[str], prefix: str) -> Iterator[keys_mod.KeyInfo]:
    """Every object key of the scratch copy under ``prefixes`` (keys only), as KeyInfo."""
    reader = EtcdReader(EtcdSettings(endpoints=[etcd_url]))
    for base in sorted(prefixes):
        for key, _value in EtcdReader(reader.settings).scan(ScanOptions(prefix=base, page_size=1000, keys_only=True)):
            info = keys_mod.classify_key(key.decode("utf-8", "replace"), prefix)
            if info.kind == keys_mod.OBJECT:
                yield info


def _label(info: keys_mod.KeyInfo) -> str:
    return f"{info.namespace}/{info.name}" if info.namespace else info.name


@dataclass
class Served:
    """What the target serves: resource name -> (group, version, namespaced); group/versions whose discovery failed."""

    resources: Dict[str, Tuple[str, str, bool]] = field(default_factory=dict)
    failed: Dict[str, str] = field(default_factory=dict)  # group/version -> error
    kinds: Dict[str, str] = field(default_factory=dict)  # resource name -> kind (a migration's writes name it)


def discover(client) -> Served:
    """The target's listable resources, through its preferred version where it serves them there."""
    served = Served()
    documents = [("", "v1")]
    for group in client.get(paths.GROUP_DISCOVERY).get("groups") or []:
        preferred = (group.get("preferredVersion") or {}).get("version")
        versions = [v.get("version") for v in group.get("versions") or []]
        documents += [(group.get("name", ""), v) for v in sorted(versions, key=lambda v: v != preferred)]
    for group, version in documents:
        try:
            document = client.get(paths.group_version(group, version))
        except EndpointUnreachable:
            raise
        except ApiError as error:
            if not is_missing(error):  # missing: an APIService of another release, left in the copy; not served here
                served.failed[f"{group}/{version}".lstrip("/")] = str(error)
            continue
        for resource in document.get("resources") or []:
            plural = resource.get("name", "")
            if "/" in plural or "list" not in (resource.get("verbs") or []):
                continue
            name = f"{plural}.{group}" if group else plural
            served.resources.setdefault(name, (group, version, bool(resource.get("namespaced"))))
            served.kinds.setdefault(name, resource.get("kind", ""))
    return served


def probe(client, served: Served, stored: StoredKeys, candidates: Dict[str, List[str]]) -> None:
    """Ask directly for the group/versions release data says the target serves, for stored resources discovery does
    not list: an apiserver that is up but not ready has not registered its own APIServices yet, and still serves them."""
    for name in sorted(set(stored.counts) - set(served.resources)):
        group = name.split(".", 1)[1] if "." in name else ""
        for version in candidates.get(name) or []:
            try:
                document = client.get(paths.group_version(group, version))
            except ApiError:
                continue
            plural = name.split(".", 1)[0]
            found = next((r for r in document.get("resources") or [] if r.get("name") == plural), None)
            if found is not None and "list" in (found.get("verbs") or []):
                served.resources[name] = (group, version, bool(found.get("namespaced")))
                served.kinds[name] = found.get("kind", "")
                break


CRD_POLL = 0.5  # seconds between two discoveries while the copy's CRDs establish


def wait_for_custom_resources(client, stored: StoredKeys, timeout: Union[float, Deadline], sleep=time.sleep,
                              clock=time.monotonic) -> Served:
    """Discovery, again until every stored resource whose CRD is in the copy is served (CRDs establish after ready).

    Never an error: at the deadline the last discovery is what the target serves (what it does not is read as such)."""

    def fetch():
        served = discover(client)
        pending = [name for name in stored.counts if name not in served.resources and "." in name
                   and client.get_or_none(paths.crd(name)) is not None]
        return served, pending

    deadline = timeout if isinstance(timeout, Deadline) else Deadline.after(timeout, clock)
    try:
        served, _pending = poll_until(fetch, lambda value: not value[1], deadline, CRD_POLL, sleep=sleep)
    except PollTimeout as late:
        served, _pending = late.last
    return served


def apply_crds(client, objects: Dict[str, dict]) -> Dict[str, str]:
    """Apply the target CRD manifests to the copy (never the cluster): name -> ``applied`` or ``rejected: <why>``.

    A manifest that drops a version still in ``status.storedVersions`` is rejected by the apiserver (422), as it
    would be in the cluster."""
    outcome = {}
    for name, obj in sorted(objects.items()):
        body = copy.deepcopy(obj)
        body.setdefault("apiVersion", "apiextensions.k8s.io/v1")
        body.setdefault("kind", "CustomResourceDefinition")
        for attempt in range(5):
            current = client.get_or_none(paths.crd(name))
            try:
                if current is None:
                    client.post(paths.CRD_COLLECTION, body)
                else:
                    body.setdefault("metadata", {})["resourceVersion"] = current["metadata"]["resourceVersion"]
                    client.put(paths.crd(name), body)
                outcome[name] = "applied"
                break
            except EndpointUnreachable:
                raise
            except ApiError as error:
                if error.status == 409 and attempt < 4:  # the CRD controllers write its status meanwhile
                    continue
                if error.status in (400, 403, 409, 422):
                    outcome[name] = f"rejected: {(error.api_message or str(error))[:400]}"
                    break
                raise
    return outcome


def _count_list(client, path: str, limit: int = PAGE) -> int:
    count, token = 0, None
    while True:
        query = {"limit": limit}
        if token:
            query["continue"] = token
        page = client.get(path, query=query, accept=METADATA_LIST)
        count += len(page.get("items") or [])
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return count


def _read_one_by_one(client, read: ResourceRead, served, objects: Iterator[keys_mod.KeyInfo], names_limit: int) -> None:
    group, version, _namespaced = served
    read.objects_read = 0
    for info in objects:
        path = paths.resource_object(group, version, info.resource, quote(info.name, safe=""), info.namespace)
        try:
            client.get(path, accept="application/json")
            read.objects_read += 1
        except EndpointUnreachable:
            raise
        except ApiError as error:
            if is_missing(error):
                continue  # deleted since the copy (by the target's own controllers): nothing to decode
            if error.status >= 500:
                read.undecodable += 1
                if names_limit < 0 or len(read.undecodable_names) < names_limit:
                    read.undecodable_names.append(_label(info))
                message = (error.api_message or str(error))[:300]
                if message not in read.decode_errors and len(read.decode_errors) < 5:
                    read.decode_errors.append(message)
            else:
                read.error = str(error)[:400]
                return


@dataclass
class ReadOptions:
    """How to read: the stored objects of a resource (from the copy), how many names to give, manifests applied."""

    objects_of: Callable[[str], Iterator[keys_mod.KeyInfo]]
    names_limit: int = 20
    manifests: Dict[str, str] = field(default_factory=dict)  # CRD name -> applied / rejected: <why>


def read_all(client, stored: StoredKeys, served: Served, options: ReadOptions) -> List[ResourceRead]:
    """One ResourceRead per stored resource (and per target CRD manifest): LIST it through the target, or name what
    fails one by one."""
    reads = []
    manifests, objects_of, names_limit = options.manifests, options.objects_of, options.names_limit
    for name in sorted(set(stored.counts) | set(manifests)):
        read = ResourceRead(resource=name, keys=stored.counts.get(name, 0), manifest=manifests.get(name))
        reads.append(read)
        if not read.keys:
            read.served = True
            continue
        where = served.resources.get(name)
        group = name.split(".", 1)[1] if "." in name else ""
        failed = [gv for gv in served.failed if (gv.rsplit("/", 1)[0] if "/" in gv else "") == group]
        if where is None and failed:
            read.served = True
            read.error = f"discovery of {', '.join(failed)} failed on the target: {served.failed[failed[0]][:300]}"
            continue
        if where is None:
            limit = None if names_limit < 0 else names_limit
            read.removed_names = [_label(info) for info in itertools.islice(objects_of(name), limit)]
            continue
        read.served, read.served_as = True, f"{where[0]}/{where[1]}".lstrip("/")
        plural = name.split(".", 1)[0]
        try:
            read.objects_read = _count_list(client, paths.resource_collection(where[0], where[1], plural),
                                            page_size(read.keys, stored.average_bytes()))
        except EndpointUnreachable:
            raise
        except ApiError as error:
            if error.status < 500:
                read.error = str(error)[:400]
                continue
            _read_one_by_one(client, read, where, objects_of(name), names_limit)
    return reads
