# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What ``storage_rehearsal`` calls: check every input, copy etcd, start the target on the copy, read, tear down."""

from __future__ import annotations

import datetime
import os
import re
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple, Union

from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd import scratch
from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd.client import EtcdError, EtcdReader
from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd.settings import EtcdSettings, ScanOptions, normalize_prefix
from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd.versions import EtcdVersion
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http import paths
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.client import ApiClient
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.poll import Deadline, poll_past
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.settings import ConnectionSettings
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.target_crds import load_target_crd_objects
from ansible_collections.kubeupgrade.storage.plugins.module_utils._rehearse import backups, binaries, migrate_copy, model, reader
from ansible_collections.kubeupgrade.storage.plugins.module_utils._rehearse.apiserver import TargetApiserver
from ansible_collections.kubeupgrade.storage.plugins.module_utils._rehearse.model import RehearsalError
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ApiError, ConfigurationError, KubeUpgradeError
from ansible_collections.kubeupgrade.storage.plugins.module_utils.profiles import load_profiles
from ansible_collections.kubeupgrade.storage.plugins.module_utils.verdicts import REMOVED, UNKNOWN, UNSAFE

try:
    import yaml

    HAS_YAML = True
except ImportError:  # pragma: no cover - PyYAML comes with ansible-core
    HAS_YAML = False

DEFAULT_FAIL_ON = [UNSAFE, REMOVED, UNKNOWN]
# Flag option -> kube-apiserver flag; an option given overrides the manifest, "" drops the flag.
FLAG_OPTIONS = {"encryption_config": "encryption-provider-config", "runtime_config": "runtime-config",
                "feature_gates": "feature-gates", "etcd_prefix": "etcd-prefix", "storage_media_type": "storage-media-type",
                "service_cluster_ip_range": "service-cluster-ip-range", "emulated_version": "emulated-version",
                "min_compatibility_version": "min-compatibility-version",
                "emulation_forward_compatible": "emulation-forward-compatible"}
FLAG_OPTIONS_BY_FLAG = {flag: option for option, flag in FLAG_OPTIONS.items()}
_VERSION = re.compile(r"Kubernetes (v(\d+)\.(\d+)\.\d+\S*)")
MIB = 1 << 20


@dataclass
class Plan:
    """Everything resolved before anything starts."""

    binary: str
    git_version: str
    etcd_binary: str
    flags: Dict[str, str]
    prefix: str
    work_dir: str
    snapshot: Optional[str] = None
    etcd: Optional[EtcdSettings] = None
    scan: Optional[ScanOptions] = None
    restore_tool: Optional[str] = None
    start_timeout: float = 120.0
    names_limit: int = 20
    fail_on: list = field(default_factory=lambda: list(DEFAULT_FAIL_ON))
    target_crds: Dict[str, dict] = field(default_factory=dict)  # CRD name -> manifest, applied to the copy only
    current: Optional[dict] = None  # rehearse the plan: {binary, git_version, flags} of the binary that migrates the copy first
    migrate_timeout: float = 1800.0
    etcd_version: Optional[EtcdVersion] = None  # what etcd_binary reports, read once: its flags and restore tool
    flags_from: str = ""  # where the cluster's flags were read: the manifest, the options, or "" (the target's defaults)


def _executable(option: str, path: Optional[str], what: str) -> str:
    if not path:
        raise ConfigurationError(f"{option}: no {what} was given or found in PATH; give its path")
    if not os.path.isfile(path):
        raise ConfigurationError(f"{option}: {path} does not exist (give the path of the {what})")
    if not os.access(path, os.X_OK):
        raise ConfigurationError(f"{option}: {path} is not executable (chmod +x it, or give another path)")
    return path


def binary_version(path: str) -> str:
    """``vX.Y.Z`` as the binary itself reports it; a ConfigurationError when it is not a kube-apiserver."""
    code, out, error = scratch.run_tool([path, "--version"], timeout=30)
    if code == -1:
        raise ConfigurationError(f"apiserver_binary: {path} could not be run ({error})")
    match = _VERSION.search(out)
    if code != 0 or not match:
        raise ConfigurationError(f"apiserver_binary: {path} is not a kube-apiserver (`{os.path.basename(path)} --version` "
                                 "did not print `Kubernetes vX.Y.Z`); give the target release's kube-apiserver binary")
    return match.group(1)


