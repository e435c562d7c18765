#!/usr/bin/python
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Rehearse an upgrade or a rollback: the target kube-apiserver binary reads a private copy of etcd."""

from __future__ import annotations

DOCUMENTATION = r"""
module: storage_rehearsal
short_description: Rehearse an upgrade on a copy of etcd with the target kube-apiserver binary itself
description:
  - The strongest pre-flight there is. Copies the cluster's etcd data into a scratch etcd on loopback (from the live etcd,
    with paged read-only range requests at one pinned revision, or from an C(etcdctl snapshot save) file), starts the
    target kube-apiserver binary on the copy with the cluster's storage flags, and reads every stored object through it.
  - "Measured verdicts per resource: C(safe) (every stored object read), C(unsafe) (the objects the target cannot decode,
    named), C(removed) (objects of a resource the target does not serve, named), C(unknown) (another read failure). A
    target that exits or never becomes ready on the copy blocks everything: after the swap it would never serve; the
    apiserver's error lines and the next step are reported."
  - Release data cannot know the cluster's feature gates, runtime-config, encryption providers, vendor patches, or a
    release it does not list; the binary does. Works for a rollback too (give the older binary).
  - "Safe on a live cluster: the live etcd is only read (one paged scan, throttled by O(pages_per_second)); the scratch
    etcd and apiserver listen on 127.0.0.1 only, on free ports, in a private directory (mode 0700) under O(work_dir) that
    is removed at the end, also on failure or SIGTERM. Started processes die with the module; a later run removes what a
    killed run left. No key, value, token or credential appears in the output: only the apiserver's error lines."
  - "While it runs, the copy (every Secret, the service-account key and tokens, as in etcd) is in
    C(<work_dir>/kubeupgrade-rehearsal-*), whose C(owner.pid) names the module's process; RV(copy_dir) names it in the
    result. A SIGKILL skips the cleanup: the next rehearsal or M(kubeupgrade.storage.storage_snapshot) run with the
    same O(work_dir) removes every such directory whose owner is gone (RV(stale_removed)), and stops the processes it
    started; with the default O(work_dir), so does the next run of any module of the collection on the host. To remove
    them without a run, check that no rehearsal or snapshot runs on the host and delete
    C(<work_dir>/kubeupgrade-rehearsal-*)."
  - "What it costs: disk for the copy (about twice the etcd database size), memory for the scratch etcd and apiserver
    (about 768 MiB plus four times the data), checked before anything starts. On 2 cores a 1.32 apiserver is ready in
    4-20 s."
  - "On a kubeadm or kubespray control-plane host the storage flags and the etcd connection are read from the static
    pod manifest O(apiserver_manifest) by default: C(--encryption-provider-config), C(--runtime-config),
    C(--feature-gates), C(--etcd-prefix), C(--storage-media-type), C(--service-cluster-ip-range), C(--etcd-servers),
    C(--etcd-cafile), C(--etcd-certfile), C(--etcd-keyfile). Options override them; the etcd connection is the
    manifest's (each file replaced by its option when given) only without O(etcd_endpoints)."
  - Feed the result to M(kubeupgrade.storage.storage_version_check) as O(kubeupgrade.storage.storage_version_check#module:rehearsal),
    which gates on it.
  - Runs the same in check mode (it changes nothing in the cluster), except that it pulls no image.
author: kubeupgrade.storage maintainers (@kubeupgrade)
options:
  apiserver_binary:
    description:
      - Path of the target kube-apiserver binary on the host (a binary install downloads it). It must print
        C(Kubernetes vX.Y.Z) for C(--version).
      - Default the binary in the target image containerd holds on the host (kubeadm pulls the target images before an
        upgrade) - O(apiserver_image), else the newest patch of O(target_release) named C(*/kube-apiserver:vX.Y.Z) in the
        C(k8s.io) namespace - mounted read-only with C(ctr images mount) for the run, then unmounted and its snapshot
        removed (RV(images)).
      - "An image containerd lacks is pulled first with C(ctr images pull) - O(apiserver_image), else the one
        C(kubeadm config images pull) pulls for O(target_version) at kubeadm's default registry
        (C(registry.k8s.io/kube-apiserver:v<target_version>)); it stays in containerd, where the upgrade needs it. Not in
        check mode.
        With O(target_release) only, nothing is pulled (the patch is unknown). A failed pull names the image and how
        to provide it (C(kubeadm config images pull), or C(ctr --namespace k8s.io images import)); as the default
        evidence (O(if_unavailable=skip)) that is the reason the rehearsal did not run."
    type: path
  target_version:
    description:
      - The target's patch release (C(1.36.2)) - the image taken from containerd is that one's, not the newest patch of
        O(target_release), and pulled when containerd lacks it.
    type: str
  apiserver_image:
    description:
      - The target kube-apiserver image in containerd's C(k8s.io) namespace to take the binary from
        (C(registry.k8s.io/kube-apiserver:v1.36.2)), when O(apiserver_binary) is not given; pulled when it is not there.
    type: str
  etcd_image:
    description:
      - The etcd image in containerd's C(k8s.io) namespace to take the scratch etcd from, when O(etcd_binary) is not
        given and no C(etcd) is in C(PATH). Default the image of the etcd static pod C(etcd.yaml) in the directory of
        O(apiserver_manifest) (C(/etc/kubernetes/manifests/etcd.yaml) on a kubeadm host).
    type: str
  containerd_address:
    description:
      - containerd's socket, for the images (O(apiserver_image), O(etcd_image)). Needs C(ctr), containerd's client.
    type: path
    default: /run/containerd/containerd.sock
  if_unavailable:
    description:
      - What to do when this host cannot provide what the rehearsal needs - the target binary (no path, no image),
        an etcd binary, the etcd connection or snapshot, or (with C(skip) only) the cluster's flags (no static pod
        manifest and no flag option, where the target's defaults would report what the cluster's flags enable as
        removed).
      - C(fail) fails the task with what is missing and how to provide it.
      - C(skip) returns RV(rehearsed)=C(false) with the reason in RV(not_rehearsed); M(kubeupgrade.storage.storage_version_check)
        then judges from release data and says in its report that nothing was rehearsed. The preflight role uses it
        where the rehearsal is the default evidence rather than asked for.
      - A bad option is always an error.
    type: str
    choices: [fail, skip]
    default: fail
  target_release:
    description:
      - The release the binary must be (C(1.33)); a mismatch is refused before anything starts.
    type: str
  etcd_binary:
    description:
      - The etcd binary (3.4 or later) for the scratch copy. Default C(etcd) in C(PATH), else the one in the etcd image
        (O(etcd_image)) mounted read-only as for the target.
      - The version it reports for C(--version), read before anything starts, decides the scratch etcd's flags (etcd 3.6
        renamed or deprecated some) and the restore tool; a binary that reports none is refused.
    type: path
  etcdutl_binary:
    description:
      - The tool that restores O(snapshot) - C(etcdutl) from etcd 3.5, C(etcdctl) on 3.4 (which has no C(etcdutl)).
        C(etcdctl) is refused for etcd 3.6 and later, which removed C(etcdctl snapshot restore).
      - Default the tool of O(etcd_binary)'s release next to it, else in C(PATH).
    type: path
  snapshot:
    description:
      - An C(etcdctl snapshot save) file to rehearse on instead of the live etcd (the backup every upgrade guide asks for).
    type: path
  page_size:
    description: Keys per range request to the live etcd (1 to 10000).
    type: int
    default: 1000
  pages_per_second:
    description:
      - Throttle on the live etcd, as for M(kubeupgrade.storage.storage_version_audit) - at most O(page_size) x
        O(pages_per_second) keys per second; C(0) reads as fast as etcd answers.
    type: float
    default: 20
  burst_pages:
    description:
      - Pages of the live etcd read as fast as it answers before O(pages_per_second) applies, as for
        M(kubeupgrade.storage.storage_version_audit); C(0) paces every page from the first.
    type: int
    default: 50
  apiserver_manifest:
    description:
      - The cluster's kube-apiserver static pod manifest, read for the storage flags and the etcd connection. A path given
        must exist.
      - Default C(/etc/kubernetes/manifests/kube-apiserver.yaml) (kubeadm, kubespray) when it exists. C("") reads no
        manifest (every flag from the options).
    type: path
  apiserver_manifest_backups:
    description:
      - Where kubeadm keeps the static pod manifests that C(kubeadm upgrade apply) and C(kubeadm upgrade node) replaced,
        each in a C(kubeadm-backup-manifests-<timestamp>) directory. Read for a rollback only - a target older than the
        release of the image in O(apiserver_manifest) - whose flags (a feature gate or a runtime-config group/version of
        the newer release only) are not how the target ran here.
      - The storage flags of a rollback then come from the newest backup (by modification time) whose kube-apiserver
        image is of the target release; without one, from O(apiserver_manifest). RV(flags_from) says which, and why.
        The etcd connection is always the current manifest's.
      - Default the C(tmp) directory beside the manifest's directory (C(/etc/kubernetes/tmp) for
        C(/etc/kubernetes/manifests/kube-apiserver.yaml)). C("") reads no backup. A path given must be a directory.
    type: path
  encryption_config:
    description: The apiserver's C(--encryption-provider-config) file. C("") drops the manifest's.
    type: path
  runtime_config:
    description: The target apiserver's C(--runtime-config). C("") drops the manifest's.
    type: str
  feature_gates:
    description:
      - The target apiserver's C(--feature-gates). C("") drops the manifest's. A gate the target release does not know makes
        an upstream apiserver exit (the rehearsal names it); builds that only warn are reported in RV(ignored_feature_gates).
    type: str
  etcd_prefix:
    description: The apiserver's C(--etcd-prefix). Default the manifest's, else C(/registry).
    type: str
  storage_media_type:
    description: The apiserver's C(--storage-media-type). Default the manifest's.
    type: str
  service_cluster_ip_range:
    description:
      - The apiserver's C(--service-cluster-ip-range) (its IP allocation check reads the stored Services and IPAddresses at
        start). Default the manifest's, else C(10.96.0.0/12).
    type: str
  emulated_version:
    description:
      - The target apiserver's C(--emulated-version) (compatibility versions, KEP-4330; kube-apiserver 1.31+), for
        example C(1.35) to rehearse step 1 of a two-step upgrade - the new binary serving and storing as the current
        release. C("") drops the manifest's.
    type: str
  min_compatibility_version:
    description: The target apiserver's C(--min-compatibility-version) (kube-apiserver 1.35+). C("") drops the manifest's.
    type: str
  emulation_forward_compatible:
    description:
      - The target apiserver's C(--emulation-forward-compatible) (C(true) or C(false); kube-apiserver 1.33+), which an
        emulated release with a beta API that has a newer version in the binary may need to become ready. C("") drops
        the manifest's.
    type: str
  target_crds:
    description:
      - Target CRD manifests (paths of files or directories, inline YAML, or dictionaries, as for
        M(kubeupgrade.storage.storage_version_check)), applied to the copy only once the target is up. A manifest the
        apiserver refuses (a version still in C(status.storedVersions) dropped) makes its resource C(unsafe); custom
        resources are then read through the applied manifests. The cluster's CRDs are never touched.
    type: list
    elements: raw
    default: []
  migrate_with:
    description:
      - Rehearse the plan too. The binary the cluster runs now first migrates the copy (every stored resource rewritten
        by the collection's client-side migrator, each CRD's C(status.storedVersions) pruned, as
        M(kubeupgrade.storage.storage_migration) does), then the target reads it. The proof that the migration makes
        everything readable, and a measured duration for the real one (RV(plan_migration)).
      - "Keys: C(apiserver_binary) (required), and C(feature_gates), C(runtime_config), C(encryption_config),
        C(etcd_prefix), C(storage_media_type), C(service_cluster_ip_range), C(emulated_version),
        C(min_compatibility_version), C(emulation_forward_compatible) overriding the manifest's flags (which describe
        the current apiserver)."
    type: dict
  work_dir:
    description: Where the private scratch directory is made. Default the system's temporary directory.
    type: path
  start_timeout:
    description:
      - Seconds the target apiserver gets to become ready on the copy (5 to 3600); longer counts as never starting.
    type: float
    default: 120
  names_limit:
    description: How many objects to name per resource and verdict (C(-1) every one, C(0) none). Counts are always exact.
    type: int
    default: 20
  fail_on:
    description:
      - Verdicts that make the task fail. A target that does not start always fails it. C([]) reports only (for a check
        that gates on the result).
    type: list
    elements: str
    choices: [unsafe, removed, unknown]
    default: [unsafe, removed, unknown]
