"""The simulator against real kube-apiserver 1.32 recordings (tests/fixtures/real-apiserver-1.32)."""

import base64
import json
import os
import re
import ssl
import time
import urllib.error
import urllib.request

import pytest
from apisim.harness import ControlPlane
from apisim.profiles import builtin_resources, storage_version_hash
from apisim.seeds import load_manifest
from apisim.server import identity_lease_name

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures", "real-apiserver-1.32")


def recorded(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return json.load(handle)


class Client:
    def __init__(self, plane, index=0, token=True):
        self.base = plane.endpoints[index]
        self.token = plane.token if token is True else token
        self.context = ssl.create_default_context(cafile=plane.ca_file)

    def __call__(self, method, path, body=None, content_type="application/json", accept="application/json"):
        headers = {"Accept": accept, "Content-Type": content_type}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base + path, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, context=self.context, timeout=10) as response:
                return response.status, response.headers, _decode(response.read())
        except urllib.error.HTTPError as error:
            return error.code, error.headers, _decode(error.read())


def _decode(payload):
    try:
        return json.loads(payload)
    except ValueError:
        return payload.decode()


def same_status(actual, fixture):
    """Status code and Status body (reason, message, details) as recorded."""
    status, _unused, body = actual
    assert status == fixture["status"]
    expected = fixture["body"]
    if isinstance(expected, str):
        assert body == expected
        return
    for key in ("kind", "status", "reason", "message", "details", "code"):
        assert body.get(key) == expected.get(key), key


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    with ControlPlane(tmp_path_factory.mktemp("plane"), apiservers=2, releases="1.32", storage_version_api=True,
                      migrator_delay=0.05, seed="demo") as control_plane:
        yield control_plane


@pytest.fixture(scope="module")
def api(plane):
    client = Client(plane)
    client("POST", "/api/v1/namespaces", {"metadata": {"name": "crud"}})
    for i in range(4):
        client("POST", "/api/v1/namespaces/crud/configmaps", {"metadata": {"name": f"cm-{i}"}, "data": {"k": "v"}})
    return client


@pytest.mark.parametrize("release,group,resource,expected", [
    ("1.29", "", "pods", "xPOwRZ+Yhw8="),
    ("1.29", "apiextensions.k8s.io", "customresourcedefinitions", "jfWCUB31mvA="),
    ("1.29", "flowcontrol.apiserver.k8s.io", "flowschemas", "9NnFrw7ZEmA="),
    ("1.32", "events.k8s.io", "events", "r2yiGXH7wu8="),
    ("1.32", "", "configmaps", "qFsyl6wFWjQ="),
    ("1.32", "apps", "deployments", "8aSe+NMegvE="),
])
def test_profile_hashes_match_real_discovery(release, group, resource, expected):
    assert builtin_resources(release)[(group, resource)].hash == expected


def test_hash_inputs_and_identity_lease_names():
    assert storage_version_hash("", "v1", "Pod") == "xPOwRZ+Yhw8="
    assert storage_version_hash("migration.k8s.io", "v1alpha1", "StorageVersionMigration") == "X3bkZSayqxI="
    assert re.fullmatch(r"apiserver-[a-z2-7]{26}", identity_lease_name("host-0"))


def test_discovery_matches_recorded_hashes(api):
    for name in ("discovery/api-v1-legacy.json", "discovery/apis-apps_v1-legacy.json",
                 "discovery/apis-events.k8s.io_v1-legacy.json", "discovery/apis-apiextensions.k8s.io_v1-legacy.json",
                 "discovery/apis-storagemigration.k8s.io_v1alpha1-legacy.json"):
        fixture = recorded(name)
        status, _unused, body = api("GET", fixture["request"]["path"])
        assert status == 200
        ours = {r["name"]: r.get("storageVersionHash") for r in body["resources"]}
        for resource in fixture["body"]["resources"]:
            if resource["name"] in ours:
                assert ours[resource["name"]] == resource.get("storageVersionHash"), resource["name"]


def test_aggregated_discovery_has_no_hashes_and_unknown_paths_are_text_404(api):
    aggregated = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    status, headers, body = api("GET", "/apis", accept=aggregated)
    assert status == 200 and body["kind"] == "APIGroupDiscoveryList"
    assert "storageVersionHash" not in json.dumps(body)
    assert headers["Content-Type"].startswith("application/json;g=apidiscovery.k8s.io;v=v2")
    fixture = recorded("crd/01-discovery-example.com-v1-before-crd-404.json")
    status, headers, body = api("GET", "/apis/nonexistent.example/v1")
    assert (status, body) == (404, fixture["body"]) and headers["Content-Type"] == "text/plain; charset=utf-8"


