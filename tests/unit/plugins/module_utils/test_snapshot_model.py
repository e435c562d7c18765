# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The snapshot's pure decisions: whose it is (the kube-system namespace's UID as the apiserver stores it), whether it
is still the way back, and where a new one goes beside a file that is not kept."""

from __future__ import annotations

import json

import pytest

from ansible_collections.kubeupgrade.storage.plugins.module_utils._snapshot import model

UID = "0b7c1a52-9d53-4c4e-a0f6-1c2b3d4e5f60"
OTHER = "22222222-bbbb-4bbb-8bbb-000000000002"


def _field(number: int, payload: bytes) -> bytes:
    return bytes([number << 3 | 2, len(payload)]) + payload


# A Namespace as kube-apiserver writes it: k8s\x00 + runtime.Unknown{1: TypeMeta, 2: raw Namespace, 4: contentType},
# the Namespace's field 1 its ObjectMeta (1 name, 5 uid, 6 resourceVersion left empty on write, 7 generation varint).
PROTO = (b"k8s\x00" + _field(1, _field(1, b"v1") + _field(2, b"Namespace"))
         + _field(2, _field(1, _field(1, b"kube-system") + _field(5, UID.encode()) + b"\x38\x00")
                  + _field(2, _field(1, b"kubernetes")))
         + _field(3, b"") + _field(4, b""))


@pytest.mark.parametrize("value, uid", [
    (PROTO, UID),
    (json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-system", "uid": UID}}).encode(), UID),
    (b"k8s:enc:aescbc:v1:key1:" + bytes(range(48)), ""),  # encrypted at rest: not readable, never guessed
    (b"k8s\x00\x0a\xff", ""),  # cut short
    (b'{"metadata": "x"}', ""),
    (b"", ""),
], ids=["protobuf", "json", "encrypted", "truncated", "odd-json", "empty"])
def test_the_uid_is_read_from_the_stored_object(value, uid):
    assert model.object_uid(value) == uid


@pytest.mark.parametrize("snapshot_uid, live_uid, revisions, started, kind, words", [
    (UID, UID, (573, 573), False, "", ""),
    (UID, UID, (573, 9000), True, "", ""),  # a resumed upgrade keeps the one from before its first host, however old
    (OTHER, UID, (573, 573), False, model.OTHER_CLUSTER, f"UID in it is {OTHER}, the live etcd's is {UID}"),
    (OTHER, UID, (573, 573), True, model.OTHER_CLUSTER, "another cluster's"),
    (UID, UID, (573, 600), False, model.STALE, "holds revision 573, the live etcd is at 600 (what 27 revisions"),
    (UID, UID, (700, 600), False, model.STALE, "ahead of the live etcd's 600"),
    ("", UID, (573, 573), True, model.NOT_PROVEN, "the restored copy has no readable the kube-system namespace"),
    (UID, "", (573, 573), False, model.NOT_PROVEN, "the live etcd has no readable"),
], ids=["current", "resumed", "other", "other-resumed", "stale", "ahead", "unreadable-copy", "unreadable-live"])
def test_a_found_snapshot_is_the_way_back_only_when_proven(snapshot_uid, live_uid, revisions, started, kind, words):
    got_kind, why = model.why_not_kept(snapshot_uid, live_uid, revisions[0], revisions[1], started)
    assert got_kind == kind and words in why


def test_a_new_snapshot_goes_beside_dest_and_only_those_from_before_the_upgrade_are_candidates():
    dest = "/var/lib/kubeupgrade/etcd-before-1.33.db"
    fresh = model.fresh_path(dest, "20261128T113000Z")
    assert fresh == "/var/lib/kubeupgrade/etcd-before-1.33.20261128T113000Z.db"
    after = model.fresh_path(dest, "20261128T113000Z", upgrade_started=True)
    assert after == "/var/lib/kubeupgrade/etcd-before-1.33.20261128T113000Z-after-upgrade-started.db"
    assert model.is_fresh_of(dest, fresh)
    assert not model.is_fresh_of(dest, after) and not model.is_fresh_of(dest, dest)
    assert not model.is_fresh_of(dest, "/var/lib/kubeupgrade/etcd-before-1.33.db.part")
    assert not model.is_fresh_of(dest, "/var/lib/kubeupgrade/etcd-before-1.34.20261128T113000Z.db")
    assert model.fresh_path("/backups/etcd", "20261128T113000Z") == "/backups/etcd.20261128T113000Z"
    assert model.fresh_path("/backups.d/.etcd", "20261128T113000Z") == "/backups.d/.etcd.20261128T113000Z"


def test_the_restore_steps_say_why_the_file_is_the_way_back():
    steps = model.restore_steps("/s.db", 573, model.KEPT_BEFORE_UPGRADE)
    assert steps[0].startswith("Keep /s.db (revision 573; this cluster's, taken before a host was upgraded)")
