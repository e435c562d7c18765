# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What ``storage_migration`` calls: validate, observe, select, gate, lock, migrate, verify, record.

Order of events for each selected resource (several at a time, bounded by ``parallel_resources``):
take its Lease; read its StorageState record again (another run that held the Lease may have migrated
it meanwhile: then it is skipped); migrate (client-side loop, or a cluster-side migration object);
check that every apiserver still agrees on the hash; only then, and only when this run verified every
object with none failed, set its StorageState record to ``[current]`` and prune a CRD's storedVersions;
delete the succeeded migration object; release the Lease. With the in-tree API v1beta1 or later, the controller
(kube-controller-manager 1.35+) finishes a CRD's migration itself, storedVersions included: the collection waits for
it (``CONTROLLER_WAIT``) and prunes only what it left, and deletes the object only once it is done. One deadline
(``timeout``) bounds the whole
task. The bookkeeping requests (Lease, CRD, StorageState) go through the migration's own retry policy
and that deadline (``bookkeeping.bookkeeping_client``). A resource stops on its own Lease only: losing
one resource's Lease stops that resource, not the others of the task.
"""

from __future__ import annotations

import socket
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.poll import Deadline, PollTimeout, poll_until
from ansible_collections.kubeupgrade.storage.plugins.module_utils._migrate import bookkeeping, plan
from ansible_collections.kubeupgrade.storage.plugins.module_utils._migrate.cluster_driver import (
    ClusterMigrator,
    served_migration_apis,
)
from ansible_collections.kubeupgrade.storage.plugins.module_utils._migrate.lease import ResourceLease
from ansible_collections.kubeupgrade.storage.plugins.module_utils._migrate.progress import (
    STALLED_AFTER,
    Pace,
    StatusFile,
    StopSignal,
    finished_line,
    summary_table,
    worth_a_progress_line,
)
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.agreement import compare
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.apiserver_io import observe
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.target_crds import load_target_crds
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.wait import headline, next_step
from ansible_collections.kubeupgrade.storage.plugins.module_utils._remember import storage_state_io
from ansible_collections.kubeupgrade.storage.plugins.module_utils._rewrite import checkpoint as cp
from ansible_collections.kubeupgrade.storage.plugins.module_utils._rewrite import migrator as mig
from ansible_collections.kubeupgrade.storage.plugins.module_utils._rewrite import stored_versions_io
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import (
    ConfigurationError,
    DisagreementError,
    KubeUpgradeError,
    MigrationError,
)
from ansible_collections.kubeupgrade.storage.plugins.module_utils.profiles import load_profiles
from ansible_collections.kubeupgrade.storage.plugins.module_utils.resources import GroupResource

STARTED = "started"
WOULD_MIGRATE = "would_migrate"
FAILED = "failed"
DONE_MEANWHILE = "done_meanwhile"  # another run migrated and recorded it while this one waited: moved to skipped


@dataclass
class Run:
    """Everything one task shares across its resources."""

    mod: object
    params: dict
    deadline: Deadline
    select: str = "resources"  # the mode ``select`` stands for (plan.resolve_select); the parameter is left as given
    judge: Optional[Callable] = None  # (observation, release profile, CRD manifests, profiles) -> verdicts, for from_check
    clients: list = field(default_factory=list)
    cluster: object = None
    profiles: object = None
    manifests: object = None  # target CRD manifests, read before any request
    observation: object = None
    current: Dict[str, Optional[str]] = field(default_factory=dict)
    store: Optional[cp.CheckpointStore] = None
    identity: Optional[mig.RunIdentity] = None
    status: Optional[StatusFile] = None
    stop: Optional[StopSignal] = None
    objects: Optional[plan.ObjectPlan] = None  # objects_from_audit: only these objects are rewritten
    refreshed: Optional[dict] = None  # refresh_records: what was done to the records (before selecting; with
    # objects_from_audit after the rewrite)
    refresh_from: Optional[List[str]] = None  # refresh_records with objects_from_audit: the records to set (None: all)
    crd_installed: bool = False  # the StorageState CRD was installed by this task before the rewrite
    halted: Optional[str] = None  # a resource met what stops every resource (etcd's space alarm, rejected credentials)


# -- options ---------------------------------------------------------------------------------------------------

_MINIMUMS = (("timeout", 1), ("concurrency", 1), ("chunk_size", 1), ("poll_interval", 0.05),
             ("parallel_resources", 1), ("lock_duration", 5))


def check_params(params: dict, select: str) -> None:
    """Argument errors AnsibleModule cannot express, found before any request (``select``: the mode it stands for)."""
    if params.get("objects_from_audit") is not None:
        _check_object_mode(params, select)
    elif select == plan.RESOURCES and not params["resources"]:
        raise ConfigurationError("Set 'resources' (for example [secrets, widgets.example.com]), or select: "
                                 "from_records or from_check.")
    if select != plan.RESOURCES and params["resources"]:
        raise ConfigurationError(f"'resources' and select: {select} are mutually exclusive.")
    if select == plan.FROM_CHECK and not params.get("target_release") and not params.get("target_crds"):
        raise ConfigurationError("select: from_check needs 'target_release' and/or 'target_crds'.")
    check_values(params)


def check_values(params: dict) -> None:
    """The checks that hold whatever ``select`` stands for (names and numbers): also for a select that selects nothing."""
    for name in params["resources"]:
        try:
            GroupResource.parse(name)
        except ValueError as error:
            raise ConfigurationError(f"'resources': {error}") from None
    for name, low in _MINIMUMS:
        if params[name] < low:
            raise ConfigurationError(f"'{name}' must be at least {low}, got {params[name]}.")
    for name in ("qps", "stall_timeout", "max_failures"):
        if params[name] < 0:
            raise ConfigurationError(f"'{name}' must not be negative, got {params[name]}.")
    if 0 < params["qps"] < 0.01:
        raise ConfigurationError(f"'qps' {params['qps']} allows one request every {1 / params['qps']:.0f}s; "
                                 "give at least 0.01, or 0 for no limit.")


def _check_object_mode(params: dict, select: str) -> None:
    if select != plan.RESOURCES:
        raise ConfigurationError(f"objects_from_audit chooses what to migrate: it cannot be combined with select: "
                                 f"{select} (leave select at resources; resources then narrows it).")
    if params["backend"] not in (plan.AUTO, plan.CLIENT):
        raise ConfigurationError(f"objects_from_audit rewrites single objects, which only the client-side migrator can "
                                 f"do: use backend: client (or auto), not {params['backend']}.")


def object_plan(params: dict) -> Optional[plan.ObjectPlan]:
    """``objects_from_audit`` checked and planned before any request."""
    if params.get("objects_from_audit") is None:
        return None
    try:
        return plan.objects_from_audit(params["objects_from_audit"], params["resources"] or None)
    except plan.SpaceError as error:
        raise ConfigurationError(str(error)) from None
    except ValueError as error:
        raise ConfigurationError(f"objects_from_audit {error}.") from None


def _store(mod, params) -> cp.FileStore:
    directory = params.get("checkpoint_dir") or cp.default_directory(mod.tmpdir)
    store = cp.FileStore(directory)
    store.check_writable()
    return store


# -- observe and select ----------------------------------------------------------------------------------------

def _verdicts(run: Run) -> list:
    """The check's verdict on each resource, from the judge the module gives (the migration does not judge)."""
    params = run.params
    release = run.profiles.get(params["target_release"]) if params.get("target_release") else None
    return run.judge(run.observation, release, run.manifests, run.profiles)


