# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark the fixed cost of one module task of the collection as ansible-playbook runs it, against Ansible's
minimal module (``ansible.builtin.ping``) measured in the same run (issue 30, item 2).

Rows, each a module task that does almost nothing:
  debug   ``ansible.builtin.debug``: Ansible's own cost of a task, no module process (an action plugin)
  ping    ``ansible.builtin.ping``: the baseline module: AnsiballZ payload of ``ansible.module_utils.basic``, one
          Python process on the host
  hash    ``kubeupgrade.storage.storage_version_hash`` (``version: v1, kind: Pod``): no connection
  info    ``kubeupgrade.storage.storage_version_info`` against one simulated apiserver (tests/simulator, TLS): one
          observation of one endpoint
  wait    ``kubeupgrade.storage.storage_version_info`` as the rolling_upgrade role waits after a restart, against the
          same apiserver: ``expect_ready``, ``discovery: false`` (its identity and readiness alone); ``wait@REF`` runs
          it as the role did before that option, with ``include: []`` (discovery, no cluster-wide records)
  migrate ``kubeupgrade.storage.storage_migration`` in check mode (``resources: [configmaps]``, ``backend: client``,
          ``update_records: false``) against the same apiserver: a migration task with nothing to do (it observes,
          selects and says what it would migrate)
  audit   ``kubeupgrade.storage.storage_version_audit`` against an etcd holding one ConfigMap (etcd 3.5 of
          ``KUBEUPGRADE_TEST_K8S_ASSETS``, else the one on PATH; the row is left out without either)
