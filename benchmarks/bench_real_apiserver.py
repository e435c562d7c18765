# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark the client-side migrator on a REAL kube-apiserver 1.32 (tests/realcp), as ratios against a bare
keep-alive loop measured in the same run, against the same apiserver and the same objects.

Part 1: one 1.32 apiserver (plus etcd), ``--objects`` ConfigMaps (small data) in namespace ``bench``.
Each measurement runs in a fresh child process (peak RSS growth and client CPU are its own), as ``bench_migration.py``
does; the methods of a table take turns, ``--repeat`` rounds, and the median is shown:
  bare      stdlib ``http.client`` keep-alive HTTPS (one connection per writer thread): LIST limit=500 + continue,
            PUT of every object back, ``concurrency`` writers
  module    ``ClientMigrator`` in-process with its default write (``put``: whole objects listed in chunks with the
            next chunk listed while this one is written, each PUT back as read), as the module's client backend runs
            it, for the ``bench`` namespace; ``module-apply`` the same with ``write: apply`` (metadata-only LIST,
            identity-only server-side apply)
  ansible   ``ansible-playbook`` of a one-task playbook: ``kubeupgrade.storage.storage_migration`` with
            ``resources: [configmaps]``, ``backend: client``, ``select: resources`` (every namespace, so a few more
            objects), ``update_records: false`` (so each run does the same work); timed from process start to exit.
            ``ansible-apply`` the same with ``write: apply``.
            ``ansible-noop`` is the same command with one ``debug`` task: Ansible's own fixed cost.
            ``ansible-check`` is the migration task in check mode (it observes, selects and exits before the
            Lease): the fixed cost of a module task of this collection (Ansible, the module's packaging and start,
            its observation).
  rewrite   the three possible no-op rewrites per object at concurrency 1, bare loop as above:
            ``put`` (full object), ``merge`` (merge patch carrying only ``metadata.resourceVersion``, a precondition),
            ``apply`` (server-side apply with the migrator's minimal body: identity, uid, resourceVersion);
            and, for reference, ``put-changed``: a full PUT that changes an annotation, so every object reaches etcd.
``etcd revs`` is how far the etcd revision moved during a measurement (the list resourceVersion before and after):
the number of writes that reached etcd (the migrator's Lease adds a few). The objects are already in the current
storage version, so the apiserver finds each no-op rewrite unchanged and skips the etcd write; a migration of
objects stored in an older version writes each one (``put-changed`` shows what a write to etcd adds).
Part 2: a fresh plane of two 1.32 apiservers: ``ansible-playbook playbooks/migrate.yml`` with an inventory as
tests/integration/real_binaries.py ``write_inventory`` builds it and ``kubeupgrade_target_release=1.33``: wall time
and the resources its summary table lists (includes the play's agreement wait, 2 polls 5 s apart by default). Then
``storage_version_check`` (target_release 1.33, ``fail_on: []``) once, in-process through its real ``main()``:
wall time and requests (counted by wrapping the collection's transports).

Needs the kube-apiserver binaries: ``KUBEUPGRADE_TEST_K8S_ASSETS`` (a directory of ``v<version>/kube-apiserver``),
and etcd on PATH (as the real-binary tests). Run from the repository root:

    export PATH=$PWD/.venv/bin:$PATH KUBEUPGRADE_TEST_K8S_ASSETS=/tmp/k8sbin ANSIBLE_COLLECTIONS_PATH=$PWD/collections
    python benchmarks/bench_real_apiserver.py --objects 5000 --concurrency 1 8

The apiserver, etcd and the client share the machine: on a small machine the numbers are the plane's as much as
the client's; compare ratios within one run. JSON goes to benchmarks/results/. Not a test: nothing is asserted.

Results, run by run: benchmarks/README.md, section bench_real_apiserver.py.
"""

import argparse
import http.client
import json
import os
import re
import resource
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import bench_migration  # the migrator run as in the simulator benchmark
from _common import HERE, REPO, PeakRss, ansible_env, on_path, run_child, run_module

on_path("collections")

NAMESPACE = "bench"
LIST_PATH = f"/api/v1/namespaces/{NAMESPACE}/configmaps"
SEED_THREADS = 4
FIELD_MANAGER = "kubeupgrade-bench"


# --- the bare loop: stdlib http.client, keep-alive, one connection per thread --------------------------------


class Connections:
    """One keep-alive HTTPS connection per thread to one apiserver, bearer token."""

    def __init__(self, state):
        parts = urllib.parse.urlsplit(state["endpoint"])
        self.host, self.port = parts.hostname, parts.port
        self.context = ssl.create_default_context(cafile=state["ca_file"])
        self.headers = {"Authorization": f"Bearer {state['token']}", "Accept": "application/json"}
        self.local = threading.local()

    def send(self, method, path, body=None, content_type="application/json"):
        headers = dict(self.headers)
        if body is not None:
            headers["Content-Type"] = content_type
        reused = getattr(self.local, "conn", None) is not None
        try:
            return self._send(method, path, body, headers)
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
            if not reused:
                raise
            # the apiserver closed a connection left idle while a long measurement ran: once more on a fresh one, as
            # a pooling client (urllib3) does
            self.local.conn.close()
            self.local.conn = None
            return self._send(method, path, body, headers)

    def _send(self, method, path, body, headers):
        conn = getattr(self.local, "conn", None)
        if conn is None:
            conn = self.local.conn = http.client.HTTPSConnection(self.host, self.port, context=self.context, timeout=60)
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()


def _rewrite_request(method, item):
    """(HTTP method, path, body, content type) of one no-op rewrite of ``item`` (a full object from a LIST)."""
    meta = item["metadata"]
    path = f"/api/v1/namespaces/{meta['namespace']}/configmaps/{meta['name']}"
    if method == "put":
        item["apiVersion"], item["kind"] = "v1", "ConfigMap"
        return "PUT", path, json.dumps(item, separators=(",", ":")).encode(), "application/json"
    if method == "put-changed":
        item["apiVersion"], item["kind"] = "v1", "ConfigMap"
        item["metadata"].setdefault("annotations", {})["kubeupgrade.bench/touched"] = str(time.time_ns())
        return "PUT", path, json.dumps(item, separators=(",", ":")).encode(), "application/json"
    if method == "merge":
        body = {"metadata": {"resourceVersion": meta["resourceVersion"]}}
        return "PATCH", path, json.dumps(body).encode(), "application/merge-patch+json"
    body = {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"],
                         "resourceVersion": meta["resourceVersion"]}}
    return ("PATCH", f"{path}?fieldManager={FIELD_MANAGER}", json.dumps(body, separators=(",", ":")).encode(),
            "application/apply-patch+yaml")


def bare_loop(state, concurrency, method="put"):
    """The baseline: what any client must at least do (LIST chunks, write each object back), nothing more."""
    conns = Connections(state)
    done = 0
    token = None

    def write(item):
        verb, path, body, content_type = _rewrite_request(method, item)
        return conns.send(verb, path, body, content_type)[0]

    with ThreadPoolExecutor(max_workers=concurrency) as writers:
        while True:
            query = {"limit": 500, **({"continue": token} if token else {})}
            status, raw = conns.send("GET", f"{LIST_PATH}?{urllib.parse.urlencode(query)}")
            if status != 200:
                raise RuntimeError(f"LIST: {status} {raw[:300]!r}")
            page = json.loads(raw)
            items = page.get("items") or []
            statuses = [write(i) for i in items] if concurrency == 1 else list(writers.map(write, items))
            bad = [s for s in statuses if s >= 300 and s != 409]
            if bad:
                raise RuntimeError(f"{method}: unexpected statuses {sorted(set(bad))}")
            done += len(statuses)
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                break
    return done


# --- the collection's migrator, in-process ------------------------------------------------------------------


def module_migrator(state, concurrency, write=None):
    """The client backend's ClientMigrator for the bench namespace, as the simulator benchmark runs it."""
    return bench_migration.migrator(state, concurrency, write, list_path=LIST_PATH)


# --- ansible-playbook ---------------------------------------------------------------------------------------

PROGRESS_LINE = re.compile(r"^storage_migration: (\S+): (\S+) via (\S+), (\d+) objects in ([\d.]+)s")
MIGRATED_ROW = re.compile(r"^\s*(\S+)\s+(succeeded|failed|started|stopped|\S+)\s+(client|intree|sigs)\s+(\S+)\s+(\d+)\s+[\d.]+\s*$")


def summary_rows(stdout):
    """(resource, status, objects) of every row of the migration summary tables an ansible-playbook run printed."""
    rows = []
    for line in stdout.splitlines():
        text = line.strip().rstrip(",").strip('"')
        match = MIGRATED_ROW.match(text)
        if match and match.group(1) != "RESOURCE":
            objects = match.group(4)
            rows.append((match.group(1), match.group(2), int(objects) if objects.isdigit() else 0))
    return rows


def run_playbook(argv, log_path):
    """``ansible-playbook argv`` from process start to exit: (seconds, returncode, stdout)."""
    started = time.perf_counter()
    out = subprocess.run(["ansible-playbook", *argv], env=ansible_env(), cwd=REPO, capture_output=True, text=True,
                         check=False)
    seconds = time.perf_counter() - started
    with open(log_path, "w", encoding="utf-8") as handle:
        handle.write(out.stdout + "\n--- stderr ---\n" + out.stderr)
    return seconds, out.returncode, out.stdout


def migration_playbook(path, state, concurrency, workdir, variant="ansible"):
    if variant == "ansible-noop":
        task = "    - ansible.builtin.debug:\n        msg: nothing\n"
    else:
        task = ("    - kubeupgrade.storage.storage_migration:\n"
                "        resources: [configmaps]\n        backend: client\n"
                f"        concurrency: {concurrency}\n        select: resources\n"
                f"        endpoints: [{json.dumps(state['endpoint'])}]\n"
                f"        kubeconfig: {json.dumps(state['kubeconfig'])}\n"
                "        update_records: false\n"
                f"        checkpoint_dir: {json.dumps(os.path.join(workdir, 'checkpoints'))}\n")
        if variant == "ansible-apply":
            task += "        write: apply\n"
        if variant == "ansible-check":
            task += "      check_mode: true\n"
    Path(path).write_text("- hosts: localhost\n  gather_facts: false\n  tasks:\n" + task, encoding="utf-8")
    return path


def ansible_child(state, concurrency, variant):
    """In the child: one timed ansible-playbook run; the peak RSS of its largest process (RUSAGE_CHILDREN)."""
    with tempfile.TemporaryDirectory() as workdir:
        playbook = migration_playbook(os.path.join(workdir, "bench.yml"), state, concurrency, workdir, variant)
        seconds, returncode, stdout = run_playbook(["-i", "localhost,", "-c", "local", playbook],
                                                   os.path.join(state["logdir"], f"{variant}-c{concurrency}.log"))
    if returncode:
        raise RuntimeError(f"ansible-playbook exited {returncode}:\n{stdout[-3000:]}")
    lines = [m for m in map(PROGRESS_LINE.match, stdout.splitlines()) if m]
    return {"objects": sum(int(m.group(4)) for m in lines), "seconds": seconds, "rss_mib": None,
            "module_seconds": sum(float(m.group(5)) for m in lines),
            "max_process_rss_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0}


# --- pre-flight, in-process, requests counted ---------------------------------------------------------------


def preflight_child(state):
    """storage_version_check's real ``main()`` in-process (target 1.33), the collection's transports wrapped."""
    from ansible_collections.kubeupgrade.storage.plugins.module_utils._http import transport
    from ansible_collections.kubeupgrade.storage.plugins.modules import storage_version_check

    counts = {}
    lock = threading.Lock()

    def counted(original):
        def send(self, method, endpoint, *rest):
            with lock:
                counts[endpoint] = counts.get(endpoint, 0) + 1
            return original(self, method, endpoint, *rest)
        return send

    for name in ("DirectTransport", "ProxyTransport"):
        cls = getattr(transport, name)
        cls.send = counted(cls.send)
    params = {"kubeconfig": state["kubeconfig"], "endpoints": state["endpoints"], "target_release": "1.33",
              "fail_on": []}
    started = time.perf_counter()
    result = run_module(storage_version_check, params)
    seconds = time.perf_counter() - started
    verdicts = {}
    for item in result.get("resources") or []:
        verdict = item.get("verdict") if isinstance(item, dict) else None
        verdicts[verdict] = verdicts.get(verdict, 0) + 1
    return {"seconds": seconds, "requests": counts, "failed": bool(result.get("failed")),
            "msg": result.get("msg") if result.get("failed") else None, "headline": result.get("headline"),
            "verdicts": verdicts}


# --- child entry and the parent's measurements --------------------------------------------------------------


def child(args):
    state = json.loads(args.child)
    concurrency = args.concurrency[0]
    if args.method == "preflight":
        print(json.dumps(preflight_child(state)))
        return
    if args.method.startswith("ansible"):
        print(json.dumps(ansible_child(state, concurrency, args.method)))
        return
    if args.method.startswith("module"):
        from ansible_collections.kubeupgrade.storage.plugins.module_utils._rewrite import migrator as _unused  # noqa: F401
    with PeakRss() as rss:
        cpu = resource.getrusage(resource.RUSAGE_SELF)
        started = time.perf_counter()
        if args.method.startswith("module"):
            count = module_migrator(state, concurrency, "apply" if args.method == "module-apply" else None)
        else:
            count = bare_loop(state, concurrency, "put" if args.method == "bare" else args.method)
        elapsed = time.perf_counter() - started
        used = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"objects": count, "seconds": elapsed, "rss_mib": rss.growth_mib,
                      "client_cpu_seconds": used.ru_utime - cpu.ru_utime + used.ru_stime - cpu.ru_stime}))


def measure(state, method, concurrency=1):
    return run_child(__file__, ["--child", json.dumps(state), "--method", method, "--concurrency", str(concurrency)],
                     ansible_env(), f"{method} at concurrency {concurrency}")


def etcd_revision(conns):
    status, raw = conns.send("GET", f"{LIST_PATH}?limit=1")
    if status != 200:
        raise RuntimeError(f"LIST: {status} {raw[:300]!r}")
    return int(json.loads(raw)["metadata"]["resourceVersion"])


def seed(state, count):
    """The namespace and ``count`` small ConfigMaps, POSTed by a few threads over keep-alive connections."""
    conns = Connections(state)
    status, raw = conns.send("POST", "/api/v1/namespaces", json.dumps({"metadata": {"name": NAMESPACE}}).encode())
    if status not in (201, 409):
        raise RuntimeError(f"namespace: {status} {raw[:300]!r}")

    def create(index):
        body = {"metadata": {"name": f"cm-{index:06d}", "labels": {"bench": "yes"}},
                "data": {"index": str(index), "value": f"small value {index}"}}
        answer = (0, b"")
        for _attempt in range(5):
            answer = conns.send("POST", LIST_PATH, json.dumps(body).encode())
            if answer[0] in (201, 409):
                return
            time.sleep(0.5)
        raise RuntimeError(f"create cm-{index:06d}: {answer[0]} {answer[1][:300]!r}")

    with ThreadPoolExecutor(max_workers=SEED_THREADS) as pool:
        list(pool.map(create, range(count)))


def interleaved(state, conns, methods, concurrency, repeat):
    """``repeat`` rounds, each measuring every method once in a fresh child (the methods take turns, so that a change
    in the machine's load during the run hits them alike); per method the median by seconds, with the etcd revisions
    it moved and every run's seconds."""
    runs = {method: [] for method in methods}
    for _round in range(repeat):
        for method in methods:
            before = etcd_revision(conns)
            result = measure(state, method, concurrency)
            result["etcd_revisions"] = etcd_revision(conns) - before
            runs[method].append(result)
    chosen = {}
    for method, results in runs.items():
        ordered = sorted(results, key=lambda r: r["seconds"])
        chosen[method] = dict(ordered[len(ordered) // 2])
        if repeat > 1:
            chosen[method]["all_seconds"] = [round(r["seconds"], 3) for r in results]
    return chosen


def start_plane(plane_cls, workdir, releases, attempts=3):
    """A started plane; a fresh one again when an apiserver exits at start (two 1.32 apiservers starting at once on
    an empty etcd can race on the service IP allocator: "another caller has already initialized the resource")."""
    for attempt in range(1, attempts + 1):
        plane = plane_cls(f"{workdir}-{attempt}", releases=releases)
        try:
            return plane.start()  # start() stops everything it started when it fails
        except RuntimeError as error:
            if attempt == attempts:
                raise
            print(f"plane start failed ({str(error).splitlines()[0][:160]}...), starting a fresh one", flush=True)
    raise AssertionError("unreachable")


def part_one(args, workdir, plane_cls, results):
    started = time.perf_counter()
    plane = start_plane(plane_cls, os.path.join(workdir, "plane1"), ["1.32"])
    try:
        results["plane1_start_seconds"] = time.perf_counter() - started
        state = {"endpoint": plane.endpoints[0], "token": "admin-token", "ca_file": plane.ca_cert,
                 "kubeconfig": plane.kubeconfig, "logdir": results["logdir"]}
        started = time.perf_counter()
        seed(state, args.objects)
        results["seed_seconds"] = time.perf_counter() - started
        print(f"seeded {args.objects} configmaps in {results['seed_seconds']:.1f}s", flush=True)
        conns = Connections(state)
        rows = results["rows"]
        for concurrency in args.concurrency:
            methods = (["bare"] + ([] if args.skip_module else ["module", "module-apply"])
                       + ([] if args.skip_ansible else ["ansible", "ansible-apply"]))
            if args.methods:  # the bare loop stays: every ratio is to it
                methods = ["bare"] + [method for method in methods[1:] if method in args.methods]
            for method, result in interleaved(state, conns, methods, concurrency, args.repeat).items():
                rows.append(dict(result, part="migrate", method=method, concurrency=concurrency, baseline="bare"))
                print(json.dumps(rows[-1]), flush=True)
        if not args.skip_ansible:
            for method, result in interleaved(state, conns, ["ansible-noop", "ansible-check"], 1, args.repeat).items():
                rows.append(dict(result, part="migrate", method=method, concurrency=1, baseline="bare"))
                print(json.dumps(rows[-1]), flush=True)
        if not args.skip_rewrites:
            for method, result in interleaved(state, conns, ["put", "merge", "apply", "put-changed"], 1, args.repeat).items():
                rows.append(dict(result, part="rewrite", method=method, concurrency=1, baseline="put"))
                print(json.dumps(rows[-1]), flush=True)
    finally:
        plane.stop_all()


def part_two(args, workdir, plane_cls, results):
    on_path("tests/integration")
    import real_binaries

    plane = start_plane(plane_cls, os.path.join(workdir, "plane2"), ["1.32", "1.32"])
    try:
        tmp = Path(workdir) / "plane2-run"
        tmp.mkdir()
        if not args.skip_first_migration:
            inventory = real_binaries.write_inventory(plane, tmp)
            seconds, returncode, stdout = run_playbook(
                ["-i", str(inventory), str(Path(REPO) / "playbooks" / "migrate.yml"),
                 "-e", "kubeupgrade_target_release=1.33"], os.path.join(results["logdir"], "migrate-yml.log"))
            rows = summary_rows(stdout)
            results["first_migration"] = {
                "seconds": seconds, "returncode": returncode, "resources_listed": len(rows),
                "resources_succeeded": sum(1 for r in rows if r[1] == "succeeded"),
                "objects": sum(r[2] for r in rows), "rows": rows,
                "play_recap": [line for line in stdout.splitlines() if ": ok=" in line]}
            print(json.dumps(results["first_migration"]), flush=True)
        if not args.skip_preflight:
            state = {"kubeconfig": plane.kubeconfig, "endpoints": plane.endpoints}
            results["preflight"] = measure(state, "preflight")
            print(json.dumps(results["preflight"]), flush=True)
    finally:
        plane.stop_all()


def fmt(value, pattern):
    return pattern.format(value) if value is not None else "-"


def print_tables(results):
    rows = results["rows"]
    fixed = next((row["seconds"] for row in rows if row["method"] == "ansible-check"), None)
    base = {}
    for row in rows:
        if row["method"] in ("bare", "put"):
            base[(row["method"], row["concurrency"])] = row
    if rows:
        print()
        print(f"Real kube-apiserver {results['apiserver_version']}, {results['objects']} ConfigMaps in one namespace; "
              f"ratios against `bare` (same concurrency), rewrites against `put`")
        print("| part | method | concurrency | objects | seconds | objects/s | × baseline | peak RSS growth MiB "
              "| × baseline | etcd revs | notes |")
        print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
        for row in rows:
            ref = base.get((row["baseline"], row["concurrency"])) or base.get((row["baseline"], 1))
            rate = row["objects"] / row["seconds"] if row["seconds"] else 0.0
            ref_rate = ref["objects"] / ref["seconds"] if ref and ref["seconds"] else None
            rss = row.get("rss_mib")
            rss_ratio = rss / ref["rss_mib"] if rss is not None and ref and ref.get("rss_mib") else None
            ratio = rate / ref_rate if ref_rate and row["method"] not in ("ansible-noop", "ansible-check") else None
            notes = []
            if row.get("module_seconds") is not None and row["method"] in ("ansible", "ansible-apply"):
                notes.append(f"module's own line: {row['module_seconds']:.1f} s")
            if row["method"] in ("ansible", "ansible-apply") and fixed and ref_rate and row["seconds"] > fixed:
                notes.append(f"{row['objects'] / (row['seconds'] - fixed) / ref_rate:.2f}× without the fixed "
                             f"{fixed:.2f} s of ansible-check")
            if row.get("client_cpu_seconds") is not None:
                notes.append(f"client CPU {row['client_cpu_seconds']:.2f} s")
            if row.get("max_process_rss_mib"):
                notes.append(f"largest process {row['max_process_rss_mib']:.0f} MiB RSS")
            if row.get("all_seconds"):
                notes.append(f"runs {row['all_seconds']} s")
            print(f"| {row['part']} | {row['method']} | {row['concurrency']} | {row['objects']} | {row['seconds']:.2f} "
                  f"| {rate:.0f} | {fmt(ratio, '{:.2f}')} | {fmt(rss, '{:.1f}')} | {fmt(rss_ratio, '{:.2f}')} "
                  f"| {row.get('etcd_revisions', '-')} | {'; '.join(notes)} |")
    first = results.get("first_migration")
    if first:
        print()
        print("First full migration of a fresh 2 × 1.32 plane: `ansible-playbook playbooks/migrate.yml "
              "-e kubeupgrade_target_release=1.33`")
        print("| seconds | rc | resources in summary | succeeded | objects |")
        print("| ---: | ---: | ---: | ---: | ---: |")
        print(f"| {first['seconds']:.1f} | {first['returncode']} | {first['resources_listed']} "
              f"| {first['resources_succeeded']} | {first['objects']} |")
    pre = results.get("preflight")
    if pre:
        print()
        print("Pre-flight `storage_version_check` (target_release 1.33, in-process `main()`), same 2 × 1.32 plane")
        print("| seconds | requests (total) | per endpoint | verdicts | task failed |")
        print("| ---: | ---: | --- | --- | --- |")
        per = ", ".join(f"{k.rsplit(':', 1)[-1]}: {v}" for k, v in sorted(pre["requests"].items()))
        verdicts = ", ".join(f"{k}: {v}" for k, v in sorted(pre["verdicts"].items(), key=lambda kv: str(kv[0])))
        print(f"| {pre['seconds']:.2f} | {sum(pre['requests'].values())} | {per} | {verdicts or '-'} "
              f"| {'yes: ' + str(pre['msg'])[:120] if pre['failed'] else 'no'} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--objects", type=int, default=5000, help="ConfigMaps created in namespace bench")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--repeat", type=int, default=3,
                        help="rounds: each measures every method of a table once, in a fresh child (the median is shown)")
    parser.add_argument("--skip-module", action="store_true", help="no in-process ClientMigrator rows")
    parser.add_argument("--skip-ansible", action="store_true", help="no ansible-playbook storage_migration rows")
    parser.add_argument("--methods", nargs="+", choices=["module", "module-apply", "ansible", "ansible-apply"],
                        help="only these migrate rows beside the bare loop (default: every one the --skip options leave)")
    parser.add_argument("--skip-rewrites", action="store_true", help="no put/merge/apply rows")
    parser.add_argument("--skip-first-migration", action="store_true", help="no playbooks/migrate.yml run")
    parser.add_argument("--skip-preflight", action="store_true", help="no storage_version_check run")
    parser.add_argument("--workdir", help="keep the planes' files here (default: a temporary directory)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--method", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    on_path("tests")
    from realcp.plane import ControlPlane, binary

    version = os.path.basename(os.path.dirname(binary("1.32")))
    results_dir = os.path.join(HERE, "results")
    os.makedirs(results_dir, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    logdir = os.path.join(results_dir, f"real-apiserver-{stamp}-logs")
    os.makedirs(logdir, exist_ok=True)
    results = {"apiserver_version": version, "objects": args.objects, "concurrency": args.concurrency,
               "repeat": args.repeat, "nproc": os.cpu_count(), "loadavg_before": os.getloadavg(), "rows": [],
               "logdir": logdir}
    with tempfile.TemporaryDirectory() as scratch:
        workdir = args.workdir or scratch
        part_one(args, workdir, ControlPlane, results)
        if not (args.skip_first_migration and args.skip_preflight):
            part_two(args, workdir, ControlPlane, results)
    results["loadavg_after"] = os.getloadavg()
    path = os.path.join(results_dir, f"real-apiserver-{stamp}.json")
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(results, handle, indent=2, default=str)
    print_tables(results)
    print(f"\nload average before {results['loadavg_before']}, after {results['loadavg_after']}; JSON: {path}")


if __name__ == "__main__":
    main()
