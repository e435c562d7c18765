# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The bytecode cache of module_utils (module_utils/_bytecode.py) in real interpreters importing from a zip laid out as
AnsiballZ lays out a payload: what it writes, that it reads what it wrote, and every entry it must refuse."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import marshal
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from ansible_collections.kubeupgrade.storage.plugins.module_utils import _bytecode

SOURCE = Path(_bytecode.__file__).read_bytes()
BASE = "ansible_collections/kubeupgrade/storage/plugins/module_utils"
SAMPLE = 'VALUE = {value}\n\n\ndef boom():\n    raise ValueError("from the sample")\n'
CHILD = """
import json, sys, traceback
sys.path.insert(0, sys.argv[1])
import ansible_collections.kubeupgrade.storage.plugins.module_utils._bytecode as cache
from ansible_collections.kubeupgrade.storage.plugins.module_utils import sample
from ansible_collections.kubeupgrade.storage.plugins.module_utils.pkg import inner
try:
    sample.boom()
except ValueError:
    shown = traceback.format_exc()
print(json.dumps({"value": sample.VALUE, "inner": inner.NAME, "file": sample.__file__, "traceback": shown,
                  "code_file": sample.boom.__code__.co_filename,
                  "cached": type(sample.__spec__.loader).__name__ == "_CachedLoader"}))
"""


def payload(tmp_path, value=1):
    """A zip as AnsiballZ builds it: empty package inits, _bytecode.py, a file and a package of module_utils."""
    path = tmp_path / f"payload-{value}.zip"
    with zipfile.ZipFile(path, "w") as archive:
        for package in ("ansible_collections", "ansible_collections/kubeupgrade", "ansible_collections/kubeupgrade/storage",
                        "ansible_collections/kubeupgrade/storage/plugins", BASE, BASE + "/pkg"):
            archive.writestr(package + "/__init__.py", "")
        archive.writestr(BASE + "/_bytecode.py", SOURCE)
        archive.writestr(BASE + "/sample.py", SAMPLE.format(value=value))
        archive.writestr(BASE + "/pkg/inner.py", 'NAME = "inner"\n')
    return str(path)


