# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The simulator's contract, replayed against a real kube-apiserver 1.32 with the same requests.

Most tests of the collection run against the simulator (tests/simulator/apisim), so it has to answer the
requests the collection makes (discovery, CRUD, chunked metadata LISTs, server-side apply, CRDs, identity
Leases, authentication) as a real kube-apiserver does. Each check below runs twice: against a simulated
control plane (3 apiservers on 1.32, TLS) and against a real one (etcd plus a real kube-apiserver 1.32 from
``KUBEUPGRADE_TEST_K8S_ASSETS``; skipped when the binaries are missing). A check where the simulator is known
to differ is a strict xfail for the simulator only, and the difference is a row of the section "Measured
against a real kube-apiserver 1.32" of tests/simulator/README.md.
"""

import base64
import json
import os
import re
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid

import pytest
import yaml
from apisim.harness import ControlPlane as SimulatedPlane
from apisim.profiles import storage_version_hash
from realcp.plane import NOBODY_TOKEN, require_assets
from realcp.plane import ControlPlane as RealPlane

RELEASE = "1.32"
NAMESPACE = "contract"
AGGREGATED = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
APPLY_PATCH = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"
IDENTITY_SELECTOR = "apiserver.kubernetes.io/identity=kube-apiserver"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


class Api:
    """One HTTP helper for both planes: bearer token from the plane's kubeconfig, TLS verified with its CA."""

    def __init__(self, kind, endpoint, kubeconfig, ca_file):
        self.kind = kind
        self.base = endpoint
        with open(kubeconfig) as handle:
            self.token = yaml.safe_load(handle)["users"][0]["user"]["token"]
        self.context = ssl.create_default_context(cafile=ca_file)

    def __call__(self, method, path, body=None, content_type="application/json", accept="application/json", token=None):
        """(status, headers, JSON or text) of one request; ``token=""`` sends none (anonymous)."""
        token = self.token if token is None else token
        headers = {"Accept": accept}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        request = urllib.request.Request(self.base + path, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, context=self.context, timeout=30) as response:
                return response.status, response.headers, _decode(response.read())
        except urllib.error.HTTPError as error:
            return error.code, error.headers, _decode(error.read())

    def ok(self, method, path, body=None, **options):
        status, _headers, answer = self(method, path, body, **options)
        assert status < 300, (method, path, status, answer)
        return answer


def _decode(payload):
    try:
        return json.loads(payload)
    except ValueError:
        return payload.decode(errors="replace")


def failure(answer, code, reason):
    """A Status body of a failure with ``code`` and ``reason``; returns its message."""
    status, _headers, body = answer
    assert status == code, body
    assert isinstance(body, dict) and body.get("kind") == "Status", body
    assert (body.get("status"), body.get("code"), body.get("reason")) == ("Failure", code, reason), body
    return body.get("message", "")