def _served(observation) -> set:
    return {name for ep in observation.endpoints if ep.reachable for name, res in ep.resources.items()
            if res.storage_hash}


def _select(run: Run):
    params = run.params
    requested = [GroupResource.parse(n).name for n in params["resources"]]
    records = run.observation.storage_states
    if run.objects is not None:  # measured beats remembered: a record saying [current] does not skip listed objects
        requested, records = list(run.objects.objects), {}
    given = plan.SelectionInput(mode=run.select, requested=requested, records=records,
                                crds=run.observation.crds, served=_served(run.observation))
    if run.select == plan.FROM_CHECK:
        given.verdicts = _verdicts(run)
    first = plan.select_resources(given)  # which names to compare; the hashes decide idempotence below
    names = first.selected + [s["resource"] for s in first.skipped]
    agreement = compare(run.observation.endpoints, names or None, require_ready=True,
                        ignore=run.observation.aggregated_group_versions())
    run.current.update(_agreed_hashes(agreement, names))
    given.current_hashes = run.current
    return plan.select_resources(given), agreement


def _agreed_hashes(agreement, names: List[str]) -> Dict[str, Optional[str]]:
    """Each name's storage hash where every apiserver reports the same one, else None."""
    current = {}
    for name in names:
        values = set((agreement.hashes.get(name) or {}).values())
        current[name] = values.pop() if len(values) == 1 else None
    return current


