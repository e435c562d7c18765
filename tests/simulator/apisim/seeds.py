"""Named, deterministic data sets: "demo" (what the demo and scenario tests start from) and "bulk:N".

The demo's release switch 1.32 -> 1.33 changes the storage version of coordination.k8s.io/leasecandidates from
v1alpha2 to v1beta1 (the release data's only namespaced built-in whose storage version changes there), so the
seed stores LeaseCandidates encoded in v1alpha2.
"""

import json
import os

from .store import Entry

MANIFESTS = os.path.join(os.path.dirname(__file__), "manifests")


def load_manifest(name):
    with open(os.path.join(MANIFESTS, name)) as handle:
        return json.load(handle)


def _ensure_namespace(plane, api, name):
    plane.ensure(api, "", "v1", "namespaces", None, {"metadata": {"name": name}})


def _bulk(plane, count):
    """``count`` configmaps in namespace "bulk", written straight into the store for speed."""
    api = plane.apiservers[0].api
    _ensure_namespace(plane, api, "bulk")
    rtype = api.resolve("", "v1", "configmaps")
    store = plane.store
    with store.lock:
        for i in range(count):
            name = f"cm-{i:06d}"
            rv = store.next_rv()
            obj = {"metadata": {"name": name, "namespace": "bulk", "uid": f"00000000-0000-4000-8000-{i:012d}",
                                "resourceVersion": str(rv), "creationTimestamp": "2026-01-01T00:00:00Z",
                                "labels": {"app": "bulk"}},
                   "data": {"index": str(i), "payload": "x" * 64}}
            store.put(rtype.bucket, Entry("bulk", name, "v1", rv, obj))
    return count


def _demo(plane):
    api = plane.apiservers[0].api
    for namespace in ("default", "demo"):
        _ensure_namespace(plane, api, namespace)
    for i in range(3):
        plane.ensure(api, "", "v1", "configmaps", "demo", {
            "metadata": {"name": f"settings-{i}", "labels": {"app": "demo"}}, "data": {"index": str(i)}})
        plane.ensure(api, "", "v1", "secrets", "demo", {
            "metadata": {"name": f"token-{i}"}, "type": "Opaque", "data": {"token": "c2VjcmV0"}})
    for name in ("web", "worker"):
        plane.ensure(api, "apps", "v1", "deployments", "demo", {
            "metadata": {"name": name, "labels": {"app": name}},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}}, "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": name, "image": "registry.k8s.io/pause:3.10"}]}}}})
    crd = load_manifest("widgets-crd.json")
    if plane.store.get(("apiextensions.k8s.io", "customresourcedefinitions"), None, crd["metadata"]["name"]) is None:
        plane.admin_put_raw("customresourcedefinitions.apiextensions.k8s.io", None, crd["metadata"]["name"],
                            "apiextensions.k8s.io/v1beta1", crd)
    for i in range(4):
        version = "v1alpha1" if i < 2 else "v1"
        plane.admin_put_raw("widgets.example.com", "demo", f"widget-{i}", f"example.com/{version}",
                            {"metadata": {"generation": 1}, "spec": {"color": "blue", "size": i}})
    for i in range(2):
        plane.admin_put_raw("leasecandidates.coordination.k8s.io", "kube-system", f"candidate-{i}",
                            "coordination.k8s.io/v1alpha2", {"spec": {
                                "leaseName": "kube-controller-manager", "binaryVersion": "1.32.0",
                                "emulationVersion": "1.32", "strategy": "OldestEmulationVersion"}})
    return "demo"


def seed(plane, name):
    if name == "demo":
        return _demo(plane)
    if name.startswith("bulk:"):
        return _bulk(plane, int(name.split(":", 1)[1]))
    raise ValueError(f"unknown seed {name!r}; known: demo, bulk:N")
