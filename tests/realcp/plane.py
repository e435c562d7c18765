# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A real Kubernetes control plane on loopback: Debian's etcd plus N real kube-apiserver processes.

Where a test's truth depends on what a real kube-apiserver does (storage versions, identity Leases,
encryption at rest, mixed releases during a roll), the simulator is not enough. The binaries come from
``KUBEUPGRADE_TEST_K8S_ASSETS``: a directory of ``v<version>/kube-apiserver`` (and
``v<version>/kube-controller-manager``), the envtest layout.

Per-release flags: each release gets the feature gates and runtime-config that enable its alpha and beta
APIs (``RELEASE_FLAGS``; a release without its own entry uses the nearest older one, so 1.33 uses 1.32's).
Upstream kube-apiserver (1.28) exits on a feature gate its release does not know, which is why they are
per release (the 1.32 and 1.33 OpenShift-based builds only warn).
``feature_gates`` and ``runtime_config`` override them: either a flat ``{name: value}`` for every
apiserver, or ``{key: {name: value}}`` where key is ``"*"``, a release (``"1.32"`` or ``"1.32.6"``) or an
apiserver index (``0``); later keys win in that order, and a value ``None`` drops a default.
``extra_flags`` is a list for every apiserver or ``{key: [flags]}`` with the same keys.

Each apiserver gets its own hostname ``apiserver-<i>`` (so its own identity Lease) through
``unshare -u`` when running as root and ``unshare`` works; otherwise they share the machine's hostname
and so one identity Lease.

Everything needed to stop, start or restart an apiserver is in ``<workdir>/control-plane.json`` so that
another process (an ansible-playbook task doing a rolling upgrade step) can do it: ``python -m realcp``.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import copy
import fcntl
import glob
import http.client
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.append(TESTS_DIR)  # etcd_fixture lives in tests/
import etcd_fixture  # noqa: E402

ASSETS_ENV = "KUBEUPGRADE_TEST_K8S_ASSETS"
STATE_NAME = "control-plane.json"
ADMIN_TOKEN = "admin-token"
NOBODY_TOKEN = "nobody-token"
READY_TIMEOUT = 90.0  # per apiserver: 5-20 s usually, much more on a loaded 2-core machine
STOP_TIMEOUT = 30.0
POLL = 0.3
PORT_BASE = 21000  # below the kernel's ephemeral range (32768+), where bind(0) and outgoing connections land
PORT_SPAN = 400
BROKEN_FLAG = "--kubeupgrade-test-broken-on-purpose"  # unknown to every release: "Error: unknown flag", exit 1

HOW_TO_GET = (f"set {ASSETS_ENV} to a directory of v<version>/kube-apiserver: scripts/test.sh unpacks the project's "
              "binaries there; any envtest asset directory of the same shape works")

_GATES_1_28 = "ValidatingAdmissionPolicy DynamicResourceAllocation MultiCIDRServiceAllocator StorageVersionAPI APIServerIdentity"
_APIS_1_28 = ("admissionregistration.k8s.io/v1alpha1 admissionregistration.k8s.io/v1beta1 resource.k8s.io/v1alpha2 "
              "networking.k8s.io/v1alpha1 internal.apiserver.k8s.io/v1alpha1 flowcontrol.apiserver.k8s.io/v1beta2")
_GATES_1_32 = "DynamicResourceAllocation MultiCIDRServiceAllocator StorageVersionAPI APIServerIdentity StorageVersionMigrator"
_APIS_1_32 = ("admissionregistration.k8s.io/v1alpha1 admissionregistration.k8s.io/v1beta1 resource.k8s.io/v1alpha3 "
              "resource.k8s.io/v1beta1 networking.k8s.io/v1alpha1 networking.k8s.io/v1beta1 internal.apiserver.k8s.io/v1alpha1 "
              "flowcontrol.apiserver.k8s.io/v1beta3 storagemigration.k8s.io/v1alpha1")


def _all_true(names):
    return {name: "true" for name in names.split()}


# 1.35 and 1.36: every alpha and beta API version through runtime-config's api/all, and the gates their persisted
# resources need (not AllAlpha: it turns on CBOR storage and more that no operator runs).
_GATES_1_35 = ("StorageVersionAPI StorageVersionMigrator ClusterTrustBundle PodCertificateRequest CoordinatedLeaderElection "
               "DRADeviceTaints MutatingAdmissionPolicy GenericWorkload")
_GATES_1_36 = _GATES_1_35 + " DRAResourcePoolStatus"

RELEASE_FLAGS = {
    (1, 28): {"feature_gates": _all_true(_GATES_1_28), "runtime_config": _all_true(_APIS_1_28)},
    (1, 32): {"feature_gates": _all_true(_GATES_1_32), "runtime_config": _all_true(_APIS_1_32)},
    (1, 35): {"feature_gates": _all_true(_GATES_1_35), "runtime_config": {"api/all": "true"}},
    (1, 36): {"feature_gates": _all_true(_GATES_1_36), "runtime_config": {"api/all": "true"}},
}


class PlaneError(RuntimeError):
    """A process of the plane did not start, did not become ready, or exited."""


class ApiError(RuntimeError):
    """An apiserver answered an error status; ``status`` and ``body`` say which."""

    def __init__(self, method, path, status, body):
        super().__init__(f"{method} {path}: {status} {body}")
        self.status, self.body = status, body


# --- binaries ------------------------------------------------------------------------------------------------


def _version(text):
    return tuple(int(part) for part in text.lstrip("v").split("."))


def binary(release, name="kube-apiserver", assets=None) -> str:
    """The newest ``v<release>.*/<name>`` under the assets directory ("1.32" -> v1.32.6); FileNotFoundError if none."""
    assets = assets or os.environ.get(ASSETS_ENV)
    if not assets:
        raise FileNotFoundError(f"{ASSETS_ENV} is not set")
    want = _version(str(release))
    found = []
    for entry in os.listdir(assets) if os.path.isdir(assets) else ():
        if re.fullmatch(r"v\d+\.\d+\.\d+", entry) and _version(entry)[:len(want)] == want \
                and os.access(os.path.join(assets, entry, name), os.X_OK):
            found.append(_version(entry))
    if not found:
        raise FileNotFoundError(f"no v{release}.*/{name} in {assets}")
    return os.path.join(assets, "v{}.{}.{}".format(*max(found)), name)


def require_assets(*releases, name="kube-apiserver"):
    """The binaries of ``releases``; skip the test when one is missing (fail in CI, or with KUBEUPGRADE_TEST_REQUIRE_K8S_ASSETS)."""
    try:
        return [binary(release, name) for release in releases]
    except FileNotFoundError as error:
        reason = f"real Kubernetes binaries are missing ({error}): {HOW_TO_GET}"
        if os.environ.get("CI") == "true" or os.environ.get("KUBEUPGRADE_TEST_REQUIRE_K8S_ASSETS"):
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)


