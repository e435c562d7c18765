# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What to migrate, with which backend, and how to read a migration's progress: pure decisions.

The I/O halves (``migrator.py``, ``cluster_driver.py``, ``runner.py``) ask this module which
resources to rewrite, which API to drive, what body to send, what a status document means and
whether a migration has stalled. Everything here takes plain data, so it is tested with the
recorded documents of real in-tree and kube-storage-version-migrator migrations (tests/fixtures/).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from ansible_collections.kubeupgrade.storage.plugins.module_utils import audit_result, hashing
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http import paths
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.model import ObservedCrd
from ansible_collections.kubeupgrade.storage.plugins.module_utils.resources import GroupResource

INTREE = "intree"
SIGS = "sigs"
CLIENT = "client"
AUTO = "auto"
BACKENDS = (AUTO, INTREE, SIGS, CLIENT)

INTREE_GROUP = "storagemigration.k8s.io"
INTREE_VERSIONS = ("v1", "v1beta1", "v1alpha1")  # preference order: newest API first
SIGS_GROUP = "migration.k8s.io"
SIGS_VERSION = "v1alpha1"
MIGRATIONS = paths.STORAGE_MIGRATION_RESOURCE
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "kubeupgrade.storage"

# Verdicts (strings of verdicts.py) that ask for a migration.
SELECT_VERDICTS = ("needs_migration", "unknown")

# Phases of one migration object, whatever its API flavour.
PENDING = "pending"  # no controller has touched it yet (status empty)
OBSERVED = "observed"  # a controller recorded the resourceVersion to migrate past, no condition yet
RUNNING = "running"
SUCCEEDED = "succeeded"
FAILED = "failed"


@dataclass
class BackendChoice:
    """The API that will run a migration: ``api_version`` is None for the client-side migrator."""

    backend: str
    api_version: Optional[str] = None
    reason: str = ""

    @property
    def version(self) -> Optional[str]:
        return self.api_version.rpartition("/")[2] if self.api_version else None


def choose_backend(served: Dict[str, List[str]], requested: str = AUTO) -> BackendChoice:
    """Pick the backend from what the cluster serves (``{group: [versions serving storageversionmigrations]}``).

    ``auto`` is the client-side migrator: it works on every cluster and is the fastest (measured
    against kube-apiserver 1.32: the in-tree controller took 40-80 s per resource waiting for its
    garbage-collector cache; client-side migrated 46 resources in 21 s). ``intree`` picks v1 >
    v1beta1 > v1alpha1. A forced backend that the cluster does not serve is an error the caller
    reports, not a silent fallback.
    """
    if requested not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {requested!r}")
    if requested in (AUTO, CLIENT):
        reason = "forced" if requested == CLIENT else "default: works on every cluster, fastest"
        return BackendChoice(CLIENT, None, f"built-in client-side migrator ({reason})")
    intree = [v for v in INTREE_VERSIONS if v in (served.get(INTREE_GROUP) or [])]
    sigs = SIGS_VERSION in (served.get(SIGS_GROUP) or [])
    if requested == INTREE and intree:
        return BackendChoice(INTREE, f"{INTREE_GROUP}/{intree[0]}",
                             f"the cluster serves {INTREE_GROUP}/{intree[0]} storageversionmigrations")
    if requested == INTREE:
        raise ValueError(f"backend=intree, but no apiserver serves {INTREE_GROUP} storageversionmigrations "
                         "(enable the StorageVersionMigrator feature gate and the API group), or use backend=client")
    if sigs:
        return BackendChoice(SIGS, f"{SIGS_GROUP}/{SIGS_VERSION}",
                             f"kube-storage-version-migrator's {SIGS_GROUP}/{SIGS_VERSION} CRDs are installed")
    raise ValueError(f"backend=sigs, but {SIGS_GROUP}/{SIGS_VERSION} storageversionmigrations is not served "
                     "(install kube-storage-version-migrator), or use backend=client")


# The kube-controller-manager's garbage collector ignores events, and the in-tree migrator walks the
# garbage collector's cache: its migrations of these resources fail with "resource not found"
# (recorded: svm-intree/17). They are migrated client-side instead.
INTREE_UNSUPPORTED = frozenset({"events", "events.events.k8s.io"})


def backend_for(choice: BackendChoice, resource: str) -> BackendChoice:
    """The backend for one resource: the cluster-wide choice, unless the in-tree migrator cannot do it."""
    if choice.backend == INTREE and resource in INTREE_UNSUPPORTED:
        return BackendChoice(CLIENT, None, f"built-in client-side migrator (the in-tree migrator cannot migrate {resource}:"
                                           " the garbage collector it relies on ignores events)")
    return choice