def test_auth(plane):
    same_status(Client(plane, token="wrong")("GET", "/api/v1/namespaces/default/configmaps"),
                recorded("auth/01-wrong-bearer-token-401.json"))
    same_status(Client(plane, token=None)("GET", "/api/v1/namespaces/default/configmaps"),
                recorded("auth/02-no-token-anonymous-403.json"))
    assert Client(plane, token=None)("GET", "/version")[0] == 200
    assert Client(plane, token=None)("GET", "/readyz")[0] == 200


def test_crud_errors_as_recorded(api):
    cm = api("GET", "/api/v1/namespaces/crud/configmaps/cm-0")[2]
    stale = dict(cm, metadata=dict(cm["metadata"], resourceVersion="1"))
    same_status(api("PUT", "/api/v1/namespaces/crud/configmaps/cm-0", stale),
                recorded("crud/04-update-configmap-stale-resourceVersion-409.json"))
    same_status(api("GET", "/api/v1/namespaces/crud/configmaps/does-not-exist"),
                recorded("crud/05-get-configmap-missing-404.json"))
    same_status(api("POST", "/api/v1/namespaces/nope/configmaps", {"metadata": {"name": "x"}}),
                recorded("crud/05c-create-in-missing-namespace-404.json"))
    for name in ("crud/06-create-configmap-invalid-name-422.json", "crud/06c-create-configmap-no-name-422.json",
                 "crud/06d-create-configmap-duplicate-409.json",
                 "crud/06f-create-configmap-wrong-kind-in-body-400.json"):
        fixture = recorded(name)
        same_status(api("POST", fixture["request"]["path"], fixture["request"]["body"]), fixture)
    fixture = recorded("crud/06g-update-configmap-name-mismatch-400.json")
    same_status(api("PUT", fixture["request"]["path"], fixture["request"]["body"]), fixture)
    same_status(api("GET", "/api/v1/namespaces/crud/configmaps?limit=2&continue=notatoken"),
                recorded("crud/13-list-configmaps-invalid-continue-token-400.json"))
    same_status(api("PATCH", "/api/v1/namespaces/crud/configmaps/cm-2", {"data": {"x": "y"}}),
                recorded("crud/18-patch-configmap-unsupported-content-type-415.json"))


def test_update_noop_and_merge_patch(api):
    cm = api("GET", "/api/v1/namespaces/crud/configmaps/cm-1")[2]
    again = api("PUT", "/api/v1/namespaces/crud/configmaps/cm-1", cm)[2]
    assert again["metadata"]["resourceVersion"] == cm["metadata"]["resourceVersion"]
    status, _unused, patched = api("PATCH", "/api/v1/namespaces/crud/configmaps/cm-1", {"data": {"patched": "yes"}},
                                   content_type="application/merge-patch+json")
    assert status == 200 and patched["data"] == {"k": "v", "patched": "yes"}
    assert int(patched["metadata"]["resourceVersion"]) > int(cm["metadata"]["resourceVersion"])


def test_chunked_list_expiry_and_fallback_token(plane, api):
    status, _unused, first = api("GET", "/api/v1/namespaces/crud/configmaps?limit=2")
    assert status == 200 and first["metadata"]["remainingItemCount"] == 2
    token = first["metadata"]["continue"]
    decoded = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    assert decoded == {"v": "meta.k8s.io/v1", "rv": int(first["metadata"]["resourceVersion"]), "start": "cm-1\x00"}
    plane.admin.compact()
    fixture = recorded("crud/09-list-configmaps-old-continue-token-after-compaction-410.json")
    actual = api("GET", f"/api/v1/namespaces/crud/configmaps?limit=2&continue={token}")
    same_status(actual, fixture)
    assert actual[2]["metadata"]["continue"] == fixture["body"]["metadata"]["continue"]
    fallback = fixture["body"]["metadata"]["continue"]
    status, _unused, rest = api("GET", f"/api/v1/namespaces/crud/configmaps?limit=2&continue={fallback}")
    assert status == 200 and [i["metadata"]["name"] for i in rest["items"]] == ["cm-2", "cm-3"]


