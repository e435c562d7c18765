# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark ``storage_rehearsal`` on a real 10k-object store: wall time per phase, peak memory of every process it
starts, and the load it puts on the live etcd, as ratios against readers of the same etcd measured in the same run.

Set-up: the real control plane of tests/realcp (Debian's etcd with TLS and client certificates, one kube-apiserver
1.32 with aescbc encryption of Secrets); ``--objects`` objects POSTed through it by ``--seed-threads`` keep-alive
connections: ConfigMaps (about 500 bytes of data each) and ``--secrets`` Secrets, across ``--namespaces`` namespaces.
The apiserver writes them, so the keys, the protobuf envelope and the encryption are exactly a cluster's.

Measured, each reader in a fresh child process:
  etcdctl      ``etcdctl get --prefix /registry -w json > /dev/null`` (gRPC, one response, TLS), warm, best of 2:
               the floor for reading every key of the live etcd once
  audit        the collection's etcd audit alone (``_audit.runner.audit``, page size 500, same TLS settings and
               encryption config, so it decrypts the Secrets), best of 2 unthrottled, once at the module's default
               throttle of 10 pages/s
  rehearsal    ``_rehearse.runner.plan(params)`` then ``rehearse(plan, warn)`` with the 1.33 kube-apiserver binary on
               a copy of the live etcd (``pages_per_second`` 0, then the default 10), then on an ``etcdctl snapshot
               save`` of it (the save is timed too). ``timings`` are the module's own (copy, start, read, total:
               total includes the teardown); the child wraps a few functions of the module from the outside (no
               change to plugins/) to split each phase further ("where the time goes").
Memory: the module process's peak RSS growth during the run (``PeakRss`` of _common.py) and its absolute
peak (``ru_maxrss``); the scratch etcd's and the target apiserver's ``VmHWM``, sampled every 0.1 s from /proc by
this parent for processes whose command line names the run's own ``kubeupgrade-rehearsal-*`` workspace (the last
sample before teardown), and the largest sum of the RSS of all three at one sample, against the module's own
estimate of what it needs (``room.memory_needed``).
Live etcd load, per reader: range requests and bytes sent, from the live etcd's /metrics (counter deltas;
``grpc_server_handled_total{grpc_method="Range"}``, ``etcd_network_client_grpc_sent_bytes_total``; etcd 3.4's JSON
gateway forwards to its gRPC server, so the audit's and the rehearsal's pages count there too) and the live etcd's
CPU seconds (/proc/<pid>/stat), next to a background rate measured while nothing reads (the 1.32 apiserver keeps
renewing its leases). The rehearsal's copy phase is reported as a ratio to etcdctl's and to the audit's time.
The goal of the rehearsal: under 60 s beyond the apiserver's start (``total_seconds - start_seconds``); reported,
not asserted.

    export PATH=$PWD/.venv/bin:$PATH KUBEUPGRADE_TEST_K8S_ASSETS=/tmp/k8sbin
    python benchmarks/bench_rehearsal.py

    python benchmarks/bench_rehearsal.py --objects 5000 --bulk-configmaps 995000 --page-size 1000 \
        --pages-per-second 20 --skip-snapshot --skip-throttled-audit          # 1M keys: about 15 minutes on 2 cores

