# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark the client-side migrator against a bare keep-alive HTTP loop, in the same run, same server.

For each object count (``admin.seed("bulk:N")`` configmaps) and concurrency, three measurements run
against one simulated apiserver, each in a fresh child process so peak memory is its own:
  bare   urllib3 keep-alive pool: LIST limit=500 + PUT every object back, ``concurrency`` writers
  client ClientMigrator with its default write (``put``)
  put    ClientMigrator, ``write: put``: whole objects listed, each PUT back as read
  apply  ClientMigrator, ``write: apply``: metadata listed, minimal server-side apply (uid + resourceVersion)
Reported: objects/s, peak RSS growth during the run (MiB), each as a ratio against ``bare``; requests and
bytes (in + out, from the simulator's ``stats()``) per object.
Then, unless ``--first-migration-bulk 0``, the first full migration of a fresh simulated cluster (demo data plus
that many bulk configmaps) with ``backend: intree`` and with the module's defaults (``bench_first_migration.py``).

    PYTHONPATH=collections:tests/simulator python benchmarks/bench_migration.py --counts 10000 100000
Not a test: nothing is asserted.
"""

import argparse
import json
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from _common import REPO, PeakRss, on_path, run_child

on_path("collections", "tests/simulator")

LIST_PATH = "/api/v1/namespaces/bulk/configmaps"


def bare_loop(state, concurrency):
    """The baseline: what any client must at least do (LIST chunks, PUT each object back), nothing more."""
    import urllib3

    pool = urllib3.PoolManager(maxsize=concurrency + 2, block=True, retries=False, cert_reqs="CERT_REQUIRED",
                               ca_certs=state["ca_file"])
    base = state["endpoint"]
    headers = {"Authorization": f"Bearer {state['token']}", "Accept": "application/json",
               "Content-Type": "application/json"}
    done = 0
    token = None

    def put(item):
        meta = item["metadata"]
        item["apiVersion"], item["kind"] = "v1", "ConfigMap"
        body = json.dumps(item, separators=(",", ":")).encode()
        response = pool.request("PUT", f"{base}/api/v1/namespaces/{meta['namespace']}/configmaps/{meta['name']}",
                                body=body, headers=headers)
        return response.status

    with ThreadPoolExecutor(max_workers=concurrency) as writers:
        while True:
            url = f"{base}{LIST_PATH}?limit=500" + (f"&continue={token}" if token else "")
            page = json.loads(pool.request("GET", url, headers=headers).data)
            items = page.get("items") or []
            if concurrency == 1:
                statuses = [put(i) for i in items]
            else:
                statuses = list(writers.map(put, items))
            done += sum(1 for s in statuses if s < 300 or s == 409)
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                break
    return done


def migrator(state, concurrency, method=None, list_path=LIST_PATH):
    """The client backend's ClientMigrator over ``list_path``; ``method`` put or apply chooses the write (default: the
    migrator's own default)."""
    from ansible_collections.kubeupgrade.storage.plugins.module_utils._http import client as client_mod
    from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.settings import ConnectionSettings
    from ansible_collections.kubeupgrade.storage.plugins.module_utils._rewrite import migrator as mc
    from ansible_collections.kubeupgrade.storage.plugins.module_utils.resources import GroupResource

    settings = ConnectionSettings.from_params(
        {"host": state["endpoint"], "api_key": state["token"], "ca_cert": state["ca_file"]})
    api = client_mod.ApiClient(settings, maxsize=concurrency + 2)

    class Namespaced(mc.ResourceTarget):
        @property
        def list_path(self):
            return list_path

    target = Namespaced(GroupResource("", "configmaps"), "v1", True, "ConfigMap", "bench")
    options = mc.ClientOptions(chunk_size=500, concurrency=concurrency)
    if method in mc.WRITES:
        options.write = method
    progress = mc.ClientMigrator(api, target, options).run()
    if progress.failed:
        raise RuntimeError(f"migrator: {progress.failed} objects failed: {progress.failures[:3]}")
    return progress.objects_migrated


def child(args):
    state = json.loads(args.child)
    args.concurrency = args.concurrency[0]
    import urllib3  # noqa: F401  (imports happen before the measurement: only the run's own memory counts)

    if args.method != "bare":
        from ansible_collections.kubeupgrade.storage.plugins.module_utils._rewrite import migrator as _unused  # noqa: F401
    with PeakRss() as rss:
        started = time.perf_counter()
        if args.method == "bare":
            count = bare_loop(state, args.concurrency)
        else:
            count = migrator(state, args.concurrency, args.method)
        elapsed = time.perf_counter() - started
    print(json.dumps({"objects": count, "seconds": elapsed, "rss_mib": rss.growth_mib}))


def measure(state, method, concurrency):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(REPO, "collections"),
                                                       os.path.join(REPO, "tests", "simulator")]))
    return run_child(__file__, ["--child", json.dumps(state), "--method", method, "--concurrency", str(concurrency)],
                     env, f"{method} at concurrency {concurrency}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--counts", type=int, nargs="+", default=[10000, 100000])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--methods", nargs="+", default=["bare", "client"])
    parser.add_argument("--first-migration-bulk", type=int, default=2000,
                        help="bulk configmaps next to the demo data for the first-migration part; 0 skips it")
    parser.add_argument("--child")
    parser.add_argument("--method")
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    from apisim.harness import ControlPlane

    rows = []
    for count in args.counts:
        with tempfile.TemporaryDirectory() as workdir:
            with ControlPlane(workdir, apiservers=1, tls=True) as plane:
                plane.admin.seed(f"bulk:{count}")
                state = {"endpoint": plane.endpoints[0], "token": plane.token, "ca_file": plane.ca_file}
                for concurrency in args.concurrency:
                    results = {}
                    for method in args.methods:
                        plane.admin.reset_stats()
                        results[method] = measure(state, method, concurrency)
                        served = plane.admin.stats()["apiservers"]
                        objects = max(1, results[method]["objects"])
                        results[method]["requests_per_object"] = sum(a["requests"] for a in served) / objects
                        results[method]["bytes_per_object"] = sum(a["bytes_in"] + a["bytes_out"] for a in served) / objects
                    base = results.get("bare")
                    for method, r in results.items():
                        rate = r["objects"] / r["seconds"] if r["seconds"] else 0.0
                        base_rate = base["objects"] / base["seconds"] if base else None
                        rows.append((count, concurrency, method, r["objects"], rate,
                                     rate / base_rate if base_rate else None, r["rss_mib"],
                                     r["rss_mib"] / base["rss_mib"] if base and base["rss_mib"] > 0 else None,
                                     r["requests_per_object"], r["bytes_per_object"]))
                        print(_row(rows[-1]), flush=True)
    print()
    print("| objects | concurrency | method | migrated | objects/s | × bare | peak RSS growth MiB | × bare "
          "| requests/object | bytes/object |")
    print("| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in rows:
        print(_row(row))
    if args.first_migration_bulk > 0:
        import bench_first_migration

        bench_first_migration.print_table(bench_first_migration.run_all(args.first_migration_bulk),
                                          args.first_migration_bulk)


def fmt(value, pattern):
    return pattern.format(value) if value is not None else "-"


def _row(row):
    count, concurrency, method, objects, rate, ratio, rss, rss_ratio, requests, size = row
    return (f"| {count} | {concurrency} | {method} | {objects} | {rate:.0f} | {fmt(ratio, '{:.2f}')} | "
            f"{rss:.1f} | {fmt(rss_ratio, '{:.2f}')} | {requests:.3f} | {size:.0f} |")


if __name__ == "__main__":
    main()