def release_flags(version) -> dict:
    """The default feature gates and runtime-config of a release: its own entry, else the nearest older one."""
    key = _version(version)[:2]
    known = [release for release in RELEASE_FLAGS if release <= key] or [min(RELEASE_FLAGS)]
    return copy.deepcopy(RELEASE_FLAGS[max(known)])


# --- ports ---------------------------------------------------------------------------------------------------

_port_lock = threading.Lock()
_port_cursor = {}
_port_locks = {}  # port -> the open lock file that reserves it


def worker_slot() -> int:
    """0 outside pytest-xdist, N+1 on worker gwN: each slot owns its own port range."""
    match = re.fullmatch(r"gw(\d+)", os.environ.get("PYTEST_XDIST_WORKER", ""))
    return int(match.group(1)) + 1 if match else 0


def _bindable(port) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _reserve(port) -> bool:
    """Hold an flock on a per-port file: other processes using this allocator (a second pytest run) skip the port."""
    directory = os.path.join(tempfile.gettempdir(), "realcp-ports")
    os.makedirs(directory, exist_ok=True)
    handle = open(os.path.join(directory, f"{port}.lock"), "a")  # held open (so locked) until release_ports
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        return False
    if not _bindable(port):
        handle.close()
        return False
    _port_locks[port] = handle
    return True


