# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""StorageState bookkeeping (``migration.k8s.io/v1alpha1``), as kube-storage-version-migrator's trigger controller does it.

The record is the only memory of which storage versions objects *may* still be encoded in: the
apiserver forgets old storage versions as soon as it switches. So a record starts as ``["Unknown"]``
(we cannot know what older binaries wrote), every hash any apiserver reports is appended, and only a
completed migration shrinks it to ``[current]``. Here a run, not a controller loop, drives it, so a
re-run with nothing new must plan nothing (``unchanged``).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Dict, List, Optional

from ansible_collections.kubeupgrade.storage.plugins.module_utils import audit_result
from ansible_collections.kubeupgrade.storage.plugins.module_utils import resources as names
from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd.keys import SHARED_STORAGE
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.model import StorageStateRecord
from ansible_collections.kubeupgrade.storage.plugins.module_utils.hashing import UNKNOWN
from ansible_collections.kubeupgrade.storage.plugins.module_utils.resources import GroupResource

API_VERSION = "migration.k8s.io/v1alpha1"
KIND = "StorageState"
OBSERVED_HASHES_ANNOTATION = "storage.kubeupgrade.io/observed-hashes"

CREATE = "create"
UPDATE = "update"
UNCHANGED = "unchanged"

# The StorageState CRD as kubernetes-sigs/kube-storage-version-migrator manifests/storage_state_crd.yaml
# defines it (apiextensions.k8s.io/v1, cluster-scoped, status subresource); descriptions shortened.
STORAGE_STATE_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {
        "name": "storagestates.migration.k8s.io",
        "annotations": {"api-approved.kubernetes.io": "https://github.com/kubernetes/enhancements/pull/747"},
    },
    "spec": {
        "group": "migration.k8s.io",
        "names": {"kind": "StorageState", "listKind": "StorageStateList", "plural": "storagestates", "singular": "storagestate"},
        "preserveUnknownFields": False,
        "scope": "Cluster",
        "versions": [{
            "name": "v1alpha1",
            "served": True,
            "storage": True,
            "subresources": {"status": {}},
            "schema": {"openAPIV3Schema": {
                "description": "The state of the storage of a specific resource.",
                "type": "object",
                "properties": {
                    "apiVersion": {"type": "string"},
                    "kind": {"type": "string"},
                    "metadata": {"type": "object", "properties": {"name": {
                        "description": 'name must be "<.spec.resource.resource>.<.spec.resource.group>".', "type": "string"}}},
                    "spec": {
                        "description": "Specification of the storage state.",
                        "type": "object",
                        "properties": {"resource": {
                            "description": "The resource this storageState is about.",
                            "type": "object",
                            "properties": {"group": {"type": "string"}, "resource": {"type": "string"}},
                        }},
                    },
                    "status": {
                        "description": "Status of the storage state.",
                        "type": "object",
                        "properties": {
                            "currentStorageVersionHash": {
                                "description": "The hash value of the current storage version, as shown in the discovery document.",
                                "type": "string"},
                            "lastHeartbeatTime": {
                                "description": "Last time the storage version hash of this resource was checked in discovery.",
                                "type": "string", "format": "date-time"},
                            "persistedStorageVersionHashes": {
                                "description": 'Hashes of storage versions that persisted objects might still be encoded in; '
                                               '"Unknown" is valid and the default.',
                                "type": "array", "items": {"type": "string"}},
                        },
                    },
                },
            }},
        }],
    },
}


@dataclass
class RecordPlan:
    """What to do with one StorageState: ``create``, ``update`` or ``unchanged``, and why.

    ``annotations`` are set on the record (the others are kept); one whose value is None is removed.
    """

    action: str
    status: dict
    reasons: List[str] = field(default_factory=list)
    annotations: Dict[str, Optional[str]] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return self.action != UNCHANGED