def served_migration_apis(discovery_docs: Dict[str, dict]) -> Dict[str, List[str]]:
    """``{group: [versions]}`` serving ``storageversionmigrations``, from legacy discovery documents keyed
    ``group/version`` (the StorageState CRD shares ``migration.k8s.io``, so the group alone proves nothing)."""
    served: Dict[str, List[str]] = {}
    for group_version, doc in discovery_docs.items():
        resources = [r.get("name") for r in (doc or {}).get("resources") or [] if isinstance(r, dict)]
        if MIGRATIONS in resources:
            group, _unused, version = group_version.rpartition("/")
            served.setdefault(group, []).append(version)
    return served


# -- selection -------------------------------------------------------------------------------------------------

RESOURCES = "resources"
FROM_CHECK = "from_check"
FROM_RECORDS = "from_records"
SELECT_MODES = (RESOURCES, FROM_CHECK, FROM_RECORDS)
# Modes decided from the other options (``resolve_select``), so a role passes its variables as they are.
SELECT_AUTO = "auto"
SELECT_AUTO_FROM_CHECK = "auto_from_check"
SELECT_CHOICES = SELECT_MODES + (SELECT_AUTO, SELECT_AUTO_FROM_CHECK)
SELECTED_NONE = "none"
STALE_REASON = ("not served by any apiserver: a record left from an earlier release; remove it with "
                "storage_state state=absent")


def resolve_select(select: str, resources_given: bool, objects_given: bool, target_release: Optional[str]) -> tuple:
    """``(mode, why)``: the selection mode ``select`` stands for, ``SELECTED_NONE`` when it selects nothing (``why``
    says so). ``auto``: the resources given (or the audit's objects), else every record not at the current version.
    ``auto_from_check``: what a check against ``target_release`` selects - the step after ``auto``'s records - only
    when a target release is given and no resources are named; otherwise nothing. Any other mode is itself."""
    if select == SELECT_AUTO:
        return (RESOURCES if resources_given or objects_given else FROM_RECORDS), ""
    if select != SELECT_AUTO_FROM_CHECK:
        return select, ""
    if resources_given:
        return SELECTED_NONE, "Nothing selected by a check: the resources named were migrated as asked."
    if not target_release:
        return SELECTED_NONE, "Nothing selected by a check: no target release to check against."
    return FROM_CHECK, ""


@dataclass
class Selection:
    selected: List[str] = field(default_factory=list)
    skipped: List[dict] = field(default_factory=list)  # [{resource, reason}]


@dataclass
class SelectionInput:
    """What selection looks at: the mode and its inputs, the records, CRDs and what the apiservers serve."""

    mode: str = RESOURCES
    requested: List[str] = field(default_factory=list)
    verdicts: List[dict] = field(default_factory=list)  # [{resource, verdict}] of a pre-flight (from_check)
    records: Dict[str, object] = field(default_factory=dict)  # StorageStateRecord by resource name
    crds: Dict[str, ObservedCrd] = field(default_factory=dict)
    current_hashes: Dict[str, Optional[str]] = field(default_factory=dict)  # the hash every apiserver agrees on
    served: Optional[set] = None  # names some reachable apiserver serves; None: not known, assume served


def already_migrated(record, current_hash: Optional[str]) -> bool:
    """True when the StorageState record proves every object is stored in the current version."""
    if record is None or not current_hash or current_hash == hashing.UNKNOWN:
        return False
    persisted = list(getattr(record, "persisted_hashes", None) or [])
    return persisted == [current_hash]


def crd_needs_pruning(crd: Optional[ObservedCrd]) -> bool:
    """A CRD whose ``status.storedVersions`` still lists more than its storage version."""
    return crd is not None and bool(crd.storage_version) and list(crd.stored_versions) != [crd.storage_version]


def record_needs_migration(record) -> bool:
    """A record whose persisted hashes are not exactly ``[current]`` (``Unknown``, several, or another)."""
    persisted = list(getattr(record, "persisted_hashes", None) or [hashing.UNKNOWN])
    current = getattr(record, "current_hash", None)
    return hashing.UNKNOWN in persisted or len(persisted) != 1 or persisted[0] != current


def _append(names: List[str], name: str) -> None:
    if name not in names:
        names.append(name)


