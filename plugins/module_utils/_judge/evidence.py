# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the observation says about one resource: its current storage versions and what may be persisted.

Persisted versions are what its StorageState remembers (``Unknown`` when there is no trusted
record), plus the version every apiserver writes now, plus, for a custom resource, the CRD's
``status.storedVersions``. Doubts are kept by kind, because each kind has its own next step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Dict, List, Optional

from ansible_collections.kubeupgrade.storage.plugins.module_utils import hashing
from ansible_collections.kubeupgrade.storage.plugins.module_utils._judge import measured
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe import discovery
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.model import ObservedResource
from ansible_collections.kubeupgrade.storage.plugins.module_utils._remember import records
from ansible_collections.kubeupgrade.storage.plugins.module_utils.hashing import UNKNOWN as UNKNOWN_HASH
from ansible_collections.kubeupgrade.storage.plugins.module_utils.resources import GroupResource

# Kinds of doubt, in the order their next steps are preferred.
DOUBT_DISCOVERY = "discovery"  # an apiserver's discovery of the resource's group failed
DOUBT_AGREEMENT = "agreement"  # apiservers disagree in a way a rolling upgrade does not explain
DOUBT_RECORD = "record"  # the record cannot vouch for what is persisted: migrating settles it


@dataclass
class Evidence:
    name: str
    group: str
    resource: ObservedResource
    current_versions: Dict[str, Optional[str]] = field(default_factory=dict)
    current_hashes: List[str] = field(default_factory=list)
    staying_hashes: List[str] = field(default_factory=list)  # written by apiservers that already run the target
    staying_versions: set = field(default_factory=set)
    measured_replaced: bool = False  # measured in etcd, and the apiservers not on the target are replaced by the roll
    persisted_hashes: List[str] = field(default_factory=list)
    persisted_versions: set = field(default_factory=set)
    unresolved: List[str] = field(default_factory=list)
    doubts: Dict[str, List[str]] = field(default_factory=dict)
    garbage: List[str] = field(default_factory=list)  # stored values no apiserver decodes (measured), first names

    def doubt(self, kind: str, text: str) -> None:
        entries = self.doubts.setdefault(kind, [])
        if text not in entries:
            entries.append(text)

    @property
    def current_set(self) -> set:
        return {v for v in self.current_versions.values() if v}

    @property
    def writers_set(self) -> set:
        """The versions that will be written from now on: every apiserver's, or, measured in a roll, only those of the
        apiservers that stay (the others are replaced, and what they wrote is in the measurement)."""
        return {v for v in self.staying_versions if v} if self.measured_replaced else self.current_set


def lookup(hash_value, resource, profiles, observation, target) -> Optional[str]:
    """The version a storage hash of ``resource`` stands for, or None."""
    if hash_value == resource.storage_hash and resource.storage_version:
        return resource.storage_version
    if not resource.kind:
        return None
    found = discovery.lookup_storage_version(hash_value, resource, profiles, observation.crds)
    if found is None and target.crd_manifests:
        found = discovery.lookup_storage_version(hash_value, resource, profiles, target.crd_manifests)
    live_crd = observation.crds.get(resource.name)
    if found is None and live_crd is not None:  # a version already dropped from spec.versions but still stored
        found = hashing.reverse_lookup(hash_value, live_crd.group, live_crd.kind, live_crd.stored_versions)
    return found


def _stub(name, observation, profiles, target) -> ObservedResource:
    """An ObservedResource to hash candidates for, when no endpoint reports the resource."""
    gr = GroupResource.parse(name)
    crd = observation.crds.get(name) or (target.crd_manifests or {}).get(name)
    kind = crd.kind if crd else (profiles.kind_of(name) if profiles is not None else None) or ""
    return ObservedResource(name=name, group=gr.group, kind=kind, namespaced=False, storage_hash="")


def _should_serve(endpoint, name, profiles) -> bool:
    """Whether this apiserver's release is expected to serve ``name`` (unknown release: assume it is)."""
    if profiles is None or not endpoint.release or endpoint.release not in profiles:
        return True
    return profiles.get(endpoint.release).get(name) is not None


def gather_current(ev: Evidence, observation, profiles, target, ignore) -> None:
    """Every apiserver's current storage version, confined to the resource's own group's discovery."""
    serving = [ep for ep in observation.endpoints if ep.covers(ev.group, ignore) and ev.name in ep.resources]
    for ep in observation.endpoints:
        ev.current_versions[ep.endpoint] = None
        if not ep.reachable:
            continue  # reported once for the whole judgement, as a finding
        if not ep.covers(ev.group, ignore):
            ev.doubt(DOUBT_DISCOVERY, f"discovery of {', '.join(ep.failed_for(ev.group, ignore))} failed on apiserver "
                                      f"{ep.endpoint}, so what it writes for {ev.name} is not known")
            continue
        observed = ep.resources.get(ev.name)
        if observed is None:
            if serving and _should_serve(ep, ev.name, profiles):
                ev.doubt(DOUBT_AGREEMENT, f"apiserver {ep.endpoint} does not serve {ev.name} while others do")
            continue
        if observed.hash_mismatch:
            ev.doubt(DOUBT_AGREEMENT, f"apiserver {ep.endpoint} reports different storage hashes per served version "
                                      f"({', '.join(f'{v}: {h}' for v, h in observed.hash_mismatch.items())})")
            continue
        if observed.storage_hash:
            ev.current_hashes.append(observed.storage_hash)
            ev.current_versions[ep.endpoint] = lookup(observed.storage_hash, observed, profiles, observation, target)
            if target.release is not None and ep.release == target.release.release:
                ev.staying_hashes.append(observed.storage_hash)
                ev.staying_versions.add(ev.current_versions[ep.endpoint])
    if serving:
        ev.resource = serving[0].resources[ev.name]