def run(zip_path, cache_home, **env):
    environ = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    environ.update(XDG_CACHE_HOME=str(cache_home), **env)
    out = subprocess.run([sys.executable, "-c", CHILD, zip_path], env=environ, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def entries(cache_home):
    directory = Path(cache_home) / "kubeupgrade.storage" / "bytecode"
    return sorted(directory.iterdir()) if directory.is_dir() else []


def entry_for(cache_home, path, source_text):
    """(the entry of ``source_text`` compiled as ``path``, its digest)."""
    digest = hashlib.sha256(b"\0".join((importlib.util.MAGIC_NUMBER, str(sys.flags.optimize).encode(), path.encode(),
                                        source_text.encode()))).digest()
    return Path(cache_home) / "kubeupgrade.storage" / "bytecode" / digest.hex(), digest


def forge(cache_home, path, source_text, code_text):
    """An entry under the name ``source_text`` would have, holding the code of ``code_text``: read only if trusted."""
    entry, digest = entry_for(cache_home, path, source_text)
    entry.write_bytes(digest + marshal.dumps(compile(code_text, path, "exec", dont_inherit=True)))
    return entry


def test_the_first_run_compiles_and_keeps_every_module_utils_file_in_a_private_directory(tmp_path):
    found = run(payload(tmp_path), tmp_path / "cache")
    assert found["value"] == 1 and found["inner"] == "inner" and found["cached"]
    assert ".zip/" + BASE + "/sample.py" in found["file"]  # __file__ stays where zipimport would put it
    kept = entries(tmp_path / "cache")
    assert len(kept) == 3  # sample, pkg/__init__, pkg/inner: not _bytecode itself, which zipimport loaded
    directory = kept[0].parent
    assert directory.stat().st_mode & 0o777 == 0o700
    assert all(entry.stat().st_mode & 0o777 == 0o600 for entry in kept)


def test_a_second_run_reads_the_kept_code_and_shows_its_source_in_tracebacks(tmp_path):
    zip_path = payload(tmp_path)
    run(zip_path, tmp_path / "cache")
    forge(tmp_path / "cache", BASE + "/sample.py", SAMPLE.format(value=1), SAMPLE.format(value=7))
    found = run(zip_path, tmp_path / "cache")
    assert found["value"] == 7  # the entry was read, not compiled again
    assert found["code_file"] == found["file"]  # the payload's path, as zipimport names it
    assert f'File "{found["file"]}", line 5, in boom' in found["traceback"]
    assert 'raise ValueError("from the sample")' in found["traceback"]


def test_a_changed_source_gets_its_own_entry(tmp_path):
    run(payload(tmp_path, value=1), tmp_path / "cache")
    found = run(payload(tmp_path, value=2), tmp_path / "cache")
    assert found["value"] == 2
    assert len(entries(tmp_path / "cache")) == 4


@pytest.mark.parametrize("damage", ["writable by others", "wrong digest", "truncated", "a symlink", "not code",
                                    "another user's"])
def test_an_entry_it_cannot_trust_is_compiled_again_and_replaced(tmp_path, damage):
    zip_path = payload(tmp_path)
    run(zip_path, tmp_path / "cache")
    entry = forge(tmp_path / "cache", BASE + "/sample.py", SAMPLE.format(value=1), SAMPLE.format(value=7))
    if damage == "writable by others":
        entry.chmod(0o666)
    elif damage == "wrong digest":
        entry.write_bytes(b"\0" * 32 + entry.read_bytes()[32:])
    elif damage == "truncated":
        entry.write_bytes(entry.read_bytes()[:40])
    elif damage == "not code":
        entry.write_bytes(entry.read_bytes()[:32] + marshal.dumps(SAMPLE.format(value=7)))
    elif damage == "another user's":
        if os.geteuid() != 0:
            pytest.skip("only root can give a file to another user")
        os.chown(entry, 65534, 65534)
    else:
        elsewhere = tmp_path / "elsewhere"
        elsewhere.write_bytes(entry.read_bytes())
        entry.unlink()
        entry.symlink_to(elsewhere)
    assert run(zip_path, tmp_path / "cache")["value"] == 1
    assert not entry.is_symlink() and entry.stat().st_mode & 0o777 == 0o600  # the run wrote its own in its place
    assert entry.stat().st_uid == os.geteuid()
    assert run(zip_path, tmp_path / "cache")["value"] == 1


def test_a_directory_others_can_write_is_not_used(tmp_path):
    zip_path = payload(tmp_path)
    run(zip_path, tmp_path / "cache")
    forge(tmp_path / "cache", BASE + "/sample.py", SAMPLE.format(value=1), SAMPLE.format(value=7))
    directory = entries(tmp_path / "cache")[0].parent
    directory.chmod(0o777)
    try:
        found = run(zip_path, tmp_path / "cache")
    finally:
        directory.chmod(0o700)
    assert found["value"] == 1 and not found["cached"]


def test_with_pythondontwritebytecode_nothing_is_written(tmp_path):
    found = run(payload(tmp_path), tmp_path / "cache", PYTHONDONTWRITEBYTECODE="1")
    assert found["value"] == 1
    assert not (tmp_path / "cache").exists()


def test_a_cache_home_it_cannot_make_a_directory_in_only_costs_the_compile(tmp_path):
    home = tmp_path / "a-file"
    home.write_text("")  # no directory can be made under a file, not even by root
    found = run(payload(tmp_path), home)
    assert found["value"] == 1 and not found["cached"]


def test_entries_unread_for_thirty_days_go_when_a_new_one_is_written_and_those_read_stay(tmp_path):
    run(payload(tmp_path, value=1), tmp_path / "cache")
    stale, _digest = entry_for(tmp_path / "cache", BASE + "/sample.py", SAMPLE.format(value=1))
    used, _digest = entry_for(tmp_path / "cache", BASE + "/pkg/inner.py", 'NAME = "inner"\n')
    old = time.time() - _bytecode.KEEP_SECONDS - 60
    for entry in (stale, used):
        os.utime(entry, (old, old))
    run(payload(tmp_path, value=3), tmp_path / "cache")  # a new sample written: the unread one pruned
    assert not stale.exists()
    assert used.exists() and used.stat().st_mtime > time.time() - 600  # read by that run: dated again
    assert len(entries(tmp_path / "cache")) == 3


def test_a_directory_swapped_for_a_symlink_after_the_check_is_never_written_or_pruned(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    base = tmp_path / "cache"
    cache = _bytecode.CodeCache.open(str(base))
    assert cache is not None
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "important.conf").write_text("kept")
    old = time.time() - _bytecode.KEEP_SECONDS - 60
    os.utime(victim / "important.conf", (old, old))
    checked = base / "kubeupgrade.storage" / "bytecode"
    checked.rename(base / "kubeupgrade.storage" / "moved")
    checked.symlink_to(victim)
    try:
        code = cache.code(b"VALUE = 1\n", "sample.py")
    finally:
        os.close(cache.fd)
    assert sorted(p.name for p in victim.iterdir()) == ["important.conf"]
    assert len(list((base / "kubeupgrade.storage" / "moved").iterdir())) == 1  # written where it was checked
    namespace = {}
    exec(code, namespace)  # pylint: disable=exec-used  # the test's own code
    assert namespace["VALUE"] == 1


def test_a_cache_home_of_another_user_is_not_used(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("only root can give a directory to another user")
    home = tmp_path / "theirs"
    home.mkdir()
    os.chown(home, 65534, 65534)  # root running a module with another user's XDG_CACHE_HOME
    found = run(payload(tmp_path), home)
    assert found["value"] == 1 and not found["cached"]
    assert list(home.iterdir()) == []


def test_the_cache_home_is_absolute_or_none():
    assert _bytecode.cache_base({"XDG_CACHE_HOME": "/var/cache/me"}) == "/var/cache/me"
    relative = _bytecode.cache_base({"XDG_CACHE_HOME": "relative/cache"})
    assert relative == os.path.join(os.path.expanduser("~"), ".cache") and os.path.isabs(relative)


def test_without_an_absolute_home_nothing_is_kept(monkeypatch):
    monkeypatch.setattr(os.path, "expanduser", lambda path: path)  # no HOME and no passwd entry: "~" stays "~"
    assert _bytecode.cache_base({}) is None
    assert _bytecode.CodeCache.open() is None


def test_outside_a_payload_it_installs_nothing():
    before = list(sys.meta_path)
    assert _bytecode.install() is False
    assert sys.meta_path == before