def _manifest_flags(params: dict) -> Tuple[Dict[str, str], str]:
    """The manifest's flags and its path ("" when no manifest was read)."""
    path = params.get("apiserver_manifest")
    explicit = path is not None
    path = path if explicit else model.MANIFEST
    if not path or not os.path.exists(path):
        if explicit and path:
            raise ConfigurationError(f"apiserver_manifest: {path} does not exist (the kube-apiserver static pod manifest; "
                                     "give its path, or \"\" to take every flag from the options)")
        return {}, ""
    return _read_manifest(path, "apiserver_manifest", "give the right path, or \"\" to take every flag from the options"), path


def _read_manifest(path: str, option: str, fix: str) -> Dict[str, str]:
    if not HAS_YAML:
        raise ConfigurationError(f"the Python package PyYAML is required to read {option}")
    try:
        with open(path, encoding="utf-8") as handle:
            return model.flags_from_manifest(yaml.safe_load(handle))
    except (OSError, UnicodeDecodeError, yaml.YAMLError, ValueError) as error:
        raise ConfigurationError(f"{option}: {path} could not be read as the kube-apiserver static pod ({error}); {fix}") from None


def _target_manifest(params: dict, manifest: Dict[str, str], manifest_path: str, git_version: str) -> Tuple[Dict[str, str], str]:
    """The manifest flags the target runs with, and where they come from (``backups``): for a rollback, kubeadm's
    newest backup of a manifest of the target release when there is one, else the current manifest."""
    if not manifest_path:
        return manifest, _flags_from(params, "")
    directory = params.get("apiserver_manifest_backups")
    directory = backups.default_directory(manifest_path) if directory is None else directory
    current_image = binaries.image_of_manifest(manifest_path)
    found, why = backups.choose(current_image, git_version,
                                backups.find(directory) if directory and backups.is_rollback(current_image, git_version) else [])
    if found is None:
        return manifest, _flags_from(params, manifest_path, why)
    flags = _read_manifest(found.path, "apiserver_manifest_backups", "remove or repair that backup, or give "
                           "apiserver_manifest_backups \"\" to take the flags from the current manifest")
    return flags, _flags_from(params, manifest_path, why, backup=True)


def storage_flags(params: dict, manifest: Dict[str, str]) -> Dict[str, str]:
    """The storage-relevant flags: the manifest's, overridden by the options ("" drops one)."""
    flags = {name: manifest[name] for name in model.STORAGE_FLAGS if manifest.get(name)}
    for option, flag in FLAG_OPTIONS.items():
        value = params.get(option)
        if value is None:
            continue
        if value == "":
            flags.pop(flag, None)
        else:
            flags[flag] = str(value)
    path = flags.get("encryption-provider-config")
    if path and not os.path.isfile(path):
        raise ConfigurationError(f"encryption_config: {path} does not exist on this host (the apiserver's "
                                 "--encryption-provider-config; without it the target cannot read data encrypted at rest)")
    _check_compatibility_flags(flags)
    return flags


_MINOR = re.compile(r"^(kube=)?v?1\.\d+$")  # --emulated-version takes 1.35 or kube=1.35


def _check_compatibility_flags(flags: Dict[str, str]) -> None:
    """The compatibility version flags (KEP-4330), checked before anything starts: a bad value would only show as a
    target that exits at start, after the whole copy."""
    for flag in ("emulated-version", "min-compatibility-version"):
        value = flags.get(flag)
        if value is not None and not _MINOR.match(value):
            raise ConfigurationError(f"{FLAG_OPTIONS_BY_FLAG[flag]}: {value!r} is not a minor release (--{flag} takes "
                                     "one such as 1.35, quoted); give it, or \"\" to drop the manifest's")
    value = flags.get("emulation-forward-compatible")
    if value is not None and value.lower() not in ("true", "false"):
        raise ConfigurationError(f"emulation_forward_compatible: {value!r} is not true or false (--emulation-forward-"
                                 "compatible is a boolean); give one of them, or \"\" to drop the manifest's")


def _etcd_source(params: dict, manifest: Dict[str, str]) -> Optional[EtcdSettings]:
    given = dict(params)
    if not given.get("etcd_endpoints") and manifest.get("etcd-servers"):
        given["etcd_endpoints"] = manifest["etcd-servers"].split(",")
        for option, flag in (("etcd_ca_cert", "etcd-cafile"), ("etcd_client_cert", "etcd-certfile"), ("etcd_client_key", "etcd-keyfile")):
            given[option] = given.get(option) or manifest.get(flag)
    if not given.get("etcd_endpoints"):
        return None
    return EtcdSettings.from_params(given)