At 100k-1M keys, POSTing every object through the apiserver takes too long: ``--bulk-configmaps N`` puts N more
ConfigMaps (the same data as the POSTed ones, in the apiserver's protobuf envelope, with name, namespace, uid and
labels) straight into the live etcd, ``--bulk-batch`` puts per transaction, ``--bulk-threads`` at once, with the live
apiserver stopped meanwhile and started again after (the live etcd then runs with ``--max-txn-ops`` raised to the
batch and an 8 GiB ``--quota-backend-bytes``: etcd's 2 GiB default does not hold 1M keys with their history).
``--skip-throttled-audit`` leaves out the audit row at 10 pages/s.

The collection is imported from collections/ (scripts/setup.sh links it there) or, when that link is missing, from a
private temporary link to this checkout; no PYTHONPATH is needed. etcd, the apiservers and this client share the
machine: compare ratios within one run. JSON goes to benchmarks/results/rehearsal-<stamp>.json.
Not a test: nothing is asserted.

Results, run by run: benchmarks/README.md, section bench_rehearsal.py.
"""

import argparse
import atexit
import base64
import http.client
import json
import os
import resource
import shutil
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

from _common import ETCDCTL_TIMEOUT, HERE, REPO, PeakRss, Sampler, cmdline, cpu_seconds, on_path, status_kib

on_path("tests/simulator")
from apisim import k8s_protobuf  # noqa: E402
from apisim.harness import stop_process  # noqa: E402

MARKER = "kubeupgrade-rehearsal-"  # scratch.PREFIX: the workspace directory every started process names
SOURCE_RELEASE, TARGET_RELEASE = "1.32", "1.33"
MIB = 1 << 20
PAYLOAD = "".join(chr(97 + (i * 7) % 26) for i in range(480))  # about 500 bytes of data per ConfigMap


# --- where the collection is imported from ------------------------------------------------------------------


def collections_root():
    """collections/ when its ansible_collections/kubeupgrade/storage link points here, else a private link of our own."""
    given = os.environ.get("KUBEUPGRADE_BENCH_COLLECTIONS")
    if given:
        return given
    root = os.path.join(REPO, "collections")
    if os.path.realpath(os.path.join(root, "ansible_collections", "kubeupgrade", "storage")) == os.path.realpath(REPO):
        return root
    root = tempfile.mkdtemp(prefix="bench-rehearsal-collections-")
    os.makedirs(os.path.join(root, "ansible_collections", "kubeupgrade"))
    os.symlink(REPO, os.path.join(root, "ansible_collections", "kubeupgrade", "storage"))
    atexit.register(shutil.rmtree, root, True)
    return root


# --- seeding through the apiserver --------------------------------------------------------------------------


class Connections:
    """One keep-alive HTTPS connection per thread to the apiserver, admin token."""

    def __init__(self, endpoint, ca_file, token):
        parts = urllib.parse.urlsplit(endpoint)
        self.host, self.port = parts.hostname, parts.port
        self.context = ssl.create_default_context(cafile=ca_file)
        self.headers = {"Authorization": f"Bearer {token}", "Accept": "application/json", "Content-Type": "application/json"}
        self.local = threading.local()

    def send(self, method, path, body=None):
        for attempt in range(6):
            conn = getattr(self.local, "conn", None)
            if conn is None:
                conn = self.local.conn = http.client.HTTPSConnection(self.host, self.port, context=self.context, timeout=60)
            try:
                conn.request(method, path, body=json.dumps(body).encode() if body is not None else None, headers=self.headers)
                response = conn.getresponse()
                status, raw = response.status, response.read()
            except (OSError, http.client.HTTPException):
                conn.close()
                self.local.conn = None
                time.sleep(0.2 * (attempt + 1))
                continue
            if status == 429 or status >= 500:
                time.sleep(0.2 * (attempt + 1))
                continue
            return status, raw
        raise RuntimeError(f"{method} {path}: no answer after retries")


def seed(plane, objects, secrets, namespaces, threads):
    """``namespaces`` namespaces, ``objects - secrets`` ConfigMaps and ``secrets`` Secrets among them, POSTed concurrently."""
    conns = Connections(plane.endpoints[0], plane.ca_cert, "admin-token")
    names = [f"rehearsal-bench-{i}" for i in range(namespaces)]
    for name in names:
        status, raw = conns.send("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
        if status not in (201, 409):
            raise RuntimeError(f"namespace {name}: {status} {raw[:300]!r}")

    def create(index):
        namespace = names[index % namespaces]
        if index < secrets:
            path = f"/api/v1/namespaces/{namespace}/secrets"
            body = {"metadata": {"name": f"secret-{index:06d}"}, "type": "Opaque",
                    "data": {"token": base64.b64encode(f"{index}:{PAYLOAD[:200]}".encode()).decode()}}
        else:
            path = f"/api/v1/namespaces/{namespace}/configmaps"
            body = {"metadata": {"name": f"cm-{index:06d}", "labels": {"bench": "rehearsal"}},
                    "data": {"index": str(index), "payload": PAYLOAD}}
        status, raw = conns.send("POST", path, body)
        if status not in (201, 409):
            raise RuntimeError(f"create {path} #{index}: {status} {raw[:300]!r}")

    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(create, range(objects)))


def configmap_value(namespace, name, index):
    """A ConfigMap in kube-apiserver's protobuf envelope (runtime.Unknown): metadata (name, namespace, uid, labels) and
    the same data as seed()'s ConfigMaps, readable by any apiserver."""
    raw = k8s_protobuf.configmap(name, namespace, f"00000000-0000-4000-8000-{index:012d}",
                                 {"index": str(index), "payload": PAYLOAD}, labels={"bench": "rehearsal"})
    return k8s_protobuf.envelope("v1", "ConfigMap", raw)


def bulk_seed(plane, count, namespaces, threads, batch):
    """``count`` more ConfigMaps put straight into the live etcd in transactions of ``batch`` puts, ``threads`` at once,
    with the live apiserver stopped (it would decode every one from its watch) and started again after (its watch
    cache lists them all, as after an apiserver restart)."""
    plane.stop(0)
    names = [f"rehearsal-bench-{i}" for i in range(namespaces)]

    def chunk(start):
        pairs = []
        for index in range(start, min(start + batch, count)):
            namespace, name = names[index % namespaces], f"bulk-{index:07d}"
            pairs.append((f"/registry/configmaps/{namespace}/{name}", configmap_value(namespace, name, index)))
        for attempt in range(5):
            try:
                plane.etcd.put_many(pairs, batch=batch)
                return
            except OSError:
                time.sleep(0.5 * (attempt + 1))
        plane.etcd.put_many(pairs, batch=batch)

    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(chunk, range(0, count, batch)))
    started = time.perf_counter()
    plane.start_one(0, timeout=600)
    return time.perf_counter() - started


