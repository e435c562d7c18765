# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The client-side migrator's writes on a real kube-apiserver 1.32 (tests/realcp), judged by etcd and by what the
apiserver answers: only a real apiserver decides what a PUT of an object as read does to a deleted, re-created or
changed object, and whether a rewrite reaches etcd in the current storage version.

- The default write (``write: put``, the whole object PUT back as read) through the module, on 1.32 and on today's
  1.36: Secrets stored before encryption at rest was turned on (among them ones written as real tools write them:
  server-side applied, kubectl-applied, 700 KiB, held by a finalizer while being deleted) end up encrypted in etcd,
  custom resources stored as ``v1alpha1`` end up as ``v1``, ConfigMaps already current are not written to etcd at all
  (a no-op), and no object's content changes (every object read before and after is byte-equal as JSON, except
  ``resourceVersion`` and ``managedFields``; a server-side applied object keeps its managers). Built-ins are read as
  protobuf and their very bytes written back; custom resources, which are not served as protobuf, as JSON.
- A LIST read as protobuf that the apiserver cannot answer (an object stored in a version it cannot decode): its
  error, a Status in protobuf, reads as the JSON one would - the resource stops at once, with the cause and the
  namespace it is in.
- Both writes (``put`` and ``apply``) against objects changed under them, for a ConfigMap, a Lease (a resource whose
  update may create: a PUT without the uid re-creates a deleted Lease) and a custom resource: an object deleted
  after the LIST is not re-created, an object updated after the LIST is not overwritten; both count as done (409).
