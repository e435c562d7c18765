# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Helpers of the real-binary scenarios (no tests here): an inventory for a real control plane
(tests/realcp), the objects each release stores, and reads of every object through every apiserver.

The per-host upgrade and rollback tasks (realcp_tasks/) restart a host's kube-apiserver on another
release's binary through ``python -m realcp``, as kubeadm replaces the static pod on a real host.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
TASKS = Path(__file__).resolve().parent / "realcp_tasks"
PLAYBOOKS = REPO / "playbooks"

SCHEMA = {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}
GADGETS_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "gadgets.example.com"},
    "spec": {"group": "example.com", "scope": "Namespaced",
             "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList"},
             "versions": [{"name": "v1alpha1", "served": True, "storage": False, "schema": SCHEMA},
                          {"name": "v1", "served": True, "storage": True, "schema": SCHEMA}]},
}


def write_inventory(plane, tmp_path, host_vars=None) -> Path:
    """Hosts cp1..cpN, one per apiserver of ``plane`` (each with its own URL), on the local connection;
    ``host_vars`` adds variables per host name."""
    names = [f"cp{i + 1}" for i in range(len(plane.endpoints))]
    inventory = {"kube_control_plane": {
        "hosts": {name: {"kubeupgrade_apiserver_url": plane.endpoints[i], "kubeupgrade_realcp_index": i,
                         **(host_vars or {}).get(name, {})}
                  for i, name in enumerate(names)},
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                 "kubeupgrade_connection": {"kubeconfig": str(plane.kubeconfig)},
                 "kubeupgrade_realcp_state": str(plane.state_file),
                 "kubeupgrade_realcp_pythonpath": str(REPO / "tests")}}}
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump(inventory), encoding="utf-8")
    return path


def run(ansible_playbook, name, plane, tmp_path, inventory=None, **extra):
    """``ansible-playbook`` of a shipped playbook against ``plane``, with the realcp per-host tasks."""
    values = {"kubeupgrade_report_dir": str(tmp_path / "reports"),
              "kubeupgrade_host_upgrade_tasks": str(TASKS / "upgrade_apiserver.yml"),
              "kubeupgrade_host_rollback_tasks": str(TASKS / "rollback_apiserver.yml"),
              "kubeupgrade_wait_delay": 2, "kubeupgrade_wait_retries": 45}
    values.update(extra)
    if "kubeupgrade_etcd" in extra:  # upgrade.yml's snapshot before the first host, in the test's directory
        values.setdefault("kubeupgrade_snapshot", {"dest": str(tmp_path / "etcd-before-upgrade.db"), "work_dir": str(tmp_path)})
    return ansible_playbook(PLAYBOOKS / name, inventory=inventory or write_inventory(plane, tmp_path), extra_vars=values)


def explain(result) -> str:
    return f"rc={result.rc}\n{result.stdout[-8000:]}\n{result.stderr[-3000:]}"


def report(tmp_path, name) -> dict:
    return json.loads((tmp_path / "reports" / f"{name}.json").read_text(encoding="utf-8"))


def create(plane, path, obj, index=0):
    status, body = plane.request("POST", path, obj, index=index)
    assert status == 201, f"POST {path}: {status} {body}"
    return body


def create_flow_schema_and_policy(plane, flowcontrol_version, admission_version):
    """A FlowSchema and a ValidatingAdmissionPolicy named app, written in the given versions."""
    flow_spec = {"priorityLevelConfiguration": {"name": "global-default"}, "matchingPrecedence": 5000}
    create(plane, f"/apis/flowcontrol.apiserver.k8s.io/{flowcontrol_version}/flowschemas",
           {"metadata": {"name": "app"}, "spec": flow_spec})
    rule = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["configmaps"]}
    policy_spec = {"validations": [{"expression": "true"}], "matchConstraints": {"resourceRules": [rule]}}
    create(plane, f"/apis/admissionregistration.k8s.io/{admission_version}/validatingadmissionpolicies",
           {"metadata": {"name": "app"}, "spec": policy_spec})