extends_documentation_fragment:
  - kubeupgrade.storage.etcd
notes:
  - On a kubeadm control-plane host nothing but O(target_release) is needed - the binary from the target image, etcd
    from the etcd image, the flags and the etcd connection from the static pod manifests.
  - A KMS v2 provider in the encryption configuration is reached through its socket on the host, as the live apiserver does.
seealso:
  - module: kubeupgrade.storage.storage_version_check
  - module: kubeupgrade.storage.storage_version_audit
"""

EXAMPLES = r"""
- name: Rehearse the upgrade to 1.36 on a kubeadm control-plane host (binaries from the images, flags from the manifest)
  kubeupgrade.storage.storage_rehearsal:
    target_release: "1.36"
  register: rehearsal
  become: true

- name: Rehearse the upgrade to 1.33 with the target binary (kubeadm host; flags and etcd from the static pod manifest)
  kubeupgrade.storage.storage_rehearsal:
    apiserver_binary: /opt/k8s/v1.33.5/kube-apiserver
    target_release: "1.33"
    etcd_binary: /usr/local/bin/etcd
  register: rehearsal
  become: true

- name: Rehearse a rollback to 1.32 on the snapshot taken before the upgrade, report only
  kubeupgrade.storage.storage_rehearsal:
    apiserver_binary: /opt/k8s/v1.32.6/kube-apiserver
    snapshot: /var/backups/etcd-before-1.33.db
    fail_on: []
  register: rollback_rehearsal