def _candidates(given: SelectionInput, result: Selection) -> List[str]:
    names: List[str] = []
    if given.mode == RESOURCES:
        for name in given.requested:
            _append(names, GroupResource.parse(name).name)
    elif given.mode == FROM_CHECK:
        for verdict in given.verdicts:
            if verdict.get("verdict") in SELECT_VERDICTS:
                _append(names, verdict.get("resource"))
            else:
                result.skipped.append({"resource": verdict.get("resource"),
                                       "reason": f"pre-flight verdict is {verdict.get('verdict')}"})
    else:
        for name in sorted(given.records):
            if record_needs_migration(given.records[name]):
                _append(names, name)
        for name in sorted(given.crds):
            if len(given.crds[name].stored_versions or []) > 1:
                _append(names, name)
    return names


def select_resources(given: SelectionInput) -> Selection:
    """Resources to migrate, by mode: the explicit list; every pre-flight verdict ``needs_migration``/
    ``unknown``; or every StorageState record not exactly ``[current]`` and every CRD with more than one
    stored version. Minus records no apiserver serves (stale), and those whose record already says
    ``persisted == [current]`` with, for a CRD, ``storedVersions`` pruned (idempotence)."""
    result = Selection()
    for name in _candidates(given, result):
        current = given.current_hashes.get(name)
        stale = given.served is not None and name not in given.served
        if stale and (name in given.records or given.mode != RESOURCES):
            result.skipped.append({"resource": name, "reason": STALE_REASON})
        elif already_migrated(given.records.get(name), current) and not crd_needs_pruning(given.crds.get(name)):
            result.skipped.append({"resource": name,
                                   "reason": f"StorageState says every object is stored as {current} already"})
        else:
            result.selected.append(name)
    return result


# -- migration objects -----------------------------------------------------------------------------------------

def migration_body(api_version: str, group_resource: GroupResource, version: str) -> dict:
    """The migration object to create: v1alpha1 (in-tree and sigs) names a version, v1beta1/v1 do not."""
    resource = {"group": group_resource.group, "resource": group_resource.resource}
    if api_version.endswith("/v1alpha1"):
        resource["version"] = version
    return {
        "apiVersion": api_version,
        "kind": "StorageVersionMigration",
        "metadata": {"generateName": f"{group_resource.name}-", "labels": {MANAGED_BY_LABEL: MANAGED_BY}},
        "spec": {"resource": resource},
    }


def migration_path(api_version: str, name: Optional[str] = None) -> str:
    """The StorageVersionMigrations of ``api_version``, or one of them (the API layer's paths)."""
    return paths.storage_migration(api_version, name) if name else paths.storage_migrations(api_version)


@dataclass
class MigrationStatus:
    """A migration object's status reduced to what waiting needs; ``fingerprint`` changes iff it progressed."""

    phase: str
    reason: str = ""
    message: str = ""
    fingerprint: str = ""


def _condition(conditions: list, kind: str) -> Optional[dict]:
    for condition in conditions:
        if isinstance(condition, dict) and condition.get("type") == kind:
            return condition
    return None


def _is_true(condition: Optional[dict]) -> bool:
    return bool(condition) and str(condition.get("status")) == "True"


def read_status(obj: dict) -> MigrationStatus:
    """Phase of a StorageVersionMigration of any flavour.

    In-tree v1alpha1 uses ``lastUpdateTime`` and keeps ``Running=False`` next to the outcome; v1beta1/v1
    use ``metav1.Condition``; the sigs migrator has no ``reason`` and *replaces* ``Running`` by the
    outcome. Reading by condition type and status covers all three.
    """
    status = (obj or {}).get("status") or {}
    conditions = status.get("conditions") or []
    fingerprint = json.dumps(status, sort_keys=True)
    failed = _condition(conditions, "Failed")
    if _is_true(failed):
        return MigrationStatus(FAILED, failed.get("reason") or "", failed.get("message") or "", fingerprint)
    succeeded = _condition(conditions, "Succeeded")
    if _is_true(succeeded):
        return MigrationStatus(SUCCEEDED, succeeded.get("reason") or "", succeeded.get("message") or "", fingerprint)
    running = _condition(conditions, "Running")
    if _is_true(running):
        return MigrationStatus(RUNNING, running.get("reason") or "", running.get("message") or "", fingerprint)
    if status.get("resourceVersion"):
        return MigrationStatus(OBSERVED, "", "", fingerprint)
    return MigrationStatus(PENDING, "", "", fingerprint)