def _restore_tool(params: dict, etcd_binary: str, version: EtcdVersion) -> str:
    """etcdutl_binary, or the restore tool of the etcd's own release (``scratch.restore_tool``)."""
    given = params.get("etcdutl_binary")
    if given:
        _executable("etcdutl_binary", given, "etcdutl (or etcdctl on etcd 3.4)")
    return scratch.restore_tool(etcd_binary, version, given)


def _flags_from(params: dict, manifest_path: str, why: str = "", backup: bool = False) -> str:
    """Where the cluster's flags come from, said in the result: a rehearsal on the target's defaults would report
    what the cluster's flags enable as removed. ``why``: the manifest chosen for a rollback (``backups.choose``)."""
    given = sorted(option for option in FLAG_OPTIONS if params.get(option) is not None)
    manifest = why if backup else (f"the manifest {manifest_path}" + (f" ({why})" if why else ""))
    sources = ([manifest] if manifest_path else []) + ([f"the options ({', '.join(given)})"] if given else [])
    return " and ".join(sources)


def _require_flags(params: dict, flags_from: str) -> None:
    """As the default evidence, never on the target's defaults: the cluster's flags are read or given."""
    if not flags_from and params.get("if_unavailable") == "skip":
        raise binaries.Unavailable(f"the cluster's kube-apiserver flags are unknown here (no static pod manifest at "
                                   f"{model.MANIFEST}, and no feature_gates or runtime_config given): run it on a control-plane "
                                   "host, or give apiserver_manifest, or the flags as options")


def _binaries(params: dict, mounts: Optional[binaries.ImageMounts], manifest_path: str = "") -> Tuple[str, str]:
    """The target kube-apiserver and the etcd for the copy: the paths given; else the images this host's containerd
    holds (the target release's; the one the cluster's etcd static pod runs, next to the apiserver's manifest: its
    own etcd, measured, not assumed), else (etcd) the one in PATH."""
    mounts = mounts or binaries.ImageMounts(params.get("containerd_address"), mount=False)
    version = params.get("target_version") or params.get("target_release")
    binary = params.get("apiserver_binary") or mounts.binary(
        "kube-apiserver", params.get("apiserver_image"), version, option="apiserver_image",
        pull=binaries.image_to_pull("kube-apiserver", params.get("apiserver_image"), params.get("target_version")))
    if params.get("etcd_binary"):
        return binary, params["etcd_binary"]
    etcd_manifest = binaries.etcd_manifest_beside(manifest_path)
    image = params.get("etcd_image") or binaries.image_of_manifest(etcd_manifest)
    if image:
        try:
            return binary, mounts.binary("etcd", image, option="etcd_image")
        except binaries.Unavailable:
            if params.get("etcd_image") or not shutil.which("etcd"):
                raise
    etcd = shutil.which("etcd")
    if not etcd:
        raise binaries.Unavailable(f"no etcd binary for the copy: none in PATH and no etcd static pod at {etcd_manifest} "
                                   "whose image holds one; give etcd_binary (3.4 or later) or etcd_image")
    return binary, etcd


def _check_options(params: dict) -> None:
    """The options that need nothing from the host, checked first: a bad one is an error, never a skipped rehearsal."""
    if params.get("names_limit") is not None and params["names_limit"] < -1:
        raise ConfigurationError("names_limit must be -1 (every name), 0 (none) or a positive number")
    if params.get("start_timeout") is not None and not 5 <= float(params["start_timeout"]) <= 3600:
        raise ConfigurationError(f"start_timeout must be between 5 and 3600 seconds, got {float(params['start_timeout'])}")
    work_dir = params.get("work_dir") or tempfile.gettempdir()
    if not os.path.isdir(work_dir) or not os.access(work_dir, os.W_OK):
        raise ConfigurationError(f"work_dir: {work_dir} is not a writable directory")
    if params.get("apiserver_manifest_backups") and not os.path.isdir(params["apiserver_manifest_backups"]):
        raise ConfigurationError(f"apiserver_manifest_backups: {params['apiserver_manifest_backups']} is not a directory (where "
                                 "kubeadm keeps its kubeadm-backup-manifests-* directories, /etc/kubernetes/tmp; \"\" for none)")
    if not params.get("apiserver_binary") and not params.get("apiserver_image") and not params.get("target_release"):
        raise ConfigurationError("give apiserver_binary (the target kube-apiserver's path), or target_release (its image is "
                                 "then taken from containerd), or apiserver_image")