def _require_agreement(selected: List[str], observation, current) -> None:
    """Each selected resource on its own: a record nothing serves any more, or a failed discovery of another
    group, must not hold back a resource every apiserver agrees on."""
    ignore = observation.aggregated_group_versions()
    for name in selected:
        agreement = compare(observation.endpoints, [name], require_ready=True, ignore=ignore)
        if not agreement.agreed or not current.get(name) or name in agreement.disagreeing:
            raise DisagreementError(
                f"Not starting the migration of {name}: {headline(agreement)} "
                f"({plan.describe_disagreement(name, agreement)}). {next_step(agreement, observation, ignore)}",
                details={"resource": name, "hashes": agreement.hashes.get(name) or {},
                         "unreachable": agreement.unreachable, "unready": agreement.unready})


# A CRD created a moment ago (the StorageState CRD, by this run's own record refresh) is served by one apiserver a
# moment before the others: the selected resources are observed again, this long at most, until every apiserver serves
# them; a disagreement of any other kind is not waited for.
ESTABLISH_GRACE = 30.0


def _served_everywhere(run_: Run, selected: List[str], clock=time.monotonic, sleep=time.sleep):
    """The observation the agreement before the migration is judged on: ``run_.observation``, or a fresh one of the
    selected resources once every apiserver serves them (the last one after ``ESTABLISH_GRACE``)."""

    def not_served(observation) -> bool:
        agreement = compare(observation.endpoints, selected, require_ready=True,
                            ignore=observation.aggregated_group_versions())
        return any(agreement.missing.get(name) for name in selected)

    if not not_served(run_.observation):
        return run_.observation
    grace = Deadline.after(ESTABLISH_GRACE, clock).earlier(run_.deadline)
    try:
        return poll_until(lambda: observe(run_.clients, run_.profiles, resources=selected, include=()),
                          lambda observation: not not_served(observation), grace,
                          max(0.05, run_.params["poll_interval"]), sleep=sleep)
    except PollTimeout as timeout:
        return timeout.last


# An apiserver that restarts (a rolling restart, a crash loop's first restart) refuses connections, is not ready,
# drops the connection in the middle of its discovery, or does not list a CRD yet, for a few seconds. The gate waits
# this long for it to answer again before it stops the migration.
UNREACHABLE_GRACE = 30.0


def _gate_check(run: Run, resource: str):
    observation = observe(run.clients, run.profiles, resources=[resource], include=())
    agreement = compare(observation.endpoints, [resource], require_ready=True, ignore=observation.aggregated_group_versions())
    return agreement, set((agreement.hashes.get(resource) or {}).values())


def gate_for(run: Run, resource: str, sleep=time.sleep, clock=time.monotonic):
    """A callable raising ``DisagreementError`` as soon as the endpoints stop agreeing on the hash.

    An endpoint that is only unreachable, unready, incompletely discovered or not (yet) serving the resource, while
    every answering one reports the expected hash, is waited for (``UNREACHABLE_GRACE``, within the task's deadline):
    the migration pauses, and goes on only once it answers with the same hash. Every apiserver served the resource
    when the migration began, so each of these is an apiserver coming back; it stops the migration if it lasts.
    """
    expected = run.current[resource]

    def settled(checked) -> bool:
        """Nothing to wait for: agreed, or a disagreement that no apiserver coming back can mend."""
        agreement, values = checked
        if agreement.agreed or not values <= {expected} or agreement.disagreeing:
            return True
        return not (agreement.unreachable or agreement.unready or agreement.incomplete
                    or (agreement.missing or {}).get(resource))

    def gate() -> None:
        grace = Deadline.after(UNREACHABLE_GRACE, clock).earlier(run.deadline)
        try:
            agreement, values = poll_until(lambda: _gate_check(run, resource), settled, grace,
                                           max(0.05, run.params["poll_interval"]), sleep=sleep)
        except PollTimeout as timeout:
            agreement, values = timeout.last
        if not agreement.agreed or values != {expected}:
            raise DisagreementError(
                f"Migration of {resource} stopped: the apiservers stopped agreeing "
                f"({plan.describe_disagreement(resource, agreement, expected)}). An apiserver writing another storage "
                "version would undo the migration. Finish or roll back the upgrade so that every apiserver agrees, "
                "then re-run.",
                details={"resource": resource, "hashes": agreement.hashes.get(resource) or {},
                         "unreachable": agreement.unreachable, "unready": agreement.unready})
    return gate


# -- one resource ----------------------------------------------------------------------------------------------

def _version(run: Run, name: str, crd: Optional[dict]):
    observed = next((ep.resources[name] for ep in run.observation.endpoints if name in ep.resources), None)
    if observed is None:
        raise MigrationError(f"No apiserver serves {name}; check the resource name.", details={"resource": name})
    served = observed.served_versions
    version = observed.storage_version if observed.storage_version in served else (served[0] if served else None)
    if crd is not None:
        storage = [v.get("name") for v in (crd.get("spec") or {}).get("versions") or [] if v.get("storage")]
        version = storage[0] if storage and storage[0] in served else version
    if not version:
        raise MigrationError(f"{name} has no served version to migrate through.", details={"resource": name})
    return observed, version


