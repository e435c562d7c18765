# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""End to end: a simulated 1.31 control plane keeps its store in a real etcd, with objects in old storage versions.

audit (through ansible-playbook) -> counts per apiVersion exactly as the simulator stored them, the objects a
target cannot decode named -> records from the audit have no Unknown -> a PUT of only the listed objects through
the apiserver -> a second audit finds none left.
"""

from __future__ import annotations

import collections
import json
import ssl
import urllib.request
from pathlib import Path

import etcd_fixture
import pytest
import yaml

from ansible_collections.kubeupgrade.storage.plugins.module_utils import audit_result, hashing
from ansible_collections.kubeupgrade.storage.plugins.module_utils._audit import runner
from ansible_collections.kubeupgrade.storage.plugins.module_utils.resources import GroupResource

# resource -> (current storage version at 1.31, kind, objects to store in an old version, old version)
OLD = {
    "flowschemas.flowcontrol.apiserver.k8s.io": ("v1", "FlowSchema", 3, "v1beta3"),
    "validatingadmissionpolicies.admissionregistration.k8s.io": ("v1", "ValidatingAdmissionPolicy", 2, "v1beta1"),
    "widgets.example.com": ("v1", "Widget", 4, "v1alpha1"),
}
NAMESPACED = {"widgets.example.com"}


class Kube:
    """Just enough of an apiserver client for GET and PUT through the simulator's front."""

    def __init__(self, plane):
        self.base = plane.front
        self.token = plane.token
        self.context = ssl.create_default_context(cafile=plane.ca_file)
        self.requests = 0

    def __call__(self, method, path, body=None):
        self.requests += 1
        request = urllib.request.Request(self.base + path, method=method, data=json.dumps(body).encode() if body else None,
                                         headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"})
        with urllib.request.urlopen(request, context=self.context, timeout=30) as response:
            return json.load(response)


def _path(resource, version, object_name):
    gr = GroupResource.parse(resource)
    namespace, _sep, name = object_name.rpartition("/")
    scope = f"/namespaces/{namespace}" if namespace else ""
    return f"{gr.api_prefix(version)}{scope}/{gr.resource}/{name}"


@pytest.fixture
def etcd_tls(tmp_path):
    yield from etcd_fixture.serve(tmp_path, tls=True)


@pytest.fixture
def plane(control_plane_factory, etcd_tls):
    pki = etcd_tls.pki
    plane = control_plane_factory(apiservers=2, releases="1.31", tls=True, etcd={
        "endpoint": etcd_tls.url, "ca_file": pki.ca_cert, "cert_file": pki.client_cert, "key_file": pki.client_key})
    crd = json.loads((Path(__file__).resolve().parents[1] / "simulator" / "apisim" / "manifests" / "widgets-crd.json").read_text())
    plane.admin.put_raw("customresourcedefinitions.apiextensions.k8s.io", None, crd["metadata"]["name"],
                        "apiextensions.k8s.io/v1beta1", crd)
    for resource, (current, _kind, count, old) in OLD.items():
        for i in range(count + 2):  # two more in the current version
            version = old if i < count else current
            namespace = "default" if resource in NAMESPACED else None
            plane.admin.put_raw(resource, namespace, f"obj-{i}", version, {"spec": {"index": i}})
    return plane


def _audit_playbook(tmp_path, etcd, readable):
    out = tmp_path / "audit.json"
    playbook = tmp_path / "audit.yml"
    playbook.write_text(yaml.safe_dump([{
        "hosts": "localhost", "connection": "local", "gather_facts": False,
        "tasks": [
            {"name": "audit", "kubeupgrade.storage.storage_version_audit": {
                "etcd_endpoints": [etcd.url], "etcd_ca_cert": etcd.pki.ca_cert, "etcd_client_cert": etcd.pki.client_cert,
                "etcd_client_key": etcd.pki.client_key, "readable_versions": readable, "names_limit": -1,
                "pages_per_second": 0, "page_size": 100}, "register": "audit"},
            {"name": "save", "ansible.builtin.copy": {"content": "{{ audit | to_json }}", "dest": str(out)}},
        ]}]))
    return playbook, out


def test_audit_migrate_only_listed_objects_then_none_left(plane, etcd_tls, tmp_path, ansible_playbook):
    readable = {resource: [current] for resource, (current, *_rest) in OLD.items()}
    playbook, out = _audit_playbook(tmp_path, etcd_tls, readable)
    run = ansible_playbook(playbook)
    assert run.rc == 0, run.stdout + run.stderr
    audit = json.loads(out.read_text())
    assert audit["outside_layout"] == 0 and audit["unreadable"] == 0

    # counts per apiVersion exactly as the simulator stored them, for every resource it stored
    for resource in list(OLD) + ["namespaces", "customresourcedefinitions.apiextensions.k8s.io", "leases.coordination.k8s.io"]:
        stored = collections.Counter(o["encoded_version"] for o in plane.admin.stored_objects(resource))
        found = {v["api_version"]: v["count"] for v in audit["resources"][resource]["versions"]}
        assert found == dict(stored), resource

    # the objects a target reading only the current versions cannot decode, named
    to_migrate = audit_result.objects_from_audit(audit)
    assert audit_result.truncated_from_audit(audit) == []
    assert {r: sorted(n) for r, n in to_migrate.items()} == {
        r: sorted((f"default/obj-{i}" if r in NAMESPACED else f"obj-{i}") for i in range(count)) for r, (_c, _k, count, _o) in OLD.items()}

    # records measured: exactly the hashes stored, never Unknown
    current_hashes = {r: hashing.storage_version_hash(GroupResource.parse(r).group, current, kind) for r, (current, kind, *_x) in OLD.items()}
    records = audit_result.records_from_audit(audit, current_hashes)
    for resource, (_current, kind, _count, old) in OLD.items():
        old_hash = hashing.storage_version_hash(GroupResource.parse(resource).group, old, kind)
        assert records[resource] == [old_hash, current_hashes[resource]]

    # migrate only the listed objects: one GET and one PUT each, through the apiserver
    untouched = {(r, o["name"]): o["resource_version"] for r in OLD for o in plane.admin.stored_objects(r)
                 if o["encoded_version"].endswith("/" + OLD[r][0])}
    kube = Kube(plane)
    for resource, names in to_migrate.items():
        current = OLD[resource][0]
        for name in names:
            path = _path(resource, current, name)
            kube("PUT", path, kube("GET", path))
    assert kube.requests == 2 * sum(count for _c, _k, count, _o in OLD.values())
    assert {(r, o["name"]): o["resource_version"] for r in OLD for o in plane.admin.stored_objects(r)
            if (r, o["name"]) in untouched} == untouched  # objects already current were not rewritten

    second = runner.audit(runner.build_request({
        "etcd_endpoints": [etcd_tls.url], "etcd_ca_cert": etcd_tls.pki.ca_cert, "etcd_client_cert": etcd_tls.pki.client_cert,
        "etcd_client_key": etcd_tls.pki.client_key, "readable_versions": readable, "pages_per_second": 0}))
    assert second["not_readable"] == 0 and audit_result.objects_from_audit(second) == {}
    assert audit_result.records_from_audit(second, current_hashes) == {r: [h] for r, h in current_hashes.items()}
    for resource in OLD:
        assert {o["encoded_version"] for o in plane.admin.stored_objects(resource)} == {
            f"{GroupResource.parse(resource).group}/{OLD[resource][0]}"}