def plan(params: dict, mounts: Optional[binaries.ImageMounts] = None) -> Plan:
    """Every option checked, and every tool found, before anything is started or read. What this host cannot
    provide (the etcd connection, the cluster's flags, a binary) raises ``binaries.Unavailable``, checked in that
    order so that the default evidence gives up before it mounts anything."""
    _check_options(params)
    _check_migrate_with(params.get("migrate_with"))
    manifest, manifest_path = _manifest_flags(params)
    etcd_source = None if params.get("snapshot") else _etcd_source(params, manifest)
    if not params.get("snapshot") and etcd_source is None:
        raise binaries.Unavailable("Nothing to copy: give snapshot (an `etcdctl snapshot save` file) or etcd_endpoints (with "
                                   "etcd_ca_cert, etcd_client_cert and etcd_client_key on kubeadm), or run on a control-plane "
                                   f"host whose {model.MANIFEST} names them")
    flags_from = _flags_from(params, manifest_path)
    _require_flags(params, flags_from)
    binary, etcd_binary = _binaries(params, mounts, manifest_path)
    binary = _executable("apiserver_binary", binary, "target kube-apiserver binary")
    git_version = binary_version(binary)
    wanted = params.get("target_release")
    if wanted and not git_version.lstrip("v").startswith(str(wanted).lstrip("v").rstrip(".") + "."):
        raise ConfigurationError(f"target_release is {wanted}, but apiserver_binary {binary} reports {git_version}: give the "
                                 "binary of the release you upgrade (or roll back) to")
    etcd_binary = _executable("etcd_binary", etcd_binary, "etcd binary (3.4 or later)")
    etcd_version = scratch.etcd_version(etcd_binary)
    target_manifest, flags_from = _target_manifest(params, manifest, manifest_path, git_version)
    flags = storage_flags(params, target_manifest)
    prefix = normalize_prefix(flags.get("etcd-prefix") or "/registry")
    names_limit = 20 if params.get("names_limit") is None else params["names_limit"]
    timeout = 120.0 if params.get("start_timeout") is None else float(params["start_timeout"])
    fail_on = list(DEFAULT_FAIL_ON if params.get("fail_on") is None else params["fail_on"])
    work_dir = params.get("work_dir") or tempfile.gettempdir()
    result = Plan(binary=binary, git_version=git_version, etcd_binary=etcd_binary, flags=flags, prefix=prefix, work_dir=work_dir,
                  start_timeout=timeout, names_limit=names_limit, fail_on=fail_on, flags_from=flags_from,
                  target_crds=load_target_crd_objects(params.get("target_crds") or []), etcd_version=etcd_version)
    result.current = _current(params.get("migrate_with"), manifest)
    if params.get("snapshot"):
        if not os.path.isfile(params["snapshot"]) or not os.access(params["snapshot"], os.R_OK):
            raise ConfigurationError(f"snapshot: {params['snapshot']} does not exist or is not a readable file")
        result.snapshot = params["snapshot"]
        result.restore_tool = _restore_tool(params, etcd_binary, etcd_version)
        return result
    result.etcd = etcd_source
    result.scan = ScanOptions.from_params(dict(params, etcd_prefix=prefix))
    return result


def _check_migrate_with(options) -> None:
    """The shape of ``migrate_with``, before anything else is looked at."""
    if not options:
        return
    if not isinstance(options, dict) or not options.get("apiserver_binary"):
        raise ConfigurationError("migrate_with must be a dictionary with apiserver_binary (the kube-apiserver binary the "
                                 "cluster runs now), and optionally feature_gates, runtime_config, encryption_config")
    unknown = set(options) - {"apiserver_binary", *FLAG_OPTIONS}
    if unknown:
        raise ConfigurationError(f"migrate_with: unknown key(s) {', '.join(sorted(unknown))}; known: apiserver_binary, "
                                 + ", ".join(sorted(FLAG_OPTIONS)))