def unique(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def wait_for(condition, timeout=60.0, what="a condition"):
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


# --- planes --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def simulated_plane(tmp_path_factory):
    with SimulatedPlane(tmp_path_factory.mktemp("simulated"), apiservers=3, releases=RELEASE, tls=True) as plane:
        yield plane


@pytest.fixture(scope="module")
def real_plane(tmp_path_factory):
    """One real apiserver for the whole module (the function-scoped ``real_plane_factory`` would start one per check)."""
    if os.environ.get("KUBEUPGRADE_TEST_KUBECONFIG"):
        pytest.skip("starts its own real control plane; with KUBEUPGRADE_TEST_KUBECONFIG only the tests against that "
                    "cluster run")
    require_assets(RELEASE)
    plane = RealPlane(tmp_path_factory.mktemp("real"), releases=[RELEASE])
    try:
        plane.start()
        yield plane
    finally:
        plane.stop_all()


def _client(kind, request):
    if kind == "simulator":
        plane = request.getfixturevalue("simulated_plane")
        client = Api(kind, plane.endpoints[0], plane.kubeconfig, plane.ca_file)
    else:
        plane = request.getfixturevalue("real_plane")
        client = Api(kind, plane.endpoints[0], plane.kubeconfig, plane.ca_cert)
    if client("GET", f"/api/v1/namespaces/{NAMESPACE}")[0] == 404:
        client.ok("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    return client


@pytest.fixture(scope="module")
def api(request):
    """A client of the plane the test is parametrized with (``simulator`` or ``real``)."""
    return _client(request.param, request)


def on_both(simulator_differs=None):
    """Run a check on both planes; ``simulator_differs`` (a reason) makes it a strict xfail on the simulator only."""
    simulator = "simulator"
    if simulator_differs:
        simulator = pytest.param("simulator", marks=pytest.mark.xfail(strict=True, reason=simulator_differs))
    return pytest.mark.parametrize("api", [simulator, "real"], indirect=True)


# --- version and health --------------------------------------------------------------------------------------


@on_both()
def test_version_and_readyz(api):
    status, _headers, version = api("GET", "/version")
    assert status == 200
    assert re.fullmatch(r"v1\.32\.\d+([-+].*)?", version["gitVersion"]), version
    assert (version["major"], version["minor"].rstrip("+")) == ("1", "32")
    assert api("GET", "/readyz")[0] == 200


# --- discovery -----------------------------------------------------------------------------------------------


@on_both()
def test_legacy_root_documents(api):
    status, _headers, core = api("GET", "/api")
    assert status == 200 and core["kind"] == "APIVersions" and "v1" in core["versions"]
    status, _headers, groups = api("GET", "/apis")
    assert status == 200 and groups["kind"] == "APIGroupList"
    by_name = {group["name"]: group for group in groups["groups"]}
    assert by_name["apps"]["preferredVersion"]["groupVersion"] == "apps/v1"
    assert {"groupVersion": "apps/v1", "version": "v1"} in by_name["apps"]["versions"]
    assert "apiextensions.k8s.io" in by_name and "coordination.k8s.io" in by_name


@on_both()
@pytest.mark.parametrize("path,group_version,persisted", [
    ("/api/v1", "v1", {"configmaps": "qFsyl6wFWjQ=", "secrets": None, "namespaces": None, "pods": "xPOwRZ+Yhw8="}),
    ("/apis/apps/v1", "apps/v1", {"deployments": "8aSe+NMegvE=", "statefulsets": None, "daemonsets": None}),
])
def test_legacy_resource_lists_carry_storage_hashes(api, path, group_version, persisted):
    status, _headers, document = api("GET", path)
    assert status == 200
    assert (document["kind"], document["groupVersion"]) == ("APIResourceList", group_version)
    resources = {resource["name"]: resource for resource in document["resources"]}
    for name, expected in persisted.items():
        assert resources[name].get("storageVersionHash"), name
        if expected:
            assert resources[name]["storageVersionHash"] == expected, name
    subresources = [name for name in resources if "/" in name]
    assert subresources
    assert not [name for name in subresources if "storageVersionHash" in resources[name]]


def test_storage_hashes_equal_on_both(simulated_plane, real_plane, request):
    """Every resource both list has the same storageVersionHash (or none on both)."""
    simulator, real = _client("simulator", request), _client("real", request)
    for path in ("/api/v1", "/apis/apps/v1"):
        ours = {r["name"]: r.get("storageVersionHash") for r in simulator.ok("GET", path)["resources"]}
        theirs = {r["name"]: r.get("storageVersionHash") for r in real.ok("GET", path)["resources"]}
        common = ours.keys() & theirs.keys()
        assert {name: ours[name] for name in common} == {name: theirs[name] for name in common}
        assert ours["configmaps" if path == "/api/v1" else "deployments"] is not None


@on_both()
def test_unknown_group_version_is_a_text_404(api):
    status, headers, body = api("GET", "/apis/nonexistent.contract.example/v1")
    assert status == 404
    assert headers["Content-Type"] == "text/plain; charset=utf-8"
    assert body == "404 page not found\n"


@on_both()
@pytest.mark.parametrize("path", ["/api", "/apis"])
def test_aggregated_discovery_on_request(api, path):
    status, headers, body = api("GET", path, accept=AGGREGATED)
    assert status == 200
    assert (body["kind"], body["apiVersion"]) == ("APIGroupDiscoveryList", "apidiscovery.k8s.io/v2")
    assert headers["Content-Type"].startswith("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")
    assert "storageVersionHash" not in json.dumps(body)


# --- CRUD ----------------------------------------------------------------------------------------------------


def configmap(name, data=None):
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NAMESPACE},
            "data": data or {"k": "v"}}