def _client_side(run: Run, name: str, entry: dict, crd: Optional[dict], should_stop: Callable[[], Optional[str]]) -> None:
    observed, version = _version(run, name, crd)
    params = run.params
    target = mig.ResourceTarget(GroupResource.parse(name), version, namespaced=observed.namespaced,
                                kind=observed.kind, storage_hash=run.current[name])
    options = mig.ClientOptions(chunk_size=params["chunk_size"], concurrency=params["concurrency"], qps=params["qps"],
                                max_failures=params["max_failures"], write=params["write"])
    pace = Pace(name, stalled_after=max(STALLED_AFTER, 3.0 / params["qps"]) if params["qps"] else STALLED_AFTER)

    def on_progress(progress) -> None:
        run.status.running_line(name, pace.line(progress.objects_migrated, progress.objects_migrated
                                                + (progress.objects_remaining or 0)))

    hooks = mig.Hooks(gate=gate_for(run, name), gate_interval=params["poll_interval"], should_stop=should_stop,
                      on_progress=on_progress)
    if run.objects is not None:
        listed = mig.ObjectListMigrator(run.cluster, target, options, run.identity, None)
        _listed_objects(run, name, entry, listed.configure(run.deadline, hooks))
        return
    migrator = mig.ClientMigrator(run.cluster, target, options, run.identity, run.store)
    migrator.configure(run.deadline, hooks)
    ticking = _tick(run, name, pace, migrator)
    try:
        progress = migrator.run()
    finally:
        ticking.set()
        _counters(entry, migrator.progress)
        _warn_fallback(run, name, migrator.progress)
    entry["verified"] = progress.verified
    entry["status"] = plan.SUCCEEDED if progress.verified else FAILED


def _tick(run: Run, name: str, pace: Pace, migrator) -> threading.Event:
    """Between chunks too, the running line follows the counters; once nothing is written for a while it says the
    migration is stalled and why (an etcd outage behind the apiserver), not a rate of the past. Set the event to stop."""
    done = threading.Event()

    def tick() -> None:
        while not done.wait(run.status.interval):
            counters = migrator.progress
            total = counters.objects_listed + (counters.objects_remaining or 0)
            run.status.running_line(name, pace.line(counters.objects_migrated, total, migrator.stall_reason()))

    threading.Thread(target=tick, daemon=True).start()
    return done


def _counters(entry: dict, counters) -> None:
    entry.update(objects_migrated=counters.objects_migrated, objects_remaining=counters.objects_remaining,
                 objects_failed=counters.failed, failed_objects=list(counters.failures),
                 progress=mig.progress_fields(counters))


# A rewrite keeps every object's previous value in etcd until the next compaction; above this, say so (etcd's
# --quota-backend-bytes is 2 GiB by default, and its space alarm makes the whole cluster read-only).
REWRITE_WARN_BYTES = 256 * 1024 * 1024


def _warn_fallback(run: Run, name: str, counters) -> None:
    if counters.write_fallback:
        run.mod.warn(f"{name}: {counters.write_fallback}")
    if (counters.bytes_to_rewrite or 0) >= REWRITE_WARN_BYTES:
        run.mod.warn(f"{name}: rewriting it adds about {counters.bytes_to_rewrite // 2 ** 20} MiB to etcd until its "
                     "next compaction (the first chunk's size per object times the objects listed). Before such a "
                     "migration, compare it with etcd's free space: `etcdctl endpoint status -w table` (DB SIZE) "
                     "against --quota-backend-bytes (2 GiB when not set); compact and defragment first, or raise the "
                     "quota, else etcd's space alarm makes the whole cluster read-only.")


def _listed_objects(run: Run, name: str, entry: dict, migrator) -> None:
    """Rewrite only the objects the audit listed; ``verified`` (the record may say [current]) also needs the
    audit to have listed every object of the resource stored in a non-current version."""
    names = run.objects.objects[name]
    entry["objects_from_audit"] = len(names)
    listing = plan.read_by_list(len(names), run.objects.stored.get(name, 0))
    entry["read_by"] = "list" if listing else "get"
    try:
        progress = migrator.run_listed(names) if listing else migrator.run_objects(names)
    finally:
        _counters(entry, migrator.progress)
        _warn_fallback(run, name, migrator.progress)
    complete, why = plan.audit_listed_every_old_object(run.params["objects_from_audit"]["resources"].get(name),
                                                       run.current[name])
    entry["status"] = plan.SUCCEEDED if progress.verified else FAILED
    entry["verified"] = progress.verified and complete
    if progress.verified and not complete:
        entry["record"] = f"skipped: the listed objects were rewritten, but {why}; migrate the whole resource to record it"
        run.mod.warn(f"{name}: StorageState record {entry['record']}")