def _current(options, manifest: Dict[str, str]) -> Optional[dict]:
    """``migrate_with``: the binary running now, with the manifest's storage flags (it describes the current
    apiserver) overridden by the dictionary's keys, as for the target."""
    if not options:
        return None
    binary = _executable("migrate_with.apiserver_binary", options["apiserver_binary"], "current kube-apiserver binary")
    try:
        version = binary_version(binary)
    except ConfigurationError as error:
        raise ConfigurationError(str(error).replace("apiserver_binary:", "migrate_with.apiserver_binary:", 1)) from None
    return {"binary": binary, "git_version": version, "flags": storage_flags(options, manifest)}


def _available_memory() -> Optional[int]:
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def check_room(size: Optional[int], work_dir: str) -> dict:
    """Free disk and memory against the data's size: a copy on disk twice over; in memory the scratch etcd (about four
    times the data at its peak: 3.3 GiB for 0.8 GiB of data at 1,000,000 keys, etcd 3.5) and the target apiserver."""
    size = size or 0
    need_disk, need_memory = 2 * size + 256 * MIB, 4 * size + 768 * MIB
    free, memory = shutil.disk_usage(work_dir).free, _available_memory()
    room = {"data_bytes": size, "disk_needed": need_disk, "disk_free": free, "memory_needed": need_memory, "memory_available": memory}
    if free < need_disk:
        raise RehearsalError(f"work_dir {work_dir} has {free // MIB} MiB free; the copy of {size // MIB} MiB of etcd data needs "
                             f"{need_disk // MIB} MiB: give a work_dir with room, or free space", details=room)
    if memory is not None and memory < need_memory:
        raise RehearsalError(f"the host has {memory // MIB} MiB of memory available; a rehearsal on {size // MIB} MiB of data "
                             f"needs about {need_memory // MIB} MiB (the scratch etcd and the target apiserver): run it on a "
                             "host with more free memory", details=room)
    return room


def _copy(plan_: Plan, etcd: scratch.ScratchEtcd) -> Tuple[dict, Optional[reader.StoredKeys]]:
    """The copy made, and what it holds by resource when that was seen on the way in: a live copy folds every key it
    writes; a restored snapshot gives None, and ``_copied`` scans it."""
    if plan_.snapshot:
        etcd.restore(plan_.restore_tool, plan_.snapshot)
        etcd.start()
        return {"kind": "snapshot", "from": plan_.snapshot, "bytes": os.path.getsize(plan_.snapshot)}, None
    etcd.start()
    source = EtcdReader(plan_.etcd)
    stored = reader.StoredKeys()
    keys, size = etcd.put_all(stored.folding(source.scan(plan_.scan), plan_.prefix))
    return ({"kind": "etcd", "from": source.endpoint, "revision": source.revision, "pages": source.pages, "bytes": size,
             "copied_keys": keys}, stored)


def _client(apiserver: TargetApiserver) -> ApiClient:
    return ApiClient(ConnectionSettings(host=apiserver.url, ca_cert=apiserver.ca_cert,
                                        headers={"Authorization": f"Bearer {apiserver.token}"}, timeout=60.0))


READY_POLL = 0.25  # seconds between two /readyz requests while the apiserver starts
EXITED, READY, STARTING = "exited", "ready", "starting"


def _wait_ready(apiserver: TargetApiserver, timeout: Union[float, Deadline], clock=time.monotonic,
                sleep=time.sleep) -> bool:
    """Whether /readyz answered 200 before the apiserver exited or the time ran out (an exit ends the wait at once;
    the caller names the log's error lines)."""
    clients = []  # made once the apiserver has written its serving certificate

    def fetch() -> str:
        if apiserver.exit_code() is not None:
            return EXITED
        if not clients and os.path.isfile(apiserver.ca_cert):
            clients.append(_client(apiserver))
        if clients:
            try:
                clients[0].request("GET", paths.READYZ)
                return READY
            except ApiError:
                pass
        return STARTING

    return poll_past(fetch, STARTING, timeout, READY_POLL, clock, sleep) == READY


def _served_by_release(git_version: str) -> Dict[str, list]:
    """Versions release data says the target's release serves, per resource ({} for a release it does not know)."""
    try:
        profile = load_profiles(None, None).get(".".join(git_version.lstrip("v").split(".")[:2]))
    except KubeUpgradeError:
        return {}
    return {name: sorted(entry.served, reverse=True) for name, entry in profile.resources.items()}


