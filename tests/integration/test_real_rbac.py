# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The shipped RBAC roles on real kube-apiservers (tests/realcp): the playbooks run as ServiceAccounts bound to
exactly ``rbac/`` (and the roles the ``custom_resource_role`` filter renders for the cluster's CRDs), and succeed.

As an operator does: the admin applies ``rbac/*.yaml`` and ``rbac/bindings.example.yaml``, creates the two
ServiceAccounts, renders the custom-resource roles with a play run as the pre-flight identity, applies them; each
identity's kubeconfig carries a token from the TokenRequest API (the realcp apiservers sign ServiceAccount tokens,
so no controller manager is needed). The per-host tasks that restart apiservers run locally, not through the API;
with etcd settings the audit and the snapshot read etcd with its client certificate, not through RBAC.
"""

from __future__ import annotations

import json
import re

import pytest
import yaml
from rbac_recorder import RBAC_DIR, manifests
from real_binaries import (
    create,
    explain,
    gadgets_stored_as,
    report,
    run,
    seed_132,
    switch_gadgets_storage,
    unreadable,
    versions,
    wait_for,
    write_inventory,
)

pytestmark = pytest.mark.slow

PREFLIGHT = "kubeupgrade-storage-preflight"
MIGRATE = "kubeupgrade-storage-migrate"
RBAC_API = "/apis/rbac.authorization.k8s.io/v1"
COLLECTIONS = {"ClusterRole": "clusterroles", "ClusterRoleBinding": "clusterrolebindings", "Role": "roles",
               "RoleBinding": "rolebindings"}
SHIPPED = ("observe.yaml", "count-objects.yaml", "records.yaml", "migrate.yaml", "bindings.example.yaml")


def apply(plane, objects):
    """POST each RBAC object as the admin (``kubectl apply -f`` of new objects)."""
    for obj in objects:
        namespace = obj["metadata"].get("namespace")
        where = f"/namespaces/{namespace}" if namespace else ""
        create(plane, f"{RBAC_API}{where}/{COLLECTIONS[obj['kind']]}", obj)


class Identities:
    """The shipped roles and example bindings applied, and a kubeconfig per ServiceAccount of the bindings."""

    def __init__(self, plane, tmp_path):
        self.plane, self.tmp_path = plane, tmp_path
        apply(plane, [obj for name in SHIPPED for obj in manifests(RBAC_DIR / name)])
        self.kubeconfigs = {name: self._identity(name) for name in (PREFLIGHT, MIGRATE)}

    def _identity(self, name):
        create(self.plane, "/api/v1/namespaces/kube-system/serviceaccounts", {"metadata": {"name": name}})
        request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 7200}}
        token = create(self.plane, f"/api/v1/namespaces/kube-system/serviceaccounts/{name}/token", request)["status"]["token"]
        path = self.plane.write_kubeconfig(str(self.tmp_path / f"{name}.kubeconfig"), token=token, user=name)
        self.wait_until_granted(token, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions?limit=1")
        return path

    def wait_until_granted(self, token, path):
        """RBAC objects reach each apiserver's authorizer through its informers: wait until every one grants ``path``."""
        for index in range(len(self.plane.endpoints)):
            wait_for(lambda i=index: self.plane.request("GET", path, index=i, token=token)[0] == 200,
                     f"apiserver {index} to grant GET {path}", timeout=30)

    def token(self, name):
        return yaml.safe_load(open(self.kubeconfigs[name]))["users"][0]["user"]["token"]

    def connection(self, name):
        return {"kubeconfig": str(self.kubeconfigs[name])}

    def inventory(self, name):
        """The realcp inventory with this identity's kubeconfig as the only credentials in it."""
        path = write_inventory(self.plane, self.tmp_path)
        inventory = yaml.safe_load(path.read_text())
        inventory["kube_control_plane"]["vars"]["kubeupgrade_connection"] = self.connection(name)
        path.write_text(yaml.safe_dump(inventory))
        return path

    def play(self, ansible_playbook, name, identity, tasks):
        """Run ``tasks`` in a local play whose module defaults are ``identity``'s kubeconfig alone; it must succeed."""
        playbook = self.tmp_path / f"{name}.yml"
        playbook.write_text(yaml.safe_dump([{
            "hosts": "localhost", "connection": "local", "gather_facts": False,
            "module_defaults": {"group/kubeupgrade.storage.storage": self.connection(identity)},
            "tasks": tasks}]))
        result = ansible_playbook(playbook)
        assert result.rc == 0, explain(result)
        return result

    def render_custom_resource_roles(self, ansible_playbook):
        """Render both custom-resource roles with the filter, in a play run as the pre-flight identity; apply them."""
        out = self.tmp_path / "rbac-custom-resources.yaml"
        self.play(ansible_playbook, "render-rbac", PREFLIGHT, [
            {"name": "Read the cluster's CRDs", "kubeupgrade.storage.storage_version_info": {
                "endpoints": self.plane.endpoints, "include": ["crds"]}, "register": "cluster"},
            {"name": "Write the roles for its custom resources", "ansible.builtin.copy": {
                "dest": str(out), "mode": "0644", "content": (
                    "{{ cluster.crds | kubeupgrade.storage.custom_resource_role('migrate') | to_nice_yaml }}\n---\n"
                    "{{ cluster.crds | kubeupgrade.storage.custom_resource_role('count') | to_nice_yaml }}\n")}},
        ])
        roles = [doc for doc in yaml.safe_load_all(out.read_text()) if doc]
        apply(self.plane, roles)
        return roles


def test_the_preflight_identity_cannot_read_a_secret_and_its_check_counts_without_it(
        real_plane_factory, ansible_playbook, tmp_path):
    plane = real_plane_factory(["1.32", "1.32"])
    seed_132(plane)
    identities = Identities(plane, tmp_path)
    token = identities.token(PREFLIGHT)
    for path in ("/api/v1/namespaces/app/secrets/token", "/api/v1/namespaces/app/secrets", "/api/v1/secrets?limit=1"):
        status, answer = plane.request("GET", path, token=token)
        assert status == 403 and answer["reason"] == "Forbidden", (path, status, answer)
        assert f"system:serviceaccount:kube-system:{PREFLIGHT}" in answer["message"]
    assert plane.request("GET", "/api/v1/namespaces/app/secrets/token", token=identities.token(MIGRATE))[0] == 200

    roles = identities.render_custom_resource_roles(ansible_playbook)
    assert [r["rules"] for r in roles] == [
        [{"apiGroups": ["example.com"], "resources": ["gadgets"], "verbs": ["list", "get", "update", "patch"]}],
        [{"apiGroups": ["example.com"], "resources": ["gadgets"], "verbs": ["list"]}]]
    identities.wait_until_granted(token, "/apis/example.com/v1/gadgets?limit=1")

    # The pre-flight's modules as the pre-flight identity: every count is made but the Secrets', which says why.
    out = tmp_path / "check.json"
    result = identities.play(ansible_playbook, "preflight-modules", PREFLIGHT, [
        {"name": "observe", "kubeupgrade.storage.storage_version_info": {"endpoints": plane.endpoints}},
        {"name": "check", "kubeupgrade.storage.storage_version_check": {
            "endpoints": plane.endpoints, "target_release": "1.33", "fail_on": []}, "register": "check"},
        {"name": "agreement", "kubeupgrade.storage.storage_version_agreement": {
            "endpoints": plane.endpoints, "polls": 1, "interval": 1, "timeout": 60}},
        {"name": "save", "ansible.builtin.copy": {"content": "{{ check | to_json }}", "dest": str(out), "mode": "0600"}},
    ])
    check = json.loads(out.read_text())
    by_name = {r["resource"]: r for r in check["resources"]}
    counted = {name for name, r in by_name.items() if r.get("objects") in ("present", "none")}
    assert counted, check["counts"]  # the count role lets it count the built-ins and the gadgets
    assert "secrets" not in counted
    # No record yet: secrets is unknown, so its objects are counted - refused, said so, and it stays unknown.
    assert by_name["secrets"]["verdict"] == "unknown" and by_name["secrets"]["objects"] == "not counted", by_name["secrets"]
    assert "not counted: needs list on secrets, which kubeupgrade-storage-count-objects leaves out on purpose" \
        in by_name["secrets"]["reason"], by_name["secrets"]
    assert "s3cret" not in result.stdout


def _upgrade_plane(real_plane_factory, with_etcd):
    plane = real_plane_factory(["1.32", "1.32"], etcd_tls=with_etcd, encryption=with_etcd)
    seed_132(plane)
    return plane


@pytest.mark.parametrize("with_etcd", [False, True], ids=["records", "etcd-audit"])
def test_upgrade_runs_as_the_migration_identity_bound_to_the_shipped_roles(real_plane_factory, ansible_playbook,
                                                                           tmp_path, with_etcd):
    plane = _upgrade_plane(real_plane_factory, with_etcd)
    identities = Identities(plane, tmp_path)
    identities.render_custom_resource_roles(ansible_playbook)
    identities.wait_until_granted(identities.token(MIGRATE), "/apis/example.com/v1/gadgets?limit=1")
    extra = {"kubeupgrade_etcd": plane.etcd_settings, "kubeupgrade_etcd_become": False} if with_etcd else {}
    result = run(ansible_playbook, "upgrade.yml", plane, tmp_path, inventory=identities.inventory(MIGRATE),
                 kubeupgrade_target_release="1.33", **extra)
    assert result.rc == 0, explain(result)
    assert "forbidden" not in result.stdout.lower() and "HTTP 403" not in result.stdout, explain(result)
    assert "RBAC forbids" not in result.stdout + result.stderr, explain(result)  # no write fell back: update is granted
    # it recorded as the ServiceAccount (from the audit with etcd settings, which then leaves nothing to migrate) ...
    assert len(plane.get("/apis/migration.k8s.io/v1alpha1/storagestates")["items"]) > 60
    if not with_etcd:  # ... and migrated every resource whose record was new: RBAC's own objects and Secrets included
        for name in ("clusterroles.rbac.authorization.k8s.io", "secrets", "gadgets.example.com"):
            assert re.search(rf"{re.escape(name)} +succeeded +client", result.stdout), explain(result)
    assert versions(plane) == ["v1.33.5", "v1.33.5"]
    final = report(tmp_path, "final-1.33")
    assert final["blocking"] == [] and final["verdict"] == "safe", final
    for index in range(2):
        assert unreadable(plane, index) == []


def test_migrate_runs_as_the_migration_identity_and_rewrites_a_custom_resource_stored_in_an_old_version(
        real_plane_factory, ansible_playbook, tmp_path):
    """Gadgets stored as v1alpha1, then the CRD's storage switched to v1: migrate.yml rewrites them as the migration
    identity (list and patch through the rendered role) and prunes storedVersions (CRD status, shipped role)."""
    plane = real_plane_factory(["1.32", "1.32"])
    gadgets_stored_as(plane, "v1alpha1")
    for i in range(3):
        create(plane, "/apis/example.com/v1alpha1/namespaces/app/gadgets",
               {"apiVersion": "example.com/v1alpha1", "kind": "Gadget", "metadata": {"name": f"g{i}"}, "spec": {"size": i}})
    answer = switch_gadgets_storage(plane, "v1")
    assert answer["status"]["storedVersions"] == ["v1alpha1", "v1"], answer
    identities = Identities(plane, tmp_path)
    identities.render_custom_resource_roles(ansible_playbook)
    identities.wait_until_granted(identities.token(MIGRATE), "/apis/example.com/v1/gadgets?limit=1")

    result = run(ansible_playbook, "migrate.yml", plane, tmp_path, inventory=identities.inventory(MIGRATE))
    assert result.rc == 0, explain(result)
    assert "forbidden" not in result.stdout.lower(), explain(result)
    assert "RBAC forbids" not in result.stdout + result.stderr, explain(result)  # no write fell back: update is granted
    stored = {key: json.loads(plane.etcd_value(key))["apiVersion"]
              for key in plane.etcd_keys("/registry/example.com/gadgets/")}
    assert stored and set(stored.values()) == {"example.com/v1"}, stored
    crd = plane.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gadgets.example.com")
    assert crd["status"]["storedVersions"] == ["v1"], crd["status"]


def test_the_audit_driven_migration_gets_each_listed_object_as_the_migration_identity(
        real_plane_factory, ansible_playbook, tmp_path):
    """storage_migration with objects_from_audit (what upgrade.yml runs with etcd settings): a GET and an apply of
    each object the audit names, granted by the shipped role (ConfigMaps) and the rendered one (gadgets)."""
    plane = real_plane_factory(["1.32", "1.32"])
    seed_132(plane)
    identities = Identities(plane, tmp_path)
    identities.render_custom_resource_roles(ansible_playbook)
    identities.wait_until_granted(identities.token(MIGRATE), "/apis/example.com/v1/gadgets?limit=1")
    # An audit naming them as stored in a version the target cannot read (made up: no release of these binaries
    # drops a version 1.32 writes), one among ten it counted: less than a quarter, so each is read with a GET.
    audit = {"keys_scanned": 20, "endpoint": "https://127.0.0.1:2379", "measured_at": "2026-01-01T00:00:00Z", "not_readable": 2, "resources": {
        name: {"judged": True, "objects": 10, "not_readable": 1, "not_readable_names": [label], "readable_versions": ["v1"],
               "versions": [{"api_version": version, "count": 1, "names": [label]}]}
        for name, label, version in (("configmaps", "app/settings", "v0"), ("gadgets.example.com", "app/old", "example.com/v0"))}}
    out = tmp_path / "migrated.json"
    identities.play(ansible_playbook, "objects", MIGRATE, [
        {"name": "migrate the audited objects", "kubeupgrade.storage.storage_migration": {
            "endpoints": plane.endpoints, "objects_from_audit": audit, "timeout": 120,
            "checkpoint_dir": str(tmp_path / "checkpoints")}, "register": "migrated"},
        {"name": "save", "ansible.builtin.copy": {"content": "{{ migrated | to_json }}", "dest": str(out), "mode": "0600"}},
    ])
    migrations = {m["resource"]: m for m in json.loads(out.read_text())["migrations"]}
    assert {name: (m["status"], m["objects_migrated"]) for name, m in migrations.items()} == {
        "configmaps": ("succeeded", 1), "gadgets.example.com": ("succeeded", 1)}, migrations
