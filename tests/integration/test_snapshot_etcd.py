# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""storage_snapshot against a real etcd: taken (plain and TLS), kept when there, proved restorable, refused when
corrupt; what etcd's own tool says about the file agrees. Debian's etcd 3.4 (restored with its etcdctl) and etcd 3.5
(taken from 3.5 and restored with its own etcdutl, beside the binary)."""

from __future__ import annotations

import json
import os
import subprocess

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
    for index in range(50):
        etcd.put(f"/registry/configmaps/default/cm-{index}", b"x" * 100)
    dest = tmp_path / "before-upgrade.db"
    args = {"dest": str(dest), "work_dir": str(tmp_path), "etcd_binary": etcd.binary, **connection(etcd)}

    planned = run(capsys, args, check_mode=True)
    assert planned["changed"] and not planned["taken"] and not dest.exists(), planned

    taken = run(capsys, args)
    assert not taken.get("failed"), taken
    assert taken["changed"] and taken["taken"] and taken["verified"] == "restore", taken
    assert taken["key_count"] == 50 and taken["revision"] >= taken["revision_before"] > 0, taken
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

    etcd.put("/registry/configmaps/default/after", b"y")
    kept = run(capsys, args)  # a resumed upgrade keeps the snapshot taken before it started
    assert not kept["changed"] and kept["kept"] and not kept["taken"] and kept["revision"] == taken["revision"], kept
    assert not list(tmp_path.glob("kubeupgrade-rehearsal-*")), "the scratch copy was left behind"

    replaced = run(capsys, dict(args, overwrite=True))
    assert replaced["taken"] and replaced["key_count"] == 51, replaced


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
