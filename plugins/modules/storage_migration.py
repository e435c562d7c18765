#!/usr/bin/python
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Rewrite every object of a resource in its current storage version, wait, and record the result."""

from __future__ import annotations

DOCUMENTATION = r"""
module: storage_migration
short_description: Migrate stored objects to the current storage version and record it
description:
  - "Rewrites every object of the selected resources so that etcd holds them in the current storage version, waits
    until done, then records the result so the next pre-flight says C(safe): the StorageState record gets
    C(persistedStorageVersionHashes = [current]), and for a CRD C(status.storedVersions) becomes
    C([storage version]) through the C(/status) subresource."
  - "Gate: before starting, every apiserver in O(endpoints) must report the same storage hash for the resource.
    While a migration runs the module keeps checking (between chunks, or between status polls); when the apiservers
    stop agreeing it stops the migration (deleting a pending or running migration object) and fails, naming the
    endpoints and their hashes."
  - "Backends: the in-tree C(storagemigration.k8s.io) API (v1, v1beta1 or v1alpha1, whichever the cluster serves,
    newest first), kube-storage-version-migrator (C(migration.k8s.io/v1alpha1), when its CRDs are installed), or
    the built-in client-side migrator, which works on any cluster."
  - "The client-side migrator lists in chunks (C(limit)/C(continue)) and writes each object back unchanged with a
    minimal server-side apply patch carrying the object's C(uid) and C(resourceVersion) as preconditions (like the
    in-tree controller), so a changed object gets 409 and a deleted one is never re-created. 409 and 404 count as
    done. Expired list tokens (410) continue from the server's fallback token. 429, 500, 503, timeouts and dropped
    connections are retried with bounded jittered backoff honouring C(Retry-After). A decode failure (an object
    stored in a version the apiserver cannot read) is reported with what, where and what to do, not retried. Any
    other refusal (403, 405, 422, an admission webhook) stops that resource with the object named."
  - "The client-side migrator saves a checkpoint after each finished chunk in O(checkpoint_dir), so an interrupted
    run resumes from the last finished chunk. The file is removed when the resource is done."
  - A migration whose status does not change for O(stall_timeout) is stopped and reported with the likely cause
    (the in-tree controller leaves a migration of a nonexistent resource pending forever; kube-storage-version-migrator
    retries a failing LIST forever while reporting Running).
  - Nothing is ever created or deleted, and object content never changes (apart from C(managedFields)).
author: kubeupgrade.storage maintainers (@kubeupgrade)
extends_documentation_fragment:
  - kubeupgrade.storage.connection
  - kubeupgrade.storage.connection.endpoints
  - kubeupgrade.storage.attributes.action_group
