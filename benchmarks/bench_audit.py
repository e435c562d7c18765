# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark the etcd audit against ``etcdctl get --prefix <prefix> -w json > /dev/null``, same etcd, same run.

For each key count, a fresh real etcd (Debian's etcd-server, loopback, plain HTTP) is filled with ConfigMaps in the
protobuf envelope (about 400 bytes each, a tenth of them in an old version), then:
  etcdctl  ``etcdctl get --prefix /registry/ -w json > /dev/null`` (gRPC, one response with every key, base64)
  gateway  the same pages the audit requests from etcd's JSON gateway (``POST /v3/kv/range``), read and parsed,
           nothing decoded: the floor for any reader of the JSON gateway
  audit    the module's runner (``--page-size``, no throttle) in a child process, decoding every value
Reported: seconds, the audit's speed as a ratio of etcdctl's (goal >= 0.5) and of the bare gateway scan's (the
audit's own overhead), and the audit process's peak RSS, with the ratio of the largest count's peak to the
smallest's (flat = about 1).

    .venv/bin/python benchmarks/bench_audit.py --counts 10000 100000
Not a test: nothing is asserted.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests"))
sys.path.insert(0, os.path.join(REPO, "collections"))
sys.path.insert(0, os.path.join(REPO, "tests", "unit", "plugins", "module_utils", "audit"))


def _child(url, prefix, page_size):
    from ansible_collections.kubeupgrade.storage.plugins.module_utils._audit import runner

    started = time.perf_counter()
    result = runner.audit(runner.build_request({"etcd_endpoints": [url], "etcd_prefix": prefix, "pages_per_second": 0,
                                                "page_size": int(page_size), "readable_versions": {"configmaps": ["v1"]}}))
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"seconds": seconds, "peak_kib": peak, "keys": result["keys_scanned"],
                      "not_readable": result["not_readable"]}))


def _fill(server, count):
    from audit_values import protobuf_value

    payload = b"\x0a" + bytes([120]) + b"x" * 120 + b"\x12" + bytes([120]) + b"d" * 120 + b"\x1a\x60" + b"z" * 96
    current = protobuf_value("v1", "ConfigMap", raw=payload)
    old = protobuf_value("v0", "ConfigMap", raw=payload)  # a version no apiserver reads: counted as not readable
    server.put_many(((f"/registry/configmaps/bulk/cm-{i:07d}", old if i % 10 == 0 else current) for i in range(count)), batch=128)


def _etcdctl(server, prefix):
    started = time.perf_counter()
    with open(os.devnull, "wb") as devnull:
        subprocess.run(["etcdctl", "get", "--prefix", prefix, "-w", "json"], env=server.etcdctl_env(), stdout=devnull, check=True)
    return time.perf_counter() - started


def _audit(server, prefix, page_size):
    output = subprocess.run([sys.executable, __file__, "--child", server.url, prefix, str(page_size)],
                            capture_output=True, check=True, text=True)
    return json.loads(output.stdout)


def _gateway(server, prefix, page_size):
    """Page through the JSON gateway exactly as the audit does, without decoding anything."""
    import base64

    import urllib3

    pool = urllib3.PoolManager(maxsize=1)
    key, end, keys = prefix.encode(), prefix[:-1].encode() + bytes([prefix.encode()[-1] + 1]), 0
    started = time.perf_counter()
    revision = None
    while True:
        body = {"key": base64.b64encode(key).decode(), "range_end": base64.b64encode(end).decode(), "limit": page_size}
        if revision:
            body["revision"] = revision
        page = json.loads(pool.request("POST", server.url + "/v3/kv/range", body=json.dumps(body).encode()).data)
        revision = revision or int(page["header"]["revision"])
        kvs = page.get("kvs") or []
        keys += len(kvs)
        if not page.get("more"):
            return time.perf_counter() - started
        key = base64.b64decode(kvs[-1]["key"]) + b"\x00"


def measure(count, workdir, page_size):
    from etcd_fixture import EtcdServer

    with EtcdServer(os.path.join(workdir, f"etcd-{count}")) as server:
        _fill(server, count)
        prefix = "/registry/"
        _etcdctl(server, prefix)  # warm etcd's caches once for both
        etcdctl = min(_etcdctl(server, prefix) for _unused in range(2))
        gateway = min(_gateway(server, prefix, page_size) for _unused in range(2))
        audits = [_audit(server, prefix, page_size) for _unused in range(2)]
        audit = min(audits, key=lambda a: a["seconds"])
        assert audit["keys"] == count and audit["not_readable"] == (count + 9) // 10, audit
        return {"count": count, "etcdctl_s": etcdctl, "gateway_s": gateway, "audit_s": audit["seconds"],
                "peak_mib": audit["peak_kib"] / 1024}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--counts", type=int, nargs="+", default=[10000, 100000])
    parser.add_argument("--page-size", type=int, default=500)
    parser.add_argument("--child", nargs=3, metavar=("URL", "PREFIX", "PAGE_SIZE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return _child(*args.child)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-audit-") as workdir:
        for count in args.counts:
            rows.append(measure(count, workdir, args.page_size))
    print(f"page size {args.page_size}")
    print(f"{'keys':>8} {'etcdctl s':>10} {'gateway s':>10} {'audit s':>9} {'audit keys/s':>13} {'vs etcdctl':>11} "
          f"{'vs gateway':>11} {'audit peak RSS MiB':>19}")
    for row in rows:
        print(f"{row['count']:>8} {row['etcdctl_s']:>10.2f} {row['gateway_s']:>10.2f} {row['audit_s']:>9.2f} "
              f"{row['count'] / row['audit_s']:>13.0f} {row['etcdctl_s'] / row['audit_s']:>11.2f} "
              f"{row['gateway_s'] / row['audit_s']:>11.2f} {row['peak_mib']:>19.1f}")
    if len(rows) > 1:
        print(f"peak RSS ratio {rows[-1]['count']} keys / {rows[0]['count']} keys: {rows[-1]['peak_mib'] / rows[0]['peak_mib']:.2f}")


if __name__ == "__main__":
    main()
