# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a killed run leaves is removed by the next one, and only that: a scratch etcd copy (``kubeupgrade-rehearsal-*``,
a rehearsal's or a snapshot proof's) and a private key directory (``kubeupgrade-keys-<pid>-*``) whose run is gone;
never those of a run still going, even one that has not written its owner file yet."""

from __future__ import annotations

import os
import tempfile
import time

from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd import scratch
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http import settings

GONE = 999999999  # above any pid_max: no process has it


def workspace(root, name, owner=None, age=0.0):
    path = root / (scratch.PREFIX + name)
    (path / "etcd-data").mkdir(parents=True)
    if owner is not None:
        (path / scratch.OWNER).write_text(owner, encoding="ascii")
    if age:
        past = time.time() - age
        os.utime(path, (past, past))
    return path


def test_a_running_workspace_is_kept_and_a_gone_one_removed(tmp_path):
    running = scratch.Workspace(str(tmp_path))
    try:
        gone = workspace(tmp_path, "gone", owner=str(GONE))
        reused = workspace(tmp_path, "reused", owner=f"{os.getpid()} 1")  # this pid, but another process's start time
        older = workspace(tmp_path, "older-file", owner=str(os.getpid()))  # a pid only (written before start times)
        assert sorted(scratch.remove_stale(str(tmp_path))) == sorted([str(gone), str(reused)])
        assert os.path.isdir(running.path) and older.exists()
    finally:
        running.close()


def test_a_workspace_without_owner_is_kept_a_minute(tmp_path):
    """Between making its directory and writing its owner file a run is not yet named: not taken for a killed one."""
    young = workspace(tmp_path, "young")
    old = workspace(tmp_path, "old", age=scratch.UNNAMED_GRACE + 60)
    assert scratch.remove_stale(str(tmp_path)) == [str(old)]
    assert young.exists()


def test_the_default_work_dir_is_the_temporary_directory(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = workspace(tmp_path, "gone", owner=str(GONE))
    assert scratch.remove_stale() == [str(gone)]
    assert scratch.remove_stale() == []


def test_private_key_directories_of_gone_runs_are_removed(tmp_path):
    gone = tmp_path / f"{settings.KEYS_PREFIX}{GONE}-abc"
    mine = tmp_path / f"{settings.KEYS_PREFIX}{os.getpid()}-abc"
    other = tmp_path / "kubeupgrade-keys-notapid"
    for path in (gone, mine, other):
        path.mkdir()
        (path / "x.key").write_bytes(b"key")
    assert settings.remove_stale_private_dirs(str(tmp_path)) == [str(gone)]
    assert mine.exists() and other.exists()
