# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What makes a snapshot usable, and how to use it, as plain data.

An etcd snapshot (``etcdctl snapshot save``, or etcd's maintenance Snapshot stream it reads) is the backend
database followed by the sha256 of everything before it; ``etcdutl snapshot restore`` refuses a file whose
trailer does not match. The way back after an upgrade whose newer release wrote objects the older one cannot
read is this snapshot: "Restoring an etcd cluster" in the Kubernetes documentation
(https://kubernetes.io/docs/tasks/administer-cluster/configure-upgrade-etcd/#restoring-an-etcd-cluster).
"""

from __future__ import annotations

from typing import List

TRAILER = 32  # bytes of sha256 at the end of a snapshot
MIN_SIZE = 4096 + TRAILER  # smaller than one bbolt page plus the trailer: not a database


def trailer_problem(size: int, body_digest: bytes, trailer: bytes) -> str:
    """Why a snapshot's integrity trailer does not hold ("" when it does)."""
    if size < MIN_SIZE:
        return f"it has {size} bytes, less than an etcd database can have"
    if body_digest != trailer:
        return "its last 32 bytes are not the sha256 of the rest (cut short, corrupted, or not an etcd snapshot)"
    return ""


def restore_steps(path: str, revision) -> List[str]:
    """How to go back with this snapshot on a kubeadm control plane, in order."""
    return [
        f"Keep {path} (revision {revision}) until the upgrade is verified; copy it off the host.",
        "To go back past objects the newer release wrote: on every control-plane host move "
        "/etc/kubernetes/manifests/kube-apiserver.yaml and etcd.yaml out of the manifests directory (the apiservers and "
        "etcd stop).",
        f"On every etcd member: etcdutl snapshot restore {path} --data-dir /var/lib/etcd-from-snapshot --name <member name> "
        "--initial-cluster <name=peer URL,...> --initial-advertise-peer-urls <this member's peer URL> "
        "(etcdctl snapshot restore with ETCDCTL_API=3 on etcd 3.4).",
        "Point etcd.yaml's data directory (--data-dir and its hostPath volume) at /var/lib/etcd-from-snapshot, move etcd.yaml "
        "back, then the kube-apiserver.yaml of the release the snapshot was taken under.",
        "Everything written after the snapshot is lost: compare with what the upgrade's reports list.",
    ]
