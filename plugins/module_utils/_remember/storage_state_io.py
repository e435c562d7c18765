# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read and write StorageState records (``migration.k8s.io/v1alpha1``), the I/O half of "remember".

The planning is in ``records.py``; here each plan is written with the record's ``resourceVersion``
so a concurrent writer (the sigs trigger, another run) is never overwritten: a 409 re-reads the
record and re-plans from what is there now, a bounded number of times. Status goes through the
``/status`` subresource because the main endpoint silently drops status changes. Records are independent of each
other, so they are written side by side (``RECORD_WRITERS``): a first run writes two requests for each of some 70
resources, and against a distant apiserver their round trips, one after the other, were most of the task.
"""

from __future__ import annotations

import functools
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable, Dict, List, Optional

from ansible_collections.kubeupgrade.storage.plugins.module_utils._http import paths
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.client import none_if_missing
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.poll import PollTimeout, poll_until
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.apiserver_io import read_storage_states
from ansible_collections.kubeupgrade.storage.plugins.module_utils._remember import records
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ApiError, ConfigurationError, KubeUpgradeError
from ansible_collections.kubeupgrade.storage.plugins.module_utils.hashing import UNKNOWN

# The API layer's paths, under the names callers import from here.
CRD_NAME = paths.STORAGE_STATE_CRD_NAME
CRD_PATH = paths.STORAGE_STATE_CRD
CRDS_PATH = paths.CRD_COLLECTION
STATES_PATH = paths.STORAGE_STATE_COLLECTION
CONFLICT_ATTEMPTS = 5
RECORD_WRITERS = 8  # records written at once (the client keeps one connection per thread)

CREATED = "created"
UPDATED = "updated"
UNCHANGED = "unchanged"
REMOVED = "removed"
_ACTION_WORDS = {records.CREATE: CREATED, records.UPDATE: UPDATED, records.UNCHANGED: UNCHANGED}


@dataclass
class RecordChange:
    """The outcome for one resource: what was (or in check mode would be) done, before and after."""

    name: str
    action: str  # created / updated / unchanged
    before: Optional[dict]
    after: Optional[dict]
    reasons: List[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"name": self.name, "action": self.action, "before": self.before, "after": self.after, "reasons": self.reasons}


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


def crd_installed(client) -> bool:
    return client.get_or_none(paths.STORAGE_STATE_CRD) is not None


def _established(crd: dict) -> bool:
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in (crd.get("status") or {}).get("conditions") or [])


@dataclass
class CrdWait:
    """How long to wait for a newly created CRD to be Established (clock and sleep injected for tests)."""

    timeout: float = 60.0
    interval: float = 0.2
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep


def ensure_crd(client, install: bool, check_mode: bool, wait: Optional[CrdWait] = None) -> bool:
    """Make sure the StorageState CRD exists; return True when it was (or would be) installed.

    Installing is opt-out because without the CRD no record can be kept; when ``install`` is false a
    missing CRD is one clear error.
    """
    if crd_installed(client):
        return False
    if not install:
        raise ConfigurationError(
            f"The StorageState CRD {CRD_NAME} is not installed, and install_crd is false. Install it (set install_crd: true, "
            "or apply kube-storage-version-migrator's manifests/storage_state_crd.yaml) and run again.")
    if check_mode:
        return True
    try:
        client.post(paths.CRD_COLLECTION, records.STORAGE_STATE_CRD)
    except ApiError as error:
        if error.status != 409:  # created meanwhile by someone else: fine
            raise
    wait = wait or CrdWait()
    try:
        poll_until(lambda: client.get(paths.STORAGE_STATE_CRD), _established, wait.timeout, wait.interval, wait.clock, wait.sleep)
    except PollTimeout:
        raise KubeUpgradeError(f"The StorageState CRD {CRD_NAME} was created but is not Established after {wait.timeout:g}s; "
                               "check the apiserver logs and run again.") from None
    return True


def read_records(client) -> Dict[str, dict]:
    """Every StorageState object by name (raw objects: their resourceVersion guards the writes)."""
    items = none_if_missing(lambda: client.list_all(paths.STORAGE_STATE_COLLECTION)) or []  # missing: no CRD, no record
    return {(obj.get("metadata") or {}).get("name", ""): obj for obj in items}


def _view(obj: Optional[dict]) -> Optional[dict]:
    """The part of a record an operator compares in a diff."""
    if obj is None:
        return None
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    view = {"status": dict(obj.get("status") or {})}
    if records.OBSERVED_HASHES_ANNOTATION in annotations:
        view["observed_hashes"] = annotations[records.OBSERVED_HASHES_ANNOTATION]
    for key, annotation in (("measured_at", records.MEASURED_AT_ANNOTATION), ("measured_from", records.MEASURED_FROM_ANNOTATION)):
        if annotation in annotations:
            view[key] = annotations[annotation]
    return view


def _get(client, name: str) -> Optional[dict]:
    return client.get_or_none(paths.storage_state(name))


def _write(client, name: str, existing: Optional[dict], plan) -> dict:
    """Create or update one record; raises ApiError 409 when someone else changed it first."""
    if existing is None:
        body = records.storage_state_object(name, plan.status, plan.annotations)
        created = client.post(paths.STORAGE_STATE_COLLECTION, body)
        # Status is ignored on create when the status subresource is enabled: write it separately.
        created["status"] = plan.status
        return client.put(paths.storage_state_status(name), created)
    current = existing
    annotations = (existing.get("metadata") or {}).get("annotations") or {}
    if any(annotations.get(k) != v for k, v in (plan.annotations or {}).items()):
        updated = dict(existing)
        metadata = dict(existing.get("metadata") or {})
        merged = {**annotations, **plan.annotations}
        metadata["annotations"] = {key: value for key, value in merged.items() if value is not None}
        updated["metadata"] = metadata
        current = client.put(paths.storage_state(name), updated)
    if (current.get("status") or {}) != plan.status:
        body = dict(current)
        body["status"] = plan.status
        current = client.put(paths.storage_state_status(name), body)
    return current


@dataclass
class ApplyOptions:
    """How records are planned and written: heartbeat, check mode, the clock, and optionally an audit."""

    heartbeat_interval: int = 600
    check_mode: bool = False
    now: Optional[datetime] = None
    measurement: Optional[records.Measurement] = None  # set records from this audit where it measured the resource


def _plan(name: str, obj: Optional[dict], observed: Dict[str, str], options: ApplyOptions, now: datetime) -> records.RecordPlan:
    record = records.record_from_object(obj) if obj is not None else None
    measured = None
    if options.measurement is not None:
        current = records.current_hash(observed, record.current_hash if record else None)
        measured = options.measurement.for_resource(name, current, observed)
    if measured is None:
        return records.plan_record(record, observed, now, options.heartbeat_interval)
    return records.plan_record_from_audit(record, observed, measured, now, options.heartbeat_interval)


def _apply_one(client, name: str, obj: Optional[dict], observed: Dict[str, str], options: ApplyOptions) -> RecordChange:
    """Plan and write one record; a 409 re-reads it and plans again from what is there now (bounded)."""
    now = options.now or _utcnow()
    for attempt in range(1, CONFLICT_ATTEMPTS + 1):
        plan = _plan(name, obj, observed, options, now)
        before = _view(obj)
        if not plan.changed:
            return RecordChange(name, UNCHANGED, before, before, list(plan.reasons))
        preview = records.storage_state_object(name, plan.status, plan.annotations)
        if options.check_mode:
            return RecordChange(name, _ACTION_WORDS[plan.action], before, _view(preview), list(plan.reasons))
        try:
            written = _write(client, name, obj, plan)
        except ApiError as error:
            if error.status != 409:
                raise
            if attempt == CONFLICT_ATTEMPTS:
                break
            obj = _get(client, name)
            continue
        return RecordChange(name, _ACTION_WORDS[plan.action], before, _view(written), list(plan.reasons))
    raise KubeUpgradeError(
        f"StorageState {name} kept changing while it was updated ({CONFLICT_ATTEMPTS} conflicts): another "
        "writer (the kube-storage-version-migrator trigger?) is updating it; stop it or run again.")


def apply_records(client, observed: Dict[str, Dict[str, str]], existing: Dict[str, dict], options: ApplyOptions) -> List[RecordChange]:
    """Plan and write each observed resource's record (with ``options.measurement`` set from the audit where it measured
    the resource), ``RECORD_WRITERS`` at a time; the changes in name order. A failure, met in name order, cancels the
    records not yet started and is raised once those under way are written."""
    names = sorted(observed)

    def one(name: str) -> RecordChange:
        return _apply_one(client, name, existing.get(name), observed[name], options)

    if options.check_mode or len(names) < 2:
        return [one(name) for name in names]
    # Executor.map yields in name order and, once a result raises, cancels the writes not yet started
    with ThreadPoolExecutor(max_workers=min(RECORD_WRITERS, len(names)), thread_name_prefix="record") as writers:
        return list(writers.map(one, names))


def mark_migrated(cluster_client, resource_name: str, current_hash: str, now=None, check_mode: bool = False) -> RecordChange:
    """After a completed migration every object is in ``current_hash``: persisted := [current].

    Written with resourceVersion; a 409 re-reads and retries (bounded). A missing record is created. A record set
    from an audit loses its measured-at/-from annotations: its persisted list is now the migration's, not a measurement.
    """
    if not current_hash or current_hash == UNKNOWN:
        raise KubeUpgradeError(f"cannot mark {resource_name} migrated without its current storage hash")
    now = now or _utcnow()
    for attempt in range(1, CONFLICT_ATTEMPTS + 1):
        obj = _get(cluster_client, resource_name)
        status = records.migrated_status(current_hash, now)
        if obj is not None and (obj.get("status") or {}).get("persistedStorageVersionHashes") == [current_hash] \
                and (obj.get("status") or {}).get("currentStorageVersionHash") == current_hash:
            return RecordChange(resource_name, UNCHANGED, _view(obj), _view(obj), ["already migrated"])
        dropped = records.migrated_annotations(records.record_from_object(obj) if obj is not None else None)
        reasons = ["migration completed"] + (["the measurement it was set from no longer describes it: measured-at "
                                              "and measured-from removed"] if dropped else [])
        plan = records.RecordPlan(records.CREATE if obj is None else records.UPDATE, status, reasons, dropped)
        if check_mode:
            after = records.storage_state_object(resource_name, status)
            return RecordChange(resource_name, _ACTION_WORDS[plan.action], _view(obj), _view(after), plan.reasons)
        try:
            written = _write(cluster_client, resource_name, obj, plan)
        except ApiError as error:
            if error.status == 409 and attempt < CONFLICT_ATTEMPTS:
                continue
            raise
        return RecordChange(resource_name, _ACTION_WORDS[plan.action], _view(obj), _view(written), plan.reasons)
    raise KubeUpgradeError(f"StorageState {resource_name} kept changing while it was marked migrated; run again.")


def observed_hashes(observation, resources=None) -> Dict[str, Dict[str, str]]:
    """{resource: {endpoint: hash}} from every reachable endpoint; resources with a contradictory hash are left out."""
    wanted = set(resources) if resources else None
    result: Dict[str, Dict[str, str]] = {}
    for ep in observation.endpoints:
        if not ep.reachable:
            continue
        for name, res in ep.resources.items():
            if wanted is not None and name not in wanted:
                continue
            if res.storage_hash:
                result.setdefault(name, {})[ep.endpoint] = res.storage_hash
    return result


def remove_records(client, names, existing: Dict[str, dict], check_mode: bool) -> List[RecordChange]:
    """Delete the named records, each guarded by the resourceVersion it was read with (409: changed meanwhile)."""
    changes = []
    for name in names:
        obj = existing.get(name)
        if obj is None:
            changes.append(RecordChange(name=name, action=UNCHANGED, before=None, after=None))
            continue
        if not check_mode:
            version = (obj.get("metadata") or {}).get("resourceVersion")
            body = {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"resourceVersion": version}}
            none_if_missing(functools.partial(client.delete, paths.storage_state(name), body=body))  # gone already: removed
        changes.append(RecordChange(name=name, action=REMOVED, before=_view(obj), after=None))
    return changes


@dataclass
class Refresh:
    """What ``refresh`` needs besides the observation: which records, CRD installation, heartbeat, check mode."""

    resources: Optional[List[str]] = None
    install_crd: bool = True
    heartbeat_interval: int = 600
    check_mode: bool = False
    measurement: Optional[records.Measurement] = None
    skip: frozenset = frozenset()  # records the caller writes itself (a migration marks what it migrated)
    installed_earlier: bool = False  # the caller installed the CRD and observed again after it, in this task


def refresh(cluster_client, observation, request: Refresh, reobserve: Callable[[], object], warn: Callable[[str], None]):
    """Bring the records up to date with ``observation`` (``storage_state state=present``; the check's
    ``refresh_records``): install the CRD when missing, create missing records, append newly observed
    hashes, renew old heartbeats. Returns (the storage_state result, the observation to go on with:
    ``reobserve()`` when the CRD was just installed, so its own record is written in this run too).
    """
    for ep in observation.endpoints:
        if not ep.complete:
            warn(f"{ep.error} - its storage hashes are not recorded in this run")
    if request.measurement is not None and not request.measurement.covers_absent:
        warn("the audit was limited to some resources or found keys outside the apiserver's key layout: resources "
             "it did not count keep their remembered records (Unknown for a new one)")
    installed = ensure_crd(cluster_client, request.install_crd, request.check_mode)
    if installed and not request.check_mode:
        observation = reobserve()
    installed = installed or request.installed_earlier
    existing = {} if (installed and request.check_mode) else read_records(cluster_client)
    observed = {name: hashes for name, hashes in observed_hashes(observation, request.resources).items()
                if name not in request.skip}
    for name in request.resources or []:
        if name not in observed:
            warn(f"no reachable apiserver reports a storage hash for {name}; its record is left as it is")
    options = ApplyOptions(request.heartbeat_interval, request.check_mode, measurement=request.measurement)
    changes = apply_records(cluster_client, observed, existing, options)
    changed_records = [c for c in changes if c.action != UNCHANGED]
    counts = {action: sum(1 for c in changes if c.action == action) for action in (CREATED, UPDATED, UNCHANGED)}
    result = {
        "changed": bool(changed_records) or installed,
        "records": [c.to_dict() for c in changes],
        "crd_installed": installed,
        "unreachable_endpoints": [e.endpoint for e in observation.endpoints if not e.reachable],
        "msg": (("would " if request.check_mode else "") + f"create {counts[CREATED]}, update {counts[UPDATED]} StorageState "
                f"record(s); {counts[UNCHANGED]} unchanged" + ("; StorageState CRD installed" if installed else "")),
        "diff": {"before": {c.name: c.before for c in changed_records}, "after": {c.name: c.after for c in changed_records}},
    }
    return result, observation


def unreachable_endpoints(observation) -> list:
    """The endpoints of ``observation`` that did not answer: while any is listed, no record is written."""
    return [ep.endpoint for ep in observation.endpoints if not ep.reachable]


def refreshable(observation) -> bool:
    """Whether ``refresh_before_use`` would write records from ``observation`` (every apiserver answered, fully)."""
    return not unreachable_endpoints(observation) and not observation.not_observed_message()


def install_before_refresh(module, observation, reobserve: Callable[[], object]):
    """Install a missing StorageState CRD now, for records written later in the task (``refresh_before_use`` with
    ``installed_earlier``): with the StorageVersionAPI gate, apiextensions-apiserver holds the writes to a new CRD's
    objects until it has published that CRD's StorageVersion, about 2 s from its creation, and work done meanwhile
    hides that wait. Only when the records will be written (not in check mode, every apiserver observed). Returns
    (installed, the observation to go on with: ``reobserve()`` when installed, so the CRD's own record is written)."""
    if module.check_mode or not refreshable(observation):
        return False, observation
    installed = ensure_crd(module.client(), install=True, check_mode=False)
    return installed, (reobserve() if installed else observation)


def refresh_before_use(module, observation, resources, reobserve: Callable[[], object], audit: Optional[dict] = None,  # noqa: PLR0913
                       *, skip=(), installed_earlier: bool = False):
    """The ``refresh_records`` option of the check and the migration: ``refresh`` with storage_state's defaults (with
    ``audit``, from its measurement, as storage_state's ``audit`` option), then the records read again into
    ``observation`` for the task to go on with. Nothing is recorded unless every apiserver answered: a record set from
    part of the control plane would miss what the others write (the task fails or blocks on the unreachable ones).
    ``skip`` names records the caller wrote itself; ``installed_earlier`` says it installed the CRD
    (``install_before_refresh``). Returns (what was done, or None; the observation)."""
    unreachable = unreachable_endpoints(observation)
    if unreachable:
        if len(unreachable) < len(observation.endpoints):
            module.warn(f"no StorageState record was refreshed: {', '.join(unreachable)} did not answer, and a record set "
                        "from part of the control plane could miss what the others store; they are refreshed once every "
                        "apiserver answers")
        return None, observation
    not_observed = observation.not_observed_message()
    if not_observed:
        module.warn(f"no StorageState record was refreshed: {not_observed}")
        return None, observation
    measured = records.measurement_from_audit(audit) if audit is not None else None
    request = Refresh(resources, check_mode=module.check_mode, measurement=measured, skip=frozenset(skip),
                      installed_earlier=installed_earlier)
    refreshed, observation = refresh(module.client(), observation, request, reobserve=reobserve, warn=module.warn)
    refreshed.pop("diff")
    if refreshed["changed"] and not module.check_mode:
        read_storage_states(module.client(), observation, resources)
    return refreshed, observation