- name: Gate on it
  kubeupgrade.storage.storage_version_check:
    target_release: "1.33"
    rehearsal: "{{ rehearsal }}"
"""

RETURN = r"""
rehearsed:
  description: Whether the rehearsal ran (C(false) when the task failed, or with O(if_unavailable=skip) when it could not run).
  returned: always
  type: bool
not_rehearsed:
  description: Why it did not run, and how to make it run (with O(if_unavailable=skip)).
  returned: when not rehearsed
  type: str
images:
  description:
    - The images the binaries were taken from, each C(image), C(mounted_at) (unmounted before the module returns) and
      C(pulled) (whether this run pulled it into containerd).
  returned: success
  type: list
  elements: dict
flags_from:
  description:
    - Where the cluster's flags were read - the manifest (for a rollback, kubeadm's backup of the target release's
      manifest, or the current manifest and why), the options, or C(none) (the target's defaults).
  sample: "kubeadm's backup /etc/kubernetes/tmp/kubeadm-backup-manifests-2026-03-01-10-00-00/kube-apiserver.yaml of the 1.35
    manifest (registry.k8s.io/kube-apiserver:v1.35.3), for a rollback from registry.k8s.io/kube-apiserver:v1.36.2"
  returned: success
  type: str
verdict:
  description: The worst verdict (C(safe), C(unknown), C(removed), C(unsafe)).
  returned: success
  type: str
blocking:
  description: Each verdict in O(fail_on), and a start failure, with its subject, reason and next step.
  returned: always
  type: list
  elements: dict
resources:
  description:
    - Per resource with stored objects - C(keys) stored in the copy, C(served), C(served_as) (the group/version read),
      C(objects_read), C(undecodable) with C(undecodable_names) and C(decode_errors), C(removed_names), C(error),
      C(manifest) (a target CRD manifest C(applied) or C(rejected) on the copy), C(verdict), C(reason), C(next_step).
  returned: success
  type: dict
counts:
  description: Resources per verdict.
  returned: success
  type: dict
started:
  description: Whether the target became ready on the copy.
  returned: success
  type: bool
start_failure:
  description: Why the target did not start (a blocking verdict with reason and next step), or null.
  returned: success
  type: dict
fatal_log:
  description: The target apiserver's error lines when it did not start (never keys, values or credentials).
  returned: success
  type: list
  elements: str
ignored_feature_gates:
  description: Feature gates the target warned it does not know and ignores (builds that do not exit on them).
  returned: success
  type: list
  elements: str
target_git_version:
  description: What the binary reports (C(v1.33.5)).
  returned: success
  type: str
target_release:
  description: Its minor release (C(1.33)).
  returned: success
  type: str
binary:
  description: The binary rehearsed.
  returned: success
  type: str
flags:
  description: The storage flags the target ran with (flag name to value).
  returned: success
  type: dict
source:
  description: What was copied - C(kind) (C(etcd) or C(snapshot)), C(from), C(revision), C(keys), C(bytes).
  returned: success
  type: dict
scratch_etcd:
  description: The etcd the copy ran on.
  returned: success
  type: dict
  contains:
    etcd_binary:
      description: The etcd binary (O(etcd_binary)).
      type: str
      sample: /usr/local/bin/etcd
    etcd_version:
      description: The version it reported for C(--version), which chose its flags and the restore tool.
      type: str
      sample: 3.5.30
    restore_tool:
      description: The tool that restored O(snapshot) (C(etcdutl), or C(etcdctl) on etcd 3.4); null for a copy of a live etcd.
      type: str
      sample: /usr/local/bin/etcdutl
copy_dir:
  description:
    - Where the copy was while the rehearsal ran - C(path), the private directory under O(work_dir) (the scratch etcd's
      data, its logs, certificate and token) - and C(removed), whether it is gone (it is removed before the module
      returns, also on failure).
  returned: success
  type: dict
  sample: {"path": "/tmp/kubeupgrade-rehearsal-3k2j9x", "removed": true}
stale_removed:
  description:
    - Directories of killed runs (each an etcd copy) removed from O(work_dir) before this run started, and the image
      mounts a killed run left in the system's temporary directory (C(kubeupgrade-image-<component>-<pid>-*)), unmounted
      with C(ctr images unmount --rm) before this run mounted its own.
  returned: success
  type: list
  elements: str
room:
  description: The disk and memory needed and available, in bytes, as checked before starting.
  returned: success
  type: dict
outside_layout:
  description: Keys of the copy outside the apiserver's key layout (not read).
  returned: success
  type: int
plan_migration:
  description:
    - With O(migrate_with), what the current binary did on the copy before the target read it - C(git_version),
      C(objects_migrated), C(failed), C(seconds), and per resource C(migrated), C(failed), C(error),
      C(pruned_stored_versions), C(seconds). Null without it.
  returned: success
  type: dict
rehearsed_at:
  description: When the rehearsal started (UTC).
  returned: success
  type: str
timings:
  description: Seconds spent copying, starting the target, reading, and in all.
  returned: success
  type: dict
headline:
  description: The outcome on one line.
  returned: success
  type: str
report_text:
  description: A compact table for the play output.
  returned: success
  type: str
report_markdown:
  description: A Markdown report (target, flags, source, every resource).
  returned: success
  type: str
"""

# module_utils/_bytecode.py first: it keeps the collection's module_utils imported below compiled between tasks
from ansible_collections.kubeupgrade.storage.plugins.module_utils import _bytecode  # pylint: disable=unused-import  # noqa: F401
from ansible_collections.kubeupgrade.storage.plugins.module_utils._rehearse import runner
from ansible_collections.kubeupgrade.storage.plugins.module_utils.connection_args import etcd_argument_spec
from ansible_collections.kubeupgrade.storage.plugins.module_utils.module import KubeUpgradeModule


def argument_spec() -> dict:
    return etcd_argument_spec(
        apiserver_binary=dict(type="path"),
        target_version=dict(type="str"),
        apiserver_image=dict(type="str"),
        etcd_image=dict(type="str"),
        containerd_address=dict(type="path", default="/run/containerd/containerd.sock"),
        if_unavailable=dict(type="str", choices=["fail", "skip"], default="fail"),
        target_release=dict(type="str"),
        etcd_binary=dict(type="path"),
        etcdutl_binary=dict(type="path"),
        snapshot=dict(type="path"),
        page_size=dict(type="int", default=1000),
        pages_per_second=dict(type="float", default=20),
        burst_pages=dict(type="int", default=50),
        apiserver_manifest=dict(type="path"),
        apiserver_manifest_backups=dict(type="path"),
        encryption_config=dict(type="path"),
        runtime_config=dict(type="str"),
        feature_gates=dict(type="str"),
        etcd_prefix=dict(type="str"),
        storage_media_type=dict(type="str"),
        service_cluster_ip_range=dict(type="str"),
        emulated_version=dict(type="str"),
        min_compatibility_version=dict(type="str"),
        emulation_forward_compatible=dict(type="str"),
        target_crds=dict(type="list", elements="raw", default=[]),
        migrate_with=dict(type="dict"),
        work_dir=dict(type="path"),
        start_timeout=dict(type="float", default=120),
        names_limit=dict(type="int", default=20),
        fail_on=dict(type="list", elements="str", choices=["unsafe", "removed", "unknown"], default=["unsafe", "removed", "unknown"]),
    )


def main() -> None:
    KubeUpgradeModule(argument_spec(), connection=False, supports_check_mode=True,
                      empty_result={"blocking": [], "rehearsed": False}).run(runner.run)


if __name__ == "__main__":
    main()