def test_undecodable_objects_fail_reads_lists_and_writes(plane, api):
    plane.admin.put_raw("configmaps", "crud", "victim", "v9", {"data": {"a": "b"}})
    fixture = recorded("decode/01-get-configmap-stored-as-json-v9.json")
    for method, path in (("GET", "/api/v1/namespaces/crud/configmaps/victim"),
                         ("GET", "/api/v1/namespaces/crud/configmaps?limit=1"), ("GET", "/api/v1/configmaps"),
                         ("DELETE", "/api/v1/namespaces/crud/configmaps/victim")):
        same_status(api(method, path), fixture)
    assert api("GET", "/api/v1/namespaces/demo/configmaps")[0] == 200
    plane.admin.put_raw("widgets.example.com", "demo", "w9", "v9", {"spec": {}})
    same_status(api("GET", "/apis/example.com/v1/namespaces/demo/widgets/w9"),
                recorded("decode/22-get-cr-stored-as-unknown-version-via-v1.json"))
    stored = {o["name"]: o["encoded_version"] for o in plane.admin.stored_objects("configmaps")}
    assert stored["victim"] == "v9"
    plane.admin.put_raw("configmaps", "crud", "victim", "v1", {"data": {"a": "b"}})
    plane.admin.put_raw("widgets.example.com", "demo", "w9", "v1", {"spec": {}})
    assert api("DELETE", "/api/v1/namespaces/crud/configmaps/victim")[0] == 200