def _cluster_side(run: Run, name: str, entry: dict, choice: plan.BackendChoice) -> Optional[ClusterMigrator]:
    _observed, version = _version(run, name, None)
    driver = ClusterMigrator(run.cluster, choice, poll_interval=run.params["poll_interval"],
                             stall_timeout=run.params["stall_timeout"])
    entry["name"] = driver.create(GroupResource.parse(name), version)
    if not run.params["wait"]:
        entry["status"] = STARTED
        return None
    driver.wait(entry["name"], name, run.deadline, gate=gate_for(run, name), progress=entry)
    entry["status"] = plan.SUCCEEDED
    entry["verified"] = True  # the controller went over every object and reported success
    return driver


@dataclass
class Resource:
    """What one resource's migration carries besides the task: its bookkeeping client, its Lease and stop signal."""

    name: str
    books: object  # bookkeeping.bookkeeping_client: retried, bounded by the task's deadline
    lease: Optional[ResourceLease] = None

    def stop_reason(self, run: Run) -> Optional[str]:
        """Why this resource must stop: the task's signal (the playbook is gone), or its own Lease lost."""
        why = run.stop() if run.stop is not None else None
        return why or run.halted or (self.lease.lost if self.lease is not None and self.lease.lost else None)


# How long, after a succeeded in-tree v1beta1+ migration of a CRD's resource, to wait for kube-controller-manager to
# finish it (the CRD's storedVersions and StorageMigrating condition); it takes milliseconds when it runs.
CONTROLLER_WAIT = 30.0


def _controller_finished(run: Run, driver: Optional[ClusterMigrator], entry: dict, crd: Optional[dict]) -> Optional[bool]:
    """Whether the controller finished the succeeded migration of a CRD's resource itself; None when its API leaves
    the CRD to the collection (client, sigs, in-tree v1alpha1) or the resource is built in."""
    if driver is None or crd is None or not plan.controller_finishes_crds(driver.choice.api_version):
        return None
    if driver.wait_finished(entry["name"], run.deadline, CONTROLLER_WAIT):
        return True
    run.mod.warn(f"{entry['resource']}: kube-controller-manager did not finish {driver.choice.api_version} "
                 f"StorageVersionMigration {entry['name']} within {CONTROLLER_WAIT:g}s of its success (the CRD's "
                 "condition StorageMigrating stays True until it does); the collection prunes storedVersions itself "
                 "and leaves the migration object for the controller.")
    return False


def _record(run: Run, res: Resource, entry: dict, crd: Optional[dict], controller_finished: Optional[bool] = None) -> None:
    """Only a verified migration, checked again against the apiservers' agreement, changes a record."""
    name = res.name
    if not entry.get("verified"):
        return
    gate_for(run, name)()
    why = res.stop_reason(run)
    if why:
        raise mig.Stopped(f"Migration of {name} finished but was not recorded: {why}", details={"resource": name})
    if run.params["update_records"]:
        entry["record"] = bookkeeping.mark_migrated(res.books, name, run.current[name])
        if entry["record"].startswith("skipped"):
            run.mod.warn(f"{name}: StorageState record {entry['record']}; a re-run will migrate it again.")
    entry["stored_versions"] = None
    entry["stored_versions_pruned_by"] = None
    if crd is None:
        return
    if controller_finished and bookkeeping.pruned_by_controller(res.books, crd):
        entry["stored_versions_pruned_by"] = plan.CONTROLLER_MANAGER  # one write of storedVersions, the controller's
    elif run.params["prune_crd_stored_versions"]:
        entry["stored_versions"] = stored_versions_io.prune_stored_versions(res.books, crd)
        entry["stored_versions_pruned_by"] = plan.MANAGED_BY if entry["stored_versions"] else None


def _done_meanwhile(run: Run, res: Resource, entry: dict, crd: Optional[dict]) -> bool:
    """Under the Lease, before any write: did a run that held it record this resource as migrated since we looked?
    (Not for objects_from_audit: a measurement beats a record there, as in the selection.)"""
    if res.lease is None or run.objects is not None:
        return False
    if not bookkeeping.migrated_meanwhile(res.books, res.name, run.current[res.name], crd):
        return False
    current = run.current[res.name]
    if res.lease.waited_for:
        entry["reason"] = (f"migrated by another run while this one waited for its Lease (held by "
                           f"{res.lease.waited_for}): StorageState says every object is stored as {current} already")
    else:
        entry["reason"] = (f"migrated by another run since this one looked: StorageState says every object is stored "
                           f"as {current} already")
    entry["status"] = DONE_MEANWHILE
    return True


