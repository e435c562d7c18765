# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The modules' bytecode cache (module_utils/_bytecode.py) as ansible-playbook runs a module: the first task keeps
the compiled module_utils in the user's cache directory, the following tasks and runs read them and write nothing,
the answers stay the same, and PYTHONDONTWRITEBYTECODE writes nothing."""

from __future__ import annotations

import json

import yaml

PLAY = [{"hosts": "localhost", "connection": "local", "gather_facts": False, "tasks": [
    {"name": "hash", "kubeupgrade.storage.storage_version_hash": {"version": "v1", "kind": "Pod"}, "register": "first"},
    {"name": "hash again", "kubeupgrade.storage.storage_version_hash": {"version": "v1", "kind": "Pod"},
     "register": "second"},
    {"name": "answers", "ansible.builtin.debug": {"msg": "{{ {'hashes': [first.hash, second.hash]} | to_json }}"}},
]}]


def _hashes(run):
    line = next(line for line in run.stdout.splitlines() if '"msg":' in line)
    return json.loads(json.loads("{" + line.strip().rstrip(",") + "}")["msg"])["hashes"]


def _entries(cache_home):
    directory = cache_home / "kubeupgrade.storage" / "bytecode"
    return {path.name: path.stat().st_mtime_ns for path in directory.iterdir()} if directory.is_dir() else {}


def test_a_module_run_keeps_its_module_utils_compiled_and_the_next_runs_read_them(tmp_path, ansible_playbook):
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump(PLAY))
    cache_home = tmp_path / "cache"
    env = {"XDG_CACHE_HOME": str(cache_home), "PYTHONDONTWRITEBYTECODE": ""}  # empty: unset, as Python reads it

    first = ansible_playbook(playbook, env=env)
    assert first.rc == 0, first.stdout + first.stderr
    kept = _entries(cache_home)
    assert len(kept) >= 15  # the hash module's module_utils: _hash, hashing, profiles, _http and _etcd settings ...
    assert _hashes(first) == ["xPOwRZ+Yhw8=", "xPOwRZ+Yhw8="]

    again = ansible_playbook(playbook, env=env)
    assert again.rc == 0, again.stdout + again.stderr
    assert _hashes(again) == ["xPOwRZ+Yhw8=", "xPOwRZ+Yhw8="]
    assert _entries(cache_home) == kept  # read, nothing written again


def test_pythondontwritebytecode_keeps_the_modules_from_writing(tmp_path, ansible_playbook):
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump(PLAY))
    run = ansible_playbook(playbook, env={"XDG_CACHE_HOME": str(tmp_path / "cache"), "PYTHONDONTWRITEBYTECODE": "1"})
    assert run.rc == 0, run.stdout + run.stderr
    assert _hashes(run) == ["xPOwRZ+Yhw8=", "xPOwRZ+Yhw8="]
    assert not (tmp_path / "cache").exists()
