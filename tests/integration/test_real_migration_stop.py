# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Failures no retry can help stop the client-side migration at once, on a real kube-apiserver 1.36 and etcd 3.5.

- etcd's space alarm: with a small ``--quota-backend-bytes``, the migration's own rewrites (each adds the object's
  size to etcd until the next compaction) raise NOSPACE; the apiserver then answers every write with
  ``500 ... etcdserver: mvcc: database space exceeded``. The run stops within seconds with the recovery commands,
  and no object's content changed.
- A revoked credential: the ServiceAccount whose token the run uses is deleted mid-run; the next requests get 401
  and the run stops with the credentials diagnosis, not with objects "refused by admission or RBAC".
"""

from __future__ import annotations

import base64
import json
import threading
import time

import pytest
from ansible.module_utils.testing import patch_module_args  # ansible-core 2.19+, the oldest supported
from real_binaries import create, wait_for

from ansible_collections.kubeupgrade.storage.plugins.modules import storage_migration

QUOTA = 24 * 1024 * 1024
BLOBS = "/apis/example.com/v1/namespaces/default/blobs"
BLOBS_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "blobs.example.com"},
    "spec": {"group": "example.com", "scope": "Namespaced",
             "names": {"plural": "blobs", "singular": "blob", "kind": "Blob"},
             "versions": [{"name": name, "served": True, "storage": name == "v1alpha1",
                           "schema": {"openAPIV3Schema": {"type": "object",
                                                          "x-kubernetes-preserve-unknown-fields": True}}}
                          for name in ("v1alpha1", "v1")]},
}


def _run_module(plane, capsys, kubeconfig=None, **args):
    params = {"kubeconfig": kubeconfig or plane.kubeconfig, "endpoints": plane.endpoints, "poll_interval": 0.2,
              "checkpoint_dir": str(plane.workdir) + "/checkpoints", "backend": "client", "timeout": 120}
    params.update(args)
    started = time.monotonic()
    with patch_module_args(params), pytest.raises(SystemExit):
        storage_migration.main()
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1]), time.monotonic() - started


def _etcd_status(plane) -> dict:
    return json.loads(plane.etcd._request("POST", "/v3/maintenance/status", {}))


def _contents(plane, collection) -> dict:
    status, page = plane.request("GET", f"{collection}?limit=500")
    assert status == 200, page
    return {item["metadata"]["name"]: {k: v for k, v in item.items() if k != "metadata"} for item in page["items"]}


def test_the_space_alarm_stops_the_migration_at_once_with_the_recovery_steps(real_plane_factory, capsys):
    plane = real_plane_factory(["1.36"], etcd_version="3.5", etcd_args=[f"--quota-backend-bytes={QUOTA}"])
    create(plane, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", BLOBS_CRD)
    wait_for(lambda: plane.request("GET", BLOBS)[0] == 200, "the blobs CRD to be served")
    count = 0
    # Close to the quota, with no room for a full rewrite (at 60 % a rewrite of every object sometimes fit).
    while int(_etcd_status(plane)["dbSize"]) < QUOTA * 0.7:
        create(plane, "/apis/example.com/v1alpha1/namespaces/default/blobs",
               {"apiVersion": "example.com/v1alpha1", "kind": "Blob", "metadata": {"name": f"b-{count:02d}"},
                "data": base64.b64encode(bytes([count]) * 675 * 1024).decode()})
        count += 1
    crd = plane.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/blobs.example.com")
    for entry in crd["spec"]["versions"]:
        entry["storage"] = entry["name"] == "v1"
    assert plane.request("PUT", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/blobs.example.com", crd)[0] == 200
    before = _contents(plane, BLOBS)

    result, elapsed = _run_module(plane, capsys, resources=["blobs.example.com"], concurrency=4)

    print(f"{count} objects; stopped after {elapsed:.1f}s: {result.get('msg')}")
    assert result.get("failed"), result
    assert elapsed < 20, (elapsed, result["msg"])
    message = result["msg"]
    assert "database space exceeded" in message and "read-only" in message, message
    for command in ("etcdctl endpoint status", "etcdctl alarm list", "etcdctl compact", "etcdctl defrag",
                    "etcdctl alarm disarm"):
        assert command in message, (command, message)
    entry = result["migrations"][0]
    assert entry["objects_failed"] == 0, entry  # the run stopped: no object is blamed
    assert _contents(plane, BLOBS) == before  # nothing lost, nothing changed (a read works under the alarm)


def test_a_revoked_token_stops_the_migration_with_the_credentials_diagnosis(real_plane_factory, capsys):
    plane = real_plane_factory(["1.36"], etcd_version="3.5")
    create(plane, "/api/v1/namespaces/default/serviceaccounts", {"metadata": {"name": "migrator"}})
    create(plane, "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
           {"metadata": {"name": "migrator"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "ServiceAccount", "name": "migrator", "namespace": "default"}]})
    token = create(plane, "/api/v1/namespaces/default/serviceaccounts/migrator/token",
                   {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                    "spec": {"expirationSeconds": 3600}})["status"]["token"]
    kubeconfig = plane.write_kubeconfig(str(plane.workdir) + "/migrator.kubeconfig", token=token, user="migrator")
    for i in range(300):
        create(plane, "/api/v1/namespaces/default/configmaps", {"metadata": {"name": f"cm-{i:03d}"}, "data": {"i": str(i)}})

    def revoke():
        # The apiserver caches an accepted token for 10 s: the run (15 s at qps 20) meets the 401 after that.
        time.sleep(1)
        status, answer = plane.request("DELETE", "/api/v1/namespaces/default/serviceaccounts/migrator")
        assert status == 200, answer

    revoker = threading.Thread(target=revoke)
    revoker.start()
    try:
        result, elapsed = _run_module(plane, capsys, kubeconfig=kubeconfig, resources=["configmaps"], qps=20,
                                      chunk_size=20, update_records=False, lock=False)
    finally:
        revoker.join()

    print(f"stopped after {elapsed:.1f}s: {result.get('msg')}")
    assert result.get("failed"), result
    message = result["msg"]
    assert "HTTP 401" in message and "fix the credentials" in message, message
    assert "admission" not in message and "RBAC" not in message, message
    entry = result["migrations"][0]
    assert entry["objects_failed"] == 0, entry