# --- the live etcd: metrics, CPU, status ----------------------------------------------------------------------


class LiveEtcd:
    """Read-only probes of the plane's etcd: /metrics counters, /proc CPU time, the key count and database size."""

    def __init__(self, plane):
        self.plane = plane
        self.url = plane.etcd.url
        self.pid = plane.etcd.process.pid
        self.context = None
        if plane.etcd.tls:
            self.context = ssl.create_default_context(cafile=plane.etcd.pki.ca_cert)
            self.context.load_cert_chain(plane.etcd.pki.client_cert, plane.etcd.pki.client_key)

    def _connection(self):
        parts = urllib.parse.urlsplit(self.url)
        if parts.scheme == "https":
            return http.client.HTTPSConnection(parts.hostname, parts.port, context=self.context, timeout=30)
        return http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)

    def _get(self, method, path, body=None):
        conn = self._connection()
        try:
            conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
            return conn.getresponse().read()
        finally:
            conn.close()

    def counters(self):
        """Range requests handled, bytes sent and received over gRPC (the JSON gateway included), CPU seconds."""
        text = self._get("GET", "/metrics").decode()
        found = {"ranges": 0.0, "sent_bytes": 0.0, "received_bytes": 0.0}
        for line in text.splitlines():
            if line.startswith("grpc_server_handled_total{") and 'grpc_method="Range"' in line:
                found["ranges"] += float(line.rsplit(" ", 1)[1])
            elif line.startswith("etcd_network_client_grpc_sent_bytes_total"):
                found["sent_bytes"] += float(line.rsplit(" ", 1)[1])
            elif line.startswith("etcd_network_client_grpc_received_bytes_total"):
                found["received_bytes"] += float(line.rsplit(" ", 1)[1])
        found["cpu_seconds"] = cpu_seconds(self.pid)
        found["at"] = time.monotonic()
        return found

    def status(self):
        return json.loads(self._get("POST", "/v3/maintenance/status", b"{}"))

    def keys(self, prefix="/registry/"):
        end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        body = {"key": base64.b64encode(prefix.encode()).decode(), "range_end": base64.b64encode(end.encode()).decode(),
                "count_only": True}
        return int(json.loads(self._get("POST", "/v3/kv/range", json.dumps(body).encode())).get("count", 0))


def delta(before, after):
    return {"ranges": after["ranges"] - before["ranges"], "sent_bytes": after["sent_bytes"] - before["sent_bytes"],
            "received_bytes": after["received_bytes"] - before["received_bytes"],
            "cpu_seconds": after["cpu_seconds"] - before["cpu_seconds"], "seconds": after["at"] - before["at"]}


# --- sampling the rehearsal's processes from outside ------------------------------------------------------------


class ProcessSampler(Sampler):
    """Every ``interval`` s: VmHWM, VmRSS and CPU time of the module process and of every process whose command line
    names ``marker`` (the run's workspace); keeps each one's last sample (VmHWM only grows) and the largest RSS sum."""

    def __init__(self, module_pid, marker, interval=0.1):
        self.module_pid, self.marker, self.interval = module_pid, marker, interval
        self.processes = {module_pid: {"role": "module", "first_seen": 0.0}}
        self.peak_sum_kib, self.peak_sum_at = 0, None
        self.started = time.monotonic()

    def _role(self, argv):
        name = os.path.basename(argv[0]) if argv else ""
        if name == "etcd":
            return "scratch etcd"
        if name == "kube-apiserver":
            return "apiserver"
        if name in ("etcdctl", "etcdutl"):
            return "snapshot restore"
        return name or "other"

    def sample(self):
        now = time.monotonic() - self.started
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            pid = int(entry)
            if pid not in self.processes:
                argv = cmdline(pid)
                if not any(self.marker in part for part in argv):
                    continue
                self.processes[pid] = {"role": self._role(argv), "first_seen": round(now, 2)}
        total = 0
        for pid, info in self.processes.items():
            if info.get("gone"):
                continue
            status = status_kib(pid, ("VmHWM", "VmRSS"))
            cpu = cpu_seconds(pid)
            if not status or cpu is None:
                info["gone"] = round(now, 2)
                continue
            info["last_seen"] = round(now, 2)
            info["vm_hwm_kib"] = max(info.get("vm_hwm_kib", 0), status.get("VmHWM", 0))
            info["max_rss_kib"] = max(info.get("max_rss_kib", 0), status.get("VmRSS", 0))
            info["cpu_seconds"] = cpu
            total += status.get("VmRSS", 0)
        if total > self.peak_sum_kib:
            self.peak_sum_kib, self.peak_sum_at = total, round(now, 2)

    def by_role(self):
        """role -> the largest VmHWM (MiB), summed CPU seconds and the pids, of the processes seen."""
        found = {}
        for pid, info in self.processes.items():
            entry = found.setdefault(info["role"], {"vm_hwm_mib": 0.0, "cpu_seconds": 0.0, "pids": [], "first_seen": info["first_seen"]})
            entry["vm_hwm_mib"] = max(entry["vm_hwm_mib"], info.get("vm_hwm_kib", 0) / 1024)
            entry["cpu_seconds"] += info.get("cpu_seconds") or 0.0
            entry["pids"].append(pid)
        return found