# kube-controller-manager 1.35 and later (storagemigration.k8s.io/v1beta1) finish a succeeded migration of a CRD's
# resource themselves: the svm controller's migration runner sets the CRD's condition StorageMigrating=False and its
# status.storedVersions to [storage version] (when the CRD's generation is the one it marked at the start), and only
# then marks the migration's Running condition done - 1.36.2 sets it False with reason MigrationCompleted, newer
# sources (pkg/controller/storageversionmigrator/migrationrunner.go) remove it. Until then the migration already says
# Succeeded (with Running still True), so a collection pruning on Succeeded alone would race the controller.
CONTROLLER_PRUNES_VERSIONS = ("v1beta1", "v1")
CONTROLLER_FINISHED_REASON = "MigrationCompleted"
CONTROLLER_MANAGER = "kube-controller-manager"


def controller_finishes_crds(api_version: Optional[str]) -> bool:
    """Whether the controller behind ``api_version`` finishes a CRD itself (storedVersions included)."""
    group, _unused, version = (api_version or "").partition("/")
    return group == INTREE_GROUP and version in CONTROLLER_PRUNES_VERSIONS


def finished_by_controller(obj: Optional[dict]) -> bool:
    """A succeeded or failed migration the controller is done with (see ``CONTROLLER_FINISHED_REASON``)."""
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    if not (_is_true(_condition(conditions, "Succeeded")) or _is_true(_condition(conditions, "Failed"))):
        return False
    running = _condition(conditions, "Running")
    return running is None or (not _is_true(running) and running.get("reason") == CONTROLLER_FINISHED_REASON)


def stall_reason(backend: str, status: MigrationStatus, seconds: float) -> str:
    """Why a migration that made no progress for ``seconds`` is considered stuck, and what to do."""
    waited = f"made no progress for {seconds:.0f}s"
    if backend == INTREE:
        if status.phase == PENDING:
            return (f"{waited}: its status stayed empty, so no controller picked it up. The in-tree controller leaves a "
                    "migration of a resource or version that does not exist pending forever; otherwise "
                    "kube-controller-manager does not run the 'svm' controller (feature gate StorageVersionMigrator, "
                    "--controllers=*,svm). Check the resource name, or use backend=client.")
        return (f"{waited} in phase {status.phase}: the in-tree controller waits for its garbage-collector cache or "
                "cannot list the resource; an object stored in a version the apiserver cannot decode makes every LIST "
                "fail with HTTP 500 and the controller never reports it. Run with backend=client to find the object.")
    if backend == SIGS:
        if status.phase == PENDING:
            return (f"{waited}: the kube-storage-version-migrator 'migrator' did not pick it up. It is not running, "
                    "or it is busy with another migration (it runs one at a time). Check its pod, or use backend=client.")
        return (f"{waited} while {status.phase}: kube-storage-version-migrator retries a failing LIST forever (for "
                "example HTTP 500 from an object stored in a version the apiserver cannot decode) and keeps reporting "
                "Running. Run with backend=client to name the failure.")
    return f"{waited}."


class StallDetector:
    """Remembers when a migration last changed; the caller passes the clock, so this stays pure."""

    def __init__(self, stall_timeout: float):
        self.stall_timeout = float(stall_timeout)
        self._last: Dict[str, Tuple[str, float]] = {}

    def observe(self, key: str, fingerprint: str, now: float) -> float:
        """Record a poll; return seconds since the fingerprint last changed."""
        last = self._last.get(key)
        if last is None or last[0] != fingerprint:
            self._last[key] = (fingerprint, now)
            return 0.0
        return now - last[1]

    def stalled(self, key: str, fingerprint: str, now: float) -> bool:
        return self.stall_timeout > 0 and self.observe(key, fingerprint, now) >= self.stall_timeout


# -- agreement, as the operator reads it ---------------------------------------------------------------------

def describe_disagreement(resource: str, agreement, expected: Optional[str] = None) -> str:
    """Which endpoints report what for ``resource`` (and which could not be asked)."""
    hashes = agreement.hashes.get(resource) or {}
    parts = [f"{endpoint}={value}" for endpoint, value in sorted(hashes.items())]
    text = f"storage hashes of {resource}: {', '.join(parts) or 'none reported'}"
    if expected and set(hashes.values()) - {expected}:
        text += f" (the migration targets {expected})"
    for label, endpoints in (("unreachable", agreement.unreachable), ("not ready", agreement.unready),
                             ("discovery incomplete", agreement.incomplete),
                             ("not served by", (agreement.missing or {}).get(resource))):
        if endpoints:
            text += f"; {label}: {', '.join(endpoints)}"
    return text


