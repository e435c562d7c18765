# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Scratch etcd members on loopback, each in a private workspace: the rehearsal's copy and the snapshot's restore proof,
with the etcd tools of the binary's own release (``etcd --version`` read once, the restore tool found).

Everything lives in one ``kubeupgrade-rehearsal-*`` directory (mode 0700) under the work directory (the rehearsal starts
its target apiserver there too, ``_rehearse/apiserver.py``).
It records the module's pid and every child's pid; a later run removes what a killed run left (its
owner is gone), stopping only processes whose command line still names that directory. Children
die with the module (``PR_SET_PDEATHSIG``, asked for by a launcher: no code runs between fork and exec).
Nothing listens beyond 127.0.0.1, and no key, value, token or credential is written to the output: only the
apiserver's error lines are ever shown.
This is the only code that writes to an etcd, and only to the scratch one it started: puts in ``KV/Txn`` transactions
over gRPC (its client URL is always plain http on loopback, so gRPC can always be spoken; no JSON gateway here), with
``client.py``'s channel and the messages of ``etcdpb/``.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Callable, Iterable, List, Optional, Tuple, Union

from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd import versions
from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd.settings import EtcdSettings
from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd.versions import EtcdVersion
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.poll import Deadline, poll_past
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.settings import process_running
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ConfigurationError, KubeUpgradeError

PREFIX = "kubeupgrade-rehearsal-"
OWNER = "owner.pid"
CHILDREN = "children.pids"
TXN_OPS = 1000  # puts per transaction into the scratch etcd (its --max-txn-ops is raised to match)
TXN_BYTES = 8 << 20
TXN_METHOD = "/etcdserverpb.KV/Txn"  # the one write the collection makes, into its own scratch etcd
WRITE_TIMEOUT = 120.0  # seconds for the scratch etcd to apply one transaction
QUOTA_BYTES = 8 << 30  # the scratch etcd's backend quota: etcd's recommended maximum, room for any copy
STATUS_TIMEOUT = 2.0  # seconds for one status call (Maintenance/Status) while the scratch etcd starts: it answers once it serves clients
ETCD_POLL = 0.2  # seconds between two status calls while the scratch etcd starts
EXITED, ANSWERED, STARTING = "exited", "answered", "starting"
UNNAMED_GRACE = 60.0  # seconds a workspace without its owner file is taken for one being made, not a killed run's


def _client():
    """The etcd client (``client.py``: its gRPC channel, the generated messages and grpcio), imported when a scratch
    member is waited for or written: every module removes stale workspaces at its start, and that must not cost the
    import of grpcio."""
    from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd import client  # pylint: disable=import-outside-toplevel

    return client


