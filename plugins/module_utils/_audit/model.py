# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What an audit found, per resource, folded in one pass over the keys.

``AuditAggregator`` keeps counters per resource and at most ``names_limit`` names per list (and per
stored version), so its memory grows with the number of resources and stored versions, never with the
number of keys. A scan is folded with little work per key (``AuditAggregator.fold``): a directory's first key is
classified for all of them, a value whose TypeMeta was read before is not decoded again, and a key's name is made
only while a list of names has room. The names per stored version are the audit's evidence: any target can be judged from
them (``names_not_readable``), not only the audit's own ``target_release``.
Every stored apiVersion is reported with the storage version hash the apiserver would advertise
for it (``hashing.storage_version_hash``), so results compare directly with discovery and
StorageState records. A value that cannot be read (garbage, or encrypted with a key we were not
given) is counted as unreadable: it is never assumed to be in any version.

CustomResourceDefinitions are recorded as well (``crds``: group, kind, versions, storage version,
``status.storedVersions``), read from their JSON in etcd, so that custom resources can be judged from
the audit alone, with no apiserver; a definition that cannot be read (encrypted at rest, not JSON) is
listed in ``crds_unread`` with the reason.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Set, Tuple

from ansible_collections.kubeupgrade.storage.plugins.module_utils import errors, hashing
from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd import envelope, keys
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe import crds as crds_mod
from ansible_collections.kubeupgrade.storage.plugins.module_utils.audit_result import group_of, version_of

IDENTITY = "identity"
# Names kept per stored version when ``names_limit`` is -1 (every name in the lists of objects the audit's own target
# cannot decode): the per-version evidence other targets are judged from stays bounded by the number of versions.
VERSION_NAMES_CAP = 1000
CRD_GROUP, CRD_RESOURCE = "apiextensions.k8s.io", "customresourcedefinitions"


@dataclass
class AuditOptions:
    """``readable``: resource name -> versions a target can decode (``v1`` or ``apps/v1``); resources
    absent from it are not judged. ``resources``: only these (kubectl-style names); None = all.
    ``names_limit``: names kept per list; a negative value keeps every name."""

    names_limit: int = 20
    readable: Optional[Dict[str, Set[str]]] = None
    resources: Optional[Set[str]] = None

    @property
    def version_names_limit(self) -> int:
        """Names kept per stored version: ``names_limit``, or ``VERSION_NAMES_CAP`` when that is -1 (every name)."""
        return self.names_limit if self.names_limit >= 0 else VERSION_NAMES_CAP

    def wanted(self, resource_name: str) -> bool:
        return self.resources is None or resource_name in self.resources

    def readable_for(self, resource_name: str) -> Optional[Set[str]]:
        if self.readable is None:
            return None
        found = self.readable.get(resource_name)
        return None if found is None else {version_of(v) for v in found}


class _Names:
    """A count and the first ``limit`` names (all of them when ``limit`` < 0)."""

    __slots__ = ("count", "names", "limit")

    def __init__(self, limit: int):
        self.count = 0
        self.names: List[str] = []
        self.limit = limit

    def add(self, name: str) -> None:
        self.count += 1
        if self.limit < 0 or len(self.names) < self.limit:
            self.names.append(name)


# TypeMeta heads kept per resource as bucket keys (beyond them, values are decoded to find their bucket); object
# directories kept per scan (forgotten all at once when full: a scan's keys come sorted, so a directory's keys follow
# one another and only the current one matters).
_HEADS_KEPT = 256
_DIRECTORIES_KEPT = 4096


class _Totals:
    """A tally's counters, added up from its buckets."""

    def __init__(self):
        self.objects = self.unreadable = self.undecodable = self.not_readable = 0
        self.bytes = 0  # stored values, as etcd holds them (encrypted included): what rewriting them all writes again
        self.encryption: Counter = Counter()
        self.reasons: Counter = Counter()
        self.versions: Dict[str, List[int]] = {}  # apiVersion -> [count, bytes]