def format_time(moment: datetime) -> str:
    """RFC 3339 in UTC with seconds, as Kubernetes writes ``metav1.Time``."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# One RFC 3339 reader for records and audits alike (an audit's measured_at is checked by the audit's parser).
parse_time = audit_result.parse_time


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def _unique(values) -> List[str]:
    seen = []
    for value in values:
        if value and value not in seen:
            seen.append(value)
    return seen


def current_hash(observed: Dict[str, str], existing_current: Optional[str] = None) -> Optional[str]:
    """The hash all endpoints agree on; if they disagree, keep the recorded one while some endpoint
    still reports it (no flapping mid-upgrade), else the hash most endpoints report."""
    hashes = [h for h in observed.values() if h]
    if not hashes:
        return existing_current or None
    distinct = _unique(hashes)
    if len(distinct) == 1:
        return distinct[0]
    if existing_current in distinct:
        return existing_current
    counts = Counter(hashes)
    return max(distinct, key=lambda h: (counts[h], -distinct.index(h)))


def _observed_annotation(observed: Dict[str, str]) -> str:
    return json.dumps({endpoint: observed[endpoint] for endpoint in sorted(observed) if observed[endpoint]}, sort_keys=True,
                      separators=(",", ":"))


def plan_record(existing: Optional[StorageStateRecord], observed: Dict[str, str], now: datetime,
                heartbeat_interval: int) -> RecordPlan:
    """Plan the StorageState for one resource from the hashes each endpoint reports now."""
    observed = {endpoint: value for endpoint, value in (observed or {}).items() if value}
    new_hashes = _unique(observed.values())
    annotation = _observed_annotation(observed)
    if existing is None:
        status = {
            "persistedStorageVersionHashes": _unique([UNKNOWN] + new_hashes),
            "currentStorageVersionHash": current_hash(observed) or "",
            "lastHeartbeatTime": format_time(now),
        }
        reasons = ["no StorageState yet: objects written before now may be in any version, so persisted starts as Unknown"]
        return RecordPlan(CREATE, status, reasons, {OBSERVED_HASHES_ANNOTATION: annotation})

    reasons = []
    persisted = list(existing.persisted_hashes) or [UNKNOWN]
    if not existing.persisted_hashes:
        reasons.append("persistedStorageVersionHashes was empty: reset to Unknown")
    added = [h for h in new_hashes if h not in persisted]
    if added:
        persisted = persisted + added
        reasons.append(f"newly observed storage hash(es) {', '.join(added)} appended to persistedStorageVersionHashes")
    current = current_hash(observed, existing.current_hash) or existing.current_hash or ""
    if current != (existing.current_hash or ""):
        reasons.append(f"currentStorageVersionHash {existing.current_hash or '(none)'} -> {current}")
    annotations = {OBSERVED_HASHES_ANNOTATION: annotation}
    if existing.annotations.get(OBSERVED_HASHES_ANNOTATION) != annotation:
        reasons.append("hashes reported per apiserver changed")
    heartbeat = existing.last_heartbeat
    last = parse_time(heartbeat)
    if reasons:
        heartbeat = format_time(now)
    elif last is None or _aware(now) - last >= timedelta(seconds=int(heartbeat_interval)):
        heartbeat = format_time(now)
        reasons.append(f"lastHeartbeatTime older than {heartbeat_interval}s" if last else "lastHeartbeatTime missing")
    status = {"persistedStorageVersionHashes": persisted, "currentStorageVersionHash": current, "lastHeartbeatTime": heartbeat}
    return RecordPlan(UPDATE if reasons else UNCHANGED, status, reasons, annotations)


def migrated_status(current_hash_value: str, now: datetime) -> dict:
    """Status after a completed migration: every object was rewritten, so only ``current`` is persisted."""
    return {
        "persistedStorageVersionHashes": [current_hash_value],
        "currentStorageVersionHash": current_hash_value,
        "lastHeartbeatTime": format_time(now),
    }


def migrated_annotations(existing: Optional[StorageStateRecord]) -> Dict[str, Optional[str]]:
    """The annotations a completed migration removes: after it, persisted is what the migration wrote, not what an
    audit measured, so a record set from an audit no longer says when and where it was measured (the next audit
    that finds ``[current]`` writes them again, from itself)."""
    found = (existing.annotations or {}) if existing else {}
    return {key: None for key in (MEASURED_AT_ANNOTATION, MEASURED_FROM_ANNOTATION) if key in found}


def storage_state_object(name: str, status: dict, annotations: Optional[dict] = None,
                         resource_version: Optional[str] = None) -> dict:
    """A StorageState object shaped like kube-storage-version-migrator's trigger writes it, named like its resource."""
    parsed = GroupResource.parse(name)
    group, resource = parsed.group, parsed.resource
    metadata = {"name": name}
    annotations = {key: value for key, value in (annotations or {}).items() if value is not None}
    if annotations:
        metadata["annotations"] = annotations
    if resource_version:
        metadata["resourceVersion"] = resource_version
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": metadata,
        "spec": {"resource": {"group": group, "resource": resource} if group else {"resource": resource}},  # trigger omits ""
        "status": dict(status),
    }