def allocate_port() -> int:
    """A bindable port of this worker's range that no other plane holds (in this process or, via a lock file, another)."""
    slot = worker_slot()
    base = PORT_BASE + slot * PORT_SPAN
    with _port_lock:
        for _attempt in range(PORT_SPAN):
            offset = _port_cursor.get(slot, 0)
            _port_cursor[slot] = (offset + 1) % PORT_SPAN
            if base + offset not in _port_locks and _reserve(base + offset):
                return base + offset
    raise PlaneError(f"no free port in {base}-{base + PORT_SPAN - 1}")


def release_ports(ports):
    """Give ports back (their processes have stopped)."""
    with _port_lock:
        for port in ports:
            handle = _port_locks.pop(port, None)
            if handle:
                handle.close()


# --- processes -----------------------------------------------------------------------------------------------


def _stat(pid):
    """(state, start time in clock ticks) of a process, or None when there is none."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], int(fields[19])


def process_start(pid):
    """A process's start time: with its pid, an identity that survives pid reuse."""
    stat = _stat(pid)
    return stat[1] if stat else None


def alive(pid, start=None) -> bool:
    """Whether the process runs (a zombie does not) and is the one that started at ``start``."""
    stat = _stat(pid) if pid else None
    return bool(stat) and stat[0] not in "ZX" and (start is None or stat[1] == start)


def _signal(pid, signum):
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if os.getpgid(pid) == pid:  # started with start_new_session: take its whole group down
            os.killpg(pid, signum)
        else:
            os.kill(pid, signum)


def terminate(processes, timeout=STOP_TIMEOUT):
    """SIGTERM every live (pid, start), wait up to ``timeout``, then SIGKILL what is left; returns how many it signalled."""
    live = [(pid, start) for pid, start in processes if pid and alive(pid, start)]
    for pid, _start in live:
        _signal(pid, signal.SIGTERM)
    for signum, wait in ((signal.SIGKILL, timeout), (None, 10.0)):
        deadline = time.monotonic() + wait
        while any(alive(pid, start) for pid, start in live) and time.monotonic() < deadline:
            time.sleep(0.1)
        for pid, start in live:
            if signum and alive(pid, start):
                _signal(pid, signum)
    return len(live)


def log_tail(path, lines=30) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, os.path.getsize(path) - 65536))
            return "\n".join(handle.read().decode(errors="replace").splitlines()[-lines:])
    except OSError as error:
        return f"(no log: {error})"


_unshare = None


def can_unshare() -> bool:
    """Whether ``unshare -u`` works here (root, and a kernel and container that allow a new UTS namespace)."""
    global _unshare
    if _unshare is None:
        _unshare = bool(os.geteuid() == 0 and shutil.which("unshare")
                        and subprocess.run(["unshare", "-u", "true"], capture_output=True, check=False).returncode == 0)
    return _unshare


# --- state file ----------------------------------------------------------------------------------------------


def load_state(path) -> dict:
    with open(path) as handle:
        return json.load(handle)


def _write_state(path, state):
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as handle:
        json.dump(state, handle, indent=2, sort_keys=True)
    os.replace(tmp, path)


