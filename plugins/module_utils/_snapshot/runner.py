# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What ``storage_snapshot`` calls: take a snapshot (or keep the one there), check its trailer, prove it restorable."""

from __future__ import annotations

import datetime
import hashlib
import os
import shutil
import tempfile
from typing import NamedTuple

from ansible_collections.kubeupgrade.storage.plugins.module_utils._audit import runner as audit_runner
from ansible_collections.kubeupgrade.storage.plugins.module_utils._audit.etcd_io import EtcdReader, EtcdSettings, ScanOptions
from ansible_collections.kubeupgrade.storage.plugins.module_utils._rehearse import scratch
from ansible_collections.kubeupgrade.storage.plugins.module_utils._rehearse.etcd_version import EtcdVersion
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


def take(settings: EtcdSettings, dest: str) -> dict:
    """Stream etcd's snapshot into ``dest`` (0600), through a partial file renamed only once it is whole and checked."""
    directory = os.path.dirname(os.path.abspath(dest))
    if not os.path.exists(directory):
        try:
            os.makedirs(directory, mode=0o700)
        except OSError:
            pass  # said below
    if not os.path.isdir(directory) or not os.access(directory, os.W_OK):
        raise ConfigurationError(f"dest: {directory} is not a writable directory (create it, or give another dest)")
    partial = dest + ".part"
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
    return taken


class Tools(NamedTuple):
    """What proves a snapshot restorable, found before anything is taken: the etcd binary, the version it reports, and
    the restore tool of that release."""

    etcd_binary: str
    etcd_version: EtcdVersion
    restore_tool: str


def prove_restorable(path: str, tools: Tools, work_dir: str, prefix: str) -> dict:
    """Restore it into a scratch etcd on loopback (the rehearsal's) and read its revision and keys; then remove it all."""
    workspace = scratch.Workspace(work_dir)
    try:
        etcd = scratch.ScratchEtcd(workspace, tools.etcd_binary, tools.etcd_version)
        try:
            etcd.restore(tools.restore_tool, path)
        except scratch.RehearsalError as error:
            raise SnapshotError(str(error).replace("snapshot:", "", 1).strip(), details={"path": path}) from None
        etcd.start()
        reader = EtcdReader(EtcdSettings(endpoints=[etcd.url]))
        keys = sum(1 for _pair in reader.scan(ScanOptions(prefix=prefix, page_size=5000, keys_only=True)))
        return {"revision": reader.revision or int((reader.status().get("header") or {}).get("revision", 0)), "keys": keys,
                "scratch_etcd": etcd.summary(tools.restore_tool)}
    finally:
        workspace.close()


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


def run(kum) -> dict:
    params = kum.params
    dest = params["dest"]
    if not dest:
        raise ConfigurationError("dest: give the path of the snapshot file (an existing one is kept and verified)")
    verify = params.get("verify") or "restore"
    tools = _tools(params) if verify == "restore" else None
    work_dir = params.get("work_dir") or tempfile.gettempdir()
    prefix = "/" + (params.get("etcd_prefix") or "/registry").strip("/") + "/"
    exists = os.path.isfile(dest)
    result = {"changed": False, "path": dest, "taken": False, "kept": exists and not params.get("overwrite")}
    if exists and not params.get("overwrite"):
        pass  # the snapshot taken before (an upgrade resumed): never replaced by one taken mid-upgrade
    elif kum.check_mode:
        return dict(result, changed=True, msg=f"would take an etcd snapshot into {dest} (check mode: nothing written)")
    else:
        settings = audit_runner.etcd_settings(params)
        taken = take(settings, dest)
        result.update(changed=True, taken=True, endpoint=taken["endpoint"], revision_before=taken["revision_before"],
                      etcd_version=taken["etcd_version"],
                      taken_at=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
    check_trailer(dest)
    size, _body, trailer = _digest(dest)
    result.update(bytes=size, sha256_trailer=trailer.hex(), verified="checksum")
    if tools:
        restored = prove_restorable(dest, tools, work_dir, prefix)
        result.update(revision=restored["revision"], key_count=restored["keys"], verified="restore",
                      scratch_etcd=restored["scratch_etcd"])
    result["restore_steps"] = model.restore_steps(dest, result.get("revision", "unknown"))
    result["msg"] = (f"etcd snapshot {dest}: {'taken' if result['taken'] else 'kept (it was there)'}, {size} bytes"
                     + (f", restorable: revision {result['revision']}, {result['key_count']} keys under {prefix}" if tools else
                        ", integrity trailer verified (not restored)"))
    return result
