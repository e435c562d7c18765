# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""storage_migration under faults on its bookkeeping requests: the Lease, the CRD, the StorageState record.

They ride the migration's own retry policy and the task's deadline: one transient fault (503, a dropped
connection, 429 with Retry-After) on any of them is ridden out and the resource is migrated and recorded; a
fault that does not go away fails that resource only, naming it and its Lease, within the task's timeout.
"""

from __future__ import annotations

import re
import time

import pytest
from test_migration import _crd, _install_crd, _storage_state, contents, put_configmaps, run, snapshot

WIDGETS = "widgets.example.com"
NEW = "example.com/v1"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
STATES = "/apis/migration.k8s.io/v1alpha1/storagestates"


def lease_path(resource: str) -> str:
    return f"{LEASES}/kubeupgrade-storage-migration-{resource}"


@pytest.fixture
def plane(control_plane_factory):
    plane = control_plane_factory(apiservers=3, releases="1.32", tls=True, seed="demo")
    _install_crd(plane, "storage_state_crd.json")
    return plane


def released_lease(plane, resource):
    """The Lease a finished run leaves (holder cleared): the next run takes it with a PUT."""
    name = f"kubeupgrade-storage-migration-{resource}"
    plane.admin.put_raw("leases.coordination.k8s.io", "kube-system", name, "coordination.k8s.io/v1",
                        {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                         "metadata": {"name": name, "namespace": "kube-system"},
                         "spec": {"holderIdentity": None, "leaseDurationSeconds": 1,
                                  "renewTime": "2020-01-01T00:00:00.000000Z"}})


def requests_to(plane, path: str) -> int:
    return sum(s["by_path"].get(path, 0) for s in plane.admin.stats()["apiservers"])


# (name, method, the exact path faulted, run arguments, setup)
REQUESTS = [
    ("lease-get", "GET", lease_path(WIDGETS), {}, None),
    ("lease-create", "POST", LEASES, {}, None),
    ("lease-update", "PUT", lease_path(WIDGETS), {}, released_lease),
    ("crd-get", "GET", f"{CRDS}/{WIDGETS}", {}, None),
    ("crd-status-put", "PUT", f"{CRDS}/{WIDGETS}/status", {}, None),
    ("storagestate-get-under-lease", "GET", f"{STATES}/{WIDGETS}", {}, None),
    ("storagestate-get-to-record", "GET", f"{STATES}/{WIDGETS}", {"lock": False}, None),
    ("storagestate-create", "POST", STATES, {}, None),
    ("storagestate-status-put", "PUT", f"{STATES}/{WIDGETS}/status", {}, None),
]
# Two in a row: a dropped read on a kept connection is sent once more by the transport itself.
FAULTS = [
    ("503", "status", {"code": 503, "count": 2}),
    ("drop", "drop", {"count": 2}),
    ("429-retry-after", "status", {"code": 429, "retry_after": 1, "count": 2}),
]


@pytest.mark.parametrize("fault_name,kind,params", FAULTS, ids=[f[0] for f in FAULTS])
@pytest.mark.parametrize("name,method,path,args,setup", REQUESTS, ids=[r[0] for r in REQUESTS])
def test_a_transient_fault_on_a_bookkeeping_request_is_ridden_out(
        plane, capsys, name, method, path, args, setup, fault_name, kind, params):
    if setup is not None:
        setup(plane, WIDGETS)
    before = snapshot(plane, WIDGETS)
    plane.admin.reset_stats()
    plane.admin.fault(kind, method=method, path_regex=f"^{re.escape(path)}$", **params)
    failed, result = run(plane, capsys, resources=[WIDGETS], backend="client", request_timeout=5, timeout=60,
                         **args)
    assert not failed, result["msg"]
    entry = result["migrations"][0]
    assert entry["status"] == "succeeded" and entry["verified"] and entry["record"] in ("created", "updated"), entry
    assert requests_to(plane, path) >= params["count"] + 1  # the faulted request was sent again
    after = snapshot(plane, WIDGETS)
    assert {version for version, _obj in after.values()} == {NEW}
    assert contents(after) == contents(before)
    assert _storage_state(plane, WIDGETS)["persistedStorageVersionHashes"] == [entry["storage_hash"]]
    assert _crd(plane, WIDGETS)["status"]["storedVersions"] == ["v1"]
    if args.get("lock", True):
        lease = [o["object"] for o in plane.admin.stored_objects("leases.coordination.k8s.io")
                 if o["name"] == f"kubeupgrade-storage-migration-{WIDGETS}"]
        assert lease and not lease[0]["spec"].get("holderIdentity")  # released at the end


def _entries(result) -> dict:
    return {m["resource"]: m for m in result["migrations"]}


def test_a_lease_that_cannot_be_read_fails_its_resource_only_within_the_timeout(plane, capsys):
    """503 on every GET of one resource's Lease: that resource fails at the task's deadline, naming itself and its
    Lease; the other resource of the task is migrated and recorded."""
    put_configmaps(plane, 5)
    before = snapshot(plane, "configmaps")
    plane.admin.fault("status", code=503, method="GET", path_regex=f"^{re.escape(lease_path(WIDGETS))}$")
    started = time.monotonic()
    failed, result = run(plane, capsys, resources=["configmaps", WIDGETS], backend="client", timeout=6)
    elapsed = time.monotonic() - started
    assert failed and elapsed < 6 + 5, (elapsed, result["msg"])
    entries = _entries(result)
    widgets = entries[WIDGETS]
    assert widgets["status"] == "failed", widgets
    assert f"kube-system/kubeupgrade-storage-migration-{WIDGETS}" in widgets["error"], widgets["error"]
    assert f"Migration of {WIDGETS} not started" in widgets["error"] and "after the task's timeout" in widgets["error"]
    assert "503" in widgets["error"] and "configmaps" not in widgets["error"]
    assert f"{WIDGETS}: " in result["msg"] and "1 of 2 resources failed" in result["msg"], result["msg"]
    configmaps = entries["configmaps"]
    assert configmaps["status"] == "succeeded" and configmaps["verified"], configmaps
    assert _storage_state(plane, "configmaps")["persistedStorageVersionHashes"] == [configmaps["storage_hash"]]
    assert contents(snapshot(plane, "configmaps")) == contents(before)
    assert (_storage_state(plane, WIDGETS) or {}).get("persistedStorageVersionHashes") != [widgets["storage_hash"]]


@pytest.mark.parametrize("fault", [{"code": 503}, {"code": 429, "retry_after": 1}], ids=["503", "429"])
def test_a_record_that_cannot_be_written_fails_its_resource_only_naming_the_record(plane, capsys, fault):
    """Creating widgets' record fails for as long as the task may run (configmaps has a record already, which is
    updated): widgets fails at the task's deadline, naming its record; configmaps is recorded."""
    put_configmaps(plane, 5)
    plane.admin.put_raw("storagestates.migration.k8s.io", None, "configmaps", "migration.k8s.io/v1alpha1",
                        {"apiVersion": "migration.k8s.io/v1alpha1", "kind": "StorageState",
                         "metadata": {"name": "configmaps"}, "spec": {"resource": {"resource": "configmaps"}},
                         "status": {"persistedStorageVersionHashes": ["Unknown"]}})
    plane.admin.fault("status", method="POST", path_regex=f"^{re.escape(STATES)}$", **fault)  # every create
    started = time.monotonic()
    failed, result = run(plane, capsys, resources=["configmaps", WIDGETS], backend="client", timeout=6)
    assert failed and time.monotonic() - started < 6 + 5, result["msg"]
    entries = _entries(result)
    assert entries["configmaps"]["status"] == "succeeded", entries["configmaps"]
    error = entries[WIDGETS]["error"]
    assert entries[WIDGETS]["status"] == "failed" and WIDGETS in error and "StorageState" in error, error
    assert "after the task's timeout" in error and str(fault["code"]) in error, error
    assert (_storage_state(plane, WIDGETS) or {}).get("persistedStorageVersionHashes") != [
        entries[WIDGETS]["storage_hash"]]