def _migrate_locked(run: Run, res: Resource, entry: dict, choice: plan.BackendChoice) -> None:
    name = res.name
    crd = bookkeeping.crd_or_none(res.books, name) if GroupResource.parse(name).group else None
    if _done_meanwhile(run, res, entry, crd):
        return
    driver = None
    if choice.backend == plan.CLIENT:
        _client_side(run, name, entry, crd, lambda: res.stop_reason(run))
    else:
        driver = _cluster_side(run, name, entry, choice)
    if entry["status"] == plan.SUCCEEDED:
        finished = _controller_finished(run, driver, entry, crd)
        _record(run, res, entry, crd, finished)
        if driver is not None and not run.params["keep_migration_objects"]:
            # Deleted before the controller finished it, it would never finish the CRD (StorageMigrating stays True).
            entry["migration_object_deleted"] = finished is not False and driver.delete(entry["name"])


def migrate_resource(run: Run, name: str, choice: plan.BackendChoice) -> dict:
    """Lock, migrate and record one resource; a failure is reported in its entry, not raised."""
    entry = {"resource": name, "backend": choice.backend, "api_version": choice.api_version, "name": None,
             "status": "running", "storage_hash": run.current[name], "record": None}
    started = time.monotonic()
    res = Resource(name, bookkeeping.bookkeeping_client(run.cluster, run.deadline))
    try:
        if run.halted:
            raise mig.Stopped(f"Migration of {name} not started: {run.halted}", details={"resource": name})
        if run.params["lock"]:
            # Its own bookkeeping client: the renewal runs in another thread.
            res.lease = ResourceLease(bookkeeping.bookkeeping_client(run.cluster, run.deadline), name,
                                      f"{run.identity.run_id}@{socket.gethostname()}",
                                      duration=int(run.params["lock_duration"]))
            res.lease.on_wait = lambda line: run.status.running_line(name, line)  # whose Lease, and until when
            res.lease.acquire(run.deadline)
            entry["lease"] = res.lease.name
        _migrate_locked(run, res, entry, choice)
    except KubeUpgradeError as error:
        entry["status"] = FAILED
        entry["error"] = str(error)
        if isinstance(error, mig.Halted):
            run.halted = run.halted or f"the migration of {name} stopped at once (see its error)"
    finally:
        if res.lease is not None:
            res.lease.release()
        entry["seconds"] = round(time.monotonic() - started, 3)
        if entry["status"] == DONE_MEANWHILE:
            run.status.finished_line(name, f"{name}: skipped, {entry['reason']}")
        else:
            run.status.finished_line(name, finished_line(entry) if worth_a_progress_line(entry) else None)
    return entry


# -- the task --------------------------------------------------------------------------------------------------

def _prepare(mod, select: str, judge: Optional[Callable]) -> Run:
    params = mod.params
    check_params(params, select)
    deadline = Deadline.after(params["timeout"])
    run = Run(mod=mod, params=params, deadline=deadline, select=select, judge=judge)
    run.store = _store(mod, params)
    run.status = StatusFile(params.get("progress_file"))
    run.stop = StopSignal(params.get("progress_file"))
    run.profiles = load_profiles(params.get("profiles_file"), params.get("profiles"))
    if params.get("target_release"):
        run.profiles.get(params["target_release"])  # an unknown release is named before any request
    run.manifests = load_target_crds(params["target_crds"]) if params.get("target_crds") else None
    run.objects = object_plan(params)
    if run.objects is not None and run.objects.space_warning:
        mod.warn(run.objects.space_warning)
    run.clients = mod.endpoint_clients()
    run.cluster = mod.client()
    run.identity = mig.RunIdentity(run_id=uuid.uuid4().hex[:12], cluster=run.cluster.endpoint)
    requested = [GroupResource.parse(n).name for n in params["resources"]] or None
    if run.objects is not None and not params.get("refresh_records"):
        requested = list(run.objects.objects)
        if not requested:
            return run  # nothing listed: no request at all

    def observe_now():
        return observe(run.clients, run.profiles, resources=requested, include=("crds", "storage_states"),
                       cluster_client=run.cluster)

    run.observation = observe_now()
    if params.get("refresh_records") and run.objects is None:
        run.refreshed, run.observation = storage_state_io.refresh_before_use(mod, run.observation, requested,
                                                                             reobserve=observe_now)
    elif params.get("refresh_records"):
        # The records are set from the audit after the rewrite (those it marks [current] left to it); the CRD is
        # installed first, so the apiserver's wait before a new CRD's first writes passes during the rewrite.
        run.refresh_from = requested
        run.crd_installed, run.observation = storage_state_io.install_before_refresh(mod, run.observation, observe_now)
    return run