# -- object-level migration from an etcd audit -----------------------------------------------------------------

AUDIT_HINT = ("give the registered result of kubeupgrade.storage.storage_version_audit run with target_release "
              "(or readable_versions) and names_limit: -1")


@dataclass
class ObjectPlan:
    """The objects an audit found in a version its target cannot decode, per resource (``ns/name`` or ``name``).

    ``objects`` holds only resources with listed objects: a resource without any costs no request.
    """

    objects: Dict[str, List[str]] = field(default_factory=dict)
    skipped: List[dict] = field(default_factory=list)  # [{resource, reason}] of resources filtered out by ``resources``
    stored: Dict[str, int] = field(default_factory=dict)  # the objects the audit counted in each resource of ``objects``
    measured_at: str = ""
    rewrite_bytes: int = 0  # how much etcd's database grows with the rewrites (``rewrite_bytes``)
    space_warning: str = ""  # the rewrites bring etcd near its space quota


MIB = 1 << 20
# etcd's space quota when --quota-backend-bytes is not set (DefaultQuotaBytes, server/etcdserver/quota.go, 3.4 to 3.6).
DEFAULT_QUOTA = 2 * 1024 * MIB
REFUSE_SHARE, WARN_SHARE = 0.95, 0.75  # of the quota, the database after the rewrites


# How etcd 3.4 to 3.6 keeps a revision in bbolt: 4 KiB pages with a 16-byte header, 16 bytes per element, its key the
# 17-byte revision and its value the KeyValue (the etcd key, revisions and the object's value: ~100 bytes more than the
# object for /registry/ keys). A leaf node splits at 90% of a page (etcd's sequential puts) but keeps at least 2
# elements, so an object of 2-4 KiB takes a page of its own and one of 17 KiB takes 18 KiB.
PAGE, PAGE_HEADER, ELEMENT = 4096, 16, 16 + 17 + 100
SPLIT_AT, MIN_PER_NODE = 0.9, 2
# Measured against kube-apiserver 1.36 on etcd 3.5.30, rewriting 512 custom resources of 16 KiB: the database grew by
# 1.11x the pages above (branch pages, pages freed by a rewrite that a reader still holds, the apiserver's own writes).
GROWTH_MARGIN = 1.25


