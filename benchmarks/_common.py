# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the benchmarks share: a collection module run in-process (its real ``main()``) or a benchmark's own child
process (``<script> --child ...``, its answer the last JSON line it prints), Ansible's environment for the collection
of this checkout, and the memory and CPU readings from /proc with the thread that samples them.

Imported as ``_common`` by the scripts of this directory (``python benchmarks/bench_x.py`` puts it on ``sys.path``),
first: ``on_path`` then puts what else the script imports (the collection, the tests' helpers) on ``sys.path``.
Not a benchmark: it measures nothing by itself.
"""

import contextlib
import io
import json
import os
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
AUDIT_VALUES = "tests/unit/plugins/module_utils/audit"  # audit_values: etcd values as a kube-apiserver writes them
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024


# --- what a benchmark imports ------------------------------------------------------------------------------------


def on_path(*parts):
    """Put these directories of the repository (``"collections"``, ``"tests/simulator"``...) first on ``sys.path``, the
    first named first: the collection of this checkout and the tests' helpers that a benchmark imports."""
    sys.path[:0] = [os.path.join(REPO, *part.split("/")) for part in parts]


# --- running a module, or a child of a benchmark ----------------------------------------------------------------


def run_module(module, params):
    """One module's real ``main()`` in-process, as Ansible calls it (``patch_module_args``); its JSON result."""
    from ansible.module_utils.testing import patch_module_args

    out = io.StringIO()
    with patch_module_args(params), contextlib.redirect_stdout(out):
        try:
            module.main()
        except SystemExit:
            pass
    return last_json(out.getvalue())


def last_json(text):
    """The last line of ``text`` (a module's or a child's output), parsed."""
    return json.loads(text.strip().splitlines()[-1])


def run_child(script, argv, env=None, what=None, timeout=None):
    """``python script *argv`` (a benchmark's ``--child`` mode) to its end; the last JSON line it printed. A nonzero exit
    raises, with the end of its stderr and stdout."""
    out = subprocess.run([sys.executable, os.path.abspath(script), *argv], env=env, capture_output=True, text=True,
                         check=False, timeout=timeout)
    if out.returncode:
        raise RuntimeError(f"{what or os.path.basename(script)} failed: {out.stderr[-3000:]}{out.stdout[-3000:]}")
    return last_json(out.stdout)


def ansible_env():
    """ansible-playbook's environment: the collection of this checkout, this interpreter for the modules, no colour;
    bytecode may be written, as on an operator's host (the modules keep their compiled code: module_utils/_bytecode.py)."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    return dict(env, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, "collections"), ANSIBLE_NOCOLOR="1",
                ANSIBLE_FORCE_COLOR="0", ANSIBLE_RETRY_FILES_ENABLED="0", ANSIBLE_LOCALHOST_WARNING="0",
                ANSIBLE_PYTHON_INTERPRETER=sys.executable,
                PATH=os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")]))


# etcdctl gives up on any command after 5 s (--command-timeout): one ``get --prefix`` of 1M keys takes longer, so the
# benchmarks' reads of a whole store give it an hour.
ETCDCTL_TIMEOUT = "--command-timeout=3600s"


# --- /proc readings -------------------------------------------------------------------------------------------


def status_kib(pid="self", fields=("VmRSS",)):
    """{field: KiB} of ``/proc/<pid>/status`` (VmRSS, VmHWM, ...); None when the process is gone."""
    found = {}
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                name = line.split(":", 1)[0]
                if name in fields:
                    found[name] = int(line.split()[1])
    except OSError:
        return None
    return found


def rss_kib(pid="self"):
    """Resident set size in KiB (``/proc/<pid>/statm``, VmRSS; 0 when the process is gone)."""
    try:
        with open(f"/proc/{pid}/statm") as handle:
            return int(handle.read().split()[1]) * PAGE_KIB
    except (OSError, IndexError, ValueError):
        return 0


def peak_kib(pid="self"):
    """VmHWM in KiB: the process's peak RSS since its exec (raises OSError or IndexError when it is gone)."""
    with open(f"/proc/{pid}/status") as status:
        return int([line.split()[1] for line in status if line.startswith("VmHWM:")][0])


def cpu_seconds(pid):
    """User + system CPU seconds of a process (None when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    except (OSError, IndexError, ValueError, TypeError):
        return None


def cmdline(pid):
    """A process's argv ([] when it is gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return [part.decode("utf-8", "replace") for part in handle.read().split(b"\x00") if part]
    except OSError:
        return []


def children_map():
    """{ppid: [pid, ...]} of every process."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                ppid = int(handle.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    return children


# --- the sampling thread ----------------------------------------------------------------------------------------


class Sampler:
    """A daemon thread that calls ``sample()`` at once and then every ``interval`` seconds, from ``with`` to its end."""

    interval = 0.2

    def __enter__(self):
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self):
        while True:
            self.sample()
            if self._stop.wait(self.interval):
                return

    def sample(self):
        raise NotImplementedError

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


class PeakRss(Sampler):
    """This process's RSS every 5 ms; ``growth_mib`` is its peak over the value at the start."""

    interval = 0.005

    def __enter__(self):
        self.start = rss_kib()
        self.peak = self.start
        return super().__enter__()

    def sample(self):
        self.peak = max(self.peak, rss_kib())

    def __exit__(self, *exc):
        super().__exit__(*exc)
        self.sample()

    @property
    def growth_mib(self):
        return (self.peak - self.start) / 1024.0


class TreeRss(Sampler):
    """The sum of VmRSS over the process trees of ``roots()`` (a callable: pids may come later) every 0.2 s;
    ``peak_mib`` is the largest sum (None before a sample found a root)."""

    def __init__(self, roots):
        self.roots, self.peak_kib, self.samples = roots, 0, 0

    def sample(self):
        roots = [pid for pid in self.roots() if pid]
        if not roots:
            return
        children = children_map()
        seen, todo, total = set(), list(roots), 0
        while todo:
            pid = todo.pop()
            if pid in seen:
                continue
            seen.add(pid)
            total += rss_kib(pid)
            todo += children.get(pid, [])
        self.peak_kib = max(self.peak_kib, total)
        self.samples += 1

    @property
    def peak_mib(self):
        return self.peak_kib / 1024.0 if self.samples else None


def wait_for(condition, what, timeout=120.0):
    """Until ``condition()`` is true, asked every 0.3 s; RuntimeError naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.3)


def run_parallel(count, work, threads):
    """``work(i)`` for i in range(count) on ``threads`` threads (seeding a store through keep-alive connections)."""
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(work, range(count)))
