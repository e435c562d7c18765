# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The scratch etcd by release, shared by the rehearsal and the snapshot module: ``etcd --version`` read once, the
command line that release takes, and the restore tool of its release (etcdutl from 3.5, etcdctl on 3.4, never etcdctl
from 3.6): next to the etcd binary first, then PATH, and never a file that cannot run."""

from __future__ import annotations

import os

import pytest

from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd import scratch
from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd.versions import EtcdVersion
from ansible_collections.kubeupgrade.storage.plugins.module_utils._rehearse import runner as rehearse_runner
from ansible_collections.kubeupgrade.storage.plugins.module_utils._snapshot import runner as snapshot_runner
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ConfigurationError

V34, V35, V36 = EtcdVersion(3, 4, 23), EtcdVersion(3, 5, 30), EtcdVersion(3, 6, 0)


def _tool(directory, name, executable=True, body=""):
    directory.mkdir(exist_ok=True)
    path = directory / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755 if executable else 0o644)
    return str(path)


def _etcd(directory, version):
    """A stand-in etcd that answers ``--version`` as the real one does."""
    return _tool(directory, "etcd", body=f'echo "etcd Version: {version}"; echo "Git SHA: Not provided"; echo "Go Version: go1.24"\n')


@pytest.fixture
def dirs(tmp_path, monkeypatch):
    """``etcd/`` holds the etcd binary; ``path/`` is the only directory on PATH."""
    etcd_dir, path_dir = tmp_path / "etcd", tmp_path / "path"
    etcd = _tool(etcd_dir, "etcd")
    path_dir.mkdir()
    monkeypatch.setenv("PATH", str(path_dir))
    return etcd, etcd_dir, path_dir


@pytest.mark.parametrize("version, beside, on_path, expected", [
    (V35, ["etcdutl", "etcdctl"], ["etcdutl"], "etcd/etcdutl"),  # its own release's etcdutl
    (V35, ["etcdctl"], ["etcdutl"], "path/etcdutl"),  # etcdutl where it exists
    (V35, [], ["etcdctl"], None),  # not etcdctl: 3.5 deprecates its restore (etcdutl_binary may still name it)
    (V36, ["etcdutl"], ["etcdutl"], "etcd/etcdutl"),
    (V36, ["etcdctl"], ["etcdctl"], None),  # 3.6's etcdctl has no snapshot restore
    (V34, ["etcdctl"], ["etcdutl", "etcdctl"], "etcd/etcdctl"),  # 3.4 has no etcdutl: its own etcdctl first
    (V34, [], ["etcdutl", "etcdctl"], "path/etcdctl"),
    (V34, [], ["etcdutl"], None),
    (V35, [], [], None),
])
def test_the_restore_tool_of_the_etcd_release_next_to_etcd_then_in_path(dirs, version, beside, on_path, expected):
    etcd, etcd_dir, path_dir = dirs
    for name in beside:
        _tool(etcd_dir, name)
    for name in on_path:
        _tool(path_dir, name)
    found = scratch.find_restore_tool(etcd, version)
    assert found == (str(etcd_dir.parent / expected) if expected else None)


def test_a_file_that_cannot_run_is_skipped(dirs):
    etcd, etcd_dir, path_dir = dirs
    _tool(etcd_dir, "etcdutl", executable=False)
    _tool(path_dir, "etcdutl")
    assert scratch.find_restore_tool(etcd, V35) == str(path_dir / "etcdutl")


def test_without_an_etcd_binary_only_path_is_searched(dirs):
    _etcd_path, _etcd_dir, path_dir = dirs
    _tool(path_dir, "etcdutl")
    assert scratch.find_restore_tool(None, V35) == str(path_dir / "etcdutl")
    assert scratch.find_restore_tool(None, V35, which=lambda name: None) is None


def test_etcdctl_is_refused_for_36_naming_etcdutl_binary_and_none_found_names_the_tool_and_release(dirs):
    etcd, etcd_dir, path_dir = dirs
    etcdctl = _tool(path_dir, "etcdctl")
    assert scratch.restore_tool(etcd, V35, etcdctl) == etcdctl  # given: 3.5's etcdctl still restores
    with pytest.raises(ConfigurationError, match=r"^etcdutl_binary: .*etcdctl, which has no `snapshot restore` from etcd 3\.6"
                                                 r".*give the etcdutl of etcd 3\.6's release"):
        scratch.restore_tool(etcd, V36, etcdctl)
    with pytest.raises(ConfigurationError, match=r"^etcdutl_binary: restoring a snapshot for etcd 3\.6\.0 needs etcdutl, "
                                                 r"found neither next to etcd_binary .* nor in PATH; give the path of the "
                                                 r"etcdutl of etcd 3\.6's release"):
        scratch.restore_tool(etcd, V36)
    with pytest.raises(ConfigurationError, match=r"etcd 3\.4\.23 needs etcdctl"):
        scratch.restore_tool(etcd, V34, which=lambda name: None)


@pytest.mark.parametrize("version, etcdctl_on_path, tool", [("3.4.23", True, "etcdctl"), ("3.5.30", False, "etcdutl"),
                                                            ("3.6.0", False, "etcdutl")])
def test_both_modules_read_the_version_once_and_take_that_release_s_tool(tmp_path, monkeypatch, version, etcdctl_on_path, tool):
    monkeypatch.setenv("PATH", str(tmp_path / "path"))
    etcd = _etcd(tmp_path / "etcd", version)
    found = _tool(tmp_path / "etcd", "etcdutl")
    if etcdctl_on_path:
        found = _tool(tmp_path / "path", "etcdctl")
    assert os.path.basename(found) == tool
    read = scratch.etcd_version(etcd)
    assert str(read) == version
    assert rehearse_runner._restore_tool({}, etcd, read) == found
    assert snapshot_runner._tools({"etcd_binary": etcd}) == (etcd, read, found)
    os.remove(found)
    with pytest.raises(ConfigurationError, match="etcdutl_binary"):
        rehearse_runner._restore_tool({}, etcd, read)
    with pytest.raises(ConfigurationError, match="etcdutl_binary: .*; or verify: checksum"):
        snapshot_runner._tools({"etcd_binary": etcd})


@pytest.mark.parametrize("body, pattern", [
    ("exit 0\n", r"did not report an etcd version \(`etcd --version` exited 0 without an `etcd Version: X\.Y\.Z` line\)"),
    ('echo "bad flag" >&2; exit 2\n', r"exited 2 without an `etcd Version: X\.Y\.Z` line: bad flag"),
    ('echo "etcd Version: 3.3.27"\n', r"is etcd 3\.3\.27; the scratch etcd needs 3\.4 or later"),
])
def test_a_version_that_cannot_be_read_is_one_error_naming_etcd_binary_and_the_next_step(tmp_path, body, pattern):
    etcd = _tool(tmp_path, "etcd", body=body)
    with pytest.raises(ConfigurationError, match=r"^etcd_binary: \S+/etcd .*" + pattern) as raised:
        scratch.etcd_version(etcd)
    assert "give the path of" in str(raised.value)
    with pytest.raises(ConfigurationError, match=r"^etcd_binary: .*; or verify: checksum"):
        snapshot_runner._tools({"etcd_binary": etcd})


class Workspace:
    def file(self, name):
        return f"/scratch/{name}"


@pytest.mark.parametrize("version, tuning", [
    (V34, ["--snapshot-count=1000000", "--log-level=warn"]),
    (V35, ["--snapshot-count=1000000", "--log-level=warn"]),
    (V36, ["--log-level=warn"]),  # --snapshot-count is deprecated in 3.6 (a warning; gone in 3.7)
])
def test_the_scratch_etcd_command_line_per_release(version, tuning):
    etcd = scratch.ScratchEtcd(Workspace(), "/opt/etcd/etcd", version)
    etcd.client_port, etcd.peer_port = 23790, 23800
    peer = "http://127.0.0.1:23800"
    assert etcd._argv() == [
        "/opt/etcd/etcd", "--name=rehearsal", "--data-dir=/scratch/etcd-data", "--listen-client-urls=http://127.0.0.1:23790",
        "--advertise-client-urls=http://127.0.0.1:23790", f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=rehearsal={peer}", "--max-txn-ops=1000", "--max-request-bytes=9437184",
        "--quota-backend-bytes=8589934592", *tuning]
    assert etcd.summary("/opt/etcd/etcdutl") == {"etcd_binary": "/opt/etcd/etcd", "etcd_version": str(version),
                                                 "restore_tool": "/opt/etcd/etcdutl"}


def test_a_scratch_etcd_given_no_version_reads_it_once(monkeypatch):
    calls = []

    def run_tool(argv, timeout=600.0, env=None):
        calls.append(argv)
        return 0, "etcd Version: 3.6.2\nGit SHA: Not provided\n", ""

    monkeypatch.setattr(scratch, "run_tool", run_tool)
    etcd = scratch.ScratchEtcd(Workspace(), "/opt/etcd/etcd")
    first, second = etcd._argv(), etcd._argv()
    assert calls == [["/opt/etcd/etcd", "--version"]] and first == second
    assert etcd.version == (3, 6, 2) and not any(arg.startswith("--snapshot-count") for arg in first)
