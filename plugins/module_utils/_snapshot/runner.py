# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What ``storage_snapshot`` calls: take a snapshot (or keep the one there), check its trailer, prove it restorable."""

from __future__ import annotations

import datetime
import errno
import hashlib
import os
import shutil
import tempfile
from typing import NamedTuple

from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd import scratch
from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd.client import EtcdReader
from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd.settings import EtcdSettings, ScanOptions
from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd.versions import EtcdVersion
from ansible_collections.kubeupgrade.storage.plugins.module_utils._snapshot import model
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ConfigurationError, KubeUpgradeError

CHUNK = 1 << 20


class SnapshotError(KubeUpgradeError):
    """The snapshot could not be taken, or is not usable: names the file or etcd and what to do."""


def _digest(path: str) -> tuple:
    """(size, sha256 of all but the last 32 bytes, the last 32 bytes), reading the file once in chunks."""
    size = os.path.getsize(path)
    body, digest = size - model.TRAILER, hashlib.sha256()
    with open(path, "rb") as handle:
        left = max(body, 0)
        while left > 0:
            chunk = handle.read(min(CHUNK, left))
            if not chunk:
                break
            digest.update(chunk)
            left -= len(chunk)
        trailer = handle.read(model.TRAILER)
    return size, digest.digest(), trailer


def check_trailer(path: str) -> None:
    size, body, trailer = _digest(path)
    problem = model.trailer_problem(size, body, trailer)
    if problem:
        raise SnapshotError(f"{path} is not a usable etcd snapshot: {problem}. Take a new one (remove it, or overwrite: true)",
                            details={"path": path, "bytes": size})


def _free(directory: str) -> str:
    try:
        return f"{shutil.disk_usage(directory).free} bytes are free"
    except OSError:
        return "its free space could not be read"


def _write_error(error: OSError, path: str, needed: int) -> SnapshotError:
    """What the operating system refused while the snapshot was written, naming the file and, for a full disk, the
    space it needs (etcd's database size, which the snapshot's size follows)."""
    directory = os.path.dirname(path)
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return SnapshotError(f"dest: {directory} has no space left for the snapshot ({error.strerror}): it needs about "
                             f"{needed} bytes (etcd's database size), {_free(directory)}; free some, or give a dest on "
                             "another filesystem", details={"path": path, "bytes_needed": needed})
    return SnapshotError(f"dest: {path} could not be written ({error.strerror or error}); give a dest this user can write",
                         details={"path": path})


def writable_directory(dest: str) -> None:
    """dest's directory, made (0700) when missing; a ConfigurationError when it cannot be written."""
    directory = os.path.dirname(os.path.abspath(dest))
    if not os.path.exists(directory):
        try:
            os.makedirs(directory, mode=0o700)
        except OSError:
            pass  # said below
    if not os.path.isdir(directory) or not os.access(directory, os.W_OK):
        raise ConfigurationError(f"dest: {directory} is not a writable directory (create it, or give another dest)")


def take(settings: EtcdSettings, dest: str, needed: int = 0) -> dict:
    """Stream etcd's snapshot into ``dest`` (0600), through a partial file renamed only once it is whole and checked."""
    writable_directory(dest)
    partial = dest + ".part"
    try:
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            with os.fdopen(fd, "wb") as handle:
                taken = EtcdReader(settings).snapshot(handle.write)
                handle.flush()
                os.fsync(handle.fileno())
            check_trailer(partial)
            os.replace(partial, dest)
        finally:
            if os.path.exists(partial):
                os.unlink(partial)
    except OSError as error:
        raise _write_error(error, partial, needed) from None
    return taken


class Tools(NamedTuple):
    """What proves a snapshot restorable, found before anything is taken: the etcd binary, the version it reports, and
    the restore tool of that release."""

    etcd_binary: str
    etcd_version: EtcdVersion
    restore_tool: str


def _read_uid(reader: EtcdReader, key: str) -> str:
    """The UID of the object at ``key`` ("" when there is none, or it cannot be read)."""
    wanted = key.encode("utf-8")
    return next((model.object_uid(value) for found, value in reader.scan(ScanOptions(prefix=key, page_size=10))
                 if found == wanted), "")