@contextlib.contextmanager
def locked_state(path):
    """The state under an exclusive lock; written back (atomically) when the block ends without an exception."""
    with open(f"{path}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state = load_state(path)
        yield state
        _write_state(path, state)


def _override_keys(index, version):
    major, minor = _version(version)[:2]
    return ["*", f"{major}.{minor}", version, str(index)]


def _merged_flags(state, kind, index, version):
    result = release_flags(version)[kind]
    for key in _override_keys(index, version):
        for name, value in state["overrides"][kind].get(key, {}).items():
            if value is None:
                result.pop(name, None)
            else:
                result[name] = value
    return result


def apiserver_argv(state, index, path, broken=False):
    """kube-apiserver's command line for apiserver ``index`` running the binary at ``path``."""
    server = state["apiservers"][index]
    version = os.path.basename(os.path.dirname(path)).lstrip("v")
    gates = _merged_flags(state, "feature_gates", index, version)
    apis = _merged_flags(state, "runtime_config", index, version)
    argv = [path, *state["common_args"], f"--secure-port={server['port']}", f"--tls-cert-file={server['cert']}",
            f"--tls-private-key-file={server['key']}", f"--cert-dir={server['cert_dir']}"]
    if gates:
        argv.append("--feature-gates=" + ",".join(f"{k}={v}" for k, v in sorted(gates.items())))
    if apis:
        argv.append("--runtime-config=" + ",".join(f"{k}={v}" for k, v in sorted(apis.items())))
    for key in _override_keys(index, version):
        argv += state["overrides"]["extra_flags"].get(key, [])
    emulated = server.get("emulated_version")
    if emulated and _version(emulated)[:2] != _version(version)[:2]:  # as extraArgs would: the older release's betas on
        argv += [f"--emulated-version={server['emulated_version']}", "--emulation-forward-compatible=true"]
    return [*argv, BROKEN_FLAG] if broken else argv


def _spawn(state, index, release, broken=False):
    """Start apiserver ``index`` with ``release``'s binary, detached in its own session; records it in ``state``."""
    server = state["apiservers"][index]
    path = binary(release, assets=state["assets"])
    argv = apiserver_argv(state, index, path, broken)
    if state["unshare"]:
        argv = ["unshare", "-u", "sh", "-c", f"hostname {shlex.quote(server['hostname'])} && exec {shlex.join(argv)}"]
    version = os.path.basename(os.path.dirname(path)).lstrip("v")
    with open(server["log"], "ab") as log:
        note = f" with {BROKEN_FLAG}" if broken else ""
        log.write(f"\n===== {time.strftime('%Y-%m-%d %H:%M:%S')} starting apiserver-{index} {version}{note} =====\n".encode())
        log.flush()
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    server.update(release=str(release), version=version, binary=path, pid=process.pid, pid_start=process_start(process.pid),
                  broken=broken, started=time.time())
    return process


def _ssl_context(ca_cert):
    return ssl.create_default_context(cafile=ca_cert)


def _readyz(state, server, context):
    request = urllib.request.Request(server["endpoint"] + "/readyz", headers={"Authorization": f"Bearer {state['admin_token']}"})
    try:
        with urllib.request.urlopen(request, timeout=5, context=context) as response:
            return response.status == 200
    except (OSError, http.client.HTTPException):
        return False


def wait_ready(state, index, timeout=READY_TIMEOUT, process=None):
    """Wait until apiserver ``index`` answers /readyz 200; PlaneError with its log's tail if it exits or times out."""
    server = state["apiservers"][index]
    context = _ssl_context(state["ca_cert"])
    deadline = time.monotonic() + timeout
    while True:
        exited = process.poll() is not None if process else not alive(server["pid"], server["pid_start"])
        if exited:
            problem = f"exited{f' with {process.returncode}' if process else ''}"
        elif _readyz(state, server, context):
            return
        elif time.monotonic() > deadline:
            problem = f"was not ready within {timeout:.0f}s"
        else:
            time.sleep(POLL)
            continue
        raise PlaneError(f"apiserver-{index} ({server['version']}, pid {server['pid']}, {server['endpoint']}) {problem}; "
                         f"last lines of {server['log']}:\n{log_tail(server['log'])}")


def stop_apiserver(state_file, index, timeout=STOP_TIMEOUT):
    """Stop apiserver ``index`` (SIGTERM, then SIGKILL after ``timeout``) as the state file records it."""
    with locked_state(state_file) as state:
        server = state["apiservers"][index]
        terminate([(server["pid"], server["pid_start"])], timeout)
        server.update(pid=None, pid_start=None)


def start_apiserver(state_file, index, release=None, broken=False, wait=True, timeout=READY_TIMEOUT, emulated=None):
    """Start apiserver ``index`` (its recorded release unless ``release``) on its port, certificates and etcd.

    ``broken`` adds a flag no release knows, so the apiserver exits at once, as one that does not
    come back after an upgrade; with ``wait`` that is a PlaneError. ``emulated``: the release it runs at
    (``--emulated-version``, kept for later starts; ``""`` clears it; None keeps what it had). Returns the Popen of the
    new process.
    """
    with locked_state(state_file) as state:
        server = state["apiservers"][index]
        if emulated is not None:
            server["emulated_version"] = emulated or None
        if alive(server["pid"], server["pid_start"]):
            raise PlaneError(f"apiserver-{index} is running (pid {server['pid']}): stop it first")
        process = _spawn(state, index, release or server["release"], broken)
        snapshot = copy.deepcopy(state)
    if wait:
        wait_ready(snapshot, index, timeout, process)
    return process


def restart_apiserver(state_file, index, release=None, broken=False, wait=True, timeout=READY_TIMEOUT, emulated=None):
    """One rolling-upgrade step: stop apiserver ``index``, start ``release``'s binary in its place, wait until ready."""
    stop_apiserver(state_file, index)
    return start_apiserver(state_file, index, release, broken, wait, timeout, emulated)


def _owned_processes(state):
    """(pid, start) of every process a state file lists."""
    entries = [*state["apiservers"], state.get("etcd_process") or {}, state.get("controller_manager") or {}]
    return [(entry["pid"], entry.get("pid_start")) for entry in entries if entry.get("pid")]


def reap_leftovers(root) -> int:
    """Best effort: stop the processes of planes under ``root`` whose owning test process is gone; returns how many."""
    reaped = 0
    for depth in range(1, 6):
        for path in glob.glob(os.path.join(str(root), *["*"] * depth, STATE_NAME)):
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                state = load_state(path)
                owner = state["owner"]
                if not alive(owner["pid"], owner["start"]):
                    reaped += terminate(_owned_processes(state), timeout=10)
    return reaped


# --- cleanup of the test process -----------------------------------------------------------------------------

_live_planes = set()
_handler_installed = False


def _stop_live_planes():
    for plane in list(_live_planes):
        with contextlib.suppress(Exception):
            plane.stop_all()


def _on_sigterm(previous):
    def handler(signum, frame):
        _stop_live_planes()
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
    return handler


def _register(plane):
    """Keep ``plane`` stopped on exit and on SIGTERM, even when a test's teardown never runs."""
    global _handler_installed
    _live_planes.add(plane)
    if not _handler_installed and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _on_sigterm(signal.getsignal(signal.SIGTERM)))
        _handler_installed = True