# --- children: the audit and the rehearsal, each in a fresh process -----------------------------------------------


class Hooks:
    """Wall time of a few of the rehearsal's functions, wrapped from outside (plugins/ is not changed)."""

    def __init__(self):
        self.seconds, self.calls, self.missing = {}, {}, []

    def add(self, name, seconds):
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds
        self.calls[name] = self.calls.get(name, 0) + 1

    def wrap(self, owner, attribute, name):
        original = getattr(owner, attribute, None)
        if original is None:  # renamed in the module since this was written: that step is not split out
            self.missing.append(f"{getattr(owner, '__name__', owner)}.{attribute}")
            return

        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.add(name, time.perf_counter() - started)

        setattr(owner, attribute, timed)

    def install(self):
        from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd import scratch
        from ansible_collections.kubeupgrade.storage.plugins.module_utils._http import client as client_mod
        from ansible_collections.kubeupgrade.storage.plugins.module_utils._rehearse import apiserver, reader, runner

        self.wrap(runner, "binary_version", "plan: target --version")
        self.wrap(runner, "_live_size", "live etcd status (db size)")
        self.wrap(scratch, "remove_stale", "remove stale workspaces")
        self.wrap(scratch.ScratchEtcd, "restore", "copy: snapshot restore")
        self.wrap(scratch.ScratchEtcd, "start", "copy: scratch etcd start")
        # A live copy folds its keys by resource as they go by (inside the pages row); a restored snapshot is scanned.
        self.wrap(reader, "stored_keys", "start: keys-only scan of a restored snapshot")
        self.wrap(apiserver, "service_account_key", "start: service-account key")
        self.wrap(runner, "_wait_ready", "start: apiserver until /readyz")
        self.wrap(reader, "wait_for_custom_resources", "read: discovery")
        self.wrap(reader, "read_all", "read: LIST every resource")
        self.wrap(scratch.Workspace, "close", "teardown: stop and remove")
        hooks = self

        original_put_all = scratch.ScratchEtcd.put_all

        def put_all(etcd, pairs, progress=None):
            def timed_source():
                iterator = iter(pairs)
                while True:
                    started = time.perf_counter()
                    try:
                        item = next(iterator)
                    except StopIteration:
                        hooks.add("copy: live etcd pages (wait + decode)", time.perf_counter() - started)
                        return
                    hooks.seconds["copy: live etcd pages (wait + decode)"] = (
                        hooks.seconds.get("copy: live etcd pages (wait + decode)", 0.0) + time.perf_counter() - started)
                    yield item

            started = time.perf_counter()
            try:
                return original_put_all(etcd, timed_source(), progress)
            finally:
                hooks.add("copy: put_all (pages + writes)", time.perf_counter() - started)

        scratch.ScratchEtcd.put_all = put_all
        original_request = client_mod.ApiClient.request

        def request(client, method, path, *args, **kwargs):
            name = "requests to the target: /readyz" if path == "/readyz" else "requests to the target: other"
            hooks.calls[name] = hooks.calls.get(name, 0) + 1
            return original_request(client, method, path, *args, **kwargs)

        client_mod.ApiClient.request = request

    def report(self):
        put_all = self.seconds.get("copy: put_all (pages + writes)")
        pages = self.seconds.get("copy: live etcd pages (wait + decode)")
        seconds = dict(self.seconds)
        if put_all is not None and pages is not None:
            seconds["copy: scratch etcd writes (put_all - pages)"] = put_all - pages
        return {"seconds": {k: round(v, 3) for k, v in seconds.items()}, "calls": self.calls, "missing": self.missing}