def _refresh_from_audit(run: Run, marked) -> None:
    """``refresh_records`` with ``objects_from_audit``: every record the task did not mark [current] is set from the
    audit's measurement, as storage_state's ``audit`` option sets it (a failed or unsettled resource included)."""
    if not run.params.get("refresh_records") or run.objects is None:
        return
    run.refreshed, run.observation = storage_state_io.refresh_before_use(
        run.mod, run.observation, run.refresh_from, reobserve=lambda: run.observation,
        audit=run.params["objects_from_audit"], skip=marked, installed_earlier=run.crd_installed)


def _marked(entries: List[dict]) -> set:
    """The resources whose record this task set to [current]."""
    return {e["resource"] for e in entries if e.get("record") and not str(e["record"]).startswith("skipped")}


def _choose(run: Run) -> plan.BackendChoice:
    try:
        return plan.choose_backend(served_migration_apis(run.cluster) if run.params["backend"] in (plan.INTREE, plan.SIGS)
                                   else {}, run.params["backend"])
    except ValueError as error:
        raise ConfigurationError(str(error)) from None


def _message(migrations: List[dict], choice: plan.BackendChoice) -> str:
    done = [m["resource"] for m in migrations if m["status"] == plan.SUCCEEDED]
    started = [m["resource"] for m in migrations if m["status"] == STARTED]
    parts = []
    if done:
        parts.append(f"Migrated {', '.join(done)} with the {choice.backend} backend.")
    if started:
        parts.append(f"Started the migration of {', '.join(started)} with the {choice.backend} backend "
                     "(wait: false: nothing is recorded until a run waits for it).")
    return " ".join(parts)


# The keys every result has, failed or not (the module's failure contract fills them in).
EMPTY_RESULT = {"migrations": [], "skipped_resources": [], "stale_records": [], "summary": []}


def run(mod, judge: Optional[Callable] = None) -> dict:
    """The module's whole task; returns its result (with ``selected_by``, the mode ``select`` stood for) or raises
    ``KubeUpgradeError`` with the same keys in details. A ``select`` that selects nothing sends no request. ``judge``
    gives the check's verdicts for ``from_check`` (the module passes the judge's; the migration imports no check)."""
    params = mod.params
    check_values(params)
    mode, why = plan.resolve_select(params["select"], bool(params["resources"]), params.get("objects_from_audit") is not None,
                                    params.get("target_release"))
    if mode == plan.SELECTED_NONE:
        return {"changed": False, "migrations": [], "skipped_resources": [], "stale_records": [], "summary": [],
                "selected_by": mode, "msg": why}
    if mode == plan.FROM_CHECK and judge is None:
        raise ConfigurationError("select: from_check needs the check's judge, which this caller did not give")
    result = _run(mod, mode, judge)
    result["selected_by"] = mode
    return result


def _run(mod, select: str, judge: Optional[Callable]) -> dict:
    run_ = _prepare(mod, select, judge)
    if run_.objects is not None and not run_.objects.objects:
        _refresh_from_audit(run_, marked=set())
        return _with_refresh(run_, {
            "changed": False, "migrations": [], "skipped_resources": run_.objects.skipped, "summary": [],
            "stale_records": [], "msg": "Nothing to migrate: the audit lists no object stored in a version its target "
                                        "cannot decode."})
    selection, agreement = _select(run_)
    skipped = (run_.objects.skipped if run_.objects else []) + selection.skipped
    result = {"changed": False, "migrations": [], "skipped_resources": skipped,
              "summary": [], "stale_records": [s["resource"] for s in selection.skipped if s["reason"] == plan.STALE_REASON]}
    if not selection.selected:
        _refresh_from_audit(run_, marked=set())
        result["msg"] = "Nothing to migrate."
        result["summary"] = summary_table([], selection.skipped)
        return _with_refresh(run_, result)
    _require_agreement(selection.selected, _served_everywhere(run_, selection.selected), run_.current)
    choice = _choose(run_)
    result["backend"] = {"backend": choice.backend, "api_version": choice.api_version, "reason": choice.reason}
    if mod.check_mode:
        # What would be marked [current] is the migration's record, not the audit's.
        _refresh_from_audit(run_, marked=set(selection.selected) if run_.params["update_records"] else set())
        return _would_migrate(run_, selection, choice, _with_refresh(run_, result))
    with ThreadPoolExecutor(max_workers=run_.params["parallel_resources"]) as pool:
        futures = [pool.submit(migrate_resource, run_, n, plan.backend_for(choice, n)) for n in selection.selected]
        entries = [f.result() for f in futures]
    _refresh_from_audit(run_, marked=_marked(entries))
    return _migrated(run_, (selection, choice, entries), _with_refresh(run_, result, entries))


