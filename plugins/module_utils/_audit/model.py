# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What an audit found, per resource, folded in one pass over the keys.

``AuditAggregator`` keeps counters per resource and at most ``names_limit`` names per list (and per
stored version), so its memory grows with the number of resources and stored versions, never with the
number of keys. The names per stored version are the audit's evidence: any target can be judged from
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
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set

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


@dataclass
class ResourceTally:
    group: str
    resource: str
    readable: Optional[Set[str]]
    names_limit: int
    objects: int = 0
    bytes: int = 0  # stored values, as etcd holds them (encrypted included): what rewriting them all writes again
    # apiVersion -> [kind, names (count and first names), bytes, whether the target cannot decode it]
    versions: Dict[str, List] = field(default_factory=dict)
    encryption: Dict[str, int] = field(default_factory=dict)
    unreadable_reasons: Dict[str, int] = field(default_factory=dict)
    unreadable: _Names = None
    garbage: _Names = None  # unreadable and not encrypted: no apiserver decodes it either
    not_readable: _Names = None
    version_names_limit: Optional[int] = None  # names kept per stored version (None: names_limit)

    def __post_init__(self):
        self.unreadable = _Names(self.names_limit)
        self.garbage = _Names(self.names_limit)
        self.not_readable = _Names(self.names_limit)

    def add(self, namespace: Optional[str], name: str, decoded: envelope.Decoded, size: int = 0) -> None:
        self.objects += 1
        self.bytes += size
        where = f"{decoded.provider}:{decoded.key_name}" if decoded.provider else IDENTITY
        self.encryption[where] = self.encryption.get(where, 0) + 1
        shown = f"{namespace}/{name}" if namespace else name
        if not decoded.readable:
            self.unreadable.add(shown)
            if decoded.encoding == envelope.UNDECODABLE:
                self.garbage.add(shown)
            reason = decoded.reason or "unreadable"
            self.unreadable_reasons[reason] = self.unreadable_reasons.get(reason, 0) + 1
            return
        entry = self.versions.get(decoded.api_version)
        if entry is None:
            limit = self.names_limit if self.version_names_limit is None else self.version_names_limit
            not_readable = self.readable is not None and version_of(decoded.api_version) not in self.readable
            entry = self.versions[decoded.api_version] = [decoded.kind, _Names(limit), 0, not_readable]
        entry[1].add(shown)
        entry[2] += size
        if entry[3]:
            self.not_readable.add(shown)

    def result(self) -> dict:
        versions = [
            {"api_version": api_version, "kind": kind, "count": names.count, "bytes": size,
             "hash": hashing.storage_version_hash(group_of(api_version), version_of(api_version), kind),
             "names": list(names.names)}
            for api_version, (kind, names, size, _not_readable) in sorted(self.versions.items())
        ]
        judged = self.readable is not None
        return {
            "group": self.group,
            "resource": self.resource,
            "objects": self.objects,
            "bytes": self.bytes,
            "versions": versions,
            "hashes": sorted({v["hash"] for v in versions}),
            "encryption": dict(sorted(self.encryption.items())),
            "unreadable": self.unreadable.count,
            "unreadable_names": list(self.unreadable.names),
            "unreadable_reasons": dict(sorted(self.unreadable_reasons.items())),
            # Of the unreadable: values that are neither an envelope, JSON nor encrypted (no apiserver decodes them).
            "undecodable": self.garbage.count,
            "undecodable_names": list(self.garbage.names),
            "judged": judged,
            "readable_versions": sorted(self.readable) if judged else None,
            "not_readable": self.not_readable.count if judged else None,
            "not_readable_names": list(self.not_readable.names) if judged else [],
            "summary": self.summary(versions),
        }

    def summary(self, versions: List[dict]) -> str:
        name = f"{self.resource}.{self.group}" if self.group else self.resource
        stored = ", ".join(f"{v['count']} {v['api_version']}" for v in versions) or "none readable"
        line = f"{name}: {self.objects} objects ({stored})"
        if self.unreadable.count:
            line += f", {self.unreadable.count} unreadable"
        if self.readable is not None:
            line += f", {self.not_readable.count} in a version the target cannot decode"
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
        self.keys_scanned += 1
        if info.kind == keys.INTERNAL:
            self.internal[info.what] = self.internal.get(info.what, 0) + 1
            return
        if info.kind == keys.OUTSIDE:
            self.outside.add(key_text)
            return
        tally = self._by_key.get((info.group, info.resource), False)
        if tally is False:
            tally = self._tally(info)
        if tally is None:
            self.filtered_out += 1
            return
        decoded = decoded_value() if callable(decoded_value) else decoded_value
        tally.add(info.namespace, info.name, decoded, size)

    def _tally(self, info: keys.KeyInfo) -> Optional[ResourceTally]:
        """The tally of the first key of a resource (None when ``resources`` leaves it out), kept for the next keys."""
        name = info.resource_name
        tally = None
        if self.options.wanted(name):
            tally = self.tallies[name] = ResourceTally(info.group, info.resource, self.options.readable_for(name),
                                                       self.options.names_limit,
                                                       version_names_limit=self.options.version_names_limit)
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
