# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What makes a snapshot usable, and how to use it, as plain data.

An etcd snapshot (``etcdctl snapshot save``, or etcd's maintenance Snapshot stream it reads) is the backend
database followed by the sha256 of everything before it; ``etcdutl snapshot restore`` refuses a file whose
trailer does not match. The way back after an upgrade whose newer release wrote objects the older one cannot
read is this snapshot: "Restoring an etcd cluster" in the Kubernetes documentation
(https://kubernetes.io/docs/tasks/administer-cluster/configure-upgrade-etcd/#restoring-an-etcd-cluster).
"""

from __future__ import annotations

import json
import re
from typing import List, Tuple

from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd import envelope

TRAILER = 32  # bytes of sha256 at the end of a snapshot
MIN_SIZE = 4096 + TRAILER  # smaller than one bbolt page plus the trailer: not a database


def trailer_problem(size: int, body_digest: bytes, trailer: bytes) -> str:
    """Why a snapshot's integrity trailer does not hold ("" when it does)."""
    if size < MIN_SIZE:
        return f"it has {size} bytes, less than an etcd database can have"
    if body_digest != trailer:
        return "its last 32 bytes are not the sha256 of the rest (cut short, corrupted, or not an etcd snapshot)"
    return ""


def restore_steps(path: str, revision, proven: str = "") -> List[str]:
    """How to go back with this snapshot on a kubeadm control plane, in order (``proven``: why it is the way back)."""
    return [
        f"Keep {path} (revision {revision}{'; ' + proven if proven else ''}) until the upgrade is verified; copy it off the "
        "host.",
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


# --- whose snapshot, and whether it is still the way back ---------------------------------------------------------
# etcd's cluster and member IDs cannot tell: `etcdutl snapshot restore` (`etcdctl snapshot restore` on 3.4) writes a
# new membership from its --name, --initial-cluster and --initial-cluster-token flags, and the cluster ID is a hash of
# the member IDs, themselves hashes of peer URLs and the token (server/etcdserver/api/membership/cluster.go, genID, and
# member.go, NewMember). Measured on 3.4.23 and 3.5.30: a snapshot of the live member restores with another cluster_id
# and member_id. And two clusters built alike (a lab re-created on the same addresses) share one. What a cluster keeps
# for its whole life is its objects' UIDs: the apiserver creates the kube-system namespace once, at the cluster's first
# start, with a random metadata.uid.
IDENTITY_NAMESPACE = "kube-system"

KEPT_CURRENT = "this cluster's, no write since"
KEPT_BEFORE_UPGRADE = "this cluster's, taken before a host was upgraded"
TAKEN = "taken by this run"


def identity_key(prefix: str) -> str:
    """The etcd key of the namespace whose UID identifies the cluster (``prefix`` ends with a slash)."""
    return f"{prefix}namespaces/{IDENTITY_NAMESPACE}"


def object_uid(value: bytes) -> str:
    """metadata.uid of an object as the apiserver stores it ("" when it cannot be read: encrypted at rest, or not an
    object): protobuf through the etcd layer's ``envelope.protobuf_uid``, JSON here."""
    try:
        if value.startswith(envelope.PROTOBUF_MAGIC):
            return envelope.protobuf_uid(value)
        if value.lstrip().startswith(b"{"):
            metadata = json.loads(value).get("metadata") or {}
            return str(metadata.get("uid") or "") if isinstance(metadata, dict) else ""
    except (ValueError, UnicodeDecodeError, AttributeError):
        return ""
    return ""


NOT_PROVEN, OTHER_CLUSTER, STALE = "not proven", "another cluster's", "stale"


def why_not_kept(snapshot_uid: str, live_uid: str, snapshot_revision: int, live_revision: int,
                 upgrade_started: bool) -> Tuple[str, str]:
    """(kind, why) a snapshot found at dest is not the way back (("", "") when it is): it must be this cluster's (the
    kube-system namespace's UID in the restored copy is the live one's) and current - no write since it was taken, or,
    once a host is upgraded, simply this cluster's: a snapshot taken now would hold what the upgraded apiservers wrote."""
    what = f"the {IDENTITY_NAMESPACE} namespace"
    if not live_uid:
        return NOT_PROVEN, (f"it cannot be proven this cluster's: the live etcd has no readable {what} (its UID is what "
                            "identifies a cluster)")
    if not snapshot_uid:
        return NOT_PROVEN, f"it cannot be proven this cluster's: the restored copy has no readable {what}"
    if snapshot_uid != live_uid:
        return OTHER_CLUSTER, f"it is another cluster's: {what}'s UID in it is {snapshot_uid}, the live etcd's is {live_uid}"
    if upgrade_started:
        return "", ""
    if snapshot_revision < live_revision:
        return STALE, (f"it is stale: it holds revision {snapshot_revision}, the live etcd is at {live_revision} (what "
                       f"{live_revision - snapshot_revision} revisions wrote would be lost by restoring it)")
    if snapshot_revision > live_revision:
        return STALE, (f"its revision {snapshot_revision} is ahead of the live etcd's {live_revision}: etcd was restored or "
                       "rebuilt since it was taken")
    return "", ""


STAMP = "%Y%m%dT%H%M%SZ"
_STAMP_RE = r"\d{8}T\d{6}Z"
AFTER_START = "-after-upgrade-started"


def _split_ext(path: str) -> Tuple[str, str]:
    """os.path.splitext on a POSIX path, without os (a pure file)."""
    name = path.rsplit("/", 1)[-1]
    dot = name.rfind(".")
    if dot <= 0 or not name[:dot].strip("."):
        return path, ""
    return path[:len(path) - len(name) + dot], name[dot:]


def fresh_path(dest: str, stamp: str, upgrade_started: bool = False) -> str:
    """Where a snapshot taken beside a file that is not kept goes: dest's name with the UTC time before its extension.
    One taken once a host is upgraded is marked: it is never taken for the snapshot from before the upgrade."""
    root, ext = _split_ext(dest)
    return f"{root}.{stamp}{AFTER_START if upgrade_started else ''}{ext}"


def is_fresh_of(dest: str, path: str) -> bool:
    """Whether ``path`` is a snapshot this module took beside ``dest`` before any host was upgraded."""
    root, ext = _split_ext(dest)
    return path.startswith(root + ".") and re.fullmatch(re.escape(root) + r"\." + _STAMP_RE + re.escape(ext), path) is not None