# The parser lives with the record's model in _observe (which reads the records); kept here by its old name.
record_from_object = StorageStateRecord.from_object


def is_stale(record: Optional[StorageStateRecord], now: datetime, max_age_seconds) -> bool:
    """True when nobody has refreshed the record for ``max_age_seconds``: in between, a storage version
    may have come and gone unseen, so its persisted list cannot be trusted (kube-storage-version-migrator's
    trigger controller recreates such a record)."""
    if record is None:
        return True
    if max_age_seconds is None:
        return False
    last = parse_time(record.last_heartbeat)
    if last is None:
        return True
    return (_aware(now) - last).total_seconds() > float(max_age_seconds)


# Whether a name is served is decided with the names (resources.py), for every module that takes names.
unserved = names.unserved


# --- records set from an etcd audit (measured, not remembered) ---------------------------------------------------

MEASURED_AT_ANNOTATION = "storage.kubeupgrade.io/measured-at"
MEASURED_FROM_ANNOTATION = "storage.kubeupgrade.io/measured-from"


@dataclass
class MeasuredRecord:
    """Persisted hashes of one resource as an audit found them, and when and where it looked."""

    persisted: List[str]
    measured_at: str
    source: str
    reasons: List[str] = field(default_factory=list)


@dataclass
class Measurement:
    """A validated ``storage_version_audit`` result, as records need it.

    ``covers_absent`` is True when a resource absent from the audit is known to have no object: the
    audit read the whole prefix (or ``audited`` names the resources it was limited to) and attributed
    every key to a resource. Otherwise an absent resource is not measured, and keeps its remembered record.
    """

    audit: dict
    measured_at: str
    source: str
    covers_absent: bool
    audited: Optional[set] = None  # the audit's ``resources`` filter, when it had one

    def measures(self, name: str) -> bool:
        if audit_entry(self.audit, name) is not None:
            return True
        if not self.covers_absent:
            return False
        return self.audited is None or name in self.audited

    def for_resource(self, name: str, current: Optional[str], observed: Dict[str, str]) -> Optional[MeasuredRecord]:
        """The measured record of ``name``, or None when the audit did not measure it (or no current hash is known).

        An apiserver reporting another hash than ``current`` right now may write objects in it after the
        measurement, so that hash is kept (fail closed while apiservers disagree).
        """
        if not current or current == UNKNOWN or not self.measures(name):
            return None
        persisted = audit_result.records_from_audit(self.audit, {name: current})[name]
        reasons = [f"measured in etcd ({self.source}) at {self.measured_at}: stored as {', '.join(persisted)}"]
        if UNKNOWN in persisted:
            reasons.append("some stored values could not be read, so Unknown stays (see the audit's unreadable_names)")
        writing = [h for h in _unique(observed.values()) if h != current and h not in persisted]
        if writing:
            persisted = persisted + writing
            reasons.append(f"an apiserver reports {', '.join(writing)} now and may write objects in it after the "
                           "measurement: kept")
        return MeasuredRecord(persisted, self.measured_at, self.source, reasons)


def audit_entry(audit: dict, name: str) -> Optional[dict]:
    """The audit's entry for a resource; ``events.events.k8s.io`` shares the core ``events`` keys."""
    found = audit.get("resources") or {}
    return found.get(name) or found.get(SHARED_STORAGE.get(name, ""))


def measurement_from_audit(audit, option: str = "audit") -> Measurement:
    """An audit result checked before any request (``audit_result.parse``: a ``ConfigurationError`` naming
    ``option`` otherwise), as records need it."""
    parsed = audit_result.parse(audit, option)
    filtered = bool(audit.get("filtered_out")) or parsed.audited is not None
    covers = not audit.get("outside_layout") and (not filtered or parsed.audited is not None)
    audited = set(parsed.audited) if parsed.audited is not None else None
    return Measurement(audit, format_time(parsed.measured_at), parsed.source, covers, audited)