def test_losing_one_resources_lease_stops_that_resource_only_naming_its_lease(plane, capsys):
    """Every renewal of the configmaps Lease fails: configmaps stops once its Lease would expire, naming that Lease;
    widgets, migrating at the same time under its own Lease, goes on and is recorded."""
    put_configmaps(plane, 60)
    for i in range(40):
        plane.admin.put_raw(WIDGETS, "demo", f"w-{i:04d}", "example.com/v1alpha1", {"spec": {"size": i}})
    plane.admin.fault("slow", delay=0.15, method="PUT", path_regex="/(configmaps|widgets)/")  # ~9 s and ~7 s of writes
    plane.admin.fault("status", code=503, method="PUT", path_regex=f"^{re.escape(lease_path('configmaps'))}$")
    failed, result = run(plane, capsys, resources=["configmaps", WIDGETS], backend="client", concurrency=1,
                         chunk_size=5, lock_duration=5, timeout=60)
    assert failed, result["msg"]
    entries = _entries(result)
    configmaps, widgets = entries["configmaps"], entries[WIDGETS]
    assert configmaps["status"] == "failed", configmaps
    assert "Migration of configmaps stopped" in configmaps["error"], configmaps["error"]
    assert "kube-system/kubeupgrade-storage-migration-configmaps could not be renewed" in configmaps["error"]
    assert WIDGETS not in configmaps["error"]
    assert widgets["status"] == "succeeded" and widgets["verified"] and widgets["record"] in ("created", "updated"), \
        widgets
    assert _storage_state(plane, WIDGETS)["persistedStorageVersionHashes"] == [widgets["storage_hash"]]
    assert (_storage_state(plane, "configmaps") or {}).get("persistedStorageVersionHashes") != [
        configmaps["storage_hash"]]
    assert "1 of 2 resources failed" in result["msg"] and "configmaps" in result["msg"], result["msg"]