COLLECTION = f"/api/v1/namespaces/{NAMESPACE}/configmaps"


@on_both()
def test_create_get_and_errors(api):
    name = unique("crud")
    status, _headers, created = api("POST", COLLECTION, configmap(name))
    assert status == 201 and created["metadata"]["uid"] and created["metadata"]["resourceVersion"]
    status, _headers, got = api("GET", f"{COLLECTION}/{name}")
    assert status == 200 and got["data"] == {"k": "v"} and got["metadata"]["uid"] == created["metadata"]["uid"]
    message = failure(api("GET", f"{COLLECTION}/{name}-missing"), 404, "NotFound")
    assert message == f'configmaps "{name}-missing" not found'
    message = failure(api("POST", COLLECTION, configmap(name)), 409, "AlreadyExists")
    assert message == f'configmaps "{name}" already exists'
    updated = api.ok("PUT", f"{COLLECTION}/{name}", dict(got, data={"k": "v2"}))
    assert int(updated["metadata"]["resourceVersion"]) > int(got["metadata"]["resourceVersion"])
    message = failure(api("PUT", f"{COLLECTION}/{name}", dict(got, data={"k": "v3"})), 409, "Conflict")
    assert "the object has been modified; please apply your changes to the latest version and try again" in message


@on_both()
def test_merge_patch_and_server_side_apply(api):
    name = unique("patch")
    created = api.ok("POST", COLLECTION, configmap(name))
    status, _headers, patched = api("PATCH", f"{COLLECTION}/{name}", {"data": {"patched": "yes"}}, content_type=MERGE_PATCH)
    assert status == 200 and patched["data"] == {"k": "v", "patched": "yes"}
    assert int(patched["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    status, _headers, applied = api("PATCH", f"{COLLECTION}/{name}?fieldManager=contract&force=true",
                                    configmap(name, {"applied": "yes"}), content_type=APPLY_PATCH)
    assert status == 200 and applied["data"]["applied"] == "yes"
    assert applied["metadata"]["uid"] == created["metadata"]["uid"]
    message = failure(api("PATCH", f"{COLLECTION}/{name}", configmap(name), content_type=APPLY_PATCH), 422, "Invalid")
    assert message == 'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch'
    status, _headers, fresh = api("PATCH", f"{COLLECTION}/{name}-new?fieldManager=contract",
                                  configmap(f"{name}-new"), content_type=APPLY_PATCH)
    assert status == 201 and fresh["metadata"]["uid"] and fresh["data"] == {"k": "v"}


@on_both()
def test_apply_with_preconditions_as_the_migrator_sends_it(api):
    """Identity plus metadata.uid/resourceVersion, no force (migrator.apply_body).

    The migrator counts a 409 or 404 as an object that changed or went away under it and anything else as a failed
    object: current → 200; stale resourceVersion → 409 Conflict; another uid with the current resourceVersion →
    422 Invalid, "field is immutable"; deleted → 409 Conflict, "uid mismatch"; deleted and created again (uid and
    resourceVersion both stale) → 409 Conflict: the resourceVersion is checked first.
    """
    name = unique("apply")
    created = api.ok("POST", COLLECTION, configmap(name))
    meta = created["metadata"]

    def body(uid, resource_version):
        return {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": NAMESPACE, "uid": uid, "resourceVersion": resource_version}}

    path = f"{COLLECTION}/{name}?fieldManager=kubeupgrade-contract"
    status, _headers, applied = api("PATCH", path, body(meta["uid"], meta["resourceVersion"]), content_type=APPLY_PATCH)
    assert status == 200 and applied["data"] == {"k": "v"} and applied["metadata"]["uid"] == meta["uid"]
    current = api.ok("PATCH", f"{COLLECTION}/{name}", {"data": {"k": "w"}}, content_type=MERGE_PATCH)["metadata"]["resourceVersion"]
    failure(api("PATCH", path, body(meta["uid"], meta["resourceVersion"]), content_type=APPLY_PATCH), 409, "Conflict")
    other = str(uuid.uuid4())
    message = failure(api("PATCH", path, body(other, current), content_type=APPLY_PATCH), 422, "Invalid")
    assert message == f'ConfigMap "{name}" is invalid: metadata.uid: Invalid value: "{other}": field is immutable'
    api.ok("DELETE", f"{COLLECTION}/{name}")
    message = failure(api("PATCH", path, body(meta["uid"], current), content_type=APPLY_PATCH), 409, "Conflict")
    assert message == (f'Operation cannot be fulfilled on configmaps "{name}": uid mismatch: the provided object specified '
                       f'uid {meta["uid"]}, and no existing object was found')
    assert api("GET", f"{COLLECTION}/{name}")[0] == 404
    api.ok("POST", COLLECTION, configmap(name))  # created again: the old uid and the old resourceVersion are both stale
    message = failure(api("PATCH", path, body(meta["uid"], current), content_type=APPLY_PATCH), 409, "Conflict")
    assert message.endswith("the object has been modified; please apply your changes to the latest version and try again")


@on_both()
def test_put_as_read_as_the_migrator_sends_it(api):
    """The whole object as listed, PUT back (migrator.put_body): its metadata.uid is a precondition checked first.

    Unchanged → 200 and the same resourceVersion (a no-op write); changed since → 409 "the object has been
    modified"; deleted → 409 Conflict "Precondition failed: UID in precondition" (never a create, never a 404);
    deleted and created again → the same 409 (the uid is checked before the resourceVersion).
    """
    name = unique("put")
    api.ok("POST", COLLECTION, configmap(name))
    listed = next(i for i in api.ok("GET", f"{COLLECTION}?limit=500")["items"] if i["metadata"]["name"] == name)
    listed.update(apiVersion="v1", kind="ConfigMap")
    meta = listed["metadata"]
    path = f"{COLLECTION}/{name}?fieldManager=kubeupgrade-contract"
    written = api.ok("PUT", path, listed)
    assert written["metadata"]["resourceVersion"] == meta["resourceVersion"] and written["data"] == {"k": "v"}
    api.ok("PATCH", f"{COLLECTION}/{name}", {"data": {"k": "w"}}, content_type=MERGE_PATCH)
    message = failure(api("PUT", path, listed), 409, "Conflict")
    assert message.endswith("the object has been modified; please apply your changes to the latest version and try again")
    assert api.ok("GET", f"{COLLECTION}/{name}")["data"] == {"k": "w"}  # not overwritten
    api.ok("DELETE", f"{COLLECTION}/{name}")
    message = failure(api("PUT", path, listed), 409, "Conflict")
    assert message.startswith(f'Operation cannot be fulfilled on configmaps "{name}": StorageError: invalid object')
    assert f"Precondition failed: UID in precondition: {meta['uid']}, UID in object meta: " in message
    assert api("GET", f"{COLLECTION}/{name}")[0] == 404  # not re-created
    again = api.ok("POST", COLLECTION, configmap(name))
    message = failure(api("PUT", path, listed), 409, "Conflict")
    assert message.endswith(f"Precondition failed: UID in precondition: {meta['uid']}, UID in object meta: "
                            f"{again['metadata']['uid']}")
    assert api.ok("GET", f"{COLLECTION}/{name}")["metadata"]["uid"] == again["metadata"]["uid"]


# --- LIST ----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def listed_namespace(api):
    """A namespace with three configmaps (besides kube-root-ca.crt, which only the real plane creates)."""
    namespace = unique("list")
    api.ok("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    for index in range(3):
        api.ok("POST", f"/api/v1/namespaces/{namespace}/configmaps",
               dict(configmap(f"item-{index}"), metadata={"name": f"item-{index}", "namespace": namespace}))
    return namespace


def _items(api, path, **query):
    names, token = [], None
    while True:
        params = dict(query, **({"continue": token} if token else {}))
        page = api.ok("GET", f"{path}?{urllib.parse.urlencode(params)}")
        names += [item["metadata"]["name"] for item in page["items"]]
        token = page["metadata"].get("continue")
        if not token:
            return names


@on_both()
def test_chunked_list(api, listed_namespace):
    path = f"/api/v1/namespaces/{listed_namespace}/configmaps"
    status, _headers, first = api("GET", f"{path}?limit=1")
    assert status == 200 and first["kind"] == "ConfigMapList" and len(first["items"]) == 1
    assert first["metadata"]["continue"] and int(first["metadata"]["resourceVersion"]) > 0
    assert first["metadata"]["remainingItemCount"] >= 2
    names = _items(api, path, limit=1)
    assert {"item-0", "item-1", "item-2"} <= set(names) and names == sorted(names)
    unchunked = api.ok("GET", path)
    assert "continue" not in unchunked["metadata"] and int(unchunked["metadata"]["resourceVersion"]) > 0


@on_both()
@pytest.mark.parametrize("token", ["garbage!!", "bm90LWpzb24", base64.urlsafe_b64encode(b'{"v":"meta.k8s.io/v1"}').decode()])
def test_garbage_continue_token_is_a_400(api, listed_namespace, token):
    answer = api("GET", f"/api/v1/namespaces/{listed_namespace}/configmaps?limit=1&continue={urllib.parse.quote(token)}")
    message = failure(answer, 400, "BadRequest")
    assert message.startswith("invalid continue token: continue key is not valid: "), message
    if token == "garbage!!":
        assert message.endswith("illegal base64 data at input byte 7")


@on_both(simulator_differs="the simulator's text of a JSON decode error is Python's, not Go's")
def test_continue_token_that_is_not_json_as_go_says_it(api, listed_namespace):
    answer = api("GET", f"/api/v1/namespaces/{listed_namespace}/configmaps?limit=1&continue=bm90LWpzb24")
    message = failure(answer, 400, "BadRequest")
    assert message == "invalid continue token: continue key is not valid: invalid character 'o' in literal null (expecting 'u')"


@on_both()
def test_partial_object_metadata_list(api, listed_namespace):
    path = f"/api/v1/namespaces/{listed_namespace}/configmaps?limit=2"
    status, headers, page = api("GET", path, accept=METADATA_LIST)
    assert status == 200
    assert (page["kind"], page["apiVersion"]) == ("PartialObjectMetadataList", "meta.k8s.io/v1")
    assert headers["Content-Type"] == "application/json"  # real answers plain JSON; the kind says what it is
    assert page["metadata"]["continue"] and page["metadata"]["resourceVersion"]
    for item in page["items"]:
        assert (item["kind"], item["apiVersion"]) == ("PartialObjectMetadata", "meta.k8s.io/v1")
        assert "data" not in item and item["metadata"]["uid"] and item["metadata"]["resourceVersion"]


# --- CRDs ----------------------------------------------------------------------------------------------------


def crd(group):
    def version(name, storage):
        return {"name": name, "served": True, "storage": storage,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"gadgets.{group}"},
            "spec": {"group": group, "scope": "Namespaced",
                     "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList"},
                     "versions": [version("v1alpha1", True), version("v1", False)]}}


def _put_retrying(api, path, change):
    """PUT ``change(current)``; the real CRD controllers write status concurrently, so retry a 409 Conflict."""
    for _attempt in range(10):
        current = api.ok("GET", path)
        answer = api("PUT", path, change(current))
        if answer[0] != 409:
            return answer
        time.sleep(0.3)
    return answer


def established(api, path):
    conditions = api.ok("GET", path).get("status", {}).get("conditions") or []
    return any(condition["type"] == "Established" and condition["status"] == "True" for condition in conditions)


def discovered_hash(api, path, resource):
    """The storageVersionHash of ``resource`` in the legacy document at ``path`` (None until it is served)."""
    status, _headers, document = api("GET", path)
    if status != 200:
        return None
    # A group/version document being rebuilt after a CRD update can say "resources": null (Go's nil slice).
    return next((r.get("storageVersionHash") for r in document.get("resources") or [] if r["name"] == resource), None)


@on_both()
def test_crd_stored_versions(api):
    group = f"{unique('g')}.contract.example"
    status, _headers, created = api("POST", CRDS, crd(group))
    assert status == 201 and created["status"]["storedVersions"] == ["v1alpha1"]
    path = f"{CRDS}/gadgets.{group}"
    try:
        wait_for(lambda: established(api, path), what="the CRD Established")

        def switch(current):
            for version in current["spec"]["versions"]:
                version["storage"] = version["name"] == "v1"
            return current
        status, _headers, switched = _put_retrying(api, path, switch)
        assert status == 200 and switched["status"]["storedVersions"] == ["v1alpha1", "v1"]

        def drop(current):
            current["spec"]["versions"] = [v for v in current["spec"]["versions"] if v["name"] == "v1"]
            return current
        message = failure(_put_retrying(api, path, drop), 422, "Invalid")
        assert "must appear in spec.versions" in message, message

        def prune(current):
            current["status"]["storedVersions"] = ["v1"]
            return current
        status, _headers, pruned = _put_retrying(api, f"{path}/status", prune)
        assert status == 200 and pruned["status"]["storedVersions"] == ["v1"]

        expected = storage_version_hash(group, "v1", "Gadget")
        wait_for(lambda: discovered_hash(api, f"/apis/{group}/v1alpha1", "gadgets") == expected, what="the CR's storage hash")
    finally:
        api("DELETE", path)


# --- identity Leases -----------------------------------------------------------------------------------------


@on_both()
def test_identity_leases(api):
    path = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases?" + urllib.parse.urlencode({"labelSelector": IDENTITY_SELECTOR})
    leases = wait_for(lambda: api.ok("GET", path)["items"], what="an identity Lease")
    for lease in leases:
        assert re.fullmatch(r"apiserver-[a-z2-7]{26}", lease["metadata"]["name"]), lease["metadata"]["name"]
        assert lease["metadata"]["labels"]["apiserver.kubernetes.io/identity"] == "kube-apiserver"
        assert lease["metadata"]["labels"]["kubernetes.io/hostname"]
        assert lease["spec"]["holderIdentity"].startswith(lease["metadata"]["name"]), lease["spec"]
        assert lease["spec"]["renewTime"]


# --- authentication and authorization ------------------------------------------------------------------------


@on_both()
def test_bad_token_is_401(api):
    message = failure(api("GET", f"{COLLECTION}", token="not-a-token"), 401, "Unauthorized")
    assert message == "Unauthorized"


@on_both()
def test_anonymous_is_403(api):
    message = failure(api("GET", "/api/v1/namespaces/default/secrets", token=""), 403, "Forbidden")
    assert message.startswith('secrets is forbidden: User "system:anonymous" cannot list resource "secrets"'), message


NOBODY_IS_UNKNOWN = "the simulator knows one bearer token: any other, like nobody's, is a 401"


@on_both(simulator_differs=NOBODY_IS_UNKNOWN)
def test_user_without_rights_is_403(api):
    message = failure(api("GET", "/api/v1/namespaces/default/secrets", token=NOBODY_TOKEN), 403, "Forbidden")
    assert message == ('secrets is forbidden: User "nobody" cannot list resource "secrets" in API group "" '
                       'in the namespace "default"'), message


@on_both(simulator_differs=NOBODY_IS_UNKNOWN)
def test_user_without_rights_reads_discovery(api):
    """system:discovery is granted to every authenticated user: a read-only observer needs no rule for it."""
    for path in ("/version", "/api", "/apis", "/api/v1", "/apis/apps/v1"):
        assert api("GET", path, token=NOBODY_TOKEN)[0] == 200, path
