# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one finder of the snapshot restore tool (etcdutl, or etcdctl before etcd 3.5), shared by the rehearsal
and the snapshot module: next to the etcd binary first, then PATH, and never a file that cannot run."""

from __future__ import annotations

import os

import pytest

from ansible_collections.kubeupgrade.storage.plugins.module_utils._rehearse import runner as rehearse_runner
from ansible_collections.kubeupgrade.storage.plugins.module_utils._rehearse import scratch
from ansible_collections.kubeupgrade.storage.plugins.module_utils._snapshot import runner as snapshot_runner
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ConfigurationError


def _tool(directory, name, executable=True):
    directory.mkdir(exist_ok=True)
    path = directory / name
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755 if executable else 0o644)
    return str(path)


@pytest.fixture
def dirs(tmp_path, monkeypatch):
    """``etcd/`` holds the etcd binary; ``path/`` is the only directory on PATH."""
    etcd_dir, path_dir = tmp_path / "etcd", tmp_path / "path"
    etcd = _tool(etcd_dir, "etcd")
    path_dir.mkdir()
    monkeypatch.setenv("PATH", str(path_dir))
    return etcd, etcd_dir, path_dir


@pytest.mark.parametrize("beside, on_path, expected", [
    (["etcdutl", "etcdctl"], ["etcdutl"], "etcd/etcdutl"),  # etcdutl first
    (["etcdctl"], ["etcdutl"], "path/etcdutl"),  # any etcdutl before etcdctl: etcd 3.6's etcdctl cannot restore
    (["etcdutl"], ["etcdutl"], "etcd/etcdutl"),  # the etcd binary's own release before PATH
    ([], ["etcdctl", "etcdutl"], "path/etcdutl"),
    ([], ["etcdctl"], "path/etcdctl"),
    ([], [], None),
])
def test_etcdutl_first_each_next_to_etcd_then_in_path(dirs, beside, on_path, expected):
    etcd, etcd_dir, path_dir = dirs
    for name in beside:
        _tool(etcd_dir, name)
    for name in on_path:
        _tool(path_dir, name)
    found = scratch.find_restore_tool(etcd)
    assert found == (str(etcd_dir.parent / expected) if expected else None)


def test_a_file_that_cannot_run_is_skipped(dirs):
    etcd, etcd_dir, path_dir = dirs
    _tool(etcd_dir, "etcdutl", executable=False)
    _tool(path_dir, "etcdctl")
    assert scratch.find_restore_tool(etcd) == str(path_dir / "etcdctl")


def test_without_an_etcd_binary_only_path_is_searched(dirs):
    _etcd, _etcd_dir, path_dir = dirs
    _tool(path_dir, "etcdctl")
    assert scratch.find_restore_tool(None) == str(path_dir / "etcdctl")
    assert scratch.find_restore_tool(None, which=lambda name: None) is None


def test_both_modules_use_it(dirs):
    etcd, etcd_dir, _path_dir = dirs
    tool = _tool(etcd_dir, "etcdctl")
    assert rehearse_runner._restore_tool({}, etcd) == tool
    assert snapshot_runner._tools({"etcd_binary": etcd}) == (etcd, tool)
    os.remove(tool)
    with pytest.raises(ConfigurationError, match="etcdutl_binary"):
        rehearse_runner._restore_tool({}, etcd)
    with pytest.raises(ConfigurationError, match="verify: restore"):
        snapshot_runner._tools({"etcd_binary": etcd})
