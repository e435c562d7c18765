#!/usr/bin/python
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Take an etcd snapshot before an upgrade (or keep and verify the one there), and prove it restorable."""

from __future__ import annotations

DOCUMENTATION = r"""
module: storage_snapshot
short_description: Take an etcd snapshot before an upgrade and prove it restorable
description:
  - The way back from an upgrade whose newer release wrote objects the older one cannot read (FlowSchemas v1 that 1.28
    cannot decode, for example) is the etcd snapshot taken before the first host was touched. This module makes sure one
    exists.
  - Takes it through etcd's maintenance Snapshot stream (the same bytes as C(etcdctl snapshot save); a read, nothing is
    written to etcd), into O(dest) with mode 0600, through a partial file renamed only once it is whole. The stream is
    etcd's gRPC C(Maintenance/Snapshot), as C(etcdctl) reads it; with O(etcd_validate_certs=false) against https (which
    grpcio cannot do), or a member that does not answer in gRPC, its JSON gateway (C(/v3/maintenance/snapshot)).
  - A file already at O(dest) (or one this module took beside it) is kept as the way back only when it is proven this
    cluster's and current - the UID of the C(kube-system) namespace in its restored copy is the live etcd's (etcd's
    cluster and member IDs cannot tell - a restore writes new ones), and no revision was written since it was taken, or
    O(upgrade_started) - a resumed upgrade keeps the snapshot taken before its first host.
  - Otherwise a new snapshot is taken beside it (O(dest)'s name with the UTC time before its extension), the old file is
    left untouched, and the result says why it was not kept (RV(not_kept)). Without O(etcd_endpoints) an existing file
    is only verified, never proven the way back.
  - With O(verify=restore), the scratch etcd copies killed runs left in O(work_dir) are removed first.
  - Verifies the integrity trailer (the sha256 etcd appends), and with O(verify=restore) restores the file into a scratch
    etcd on 127.0.0.1 in a private temporary directory, reads its revision and keys, and removes it all.
  - Returns the steps to restore it on a kubeadm control plane.
  - In check mode nothing is written; an existing file is still verified.
author: kubeupgrade.storage maintainers (@kubeupgrade)
options:
  dest:
    description: Path of the snapshot file on the host running the module. A missing directory is created (mode 0700).
    type: path
    required: true
  overwrite:
    description: Replace a file already at O(dest) with a new snapshot, without judging it.
    type: bool
    default: false
  upgrade_started:
    description:
      - Whether a host already runs the target release. Then the newest snapshot of this cluster at O(dest) (or beside it)
        is kept however many revisions were written since, as one taken now would hold what the upgraded apiservers wrote.
      - Before that, only a snapshot no write has followed is kept; any other is superseded by a new one beside it.
    type: bool
    default: false
  verify:
    description:
      - C(restore) restores it into a scratch etcd and reads it back (needs O(etcd_binary) and the restore tool of its
        release, O(etcdutl_binary)); C(checksum) checks the integrity trailer only.
    type: str
    choices: [restore, checksum]
    default: restore
  etcd_prefix:
    description: The apiserver's C(--etcd-prefix), for the count of keys in the restored copy.
    type: str
    default: /registry
  etcd_binary:
    description:
      - etcd binary (3.4 or later) for O(verify=restore). Default C(etcd) in C(PATH).
      - The version it reports for C(--version), read before anything is taken, decides the scratch etcd's flags (etcd
        3.6 renamed or deprecated some) and the restore tool; a binary that reports none is refused.
    type: path
  etcdutl_binary:
    description:
      - The tool that restores the snapshot for O(verify=restore) - C(etcdutl) from etcd 3.5, C(etcdctl) on 3.4 (which has
        no C(etcdutl)). C(etcdctl) is refused for etcd 3.6 and later, which removed C(etcdctl snapshot restore).
      - Default the tool of O(etcd_binary)'s release next to it, else in C(PATH).
    type: path
  work_dir:
    description: Where the private scratch directory of O(verify=restore) is made. Default the system's temporary directory.
    type: path
extends_documentation_fragment:
  - kubeupgrade.storage.etcd
seealso:
  - module: kubeupgrade.storage.storage_rehearsal
  - name: Restoring an etcd cluster (Kubernetes documentation)
    description: How a snapshot is restored on a control plane.
    link: https://kubernetes.io/docs/tasks/administer-cluster/configure-upgrade-etcd/#restoring-an-etcd-cluster