def prove_restorable(path: str, tools: Tools, work_dir: str, prefix: str) -> dict:
    """Restore it into a scratch etcd on loopback and read its revision, keys and the UID that
    identifies its cluster; then remove it all."""
    try:
        workspace = scratch.Workspace(work_dir)
    except OSError as error:
        raise _work_dir_error(work_dir, path, error.strerror or str(error)) from None
    try:
        try:
            etcd = scratch.ScratchEtcd(workspace, tools.etcd_binary, tools.etcd_version)
            etcd.restore(tools.restore_tool, path)
            etcd.start()
        except scratch.ScratchError as error:
            if NO_SPACE in str(error).lower():
                raise _work_dir_error(work_dir, path, str(error)) from None
            raise SnapshotError(str(error).replace("snapshot:", "", 1).strip(), details={"path": path}) from None
        reader = EtcdReader(EtcdSettings(endpoints=[etcd.url]))
        keys = sum(1 for _pair in reader.scan(ScanOptions(prefix=prefix, page_size=5000, keys_only=True)))
        revision = reader.revision or int((reader.status().get("header") or {}).get("revision", 0))
        return {"revision": revision, "keys": keys, "uid": _read_uid(reader, model.identity_key(prefix)),
                "scratch_etcd": etcd.summary(tools.restore_tool)}
    finally:
        workspace.close()


NO_SPACE = "no space left on device"  # strerror(ENOSPC), as etcdutl, etcdctl and etcd print it


def _work_dir_error(work_dir: str, path: str, said: str) -> SnapshotError:
    """The restore proof could not make its copy in work_dir: a full disk names the space the copy needs."""
    try:
        needed = os.path.getsize(path)
    except OSError:
        needed = 0
    said = said.split("): is it", 1)[0] + ")" if "): is it" in said else said  # the tool's words, not the rehearsal's guess
    if said.startswith("snapshot: "):
        said = said[len("snapshot: "):]
    if NO_SPACE in said.lower():
        return SnapshotError(f"work_dir: {work_dir} has no space left for the restore proof's scratch copy of {path}: it "
                             f"needs about {needed} bytes (the snapshot's size), {_free(work_dir)} ({said}); free some, or "
                             "give work_dir on another filesystem" + CHECKSUM_ONLY,
                             details={"path": path, "work_dir": work_dir, "bytes_needed": needed})
    return SnapshotError(f"work_dir: the restore proof's scratch directory could not be made in {work_dir} ({said}); "
                         "give a work_dir this user can write" + CHECKSUM_ONLY, details={"path": path, "work_dir": work_dir})


CHECKSUM_ONLY = "; or verify: checksum to check the file's integrity trailer only"


def _tools(params) -> Tools:
    """The etcd binary, its version (``etcd --version``, once) and the restore tool of its release, before any snapshot
    is taken; a ConfigurationError naming the option at fault."""
    etcd_binary = params.get("etcd_binary") or shutil.which("etcd")
    if not etcd_binary:
        raise ConfigurationError("verify: restore needs an etcd binary (etcd_binary, or etcd in PATH) and the etcdutl of its "
                                 "release (etcdctl on 3.4; etcdutl_binary) on this host; give their paths" + CHECKSUM_ONLY)
    try:
        version = scratch.etcd_version(etcd_binary)
        return Tools(etcd_binary, version, scratch.restore_tool(etcd_binary, version, params.get("etcdutl_binary")))
    except ConfigurationError as error:
        raise ConfigurationError(str(error) + CHECKSUM_ONLY) from None


def _live(settings: EtcdSettings, prefix: str) -> dict:
    """What the live etcd says now: its revision, database size (what a snapshot needs) and the identifying UID."""
    reader = EtcdReader(settings)
    status = reader.status()
    return {"revision": int((status.get("header") or {}).get("revision", 0)), "db_size": int(status.get("dbSize") or 0),
            "uid": _read_uid(reader, model.identity_key(prefix))}