def child_audit(params):
    from ansible_collections.kubeupgrade.storage.plugins.module_utils._audit import runner

    request = runner.build_request(params)
    with PeakRss() as rss:
        started = time.perf_counter()
        result = runner.audit(request)
        seconds = time.perf_counter() - started
    return {"seconds": seconds, "keys": result["keys_scanned"], "pages": result["pages"], "rss_growth_mib": rss.growth_mib,
            "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def child_rehearse(params):
    from ansible_collections.kubeupgrade.storage.plugins.module_utils._rehearse import runner

    hooks = Hooks()
    hooks.install()
    warnings = []
    with PeakRss() as rss:
        started = time.perf_counter()
        plan = runner.plan(params)
        planned = time.perf_counter()
        result = runner.rehearse(plan, warn=warnings.append)
        done = time.perf_counter()
    result.pop("report_markdown", None)
    return {"plan_seconds": planned - started, "rehearse_seconds": done - planned, "rss_growth_mib": rss.growth_mib,
            "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "largest_child_max_rss_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
            "module_cpu_seconds": sum(resource.getrusage(resource.RUSAGE_SELF)[:2]),
            "hooks": hooks.report(), "warnings": warnings, "result": result}


def child_main(kind, params):
    output = child_audit(params) if kind == "audit" else child_rehearse(params)
    sys.stdout.write("\n" + json.dumps(output, default=str) + "\n")


def run_child(kind, params, env, marker=None):
    """The child's JSON answer, with the processes it started sampled from here when ``marker`` is given."""
    process = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child", kind, json.dumps(params)], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sampler = ProcessSampler(process.pid, marker) if marker else None
    try:
        if sampler:
            with sampler:
                stdout, stderr = process.communicate()
        else:
            stdout, stderr = process.communicate()
    finally:
        stop_process(process, timeout=60)  # interrupted: SIGTERM makes the rehearsal stop and remove what it started
    if process.returncode:
        raise RuntimeError(f"{kind} child exited {process.returncode}:\n{stderr[-3000:]}\n{stdout[-2000:]}")
    answer = json.loads(stdout.strip().splitlines()[-1])
    if sampler:
        answer["processes"] = sampler.by_role()
        answer["peak_sum_rss_mib"] = sampler.peak_sum_kib / 1024
        answer["peak_sum_at"] = sampler.peak_sum_at
    return answer


# --- the parent's measurements -------------------------------------------------------------------------------------


def measured(live, function):
    """(function's answer, seconds, live-etcd counter deltas) for one reader."""
    before = live.counters()
    started = time.perf_counter()
    answer = function()
    seconds = time.perf_counter() - started
    after = live.counters()
    return answer, seconds, delta(before, after)


def etcdctl_get(plane):
    with open(os.devnull, "wb") as devnull:
        subprocess.run(["etcdctl", ETCDCTL_TIMEOUT, "get", "--prefix", "/registry", "-w", "json"], env=plane.etcd.etcdctl_env(),
                       stdout=devnull, check=True)


def plane_flags(plane):
    """The live apiserver's --feature-gates and --runtime-config, as a rehearsal reads them from its manifest."""
    from realcp.plane import apiserver_argv

    state = plane.state()
    argv = apiserver_argv(state, 0, state["apiservers"][0]["binary"])
    flags = {}
    for item in argv:
        for name in ("feature-gates", "runtime-config"):
            if item.startswith(f"--{name}="):
                flags[name.replace("-", "_")] = item.split("=", 1)[1]
    return flags


def run_all(args, workdir, env, results):
    on_path("tests")
    from realcp.plane import ControlPlane, binary

    target = args.target_binary or binary(TARGET_RELEASE)
    etcd_binary = shutil.which("etcd")
    version = subprocess.run([etcd_binary, "--version"], capture_output=True, text=True, check=False).stdout
    results.update(source_apiserver=binary(SOURCE_RELEASE), target_apiserver=target, etcd_binary=etcd_binary,
                   etcd_version=version.split("\n")[0])
    etcd_args = []
    if args.bulk_configmaps:  # room for millions of keys (etcd's default quota is 2 GiB) and bigger transactions
        etcd_args = [f"--quota-backend-bytes={8 << 30}", f"--max-txn-ops={args.bulk_batch}"]
    plane = ControlPlane(os.path.join(workdir, "plane"), releases=[SOURCE_RELEASE], etcd_tls=True, encryption=True,
                         etcd_args=etcd_args)
    try:
        started = time.perf_counter()
        plane.start()
        results["plane_start_seconds"] = time.perf_counter() - started
        print(f"plane: etcd {plane.etcd.url} (TLS), apiserver {plane.endpoints[0]} ({SOURCE_RELEASE}) in "
              f"{results['plane_start_seconds']:.1f}s", flush=True)
        started = time.perf_counter()
        seed(plane, args.objects, args.secrets, args.namespaces, args.seed_threads)
        results["seed_seconds"] = time.perf_counter() - started
        if args.bulk_configmaps:
            started = time.perf_counter()
            restart = bulk_seed(plane, args.bulk_configmaps, args.namespaces, args.bulk_threads, args.bulk_batch)
            results["bulk_seed_seconds"] = time.perf_counter() - started
            results["bulk_restart_seconds"] = restart
            print(f"bulk: {args.bulk_configmaps} ConfigMaps put into etcd in {results['bulk_seed_seconds']:.1f}s "
                  f"(apiserver restarted in {restart:.1f}s)", flush=True)
        live = LiveEtcd(plane)
        status = live.status()
        results["live"] = {"keys": live.keys(), "db_size_bytes": int(status.get("dbSize", 0)), "revision": int(status["header"]["revision"])}
        print(f"seeded {args.objects} objects ({args.secrets} Secrets, encrypted) in {results['seed_seconds']:.1f}s: "
              f"{results['live']['keys']} keys under /registry, db {results['live']['db_size_bytes'] / MIB:.1f} MiB", flush=True)

        settings = plane.etcd_settings
        etcd_params = {"etcd_endpoints": settings["endpoints"], "etcd_ca_cert": settings.get("ca_cert"),
                       "etcd_client_cert": settings.get("client_cert"), "etcd_client_key": settings.get("client_key"),
                       "page_size": args.page_size}
        rows = results["readers"] = []

        # background: what the live etcd does while nobody but its apiserver reads it
        before = live.counters()
        time.sleep(args.idle)
        results["background"] = delta(before, live.counters())

        etcdctl_get(plane)  # warm etcd's caches once for every reader
        runs = [measured(live, lambda: etcdctl_get(plane)) for _round in range(2)]
        best = min(runs, key=lambda r: r[1])
        rows.append({"reader": "etcdctl get --prefix -w json", "seconds": best[1], "all_seconds": [round(r[1], 3) for r in runs],
                     "live": best[2]})
        print(f"etcdctl get: {best[1]:.2f}s", flush=True)

        audit_params = dict(etcd_params, encryption_config=settings.get("encryption_config"), names_limit=20)
        runs = [measured(live, lambda: run_child("audit", dict(audit_params, pages_per_second=0), env)) for _round in range(2)]
        best = min(runs, key=lambda r: r[0]["seconds"])
        rows.append({"reader": "audit scan, 0 pages/s", "seconds": best[0]["seconds"], "wall_seconds": best[1],
                     "all_seconds": [round(r[0]["seconds"], 3) for r in runs], "pages": best[0]["pages"],
                     "keys": best[0]["keys"], "rss_growth_mib": best[0]["rss_growth_mib"], "live": best[2]})
        print(f"audit (0 pages/s): {best[0]['seconds']:.2f}s, {best[0]['pages']} pages", flush=True)
        if not args.skip_throttled_audit:
            answer, wall, load = measured(live, lambda: run_child("audit", dict(audit_params, pages_per_second=10), env))
            rows.append({"reader": "audit scan, 10 pages/s", "seconds": answer["seconds"], "wall_seconds": wall,
                         "pages": answer["pages"], "keys": answer["keys"], "rss_growth_mib": answer["rss_growth_mib"], "live": load})
            print(f"audit (10 pages/s): {answer['seconds']:.2f}s", flush=True)

        rehearse_dir = os.path.join(workdir, "rehearse")
        os.makedirs(rehearse_dir)
        marker = os.path.join(rehearse_dir, MARKER)
        flags = plane_flags(plane)
        base = {"apiserver_binary": target, "target_release": TARGET_RELEASE, "apiserver_manifest": "",
                "etcd_binary": etcd_binary, "encryption_config": settings.get("encryption_config"),
                "service_cluster_ip_range": "10.0.0.0/24", "work_dir": rehearse_dir, "names_limit": 20, "fail_on": [],
                "start_timeout": 120, **flags}
        results["rehearsal_flags"] = {k: v for k, v in base.items() if k not in ("work_dir",)}
        runs = results["rehearsals"] = []
        for pps in args.pages_per_second:
            params = dict(base, **etcd_params, pages_per_second=pps)
            answer, wall, load = measured(live, lambda params=params: run_child("rehearse", params, env, marker))
            runs.append(dict(answer, name=f"live etcd, {pps:g} pages/s", pages_per_second=pps, wall_seconds=wall, live=load))
            print(f"rehearsal ({runs[-1]['name']}): {json.dumps(answer['result']['timings'])}; {answer['result']['headline']}",
                  flush=True)

        if not args.skip_snapshot:
            snapshot = os.path.join(workdir, "snapshot.db")
            _answer, seconds, load = measured(live, lambda: subprocess.run(
                ["etcdctl", "snapshot", "save", snapshot], env=plane.etcd.etcdctl_env(), capture_output=True, check=True))
            results["snapshot_save"] = {"seconds": seconds, "bytes": os.path.getsize(snapshot), "live": load}
            print(f"etcdctl snapshot save: {seconds:.2f}s, {os.path.getsize(snapshot) / MIB:.1f} MiB", flush=True)
            answer, wall, load = measured(live, lambda: run_child("rehearse", dict(base, snapshot=snapshot), env, marker))
            runs.append(dict(answer, name="snapshot", pages_per_second=None, wall_seconds=wall, live=load))
            print(f"rehearsal (snapshot): {json.dumps(answer['result']['timings'])}; {answer['result']['headline']}", flush=True)
        results["leftover_workspaces"] = sorted(os.listdir(rehearse_dir))
    finally:
        plane.stop_all()


# --- tables ----------------------------------------------------------------------------------------------------------


def fmt(value, pattern="{:.2f}"):
    return pattern.format(value) if value is not None else "-"


def print_tables(results):
    live = results["live"]
    print()
    print(f"Live store: {live['keys']} keys under /registry ({results['objects']} objects POSTed: {results['secrets']} Secrets "
          f"encrypted with aescbc, the rest ConfigMaps, {results['namespaces']} namespaces), etcd db "
          f"{live['db_size_bytes'] / MIB:.1f} MiB, {results['etcd_version']}, TLS; source apiserver "
          f"{SOURCE_RELEASE}, target {os.path.basename(os.path.dirname(results['target_apiserver']))}; {results['nproc']} CPUs")
    print()
    print("Rehearsal wall time (the module's `timings`; total includes teardown) and the goal: total - start < 60 s")
    print("| run | copy s | start s | read s | total s | total - start | goal < 60 s | pages | bytes copied MiB | keys "
          "| objects read | verdict |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | --- |")
    for run in results["rehearsals"]:
        result, timings = run["result"], run["result"]["timings"]
        beyond = timings["total_seconds"] - timings["start_seconds"]
        source = result["source"]
        read = sum(e["objects_read"] for e in result["resources"].values())
        print(f"| {run['name']} | {timings['copy_seconds']:.2f} | {timings['start_seconds']:.2f} | {timings['read_seconds']:.2f} "
              f"| {timings['total_seconds']:.2f} | {beyond:.2f} | {'met' if beyond < 60 else 'MISSED'} | {source.get('pages', '-')} "
              f"| {source.get('bytes', 0) / MIB:.1f} | {source.get('keys')} | {read} | {result['verdict']} "
              f"({', '.join(f'{k} {v}' for k, v in result['counts'].items() if v)}) |")
    print_memory(results)
    print_load(results)
    print_steps(results)


def print_memory(results):
    print()
    print("Peak memory (MiB): module process (growth during the run / absolute ru_maxrss), scratch etcd and apiserver VmHWM "
          "(sampled from /proc), largest sum of the three RSS at one sample, the module's own estimate (room.memory_needed)")
    print("| run | module growth | module max | scratch etcd | apiserver | restore tool | largest child (rusage) | sum at peak "
          "| estimate | CPU s: module / etcd / apiserver |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for run in results["rehearsals"]:
        procs = run.get("processes", {})
        hwm = {role: procs[role]["vm_hwm_mib"] if role in procs else None for role in ("scratch etcd", "apiserver", "snapshot restore")}
        cpu = {role: procs[role]["cpu_seconds"] if role in procs else None for role in ("scratch etcd", "apiserver")}
        print(f"| {run['name']} | {run['rss_growth_mib']:.1f} | {run['max_rss_mib']:.1f} | {fmt(hwm['scratch etcd'], '{:.0f}')} "
              f"| {fmt(hwm['apiserver'], '{:.0f}')} | {fmt(hwm['snapshot restore'], '{:.0f}')} "
              f"| {run['largest_child_max_rss_mib']:.0f} | {run['peak_sum_rss_mib']:.0f} "
              f"| {run['result']['room']['memory_needed'] / MIB:.0f} "
              f"| {run['module_cpu_seconds']:.1f} / {fmt(cpu['scratch etcd'], '{:.1f}')} / {fmt(cpu['apiserver'], '{:.1f}')} |")


def print_load(results):
    print()
    readers = {row["reader"]: row for row in results["readers"]}
    etcdctl = readers["etcdctl get --prefix -w json"]
    audit = readers["audit scan, 0 pages/s"]
    bg = results["background"]
    rate = bg["cpu_seconds"] / bg["seconds"] if bg["seconds"] else 0.0
    print(f"Load on the live etcd (deltas of its /metrics counters and CPU time; background while idle: "
          f"{bg['ranges'] / bg['seconds']:.2f} ranges/s, {bg['sent_bytes'] / bg['seconds'] / 1024:.1f} KiB/s sent, "
          f"{rate:.3f} CPU s/s). Ratios: the copy phase's seconds over the baseline's (same run, same etcd)")
    print("| reader | seconds | ranges | MiB sent | live etcd CPU s | × etcdctl time | × audit time | notes |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for row in results["readers"]:
        load = row["live"]
        notes = []
        if row.get("pages"):
            notes.append(f"{row['pages']} pages, {row['keys']} keys")
        if row.get("all_seconds"):
            notes.append(f"runs {row['all_seconds']} s")
        print(f"| {row['reader']} | {row['seconds']:.2f} | {load['ranges']:.0f} | {load['sent_bytes'] / MIB:.1f} "
              f"| {load['cpu_seconds']:.2f} | {row['seconds'] / etcdctl['seconds']:.2f} | {row['seconds'] / audit['seconds']:.2f} "
              f"| {'; '.join(notes)} |")
    for run in results["rehearsals"]:
        load, copy = run["live"], run["result"]["timings"]["copy_seconds"]
        scan = run["hooks"]["seconds"].get("copy: live etcd pages (wait + decode)")
        notes = [f"{run['result']['source'].get('pages', '-')} pages (result)"]
        if scan is not None:
            notes.append(f"of the copy, {scan:.2f} s waiting for pages ({scan / audit['seconds']:.2f} × audit)")
        if run["pages_per_second"] is None:
            notes = ["no live read: the snapshot was restored"]
        print(f"| rehearsal copy, {run['name']} | {copy:.2f} | {load['ranges']:.0f} | {load['sent_bytes'] / MIB:.1f} "
              f"| {load['cpu_seconds']:.2f} | {copy / etcdctl['seconds']:.2f} | {copy / audit['seconds']:.2f} | {'; '.join(notes)} |")
    snap = results.get("snapshot_save")
    if snap:
        load = snap["live"]
        print(f"| etcdctl snapshot save | {snap['seconds']:.2f} | {load['ranges']:.0f} | {load['sent_bytes'] / MIB:.1f} "
              f"| {load['cpu_seconds']:.2f} | {snap['seconds'] / etcdctl['seconds']:.2f} | {snap['seconds'] / audit['seconds']:.2f} "
              f"| file {snap['bytes'] / MIB:.1f} MiB |")
    print("(live counters of the rehearsal rows cover the whole rehearsal; the target only reads its scratch copy)")


def print_steps(results):
    print()
    print("Where the time goes (seconds, wrapped from outside the module; copy = scratch etcd start + pages + writes)")
    names = []
    for run in results["rehearsals"]:
        names += [name for name in run["hooks"]["seconds"] if name not in names]
    names.sort(key=lambda n: ("plan", "live", "remove", "copy", "start", "read", "teardown").index(n.split(":")[0].split()[0])
               if n.split(":")[0].split()[0] in ("plan", "live", "remove", "copy", "start", "read", "teardown") else 9)
    print("| step | " + " | ".join(run["name"] for run in results["rehearsals"]) + " |")
    print("| --- |" + " ---: |" * len(results["rehearsals"]))
    for name in names:
        print(f"| {name} | " + " | ".join(fmt(run["hooks"]["seconds"].get(name)) for run in results["rehearsals"]) + " |")
    for name in ("requests to the target: /readyz", "requests to the target: other"):
        print(f"| {name} (count) | " + " | ".join(str(run["hooks"]["calls"].get(name, "-")) for run in results["rehearsals"]) + " |")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--objects", type=int, default=10000, help="objects POSTed through the live apiserver")
    parser.add_argument("--secrets", type=int, default=500, help="how many of them are Secrets (encrypted at rest)")
    parser.add_argument("--namespaces", type=int, default=10)
    parser.add_argument("--seed-threads", type=int, default=8)
    parser.add_argument("--page-size", type=int, default=500)
    parser.add_argument("--pages-per-second", type=float, nargs="+", default=[0, 10],
                        help="one live rehearsal per value (the module's default is 10)")
    parser.add_argument("--bulk-configmaps", type=int, default=0,
                        help="this many more ConfigMaps put straight into the live etcd (for 100k-1M keys)")
    parser.add_argument("--bulk-threads", type=int, default=4)
    parser.add_argument("--bulk-batch", type=int, default=1000, help="puts per etcd transaction of the bulk seed")
    parser.add_argument("--skip-throttled-audit", action="store_true", help="no audit row at 10 pages/s")
    parser.add_argument("--skip-snapshot", action="store_true", help="no etcdctl snapshot save and snapshot rehearsal")
    parser.add_argument("--idle", type=float, default=5.0, help="seconds of idle background measured on the live etcd")
    parser.add_argument("--target-binary", help=f"default: the newest v{TARGET_RELEASE}.* in $KUBEUPGRADE_TEST_K8S_ASSETS")
    parser.add_argument("--no-save", action="store_true", help="print only; no JSON in benchmarks/results (trial runs)")
    parser.add_argument("--child", nargs=2, metavar=("KIND", "PARAMS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    root = collections_root()
    sys.path.insert(0, root)
    if args.child:
        child_main(args.child[0], json.loads(args.child[1]))
        return
    env = dict(os.environ, KUBEUPGRADE_BENCH_COLLECTIONS=root,
               PATH=os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")]))
    os.environ["PATH"] = env["PATH"]  # etcdctl and etcd from PATH, as for the other real-binary benchmarks
    stamp = time.strftime("%Y%m%d-%H%M%S")
    results = {"stamp": stamp, "objects": args.objects, "secrets": args.secrets, "namespaces": args.namespaces,
               "page_size": args.page_size, "nproc": os.cpu_count(), "loadavg_before": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="bench-rehearsal-") as workdir:
        run_all(args, workdir, env, results)
    results["loadavg_after"] = os.getloadavg()
    print_tables(results)
    if not args.no_save:
        results_dir = os.path.join(HERE, "results")
        os.makedirs(results_dir, exist_ok=True)
        path = os.path.join(results_dir, f"rehearsal-{stamp}.json")
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=2, default=str)
        print(f"\nload average before {results['loadavg_before']}, after {results['loadavg_after']}; JSON: {path}")


if __name__ == "__main__":
    main()