"""

EXAMPLES = r"""
- name: Snapshot etcd before the first host is upgraded (kubeadm host)
  kubeupgrade.storage.storage_snapshot:
    dest: /var/lib/kubeupgrade/etcd-before-1.33.db
    etcd_endpoints: [https://127.0.0.1:2379]
    etcd_ca_cert: /etc/kubernetes/pki/etcd/ca.crt
    etcd_client_cert: /etc/kubernetes/pki/apiserver-etcd-client.crt
    etcd_client_key: /etc/kubernetes/pki/apiserver-etcd-client.key
  become: true
  register: snapshot

- name: Verify the snapshot the backup job took
  kubeupgrade.storage.storage_snapshot:
    dest: /var/backups/etcd/nightly.db
"""

RETURN = r"""
path:
  description: The snapshot file - the way back when RV(proven) is set (a new one beside O(dest) when that was not kept).
  returned: always
  type: str
proven:
  description:
    - Why RV(path) is the way back - C(taken by this run), C(this cluster's, no write since), C(this cluster's, taken
      before a host was upgraded); empty when it is not proven (no O(etcd_endpoints) to compare with).
  returned: always
  type: str
not_kept:
  description: Files found at O(dest) or beside it that were left untouched and are not the way back, and why.
  returned: always
  type: list
  elements: dict
  contains:
    path:
      description: The file.
      type: str
    reason:
      description: Why it is not kept (another cluster's, stale, not usable, not provable).
      type: str
live_revision:
  description: The live etcd's revision when the run started, which a kept snapshot's is compared with.
  returned: when O(etcd_endpoints) are given
  type: int
stale_removed:
  description: Scratch directories (each a full etcd copy) that killed runs left in O(work_dir), removed.
  returned: when any
  type: list
  elements: str
taken:
  description: Whether this run took it (false when an existing file was kept).
  returned: always
  type: bool
kept:
  description: Whether a file already at O(dest) (or one taken beside it) was kept - proven the way back, or verified.
  returned: always
  type: bool
bytes:
  description: Its size.
  returned: success
  type: int
sha256_trailer:
  description: The sha256 etcd appended (hex), checked against the file.
  returned: success
  type: str
verified:
  description: How it was verified - C(restore) or C(checksum).
  returned: success
  type: str
revision:
  description: The etcd revision it holds, read back from the restored copy (O(verify=restore)).
  returned: success
  type: int
key_count:
  description: Keys under O(etcd_prefix) in the restored copy (O(verify=restore)).
  returned: success
  type: int
scratch_etcd:
  description: What restored and served the copy (O(verify=restore)).
  returned: when O(verify=restore)
  type: dict
  contains:
    etcd_binary:
      description: The etcd binary.
      type: str
      sample: /usr/local/bin/etcd
    etcd_version:
      description: The version it reported for C(--version), which chose its flags and the restore tool.
      type: str
      sample: 3.5.30
    restore_tool:
      description: The tool that restored the snapshot (C(etcdutl), or C(etcdctl) on etcd 3.4).
      type: str
      sample: /usr/local/bin/etcdutl
revision_before:
  description: etcd's revision just before this run took the snapshot.
  returned: when taken
  type: int
endpoint:
  description: The etcd member it was taken from.
  returned: when taken
  type: str
etcd_version:
  description: That member's etcd version.
  returned: when taken
  type: str
taken_at:
  description: When it was taken (UTC).
  returned: when taken
  type: str
restore_steps:
  description: How to restore it on a kubeadm control plane, in order.
  returned: success
  type: list
  elements: str
"""

# module_utils/_bytecode.py first: it keeps the collection's module_utils imported below compiled between tasks
from ansible_collections.kubeupgrade.storage.plugins.module_utils import _bytecode  # pylint: disable=unused-import  # noqa: F401
from ansible_collections.kubeupgrade.storage.plugins.module_utils._snapshot import runner
from ansible_collections.kubeupgrade.storage.plugins.module_utils.connection_args import etcd_argument_spec
from ansible_collections.kubeupgrade.storage.plugins.module_utils.module import KubeUpgradeModule


def argument_spec() -> dict:
    return etcd_argument_spec(
        dest=dict(type="path", required=True),
        overwrite=dict(type="bool", default=False),
        upgrade_started=dict(type="bool", default=False),
        verify=dict(type="str", choices=["restore", "checksum"], default="restore"),
        etcd_prefix=dict(type="str", default="/registry"),
        etcd_binary=dict(type="path"),
        etcdutl_binary=dict(type="path"),
        work_dir=dict(type="path"),
    )


def main() -> None:
    KubeUpgradeModule(argument_spec(), connection=False, supports_check_mode=True,
                      empty_result={"path": "", "taken": False, "kept": False, "proven": "", "not_kept": []}).run(runner.run)


if __name__ == "__main__":
    main()