def _candidates(dest: str) -> list:
    """dest and the snapshots this module took beside it before any host was upgraded, newest first."""
    directory = os.path.dirname(os.path.abspath(dest))
    try:
        names = [os.path.join(os.path.dirname(dest), name) for name in os.listdir(directory)]
    except OSError:
        names = []
    found = [path for path in names if model.is_fresh_of(dest, path)] + [dest]
    dated = []
    for path in found:
        try:
            if os.path.isfile(path):
                dated.append((os.path.getmtime(path), path))
        except OSError:
            continue  # gone meanwhile
    return [path for _when, path in sorted(dated, reverse=True)]


def _judge(path: str, proof: tuple, live: dict, upgrade_started: bool) -> tuple:
    """(kind, why, restored) for one file found: kind "" when it is proven the way back. ``proof``: (tools, work_dir,
    prefix) of the restore proof."""
    tools, work_dir, prefix = proof
    try:
        size, body, trailer = _digest(path)
    except OSError as error:
        return model.NOT_PROVEN, f"it could not be read ({error.strerror or error})", None
    problem = model.trailer_problem(size, body, trailer)
    if problem:
        return model.NOT_PROVEN, f"it is not a usable etcd snapshot: {problem}", None
    if not tools:
        return model.NOT_PROVEN, ("with verify: checksum it cannot be proven this cluster's (what identifies a cluster is "
                                  "read from a restored copy)"), None
    try:
        restored = prove_restorable(path, tools, work_dir, prefix)
    except SnapshotError as error:
        if "bytes_needed" in error.details or "work_dir" in error.details:
            raise
        return model.NOT_PROVEN, f"it could not be restored: {error}", None
    kind, why = model.why_not_kept(restored["uid"], live["uid"], restored["revision"], live["revision"], upgrade_started)
    return kind, why, restored


def run(kum) -> dict:
    try:
        return _run(kum)
    except OSError as error:  # the operating system's own words, naming the file: never an "Unexpected internal error"
        where = error.filename or kum.params.get("dest")
        raise SnapshotError(f"{where}: {error.strerror or error} (errno {errno.errorcode.get(error.errno, error.errno)}); "
                            "fix it on the host running the module and run it again", details={"path": where}) from None


def _run(kum) -> dict:
    params = kum.params
    dest, tools, work_dir, prefix = _options(params)
    result = {"changed": False, "path": dest, "taken": False, "kept": False, "proven": "", "not_kept": []}
    _remove_stale(tools, work_dir, result)
    if not params.get("etcd_endpoints") and os.path.isfile(dest) and not params.get("overwrite"):
        return _verify_only(dest, tools, work_dir, prefix, result)
    settings = EtcdSettings.from_params(params)
    if not kum.check_mode and (params.get("overwrite") or not os.path.exists(dest)):
        writable_directory(dest)  # a snapshot will be taken: said before etcd is read
    live = _live(settings, prefix)
    result["live_revision"] = live["revision"]
    proof = (tools, work_dir, prefix)
    if not _keep_one(params, proof, live, result):
        now = datetime.datetime.now(datetime.timezone.utc)
        result["path"] = _new_path(params, now)
        if kum.check_mode:
            return dict(result, changed=True, msg=f"would take an etcd snapshot into {result['path']} (check mode: nothing "
                        "written)" + "".join(f"; {item['path']} is not kept: {item['reason']}" for item in result["not_kept"]))
        _take_fresh(settings, (proof, live, now), result)
    return _said(result, prefix, bool(params.get("upgrade_started")))


def _options(params: dict) -> tuple:
    """(dest, the etcd tools when the snapshot is proven by a restore, the work directory, the etcd key prefix)."""
    dest = params["dest"]
    if not dest:
        raise ConfigurationError("dest: give the path of the snapshot file (an existing one is kept and verified)")
    tools = _tools(params) if (params.get("verify") or "restore") == "restore" else None
    prefix = "/" + (params.get("etcd_prefix") or "/registry").strip("/") + "/"
    return dest, tools, params.get("work_dir") or tempfile.gettempdir(), prefix


def _remove_stale(tools, work_dir: str, result: dict) -> None:
    """What a killed run left in the work directory (a full etcd copy each), removed before a restore proof."""
    if tools and os.path.isdir(work_dir):
        removed = scratch.remove_stale(work_dir)
        if removed:
            result["stale_removed"] = removed


