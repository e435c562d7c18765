# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pre-flight cost on 3 apiservers serving the 1.37 profile plus 100 CRDs: requests per endpoint (from the
simulator's admin stats), wall time, and the ratio against a naive sequential fetch of every group/version
one request at a time. Not a test: it prints a table. Run: python benchmarks/bench_preflight.py"""

import statistics
import tempfile
import time

from _common import on_path

on_path("collections", "tests/simulator")
from apisim.harness import ControlPlane  # noqa: E402

from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.client import ApiClient  # noqa: E402
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.settings import ConnectionSettings  # noqa: E402
from ansible_collections.kubeupgrade.storage.plugins.module_utils._judge.engine import judge  # noqa: E402
from ansible_collections.kubeupgrade.storage.plugins.module_utils._judge.model import Target  # noqa: E402
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe import discovery  # noqa: E402
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.apiserver_io import observe  # noqa: E402
from ansible_collections.kubeupgrade.storage.plugins.module_utils.profiles import load_profiles  # noqa: E402

CRDS = 100
ROUNDS = 5


def crd(index):
    group = f"bench{index:03d}.example.com"
    schema = {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"things.{group}"},
            "spec": {"group": group, "scope": "Namespaced",
                     "names": {"plural": "things", "singular": "thing", "kind": "Thing", "listKind": "ThingList"},
                     "versions": [{"name": "v1", "served": True, "storage": True, "schema": schema}]}}


def preflight(plane, profiles):
    """What storage_version_check does: observe every endpoint (concurrently) and judge against 1.37."""
    front = ApiClient(ConnectionSettings.from_params({"kubeconfig": plane.kubeconfig}))
    clients = [front.for_endpoint(url) for url in plane.endpoints]
    observation = observe(clients, profiles, include=("crds", "storage_states", "storage_versions"), cluster_client=front)
    judgement = judge(observation, Target(release=profiles.get("1.37")), profiles)
    return observation, judgement


def naive(plane):
    """Baseline: every endpoint, every group/version, one request at a time, a new connection setup per endpoint."""
    for url in plane.endpoints:
        client = ApiClient(ConnectionSettings.from_params({"kubeconfig": plane.kubeconfig}), url)
        client.get("/version")
        api, apis = client.get("/api"), client.get("/apis")
        for _group, _version, path in discovery.group_versions(api, apis):
            client.get(path)


def per_endpoint(stats):
    return [a["requests"] for a in stats["apiservers"]]


def main():
    profiles = load_profiles()
    with tempfile.TemporaryDirectory() as workdir, ControlPlane(workdir, apiservers=3, releases="1.37") as plane:
        front = ApiClient(ConnectionSettings.from_params({"kubeconfig": plane.kubeconfig}))
        for index in range(CRDS):
            front.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd(index))
        gvs = discovery.group_versions(front.get("/api"), front.get("/apis"))
        preflight(plane, profiles)  # warm up (TLS sessions, imports)

        times, judge_times, requests = [], [], None
        for _unused in range(ROUNDS):
            plane.admin.reset_stats()
            start = time.perf_counter()
            observation, judgement = preflight(plane, profiles)
            times.append(time.perf_counter() - start)
            requests = per_endpoint(plane.admin.stats())
            start = time.perf_counter()
            judge(observation, Target(release=profiles.get("1.37")), profiles)
            judge_times.append(time.perf_counter() - start)
        naive_times, naive_requests = [], None
        for _unused in range(ROUNDS):
            plane.admin.reset_stats()
            start = time.perf_counter()
            naive(plane)
            naive_times.append(time.perf_counter() - start)
            naive_requests = per_endpoint(plane.admin.stats())

    pre, base = statistics.median(times), statistics.median(naive_times)
    resources = len(observation.endpoints[0].resources)
    print(f"pre-flight benchmark: 3 apiservers on 1.37 + {CRDS} CRDs, {len(gvs)} group/versions, {resources} persisted "
          f"resources, {len(judgement.resources)} verdicts (median of {ROUNDS})")
    print("| run | requests per endpoint | budget 4 + group/versions | wall time (s) | ratio vs naive |")
    print("| --- | --- | --- | --- | --- |")
    print(f"| pre-flight (observe + judge) | {requests} | {4 + len(gvs)} | {pre:.3f} | {pre / base:.2f} |")
    observe_only = pre - statistics.median(judge_times)
    print(f"| of which observe (discovery + cluster reads) | | | {observe_only:.3f} | {observe_only / base:.2f} |")
    print(f"| naive sequential discovery only | {naive_requests} | - | {base:.3f} | 1.00 |")
    print("cluster-wide reads (CRDs, StorageStates) go through the front, which the simulator counts on apiserver 0")


if __name__ == "__main__":
    main()
