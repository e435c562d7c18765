# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark the etcd audit against ``etcdctl get --prefix /registry/ -w json > /dev/null``, same etcd, same run.

For each key count, a fresh real etcd (Debian's etcd-server, loopback, plain HTTP) is filled with ConfigMaps in the
protobuf envelope (about 400 bytes each, a tenth of them in an old version), then, etcd warmed by one etcdctl run:
  etcdctl         ``etcdctl get --prefix /registry/ -w json > /dev/null``: gRPC, one response with every key
  module grpc     the module's runner (``--page-size``, no throttle) in a child process, decoding every value, over
                  etcd's gRPC API (the default transport)
  module gateway  the same through etcd's JSON gateway (the fallback where gRPC cannot be spoken)
  e2e             ``ansible-playbook`` running ``storage_version_audit`` on localhost (no pipelining, the task's
                  whole cost: Ansible's start, the module's transfer and start, the scan), unthrottled, with the
                  module's default throttle (``--default-throttle``) and with a proposed one (``--throttle``)
Each row: wall seconds (module rows: the scan itself, measured in the child; the child's process time in brackets),
speed as a ratio of etcdctl's (goal >= 0.5), CPU seconds of the client process and of etcd during the row, range
requests, peak RSS of the reading process (VmHWM; etcdctl: sampled every 2 ms; e2e: the module's process, noted by
an interpreter wrapper). Best of
``--repeat`` runs for etcdctl and the unthrottled rows. The 2 cores are shared by etcd, the client and whatever else
runs: compare ratios within one run. JSON goes to benchmarks/results/audit-<stamp>.json.

    .venv/bin/python benchmarks/bench_audit.py --counts 10000 100000
    .venv/bin/python benchmarks/bench_audit.py --counts 1000000 --repeat 1 --no-default-throttle   # about 5 minutes
Not a test: nothing is asserted (a wrong count or a failed run stops it).

Results, run by run: benchmarks/README.md, section bench_audit.py.
"""

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time

from _common import AUDIT_VALUES, ETCDCTL_TIMEOUT, HERE, REPO, cpu_seconds, on_path, peak_kib

on_path(AUDIT_VALUES, "tests/simulator", "collections", "tests")

PREFIX = "/registry/"
# The module's interpreter in the e2e rows: runs the module in its own process, then notes that process's peak RSS
# (VmHWM: counted from exec, unlike ru_maxrss, which starts from the forking parent's size) and CPU.
WRAPPER = '''#!{python}
import atexit, resource, runpy, sys


def _note():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    peak = [line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM:")][0]
    with open({log!r}, "a") as log:
        log.write("%s %.3f\\n" % (peak, usage.ru_utime + usage.ru_stime))


atexit.register(_note)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
'''


def _child(url, prefix, page_size, transport):
    """The module's runner alone: what one audit costs, without Ansible."""
    from ansible_collections.kubeupgrade.storage.plugins.module_utils._audit import runner
    from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd import client as etcd_client

    request = runner.build_request({"etcd_endpoints": [url], "etcd_prefix": prefix, "pages_per_second": 0,
                                    "page_size": int(page_size), "readable_versions": {"configmaps": ["v1"]}})
    request.scan.transport = transport
    readers = []

    def reader(settings):
        readers.append(etcd_client.EtcdReader(settings))
        return readers[-1]

    started = time.perf_counter()
    result = runner.audit(request, reader)
    seconds = time.perf_counter() - started
    print(json.dumps({"seconds": seconds, "keys": result["keys_scanned"], "not_readable": result["not_readable"],
                      "pages": result["pages"], "transport": readers[0].transport, "peak_kib": peak_kib()}))


def _fill(server, count):
    from audit_values import protobuf_value

    payload = b"\x0a" + bytes([120]) + b"x" * 120 + b"\x12" + bytes([120]) + b"d" * 120 + b"\x1a\x60" + b"z" * 96
    current = protobuf_value("v1", "ConfigMap", raw=payload)
    old = protobuf_value("v0", "ConfigMap", raw=payload)  # a version no apiserver reads: counted as not readable
    server.put_many(((f"/registry/configmaps/bulk/cm-{i:07d}", old if i % 10 == 0 else current) for i in range(count)), batch=128)


def _etcd_cpu(server):
    return cpu_seconds(server.process.pid)


def _measured(server, cmd, **kwargs):
    """Run ``cmd`` (its output into a file); (wall s, its CPU s, its peak RSS MiB sampled every 2 ms, etcd's CPU s, output)."""
    with tempfile.TemporaryFile() as output:
        kwargs.setdefault("stdout", output)
        etcd_before = _etcd_cpu(server)
        started = time.perf_counter()
        process = subprocess.Popen(cmd, stderr=subprocess.STDOUT, **kwargs)
        peak = 0
        while True:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            try:
                peak = max(peak, peak_kib(process.pid))
            except (OSError, IndexError):  # exiting
                pass
            time.sleep(0.002)
        wall = time.perf_counter() - started
        etcd = _etcd_cpu(server) - etcd_before
        output.seek(0)
        out = output.read()
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise RuntimeError(f"{cmd[:3]} failed: {out[-3000:].decode(errors='replace')}")
    return wall, usage.ru_utime + usage.ru_stime, peak / 1024, etcd, out


def _etcdctl(server):
    with open(os.devnull, "wb") as devnull:
        wall, cpu, peak, etcd, _out = _measured(server, ["etcdctl", ETCDCTL_TIMEOUT, "get", "--prefix", PREFIX, "-w", "json"],
                                                env=server.etcdctl_env(), stdout=devnull)
    return {"what": "etcdctl get --prefix -w json", "wall": wall, "client_cpu": cpu, "etcd_cpu": etcd, "requests": 1,
            "peak_mib": peak}


def _module(server, count, page_size, transport):
    cmd = [sys.executable, __file__, "--child", server.url, PREFIX, str(page_size), transport]
    wall, cpu, _peak, etcd, out = _measured(server, cmd)
    child = json.loads(out.splitlines()[-1])
    assert child["keys"] == count and child["not_readable"] == (count + 9) // 10 and child["transport"] == transport, child
    return {"what": f"module alone, {transport}", "wall": child["seconds"], "process_wall": wall, "client_cpu": cpu,
            "etcd_cpu": etcd, "requests": child["pages"], "peak_mib": child["peak_kib"] / 1024}


def _e2e(server, count, workdir, throttle, label):
    page_size, rate = int(throttle[0]), throttle[1]
    playbook = os.path.join(workdir, "audit.yml")
    task = {"etcd_endpoints": [server.url], "page_size": page_size, "pages_per_second": rate,
            "readable_versions": {"configmaps": ["v1"]}}
    with open(playbook, "w") as handle:
        json.dump([{"hosts": "localhost", "connection": "local", "gather_facts": False, "tasks": [
            {"name": "audit", "kubeupgrade.storage.storage_version_audit": task, "register": "audit"},
            {"name": "count", "ansible.builtin.assert": {"that": [f"audit.keys_scanned == {count}"], "quiet": True}}]}], handle)
    log = os.path.join(workdir, "module-usage.log")
    wrapper = os.path.join(workdir, "python-wrapper")
    with open(wrapper, "w") as handle:
        handle.write(WRAPPER.format(python=sys.executable, log=log))
    os.chmod(wrapper, 0o755)
    if os.path.exists(log):
        os.remove(log)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, "collections"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0", ANSIBLE_PIPELINING="0")
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), playbook, "-i", "localhost,",
           "-e", json.dumps({"ansible_python_interpreter": wrapper})]
    wall, cpu, _tree_peak, etcd, _out = _measured(server, cmd, env=env)
    with open(log) as handle:
        module_peak_kib, module_cpu = (float(v) for v in handle.read().split()[:2])
    return {"what": f"end to end, {label}", "wall": wall, "client_cpu": cpu, "module_cpu": module_cpu, "etcd_cpu": etcd,
            "requests": None, "peak_mib": module_peak_kib / 1024, "page_size": page_size, "pages_per_second": rate}