def _read(apiserver, etcd, stored, plan_: Plan, ready: bool):
    """Read everything through the target; one that is up but not ready is still asked (its reads name the objects
    it cannot decode); one that exited or serves nothing gives no reads."""
    if not ready and (apiserver.exit_code() is not None or not os.path.isfile(apiserver.ca_cert)):
        return []
    client = _client(apiserver)
    try:
        manifests = reader.apply_crds(client, plan_.target_crds) if plan_.target_crds else {}
        served = reader.wait_for_custom_resources(client, stored, timeout=30.0 if ready else 5.0)
        reader.probe(client, served, stored, _served_by_release(plan_.git_version))

        def objects_of(name):
            return reader.objects_under(etcd.url, stored.prefixes[name], plan_.prefix)

        return reader.read_all(client, stored, served, reader.ReadOptions(objects_of, plan_.names_limit, manifests))
    except ApiError:
        if ready:
            raise
        return []


def _rehearse_plan(workspace, etcd, stored, plan_: Plan) -> dict:
    """Migrate the copy through the current binary (the migration the upgrade would run), then stop it."""
    current = plan_.current
    started = time.monotonic()
    apiserver = TargetApiserver(workspace, current["binary"], etcd.url, current["flags"], role="current")
    apiserver.start()
    if not _wait_ready(apiserver, plan_.start_timeout):
        lines = "; ".join(model.problem_lines(apiserver.log_text())[-3:])
        raise RehearsalError(f"migrate_with: the current binary {current['git_version']} did not start on the copy of etcd "
                             f"({lines or 'no error line'}): check its flags (migrate_with's keys override the manifest's)")
    client = _client(apiserver)
    served = reader.wait_for_custom_resources(client, stored, timeout=30.0)
    reader.probe(client, served, stored, _served_by_release(current["git_version"]))
    resources = migrate_copy.migrate_all(client, stored, served, plan_.migrate_timeout)
    workspace.stop(apiserver.process)
    return {"binary": current["binary"], "git_version": current["git_version"], "flags": dict(current["flags"]),
            "resources": resources, "objects_migrated": sum(r["migrated"] for r in resources.values()),
            "failed": sum(r["failed"] for r in resources.values()), "seconds": round(time.monotonic() - started, 2)}


def _interrupted(signum, _frame):
    raise RehearsalError(f"the rehearsal was interrupted (signal {signum}); everything it started was stopped and removed")


def rehearse(plan_: Plan, warn=None) -> dict:
    """Copy, start, read and summarize; the workspace is removed whatever happens."""
    removed = scratch.remove_stale(plan_.work_dir)
    if removed and warn:
        warn(f"removed {len(removed)} rehearsal workspace(s) a killed run left in {plan_.work_dir}")
    size = os.path.getsize(plan_.snapshot) if plan_.snapshot else _live_size(plan_.etcd)
    room = check_room(size, plan_.work_dir)
    clock = {"started": time.monotonic()}
    measured_at = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    previous = signal.signal(signal.SIGTERM, _interrupted)
    workspace = scratch.Workspace(plan_.work_dir)
    try:
        etcd = scratch.ScratchEtcd(workspace, plan_.etcd_binary, plan_.etcd_version)
        source, stored = _copied(plan_, etcd, size)
        clock["copied"] = time.monotonic()
        planned = _rehearse_plan(workspace, etcd, stored, plan_) if plan_.current else None
        apiserver, started = _started(workspace, etcd, plan_)
        clock["ready"] = time.monotonic()
        start_problem, fatal = _start_failure(apiserver, plan_, clock) if not started else (None, [])
        reads = _read(apiserver, etcd, stored, plan_, started)
        ignored = model.ignored_gates(apiserver.log_text())
        clock["done"] = time.monotonic()
    except scratch.ScratchError as error:  # the scratch etcd's own failures, said as the rehearsal's
        raise RehearsalError(str(error), details=error.details) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
        workspace.close()
    result = model.summarize(reads, start_problem, plan_.fail_on)
    result.update(changed=False, binary=plan_.binary, target_git_version=plan_.git_version,
                  target_release=".".join(plan_.git_version.lstrip("v").split(".")[:2]), flags=dict(plan_.flags),
                  source=source, room=room, started=started, start_failure=start_problem, fatal_log=fatal,
                  outside_layout=stored.outside_layout, rehearsed_at=measured_at, ignored_feature_gates=ignored,
                  plan_migration=planned, scratch_etcd=etcd.summary(plan_.restore_tool),
                  copy_dir={"path": workspace.path, "removed": not os.path.exists(workspace.path)}, stale_removed=removed,
                  timings={"copy_seconds": round(clock["copied"] - clock["started"], 2),
                           "start_seconds": round(clock["ready"] - clock["copied"], 2),
                           "read_seconds": round(clock["done"] - clock["ready"], 2),
                           "total_seconds": round(time.monotonic() - clock["started"], 2)})
    result["report_text"] = model.render_text(result)
    result["report_markdown"] = model.render_markdown(result)
    result["headline"] = model.headline(result)
    return result