class ScratchError(KubeUpgradeError):
    """A scratch etcd could not be made, restored, started or written: names the tool at fault and what to do."""


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\x00", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def _started(pid: int) -> str:
    """When ``pid`` started (clock ticks since boot, /proc/<pid>/stat field 22): with the pid, names one process even
    after the pid is reused. '' where it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def _owner_running(path: str) -> bool:
    """Whether the run that made the workspace ``path`` still runs (its pid alive, and the same process)."""
    try:
        with open(os.path.join(path, OWNER), encoding="ascii") as handle:
            fields = handle.read().split()
    except OSError:
        fields = []
    if not fields:  # a run between making its directory and naming itself in it: give it a minute
        try:
            return time.time() - os.stat(path).st_mtime < UNNAMED_GRACE
        except OSError:
            return False
    try:
        pid = int(fields[0])
    except ValueError:
        return False
    return pid > 0 and process_running(pid) and (len(fields) < 2 or not _started(pid) or _started(pid) == fields[1])


def remove_stale(work_dir: Optional[str] = None) -> List[str]:
    """Remove what killed runs left under ``work_dir`` (default the system's temporary directory): every workspace
    whose run is gone, a rehearsal's or a snapshot proof's (each a full etcd copy), its processes (checked by command
    line) and directory. Cheap when there is none (one glob): any module that makes a workspace calls it at start.
    Returns the directories removed."""
    removed = []
    for path in glob.glob(os.path.join(work_dir or tempfile.gettempdir(), PREFIX + "*")):
        if not os.path.isdir(path) or _owner_running(path):
            continue
        try:
            with open(os.path.join(path, CHILDREN), encoding="ascii") as handle:
                children = [int(line) for line in handle.read().split() if line.strip().isdigit()]
        except OSError:
            children = []
        for pid in children:
            if process_running(pid) and path in _cmdline(pid):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def free_port() -> int:
    """A port nothing listens on at 127.0.0.1 (the kernel's pick); a ScratchError when loopback has none."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind(("127.0.0.1", 0))
            return probe.getsockname()[1]
    except OSError as error:
        raise ScratchError(f"no free port on 127.0.0.1 for the rehearsal's scratch etcd and apiserver ({error.strerror or error}); "
                           "free some (the local port range is net.ipv4.ip_local_port_range) and rehearse again") from None


PORT_TAKEN = "address already in use"  # what etcd and the apiserver log when another process took the port meanwhile


# What a child runs before it becomes the program: the kernel is asked to kill it when the module's thread that started
# it is gone (PR_SET_PDEATHSIG), unless the module is already gone, then it execs the program. Nothing runs between
# fork and exec in the module's process (no preexec_fn): CPython (3.10+) then starts the child with vfork, which runs
# no fork handlers.
# A fork with handlers can hang for good once gRPC's threads run in the module (the copy reads the live etcd over gRPC,
# and gRPC's handlers wait for them: grpc/grpc#34442), and Python code between fork and exec is unsafe with threads.
_LAUNCHER = (
    "import ctypes, os, sys\n"
    "try:\n"
    "    ctypes.CDLL('libc.so.6', use_errno=True).prctl(1, 9)\n"  # PR_SET_PDEATHSIG, SIGKILL
    "except OSError:\n"
    "    pass\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    sys.exit(70)\n"  # the module died before the signal was asked for
    "try:\n"
    "    os.execvp(sys.argv[2], sys.argv[2:])\n"
    "except OSError as error:\n"  # one line in the child's log, as the program's own would be: no traceback
    "    sys.exit(f'cannot run {sys.argv[2]}: {error.strerror}')\n")


def launched(argv: List[str]) -> List[str]:
    """``argv`` behind the launcher that makes it die with this process."""
    return [sys.executable, "-I", "-S", "-c", _LAUNCHER, str(os.getpid()), *argv]


class Workspace:
    """The private directory of one rehearsal (or snapshot proof) and every process started in it; ``close`` removes
    it all, ``remove_stale`` what a killed run left."""

    def __init__(self, work_dir: str):
        self.path = tempfile.mkdtemp(prefix=PREFIX, dir=work_dir)
        os.chmod(self.path, 0o700)
        with open(os.path.join(self.path, OWNER), "w", encoding="ascii") as handle:
            handle.write(f"{os.getpid()} {_started(os.getpid())}")
        self.processes: List[subprocess.Popen] = []

    def file(self, name: str) -> str:
        return os.path.join(self.path, name)

    def write(self, name: str, text: str) -> str:
        path = self.file(name)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        return path

    def start(self, argv: List[str], log_name: str, env: Optional[dict] = None) -> subprocess.Popen:
        log = open(self.file(log_name), "wb")
        try:
            process = subprocess.Popen(launched(argv), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       cwd=self.path, env=env, start_new_session=True, close_fds=True)
        finally:
            log.close()
        self.processes.append(process)
        with open(self.file(CHILDREN), "a", encoding="ascii") as handle:
            handle.write(f"{process.pid}\n")
        return process

    def log_text(self, log_name: str, limit: int = 1 << 20) -> str:
        try:
            with open(self.file(log_name), "rb") as handle:
                handle.seek(0, os.SEEK_END)
                handle.seek(max(0, handle.tell() - limit))
                return handle.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def stop(self, process: subprocess.Popen, grace: float = 10.0) -> None:
        if process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGTERM)
            except OSError:
                process.terminate()
            try:
                process.wait(grace)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except OSError:
                    process.kill()
                process.wait(grace)

    def close(self) -> None:
        for process in reversed(self.processes):
            self.stop(process)
        shutil.rmtree(self.path, ignore_errors=True)


def run_tool(argv: List[str], timeout: float = 600.0, env: Optional[dict] = None) -> Tuple[int, str, str]:
    """Run a short-lived tool (the binary's --version, the etcd restore, openssl): (exit code, stdout, last error line).

    The rehearsal's processes are started here only: its etcd and apiserver run in the background for minutes,
    which AnsibleModule.run_command cannot do (hence this file's sanity ignore entry)."""
    try:
        done = subprocess.run(argv, capture_output=True, timeout=timeout, check=False, stdin=subprocess.DEVNULL, env=env)
    except (OSError, subprocess.TimeoutExpired) as error:
        return -1, "", f"{type(error).__name__}: {error}"
    lines = [line for line in done.stderr.decode("utf-8", "replace").splitlines() if line.strip()]
    return done.returncode, done.stdout.decode("utf-8", "replace"), lines[-1][:300] if lines else ""


def etcd_version(binary: str) -> EtcdVersion:
    """What ``<binary> --version`` reports, read once per run: the scratch etcd's flags and its restore tool depend on
    it. A ConfigurationError naming etcd_binary when it cannot be read, or is older than the scratch etcd runs."""
    code, out, error = run_tool([binary, "--version"], timeout=30)
    version = versions.parse(out) if code == 0 else None
    if version is None:
        said = f"could not be run ({error})" if code == -1 else (
            f"did not report an etcd version (`{os.path.basename(binary)} --version` exited {code} without an "
            f"`etcd Version: X.Y.Z` line{': ' + error if error else ''})")
        raise ConfigurationError(f"etcd_binary: {binary} {said}; give the path of an etcd binary, {versions.OLDEST.major}."
                                 f"{versions.OLDEST.minor} or later (best the cluster's own release)")
    if version < versions.OLDEST:
        raise ConfigurationError(f"etcd_binary: {binary} is etcd {version}; the scratch etcd needs {versions.OLDEST.major}."
                                 f"{versions.OLDEST.minor} or later: give the path of a newer one (best the cluster's own release)")
    return version


def find_restore_tool(etcd_binary: Optional[str], version: EtcdVersion,
                      which: Optional[Callable[[str], Optional[str]]] = None) -> Optional[str]:
    """The snapshot restore tool of ``version``'s release: etcdutl from 3.5, etcdctl on 3.4 (``versions.restore_tools``);
    next to ``etcd_binary`` first (its own release), then in PATH.

    ``None`` when there is none; the caller names its option in the error."""
    which = which or shutil.which
    beside = os.path.dirname(etcd_binary) if etcd_binary else ""
    candidates = [path for name in versions.restore_tools(version)
                  for path in ((os.path.join(beside, name) if beside else None), which(name))]
    return next((path for path in candidates if path and os.path.isfile(path) and os.access(path, os.X_OK)), None)


def restore_tool(etcd_binary: Optional[str], version: EtcdVersion, given: Optional[str] = None,
                 which: Optional[Callable[[str], Optional[str]]] = None) -> str:
    """``given`` (the option etcdutl_binary), else the one found; a ConfigurationError naming etcdutl_binary when there
    is none, or when it cannot restore for this etcd (etcdctl from 3.6)."""
    tool = given or find_restore_tool(etcd_binary, version, which)
    if not tool:
        name = " or ".join(versions.restore_tools(version))
        raise ConfigurationError(f"etcdutl_binary: restoring a snapshot for etcd {version} needs {name}, found neither next to "
                                 f"etcd_binary ({etcd_binary}) nor in PATH; give the path of the {name} of etcd "
                                 f"{version.major}.{version.minor}'s release")
    refusal = versions.restore_refusal(version, tool)
    if refusal:
        raise ConfigurationError(f"etcdutl_binary: {refusal}")
    return tool


# --- the scratch etcd ---------------------------------------------------------------------------------------


class ScratchEtcd:
    """An etcd member of its own on loopback, in the workspace; ``put_all`` copies keys into it byte for byte."""

    NAME = "rehearsal"

    def __init__(self, workspace: Workspace, binary: str, version: Optional[EtcdVersion] = None):
        self.workspace, self.binary = workspace, binary
        self.version = version  # what the binary reports; read at the first start when not given
        self.data_dir = workspace.file("etcd-data")
        self.client_port, self.peer_port = free_port(), free_port()
        self.process = None
        self.restored = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://127.0.0.1:{self.peer_port}"

    def restore(self, tool: str, snapshot: str) -> None:
        """Restore an ``etcdctl snapshot save`` file into the data directory (etcdutl from 3.5, etcdctl on 3.4: the same
        flags in both)."""
        argv = [tool, "snapshot", "restore", snapshot, f"--data-dir={self.data_dir}", f"--name={self.NAME}",
                f"--initial-cluster={self.NAME}={self.peer_url}", f"--initial-advertise-peer-urls={self.peer_url}"]
        code, _out, error = run_tool(argv, env=dict(os.environ, ETCDCTL_API="3"))
        if code != 0:
            raise ScratchError(f"snapshot: {snapshot} could not be restored with {tool} ({error or 'no message'}): "
                               "is it an `etcdctl snapshot save` file, whole and uncorrupted? Take a new one and rehearse again")
        self.restored = True

    def start(self, timeout: float = 60.0) -> None:
        """Start it and wait until it answers; once more on other ports when one was taken since it was picked."""
        for attempt in (1, 2):
            self.process = self.workspace.start(self._argv(), "etcd.log")
            if self._wait(timeout):
                return
            if attempt == 1 and PORT_TAKEN in self.workspace.log_text("etcd.log"):
                self.workspace.stop(self.process)
                os.replace(self.workspace.file("etcd.log"), self.workspace.file("etcd.log.port-taken"))
                self.client_port = free_port()
                if not self.restored:  # a restored member keeps the peer URL it was restored with
                    self.peer_port = free_port()
                continue
            exited = self.process.poll() is not None
            how = f"exited at start (exit {self.process.returncode})" if exited else f"did not answer within {timeout:.0f} s"
            raise ScratchError(f"the scratch etcd ({self.binary}) {how}: {self._last_log_line()}")

    def summary(self, restore_tool: Optional[str] = None) -> dict:
        """What the copy ran on, as both modules return it (``scratch_etcd``): the binary, the version it reported, the
        tool that restored the snapshot (None for a copy of a live etcd)."""
        return {"etcd_binary": self.binary, "etcd_version": str(self.version) if self.version else None,
                "restore_tool": restore_tool}

    def _argv(self) -> List[str]:
        """Its command line for the release the binary reports (these first flags are the same in 3.4 to 3.6)."""
        if self.version is None:
            self.version = etcd_version(self.binary)
        tuning = versions.scratch_flags(self.version, TXN_OPS, TXN_BYTES + (1 << 20), QUOTA_BYTES)
        return [self.binary, f"--name={self.NAME}", f"--data-dir={self.data_dir}", f"--listen-client-urls={self.url}",
                f"--advertise-client-urls={self.url}", f"--listen-peer-urls={self.peer_url}",
                f"--initial-advertise-peer-urls={self.peer_url}", f"--initial-cluster={self.NAME}={self.peer_url}",
                *versions.command_args(self.version, tuning)]

    def _wait(self, timeout: Union[float, Deadline], clock=time.monotonic, sleep=time.sleep) -> bool:
        """Whether it answered before it exited, logged that its port was taken, or the time ran out (either of the
        first two ends the wait at once; ``start`` names the log's last line)."""

        not_answering = _client().EtcdError

        def fetch() -> str:
            if self.process.poll() is not None or PORT_TAKEN in self.workspace.log_text("etcd.log"):
                return EXITED
            try:
                self._status(STATUS_TIMEOUT)
                return ANSWERED
            except not_answering:
                return STARTING

        return poll_past(fetch, STARTING, timeout, ETCD_POLL, clock, sleep) == ANSWERED

    def _status(self, timeout: float) -> dict:
        """Its status over gRPC (an EtcdError while it does not answer); a new channel each time, so that none waits out
        grpcio's reconnection backoff after the refusals of a member still starting."""
        return _client().EtcdReader(EtcdSettings(endpoints=[self.url], timeout=timeout)).status(transport="grpc")

    def put_all(self, pairs: Iterable[Tuple[bytes, bytes]], progress: Optional[Callable[[int], None]] = None) -> Tuple[int, int]:
        """Write every (key, value) in ``KV/Txn`` transactions of up to TXN_OPS puts (or TXN_BYTES); returns (keys, bytes)."""
        etcd = _client()
        # the client's channel: its constructor names grpcio and protobuf, and how to install them, when they are missing
        channel = etcd._GrpcChannel(self.url, EtcdSettings(endpoints=[self.url], timeout=WRITE_TIMEOUT))  # pylint: disable=protected-access
        messages = etcd.rpc_pb2
        txn = channel.unary(TXN_METHOD, messages.TxnRequest, messages.TxnResponse)
        put, operation = messages.PutRequest, messages.RequestOp
        batch, size, keys, total = [], 0, 0, 0
        try:
            for key, value in pairs:
                batch.append(operation(request_put=put(key=key, value=value)))
                size += len(key) + len(value)
                keys += 1
                if len(batch) >= TXN_OPS or size >= TXN_BYTES:
                    self._write(txn, messages.TxnRequest(success=batch), etcd.grpc.RpcError)
                    total += size
                    batch, size = [], 0
                    if progress:
                        progress(keys)
            if batch:
                self._write(txn, messages.TxnRequest(success=batch), etcd.grpc.RpcError)
                total += size
        finally:
            channel.close()
        return keys, total

    def _write(self, txn, request, rpc_error) -> None:
        try:
            txn(request, timeout=WRITE_TIMEOUT)
        except rpc_error as error:
            said = f"gRPC {error.code().name}: {error.details() or ''}"
            if self.process is not None and self.process.poll() is not None:
                raise ScratchError(f"the scratch etcd ({self.binary}) exited while the copy was written (exit "
                                   f"{self.process.returncode}, {said}): {self._last_log_line()}") from None
            raise ScratchError(f"the scratch etcd ({self.binary}) refused a write of the copy ({said})") from None

    def _last_log_line(self) -> str:
        lines = [line for line in self.workspace.log_text("etcd.log").splitlines() if line.strip()]
        return lines[-1][:300] if lines else "no message"