def seed_gadgets(plane, namespace):
    """The gadgets CRD (v1alpha1 served, v1 stored) and one custom resource written through each version."""
    create(plane, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", GADGETS_CRD)
    wait_for(lambda: plane.request("GET", "/apis/example.com/v1/gadgets")[0] == 200, "the gadgets CRD to be served")
    create(plane, f"/apis/example.com/v1alpha1/namespaces/{namespace}/gadgets",
           {"apiVersion": "example.com/v1alpha1", "kind": "Gadget", "metadata": {"name": "old"}, "spec": {"size": 1}})
    create(plane, f"/apis/example.com/v1/namespaces/{namespace}/gadgets",
           {"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "new"}, "spec": {"size": 2}})


GADGETS_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gadgets.example.com"


def gadgets_stored_as(plane, storage, namespace="app"):
    """The gadgets CRD storing ``storage`` (v1alpha1 or v1), served, with ``namespace``; switched again later with
    ``switch_gadgets_storage``."""
    crd = json.loads(json.dumps(GADGETS_CRD))
    for version in crd["spec"]["versions"]:
        version["storage"] = version["name"] == storage
    create(plane, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    wait_for(lambda: plane.request("GET", "/apis/example.com/v1alpha1/gadgets")[0] == 200, "the gadgets CRD to be served")
    create(plane, "/api/v1/namespaces", {"metadata": {"name": namespace}})


def switch_gadgets_storage(plane, storage) -> dict:
    """The gadgets CRD's storage version switched to ``storage``; the CRD as the apiserver answered the PUT."""
    crd = plane.get(GADGETS_PATH)
    for version in crd["spec"]["versions"]:
        version["storage"] = version["name"] == storage
    status, answer = plane.request("PUT", GADGETS_PATH, crd)
    assert status == 200, answer
    return answer


def seed_132(plane, namespace="app"):
    """Objects in the versions 1.32 stores: DRA, flowcontrol, admissionregistration, a CRD with two versions, core."""
    create(plane, "/api/v1/namespaces", {"metadata": {"name": namespace}})
    create(plane, f"/api/v1/namespaces/{namespace}/configmaps", {"metadata": {"name": "settings"}, "data": {"k": "v"}})
    create(plane, f"/api/v1/namespaces/{namespace}/secrets", {"metadata": {"name": "token"}, "stringData": {"t": "s3cret"}})
    create(plane, "/apis/resource.k8s.io/v1beta1/deviceclasses", {"metadata": {"name": "gpu"}, "spec": {}})
    create(plane, f"/apis/resource.k8s.io/v1beta1/namespaces/{namespace}/resourceclaims",
           {"metadata": {"name": "claim"}, "spec": {"devices": {"requests": [{"name": "gpu", "deviceClassName": "gpu"}]}}})
    create_flow_schema_and_policy(plane, "v1", "v1")
    seed_gadgets(plane, namespace)


def _ca_pem() -> str:
    from cryptography.hazmat.primitives import serialization
    from etcd_fixture import make_ca
    return make_ca("bundle-ca")[1].public_bytes(serialization.Encoding.PEM).decode()


def seed_135(plane, namespace="app"):
    """Objects in every version 1.35 stores, with the beta APIs an operator enables: storage v1beta1
    VolumeAttributesClasses (1.36 stores v1), DRA v1 and v1beta2, admission policies (validating v1, mutating v1beta1),
    ClusterTrustBundles v1beta1, a CRD with two versions, and core objects (the Secret encrypted when the plane is).
    Returns the collection paths the objects can be listed under."""
    create(plane, "/api/v1/namespaces", {"metadata": {"name": namespace}})
    create(plane, f"/api/v1/namespaces/{namespace}/configmaps", {"metadata": {"name": "settings"}, "data": {"k": "v"}})
    create(plane, f"/api/v1/namespaces/{namespace}/secrets", {"metadata": {"name": "token"}, "stringData": {"t": "s3cret"}})
    create(plane, "/apis/storage.k8s.io/v1beta1/volumeattributesclasses",
           {"metadata": {"name": "gold"}, "driverName": "csi.example.com", "parameters": {"iops": "3000"}})
    create(plane, "/apis/resource.k8s.io/v1/deviceclasses", {"metadata": {"name": "gpu"}, "spec": {}})
    create(plane, f"/apis/resource.k8s.io/v1beta2/namespaces/{namespace}/resourceclaims", {"metadata": {"name": "claim"}, "spec": {
        "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}}})
    create_flow_schema_and_policy(plane, "v1", "v1")
    rule = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["configmaps"]}
    create(plane, "/apis/admissionregistration.k8s.io/v1beta1/mutatingadmissionpolicies", {"metadata": {"name": "label"}, "spec": {
        "matchConstraints": {"resourceRules": [rule]}, "failurePolicy": "Ignore", "reinvocationPolicy": "Never",
        "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {
            "expression": 'Object{metadata: Object.metadata{labels: {"seen": "yes"}}}'}}]}})
    create(plane, "/apis/certificates.k8s.io/v1beta1/clustertrustbundles",
           {"metadata": {"name": "example"}, "spec": {"trustBundle": _ca_pem()}})
    seed_gadgets(plane, namespace)
    return SEEDED_135


# Where seed_135's objects are listed, and how many each holds: read back through every apiserver after a roll.
SEEDED_135 = {
    "/api/v1/namespaces/app/configmaps": ["settings"], "/api/v1/namespaces/app/secrets": ["token"],
    "/apis/storage.k8s.io/v1/volumeattributesclasses": ["gold"], "/apis/resource.k8s.io/v1/deviceclasses": ["gpu"],
    "/apis/resource.k8s.io/v1/namespaces/app/resourceclaims": ["claim"],
    "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas": ["app"],
    "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies": ["app"],
    "/apis/admissionregistration.k8s.io/v1beta1/mutatingadmissionpolicies": ["label"],
    "/apis/certificates.k8s.io/v1beta1/clustertrustbundles": ["example"],
    "/apis/example.com/v1/namespaces/app/gadgets": ["new", "old"],
}


def seeded_objects_read(plane, seeded=None) -> dict:
    """``{apiserver index: [what is missing or unreadable]}`` for every apiserver: each seeded object is read back
    (a 429 "storage is (re)initializing" right after a restart is waited out, up to 30 s)."""
    found = {}
    for index in range(len(plane.endpoints)):
        problems = []
        for path, names in (seeded or SEEDED_135).items():
            deadline = time.monotonic() + 30
            status, body = plane.request("GET", path, index=index)
            while status == 429 and time.monotonic() < deadline:
                time.sleep(0.5)
                status, body = plane.request("GET", path, index=index)
            if status != 200:
                problems.append(f"{path}: {status} {str(body)[:200]}")
                continue
            have = {item["metadata"]["name"] for item in body.get("items") or []}
            problems += [f"{path}/{name}: missing" for name in names if name not in have]
        found[index] = problems
    return found


# Today's roll: the releases, and the etcd line kubeadm ships with them.
TODAY_FROM, TODAY_TO, TODAY_ETCD = "1.35", "1.36", "3.5"


def rehearsal_flags(release) -> dict:
    """The rehearsal's feature_gates and runtime_config options for ``release``: the flags the test plane gives it."""
    from realcp.plane import release_flags
    flags = release_flags(release)
    return {"feature_gates": ",".join(f"{k}={v}" for k, v in sorted(flags["feature_gates"].items())),
            "runtime_config": ",".join(f"{k}={v}" for k, v in sorted(flags["runtime_config"].items()))}


def etcd_extra(plane, tmp_path, target=None):
    """upgrade.yml's variables for the etcd settings read from ``plane``: the audit, the snapshot taken and proved
    with the plane's own etcd (its etcdutl), and, with ``target``, the rehearsal with that release's binary."""
    from realcp.plane import binary
    extra = {"kubeupgrade_etcd": plane.etcd_settings, "kubeupgrade_etcd_become": False,
             "kubeupgrade_snapshot": {"dest": str(tmp_path / f"etcd-before-{target or 'upgrade'}.db"), "work_dir": str(tmp_path),
                                      "etcd_binary": plane.etcd.binary}}
    if target:
        extra["kubeupgrade_rehearsal"] = {"apiserver_binary": binary(target), "apiserver_manifest": "", "work_dir": str(tmp_path),
                                          "etcd_binary": plane.etcd.binary, **rehearsal_flags(target)}
    return extra


def wait_for(condition, what, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f} s waiting for {what}"
        time.sleep(0.3)


def versions(plane) -> list:
    return [plane.request("GET", "/version", index=i)[1]["gitVersion"] for i in range(len(plane.endpoints))]


def unreadable(plane, index) -> list:
    """Every LIST through apiserver ``index`` that does not answer 200, over every resource its discovery
    serves: a stored object it cannot decode fails the LIST of its resource (500 no kind is registered)."""
    failures = []
    for path in _list_paths(plane, index):
        status, body = plane.request("GET", path + "?limit=500", index=index)
        if status != 200:
            failures.append(f"{path}: {status} {str(body)[:200]}")
    return failures


def _list_paths(plane, index):
    status, api = plane.request("GET", "/api", index=index)
    assert status == 200, api
    status, apis = plane.request("GET", "/apis", index=index)
    assert status == 200, apis
    group_versions = [f"/api/{v}" for v in api["versions"]]
    group_versions += [f"/apis/{v['groupVersion']}" for g in apis["groups"] for v in g["versions"]]
    for gv_path in group_versions:
        status, doc = plane.request("GET", gv_path, index=index)
        if status != 200:
            continue  # another release's version (mixed plane) or an APIService without a backend
        for item in doc.get("resources") or []:
            if "/" not in item["name"] and "list" in item.get("verbs", []):
                yield f"{gv_path}/{item['name']}"


NO_KIND = "is registered for version"  # of the 500 an apiserver answers for an object it cannot decode
VERSIONS = ("v1", "v1beta3", "v1beta2", "v1beta1", "v1alpha3", "v1alpha2", "v1alpha1")  # GA first, then newest


def served(plane, index, groups):
    """``{resource: (group, group/version path, namespaced)}`` for the resources of ``groups`` that apiserver
    ``index`` itself serves, in the newest version it serves them in.

    Probed version by version, not read from ``/apis``: on a mixed plane the newer apiserver deletes the APIServices
    of the versions it does not have, so the older one no longer lists its own alpha and beta versions, and lists
    the newer ones that it answers 404 for, although it still serves its own."""
    found = {}
    for group in groups:
        for version in VERSIONS:
            status, doc = plane.request("GET", f"/apis/{group}/{version}", index=index)
            if status != 200:
                continue
            for item in doc.get("resources") or []:
                if "/" not in item["name"]:
                    found.setdefault(item["name"], (group, f"/apis/{group}/{version}", item["namespaced"]))
    return found


def object_path(gv_path, resource, namespaced, rest):
    """The GET path of the object stored at ``/registry/<resource>/<rest>`` (``rest``: ``namespace/name`` or
    ``name``, as the audit and the report name objects)."""
    if namespaced:
        namespace, name = rest.split("/", 1)
        return f"{gv_path}/namespaces/{namespace}/{resource}/{name}"
    return f"{gv_path}/{resource}/{rest}"


# What 1.28 stores that 1.32 cannot read (resource.k8s.io/v1alpha2 is no longer decodable there) or no longer has
# (ResourceClass, PodSchedulingContext, ClusterCIDR): a roll to 1.32 must stop before any host is touched.
UNREADABLE_ON_132 = {"resourceclaims.resource.k8s.io", "resourceclaimtemplates.resource.k8s.io"}
REMOVED_IN_132 = {"resourceclasses.resource.k8s.io", "podschedulingcontexts.resource.k8s.io",
                  "clustercidrs.networking.k8s.io"}


WIDGETS_ALPHA_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {"group": "example.com", "scope": "Namespaced",
             "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
             "versions": [{"name": "v1alpha1", "served": True, "storage": True, "schema": SCHEMA}]},
}


def seed_128_readable_on_132(plane, namespace):
    """Objects in 1.28 versions 1.32 no longer serves but still decodes (decodable is wider than served), and a CRD
    stored as v1alpha1: none of them may be named by a gate."""
    create_flow_schema_and_policy(plane, "v1beta3", "v1alpha1")
    create(plane, "/apis/networking.k8s.io/v1alpha1/ipaddresses", {"metadata": {"name": "10.0.0.77"}, "spec": {
        "parentRef": {"group": "", "resource": "services", "namespace": "default", "name": "app"}}})
    create(plane, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", WIDGETS_ALPHA_CRD)
    wait_for(lambda: plane.request("GET", "/apis/example.com/v1alpha1/widgets")[0] == 200, "the widgets CRD to be served")
    create(plane, f"/apis/example.com/v1alpha1/namespaces/{namespace}/widgets",
           {"apiVersion": "example.com/v1alpha1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 1}})


def seed_128_unreadable_on_132(plane, namespace="dra"):
    """Objects in 1.28's alpha versions that 1.32 cannot read or no longer has, and their keys in etcd."""
    create(plane, "/api/v1/namespaces", {"metadata": {"name": namespace}})
    base = f"/apis/resource.k8s.io/v1alpha2/namespaces/{namespace}"
    create(plane, "/apis/resource.k8s.io/v1alpha2/resourceclasses", {"metadata": {"name": "gpu"}, "driverName": "gpu.example.com"})
    create(plane, f"{base}/resourceclaims", {"metadata": {"name": "claim"}, "spec": {"resourceClassName": "gpu"}})
    create(plane, f"{base}/resourceclaimtemplates",
           {"metadata": {"name": "template"}, "spec": {"spec": {"resourceClassName": "gpu"}}})
    create(plane, f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": "default"}})  # no kcm here
    create(plane, f"/api/v1/namespaces/{namespace}/pods", {"metadata": {"name": "runner"}, "spec": {
        "containers": [{"name": "c", "image": "registry.example/c:1"}]}})
    create(plane, f"{base}/podschedulingcontexts", {"metadata": {"name": "runner"}, "spec": {"selectedNode": "node-1"}})
    create(plane, "/apis/networking.k8s.io/v1alpha1/clustercidrs",
           {"metadata": {"name": "pods"}, "spec": {"perNodeHostBits": 8, "ipv4": "10.100.0.0/16"}})
    seed_128_readable_on_132(plane, namespace)
    return {
        "resourceclaims.resource.k8s.io": [f"/registry/resource.k8s.io/resourceclaims/{namespace}/claim"],
        "resourceclaimtemplates.resource.k8s.io": [f"/registry/resource.k8s.io/resourceclaimtemplates/{namespace}/template"],
    }


# Where the 1.28 apiserver serves them (to follow a next step "delete them through the API").
PATHS_128 = {
    "resourceclaims.resource.k8s.io": "/apis/resource.k8s.io/v1alpha2/resourceclaims",
    "resourceclaimtemplates.resource.k8s.io": "/apis/resource.k8s.io/v1alpha2/resourceclaimtemplates",
    "resourceclasses.resource.k8s.io": "/apis/resource.k8s.io/v1alpha2/resourceclasses",
    "podschedulingcontexts.resource.k8s.io": "/apis/resource.k8s.io/v1alpha2/podschedulingcontexts",
    "clustercidrs.networking.k8s.io": "/apis/networking.k8s.io/v1alpha1/clustercidrs",
}


def delete_all(plane, collection, index=0):
    """``kubectl delete <resource> --all -A`` through apiserver ``index``: every object the LIST names, one by one."""
    status, found = plane.request("GET", collection, index=index)
    assert status == 200, found
    group_version = collection.rsplit("/", 1)[0]
    for item in found["items"]:
        meta = item["metadata"]
        where = f"/namespaces/{meta['namespace']}" if meta.get("namespace") else ""
        path = f"{group_version}{where}/{collection.rsplit('/', 1)[1]}/{meta['name']}"
        status, answer = plane.request("DELETE", path, index=index)
        assert status in (200, 202), f"DELETE {path}: {status} {answer}"


def static_pod_manifests(plane, directory, index=0, etcd_image=None, release=None) -> Path:
    """What kubeadm writes to /etc/kubernetes/manifests for the host of apiserver ``index``, in ``directory``: its
    kube-apiserver static pod (the image of its release, the flags it runs with, its etcd connection), and with
    ``etcd_image`` an etcd static pod running that image; the kube-apiserver manifest's path. With ``release``, the
    manifest of that release's binary on this host (as kubeadm's backup keeps the one an upgrade replaced)."""
    from realcp.plane import apiserver_argv, binary
    state = plane.state()
    server = dict(state["apiservers"][index])
    if release:
        server["binary"] = binary(release, assets=state["assets"])
        server["version"] = Path(server["binary"]).parent.name.lstrip("v")
    argv = apiserver_argv(state, index, server["binary"])
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "kube-apiserver.yaml"
    path.write_text(yaml.safe_dump(_static_pod("kube-apiserver", f"registry.k8s.io/kube-apiserver:v{server['version']}",
                                               ["kube-apiserver", *argv[1:]])), encoding="utf-8")
    if etcd_image:
        (directory / "etcd.yaml").write_text(yaml.safe_dump(_static_pod("etcd", etcd_image, ["etcd"])), encoding="utf-8")
    return path


def _static_pod(name, image, command) -> dict:
    metadata = {"name": name, "namespace": "kube-system", "labels": {"component": name, "tier": "control-plane"}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
            "spec": {"hostNetwork": True, "containers": [{"name": name, "image": image, "command": command}]}}