def _new_path(params: dict, now) -> str:
    """Where a new snapshot goes: ``dest``, or a stamped name beside it that keeps the existing file (always once the
    upgrade has started)."""
    dest, upgrade_started = params["dest"], bool(params.get("upgrade_started"))
    if params.get("overwrite") or not (os.path.exists(dest) or upgrade_started):
        return dest
    return model.fresh_path(dest, now.strftime(model.STAMP), upgrade_started)


def _keep_one(params, proof: tuple, live: dict, result: dict) -> bool:
    """Keep the newest existing file proven to be this cluster's and current (``_judge``); each one that is not is
    named in ``not_kept`` and left untouched. Whether one was kept."""
    upgrade_started = bool(params.get("upgrade_started"))
    for path in [] if params.get("overwrite") else _candidates(params["dest"]):
        kind, why, restored = _judge(path, proof, live, upgrade_started)
        if not kind:
            size, _body, trailer = _digest(path)
            result.update(path=path, kept=True, bytes=size, sha256_trailer=trailer.hex(), verified="restore",
                          revision=restored["revision"], key_count=restored["keys"], scratch_etcd=restored["scratch_etcd"],
                          proven=model.KEPT_BEFORE_UPGRADE if upgrade_started else model.KEPT_CURRENT)
            return True
        result["not_kept"].append({"path": path, "reason": why})
        if kind == model.STALE:
            return False  # the older ones are staler still
    return False


def _take_fresh(settings, taking: tuple, result: dict) -> None:
    """Take a snapshot into ``result["path"]``, check its trailer and, with the etcd tools, prove it restorable."""
    (tools, work_dir, prefix), live, now = taking
    target = result["path"]
    taken = take(settings, target, live["db_size"])
    check_trailer(target)
    size, _body, trailer = _digest(target)
    result.update(changed=True, taken=True, endpoint=taken["endpoint"], revision_before=taken["revision_before"],
                  etcd_version=taken["etcd_version"], taken_at=now.strftime("%Y-%m-%dT%H:%M:%SZ"), bytes=size,
                  sha256_trailer=trailer.hex(), verified="checksum", proven=model.TAKEN)
    if tools:
        restored = prove_restorable(target, tools, work_dir, prefix)
        result.update(revision=restored["revision"], key_count=restored["keys"], verified="restore",
                      scratch_etcd=restored["scratch_etcd"])


def _said(result: dict, prefix: str, upgrade_started: bool) -> dict:
    """The restore steps and the message of a snapshot taken or kept."""
    path = result["path"]
    proven = result["proven"] + (" (after a host was upgraded: it holds what the upgraded apiservers wrote)"
                                 if result["taken"] and upgrade_started else "")
    result["restore_steps"] = model.restore_steps(path, result.get("revision", "unknown"), proven)
    result["msg"] = (f"etcd snapshot {path}: {'taken' if result['taken'] else 'kept'} ({proven}), {result['bytes']} bytes"
                     + (f", restorable: revision {result['revision']}, {result['key_count']} keys under {prefix}"
                        if result["verified"] == "restore" else ", integrity trailer verified (not restored)")
                     + "".join(f"; {item['path']} was left untouched and is not the way back: {item['reason']}"
                               for item in result["not_kept"]))
    return result


def _verify_only(dest: str, tools, work_dir: str, prefix: str, result: dict) -> dict:
    """No etcd to compare with (no etcd_endpoints): the file is checked and proven restorable, never the way back."""
    check_trailer(dest)
    size, _body, trailer = _digest(dest)
    result.update(bytes=size, sha256_trailer=trailer.hex(), verified="checksum", kept=True, restore_steps=[])
    if tools:
        restored = prove_restorable(dest, tools, work_dir, prefix)
        result.update(revision=restored["revision"], key_count=restored["keys"], verified="restore",
                      scratch_etcd=restored["scratch_etcd"])
    result["msg"] = (f"etcd snapshot {dest}: verified, {size} bytes"
                     + (f", restorable: revision {result['revision']}, {result['key_count']} keys under {prefix}"
                        if tools else ", integrity trailer verified (not restored)")
                     + "; not proven this cluster's nor current (no etcd_endpoints to compare it with), so no restore steps")
    return result
