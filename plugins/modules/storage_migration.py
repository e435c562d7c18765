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
    endpoints and their hashes. An apiserver that is restarting (unreachable, not ready, or not yet listing the
    resource in its discovery) while every other one reports the same hash pauses the migration for up to 30 s
    (within O(timeout)) instead."
  - "Backends: the built-in client-side migrator (the default: it works on any cluster and is the fastest), the
    in-tree C(storagemigration.k8s.io) API (v1, v1beta1 or v1alpha1, whichever the cluster serves, newest first), or
    kube-storage-version-migrator (C(migration.k8s.io/v1alpha1), when its CRDs are installed). Up to
    O(parallel_resources) resources migrate at the same time."
  - "The client-side migrator lists the objects in chunks (C(limit)/C(continue)) and writes each one back, so that the
    apiserver re-encodes it in the current storage version and changes nothing else. With O(write=put) (the default,
    as kube-storage-version-migrator does) it lists whole objects and PUTs each one back exactly as read; with
    O(write=apply) it lists object metadata only (C(as=PartialObjectMetadataList)) and sends a server-side apply
    carrying only the object's identity. Either way the object's C(uid) and C(resourceVersion) as read are the
    preconditions: an object changed, or deleted, since it was read gets 409 (a real apiserver checks the C(uid) first,
    so a deleted object is never re-created, not even of a resource that allows create-on-update such as Leases), and
    an object listed without them is not written but reported as failed. 409 and 404 count as done. Expired list
    tokens (410) continue from the server's fallback token. 429, 5xx, timeouts and dropped connections are retried
    within a time budget (up to 40 attempts within 90 seconds, never past O(timeout)), honouring C(Retry-After) with
    jitter. An object that is refused (an admission policy, validation, RBAC) or keeps failing is reported by name and
    the resource goes on, up to O(max_failures) objects; a resource with any failed object is not recorded as
    migrated. A decode failure on LIST (an object stored in a version the apiserver cannot read) stops the resource
    with what, where and what to do."
  - "Two answers stop the whole migration at once, every worker and every resource, without a retry: etcd's space
    alarm (HTTP 500 C(database space exceeded), NOSPACE: the cluster is read-only until etcd's space is reclaimed; the
    message gives the etcdctl commands of etcd's maintenance guide, \"Space quota\": C(endpoint status),
    C(alarm list), a compaction to the current revision, C(defrag) on each member, C(alarm disarm)), and rejected
    credentials (HTTP 401: a token revoked or expired during the run), with the collection's credentials diagnosis.
    Objects not rewritten yet stay as they were; re-run after the fix. A rewrite keeps each object's previous value in
    etcd until the next compaction: with O(write=put), when the first chunk's size per object times the objects
    listed comes to 256 MiB or more, a warning says so and how to check etcd's free space against its quota."
  - "The client-side migrator saves a checkpoint after each finished chunk in O(checkpoint_dir), with the run's
    identity, the storage hash and the time. A checkpoint for another hash or older than the apiserver's
    continue-token lifetime (5 minutes) is discarded with a message. A run that resumed from a checkpoint ends with a
    verification pass over every object before anything is recorded: a StorageState record says C([current]) only
    after this run went over every object and none failed."
  - "O(timeout) is a hard deadline for the whole task: chunks, the rate limiter, retries, Lease waits and status polls
    all stop at it."
  - "The bookkeeping requests of every backend - reading, taking, renewing and releasing the resource's Lease, reading
    its CRD, reading and writing its StorageState record and pruning C(status.storedVersions) - are retried like the
    client-side migrator's own requests, with the same budget and within the same O(timeout): one 503, dropped
    connection or 429 does not fail a resource. One that keeps failing fails that resource only, with a message naming
    it, its Lease or record, the apiserver's answer and whether retrying ran out or the O(timeout) did; the other
    resources of the task go on."
  - "Locking: one migration per resource at a time across the cluster, through a C(coordination.k8s.io/v1) Lease
    C(kube-system/kubeupgrade-storage-migration-<resource>) held by the run (identity and host), renewed while
    running, released at the end and taken over only after it expired. A second run waits within its O(timeout), then
    fails naming the holder. Once it holds the Lease, a run reads the resource's StorageState record again: when the
    run it waited for recorded every object as stored in the current version (and pruned a CRD's storedVersions), the
    resource is skipped, with that reason in RV(skipped_resources), instead of every object being rewritten again. A run
    whose playbook was killed stops between chunks without writing a record; a resource whose Lease cannot be renewed
    before it expires stops the same way, naming its Lease, and the other resources go on."
  - "Progress: through the collection's action plugin, a line per resource as it finishes and, for a long resource, a
    line at least every 10 seconds (done/total, rate, ETA); the result has a C(summary) table."
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
      - V(from_records) migrates every resource whose StorageState record is not exactly C([current hash]) (C(Unknown),
        several hashes, or another one) and every CRD whose C(status.storedVersions) lists more than one version.
      - With V(from_records) and V(from_check), a record of a resource no apiserver serves (left from an earlier release)
        is skipped with that reason instead of failing.
      - V(auto) is V(resources) when O(resources) (or O(objects_from_audit)) is given, else V(from_records).
      - V(auto_from_check) is the step after V(auto) - V(from_check) when O(target_release) is given and O(resources) is
        empty; otherwise it selects nothing and sends no request (RV(selected_by) is V(none), the message says why).
      - RV(selected_by) is the mode used.
    type: str
    choices: [resources, from_check, from_records, auto, auto_from_check]
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
      - V(auto) and V(client) use the built-in client-side migrator (faster than the cluster-side controllers, which
        wait for their caches, and it names every object that fails). V(intree) and V(sigs) drive the cluster's
        controller; a forced backend the cluster does not serve is an error.
    type: str
    choices: [auto, intree, sigs, client]
    default: auto
  wait:
    description:
      - Wait for the in-tree or kube-storage-version-migrator migrations to succeed. With V(false) the migration objects
        are created and the module returns at once with status C(started), without updating records (nothing proves
        the migration finished).
      - The client-side migrator always runs to completion.
    type: bool
    default: true
  timeout:
    description: Hard deadline in seconds for the whole task (every resource); then the task fails (the checkpoint allows resuming).
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
    description: Parallel writes of the client-side migrator, per resource.
    type: int
    default: 4
  parallel_resources:
    description: Resources migrated at the same time.
    type: int
    default: 4
  max_failures:
    description:
      - Objects of one resource that may fail (refused or still failing after retries) before the resource stops.
        Every failed object is listed in the result; a resource with any failed object is not recorded as migrated.
    type: int
    default: 10
  qps:
    description: Request-per-second limit of the client-side migrator (lists and writes) per resource; C(0) means no limit, else at least C(0.01).
    type: float
    default: 0
  chunk_size:
    description:
      - Objects per LIST chunk (C(limit)) of the client-side migrator; the module holds at most two chunks in memory.
      - With O(write=put) the chunks hold whole objects, so they are also kept near 16 MiB - the first LIST asks for at
        most 50 objects, the following ones for as many as fit (never more than O(chunk_size)).
    type: int
    default: 500
  write:
    description:
      - How the client-side migrator writes each object back (the cluster-side backends ignore it).
      - V(put) lists whole objects and PUTs each one back exactly as read, with its C(uid) and C(resourceVersion) as
        preconditions. Built-ins are read as protobuf (C(application/vnd.kubernetes.protobuf)) and their very bytes
        sent back, so nothing a client could re-encode differently is ever sent; custom resources, served as JSON only,
        as JSON (C(progress.encoding) says which). It is what kube-storage-version-migrator does, and the cheapest write a real kube-apiserver serves
        for an unchanged object. Needs C(update) on the migrated resources. When RBAC forbids the PUT (the apiserver's
        authorizer says C(cannot update resource)) the resource goes on with V(apply), with a warning and
        C(progress.write_fallback) saying so.
      - V(apply) lists object metadata only and sends a server-side apply carrying only the object's identity and the
        same preconditions (like the in-tree controller). Needs C(patch). Lists fewer bytes (only metadata), so prefer
        it for resources with very large objects on a host short of memory.
      - Either way, an object read as JSON that the apiserver refuses as a change when written back unchanged (HTTP 422 with a cause
        C(field is immutable)) is written back as stored instead - a GET of it as protobuf
        (C(application/vnd.kubernetes.protobuf)) and a PUT of those very bytes, whose C(uid) and C(resourceVersion) are
        the preconditions (needs C(get) and C(update)). The JSON the apiserver serves is not always the bytes it stores -
        a ControllerRevision's C(data) sent with spaces (Python's C(json.dumps), so the official Python client and
        Ansible's Kubernetes modules) is stored as sent and served compacted, so the PUT of it as read changes
        C(data). C(progress.objects_written_as_stored) counts these objects and C(progress.write_as_stored) says so. An
        object refused that way too is a failed object whose C(why) names the next step.
    type: str
    choices: [put, apply]
    default: put
  update_records:
    description:
      - After success, set the resource's StorageState C(persistedStorageVersionHashes) to C([current]), installing the
        StorageState CRD first when it is missing (the migration is the one moment the record can say C([current])).
    type: bool
    default: true
  refresh_records:
    description:
      - Before selecting, bring the StorageState records up to date with what this task observes, exactly as
        M(kubeupgrade.storage.storage_state) does with its defaults - install the StorageState CRD when it is missing,
        create missing records (C(Unknown) plus the hashes observed now), append newly observed hashes, renew old
        heartbeats. With O(select=from_records) a resource that had no record is then selected. One task instead of
        two; the result is in RV(records_refreshed).
      - With O(objects_from_audit), the records are set from the audit's measurement instead, exactly as
        M(kubeupgrade.storage.storage_state) O(kubeupgrade.storage.storage_state#module:audit) sets them - every
        resource's (or those O(resources) names), after the rewrite, except the records the rewrite itself sets to
        C([current]) (with O(update_records)); a resource whose listed objects were not all rewritten keeps what the
        audit measured. A missing StorageState CRD is installed before the rewrite, so the apiserver's hold on a new
        CRD's first writes (with the StorageVersionAPI feature gate) passes while objects are rewritten. Nothing is
        recorded unless every apiserver answered.
      - In check mode nothing is written and selection uses the records as they are.
    type: bool
    default: false
  prune_crd_stored_versions:
    description:
      - After a CRD's objects are migrated, set its C(status.storedVersions) to C([storage version]) through C(/status),
        only if the CRD's storage version and generation did not change meanwhile (else the task fails and says why).
        The value is validated first, because the real C(/status) accepts values that then block every CRD update.
      - With the in-tree API C(storagemigration.k8s.io/v1beta1) or later, kube-controller-manager (1.35 and later)
        prunes it itself when the migration succeeds. The module waits up to 30 seconds for the controller to finish
        the migration, and writes nothing when the controller has pruned it - the field is written once.
        RV(migrations[].stored_versions_pruned_by) says who pruned it.
    type: bool
    default: true
  keep_migration_objects:
    description:
      - Keep succeeded in-tree or kube-storage-version-migrator migration objects; by default they are deleted once
        recorded.
      - An in-tree v1beta1 (or later) migration of a CRD's resource that kube-controller-manager has not finished yet is
        kept either way. Deleted before the controller finishes it, the migration would leave the CRD's
        C(StorageMigrating) condition V(True).
    type: bool
    default: false
  lock:
    description: Take a C(coordination.k8s.io/v1) Lease per resource while migrating it.
    type: bool
    default: true
  lock_duration:
    description:
      - Seconds a Lease stays valid without renewal (it is renewed every third of it). A renewal that fails is retried
        until the Lease would expire, each try waiting a sixth of it at most for an answer.
      - "The default, 90, is the migration's retry budget, so an outage the writes ride out (an etcd member stopped,
        restarted or defragmented behind the apiserver, whose requests hang, then fail) does not cost the Lease. It is
        also how long a run killed without releasing its Lease holds back the next one, which says whose Lease it
        waits for and until when."
    type: int
    default: 90
  progress_file:
    description:
      - A file the module rewrites with progress lines while it runs. Set by the collection's action plugin, which
        prints them; leave unset.
    type: path
  checkpoint_dir:
    description:
      - Directory for the client-side migrator's checkpoints, one file per cluster and resource
        (C(storage-migration-<cluster id>-<resource>.json)), on the host running the module.
      - Default is C(~/.ansible/tmp/kubeupgrade-storage-migration), or the module's temporary directory if that
        cannot be created. A directory that cannot be written is an error before any request.
    type: path
  objects_from_audit:
    description:
      - The registered result of M(kubeupgrade.storage.storage_version_audit) run with
        O(kubeupgrade.storage.storage_version_audit#module:target_release) (or
        O(kubeupgrade.storage.storage_version_audit#module:readable_versions)) and
        O(kubeupgrade.storage.storage_version_audit#module:names_limit=-1). Only the objects it lists (stored in a
        version its target cannot decode) are rewritten, with the same write as the full migration, each read with
        one GET (the whole object for O(write=put), its metadata for O(write=apply)); once the listed objects are at
        least a quarter of the objects the audit counted in their resource, they are read instead by LISTs of the
        resource in chunks (far fewer requests; only the listed objects are written, and one no page holds any more
        was deleted since the audit). A resource without listed objects costs no request, and with none listed at all
        the task makes no request. O(resources) narrows it further.
      - "etcd's space: each rewrite keeps the old revision until the apiserver compacts, so etcd's database grows by about
        the pages the listed objects take again in its bbolt file, from the audit's C(count) and C(bytes) per version:
        about their bytes for objects of 8 KiB and more, up to twice them for objects of 2 KiB, plus 25% (a real
        apiserver's rewrites took 1.1x those pages). Against the audit's C(etcd_space) - the database size from etcd's
        status, the quota from its metrics, else etcd's default of 2 GiB - a migration that would bring the database
        past 95% of the quota is refused before its first write (at the quota etcd's NOSPACE alarm makes the whole
        cluster read-only), with the recovery (compact, defragment, or raise C(--quota-backend-bytes)); past 75% it
        warns."
      - Refused, naming the resources, when the audit listed only the first names of some resource (its
        O(kubeupgrade.storage.storage_version_audit#module:names_limit) cut the list), or was not judged against a
        target. Client-side only (O(backend=client) or V(auto)); not with O(select=from_check) or V(from_records).
      - The StorageState record becomes C([current]) (and a CRD's C(storedVersions) is pruned) only when every listed
        object was rewritten, found rewritten by someone else (409) or gone (404) and the audit listed every object
        stored in a version other than the current one, none unreadable. Otherwise the objects are rewritten, the
        record is left as it is (C(record) says why) and a warning is given; set the record from a new audit with
        M(kubeupgrade.storage.storage_state) O(kubeupgrade.storage.storage_state#module:audit).
      - Take the audit after every apiserver agrees on the storage version (M(kubeupgrade.storage.storage_version_agreement)),
        since an object written later by an apiserver with an older storage version is not in the list.
    type: raw
attributes:
  check_mode:
    description: Reports what would be migrated and by which backend; writes nothing.
    support: full
  diff_mode:
    description: Object contents never change, so there is no diff.
    support: none
notes:
  - "RBAC: see the collection's C(rbac/) ClusterRoles (C(kubeupgrade-storage-migrate)): C(list) and C(update) (or
    C(patch) with O(write=apply)) on the migrated resources (client-side), and C(get) for O(objects_from_audit);
    C(create), C(get) and C(delete) on C(storageversionmigrations) (in-tree or sigs), C(get), C(list), C(create),
    C(update) on C(storagestates) and C(storagestates/status), C(get) on C(customresourcedefinitions) and C(update)
    on C(customresourcedefinitions/status), and C(get), C(create), C(update) on C(leases) in C(kube-system)."
seealso:
  - module: kubeupgrade.storage.storage_version_check
  - module: kubeupgrade.storage.storage_version_agreement
"""

EXAMPLES = r"""
- name: Migrate secrets and a custom resource with the client-side migrator
  kubeupgrade.storage.storage_migration:
    kubeconfig: ~/.kube/config
    endpoints: [https://10.0.0.11:6443, https://10.0.0.12:6443, https://10.0.0.13:6443]
    resources: [secrets, widgets.example.com]

- name: Migrate everything the pre-flight for 1.33 says needs it, with the client-side migrator
  kubeupgrade.storage.storage_migration:
    select: from_check
    target_release: "1.33"
    target_crds: [files/widgets-crd-v2.yaml]
    concurrency: 8
    qps: 200
  register: migration

- name: Migrate every resource whose StorageState record is not exactly the current version
  kubeupgrade.storage.storage_migration:
    select: from_records

- name: Audit etcd for objects that Kubernetes 1.33 cannot decode, listing every one
  kubeupgrade.storage.storage_version_audit:
    etcd_endpoints: [https://127.0.0.1:2379]
    etcd_ca_cert: /etc/kubernetes/pki/etcd/ca.crt
    etcd_client_cert: /etc/kubernetes/pki/apiserver-etcd-client.crt
    etcd_client_key: /etc/kubernetes/pki/apiserver-etcd-client.key
    target_release: "1.33"
    names_limit: -1
  become: true
  register: audit

- name: Rewrite only those objects
  kubeupgrade.storage.storage_migration:
    objects_from_audit: "{{ audit }}"

- name: Migrate large Secrets listing metadata only, with the identity-only server-side apply
  kubeupgrade.storage.storage_migration:
    resources: [secrets]
    write: apply

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
      description: C(succeeded), C(failed), C(would_migrate) (check mode), or C(started) with O(wait=false).
      type: str
      sample: succeeded
    verified:
      description:
        - This run went over every object (or the cluster-side controller reported success) and none failed.
        - With O(objects_from_audit) - every listed object was rewritten and the audit listed every object stored in
          a non-current version.
      type: bool
    objects_from_audit:
      description: How many objects the audit listed for this resource (with O(objects_from_audit) only).
      type: int
      sample: 12
    read_by:
      description:
        - How the listed objects were read (with O(objects_from_audit) only) - V(get), one GET each, or V(list), LISTs
          of the resource in chunks once they are at least a quarter of its objects.
      type: str
      sample: list
    objects_failed:
      description: Objects that failed (client-side only).
      type: int
    failed_objects:
      description: Every failed object (up to 100) with C(object), C(status), C(reason), C(message) and C(why).
      type: list
      elements: dict
    seconds:
      description: Time this resource took.
      type: float
    lease:
      description: Name of the Lease held in C(kube-system) while migrating.
      type: str
    error:
      description: Why this resource failed (failed entries only).
      type: str
    migration_object_deleted:
      description: Whether the succeeded migration object was deleted (cluster-side backends).
      type: bool
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
      description:
        - Client-side counters (objects_written, conflicts, gone, failed, chunks, retries, expired_tokens,
          list_restarts, resumed, verification_pass, checkpoint_discarded).
        - C(write) is the write used (V(put) or V(apply)); C(write_fallback) says why a V(put) migration went on with
          V(apply) (RBAC forbids C(update)), empty otherwise.
        - C(encoding) is how whole objects were read and written back with V(put) - V(protobuf), their bytes as served
          (every built-in), or V(json) (a custom resource; a built-in read without the protobuf package, through a
          proxy that answers JSON only, or whose protobuf answer could not be used); empty when only V(apply) wrote.
          C(encoding_fallback) says why a resource answered as protobuf was read as JSON after all, empty otherwise.
        - C(objects_written_as_stored) counts the objects (of C(objects_written)) refused as a change when written back
          unchanged and written back as stored instead (V(protobuf) - a GET as protobuf and a PUT of those very bytes);
          C(write_as_stored) names that write and why (the first such object and the apiserver's cause), empty when
          none.
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
    stored_versions_pruned_by:
      description:
        - Who set the CRD's C(status.storedVersions) to C([storage version]) after this migration.
        - V(kube-controller-manager) when the in-tree controller (v1beta1 or later) pruned it and the module wrote
          nothing. V(kubeupgrade.storage) when the module wrote it (RV(migrations[].stored_versions)).
        - Null when nothing had to change, or when the resource is not a CRD.
      type: str
      sample: kube-controller-manager
skipped_resources:
  description: Resources not migrated, with why (also a resource another run migrated while this one waited for its
    Lease).
  returned: always
  type: list
  elements: dict
  sample: [{"resource": "configmaps", "reason": "StorageState says every object is stored as qFsyl6wFWjQ= already"}]
records_refreshed:
  description:
    - With O(refresh_records=true), what was done to the records before selecting (with O(objects_from_audit), after
      the rewrite) - as
      M(kubeupgrade.storage.storage_state) returns it (C(records), C(crd_installed), C(unreachable_endpoints), C(msg),
      C(changed)).
  returned: when O(refresh_records=true) and an apiserver answered
  type: dict
  sample: {"changed": true, "records": [{"name": "secrets", "action": "created"}], "crd_installed": false,
           "unreachable_endpoints": [], "msg": "create 1, update 0 StorageState record(s); 60 unchanged"}
records_not_current:
  description:
    - With O(refresh_records=true) and O(objects_from_audit) (not in check mode), what a migration with
      O(select=from_records) would still migrate once this task has set the records - each resource whose record does
      not say exactly C([current]) (a value the audit could not read, a resource it did not measure) and each CRD
      whose C(status.storedVersions) still lists more than its storage version. Empty when nothing is left for it;
      the migrate role then skips that migration.
  returned: when O(refresh_records=true) and O(objects_from_audit) are given, not in check mode, and the records were refreshed
  type: list
  elements: str
  sample: []
stale_records:
  description: Resources skipped because no apiserver serves them (StorageState records left from an earlier release).
  returned: always
  type: list
  elements: str
  sample: [flunders.wardle.example.com]
summary:
  description:
    - A table of every migrated resource (status, backend, objects, failed, seconds), or V(nothing migrated), then
      one line per reason resources were skipped, naming them when there are at most five (RV(skipped_resources)
      names every one), line by line. In check mode, the resources that would be migrated.
  returned: always
  type: list
  elements: str
selected_by:
  description:
    - The selection mode used - O(select), or what V(auto) and V(auto_from_check) stood for (V(resources),
      V(from_records), V(from_check)); V(none) when V(auto_from_check) selected nothing (no request was sent; the
      RV(summary) is then empty).
  returned: success
  type: str
  sample: from_records
backend:
  description: The backend chosen and why.
  returned: when something is selected
  type: dict
  sample: {"backend": "intree", "api_version": "storagemigration.k8s.io/v1", "reason": "the cluster serves ..."}
"""

import functools

# module_utils/_bytecode.py first: it keeps the collection's module_utils imported below compiled between tasks
from ansible_collections.kubeupgrade.storage.plugins.module_utils import _bytecode  # pylint: disable=unused-import  # noqa: F401
from ansible_collections.kubeupgrade.storage.plugins.module_utils._migrate import plan, runner
from ansible_collections.kubeupgrade.storage.plugins.module_utils._rewrite import migrator
from ansible_collections.kubeupgrade.storage.plugins.module_utils.module import KubeUpgradeModule


def argument_spec() -> dict:
    return {
        "resources": {"type": "list", "elements": "str", "default": []},
        "select": {"type": "str", "choices": list(plan.SELECT_CHOICES), "default": "resources"},
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
        "parallel_resources": {"type": "int", "default": 4},
        "qps": {"type": "float", "default": 0.0},
        "chunk_size": {"type": "int", "default": 500},
        "write": {"type": "str", "choices": list(migrator.WRITES), "default": migrator.WRITE_PUT},
        "max_failures": {"type": "int", "default": 10},
        "update_records": {"type": "bool", "default": True},
        "refresh_records": {"type": "bool", "default": False},
        "prune_crd_stored_versions": {"type": "bool", "default": True},
        "keep_migration_objects": {"type": "bool", "default": False},
        "lock": {"type": "bool", "default": True},
        "lock_duration": {"type": "int", "default": 90},
        "checkpoint_dir": {"type": "path"},
        "progress_file": {"type": "path"},
        "objects_from_audit": {"type": "raw"},
    }


def judge(*args):
    """The check's verdicts for ``select: from_check``: the judge is given to the migration, which imports no check.
    Imported when called: the judge is a third of the module's imports, and every other ``select`` does without it
    (a module task compiles each file it imports from source)."""
    from ansible_collections.kubeupgrade.storage.plugins.module_utils._judge.engine import resource_verdicts
    return resource_verdicts(*args)


def main() -> None:
    mod = KubeUpgradeModule(argument_spec(), empty_result=runner.EMPTY_RESULT, supports_check_mode=True)
    mod.run(functools.partial(runner.run, judge=judge))


if __name__ == "__main__":
    main()
