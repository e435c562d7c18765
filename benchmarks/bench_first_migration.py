# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark the first full migration of a freshly created simulated cluster: ``backend: intree`` against the defaults.

For each variant a fresh simulated control plane (the harness's defaults: three apiservers on 1.32, TLS, the
in-tree controller's ``migrator_delay``) is seeded with ``demo`` and ``bulk:N`` configmaps; the ``storage_state``
module creates the StorageState records (all new, so ``[Unknown, current]``), then ``storage_migration`` with
``select: from_records`` migrates every resource whose record is not ``[current]``:
  intree    ``backend: intree`` (the former default), every other option at its default
  defaults  every option at its default (``backend: auto``, the client-side migrator; ``parallel_resources``)
Both modules run in-process, through their real ``main()``, as the integration tests run them. Only the
``storage_migration`` task is timed. Reported: seconds, resources selected / succeeded, objects those resources
held (counted in the simulator's store), requests and bytes the apiservers served, and the ratio of the seconds.
The kubeconfig's server is the simulator's front address (a round-robin TCP pump in the control plane's process),
as in the tests: every client request pays for it, while the in-tree controller runs inside the control plane and
does not. ``migrations[].seconds`` per resource is printed for the slowest three.

    PYTHONPATH=collections:tests/simulator python benchmarks/bench_first_migration.py --bulk 2000
Not a test: nothing is asserted.
"""

import argparse
import json
import os
import tempfile
import time

from _common import on_path, run_module

on_path("collections", "tests/simulator")

VARIANTS = (("intree", {"backend": "intree"}), ("defaults", {}))


def first_migration(variant_args, bulk, workdir):
    """Fresh plane, records from ``storage_state``, then one timed ``storage_migration`` of ``from_records``."""
    from apisim.harness import ControlPlane

    from ansible_collections.kubeupgrade.storage.plugins.modules import storage_migration, storage_state

    with ControlPlane(os.path.join(workdir, "plane")) as plane:
        plane.admin.seed("demo")
        if bulk:
            plane.admin.seed(f"bulk:{bulk}")
        connection = {"kubeconfig": plane.kubeconfig, "endpoints": plane.endpoints}
        result = run_module(storage_state, connection)
        if result.get("failed"):
            raise RuntimeError(f"storage_state failed: {result.get('msg')}")
        records = len(result["records"])
        params = dict(connection, select="from_records", checkpoint_dir=os.path.join(workdir, "checkpoints"),
                      **variant_args)
        plane.admin.reset_stats()
        started = time.perf_counter()
        result = run_module(storage_migration, params)
        seconds = time.perf_counter() - started
        failed = bool(result.get("failed"))
        served = plane.admin.stats()["apiservers"]
        migrations = result.get("migrations") or []
        objects = sum(len(plane.admin.stored_objects(m["resource"])) for m in migrations)
        return {"seconds": seconds, "failed": failed, "msg": result.get("msg"), "records": records,
                "resources": len(migrations),
                "succeeded": sum(1 for m in migrations if m.get("status") == "succeeded"),
                "skipped": len(result.get("skipped_resources") or []), "objects": objects,
                "backend": (result.get("backend") or {}).get("backend"),
                "backends": _count(m.get("backend") for m in migrations),
                "slowest": [f"{m['resource']} {m.get('seconds') or 0:.1f}s"
                            for m in sorted(migrations, key=lambda m: -(m.get("seconds") or 0))[:3]],
                "requests": sum(a["requests"] for a in served),
                "bytes": sum(a["bytes_in"] + a["bytes_out"] for a in served),
                "not_succeeded": [f"{m['resource']}: {m.get('error') or m.get('status')}"
                                  for m in migrations if m.get("status") != "succeeded"]}


def _count(values):
    counts = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return counts


def run_all(bulk):
    """Every variant on its own fresh plane; returns the rows and prints them as they come."""
    rows = []
    for name, variant_args in VARIANTS:
        with tempfile.TemporaryDirectory() as workdir:
            row = dict(first_migration(variant_args, bulk, workdir), variant=name)
        rows.append(row)
        shown = {k: v for k, v in row.items() if k != "msg" or row["failed"]}
        print(json.dumps(shown), flush=True)
    return rows


def print_table(rows, bulk):
    base = rows[0]["seconds"] if rows and rows[0]["seconds"] else None
    print()
    print(f"First full migration (select: from_records) of a fresh simulated cluster: demo + bulk:{bulk}")
    print("| variant | backend | records | resources migrated | succeeded | skipped | objects | seconds "
          "| × intree | requests | MiB served | task failed |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for row in rows:
        ratio = f"{row['seconds'] / base:.3f}" if base else "-"
        print(f"| {row['variant']} | {row['backend']} | {row['records']} | {row['resources']} | {row['succeeded']} "
              f"| {row['skipped']} | {row['objects']} | {row['seconds']:.1f} | {ratio} | {row['requests']} "
              f"| {row['bytes'] / 1048576:.1f} | {'yes' if row['failed'] else 'no'} |")
    for row in rows:
        print(f"- {row['variant']}: resources by backend {row['backends']}; slowest {', '.join(row['slowest'])}")
        for line in row["not_succeeded"]:
            print(f"- {row['variant']}: not succeeded: {line}")
        if row["failed"]:
            print(f"- {row['variant']}: task failed: {row['msg']}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bulk", type=int, default=2000, help="bulk configmaps seeded next to the demo data")
    args = parser.parse_args()
    print_table(run_all(args.bulk), args.bulk)


if __name__ == "__main__":
    main()