options:
  resources:
    description:
      - Resources to migrate, by kubectl-style name (C(secrets), C(deployments.apps), C(widgets.example.com)).
      - Required when O(select=resources).
      - Resources whose StorageState record already says every object is stored in the current version are skipped.
    type: list
    elements: str
    default: []
  select:
    description:
      - V(resources) migrates O(resources). V(from_check) runs the pre-flight (as M(kubeupgrade.storage.storage_version_check)
        does) for O(target_release) and O(target_crds) and migrates every resource judged C(needs_migration) or C(unknown).
    type: str
    choices: [resources, from_check]
    default: resources
  target_release:
    description: Kubernetes release the control plane is upgraded (or rolled back) to, for O(select=from_check).
    type: str
  target_crds:
    description: CRD manifests (paths or inline manifests) of the target, for O(select=from_check).
    type: list
    elements: raw
    default: []
  profiles_file:
    description: A file with extra or overriding release profiles (see M(kubeupgrade.storage.storage_version_check)).
    type: path
  profiles:
    description: Inline extra or overriding release profiles, same format as O(profiles_file).
    type: dict
  backend:
    description:
      - V(auto) picks the in-tree API if served, else kube-storage-version-migrator if its CRDs are installed, else
        the client-side migrator. A forced backend the cluster does not serve is an error.
    type: str
    choices: [auto, intree, sigs, client]
    default: auto
  wait:
    description:
      - Wait for the in-tree or kube-storage-version-migrator migrations to succeed. With V(false) the migration objects
        are created and the module returns at once, without updating records (nothing proves the migration finished).
      - The client-side migrator always runs to completion.
    type: bool
    default: true
  timeout:
    description: Seconds to wait for each resource's migration; then the task fails (the checkpoint allows resuming).
    type: float
    default: 1800
  stall_timeout:
    description:
      - Seconds a cluster-side migration may show no change in its status before it is stopped as stuck. C(0) disables.
      - The real in-tree controller shows no change for up to about 80 s while it waits for its cache; keep this above.
    type: float
    default: 300
  poll_interval:
    description: Seconds between status polls, and at least between two agreement checks of a running migration.
    type: float
    default: 2
  concurrency:
    description: Parallel writes of the client-side migrator.
    type: int
    default: 4
  qps:
    description: Request-per-second limit of the client-side migrator (lists and writes); C(0) means no limit.
    type: float
    default: 0
  chunk_size:
    description: Objects per LIST chunk (C(limit)) of the client-side migrator.
    type: int
    default: 500
  update_records:
    description: After success, set the resource's StorageState C(persistedStorageVersionHashes) to C([current]).
    type: bool
    default: true
  prune_crd_stored_versions:
    description:
      - After a CRD's objects are migrated, set its C(status.storedVersions) to C([storage version]) through C(/status),
        only if the CRD's storage version and generation did not change meanwhile (else the task fails and says why).
        The value is validated first, because the real C(/status) accepts values that then block every CRD update.
    type: bool
    default: true
  checkpoint_dir:
    description:
      - Directory for the client-side migrator's checkpoints, one file per cluster and resource
        (C(storage-migration-<cluster id>-<resource>.json)), on the host running the module.
      - Default is C(~/.ansible/tmp/kubeupgrade-storage-migration), or the module's temporary directory if that
        cannot be created.
    type: path
attributes:
  check_mode:
    description: Reports what would be migrated and by which backend; writes nothing.
    support: full
  diff_mode:
    description: Object contents never change, so there is no diff.
    support: none
notes:
  - "RBAC needed: C(list) and C(patch) on the migrated resources (client-side), C(create), C(get) and C(delete) on
    C(storageversionmigrations) (in-tree or sigs), C(get), C(create), C(update) on C(storagestates) and their status,
    C(get) and C(update) on C(customresourcedefinitions/status)."
seealso:
  - module: kubeupgrade.storage.storage_version_check
  - module: kubeupgrade.storage.storage_version_agreement