class ResourceTally:
    """What was found of one resource. Keys are counted in buckets, one per decoded form (``Decoded``: encoding,
    apiVersion and kind, encryption, reason), found by the value's TypeMeta head (``envelope.type_meta_head``) once one
    of that head was decoded: a key whose bucket is known costs two additions, and its name only while a list of its
    form has room. The totals (per version, encryption, reason) are added up in ``result``; names are kept in key order.
    A bucket: ``[keys, bytes, whether a list of its form has room, Decoded, (names list, limit) of its form]``."""

    __slots__ = ("group", "resource", "readable", "names_limit", "version_names_limit", "buckets", "_buckets", "versions",
                 "unreadable_names", "garbage_names", "not_readable_names")

    def __init__(self, group: str, resource: str, readable: Optional[Set[str]], limits: Tuple[int, Optional[int]]):
        """``limits``: names kept per list, and per stored version (None: the same)."""
        self.group, self.resource, self.readable = group, resource, readable
        self.names_limit = limits[0]
        self.version_names_limit = limits[0] if limits[1] is None else limits[1]
        self.buckets: Dict[object, list] = {}  # Decoded, or a TypeMeta head of its values -> its bucket
        self._buckets: List[list] = []  # each bucket once
        self.versions: Dict[str, list] = {}  # apiVersion -> [kind (of its first key), names, not readable by the target]
        self.unreadable_names: List[str] = []
        self.garbage_names: List[str] = []  # unreadable and not encrypted: no apiserver decodes it either
        self.not_readable_names: List[str] = []

    def add(self, namespace: Optional[str], name: str, decoded: envelope.Decoded, size: int = 0) -> None:
        self.count(self.bucket(decoded), size, f"{namespace}/{name}" if namespace else name)

    def add_value(self, info: keys.KeyInfo, value: bytes, etcd_key: bytes, encryption_keys) -> None:
        """One key of this resource and its stored value (decoded only when no value of its TypeMeta was)."""
        name = f"{info.namespace}/{info.name}" if info.namespace else info.name
        self.count(self.bucket_of(value, etcd_key, encryption_keys), len(value), name)

    def count(self, bucket: list, size: int, shown: str) -> None:
        bucket[0] += 1
        bucket[1] += size
        if bucket[2]:
            self.keep(bucket, shown)

    @staticmethod
    def keep(bucket: list, shown: str) -> None:
        """``shown`` into each list of the bucket's form that has room; the bucket remembers whether one still has."""
        room = False
        for names, limit in bucket[4]:
            if limit < 0 or len(names) < limit:
                names.append(shown)
                room = room or limit < 0 or len(names) < limit
        bucket[2] = room

    def bucket_of(self, value: bytes, etcd_key: bytes, encryption_keys) -> list:
        """The bucket of a stored value: by its TypeMeta head when a value of that head was read, else decoded."""
        head = envelope.type_meta_head(value)
        found = self.buckets.get(head) if head is not None else None
        if found is None:
            found = self.bucket(envelope.decode_value(value, etcd_key, encryption_keys))
            if head is not None and found[3].readable and len(self.buckets) < _HEADS_KEPT:
                self.buckets[head] = found
        return found

    def bucket(self, decoded: envelope.Decoded) -> list:
        """The bucket of ``decoded``, made at its first key (with its version's entry, at the version's first key)."""
        found = self.buckets.get(decoded)
        if found is None:
            lists = self._lists(decoded)
            found = self.buckets[decoded] = [0, 0, any(limit < 0 or len(names) < limit for names, limit in lists), decoded, lists]
            self._buckets.append(found)
        return found

    def _lists(self, decoded: envelope.Decoded) -> tuple:
        """The name lists (with their limits) that the keys of one decoded form go into."""
        if not decoded.readable:
            lists = ((self.unreadable_names, self.names_limit),)
            return lists + ((self.garbage_names, self.names_limit),) if decoded.encoding == envelope.UNDECODABLE else lists
        entry = self.versions.get(decoded.api_version)
        if entry is None:
            not_readable = self.readable is not None and version_of(decoded.api_version) not in self.readable
            entry = self.versions[decoded.api_version] = [decoded.kind, [], not_readable]
        lists = ((entry[1], self.version_names_limit),)
        return lists + ((self.not_readable_names, self.names_limit),) if entry[2] else lists

    def totals(self) -> _Totals:
        totals = _Totals()
        for keys_counted, size, _room, decoded, _lists in self._buckets:
            totals.objects += keys_counted
            totals.bytes += size
            totals.encryption[f"{decoded.provider}:{decoded.key_name}" if decoded.provider else IDENTITY] += keys_counted
            if not decoded.readable:
                totals.unreadable += keys_counted
                totals.undecodable += keys_counted if decoded.encoding == envelope.UNDECODABLE else 0
                totals.reasons[decoded.reason or "unreadable"] += keys_counted
                continue
            version = totals.versions.setdefault(decoded.api_version, [0, 0])
            version[0] += keys_counted
            version[1] += size
            totals.not_readable += keys_counted if self.versions[decoded.api_version][2] else 0
        return totals

    def result(self) -> dict:
        totals = self.totals()
        versions = [
            {"api_version": api_version, "kind": kind, "count": totals.versions[api_version][0], "bytes": totals.versions[api_version][1],
             "hash": hashing.storage_version_hash(group_of(api_version), version_of(api_version), kind),
             "names": list(names)}
            for api_version, (kind, names, _not_readable) in sorted(self.versions.items())
        ]
        judged = self.readable is not None
        return {
            "group": self.group,
            "resource": self.resource,
            "objects": totals.objects,
            "bytes": totals.bytes,
            "versions": versions,
            "hashes": sorted({v["hash"] for v in versions}),
            "encryption": dict(sorted(totals.encryption.items())),
            "unreadable": totals.unreadable,
            "unreadable_names": list(self.unreadable_names),
            "unreadable_reasons": dict(sorted(totals.reasons.items())),
            # Of the unreadable: values that are neither an envelope, JSON nor encrypted (no apiserver decodes them).
            "undecodable": totals.undecodable,
            "undecodable_names": list(self.garbage_names),
            "judged": judged,
            "readable_versions": sorted(self.readable) if judged else None,
            "not_readable": totals.not_readable if judged else None,
            "not_readable_names": list(self.not_readable_names) if judged else [],
            "summary": self.summary(versions, totals),
        }

    def summary(self, versions: List[dict], totals: _Totals) -> str:
        name = f"{self.resource}.{self.group}" if self.group else self.resource
        stored = ", ".join(f"{v['count']} {v['api_version']}" for v in versions) or "none readable"
        line = f"{name}: {totals.objects} objects ({stored})"
        if totals.unreadable:
            line += f", {totals.unreadable} unreadable"
        if self.readable is not None:
            line += f", {totals.not_readable} in a version the target cannot decode"
        return line