atexit.register(_stop_live_planes)


# --- the plane -----------------------------------------------------------------------------------------------


def _keyed(option, kind):
    """Normalize an override option to {key: value} with string keys (see the module docstring)."""
    if not option:
        return {}
    if kind == "extra_flags" and isinstance(option, (list, tuple)):
        return {"*": list(option)}
    if not all(isinstance(value, (dict, list, tuple)) for value in option.values()):
        option = {"*": option}
    if kind == "extra_flags":
        return {str(key): list(value) for key, value in option.items()}
    return {str(key): {name: _flag_value(value) for name, value in values.items()} for key, values in option.items()}


def _flag_value(value):
    if value is None:
        return None
    return str(value).lower() if isinstance(value, bool) else str(value)


def _kubeconfig(path, server, ca_pem, user, token):
    """A kubeconfig (YAML) for ``user`` with a bearer token; the one CA verifies every apiserver of the plane."""
    ca_data = base64.b64encode(ca_pem).decode()
    text = (f"apiVersion: v1\nkind: Config\nclusters:\n- name: realcp\n  cluster:\n    server: {server}\n"
            f"    certificate-authority-data: {ca_data}\nusers:\n- name: {user}\n  user:\n    token: {token}\n"
            f"contexts:\n- name: {user}@realcp\n  context:\n    cluster: realcp\n    user: {user}\n"
            f"current-context: {user}@realcp\n")
    return etcd_fixture._write(path, text.encode(), 0o600)