"""

EXAMPLES = r"""
- name: Migrate secrets and a custom resource with whatever the cluster offers
  kubeupgrade.storage.storage_migration:
    kubeconfig: ~/.kube/config
    endpoints: [https://10.0.0.11:6443, https://10.0.0.12:6443, https://10.0.0.13:6443]
    resources: [secrets, widgets.example.com]

- name: Migrate everything the pre-flight for 1.33 says needs it, with the client-side migrator
  kubeupgrade.storage.storage_migration:
    select: from_check
    target_release: "1.33"
    target_crds: [files/widgets-crd-v2.yaml]
    backend: client
    concurrency: 8
    qps: 200
  register: migration

- name: Only report what would be migrated
  kubeupgrade.storage.storage_migration:
    resources: [flowschemas.flowcontrol.apiserver.k8s.io]
  check_mode: true
"""

RETURN = r"""
migrations:
  description: One entry per migrated (or, in check mode, to be migrated) resource.
  returned: always
  type: list
  elements: dict
  contains:
    resource:
      description: kubectl-style resource name.
      type: str
      sample: widgets.example.com
    backend:
      description: C(intree), C(sigs) or C(client).
      type: str
      sample: client
    api_version:
      description: The migration API used (null for the client-side migrator).
      type: str
      sample: storagemigration.k8s.io/v1
    name:
      description: Name of the StorageVersionMigration object (null for the client-side migrator).
      type: str
      sample: widgets.example.com-x8rdp
    status:
      description: C(succeeded), C(would_migrate) (check mode), or the last phase seen with O(wait=false).
      type: str
      sample: succeeded
    storage_hash:
      description: The storage hash every apiserver agreed on, which the objects are now stored in.
      type: str
      sample: gIwvi5rymmg=
    objects_migrated:
      description: Objects rewritten, or found rewritten (409) or deleted (404) since listed (client-side only).
      type: int
      sample: 5000
    objects_remaining:
      description: Objects left according to the last LIST chunk (client-side only; 0 when done).
      type: int
      sample: 0
    progress:
      description: Client-side counters (objects_written, conflicts, gone, chunks, retries, expired_tokens, list_restarts, resumed).
      type: dict
    record:
      description: What happened to the StorageState record.
      type: str
      sample: updated
    stored_versions:
      description: The CRD C(status.storedVersions) written, or null when unchanged or not a CRD.
      type: list
      elements: str
      sample: [v1]
skipped_resources:
  description: Resources not migrated, with why.
  returned: always
  type: list
  elements: dict
  sample: [{"resource": "configmaps", "reason": "StorageState says every object is stored as qFsyl6wFWjQ= already"}]
backend:
  description: The backend chosen and why.
  returned: when something is selected
  type: dict
  sample: {"backend": "intree", "api_version": "storagemigration.k8s.io/v1", "reason": "the cluster serves ..."}
"""

import time

from ansible_collections.kubeupgrade.storage.plugins.module_utils import migrate_backends as backends
from ansible_collections.kubeupgrade.storage.plugins.module_utils import migrate_client as mc
from ansible_collections.kubeupgrade.storage.plugins.module_utils import migration_plan as plan
from ansible_collections.kubeupgrade.storage.plugins.module_utils import verdicts
from ansible_collections.kubeupgrade.storage.plugins.module_utils.agreement import compare
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import (
    ApiError,
    ConfigurationError,
    DisagreementError,
    KubeUpgradeError,
    MigrationError,
)
from ansible_collections.kubeupgrade.storage.plugins.module_utils.module import KubeUpgradeModule
from ansible_collections.kubeupgrade.storage.plugins.module_utils.observe import observe
from ansible_collections.kubeupgrade.storage.plugins.module_utils.profiles import load_profiles
from ansible_collections.kubeupgrade.storage.plugins.module_utils.resources import GroupResource
from ansible_collections.kubeupgrade.storage.plugins.module_utils.target_crds import load_target_crds


def argument_spec() -> dict:
    return {
        "resources": {"type": "list", "elements": "str", "default": []},
        "select": {"type": "str", "choices": ["resources", "from_check"], "default": "resources"},
        "target_release": {"type": "str"},
        "target_crds": {"type": "list", "elements": "raw", "default": []},
        "profiles_file": {"type": "path"},
        "profiles": {"type": "dict"},
        "backend": {"type": "str", "choices": list(plan.BACKENDS), "default": "auto"},
        "wait": {"type": "bool", "default": True},
        "timeout": {"type": "float", "default": 1800.0},
        "stall_timeout": {"type": "float", "default": 300.0},
        "poll_interval": {"type": "float", "default": 2.0},
        "concurrency": {"type": "int", "default": 4},
        "qps": {"type": "float", "default": 0.0},
        "chunk_size": {"type": "int", "default": 500},
        "update_records": {"type": "bool", "default": True},
        "prune_crd_stored_versions": {"type": "bool", "default": True},
        "checkpoint_dir": {"type": "path"},
    }


def check_params(params: dict) -> None:
    """Argument errors AnsibleModule cannot express, found before any request."""
    if params["select"] == "resources" and not params["resources"]:
        raise ConfigurationError("Set 'resources' (for example [secrets, widgets.example.com]), or select: from_check.")
    if params["select"] == "from_check":
        if params["resources"]:
            raise ConfigurationError("'resources' and select: from_check are mutually exclusive.")
        if not params.get("target_release") and not params.get("target_crds"):
            raise ConfigurationError("select: from_check needs 'target_release' and/or 'target_crds'.")
        load_target_crds(params["target_crds"])  # a bad manifest fails here, before any request
    for name in params["resources"]:
        try:
            GroupResource.parse(name)
        except ValueError as error:
            raise ConfigurationError(f"'resources': {error}") from None
    for name, low in (("timeout", 1), ("concurrency", 1), ("chunk_size", 1), ("poll_interval", 0.05)):
        if params[name] < low:
            raise ConfigurationError(f"'{name}' must be at least {low}, got {params[name]}.")
    for name in ("qps", "stall_timeout"):
        if params[name] < 0:
            raise ConfigurationError(f"'{name}' must not be negative, got {params[name]}.")


def _verdicts(observation, profiles, params) -> list:
    release = profiles.get(params["target_release"]) if params.get("target_release") else None
    manifests = load_target_crds(params["target_crds"]) if params.get("target_crds") else None
    judgement = verdicts.judge(observation, verdicts.Target(release=release, crd_manifests=manifests), profiles)
    return [{"resource": v.resource, "verdict": v.verdict} for v in judgement.resources]


def _crd_object(cluster, name):
    """The CRD named like the resource, read directly (None for a built-in): the guard compares it after."""
    try:
        return cluster.get(f"{backends.CRD_PATH}/{name}")
    except ApiError as error:
        if error.status == 404:
            return None
        raise


def _observed(observation, name):
    for endpoint in observation.endpoints:
        if name in endpoint.resources:
            return endpoint.resources[name]
    return None


def run(mod) -> dict:
    params = mod.params
    check_params(params)
    profiles = load_profiles(params.get("profiles_file"), params.get("profiles"))
    clients = mod.endpoint_clients()
    cluster = mod.client()
    requested = [GroupResource.parse(n).name for n in params["resources"]] or None
    observation = observe(clients, profiles, resources=requested, include=("crds", "storage_states"),
                          cluster_client=cluster)
    verdict_list = _verdicts(observation, profiles, params) if params["select"] == "from_check" else None
    names = requested or [v["resource"] for v in verdict_list or []]
    agreement = compare(observation.endpoints, names, require_ready=True)
    current = {}
    for name in names:
        values = set((agreement.hashes.get(name) or {}).values())
        current[name] = values.pop() if len(values) == 1 else None
    selection = plan.select_resources(requested, verdict_list, observation.storage_states, current, observation.crds)
    result = {"changed": False, "migrations": [], "skipped_resources": selection.skipped}
    if not selection.selected:
        result["msg"] = "Nothing to migrate."
        return result
    for name in selection.selected:
        if not agreement.agreed or not current.get(name) or name in agreement.disagreeing:
            raise DisagreementError(
                f"Not starting the migration of {name}: the apiservers do not agree "
                f"({backends.describe_disagreement(name, agreement)}). Wait until every apiserver runs the same release "
                "(storage_version_agreement), then re-run.",
                details={"resource": name, "hashes": agreement.hashes.get(name) or {},
                         "unreachable": agreement.unreachable, "unready": agreement.unready})
    try:
        choice = plan.choose_backend(backends.served_migration_apis(cluster), params["backend"])
    except ValueError as error:
        raise ConfigurationError(str(error)) from None
    result["backend"] = {"backend": choice.backend, "api_version": choice.api_version, "reason": choice.reason}
    result["changed"] = True
    if mod.check_mode:
        result["migrations"] = [{"resource": n, "backend": plan.backend_for(choice, n, params["backend"]).backend,
                                 "api_version": plan.backend_for(choice, n, params["backend"]).api_version,
                                 "name": None, "status": "would_migrate", "storage_hash": current[n]}
                                for n in selection.selected]
        result["msg"] = f"Would migrate {', '.join(selection.selected)} with the {choice.backend} backend."
        return result
    for name in selection.selected:
        backend = plan.backend_for(choice, name, params["backend"])
        entry = {"resource": name, "backend": backend.backend, "api_version": backend.api_version, "name": None,
                 "status": "running", "storage_hash": current[name]}
        result["migrations"].append(entry)
        try:
            _migrate_one(mod, params, clients, cluster, profiles, observation, backend, name, current[name], entry)
        except KubeUpgradeError as error:
            entry["status"] = "failed"
            error.result = {"migrations": result["migrations"], "skipped_resources": result["skipped_resources"]}
            raise
    done = [m["resource"] for m in result["migrations"]]
    result["msg"] = f"Migrated {', '.join(done)} with the {choice.backend} backend."
    return result


def _migrate_one(mod, params, clients, cluster, profiles, observation, choice, name, storage_hash, entry) -> None:
    group_resource = GroupResource.parse(name)
    observed = _observed(observation, name)
    if observed is None:
        raise MigrationError(f"No apiserver serves {name}; check the resource name.", details={"resource": name})
    version = observed.storage_version if observed.storage_version in observed.served_versions else None
    version = version or (observed.served_versions[0] if observed.served_versions else None)
    if not version:
        raise MigrationError(f"{name} has no served version to migrate through.", details={"resource": name})
    crd_at_start = _crd_object(cluster, name) if (name in observation.crds or group_resource.group) else None
    if crd_at_start is not None:
        storage = [v.get("name") for v in (crd_at_start.get("spec") or {}).get("versions") or [] if v.get("storage")]
        if storage and storage[0] in observed.served_versions:
            version = storage[0]
    gate = backends.gate_for(clients, profiles, name, storage_hash, observe, compare)
    deadline = time.monotonic() + params["timeout"]
    if choice.backend == plan.CLIENT:
        checkpoint_dir = params.get("checkpoint_dir") or mc.default_checkpoint_dir(mod.tmpdir)
        target = mc.ResourceTarget(group_resource, version, namespaced=observed.namespaced, kind=observed.kind,
                                   storage_hash=storage_hash)
        migrator = mc.ClientMigrator(
            cluster, target, chunk_size=params["chunk_size"], concurrency=params["concurrency"], qps=params["qps"],
            checkpoint=mc.checkpoint_path(checkpoint_dir, cluster.endpoint, name), gate=gate,
            gate_interval=params["poll_interval"], deadline=deadline)
        try:
            progress = migrator.run()
        finally:
            counters = migrator.progress
            entry.update(objects_migrated=counters.objects_migrated, objects_remaining=counters.objects_remaining,
                         progress=mc.progress_fields(counters))
        entry["status"] = plan.SUCCEEDED
        entry["objects_remaining"] = progress.objects_remaining or 0
    else:
        driver = backends.ClusterMigrator(cluster, choice, poll_interval=params["poll_interval"],
                                          stall_timeout=params["stall_timeout"])
        entry["name"] = driver.create(group_resource, version)
        if not params["wait"]:
            entry["status"] = plan.PENDING
            return
        driver.wait(entry["name"], name, deadline, gate=gate, progress=entry)
        entry["status"] = plan.SUCCEEDED
    gate()  # the objects are only all in the current version if nobody wrote another one meanwhile
    if params["update_records"]:
        try:
            entry["record"] = backends.mark_migrated(cluster, name, storage_hash)
        except ApiError as error:
            raise MigrationError(f"{name} was migrated, but its StorageState record could not be updated: {error}",
                                 details={"resource": name}) from None
        if entry["record"].startswith("skipped"):
            mod.warn(f"{name}: StorageState record {entry['record']}; a re-run will migrate it again.")
    entry["stored_versions"] = None
    if crd_at_start is not None and params["prune_crd_stored_versions"]:
        entry["stored_versions"] = backends.prune_stored_versions(cluster, crd_at_start)


def main() -> None:
    mod = KubeUpgradeModule(argument_spec(), empty_result={"migrations": [], "skipped_resources": []}, supports_check_mode=True)
    mod.run(run)


if __name__ == "__main__":
    main()