def database_growth(count: int, stored: int) -> int:
    """How much etcd's database grows when ``count`` objects of ``stored`` bytes in all are written again: each new
    revision takes its share of bbolt leaf pages (the old one stays until the apiserver compacts), with a margin.
    From 1.0x (large objects) to 2.1x (objects of 2 KiB) their bytes."""
    if count <= 0 or stored <= 0:
        return 0
    element = ELEMENT + -(-stored // count)
    per_node = max(MIN_PER_NODE, int((PAGE * SPLIT_AT - PAGE_HEADER) // element))
    pages = -(-(PAGE_HEADER + per_node * element) // PAGE)
    return int(count * pages * PAGE / per_node * GROWTH_MARGIN)


def rewrite_bytes(audit: dict, objects: Dict[str, List[str]]) -> int:
    """How much etcd's database grows when the objects of the versions the target cannot decode are rewritten, over
    the resources whose objects are: each rewrite keeps the old revision until the apiserver compacts
    (``database_growth`` of each version's count and stored bytes)."""
    total = 0
    for name in objects:
        entry = (audit.get("resources") or {}).get(name) or {}
        readable = {audit_result.version_of(v) for v in entry.get("readable_versions") or []}
        total += sum(database_growth(int(v.get("count") or 0), int(v.get("bytes") or 0)) for v in entry.get("versions") or []
                     if audit_result.version_of(v.get("api_version", "")) not in readable)
    return total


def etcd_room(audit: dict, added: int) -> Tuple[str, str]:
    """(why the rewrites must not start, a warning), each "" when it does not apply. The NOSPACE alarm etcd raises at
    its quota makes the whole cluster read-only until compaction, defragmentation and ``etcdctl alarm disarm``: a
    migration that would reach it is refused before its first write. Measured: the database size (etcd's status) and
    the quota (its metrics); an unread quota is etcd's default, said as such."""
    space = audit.get("etcd_space") or {}
    size = space.get("db_size")
    if not added or size is None:
        return "", ""
    quota, said = (space["quota"], "its quota") if space.get("quota") else (DEFAULT_QUOTA, "etcd's default quota (its metrics were not read)")
    after = size + added
    facts = (f"the rewrites grow etcd's database by about {added / MIB:.0f} MiB, from {size / MIB:.0f} MiB "
             f"({(space.get('db_size_in_use') or size) / MIB:.0f} MiB in use) of {said}, {quota / MIB:.0f} MiB")
    if after > REFUSE_SHARE * quota:
        return (f"etcd would reach its space quota: compact and defragment etcd, or raise --quota-backend-bytes, then re-run\n"
                f"Not started: {facts}. At the quota etcd raises its NOSPACE alarm and the whole cluster is read-only until "
                "compaction, defragmentation (etcdctl defrag) and etcdctl alarm disarm. The apiserver compacts every 5 minutes "
                "by default; a defragmentation then returns the freed space."), ""
    if after > WARN_SHARE * quota:
        return "", f"{facts}: {after / quota:.0%} of it after the migration, until the apiserver compacts and etcd is defragmented"
    return "", ""


def _check_audit(audit) -> Dict[str, dict]:
    """The audit parsed as every module parses one (a ConfigurationError naming objects_from_audit), then what an
    object-level migration needs of it: a target it was judged for (ValueError otherwise)."""
    resources = audit_result.parse(audit, option="objects_from_audit").resources
    if not any(e.get("judged") for e in resources.values()) and audit.get("not_readable") is None:
        raise ValueError(f"was not judged against a target, so it lists no object to migrate: {AUDIT_HINT}")
    return resources


def objects_from_audit(audit, requested: Optional[List[str]] = None) -> ObjectPlan:
    """The object-level plan: validated before any request. Raises ConfigurationError when the audit is not one;
    ValueError (the caller names the option) when it was not judged, or when a name list was cut at ``names_limit``
    (migrating only the first N would leave the rest behind while looking done)."""
    _check_audit(audit)
    listed = audit_result.objects_from_audit(audit)
    wanted = [GroupResource.parse(n).name for n in requested] if requested else None
    truncated = [n for n in audit_result.truncated_from_audit(audit) if wanted is None or n in wanted]
    if truncated:
        raise ValueError(f"lists only the first names of {', '.join(truncated)} (names_limit): run the audit with "
                         "names_limit: -1 so that every object is listed")
    result = ObjectPlan(measured_at=str(audit.get("measured_at") or ""))
    for name in sorted(listed):
        if wanted is not None and name not in wanted:
            result.skipped.append({"resource": name, "reason": "not in resources"})
        elif listed[name]:
            result.objects[name] = list(listed[name])
            result.stored[name] = int(((audit.get("resources") or {}).get(name) or {}).get("objects") or 0)
    result.rewrite_bytes = rewrite_bytes(audit, result.objects)
    refusal, result.space_warning = etcd_room(audit, result.rewrite_bytes)
    if refusal:
        raise SpaceError(refusal)
    return result


# A LIST page of the whole objects costs the apiserver far less per object than a GET of one (one request instead of
# one each: authentication, authorization, a read of etcd), so the named objects are found by LISTs of the resource once
# they are at least this share of it; fewer are read with a GET each (a few old objects among many, say).
LIST_SHARE = 0.25


def read_by_list(named: int, stored: int) -> bool:
    """Whether the named objects of a resource are read by LISTing it in chunks rather than with a GET each."""
    return named > 0 and named >= LIST_SHARE * stored


class SpaceError(ValueError):
    """The rewrites would bring etcd to its space quota (``etcd_room``)."""


def audit_listed_every_old_object(entry: Optional[dict], current_hash: Optional[str]) -> Tuple[bool, str]:
    """Whether rewriting the listed objects leaves only ``current_hash`` stored: every object in another version
    must be among the listed ones (stored in a version the target cannot decode), none unreadable, none cut."""
    if not entry or not current_hash:
        return False, "the audit has no entry for it"
    if entry.get("unreadable"):
        return False, f"{entry['unreadable']} stored values could not be read by the audit"
    if (entry.get("not_readable") or 0) > len(entry.get("not_readable_names") or []):
        return False, "the audit listed only the first names"
    readable = set(entry.get("readable_versions") or [])
    unlisted = [v["api_version"] for v in entry.get("versions") or []
                if v.get("hash") != current_hash and v.get("api_version", "").rpartition("/")[2] in readable]
    if unlisted:
        return False, (f"objects stored as {', '.join(unlisted)} are not current but the target can read them, so the "
                       "audit did not list them")
    return True, ""