def _best(runs):
    return min(runs, key=lambda row: row["wall"])


def measure(count, workdir, args):
    from etcd_fixture import EtcdServer

    rows = []
    with EtcdServer(os.path.join(workdir, f"etcd-{count}")) as server:
        _fill(server, count)
        _etcdctl(server)  # warm etcd's caches once for everyone
        rows.append(_best([_etcdctl(server) for _unused in range(args.repeat)]))
        for transport in ("grpc", "gateway"):
            rows.append(_best([_module(server, count, args.page_size, transport) for _unused in range(args.repeat)]))
        rows.append(_best([_e2e(server, count, workdir, (args.page_size, 0), f"page_size {args.page_size}, no throttle")
                           for _unused in range(args.repeat)]))
        for size, rate in ((args.throttle,) if args.no_default_throttle else (args.default_throttle, args.throttle)):
            rows.append(_e2e(server, count, workdir, (size, rate), f"page_size {int(size)}, pages_per_second {rate:g}"))
    etcdctl = rows[0]["wall"]
    for row in rows:
        row.update(keys=count, vs_etcdctl=etcdctl / row["wall"], keys_per_second=count / row["wall"])
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--counts", type=int, nargs="+", default=[10000, 100000])
    parser.add_argument("--page-size", type=int, default=500, help="page size of the unthrottled rows")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--default-throttle", type=float, nargs=2, default=[500, 10], metavar=("PAGE_SIZE", "PAGES_PER_SECOND"))
    parser.add_argument("--throttle", type=float, nargs=2, default=[1000, 20], metavar=("PAGE_SIZE", "PAGES_PER_SECOND"))
    parser.add_argument("--no-default-throttle", action="store_true", help="skip that row (1M keys: 200 s)")
    parser.add_argument("--child", nargs=4, metavar=("URL", "PREFIX", "PAGE_SIZE", "TRANSPORT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return _child(*args.child)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-audit-") as workdir:
        for count in args.counts:
            rows.extend(measure(count, workdir, args))
    print(f"{'keys':>7}  {'what':<52} {'wall s':>7} {'vs etcdctl':>10} {'client CPU s':>12} {'etcd CPU s':>10} "
          f"{'requests':>8} {'peak RSS MiB':>12}")
    for row in rows:
        wall = f"{row['wall']:.2f}"
        cpu = f"{row['client_cpu']:.2f}" + (f" ({row['module_cpu']:.2f})" if "module_cpu" in row else "")
        print(f"{row['keys']:>7}  {row['what']:<52} {wall:>7} {row['vs_etcdctl']:>10.2f} {cpu:>12} {row['etcd_cpu']:>10.2f} "
              f"{row['requests'] if row['requests'] is not None else '-':>8} {row['peak_mib']:>12.1f}")
    print("e2e client CPU: the whole ansible-playbook run (in brackets: the module's process alone); module rows: the wall "
          "is the scan, measured inside the child")
    for what in sorted({row["what"] for row in rows}, key=[row["what"] for row in rows].index):
        peaks = [row["peak_mib"] for row in rows if row["what"] == what]
        if len(peaks) > 1:
            print(f"peak RSS {args.counts[-1]} keys / {args.counts[0]} keys, {what}: {peaks[-1] / peaks[0]:.2f}")
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = os.path.join(HERE, "results", f"audit-{stamp}.json")
    with open(path, "w") as handle:
        json.dump({"rows": rows, "page_size": args.page_size, "load_average": os.getloadavg(),
                   "bench_peak_kib": peak_kib()}, handle, indent=2)
    print(f"JSON: {path}")


if __name__ == "__main__":
    main()