End to end: a play of ``--tasks`` copies of the task on localhost (connection local, ``ANSIBLE_PIPELINING=1``: the
module's payload is piped to the interpreter, as the collection's docs advise), timed from ansible-playbook's start to
its exit; ``s / task`` = (that time - the time of a play of one ``debug`` task) / ``--tasks``, the median of
``--repeat`` plays (the rows take turns, so a change in the machine's load hits them alike).
End-to-end CPU: the CPU seconds of ansible-playbook and of every process it waited for (workers, module processes),
per task the same way: less sensitive than wall time to what else runs on the machine.
Module process alone: each module's AnsiballZ file (kept by a run with ``ANSIBLE_KEEP_REMOTE_FILES=1``, the task's
arguments inside it) run directly by this interpreter ``--runs`` times: wall seconds (median) and CPU seconds of the
process, its peak RSS; then ``--importtime-runs`` more under ``python -X importtime``: the import time (self times
summed, median of those runs, the importtime run's own overhead included) of the collection's module_utils
(``ansible_collections.kubeupgrade.*``: from the bytecode cache of module_utils/_bytecode.py, which the warm-up
plays fill, in a directory of the run's own; a collection before that cache compiles them from the payload's zip at
every run), of ``ansible.module_utils`` (from the zip, compiled at every run) and of the rest (standard library and third-party packages, from their
cached bytecode), and how many of the collection's files it imported.
Imports alone: the module (its module-level imports, nothing run) imported from the payload's zip in a fresh
interpreter, ``--import-runs`` times, the rows taking turns: CPU seconds (median and fastest) and wall seconds.
Every ratio is to ``ping`` in the same run; with ``--baseline REF`` the collection rows run a second time with the
collection's files as they are at that git commit (``git archive``), and ``x REF`` is this checkout's row over that one.

    export PATH=$PWD/.venv/bin:$PATH KUBEUPGRADE_TEST_K8S_ASSETS=$PWD/.cache/k8s-assets
    python benchmarks/bench_module_cost.py                          # about 5 minutes on 2 cores (twice with --baseline)
    python benchmarks/bench_module_cost.py --baseline HEAD          # this tree's changes against the last commit
    python benchmarks/bench_module_cost.py --tasks 2 --repeat 1 --runs 2 --import-runs 3 --rows ping hash   # a look
    python benchmarks/bench_module_cost.py --real 1.36 --rows debug ping info wait --baseline HEAD~1    # real apiserver

The machine's other work shows in every row alike: compare the ratios within one run. JSON goes to
benchmarks/results/module-cost-<stamp>.json. Not a test: nothing is asserted.

Results, run by run: benchmarks/README.md, section bench_module_cost.py.
"""

import argparse
import base64
import glob
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time

from _common import AUDIT_VALUES, HERE, REPO, ansible_env, on_path

on_path(AUDIT_VALUES, "tests/simulator", "tests")

ROWS = ["debug", "ping", "hash", "info", "wait", "migrate", "audit"]
COLLECTION_ROWS = ("hash", "info", "wait", "migrate", "audit")
COLLECTION = "ansible_collections.kubeupgrade.storage."
IMPORT_LINE = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \|(\s*)(\S+)")


def tasks_for(label, context):
    """The module and its arguments of one row's task (None: the row cannot run here); ``label`` is a row, or a row
    of the baseline collection (``hash@REF``)."""
    row = label.partition("@")[0]
    if row == "debug":
        return "ansible.builtin.debug", {"msg": "nothing"}
    if row == "ping":
        return "ansible.builtin.ping", {}
    if row == "hash":
        return "kubeupgrade.storage.storage_version_hash", {"version": "v1", "kind": "Pod"}
    if row == "info" and context.get("plane"):
        plane = context["plane"]
        return "kubeupgrade.storage.storage_version_info", {"kubeconfig": plane.kubeconfig, "endpoints": plane.endpoints[:1]}
    if row == "wait" and context.get("plane"):
        plane = context["plane"]
        scope = {"include": []} if "@" in label else {"discovery": False}
        return "kubeupgrade.storage.storage_version_info", {"kubeconfig": plane.kubeconfig, "endpoints": plane.endpoints[:1],
                                                            "expect_ready": True, **scope}
    if row == "migrate" and context.get("plane"):
        plane = context["plane"]  # in check mode: it observes, selects and reports what it would migrate
        return "kubeupgrade.storage.storage_migration", {
            "kubeconfig": plane.kubeconfig, "endpoints": plane.endpoints[:1], "resources": ["configmaps"],
            "backend": "client", "update_records": False, "_check_mode": True}
    if row == "audit" and context.get("etcd"):
        return "kubeupgrade.storage.storage_version_audit", {"etcd_endpoints": [context["etcd"].url]}
    return None


def one_configmap():
    """A ConfigMap as kube-apiserver stores it (the protobuf envelope): an audit refuses an etcd with no key."""
    from audit_values import protobuf_value
    return protobuf_value("v1", "ConfigMap", raw=b"\x0a\x03one")


def write_play(path, module, args, count):
    args = dict(args)
    keywords = {"check_mode": True} if args.pop("_check_mode", False) else {}
    play = [{"hosts": "localhost", "connection": "local", "gather_facts": False,
             "tasks": [{"name": f"task {i}", module: args, **keywords} for i in range(count)]}]
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(play, handle)
    return path


def env_for(label, context, extra=None):
    """ansible-playbook's environment for a row: the baseline's collections directory for ``row@REF``."""
    env = ansible_env()
    env.update(ANSIBLE_PIPELINING="1", ANSIBLE_INVENTORY_UNPARSED_WARNING="0", ANSIBLE_DEPRECATION_WARNINGS="0")
    if "@" in label:
        env["ANSIBLE_COLLECTIONS_PATH"] = context["baseline"]
    env.update(extra or {})
    return env


def export_baseline(ref, workdir):
    """The collection's files at ``ref`` (git archive of this repository) as a collections directory of its own."""
    root = os.path.join(workdir, "baseline", "ansible_collections", "kubeupgrade", "storage")
    os.makedirs(root)
    archive = subprocess.run(["git", "archive", ref, "galaxy.yml", "meta", "plugins"], cwd=REPO, capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-x", "-C", root], input=archive, check=True)
    return os.path.join(workdir, "baseline")


def play_seconds(playbook, env):
    """(wall s, CPU s of ansible-playbook and every process it waited for: workers, module processes) of one play."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    out = subprocess.run(["ansible-playbook", "-i", "localhost,", playbook], env=env, cwd=REPO, capture_output=True,
                         text=True, check=False)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode or "failed=0" not in out.stdout:
        raise RuntimeError(f"{playbook} failed:\n{out.stdout[-3000:]}\n{out.stderr[-2000:]}")
    return seconds, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def end_to_end(rows, context, args, workdir):
    """{row: {"s_per_task", "cpu_per_task", "plays"}}: the rows take turns for ``repeat`` rounds; each round also times a
    one-debug play, whose median is subtracted."""
    base = write_play(os.path.join(workdir, "base.json"), "ansible.builtin.debug", {"msg": "nothing"}, 1)
    plays = {row: write_play(os.path.join(workdir, f"{row.replace('@', '-at-')}.json"), *tasks_for(row, context), args.tasks)
             for row in rows}
    play_seconds(base, env_for("debug", context))  # warm: the controller's caches (collection loader, AnsiballZ payloads)
    for row, playbook in plays.items():
        play_seconds(playbook, env_for(row, context))
    timings = {row: [] for row in rows}
    bases = []
    for _round in range(args.repeat):
        bases.append(play_seconds(base, env_for("debug", context)))
        for row, playbook in plays.items():
            timings[row].append(play_seconds(playbook, env_for(row, context)))
    base_s, base_cpu = (statistics.median(values) for values in zip(*bases))
    found = {"_base": {"plays": [round(v[0], 3) for v in bases], "median": base_s, "cpu_median": base_cpu}}
    for row, values in timings.items():
        walls, cpus = zip(*values)
        found[row] = {"s_per_task": (statistics.median(walls) - base_s) / args.tasks,
                      "cpu_per_task": (statistics.median(cpus) - base_cpu) / args.tasks, "plays": [round(v, 3) for v in walls]}
    return found


def kept_payloads(rows, context, workdir):
    """{row: path of its AnsiballZ file}, kept by one run without pipelining (debug has none)."""
    remote = os.path.join(workdir, "remote-tmp")
    found = {}
    for row in rows:
        if row == "debug":
            continue
        env = env_for(row, context, {"ANSIBLE_PIPELINING": "0", "ANSIBLE_KEEP_REMOTE_FILES": "1", "ANSIBLE_REMOTE_TMP": remote})
        before = set(glob.glob(os.path.join(remote, "ansible-tmp-*")))
        play_seconds(write_play(os.path.join(workdir, f"keep-{row.replace('@', '-at-')}.json"), *tasks_for(row, context), 1), env)
        new = sorted(set(glob.glob(os.path.join(remote, "ansible-tmp-*"))) - before)
        files = [f for d in new for f in glob.glob(os.path.join(d, "AnsiballZ_*.py"))]
        if len(files) != 1:
            raise RuntimeError(f"{row}: expected one kept AnsiballZ file, found {files}")
        found[row] = files[0]
    return found


def run_payload(path, importtime=False):
    """(wall s, CPU s, peak RSS MiB, stderr) of one direct run of an AnsiballZ file (its own rusage, from wait4)."""
    argv = [sys.executable] + (["-X", "importtime"] if importtime else []) + [path]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        process = subprocess.Popen(argv, cwd=os.path.dirname(path), stdout=out, stderr=err)
        _pid, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    if process.returncode or '"failed": true' in stdout:
        raise RuntimeError(f"{path} failed: {stdout[-2000:]} {stderr[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024.0, stderr


def import_split(stderr):
    """Import seconds (self times summed) by origin, and the collection's modules imported."""
    split = {"collection": 0, "ansible.module_utils": 0, "other": 0}
    collection = []
    for line in stderr.splitlines():
        match = IMPORT_LINE.match(line)
        if not match:
            continue
        self_us, name = int(match.group(1)), match.group(4)
        if name.startswith(COLLECTION):
            split["collection"] += self_us
            collection.append(name[len(COLLECTION):])
        elif name.startswith("ansible.module_utils") or name == "ansible":
            split["ansible.module_utils"] += self_us
        else:
            split["other"] += self_us
    return {key: value / 1e6 for key, value in split.items()}, collection


def module_alone(payloads, args):
    """{row: wall/CPU/peak medians of ``runs`` direct runs, then one -X importtime run's split}; rows take turns."""
    runs = {row: [] for row in payloads}
    for path in payloads.values():
        run_payload(path)  # warm the page cache and the interpreter's own bytecode
    for _round in range(args.runs):
        for row, path in payloads.items():
            runs[row].append(run_payload(path)[:3])
    timed = {row: [] for row in payloads}
    for _round in range(args.importtime_runs):
        for row, path in payloads.items():
            timed[row].append(run_payload(path, importtime=True))
    found = {}
    for row, path in payloads.items():
        splits = [import_split(stderr) for _wall, _cpu, _peak, stderr in timed[row]]
        split = {key: statistics.median(s[key] for s, _names in splits) for key in splits[0][0]}
        collection = splits[0][1]
        walls, cpus, peaks = zip(*runs[row])
        found[row] = {"wall": statistics.median(walls), "cpu": statistics.median(cpus), "peak_mib": max(peaks),
                      "importtime_wall": statistics.median(t[0] for t in timed[row]), "imports": split,
                      "collection_modules": len(collection), "collection_names": collection,
                      "payload_kib": payload_kib(path)}
    return found


IMPORT_CHILD = """
import sys, time
sys.path.insert(0, sys.argv[1])
cpu, wall = time.process_time(), time.perf_counter()
__import__(sys.argv[2])
print(time.process_time() - cpu, time.perf_counter() - wall)
"""


def payload_zip(path, workdir, row):
    """The zip of module and module_utils inside an AnsiballZ file, written for ``row``; (zip path, module's name)."""
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    data = re.search(r"zip_data='([^']*)'", text).group(1)
    name = re.search(r"module_fqn='([^']*)'", text).group(1)
    target = os.path.join(workdir, f"payload-{row.replace('@', '-at-')}.zip")  # hash and hash@REF: one file name each
    with open(target, "wb") as handle:
        handle.write(base64.b64decode(data))
    return target, name


def imports_alone(payloads, args, workdir):
    """{row: medians of the CPU and wall seconds of importing the module from its payload zip in a fresh interpreter}:
    what the module's imports cost with nothing else (Python's own start excluded), from the zip as AnsiballZ
    does (the collection's module_utils through its bytecode cache); ``--import-runs`` runs, the rows taking turns."""
    zips = {row: payload_zip(path, workdir, row) for row, path in payloads.items()}
    runs = {row: [] for row in zips}
    for _round in range(args.import_runs + 1):
        for row, (zip_path, name) in zips.items():
            out = subprocess.run([sys.executable, "-c", IMPORT_CHILD, zip_path, name], capture_output=True, text=True,
                                 check=True)
            if _round:  # the first round warms the page cache
                runs[row].append([float(v) for v in out.stdout.split()])
    return {row: {"cpu": statistics.median(r[0] for r in values), "wall": statistics.median(r[1] for r in values),
                  "cpu_min": min(r[0] for r in values)} for row, values in runs.items()}


def payload_kib(path):
    """Size of the AnsiballZ file (the base64 zip of the module and its module_utils, and the arguments)."""
    return os.path.getsize(path) / 1024.0


def ratio(value, base):
    return f"{value / base:.2f}" if isinstance(value, (int, float)) and base else "-"


def print_tables(results):
    e2e, alone = results["end_to_end"], results["module_alone"]
    ping_task = (e2e.get("ping") or {}).get("s_per_task")
    print(f"\nEnd to end: {results['tasks']} tasks per play, median of {results['repeat']} plays; one-debug play "
          f"{e2e['_base']['median']:.2f} s (Ansible's start, subtracted); load {results['loadavg_before']}")
    name = results.get("baseline") or "baseline"
    ping_cpu = (e2e.get("ping") or {}).get("cpu_per_task")
    print(f"| row | s / task | x ping | x {name} | CPU s / task | x ping | x {name} | plays s |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for row in results["rows"]:
        item, base = e2e[row], e2e.get(f"{row}@{results.get('baseline')}") or {}
        print(f"| {row} | {item['s_per_task']:.3f} | {ratio(item['s_per_task'], ping_task)} "
              f"| {ratio(item['s_per_task'], base.get('s_per_task'))} | {item['cpu_per_task']:.3f} "
              f"| {ratio(item['cpu_per_task'], ping_cpu)} | {ratio(item['cpu_per_task'], base.get('cpu_per_task'))} "
              f"| {item['plays']} |")
    ping = alone.get("ping")
    print(f"\nModule process alone (AnsiballZ file run directly, median of {results['runs']}); imports: self times "
          f"summed, median of {results['importtime_runs']} -X importtime runs")
    print(f"| row | wall s | x ping | x {name} | CPU s | x ping | x {name} | peak MiB "
          "| collection imports s (files) | ansible.module_utils s | other imports s | payload KiB |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for row, item in alone.items():
        base = alone.get(f"{row}@{results.get('baseline')}") or {}
        imports = item["imports"]
        print(f"| {row} | {item['wall']:.3f} | {ratio(item['wall'], (ping or {}).get('wall'))} "
              f"| {ratio(item['wall'], base.get('wall'))} | {item['cpu']:.3f} | {ratio(item['cpu'], (ping or {}).get('cpu'))} "
              f"| {ratio(item['cpu'], base.get('cpu'))} | {item['peak_mib']:.0f} "
              f"| {imports['collection']:.3f} ({item['collection_modules']}) | {imports['ansible.module_utils']:.3f} "
              f"| {imports['other']:.3f} | {item['payload_kib']:.0f} |")
    imports = results["imports_alone"]
    ping_import = (imports.get("ping") or {}).get("cpu")
    print(f"\nImports alone: the module imported from its payload zip in a fresh interpreter (as AnsiballZ does; "
          f"the collection's files through its bytecode cache), median and fastest of {results['import_runs']}")
    print(f"| row | import CPU s | x ping | x {name} | fastest CPU s | x {name} | import wall s | x {name} |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for row, item in imports.items():
        base = imports.get(f"{row}@{results.get('baseline')}") or {}
        print(f"| {row} | {item['cpu']:.3f} | {ratio(item['cpu'], ping_import)} | {ratio(item['cpu'], base.get('cpu'))} "
              f"| {item['cpu_min']:.3f} | {ratio(item['cpu_min'], base.get('cpu_min'))} "
              f"| {item['wall']:.3f} | {ratio(item['wall'], base.get('wall'))} |")
    print(f"\nload average after {results['loadavg_after']}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", nargs="+", default=ROWS, choices=ROWS)
    parser.add_argument("--tasks", type=int, default=10, help="tasks per play in the end-to-end rows")
    parser.add_argument("--repeat", type=int, default=3, help="plays per row (median)")
    parser.add_argument("--runs", type=int, default=10, help="direct runs of each module's AnsiballZ file (median)")
    parser.add_argument("--import-runs", type=int, default=30, help="imports of each module from its payload (median)")
    parser.add_argument("--importtime-runs", type=int, default=3, help="runs under -X importtime (median per origin)")
    parser.add_argument("--baseline", metavar="REF", help="also run the collection's modules as they are at this git "
                        "commit (rows named row@REF), in the same run")
    parser.add_argument("--real", metavar="RELEASE", help="the info, wait and migrate rows against one real "
                        "kube-apiserver of this release (tests/realcp, KUBEUPGRADE_TEST_K8S_ASSETS) instead of the simulated one")
    parser.add_argument("--no-save", action="store_true", help="print only; no JSON in benchmarks/results")
    args = parser.parse_args()
    results = {"rows": [], "tasks": args.tasks, "repeat": args.repeat, "runs": args.runs, "nproc": os.cpu_count(),
               "importtime_runs": args.importtime_runs, "import_runs": args.import_runs,
               "loadavg_before": [round(v, 2) for v in os.getloadavg()], "python": sys.version.split()[0],
               "apiserver": f"real {args.real}" if args.real else "simulated"}
    with tempfile.TemporaryDirectory(prefix="bench-module-cost-") as workdir:
        # The modules' bytecode cache (module_utils/_bytecode.py) is this run's own, filled by the warm-up plays;
        # the direct runs of the payloads use it too, and write nothing with PYTHONDONTWRITEBYTECODE unset.
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
        os.environ["XDG_CACHE_HOME"] = os.path.join(workdir, "xdg-cache")
        context = {}
        try:
            if {"info", "wait", "migrate"} & set(args.rows):
                if args.real:  # tests/realcp: one real kube-apiserver on its etcd, its binaries from the assets
                    from realcp.plane import ControlPlane as RealPlane
                    context["plane"] = RealPlane(os.path.join(workdir, "plane"), releases=[args.real]).__enter__()
                else:
                    from apisim.harness import ControlPlane
                    context["plane"] = ControlPlane(os.path.join(workdir, "plane"), apiservers=1).__enter__()
            if "audit" in args.rows:
                import etcd_fixture
                version = "3.5" if etcd_fixture.etcd_binary("3.5") else None
                if etcd_fixture.etcd_binary(version):
                    context["etcd"] = etcd_fixture.EtcdServer(os.path.join(workdir, "etcd"), version=version).__enter__()
                    context["etcd"].put("/registry/configmaps/default/one", one_configmap())
            rows = [row for row in args.rows if tasks_for(row, context)]
            if args.baseline:
                context["baseline"] = export_baseline(args.baseline, workdir)
                rows = [label for row in rows for label in ([row, f"{row}@{args.baseline}"] if row in COLLECTION_ROWS else [row])]
            results["rows"], results["baseline"] = rows, args.baseline
            results["end_to_end"] = end_to_end(results["rows"], context, args, workdir)
            payloads = kept_payloads(results["rows"], context, workdir)
            results["imports_alone"] = imports_alone(payloads, args, workdir)
            results["module_alone"] = module_alone(payloads, args)
        finally:
            for key in ("etcd", "plane"):
                if context.get(key):
                    context[key].__exit__(None, None, None)
    results["loadavg_after"] = [round(v, 2) for v in os.getloadavg()]
    print_tables(results)
    if not args.no_save:
        os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
        path = os.path.join(HERE, "results", f"module-cost-{time.strftime('%Y%m%d-%H%M%S')}.json")
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=2)
        print(f"JSON: {path}")


if __name__ == "__main__":
    main()