- RBAC that grants ``patch`` but not ``update``: ``write: put`` goes on with the apply and says why.
"""

from __future__ import annotations

import json

import pytest
from ansible.module_utils.testing import patch_module_args  # ansible-core 2.19+, the oldest supported
from apisim import k8s_protobuf
from real_binaries import GADGETS_CRD, TODAY_ETCD, TODAY_FROM, TODAY_TO, create, wait_for
from realcp.plane import NOBODY_TOKEN, locked_state

from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.client import ApiClient
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.settings import ConnectionSettings
from ansible_collections.kubeupgrade.storage.plugins.module_utils._rewrite import migrator as mig
from ansible_collections.kubeupgrade.storage.plugins.module_utils.resources import GroupResource
from ansible_collections.kubeupgrade.storage.plugins.modules import storage_migration

NAMESPACE = "app"
GADGETS = "/apis/example.com/v1/namespaces/app/gadgets"
VOLATILE = ("resourceVersion", "managedFields")
ENCRYPTED = b"k8s:enc:aescbc:v1:"


def _canonical(obj) -> bytes:
    """An object as the API answers it, without what the apiserver itself changes on a write, as bytes."""
    obj = json.loads(json.dumps(obj))
    for key in VOLATILE:
        obj["metadata"].pop(key, None)
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def _contents(plane, collection) -> dict:
    status, page = plane.request("GET", f"{collection}?limit=500")
    assert status == 200, page
    return {item["metadata"]["name"]: item for item in page["items"]}


def _gadgets_stored_as(version):
    crd = json.loads(json.dumps(GADGETS_CRD))
    for entry in crd["spec"]["versions"]:
        entry["storage"] = entry["name"] == version
    return crd


def _switch_gadget_storage(plane, version):
    crd = plane.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gadgets.example.com")
    for entry in crd["spec"]["versions"]:
        entry["storage"] = entry["name"] == version
    status, answer = plane.request("PUT", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gadgets.example.com", crd)
    assert status == 200, answer


def _install_gadgets(plane, storage):
    create(plane, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", _gadgets_stored_as(storage))
    wait_for(lambda: plane.request("GET", GADGETS)[0] == 200, "the gadgets CRD to be served")


def _turn_encryption_on(plane):
    """Restart the apiserver with aescbc for Secrets first (identity still reads what was stored before)."""
    config = plane._write_encryption_config()
    with locked_state(plane.state_file) as state:
        state["overrides"]["extra_flags"].setdefault("*", []).append(f"--encryption-provider-config={config}")
    plane.restart(0)


def _run_module(plane, capsys, **args):
    params = {"kubeconfig": plane.kubeconfig, "endpoints": plane.endpoints, "poll_interval": 0.2,
              "checkpoint_dir": str(plane.workdir) + "/checkpoints"}
    params.update(args)
    with patch_module_args(params), pytest.raises(SystemExit):
        storage_migration.main()
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def _seed_secrets_as_tools_write_them(plane):
    """Secrets as real tools leave them: server-side applied (managedFields of another manager), applied by kubectl
    client-side (the last-applied annotation), large (700 KiB), and held by a finalizer while being deleted."""
    secrets = f"/api/v1/namespaces/{NAMESPACE}/secrets"
    status, answer = plane.request("PATCH", f"{secrets}/ssa?fieldManager=ops-tool&force=true", {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "ssa", "labels": {"owner": "ops"}},
        "stringData": {"token": "applied"}}, content_type="application/apply-patch+yaml")
    assert status == 201, answer
    applied = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "applied"}, "data": {"k": "dg=="}}
    create(plane, secrets, {**applied, "metadata": {"name": "applied", "annotations": {
        "kubectl.kubernetes.io/last-applied-configuration": json.dumps(applied, separators=(",", ":")) + "\n"}}})
    create(plane, secrets, {"metadata": {"name": "large"}, "type": "Opaque", "stringData": {"blob": "x" * (700 * 1024)}})
    create(plane, secrets, {"metadata": {"name": "held", "finalizers": ["example.com/hold"]}, "stringData": {"p": "q"}})
    status, answer = plane.request("DELETE", f"{secrets}/held")
    assert status in (200, 202), answer


@pytest.mark.parametrize("release", ["1.32", TODAY_FROM, TODAY_TO])
def test_the_default_write_rewrites_every_object_in_the_current_storage_version_and_changes_no_content(
        real_plane_factory, capsys, release):
    plane = real_plane_factory([release], etcd_version=TODAY_ETCD if release in (TODAY_FROM, TODAY_TO) else None)
    create(plane, "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
    for i in range(30):
        create(plane, f"/api/v1/namespaces/{NAMESPACE}/configmaps",
               {"metadata": {"name": f"cm-{i:02d}", "labels": {"i": str(i)}}, "data": {"i": str(i), "text": "é ✓ \u2028"}})
    for i in range(20):
        create(plane, f"/api/v1/namespaces/{NAMESPACE}/secrets",
               {"metadata": {"name": f"s-{i:02d}"}, "type": "Opaque", "stringData": {"password": f"p{i}"}})
    _install_gadgets(plane, "v1alpha1")
    for i in range(15):
        create(plane, f"/apis/example.com/v1alpha1/namespaces/{NAMESPACE}/gadgets",
               {"apiVersion": "example.com/v1alpha1", "kind": "Gadget", "metadata": {"name": f"g-{i:02d}"},
                "spec": {"size": i, "ratio": i / 3, "nested": {"list": [1, 2.5, "x", None, True]}, "big": 2 ** 53 + i}})
    _seed_secrets_as_tools_write_them(plane)
    _switch_gadget_storage(plane, "v1")
    _turn_encryption_on(plane)
    secret_keys = plane.etcd_keys(f"/registry/secrets/{NAMESPACE}/")
    gadget_keys = plane.etcd_keys(f"/registry/example.com/gadgets/{NAMESPACE}/")
    assert len(secret_keys) == 24 and len(gadget_keys) == 15
    assert not any(plane.etcd_value(k).startswith(ENCRYPTED) for k in secret_keys)  # stored before encryption
    assert {json.loads(plane.etcd_value(k))["apiVersion"] for k in gadget_keys} == {"example.com/v1alpha1"}
    collections = {"configmaps": f"/api/v1/namespaces/{NAMESPACE}/configmaps",
                   "secrets": f"/api/v1/namespaces/{NAMESPACE}/secrets", "gadgets": GADGETS}
    before = {name: _contents(plane, path) for name, path in collections.items()}

    result = _run_module(plane, capsys, resources=["configmaps", "secrets", "gadgets.example.com"], backend="client")

    assert not result.get("failed"), result.get("msg")
    entries = {m["resource"]: m for m in result["migrations"]}
    assert set(entries) == {"configmaps", "secrets", "gadgets.example.com"}, result["skipped_resources"]
    for entry in entries.values():
        assert entry["status"] == "succeeded" and entry["verified"] and entry["objects_failed"] == 0, entry
        assert entry["progress"]["write"] == "put" and not entry["progress"]["write_fallback"], entry["progress"]
    assert {name: entry["progress"]["encoding"] for name, entry in entries.items()} == {
        "configmaps": "protobuf", "secrets": "protobuf", "gadgets.example.com": "json"}
    assert entries["gadgets.example.com"]["objects_migrated"] == 15
    # etcd holds every object in the current storage version
    assert all(plane.etcd_value(k).startswith(ENCRYPTED) for k in secret_keys)
    assert {json.loads(plane.etcd_value(k))["apiVersion"] for k in gadget_keys} == {"example.com/v1"}
    # no content changed: every object reads the same, byte for byte, except resourceVersion and managedFields
    after = {name: _contents(plane, path) for name, path in collections.items()}
    for name in collections:
        assert sorted(after[name]) == sorted(before[name]), name
        for key, obj in before[name].items():
            assert _canonical(after[name][key]) == _canonical(obj), (name, key)
    # ConfigMaps were current already: the apiserver found each PUT unchanged and wrote nothing (same resourceVersion)
    assert {k: o["metadata"]["resourceVersion"] for k, o in after["configmaps"].items()} == {
        k: o["metadata"]["resourceVersion"] for k, o in before["configmaps"].items()}
    # a server-side applied Secret keeps its managers; the one held by a finalizer is still being deleted
    assert after["secrets"]["ssa"]["metadata"]["managedFields"] == before["secrets"]["ssa"]["metadata"]["managedFields"]
    assert after["secrets"]["held"]["metadata"].get("deletionTimestamp") and after["secrets"]["large"]["data"]["blob"]
    # the rewritten ones got a new resourceVersion, and no manager of ours in managedFields (nothing changed)
    for key, obj in after["gadgets"].items():
        assert obj["metadata"]["resourceVersion"] != before["gadgets"][key]["metadata"]["resourceVersion"]
        assert mig.FIELD_MANAGER not in json.dumps(obj["metadata"].get("managedFields") or [])


def test_a_list_read_as_protobuf_that_cannot_be_decoded_stops_the_resource_with_its_cause(real_plane_factory, capsys):
    plane = real_plane_factory([TODAY_TO], etcd_version=TODAY_ETCD)
    for namespace in (NAMESPACE, "broken"):
        create(plane, "/api/v1/namespaces", {"metadata": {"name": namespace}})
    for i in range(5):
        create(plane, f"/api/v1/namespaces/{NAMESPACE}/configmaps", {"metadata": {"name": f"cm-{i}"}, "data": {"i": str(i)}})
    raw = k8s_protobuf.configmap("stale", "broken", "0b7e4c1e-0000-4000-8000-000000000001", {"k": "v"})
    plane.etcd.put("/registry/configmaps/broken/stale", k8s_protobuf.envelope("v9", "ConfigMap", raw))

    result = _run_module(plane, capsys, resources=["configmaps"], backend="client")

    assert result.get("failed"), result
    message = result["msg"]
    # the apiserver's own words, read from its protobuf Status: the cause, not a byte dump nor "not JSON"
    assert 'no kind "ConfigMap" is registered for version "v9"' in message, message
    assert "cannot decode an object of configmaps in namespace(s) broken" in message, message
    assert "k8s\x00" not in message and "InvalidBody" not in message, message


class ChangesAfterList:
    """The collection's client, with someone else deleting one object and updating another right after the first LIST
    (before the migrator writes anything): the migrator then writes both as it read them."""

    def __init__(self, client, change):
        self.client = client
        self.endpoint = client.endpoint
        self.settings = client.settings
        self.change = change

    def request(self, method, path, query=None, body=None, **options):
        response = self.client.request(method, path, query=query, body=body, **options)
        if method == "GET" and self.change is not None:
            change, self.change = self.change, None
            change()
        return response


CASES = {
    "configmaps": (GroupResource("", "configmaps"), "v1", "ConfigMap", f"/api/v1/namespaces/{NAMESPACE}/configmaps",
                   lambda i: {"data": {"i": str(i)}}, lambda obj: obj.update(data={"i": "changed by someone else"})),
    "leases": (GroupResource("coordination.k8s.io", "leases"), "v1", "Lease",
               f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases",
               lambda i: {"spec": {"holderIdentity": f"holder-{i}"}},
               lambda obj: obj["spec"].update(holderIdentity="changed by someone else")),
    "gadgets": (GroupResource("example.com", "gadgets"), "v1", "Gadget", GADGETS,
                lambda i: {"apiVersion": "example.com/v1", "kind": "Gadget", "spec": {"size": i}},
                lambda obj: obj["spec"].update(size="changed by someone else")),
}


class Namespaced(mig.ResourceTarget):
    collection = ""

    @property
    def list_path(self):
        return self.collection


def _target(case):
    group_resource, version, kind, collection, _make, _change = CASES[case]
    target = Namespaced(group_resource, version, True, kind, "hash")
    target.collection = collection
    return target


@pytest.mark.parametrize("write", ["put", "apply"])
def test_an_object_deleted_or_updated_after_the_list_is_neither_recreated_nor_overwritten(real_plane_factory, write):
    plane = real_plane_factory(["1.32"])
    create(plane, "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
    _install_gadgets(plane, "v1")
    admin = ApiClient(ConnectionSettings.from_params({"kubeconfig": plane.kubeconfig}))
    for case, (_gr, _version, _kind, collection, make, change_of) in CASES.items():
        for i in range(12):
            create(plane, collection, {"metadata": {"name": f"o-{i:02d}"}, **make(i)})
        deleted, updated = f"{collection}/o-03", f"{collection}/o-07"

        def change(deleted=deleted, updated=updated, change_of=change_of):
            status, _answer = plane.request("DELETE", deleted)
            assert status == 200
            obj = plane.get(updated)
            change_of(obj)
            status, answer = plane.request("PUT", updated, obj)
            assert status == 200, answer

        client = ChangesAfterList(admin, change)
        progress = mig.ClientMigrator(client, _target(case), mig.ClientOptions(chunk_size=5, concurrency=2, write=write)).run()

        assert progress.failed == 0 and progress.verified, (case, progress.failures)
        assert progress.write == write and not progress.write_fallback
        assert progress.conflicts + progress.gone == 2 and progress.objects_written == 10, (case, progress)
        assert plane.request("GET", deleted)[0] == 404, f"{case}: a deleted object was re-created"
        assert "changed by someone else" in json.dumps(plane.get(updated)), f"{case}: an update was overwritten"


def _nobody_may(plane, verbs):
    rules = [{"apiGroups": [""], "resources": ["configmaps"], "verbs": list(verbs)}]
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "migrate"}, "rules": rules}
    path = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NAMESPACE}/roles"
    status, _answer = plane.request("GET", f"{path}/migrate")
    if status == 404:
        create(plane, path, role)
        create(plane, f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NAMESPACE}/rolebindings",
               {"metadata": {"name": "migrate"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "migrate"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "nobody"}]})
    else:
        current = plane.get(f"{path}/migrate")
        status, answer = plane.request("PUT", f"{path}/migrate", dict(current, rules=rules))
        assert status == 200, answer


def test_put_forbidden_by_rbac_goes_on_with_the_apply_and_says_why(real_plane_factory):
    plane = real_plane_factory(["1.32"])
    create(plane, "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
    collection = f"/api/v1/namespaces/{NAMESPACE}/configmaps"
    for i in range(8):
        create(plane, collection, {"metadata": {"name": f"o-{i:02d}"}, "data": {"i": str(i)}})
    nobody = ApiClient(ConnectionSettings.from_params({"host": plane.endpoints[0], "api_key": NOBODY_TOKEN,
                                                       "ca_cert": plane.ca_cert}))

    def may(verb, name="o-00"):
        status, _answer = plane.request("PUT" if verb == "update" else "GET", f"{collection}/{name}",
                                        plane.get(f"{collection}/{name}") if verb == "update" else None,
                                        token=NOBODY_TOKEN)
        return status != 403

    _nobody_may(plane, ["list", "get", "patch"])  # the shipped role before write: put
    wait_for(lambda: may("get"), "the Role to be in effect")
    progress = mig.ClientMigrator(nobody, _target("configmaps"), mig.ClientOptions(chunk_size=5, write="put")).run()
    assert progress.verified and progress.failed == 0 and progress.objects_migrated == 8, progress.failures
    assert progress.write == "apply" and 'cannot update resource "configmaps"' in progress.write_fallback

    _nobody_may(plane, ["list", "get", "update"])
    wait_for(lambda: may("update"), "update to be granted")
    progress = mig.ClientMigrator(nobody, _target("configmaps"), mig.ClientOptions(chunk_size=5, write="put")).run()
    assert progress.verified and progress.failed == 0 and progress.objects_migrated == 8, progress.failures
    assert progress.write == "put" and not progress.write_fallback