def test_crd_stored_versions_rules(api):
    crd = recorded("crd/02-create-crd-201.json")["request"]["body"]
    crd = json.loads(json.dumps(crd).replace("example.com", "example.org"))
    status, _unused, created = api("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    assert status == 201 and created["status"]["storedVersions"] == ["v1alpha1"]
    assert [c["type"] for c in created["status"]["conditions"]] == ["NamesAccepted", "Established"]
    path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.org"
    for version in created["spec"]["versions"]:
        version["storage"] = version["name"] == "v1"
    status, _unused, switched = api("PUT", path, created)
    assert status == 200 and switched["status"]["storedVersions"] == ["v1alpha1", "v1"]
    dropped = json.loads(json.dumps(switched))
    dropped["spec"]["versions"] = [v for v in dropped["spec"]["versions"] if v["name"] == "v1"]
    fixture = recorded("crd/12-update-crd-drop-v1alpha1-while-in-storedVersions-422.json")
    expected = json.loads(json.dumps(fixture).replace("example.com", "example.org"))
    same_status(api("PUT", path, dropped), expected)
    emptied = dict(switched, status=dict(switched["status"], storedVersions=[]))
    status, _unused, result = api("PUT", path + "/status", emptied)
    assert status == 200 and result["status"]["storedVersions"] == ["v1"]
    status, _unused, body = api("GET", "/apis/example.org/v1alpha1")
    assert body["resources"][0]["storageVersionHash"] == storage_version_hash("example.org", "v1", "Widget")


def _wait(condition, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(0.05)
    raise AssertionError("timed out")


def _finished_status(api, path):
    """An in-tree migration's status once it has its two final conditions, else None."""
    status = api("GET", path)[2]["status"]
    return status if len(status.get("conditions", [])) == 2 else None


def _settled_conditions(api, path):
    """A sigs migration's conditions once they are no longer Running, else None."""
    conditions = api("GET", path)[2].get("status", {}).get("conditions")
    return conditions if conditions and conditions[0]["type"] != "Running" else None


def test_intree_migration_rewrites_objects(plane, api):
    body = recorded("svm-intree/01-create-svm-widgets-201.json")["request"]["body"]
    assert api("POST", "/apis/storagemigration.k8s.io/v1alpha1/storageversionmigrations", body)[0] == 201
    path = "/apis/storagemigration.k8s.io/v1alpha1/storageversionmigrations/widgets-migration"
    final = _wait(lambda: _finished_status(api, path))
    expected = recorded("svm-intree/02-svm-widgets-get-02.json")["body"]["status"]
    assert [(c["type"], c["status"], c["reason"]) for c in final["conditions"]] == [
        (c["type"], c["status"], c["reason"]) for c in expected["conditions"]]
    assert {o["encoded_version"] for o in plane.admin.stored_objects("widgets.example.com")} == {"example.com/v1"}
    bogus = recorded("svm-intree/06-create-svm-nonexistent-resource-201.json")["request"]["body"]
    api("POST", "/apis/storagemigration.k8s.io/v1alpha1/storageversionmigrations", bogus)
    time.sleep(0.3)
    name = bogus["metadata"]["name"]
    assert api("GET", f"/apis/storagemigration.k8s.io/v1alpha1/storageversionmigrations/{name}")[2]["status"] == {}


def test_intree_migration_fails_on_denied_update(plane, api):
    fault = plane.admin.fault("deny_update", resource="deployments.apps", namespace="demo", name="web")
    status, _unused, body = api("PATCH", "/apis/apps/v1/namespaces/demo/deployments/web",
                                {"metadata": {"labels": {"a": "b"}}}, content_type="application/merge-patch+json")
    assert status == 422 and body["reason"] == "Invalid"
    assert "is forbidden: ValidatingAdmissionPolicy" in body["message"]
    api("POST", "/apis/storagemigration.k8s.io/v1alpha1/storageversionmigrations", {"metadata": {"name": "deploy"},
        "spec": {"resource": {"group": "apps", "version": "v1", "resource": "deployments"}}})
    path = "/apis/storagemigration.k8s.io/v1alpha1/storageversionmigrations/deploy"
    final = _wait(lambda: _finished_status(api, path))
    assert final["conditions"][1]["message"] == "migration encountered unhandled error"
    assert fault
    plane.admin.clear_faults()


def test_sigs_migrator(plane, api):
    for name in ("storage_migration_crd.json", "storage_state_crd.json"):
        assert api("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", load_manifest(name))[0] == 201
    plane.admin.put_raw("configmaps", "demo", "old", "v1", {"data": {}})
    base = "/apis/migration.k8s.io/v1alpha1/storageversionmigrations"
    for name, resource in (("cms", "configmaps"), ("bogus", "doesnotexist")):
        api("POST", base, {"apiVersion": "migration.k8s.io/v1alpha1", "kind": "StorageVersionMigration",
                           "metadata": {"name": name}, "spec": {"resource": {"group": "", "version": "v1",
                                                                             "resource": resource}}})
    done = _wait(lambda: _settled_conditions(api, base + "/bogus"))
    assert done == [dict(recorded("svm-sigs/05-migration-nonexistent-get-02.json")["body"]["status"]["conditions"][0],
                         lastUpdateTime=done[0]["lastUpdateTime"])]
    _wait(lambda: api("GET", base + "/cms")[2].get("status", {}).get("conditions", [{}])[0].get("type") == "Succeeded")


def test_storage_versions_leases_release_switch_and_faults(plane, api):
    status, _unused, leases = api("GET", "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"
                                  "?labelSelector=apiserver.kubernetes.io/identity%3Dkube-apiserver")
    assert status == 200 and len(leases["items"]) == 2
    sv = api("GET", "/apis/internal.apiserver.k8s.io/v1alpha1/storageversions/core.configmaps")[2]
    assert sv["status"]["commonEncodingVersion"] == "v1" and len(sv["status"]["storageVersions"]) == 2
    plane.admin.set_release(1, "1.33")
    assert Client(plane, 1)("GET", "/version")[2]["gitVersion"] == "v1.33.0"
    sv = api("GET", "/apis/internal.apiserver.k8s.io/v1alpha1/storageversions/coordination.k8s.io.leasecandidates")[2]
    assert "commonEncodingVersion" not in sv["status"]
    plane.admin.set_release(1, "1.32")
    plane.admin.fault("status", apiserver=0, code=429, retry_after=2, count=1, path_regex="^/api/v1/namespaces$")
    status, headers, body = api("GET", "/api/v1/namespaces")
    assert (status, headers["Retry-After"], body["reason"]) == (429, "2", "TooManyRequests")
    assert api("GET", "/api/v1/namespaces")[0] == 200
    plane.admin.fault("drop", apiserver=0, count=1, path_regex="^/api$")
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        api("GET", "/api")
    assert plane.admin.stats()["apiservers"][0]["requests"] > 0


def test_restart_during_list_and_front(plane, api):
    plane.admin.fault("restart_during_list", apiserver=0, after_chunks=1, path_regex="configmaps")
    assert api("GET", "/api/v1/namespaces/crud/configmaps?limit=1")[0] == 200
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        api("GET", "/api/v1/namespaces/crud/configmaps?limit=1")
    _wait(lambda: all(s["ready"] for s in plane.admin.status()))
    context = ssl.create_default_context(cafile=plane.ca_file)
    request = urllib.request.Request(plane.front + "/version")
    with urllib.request.urlopen(request, context=context, timeout=5) as response:
        assert json.load(response)["gitVersion"] == "v1.32.0"