def _with_refresh(run_: Run, result: dict, entries: Sequence[dict] = ()) -> dict:
    """``result`` with what ``refresh_records`` did to the records, and changed when it wrote any; with
    ``objects_from_audit``, also what it leaves for a migration from the records."""
    if run_.refreshed is not None:
        result["records_refreshed"] = run_.refreshed
        result["changed"] = result["changed"] or bool(run_.refreshed["changed"])
        if run_.objects is not None and not run_.mod.check_mode:
            result["records_not_current"] = _left_for_records(run_, entries)
    return result


def _left_for_records(run_: Run, entries: Sequence[dict]) -> List[str]:
    """What ``select: from_records`` would still migrate once this task has set the records from the audit: a record
    not exactly [current], a CRD with more than one storedVersions. A resource this task marked [current] is done
    unless its CRD keeps a storedVersions it did not prune. A play skips that migration when nothing is left."""
    observation = run_.observation
    marked = _marked(entries)
    done = {e["resource"] for e in entries if e["resource"] in marked
            and (e.get("stored_versions_pruned_by") or not plan.crd_needs_pruning(observation.crds.get(e["resource"])))}
    given = plan.SelectionInput(mode=plan.FROM_RECORDS,
                                records={n: r for n, r in observation.storage_states.items() if n not in done},
                                crds={n: c for n, c in observation.crds.items() if n not in done},
                                served=_served(observation))
    names = sorted(set(given.records) | set(given.crds))
    agreement = compare(observation.endpoints, names or None, require_ready=True,
                        ignore=observation.aggregated_group_versions())
    given.current_hashes = _agreed_hashes(agreement, names)
    return plan.select_resources(given).selected


def _would_migrate(run_, selection, choice, result: dict) -> dict:
    """Check mode: what would be migrated, with which backend, and nothing written."""
    result["migrations"] = [{"resource": n, "backend": plan.backend_for(choice, n).backend,
                             "api_version": plan.backend_for(choice, n).api_version, "name": None,
                             "status": WOULD_MIGRATE, "storage_hash": run_.current[n],
                             **({"objects_from_audit": len(run_.objects.objects[n])} if run_.objects else {})}
                            for n in selection.selected]
    result["changed"] = True
    result["msg"] = f"Would migrate {', '.join(selection.selected)} with the {choice.backend} backend."
    result["summary"] = summary_table(result["migrations"], selection.skipped)
    return result


def _migrated(run_, done: tuple, result: dict) -> dict:
    """The result of the migrations that ran: a MigrationError naming each failed resource, else what was migrated
    and what another run migrated meanwhile."""
    selection, choice, entries = done
    result["migrations"] = [m for m in entries if m["status"] != DONE_MEANWHILE]
    meanwhile = [{"resource": m["resource"], "reason": m["reason"]} for m in entries if m["status"] == DONE_MEANWHILE]
    result["skipped_resources"] = result["skipped_resources"] + meanwhile
    result["changed"] = bool(result["migrations"]) or bool(run_.refreshed and run_.refreshed["changed"])
    result["summary"] = summary_table(result["migrations"], selection.skipped + meanwhile)
    _raise_on_failure(result)
    done_meanwhile = (f"Skipped {', '.join(m['resource'] for m in meanwhile)}: another run migrated and recorded "
                      "it meanwhile." if meanwhile else "")
    result["msg"] = " ".join(part for part in (_message(result["migrations"], choice), done_meanwhile) if part)
    return result


def _raise_on_failure(result: dict) -> None:
    """A MigrationError naming each failed resource and why, with the result so far (nothing said changed)."""
    failed = [m for m in result["migrations"] if m["status"] == FAILED]
    if failed:
        raise MigrationError(
            f"Migration of {len(failed)} of {len(result['migrations'])} resources failed: "
            + " ".join(f"{m['resource']}: {m.get('error') or _failed_objects(m)}" for m in failed),
            details={"failed": [m["resource"] for m in failed]},
            result={k: v for k, v in result.items() if k != "changed"})


def _failed_objects(entry: dict) -> str:
    objects = entry.get("failed_objects") or []
    names = ", ".join(f"{o['object']} ({o['status']} {o['reason']}: {o['message']})" for o in objects[:5])
    first = f" {objects[0]['object']}: {objects[0]['why']}." if objects and objects[0].get("why") else ""
    return (f"{entry.get('objects_failed')} objects failed: {names}.{first} Fix the cause and re-run; the record was "
            "not changed.")