class AuditAggregator:
    """Fold (key, decoded value) pairs into per-resource results without keeping the keys."""

    def __init__(self, options: AuditOptions):
        self.options = options
        self.keys_scanned = 0
        self.tallies: Dict[str, ResourceTally] = {}
        self._by_key: Dict[tuple, Optional[ResourceTally]] = {}  # (group, resource) -> its tally, None: filtered out
        self.internal: Dict[str, int] = {}
        self.outside = _Names(options.names_limit)
        self.filtered_out = 0
        self.crds: Dict[str, dict] = {}
        self.crds_unread: Dict[str, str] = {}

    def add(self, key_text: str, info: keys.KeyInfo, decoded_value, size: int = 0) -> None:
        """``decoded_value`` is a ``Decoded`` or a callable returning one (so filtered keys cost no decoding); ``size``
        the stored value's bytes."""
        tally = self._place(key_text, info)
        if tally is not None:
            decoded = decoded_value() if callable(decoded_value) else decoded_value
            tally.add(info.namespace, info.name, decoded, size)

    def fold(self, pairs: Iterable[Tuple[bytes, bytes]], prefix: str = "/registry/", encryption_keys=None) -> None:
        """Every (key, value) of a scan, in its order, folded as ``add`` and ``add_definition`` fold them one by one.

        A key is classified when it is the first of its directory (its key up to the last ``/``); the next keys of a
        directory whose keys all have its first key's answer (``keys.directory_decides``) are each a lookup of the
        directory, of their value's bucket (by TypeMeta head) and two additions; the key's text is made only when a
        name is kept, and a value is decoded only for a resource kept and a head not seen before."""
        directories: Dict[bytes, tuple] = {}  # directory with its last "/" -> (tally, its buckets, "<namespace>/")
        scanned = filtered = 0
        try:
            for key, value in pairs:
                slash = key.rfind(b"/")
                place = directories.get(key[:slash + 1])
                if place is None or slash + 1 == len(key):
                    self._fold_first(key, value, directories, (prefix, encryption_keys))
                    continue
                scanned += 1
                tally, buckets, shown = place
                if tally is None:
                    filtered += 1
                    continue
                # Found only under the head it starts with (envelope.type_meta_head), never a bucket of another form.
                bucket = buckets.get(value[:6 + value[5]]) if len(value) > 5 else None
                if bucket is None:
                    bucket = tally.bucket_of(value, key, encryption_keys)
                bucket[0] += 1
                bucket[1] += len(value)
                if bucket[2]:
                    tally.keep(bucket, shown + key[slash + 1:].decode("utf-8", "replace"))
        finally:
            self.keys_scanned += scanned
            self.filtered_out += filtered

    def _fold_first(self, key: bytes, value: bytes, directories: dict, scan: tuple) -> None:
        """A key whose directory is not known: classified and folded as ``add`` folds it, its directory kept when it
        decides the answer for its keys (not for CRDs: each definition is read)."""
        prefix, encryption_keys = scan
        text = key.decode("utf-8", "replace")
        info = keys.classify_key(text, prefix)
        tally = self._place(text, info)
        if tally is not None:
            tally.add_value(info, value, key, encryption_keys)
        if info.resource == CRD_RESOURCE:  # a CRD's versions: its custom resources can be judged from the audit alone
            self.add_definition(info, value)
        elif keys.directory_decides(text, info, prefix):
            if len(directories) >= _DIRECTORIES_KEPT:
                directories.clear()
            directories[key[:key.rfind(b"/") + 1]] = (tally, tally.buckets if tally else None, f"{info.namespace}/" if info.namespace else "")

    def _place(self, key_text: str, info: keys.KeyInfo) -> Optional[ResourceTally]:
        """Count one key; the tally of its resource, or None (internal, outside the layout, filtered out)."""
        self.keys_scanned += 1
        if info.kind == keys.INTERNAL:
            self.internal[info.what] = self.internal.get(info.what, 0) + 1
            return None
        if info.kind == keys.OUTSIDE:
            self.outside.add(key_text)
            return None
        tally = self._by_key.get((info.group, info.resource), False)
        if tally is False:
            tally = self._tally(info)
        if tally is None:
            self.filtered_out += 1
        return tally

    def _tally(self, info: keys.KeyInfo) -> Optional[ResourceTally]:
        """The tally of the first key of a resource (None when ``resources`` leaves it out), kept for the next keys."""
        name = info.resource_name
        tally = None
        if self.options.wanted(name):
            tally = self.tallies[name] = ResourceTally(info.group, info.resource, self.options.readable_for(name),
                                                       (self.options.names_limit, self.options.version_names_limit))
        self._by_key[(info.group, info.resource)] = tally
        return tally

    def add_definition(self, info: keys.KeyInfo, value: bytes) -> None:
        """The stored value of a CustomResourceDefinition key: what its custom resources can be judged against
        with no apiserver. Recorded whatever the ``resources`` filter (a definition is small and there are few)."""
        if info.kind != keys.OBJECT or (info.group, info.resource) != (CRD_GROUP, CRD_RESOURCE):
            return
        found = crd_definition(value)
        if isinstance(found, dict):
            self.crds[info.name] = found
        else:
            self.crds_unread[info.name] = found

    def result(self) -> dict:
        resources = {name: tally.result() for name, tally in sorted(self.tallies.items())}
        objects = sum(r["objects"] for r in resources.values())
        unreadable = sum(r["unreadable"] for r in resources.values())
        judged = [r for r in resources.values() if r["judged"]]
        not_readable = sum(r["not_readable"] for r in judged)
        summary = (f"{self.keys_scanned} keys: {objects} objects of {len(resources)} resources, "
                   f"{unreadable} unreadable, {self.outside.count} outside the key layout")
        if self.options.readable is not None:
            summary += f"; {not_readable} objects in {sum(1 for r in judged if r['not_readable'])} resources the target cannot decode"
        return {
            "keys_scanned": self.keys_scanned,
            "objects": objects,
            "resources": resources,
            "unreadable": unreadable,
            "not_readable": not_readable if self.options.readable is not None else None,
            "internal_keys": dict(sorted(self.internal.items())),
            "outside_layout": self.outside.count,
            "outside_layout_keys": list(self.outside.names),
            "filtered_out": self.filtered_out,
            "crds": dict(sorted(self.crds.items())),
            "crds_unread": [{"name": name, "reason": reason} for name, reason in sorted(self.crds_unread.items())],
            "names_limit": self.options.names_limit,
            "version_names_limit": self.options.version_names_limit,
            "summary": summary,
        }


def crd_definition(value: bytes):
    """A CRD's stored value -> ``{group, kind, plural, scope, versions: [{name, served, storage}], storage_version,
    stored_versions}``; or, when it cannot be read, the reason (a string). The apiextensions server stores CRDs as
    JSON; a value encrypted at rest is not decrypted here."""
    if value.startswith(envelope.ENCRYPTED_PREFIX):
        return "encrypted at rest (its versions cannot be read from etcd without the apiserver)"
    if value.startswith(envelope.PROTOBUF_MAGIC):
        return "stored as protobuf, not JSON (its versions are not read)"
    try:
        document = json.loads(value.decode("utf-8"))
        crd = crds_mod.crd_from_object(document, where="the stored CustomResourceDefinition")
    except (UnicodeDecodeError, ValueError):
        return "not a JSON CustomResourceDefinition"
    except errors.ManifestError as error:
        return str(error)
    return {"group": crd.group, "kind": crd.kind, "plural": crd.plural, "scope": crd.scope,
            "versions": [{"name": v.name, "served": v.served, "storage": v.storage} for v in crd.versions],
            "storage_version": crd.storage_version, "stored_versions": list(crd.stored_versions)}
