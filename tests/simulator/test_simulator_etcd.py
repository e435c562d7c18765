"""The simulator with its store kept in a real etcd: a few of its own tests again, then etcd holds what it stored.

The tests imported from test_simulator run here against the ``plane`` fixture of this module (same control plane
options plus ``etcd=``), so the etcd-backed store is held to the same recorded behaviour.
"""

import base64
import json
import urllib.request

import pytest
import test_simulator as base
from apisim.harness import ControlPlane
from etcd_fixture import EtcdServer, require_etcd

# the same tests and fixture, collected again in this module, where ``plane`` keeps its store in etcd
api = base.api
test_crud_errors_as_recorded = base.test_crud_errors_as_recorded
test_update_noop_and_merge_patch = base.test_update_noop_and_merge_patch
test_chunked_list_expiry_and_fallback_token = base.test_chunked_list_expiry_and_fallback_token
test_undecodable_objects_fail_reads_lists_and_writes = base.test_undecodable_objects_fail_reads_lists_and_writes
test_crd_stored_versions_rules = base.test_crd_stored_versions_rules
test_intree_migration_rewrites_objects = base.test_intree_migration_rewrites_objects


@pytest.fixture(scope="module")
def etcd_server(tmp_path_factory):
    require_etcd()
    with EtcdServer(tmp_path_factory.mktemp("etcd"), tls=True) as server:
        yield server


@pytest.fixture(scope="module")
def plane(tmp_path_factory, etcd_server):
    pki = etcd_server.pki
    etcd = {"endpoint": etcd_server.url, "ca_file": pki.ca_cert, "cert_file": pki.client_cert, "key_file": pki.client_key}
    with ControlPlane(tmp_path_factory.mktemp("plane"), apiservers=2, releases="1.32", storage_version_api=True,
                      migrator_delay=0.05, seed="demo", etcd=etcd) as control_plane:
        yield control_plane


def _etcd_values(server, prefix):
    end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    body = json.dumps({"key": base64.b64encode(prefix.encode()).decode(), "range_end": base64.b64encode(end.encode()).decode()})
    request = urllib.request.Request(server.url + "/v3/kv/range", data=body.encode(), method="POST")
    with urllib.request.urlopen(request, context=server._context(), timeout=10) as response:
        kvs = json.load(response).get("kvs", [])
    return {base64.b64decode(kv["key"]).decode(): base64.b64decode(kv["value"]) for kv in kvs}


def _type_meta(value):
    """apiVersion of a protobuf envelope (TypeMeta lengths are < 128 here) or of a JSON value."""
    if value.startswith(b"k8s\x00"):
        meta = value[6:6 + value[5]]
        return meta[2:2 + meta[1]].decode()
    return json.loads(value)["apiVersion"]


@pytest.mark.parametrize("resource, prefix, envelope", [
    ("configmaps", "/registry/configmaps/", b"k8s\x00"),
    ("deployments.apps", "/registry/deployments/", b"k8s\x00"),
    ("namespaces", "/registry/namespaces/", b"k8s\x00"),
    ("widgets.example.com", "/registry/example.com/widgets/", b"{"),
    ("customresourcedefinitions.apiextensions.k8s.io", "/registry/apiextensions.k8s.io/customresourcedefinitions/", b"{"),
    ("leasecandidates.coordination.k8s.io", "/registry/leasecandidates/", b"k8s\x00"),
])
def test_etcd_holds_exactly_what_the_simulator_stored(plane, api, etcd_server, resource, prefix, envelope):
    stored = plane.admin.stored_objects(resource)
    values = _etcd_values(etcd_server, prefix)
    expected = {prefix + (f"{o['namespace']}/{o['name']}" if o["namespace"] else o["name"]): o["encoded_version"] for o in stored}
    assert stored and {key: _type_meta(value) for key, value in values.items()} == expected
    assert all(value.startswith(envelope) for value in values.values())


def test_deletes_reach_etcd(plane, api, etcd_server):
    api("POST", "/api/v1/namespaces/crud/configmaps", {"metadata": {"name": "short-lived"}})
    assert "/registry/configmaps/crud/short-lived" in _etcd_values(etcd_server, "/registry/configmaps/crud/")
    assert api("DELETE", "/api/v1/namespaces/crud/configmaps/short-lived")[0] == 200
    assert "/registry/configmaps/crud/short-lived" not in _etcd_values(etcd_server, "/registry/configmaps/crud/")


def test_service_and_node_keys_use_the_apiservers_overrides(plane, api, etcd_server):
    assert api("POST", "/api/v1/namespaces/crud/services", {"metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}]}})[0] == 201
    assert api("POST", "/api/v1/nodes", {"metadata": {"name": "node-1"}})[0] == 201
    values = _etcd_values(etcd_server, "/registry/")
    assert _type_meta(values["/registry/services/specs/crud/web"]) == "v1"
    assert _type_meta(values["/registry/minions/node-1"]) == "v1"