def _copied(plan_: Plan, etcd, size: int) -> tuple:
    """The copy in the scratch etcd: where it came from, and the keys it holds by resource (none is an error);
    ``size``: the data's, as the room was checked for it."""
    source, stored = _copy(plan_, etcd)
    if stored is None:
        scan = EtcdReader(EtcdSettings(endpoints=[etcd.url]))
        stored = reader.stored_keys(scan.scan(ScanOptions(prefix=plan_.prefix, page_size=1000, keys_only=True)),
                                    plan_.prefix)
        source["revision"] = scan.revision
    stored.data_bytes = size or 0
    source["keys"] = stored.keys
    if not stored.keys:
        raise RehearsalError(f"the copy has no key under {plan_.prefix}: nothing to rehearse on; check etcd_prefix "
                             "(the apiserver's --etcd-prefix) and the source", details={"source": source})
    return source, stored


def _started(workspace, etcd, plan_: Plan) -> tuple:
    """The target apiserver on the copy, and whether it became ready (once more on another port when it lost its own
    between the pick and the bind)."""
    apiserver = TargetApiserver(workspace, plan_.binary, etcd.url, plan_.flags)
    apiserver.start()
    started = _wait_ready(apiserver, plan_.start_timeout)
    if not started and apiserver.lost_its_port():
        apiserver.restart_elsewhere()
        started = _wait_ready(apiserver, plan_.start_timeout)
    return apiserver, started


def _start_failure(apiserver, plan_: Plan, clock: dict) -> tuple:
    """Why the target did not start (every kind its log names) and the log's fatal lines."""
    log_text = apiserver.log_text()
    fatal = model.problem_lines(log_text)
    return model.start_failure(fatal, apiserver.exit_code(), clock["ready"] - clock["copied"],
                               {k: FLAG_OPTIONS_BY_FLAG.get(k, k) for k in plan_.flags}, log_text), fatal


def _live_size(settings: EtcdSettings) -> Optional[int]:
    try:
        return EtcdReader(settings).db_size()
    except EtcdError:
        raise
    except (KeyError, ValueError, TypeError):
        return None


def not_rehearsed(reason: str) -> dict:
    """The result when the rehearsal is the default evidence and this host cannot run it: said, never a pass."""
    return {"changed": False, "rehearsed": False, "not_rehearsed": reason, "blocking": [],
            "headline": f"Not rehearsed: {reason}", "msg": f"Not rehearsed: {reason}"}


def run(kum) -> dict:
    """Entry point of the module; fails with the result when something blocks."""
    params = kum.params
    with binaries.ImageMounts(params.get("containerd_address"), pull=not getattr(kum, "check_mode", False)) as mounts:
        try:
            plan_ = plan(params, mounts)
        except binaries.Unavailable as error:
            if params.get("if_unavailable") != "skip":
                raise
            return not_rehearsed(str(error))
        result = rehearse(plan_, warn=kum.warn)
        result.update(rehearsed=True, images=mounts.summary(), flags_from=plan_.flags_from or "none: the target's defaults",
                      stale_removed=result["stale_removed"] + mounts.stale_unmounted)
    if not plan_.flags_from:
        kum.warn("the target ran with its default flags (no static pod manifest was read and no flag option given): a resource "
                 "the cluster's flags enable is reported removed; give apiserver_manifest, or feature_gates and runtime_config")
    if result["ignored_feature_gates"]:
        kum.warn(f"the target {result['target_git_version']} does not know the feature gate(s) "
                 f"{', '.join(result['ignored_feature_gates'])} and ignores them: remove them from --feature-gates, or check "
                 "that the feature they enable exists in the target release")
    result["msg"] = result["headline"]
    if result["blocking"]:
        kum.fail(result["headline"] + "\n" + result["report_text"], result=result,
                 error={"type": "RehearsalBlocks", "blocking": len(result["blocking"])})
    return result