def _newer_measurement(existing: Optional[StorageStateRecord], measured_at: str) -> Optional[str]:
    recorded = (existing.annotations or {}).get(MEASURED_AT_ANNOTATION) if existing else None
    when, this = parse_time(recorded), parse_time(measured_at)
    return recorded if when is not None and this is not None and when > this else None


def _measured_content_changes(existing: StorageStateRecord, status: dict, observed_annotation: str) -> List[str]:
    """What a measurement would change in what the record says, besides when and where it was measured."""
    changes = []
    if list(existing.persisted_hashes) != status["persistedStorageVersionHashes"]:
        changes.append("persistedStorageVersionHashes")
    if (existing.current_hash or "") != status["currentStorageVersionHash"]:
        changes.append("currentStorageVersionHash")
    if existing.annotations.get(OBSERVED_HASHES_ANNOTATION) != observed_annotation:
        changes.append("hashes reported per apiserver")
    if parse_time(existing.annotations.get(MEASURED_AT_ANNOTATION)) is None:
        changes.append("not set from an audit before")
    return changes


def plan_record_from_audit(existing: Optional[StorageStateRecord], observed: Dict[str, str], measured: MeasuredRecord,
                           now: datetime, heartbeat_interval: int) -> RecordPlan:
    """Plan one record from a measurement: persisted := what etcd holds, annotated with when and where it was read.

    A record already set from a newer measurement is not rolled back to an older one: it is planned from
    the apiservers' hashes as usual. A measurement that finds what the record already says (same persisted and
    current hashes, same hashes per apiserver, set from an audit before) confirms it: like an unchanged record
    of ``plan_record``, it is rewritten only when its ``lastHeartbeatTime`` is ``heartbeat_interval`` old, and
    then ``lastHeartbeatTime`` and the measured-at/-from annotations move together. Until then the record keeps
    the times of the run and the measurement that last wrote it (never a later look than it carries), and an
    audited run writes only what changed. A second run with the same audit plans nothing.
    """
    newer = _newer_measurement(existing, measured.measured_at)
    if newer:
        plan = plan_record(existing, observed, now, heartbeat_interval)
        plan.reasons.append(f"not set from this audit ({measured.measured_at}): the record was measured later, at {newer}")
        return plan
    observed = {endpoint: value for endpoint, value in (observed or {}).items() if value}
    observed_annotation = _observed_annotation(observed)
    annotations = {OBSERVED_HASHES_ANNOTATION: observed_annotation, MEASURED_AT_ANNOTATION: measured.measured_at,
                   MEASURED_FROM_ANNOTATION: measured.source}
    current = current_hash(observed, existing.current_hash if existing else None) or ""
    status = {"persistedStorageVersionHashes": list(measured.persisted), "currentStorageVersionHash": current,
              "lastHeartbeatTime": format_time(now)}
    if existing is None:
        return RecordPlan(CREATE, status, list(measured.reasons), annotations)
    if _measured_content_changes(existing, status, observed_annotation):
        return RecordPlan(UPDATE, status, list(measured.reasons), annotations)
    last = parse_time(existing.last_heartbeat)
    if last is not None and _aware(now) - last < timedelta(seconds=int(heartbeat_interval)):
        # Confirmed, not rewritten: the record keeps its heartbeat and the measurement that wrote it.
        status["lastHeartbeatTime"] = existing.last_heartbeat
        kept = {key: existing.annotations[key] for key in (MEASURED_AT_ANNOTATION, MEASURED_FROM_ANNOTATION)
                if key in existing.annotations}
        confirmed = (f"the audit at {measured.measured_at} found what the record says (set from the measurement at "
                     f"{existing.annotations.get(MEASURED_AT_ANNOTATION)}): not rewritten before its lastHeartbeatTime "
                     f"is {heartbeat_interval}s old")
        return RecordPlan(UNCHANGED, status, [confirmed], {OBSERVED_HASHES_ANNOTATION: observed_annotation, **kept})
    reason = f"lastHeartbeatTime older than {heartbeat_interval}s" if last else "lastHeartbeatTime missing"
    return RecordPlan(UPDATE, status, [f"{reason}: measured again in etcd ({measured.source}) at {measured.measured_at}, "
                                       "unchanged"], annotations)
