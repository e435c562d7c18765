# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Requests per second of the simulated control plane with 100,000 stored configmaps: GET, LIST chunks of 500 and
PUT, over keep-alive HTTPS connections with 1 and 8 client threads. Run: python benchmarks/bench_simulator.py"""

import http.client
import json
import ssl
import tempfile
import threading
import time
import urllib.parse

from _common import on_path

on_path("tests/simulator")
from apisim.harness import ControlPlane  # noqa: E402

OBJECTS = 100_000
DURATION = 3.0


def _connection(plane):
    url = urllib.parse.urlsplit(plane.endpoints[0])
    context = ssl.create_default_context(cafile=plane.ca_file)
    return http.client.HTTPSConnection(url.hostname, url.port, context=context)


def _worker(plane, operation, deadline, counts, index):
    connection = _connection(plane)
    headers = {"Authorization": f"Bearer {plane.token}", "Content-Type": "application/json"}
    done = 0
    token = None
    while time.monotonic() < deadline:
        name = f"cm-{(index * 7919 + done * 13) % OBJECTS:06d}"
        path = f"/api/v1/namespaces/bulk/configmaps/{name}"
        if operation == "GET":
            connection.request("GET", path, headers=headers)
        elif operation == "LIST":
            query = f"limit=500&continue={token}" if token else "limit=500"
            connection.request("GET", f"/api/v1/namespaces/bulk/configmaps?{query}", headers=headers)
        else:
            body = {"metadata": {"name": name}, "data": {"index": name, "n": str(done)}}
            connection.request("PUT", path, body=json.dumps(body), headers=headers)
        response = connection.getresponse()
        payload = response.read()
        if response.status != 200:
            raise RuntimeError(f"{operation} {response.status}: {payload[:200]!r}")
        if operation == "LIST":
            token = json.loads(payload)["metadata"].get("continue")
        done += 1
    counts[index] = done
    connection.close()


def measure(plane, operation, threads):
    counts = [0] * threads
    deadline = time.monotonic() + DURATION
    workers = [threading.Thread(target=_worker, args=(plane, operation, deadline, counts, i)) for i in range(threads)]
    start = time.monotonic()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return sum(counts) / (time.monotonic() - start)


def main():
    with tempfile.TemporaryDirectory() as workdir, ControlPlane(workdir, apiservers=1, seed=f"bulk:{OBJECTS}") as plane:
        print(f"{OBJECTS} configmaps stored; {DURATION:.0f} s per cell; keep-alive HTTPS; 1 apiserver process")
        print(f"{'operation':<22}{'1 thread req/s':>16}{'8 threads req/s':>17}")
        for operation, label in (("GET", "GET"), ("LIST", "LIST chunk (500)"), ("PUT", "PUT")):
            print(f"{label:<22}{measure(plane, operation, 1):>16.0f}{measure(plane, operation, 8):>17.0f}", flush=True)


if __name__ == "__main__":
    main()
