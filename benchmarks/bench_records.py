# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark the StorageState record writes of ``storage_state`` on a REAL kube-apiserver 1.32 (tests/realcp): the
records written side by side (``storage_state_io.RECORD_WRITERS``, the default) against one after the other
(``RECORD_WRITERS = 1``, as before), measured in the same run against the same apiserver.

Each measurement is the module's real ``main()`` in-process (``state: present``, every resource the apiserver serves,
about 70), timed from call to return:
  first     no record exists: each is created (POST, then PUT of its status)
  again     the records exist and nothing changed: reads only (the same in both, the control row)
Between rounds every StorageState record is deleted. ``--rtt-ms`` adds that many milliseconds before every request the
module sends (a sleep in the collection's transport, the same for both rows): an apiserver across a network, where
each request waits a round trip, emulated on one machine. The rows take turns, ``--repeat`` rounds; the median is shown.

    export PATH=$PWD/.venv/bin:$PATH KUBEUPGRADE_TEST_K8S_ASSETS=$PWD/.cache/k8s-assets
    python benchmarks/bench_records.py --repeat 5 --rtt-ms 0 10

The apiserver, etcd and the module share the machine: compare the ratios within one run. JSON goes to
benchmarks/results/records-<stamp>.json. Not a test: nothing is asserted.
"""

import argparse
import json
import os
import statistics
import tempfile
import time

from _common import HERE, on_path, run_module

on_path("collections", "tests")


def delete_records(plane):
    status, body = plane.request("DELETE", "/apis/migration.k8s.io/v1alpha1/storagestates")
    if status not in (200, 404):
        raise RuntimeError(f"deleting the StorageState records: {status} {str(body)[:300]}")


def measure(module, params, writers, rtt):
    from ansible_collections.kubeupgrade.storage.plugins.module_utils._http import transport
    from ansible_collections.kubeupgrade.storage.plugins.module_utils._remember import storage_state_io

    send = transport.DirectTransport.send

    def distant(self, *args, **kwargs):
        time.sleep(rtt)
        return send(self, *args, **kwargs)

    default = storage_state_io.RECORD_WRITERS
    storage_state_io.RECORD_WRITERS, transport.DirectTransport.send = writers, distant
    try:
        started = time.perf_counter()
        result = run_module(module, params)
        seconds = time.perf_counter() - started
    finally:
        storage_state_io.RECORD_WRITERS, transport.DirectTransport.send = default, send
    if result.get("failed"):
        raise RuntimeError(f"storage_state failed: {result.get('msg')}")
    return seconds, result


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--rtt-ms", type=float, nargs="+", default=[0.0, 10.0])
    args = parser.parse_args()
    from realcp.plane import ControlPlane

    from ansible_collections.kubeupgrade.storage.plugins.module_utils._remember import storage_state_io
    from ansible_collections.kubeupgrade.storage.plugins.modules import storage_state

    side_by_side = storage_state_io.RECORD_WRITERS
    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        plane = ControlPlane(os.path.join(workdir, "plane"), releases=["1.32"]).start()
        try:
            params = {"endpoints": plane.endpoints, "kubeconfig": plane.kubeconfig}
            measure(storage_state, dict(params, install_crd=True), side_by_side, 0.0)  # the CRD; not timed
            for rtt_ms in args.rtt_ms:
                times = {}
                for _round in range(args.repeat):
                    for writers in (1, side_by_side):
                        delete_records(plane)
                        first, result = measure(storage_state, params, writers, rtt_ms / 1000)
                        again = measure(storage_state, params, writers, rtt_ms / 1000)[0]
                        times.setdefault(("first", writers), []).append(first)
                        times.setdefault(("again", writers), []).append(again)
                        records = len(result["records"])
                for (case, writers), seconds in sorted(times.items()):
                    rows.append({"case": case, "writers": writers, "rtt_ms": rtt_ms, "records": records,
                                 "seconds": statistics.median(seconds), "all_seconds": [round(s, 3) for s in seconds]})
                    print(json.dumps(rows[-1]), flush=True)
        finally:
            plane.stop_all()
    print("\n| rtt ms | case | records | one after the other s | side by side s | × |")
    print("| ---: | --- | ---: | ---: | ---: | ---: |")
    for rtt_ms in args.rtt_ms:
        for case in ("first", "again"):
            one = next(r for r in rows if r["rtt_ms"] == rtt_ms and r["case"] == case and r["writers"] == 1)
            many = next(r for r in rows if r["rtt_ms"] == rtt_ms and r["case"] == case and r["writers"] == side_by_side)
            print(f"| {rtt_ms:g} | {case} | {one['records']} | {one['seconds']:.2f} | {many['seconds']:.2f} "
                  f"| {one['seconds'] / many['seconds']:.2f} |")
    path = os.path.join(HERE, "results", f"records-{time.strftime('%Y%m%d-%H%M%S')}.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        json.dump({"rows": rows, "loadavg": os.getloadavg()}, handle, indent=2)
    print(f"JSON: {path}")


if __name__ == "__main__":
    main()