def _record_hashes(ev: Evidence, record, record_max_age, now) -> List[str]:
    """The record's hashes, or Unknown (with the doubt that says why) when it cannot vouch."""
    if record is None:
        hashes = [UNKNOWN_HASH]
        ev.doubt(DOUBT_RECORD, f"no StorageState record for {ev.name}: objects written before it was recorded may be in "
                               "any version")
    elif record_max_age is not None and records.is_stale(record, now, record_max_age):
        hashes = [UNKNOWN_HASH]
        when = f"was last refreshed {record.last_heartbeat}" if record.last_heartbeat else "has no heartbeat (never refreshed)"
        ev.doubt(DOUBT_RECORD, f"the StorageState record for {ev.name} {when}, more than {record_max_age}s ago: versions "
                               "may have come and gone unseen")
    elif not record.persisted_hashes:
        hashes = [UNKNOWN_HASH]
        ev.doubt(DOUBT_RECORD, f"the StorageState record for {ev.name} lists no persisted versions at all (an empty "
                               "list is not a valid record), so it counts as Unknown")
    else:
        hashes = list(record.persisted_hashes)
        if UNKNOWN_HASH in hashes:
            ev.doubt(DOUBT_RECORD, f"the StorageState record for {ev.name} lists Unknown: objects may be in any version")
    return hashes


def gather_persisted(ev: Evidence, record, options, now, replaced: bool = False) -> None:
    """The hashes that may be persisted: measured in etcd when an audit read them, else the record's (Unknown
    when it cannot vouch); plus the current ones, which any apiserver may write from now on. Measured, and with a
    target release (``replaced``), what the apiservers the roll replaces write now is not counted: only what is
    stored and what the apiservers that stay write (the rolling upgrade audits again before each swap)."""
    hashes = measured.persisted_hashes(options.audit, ev.name)
    ev.measured_replaced = hashes is not None and replaced
    writers = ev.staying_hashes if ev.measured_replaced else ev.current_hashes
    if hashes is None and options.judged_before is not None and ev.name not in options.judged_before:
        # At the previous gate no apiserver served it and no record or CRD named it: every object of it was written
        # since, by the apiservers that serve it now (a resource new in the release a roll brings), in the versions
        # they report. A record created since then lists Unknown only because it was created.
        hashes = []
    elif hashes is None:
        hashes = _record_hashes(ev, record, options.record_max_age, now)
    elif UNKNOWN_HASH in hashes:
        ev.doubt(DOUBT_RECORD, measured.unreadable_text(options.audit, ev.name))
        ev.garbage = measured.garbage(options.audit, ev.name)
    for value in writers:
        if value not in hashes:
            hashes.append(value)
    ev.persisted_hashes = hashes


def explain_unmapped(hash_value, resource, profiles) -> str:
    """Why a hash maps to nothing: name what it does hash, when it is a served version's hash in the wrong group."""
    text = f"storage hash {hash_value} is no storage version of {resource.name} in any known release"
    if profiles is None or not profiles.known(resource.name) or not resource.kind:
        return text
    storage_group = profiles.storage_group_of(resource.name)
    for version in resource.served_versions or profiles.candidate_versions(resource.name):
        if hashing.storage_version_hash(resource.group, version, resource.kind) == hash_value and storage_group != resource.group:
            stored_as = f"{storage_group}/" if storage_group else "core "
            return (f"{text}: it is the hash of {resource.group}/{version} {resource.kind}, but {resource.name} is stored "
                    f"as {stored_as}{resource.kind} (a record written by a tool that hashed the served group)")
    return text


def map_persisted(ev: Evidence, profiles, observation, target) -> None:
    for value in ev.persisted_hashes:
        version = None if value == UNKNOWN_HASH else lookup(value, ev.resource, profiles, observation, target)
        if version is None:
            ev.unresolved.append(value)
            if value != UNKNOWN_HASH:
                ev.doubt(DOUBT_RECORD, explain_unmapped(value, ev.resource, profiles))
        else:
            ev.persisted_versions.add(version)
    live_crd = observation.crds.get(ev.name)
    if live_crd is not None:
        ev.persisted_versions |= set(live_crd.stored_versions)
    if not ev.current_hashes and any(ev.name in ep.resources for ep in observation.endpoints if ep.reachable):
        ev.doubt(DOUBT_AGREEMENT, f"no apiserver reports a storage hash for {ev.name}")


def gather(name, observation, target, profiles, options) -> Evidence:
    now = options.now or datetime.now(timezone.utc)
    ignore = observation.aggregated_group_versions()
    ev = Evidence(name=name, group=GroupResource.parse(name).group, resource=_stub(name, observation, profiles, target))
    gather_current(ev, observation, profiles, target, ignore)
    builtin = name not in observation.crds and name not in (target.crd_manifests or {})
    gather_persisted(ev, observation.storage_states.get(name), options, now, replaced=builtin and target.release is not None)
    map_persisted(ev, profiles, observation, target)
    return ev
