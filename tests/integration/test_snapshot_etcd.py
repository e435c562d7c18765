# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""storage_snapshot against a real etcd: taken (plain and TLS), kept when there, proved restorable, refused when
corrupt; what etcd's own tool says about the file agrees. Debian's etcd 3.4 (restored with its etcdctl) and etcd 3.5
(taken from 3.5 and restored with its own etcdutl, beside the binary)."""

from __future__ import annotations

import json
import os
import subprocess
import time

import etcd_fixture
import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.kubeupgrade.storage.plugins.modules import storage_snapshot


@pytest.fixture(params=[(None, False), (None, True), ("3.5", True)], ids=["plain", "tls", "3.5-tls"])
def etcd(request, tmp_path):
    """An etcd member; the version None is the one on PATH (Debian's 3.4)."""
    version, tls = request.param
    yield from etcd_fixture.serve(tmp_path / "etcd", tls=tls, version=version)


@pytest.fixture
def plain_etcd(tmp_path):
    yield from etcd_fixture.serve(tmp_path / "etcd")


def _field(number: int, payload: bytes) -> bytes:
    assert len(payload) < 128
    return bytes([number << 3 | 2, len(payload)]) + payload


def namespace(name: str, uid: str) -> bytes:
    """A Namespace as kube-apiserver stores it: k8s\x00, runtime.Unknown{typeMeta, raw: Namespace{metadata{name, uid}}}."""
    meta = _field(1, name.encode()) + _field(5, uid.encode())
    return b"k8s\x00" + _field(1, _field(1, b"v1") + _field(2, b"Namespace")) + _field(2, _field(1, meta)) + _field(4, b"")


def run(capsys, args, check_mode=False):
    args = dict(args, _ansible_check_mode=check_mode)
    with patch_module_args(args), pytest.raises(SystemExit):
        storage_snapshot.main()
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def connection(server):
    params = {"etcd_endpoints": [server.url]}
    if server.tls:
        params.update(etcd_ca_cert=server.pki.ca_cert, etcd_client_cert=server.pki.client_cert, etcd_client_key=server.pki.client_key)
    return params


def etcdctl_status(path):
    done = subprocess.run(["etcdctl", "snapshot", "status", str(path), "-w", "json"], capture_output=True, check=True,
                          env=dict(os.environ, ETCDCTL_API="3"))
    return json.loads(done.stdout)


def test_a_snapshot_is_taken_proved_restorable_and_kept_on_the_next_run(etcd, tmp_path, capsys):
    etcd.put("/registry/namespaces/kube-system", namespace("kube-system", "0b7c1a52-9d53-4c4e-a0f6-1c2b3d4e5f60"))
    for index in range(50):
        etcd.put(f"/registry/configmaps/default/cm-{index}", b"x" * 100)
    dest = tmp_path / "before-upgrade.db"
    args = {"dest": str(dest), "work_dir": str(tmp_path), "etcd_binary": etcd.binary, **connection(etcd)}

    planned = run(capsys, args, check_mode=True)
    assert planned["changed"] and not planned["taken"] and not dest.exists(), planned

    taken = run(capsys, args)
    assert not taken.get("failed"), taken
    assert taken["changed"] and taken["taken"] and taken["verified"] == "restore", taken
    assert taken["key_count"] == 51 and taken["revision"] >= taken["revision_before"] > 0, taken
    # The member's own release proved it: etcd 3.5 restored with the etcdutl beside it, 3.4 with its etcdctl.
    release = os.path.basename(os.path.dirname(etcd.binary)).lstrip("v") if etcd.version else taken["etcd_version"]
    tool = "etcdutl" if etcd.version else "etcdctl"
    assert taken["etcd_version"] == release and release.startswith(etcd.version or "3.4."), taken
    assert taken["scratch_etcd"] == {"etcd_binary": etcd.binary, "etcd_version": release,
                                     "restore_tool": os.path.join(os.path.dirname(etcd.binary), tool)}, taken
    assert oct(dest.stat().st_mode & 0o777) == "0o600"
    status = etcdctl_status(dest)  # etcd's own tool reads the same revision and size
    assert status["revision"] == taken["revision"] and taken["bytes"] == dest.stat().st_size
    assert any("etcdutl snapshot restore" in step for step in taken["restore_steps"])

    kept = run(capsys, args)  # nothing written since: this cluster's, current
    assert not kept["changed"] and kept["kept"] and not kept["taken"] and kept["revision"] == taken["revision"], kept
    assert kept["path"] == str(dest) and kept["proven"] == "this cluster's, no write since", kept
    etcd.put("/registry/configmaps/default/after", b"y")
    resumed = run(capsys, dict(args, upgrade_started=True))  # a resumed upgrade keeps the snapshot taken before it started
    assert resumed["kept"] and resumed["path"] == str(dest) and resumed["revision"] == taken["revision"], resumed
    assert not list(tmp_path.glob("kubeupgrade-rehearsal-*")), "the scratch copy was left behind"

    replaced = run(capsys, dict(args, overwrite=True))
    assert replaced["taken"] and replaced["key_count"] == 52 and replaced["path"] == str(dest), replaced


def test_a_cut_or_corrupted_file_is_refused_naming_it(plain_etcd, tmp_path, capsys):
    dest = tmp_path / "good.db"
    good = run(capsys, {"dest": str(dest), "verify": "checksum", **connection(plain_etcd)})
    assert good["verified"] == "checksum" and "revision" not in good, good
    data = dest.read_bytes()
    for name, content in (("cut.db", data[:-100]), ("flipped.db", data[:100] + bytes([data[100] ^ 1]) + data[101:]),
                          ("tiny.db", b"not a snapshot")):
        path = tmp_path / name
        path.write_bytes(content)
        result = run(capsys, {"dest": str(path), "verify": "checksum"})
        assert result["failed"] and result["error"]["type"] == "SnapshotError", result
        assert str(path) in result["msg"] and "not a usable etcd snapshot" in result["msg"], result["msg"]


def test_taking_one_needs_etcd_and_a_writable_directory(tmp_path, capsys):
    result = run(capsys, {"dest": str(tmp_path / "x.db"), "verify": "checksum"})
    assert result["failed"] and "etcd_endpoints is empty" in result["msg"], result
    (tmp_path / "a-file").write_text("", encoding="utf-8")
    result = run(capsys, {"dest": str(tmp_path / "a-file" / "x.db"), "verify": "checksum",
                          "etcd_endpoints": ["http://127.0.0.1:9"]})
    assert result["failed"] and "dest:" in result["msg"] and "not a writable directory" in result["msg"], result


def _cluster(tmp_path, name, uid):
    server = etcd_fixture.EtcdServer(tmp_path / name)
    server.start()
    server.put("/registry/namespaces/kube-system", namespace("kube-system", uid))
    server.put("/registry/configmaps/default/cm", b"x" * 100)
    return server


def test_another_clusters_or_a_stale_file_is_never_the_way_back_and_a_resumed_upgrade_keeps_its_own(tmp_path, capsys):
    """The default path holds cluster A's snapshot; run against cluster B it is left untouched and a new one is taken
    beside it. On B, after writes, B's own file is stale before the upgrade, and kept once a host is upgraded - the
    newest one taken before the upgrade, not the older one at dest."""
    first, second = _cluster(tmp_path, "a", "11111111-aaaa-4aaa-8aaa-000000000001"), None
    try:
        second = _cluster(tmp_path, "b", "22222222-bbbb-4bbb-8bbb-000000000002")
        dest = tmp_path / "etcd-before-1.33.db"
        args = {"dest": str(dest), "work_dir": str(tmp_path), "etcd_binary": first.binary}
        assert run(capsys, dict(args, etcd_endpoints=[first.url]))["path"] == str(dest)
        before = dest.read_bytes()

        fresh = run(capsys, dict(args, etcd_endpoints=[second.url]))
        assert fresh["taken"] and not fresh["kept"] and fresh["path"] != str(dest), fresh
        assert os.path.dirname(fresh["path"]) == str(tmp_path) and fresh["path"].endswith(".db"), fresh
        assert fresh["not_kept"] == [{"path": str(dest), "reason": fresh["not_kept"][0]["reason"]}], fresh
        assert "another cluster's" in fresh["not_kept"][0]["reason"] and "11111111-" in fresh["not_kept"][0]["reason"], fresh
        assert fresh["path"] in fresh["restore_steps"][0] and str(dest) not in fresh["restore_steps"][0], fresh
        assert dest.read_bytes() == before, "the other cluster's file was changed"

        second.put("/registry/configmaps/default/written-since", b"y")
        time.sleep(1.1)  # the next one's name has another second
        stale = run(capsys, dict(args, etcd_endpoints=[second.url]))
        assert stale["taken"] and stale["path"] not in (str(dest), fresh["path"]), stale
        assert [item["path"] for item in stale["not_kept"]] == [fresh["path"]], stale
        assert "it is stale" in stale["not_kept"][0]["reason"], stale
        assert dest.read_bytes() == before and os.path.exists(fresh["path"])

        second.put("/registry/configmaps/default/written-by-the-new-release", b"z")
        resumed = run(capsys, dict(args, etcd_endpoints=[second.url], upgrade_started=True))
        assert resumed["kept"] and not resumed["taken"] and resumed["path"] == stale["path"], resumed
        assert resumed["proven"] == "this cluster's, taken before a host was upgraded", resumed
        assert resumed["revision"] == stale["revision"] < resumed["live_revision"], resumed

        first.put("/registry/configmaps/default/written-on-a", b"a")  # cluster A, resumed: its own file, past B's two
        own = run(capsys, dict(args, etcd_endpoints=[first.url], upgrade_started=True))
        assert own["kept"] and own["path"] == str(dest), own
        assert [item["path"] for item in own["not_kept"]] == [stale["path"], fresh["path"]], own
    finally:
        first.stop()
        if second:
            second.stop()


def test_a_killed_runs_scratch_copy_is_removed_by_the_next(tmp_path, capsys, plain_etcd):
    """... and a snapshot taken once a host is upgraded is marked so: never taken for the one from before."""
    left = tmp_path / "kubeupgrade-rehearsal-left"
    (left / "etcd-data").mkdir(parents=True)
    (left / "owner.pid").write_text("999999999", encoding="ascii")
    result = run(capsys, {"dest": str(tmp_path / "s.db"), "work_dir": str(tmp_path), "etcd_binary": plain_etcd.binary,
                          "upgrade_started": True, **connection(plain_etcd)})
    assert result["stale_removed"] == [str(left)] and not left.exists(), result
    assert result["taken"] and result["path"].endswith("-after-upgrade-started.db"), result
    assert "after a host was upgraded" in result["msg"], result["msg"]


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs (needs mount rights; skipped without)."""
    path = tmp_path / "small"
    path.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(path)], capture_output=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"no tmpfs: {done.stderr.decode(errors='replace').strip()}")
    yield path
    subprocess.run(["umount", str(path)], check=False)


def test_a_full_filesystem_names_the_path_and_the_space_needed(plain_etcd, small_disk, tmp_path, capsys):
    plain_etcd.put_many([(f"/registry/configmaps/default/cm-{index}", os.urandom(2000)) for index in range(1000)])
    time.sleep(0.3)  # etcd commits its backend every 100 ms; the dbSize its status reports follows
    result = run(capsys, {"dest": str(small_disk / "s.db"), "verify": "checksum", **connection(plain_etcd)})
    assert result["failed"] and result["error"]["type"] == "SnapshotError", result
    assert result["msg"].startswith(f"dest: {small_disk} has no space left for the snapshot"), result["msg"]
    assert "Unexpected" not in result["msg"] and result["error"]["bytes_needed"] > 1 << 20, result  # more than the disk
    assert not list(small_disk.iterdir()), "the partial file was left"

    dest = tmp_path / "s.db"
    result = run(capsys, {"dest": str(dest), "work_dir": str(small_disk), "etcd_binary": plain_etcd.binary,
                          **connection(plain_etcd)})
    assert result["failed"] and result["msg"].startswith(f"work_dir: {small_disk} has no space left"), result["msg"]
    assert str(dest.stat().st_size) in result["msg"], result["msg"]


@pytest.fixture
def etcd_35_tls(tmp_path):
    yield from etcd_fixture.serve(tmp_path / "etcd", tls=True, version="3.5")


def test_etcd_killed_in_the_middle_of_the_stream_is_said_as_such_not_as_a_certificate_problem(etcd_35_tls):
    """A real etcd 3.5 over TLS with client certificates, killed (SIGKILL) once the first piece of its snapshot has
    arrived: the cause is the stream etcd closed, with the bytes received, never the certificates."""
    from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd import client as etcd_client
    from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd.settings import EtcdSettings

    server = etcd_35_tls
    server.put_many(((f"/registry/configmaps/bulk/cm-{i:05d}", b"x" * 8192) for i in range(2400)), batch=100)  # 19 MiB: more than loopback buffers hold
    settings = EtcdSettings(endpoints=[server.url], ca_cert=server.pki.ca_cert, client_cert=server.pki.client_cert,
                            client_key=server.pki.client_key)
    received = []

    def write(piece):
        if not received:
            server.process.kill()
            server.process.wait()
            time.sleep(0.5)
        received.append(len(piece))

    with pytest.raises(etcd_client.EtcdError) as raised:
        etcd_client.EtcdReader(settings).snapshot(write)
    message = str(raised.value)
    assert message.startswith(f"etcd at {server.url} closed the snapshot stream after {sum(received)} bytes"), message
    assert received and sum(received) < 2400 * 8192, received  # it died in the middle
    assert "certificate" not in message and "TLS" not in message, message