class ControlPlane:
    """etcd plus one kube-apiserver per entry of ``releases`` in ``workdir``; ``start()`` it, or use it as a context manager.

    See the module docstring for ``feature_gates``, ``runtime_config`` and ``extra_flags``.
    """

    def __init__(self, workdir, releases=("1.32", "1.32"), etcd_tls=False, encryption=False,
                 feature_gates=None, runtime_config=None, extra_flags=None, assets=None, etcd_version=None,
                 etcd_args=()):
        self.workdir = os.path.abspath(str(workdir))
        os.makedirs(self.workdir, exist_ok=True)
        releases = [releases] if isinstance(releases, str) else [str(release) for release in releases]
        self.state_file = os.path.join(self.workdir, STATE_NAME)
        self._ports = [allocate_port(), allocate_port()]
        self.etcd = etcd_fixture.EtcdServer(os.path.join(self.workdir, "etcd"), tls=etcd_tls, ports=tuple(self._ports),
                                            extra_args=["--experimental-watch-progress-notify-interval=5s", *etcd_args],
                                            version=etcd_version)
        self.encryption_config = self._write_encryption_config() if encryption else None
        self._processes = {}  # Popen objects of what this process started, to reap them
        self._started = []  # (pid, start) of everything this process started, in case the state file loses one
        pki = self._pki(len(releases))
        state = {
            "workdir": self.workdir, "assets": os.path.abspath(assets or os.environ.get(ASSETS_ENV) or "."),
            "owner": {"pid": os.getpid(), "start": process_start(os.getpid())},
            "cli": {"argv": [sys.executable, "-m", "realcp"], "pythonpath": TESTS_DIR},
            "unshare": can_unshare(), "admin_token": ADMIN_TOKEN, "nobody_token": NOBODY_TOKEN, **pki,
            "etcd": self.etcd_settings, "etcd_process": None, "controller_manager": None,
            "overrides": {"feature_gates": _keyed(feature_gates, "feature_gates"),
                          "runtime_config": _keyed(runtime_config, "runtime_config"),
                          "extra_flags": _keyed(extra_flags, "extra_flags")},
        }
        state["common_args"] = self._common_args(state)
        state["apiservers"] = [self._apiserver_entry(i, release, state) for i, release in enumerate(releases)]
        state["endpoints"] = [server["endpoint"] for server in state["apiservers"]]
        state["kubeconfig"] = self.write_kubeconfig(os.path.join(self.workdir, "admin.kubeconfig"), state=state)
        state["nobody_kubeconfig"] = self.write_kubeconfig(os.path.join(self.workdir, "nobody.kubeconfig"), token=NOBODY_TOKEN,
                                                           user="nobody", state=state)
        self._static = state
        _write_state(self.state_file, state)

    # -- setup

    def _pki(self, count):
        directory = os.path.join(self.workdir, "pki")
        os.makedirs(directory, exist_ok=True)
        ca_key, ca = etcd_fixture.make_ca("realcp-ca")
        ca_cert = etcd_fixture._write(os.path.join(directory, "ca.crt"), ca.public_bytes(serialization.Encoding.PEM))
        serving = [etcd_fixture.sign_leaf(directory, f"apiserver-{i}", ca_key, ca, [ExtendedKeyUsageOID.SERVER_AUTH]) for i in range(count)]
        sa_key = ec.generate_private_key(ec.SECP256R1())
        sa_private = etcd_fixture._write(os.path.join(directory, "sa.key"), sa_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()), 0o600)
        sa_public = etcd_fixture._write(os.path.join(directory, "sa.pub"), sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
        tokens = etcd_fixture._write(os.path.join(directory, "tokens.csv"),
                                     f'{ADMIN_TOKEN},admin,uid-admin,"system:masters"\n{NOBODY_TOKEN},nobody,uid-nobody\n'.encode(), 0o600)
        return {"ca_cert": ca_cert, "serving": serving, "sa_key": sa_private, "sa_pub": sa_public, "tokens": tokens}

    def _write_encryption_config(self):
        key = base64.b64encode(secrets.token_bytes(32)).decode()
        text = ("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n"
                "  - resources:\n      - secrets\n      - resourceclaims.resource.k8s.io\n    providers:\n"
                f"      - aescbc:\n          keys:\n            - name: key1\n              secret: {key}\n"
                "      - identity: {}\n")
        return etcd_fixture._write(os.path.join(self.workdir, "encryption-config.yaml"), text.encode(), 0o600)

    def _common_args(self, state):
        args = [f"--etcd-servers={self.etcd.url}", "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
                "--service-account-issuer=https://kubernetes.default.svc", f"--service-account-key-file={state['sa_pub']}",
                f"--service-account-signing-key-file={state['sa_key']}", "--service-cluster-ip-range=10.0.0.0/24",
                f"--token-auth-file={state['tokens']}", "--authorization-mode=RBAC", "--endpoint-reconciler-type=none"]
        if self.etcd.tls:
            pki = self.etcd.pki
            args += [f"--etcd-cafile={pki.ca_cert}", f"--etcd-certfile={pki.client_cert}", f"--etcd-keyfile={pki.client_key}"]
        if self.encryption_config:
            args.append(f"--encryption-provider-config={self.encryption_config}")
        return args

    def _apiserver_entry(self, index, release, state):
        port = allocate_port()
        self._ports.append(port)
        cert, key = state["serving"][index]
        return {"index": index, "release": release, "version": None, "binary": None, "port": port,
                "endpoint": f"https://127.0.0.1:{port}", "pid": None, "pid_start": None, "broken": False,
                "log": os.path.join(self.workdir, f"apiserver-{index}.log"), "hostname": f"apiserver-{index}",
                "cert": cert, "key": key, "cert_dir": os.path.join(self.workdir, f"apiserver-{index}-certs")}

    # -- what tests read

    @property
    def endpoints(self):
        return list(self._static["endpoints"])

    @property
    def kubeconfig(self):
        return self._static["kubeconfig"]

    @property
    def nobody_kubeconfig(self):
        return self._static["nobody_kubeconfig"]

    @property
    def ca_cert(self):
        return self._static["ca_cert"]

    @property
    def etcd_settings(self):
        """etcd as the collection's ``kubeupgrade_etcd`` variable describes it (plus ``encryption_config`` when on)."""
        settings = {"endpoints": [self.etcd.url]}
        if self.etcd.tls:
            settings.update(ca_cert=self.etcd.pki.ca_cert, client_cert=self.etcd.pki.client_cert, client_key=self.etcd.pki.client_key)
        if self.encryption_config:
            settings["encryption_config"] = self.encryption_config
        return settings

    def state(self) -> dict:
        """The state file as it is now (another process may have restarted an apiserver)."""
        return load_state(self.state_file)

    def apiserver(self, index) -> dict:
        return self.state()["apiservers"][index]

    def release_of(self, index):
        return self.apiserver(index)["release"]

    def version_of(self, index):
        return self.apiserver(index)["version"]

    def write_kubeconfig(self, path, index=0, token=ADMIN_TOKEN, user="admin", state=None):
        """A kubeconfig for apiserver ``index`` with ``token``."""
        state = state or self._static
        with open(state["ca_cert"], "rb") as handle:
            return _kubeconfig(path, state["apiservers"][index]["endpoint"], handle.read(), user, token)

    # -- lifecycle

    def start(self, timeout=READY_TIMEOUT):
        """Start etcd, the first apiserver, then the others at once; wait until each is ready (``timeout`` each).

        The first one alone: apiservers started together on an empty etcd race to initialise the service IP
        allocator, and the loser exits ("another caller has already initialized the resource").
        """
        _register(self)
        try:
            self.etcd.start()
            with locked_state(self.state_file) as state:
                state["etcd_process"] = {"pid": self.etcd.process.pid, "pid_start": process_start(self.etcd.process.pid)}
                self._track(0, _spawn(state, 0, state["apiservers"][0]["release"]))
            wait_ready(state, 0, timeout, self._processes[0])
            with locked_state(self.state_file) as state:
                for index, server in enumerate(state["apiservers"][1:], start=1):
                    self._track(index, _spawn(state, index, server["release"]))
            started = time.monotonic()
            for index in range(1, len(state["apiservers"])):
                wait_ready(state, index, max(1.0, started + timeout - time.monotonic()), self._processes[index])
        except BaseException:
            self.stop_all()
            raise
        return self

    def _track(self, index, process):
        self._processes[index] = process
        self._started.append((process.pid, process_start(process.pid)))

    def start_one(self, index, release=None, wait=True, broken=False, timeout=READY_TIMEOUT):
        """Start apiserver ``index`` (stopped before) with ``release`` or its recorded one."""
        self._track(index, start_apiserver(self.state_file, index, release, broken, wait=False))
        if wait:
            wait_ready(self.state(), index, timeout, self._processes[index])

    def stop(self, index, timeout=STOP_TIMEOUT):
        """SIGTERM apiserver ``index``, SIGKILL it after ``timeout``."""
        stop_apiserver(self.state_file, index, timeout)
        self._reap()

    def restart(self, index, release=None, wait=True, timeout=READY_TIMEOUT):
        """A rolling-upgrade step: the same port, certificates and etcd, ``release``'s binary."""
        self.stop(index)
        self.start_one(index, release, wait, timeout=timeout)

    def start_controller_manager(self, release="1.32", settle=2.0):
        """kube-controller-manager with the in-tree storage version migrator, admin token.

        Its flags depend on the release. 1.30-1.34 (alpha): the controller is named (``--controllers=*,svm``) and
        needs the client-go gate InformerResourceVersion. From 1.35 (beta) ``*`` starts it once the gate
        StorageVersionMigrator is on, and InformerResourceVersion is GA: 1.36.2 warns that setting it "will be
        removed in a future release", so it is left out there.
        """
        path = binary(release, "kube-controller-manager", assets=self._static["assets"])
        kubeconfig = self.write_kubeconfig(os.path.join(self.workdir, "controller-manager.kubeconfig"))
        log = os.path.join(self.workdir, "controller-manager.log")
        if _version(os.path.basename(os.path.dirname(path)))[:2] >= (1, 35):
            migrator = ["--feature-gates=StorageVersionMigrator=true"]
        else:
            migrator = ["--controllers=*,svm", "--feature-gates=StorageVersionMigrator=true,InformerResourceVersion=true"]
        argv = [path, f"--kubeconfig={kubeconfig}", "--secure-port=0", "--leader-elect=false", *migrator,
                f"--service-account-private-key-file={self._static['sa_key']}", f"--root-ca-file={self.ca_cert}"]
        with open(log, "ab") as handle:
            process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)
        self._processes["controller-manager"] = process
        self._started.append((process.pid, process_start(process.pid)))
        with locked_state(self.state_file) as state:
            state["controller_manager"] = {"pid": process.pid, "pid_start": process_start(process.pid), "log": log, "binary": path}
        deadline = time.monotonic() + settle  # no health port (--secure-port=0): it is up when it has not exited
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise PlaneError(f"kube-controller-manager exited with {process.returncode}; last lines of {log}:\n{log_tail(log)}")
            time.sleep(POLL)
        return process

    def stop_all(self):
        """Stop every apiserver (also those another process started), the controller manager, then etcd; idempotent."""
        processes = list(self._started)
        with contextlib.suppress(OSError, ValueError), locked_state(self.state_file) as state:
            processes += _owned_processes({**state, "etcd_process": None})
            for entry in [*state["apiservers"], state.get("controller_manager") or {}]:
                entry.update(pid=None, pid_start=None)
        terminate(processes)
        self._reap()
        self.etcd.stop()
        with contextlib.suppress(OSError, ValueError), locked_state(self.state_file) as state:
            state["etcd_process"] = None
        release_ports(self._ports)
        _live_planes.discard(self)

    close = stop_all

    def _reap(self):
        for process in self._processes.values():
            process.poll()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop_all()

    # -- talking to it

    def request(self, method, path, body=None, index=0, token=None, timeout=30, content_type=None):
        """(status, JSON or text) of a request to apiserver ``index`` with the admin token (``token=""``: anonymous);
        a body is JSON (a merge patch for PATCH) unless ``content_type`` says otherwise (a server-side apply)."""
        headers = {"Accept": "application/json"}
        token = ADMIN_TOKEN if token is None else token
        if token:
            headers["Authorization"] = f"Bearer {token}"
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            headers["Content-Type"] = content_type or ("application/merge-patch+json" if method == "PATCH" else "application/json")
        request = urllib.request.Request(self.endpoints[index] + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=_ssl_context(self.ca_cert)) as response:
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as error:
            status, raw = error.code, error.read()
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode(errors="replace")

    def _checked(self, method, path, body=None, index=0):
        status, answer = self.request(method, path, body, index)
        if status >= 400:
            raise ApiError(method, path, status, answer)
        return answer

    def create(self, path, obj, index=0):
        """POST ``obj`` to the collection ``path``; the created object, ApiError on an error status."""
        return self._checked("POST", path, obj, index)

    def get(self, path, index=0):
        """GET ``path``; the object, ApiError on an error status."""
        return self._checked("GET", path, index=index)

    def etcd_keys(self, prefix="/registry/"):
        """The keys under ``prefix`` in etcd, as text."""
        return [key.decode(errors="replace") for key, _value in self.etcd.range_prefix(prefix, keys_only=True)]

    def etcd_value(self, key):
        """The raw bytes etcd holds at ``key`` (None when absent): what the apiserver wrote, encrypted or not."""
        found = [value for found_key, value in self.etcd.range_prefix(key) if found_key == key.encode()]
        return found[0] if found else None
