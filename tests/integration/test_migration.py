# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""storage_migration against the simulated control plane: every backend, every fault, the gate.

The module runs in-process (its real main(), argument handling and HTTP), and the assertions read
the simulator's store through the admin interface: which version each object is encoded in, and
that every object's content is identical before and after.
"""

import json
import sys
import threading
import time

import pytest
from ansible.module_utils.testing import patch_module_args  # ansible-core 2.19+, the oldest supported
from apisim.seeds import load_manifest

from ansible_collections.kubeupgrade.storage.plugins.modules import storage_migration

WIDGETS = "widgets.example.com"
LEASECANDIDATES = "leasecandidates.coordination.k8s.io"  # stored v1alpha1 by 1.31, v1alpha2 by 1.32
VOLATILE = ("resourceVersion", "managedFields")


@pytest.fixture
def plane(control_plane_factory):
    plane = control_plane_factory(apiservers=3, releases="1.32", tls=True, seed="demo", migrator_delay=0.2)
    _install_crd(plane, "storage_state_crd.json")
    return plane


def _install_crd(plane, manifest):
    crd = load_manifest(manifest)
    plane.admin.put_raw("customresourcedefinitions.apiextensions.k8s.io", None, crd["metadata"]["name"],
                        "apiextensions.k8s.io/v1beta1", crd)


def run(plane, capsys, check_mode=False, **args):
    params = {"kubeconfig": plane.kubeconfig, "endpoints": plane.endpoints, "poll_interval": 0.1,
              "checkpoint_dir": str(plane.workdir) + "/checkpoints"}
    params.update(args)
    if check_mode:
        params["_ansible_check_mode"] = True
    with patch_module_args(params):
        with pytest.raises(SystemExit):
            storage_migration.main()
    out = capsys.readouterr().out
    result = json.loads(out.strip().splitlines()[-1])
    assert "Traceback" not in json.dumps(result.get("msg", "")), result
    return bool(result.get("failed")), result


def snapshot(plane, resource):
    """{namespace/name: (encoded_version, object without volatile metadata)} straight from the store."""
    result = {}
    for stored in plane.admin.stored_objects(resource):
        obj = json.loads(json.dumps(stored["object"]))
        for key in VOLATILE:
            obj.get("metadata", {}).pop(key, None)
        result[f"{stored['namespace']}/{stored['name']}"] = (stored["encoded_version"], obj)
    return result


def contents(snap):
    return {k: v[1] for k, v in snap.items()}


def put_configmaps(plane, count, namespace="demo", version="v1"):
    for i in range(count):
        plane.admin.put_raw("configmaps", namespace, f"old-{i:04d}", version,
                            {"metadata": {"labels": {"i": str(i)}}, "data": {"i": str(i), "payload": "y" * 32}})


def _storage_state(plane, resource):
    for stored in plane.admin.stored_objects("storagestates.migration.k8s.io"):
        if stored["name"] == resource:
            return stored["object"].get("status") or {}
    return None


def _crd(plane, name):
    for stored in plane.admin.stored_objects("customresourcedefinitions.apiextensions.k8s.io"):
        if stored["name"] == name:
            return stored["object"]
    return None


# -- every backend --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", ["client", "intree", "sigs"])
def test_backend_migrates_old_objects_keeps_content_and_records_it(plane, capsys, backend):
    if backend == "sigs":
        _install_crd(plane, "storage_migration_crd.json")
    before = snapshot(plane, WIDGETS)
    assert {v[0] for v in before.values()} == {"example.com/v1alpha1", "example.com/v1"}

    failed, result = run(plane, capsys, check_mode=True, resources=[WIDGETS], backend=backend)
    assert not failed and result["changed"] and result["migrations"][0]["status"] == "would_migrate"
    assert result["migrations"][0]["backend"] == backend
    assert snapshot(plane, WIDGETS) == before  # check mode wrote nothing

    failed, result = run(plane, capsys, resources=[WIDGETS], backend=backend, stall_timeout=30, timeout=60)
    assert not failed, result
    assert result["changed"] and result["migrations"][0]["status"] == "succeeded"
    after = snapshot(plane, WIDGETS)
    assert {v[0] for v in after.values()} == {"example.com/v1"}
    assert contents(after) == contents(before)
    current = result["migrations"][0]["storage_hash"]
    assert _storage_state(plane, WIDGETS)["persistedStorageVersionHashes"] == [current]
    assert _crd(plane, WIDGETS)["status"]["storedVersions"] == ["v1"], json.dumps(result)

    failed, result = run(plane, capsys, resources=[WIDGETS], backend=backend)
    assert not failed and not result["changed"] and result["skipped_resources"][0]["resource"] == WIDGETS


def test_builtin_resource_and_next_preflight_is_safe(plane, capsys):
    put_configmaps(plane, 30, version="v1")
    before = snapshot(plane, "configmaps")
    failed, result = run(plane, capsys, resources=["configmaps"], backend="client", chunk_size=7, concurrency=3)
    assert not failed, result
    assert result["migrations"][0]["objects_migrated"] == len(before)
    assert contents(snapshot(plane, "configmaps")) == contents(before)
    try:
        from ansible_collections.kubeupgrade.storage.plugins.modules import storage_version_check
    except ImportError:
        pytest.skip("storage_version_check has not landed")
    with patch_module_args({"kubeconfig": plane.kubeconfig, "endpoints": plane.endpoints, "target_release": "1.32",
                            "resources": ["configmaps", WIDGETS], "fail_on": []}):
        with pytest.raises(SystemExit):
            storage_version_check.main()
    check = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    verdicts = {r["resource"]: r["verdict"] for r in check.get("resources", [])}
    assert verdicts.get("configmaps") == "safe", check


def test_a_migration_on_a_cluster_without_the_storagestate_crd_installs_it_and_records_current(
        control_plane_factory, capsys):
    """The migration is the one moment a record can say [current]: it is not skipped for want of the CRD."""
    plane = control_plane_factory(apiservers=2, releases="1.32", tls=True, seed="demo")
    assert _crd(plane, "storagestates.migration.k8s.io") is None
    put_configmaps(plane, 5, version="v1")
    failed, result = run(plane, capsys, resources=["configmaps"], backend="client")
    assert not failed, result
    assert _crd(plane, "storagestates.migration.k8s.io") is not None
    status = _storage_state(plane, "configmaps")
    assert status["persistedStorageVersionHashes"] == [result["migrations"][0]["storage_hash"]], status


def test_refresh_records_gives_an_unrecorded_resource_a_record_so_from_records_migrates_it(plane, capsys):
    put_configmaps(plane, 5, version="v1")
    before = snapshot(plane, "configmaps")
    assert _storage_state(plane, "configmaps") is None
    failed, result = run(plane, capsys, select="from_records", backend="client")
    # No record: nothing tells it to migrate configmaps (only the CRD listing two storedVersions is selected).
    assert not failed and "configmaps" not in [m["resource"] for m in result["migrations"]], result
    failed, result = run(plane, capsys, select="from_records", backend="client", check_mode=True, refresh_records=True)
    assert not failed and _storage_state(plane, "configmaps") is None  # check mode writes nothing
    assert {r["name"]: r["action"] for r in result["records_refreshed"]["records"]}["configmaps"] == "created"
    failed, result = run(plane, capsys, select="from_records", backend="client", refresh_records=True)
    assert not failed, result
    assert {r["name"]: r["action"] for r in result["records_refreshed"]["records"]}["configmaps"] == "created"
    migrated = {m["resource"]: m for m in result["migrations"]}
    assert migrated["configmaps"]["objects_migrated"] == len(before)
    assert contents(snapshot(plane, "configmaps")) == contents(before)
    status = _storage_state(plane, "configmaps")
    assert status["persistedStorageVersionHashes"] == [status["currentStorageVersionHash"]]


# -- faults on the client-side migrator ----------------------------------------------------------------------

FAULTS = [  # method WRITE: the write under test (PUT for write: put, PATCH for write: apply)
    ("status", {"code": 429, "retry_after": 1, "count": 3, "method": "WRITE"}),
    ("status", {"code": 500, "count": 3, "method": "WRITE"}),
    ("status", {"code": 503, "count": 3, "method": "GET", "path_regex": "^/api/v1/configmaps$"}),
    ("status", {"code": 429, "retry_after": 1, "count": 2, "method": "GET", "path_regex": "^/api/v1/configmaps$"}),
    ("drop", {"count": 3, "method": "WRITE"}),
    ("drop", {"count": 2, "method": "GET", "path_regex": "^/api/v1/configmaps$"}),
    ("slow", {"delay": 0.3, "count": 5}),
    ("restart_during_list", {"after_chunks": 1, "count": 1}),
]


@pytest.mark.parametrize("write", ["put", "apply"])
@pytest.mark.parametrize("kind,params", FAULTS, ids=[f"{k}-{p.get('code', '')}-{p.get('method', '')}" for k, p in FAULTS])
def test_client_migrator_survives_fault_and_loses_nothing(plane, capsys, kind, params, write):
    put_configmaps(plane, 40, version="v1")
    before = snapshot(plane, "configmaps")
    if params.get("method") == "WRITE":
        params = dict(params, method="PUT" if write == "put" else "PATCH")
    plane.admin.fault(kind, **params)
    failed, result = run(plane, capsys, resources=["configmaps"], backend="client", chunk_size=10, concurrency=4,
                         request_timeout=5, write=write)
    assert not failed, result
    after = snapshot(plane, "configmaps")
    assert contents(after) == contents(before)
    assert result["migrations"][0]["objects_migrated"] >= len(before)
    if kind in ("status", "drop"):
        assert result["migrations"][0]["progress"]["retries"] >= 1


def test_expired_continue_token_continues_from_fallback(plane, capsys):
    put_configmaps(plane, 60, version="v1")
    before = snapshot(plane, "configmaps")
    plane.admin.fault("slow", delay=0.4, count=1, method="GET", path_regex="continue=")
    compactor = threading.Timer(0.2, plane.admin.compact)
    compactor.start()
    failed, result = run(plane, capsys, resources=["configmaps"], backend="client", chunk_size=10, concurrency=2)
    compactor.join()
    assert not failed, result
    assert contents(snapshot(plane, "configmaps")) == contents(before)
    assert result["migrations"][0]["objects_migrated"] >= len(before)


def test_expired_token_via_checkpoint_resume(plane, capsys, tmp_path):
    """A resumed checkpoint whose token expired continues through the server's fallback token, then verifies."""
    from ansible_collections.kubeupgrade.storage.plugins.module_utils._http import client as client_mod
    from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.settings import ConnectionSettings
    from ansible_collections.kubeupgrade.storage.plugins.module_utils._rewrite import checkpoint as cp
    from ansible_collections.kubeupgrade.storage.plugins.module_utils._rewrite import migrator as mig
    from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import MigrationError
    from ansible_collections.kubeupgrade.storage.plugins.module_utils.resources import GroupResource

    put_configmaps(plane, 30, version="v1")
    api = client_mod.ApiClient(ConnectionSettings.from_params({"kubeconfig": plane.kubeconfig}))
    target = mig.ResourceTarget(GroupResource("", "configmaps"), "v1", True, "ConfigMap", "h")
    store = cp.FileStore(str(tmp_path))
    calls = []

    def gate():
        calls.append(1)
        if len(calls) == 2:
            raise MigrationError("interrupted")

    options = mig.ClientOptions(chunk_size=10)
    with pytest.raises(MigrationError):
        mig.ClientMigrator(api, target, options, mig.RunIdentity("a", api.endpoint), store).configure(
            hooks=mig.Hooks(gate=gate, gate_interval=0)).run()
    plane.admin.compact()
    progress = mig.ClientMigrator(api, target, options, mig.RunIdentity("b", api.endpoint), store).run()
    assert progress.resumed and progress.expired_tokens == 1 and progress.verification_pass and progress.verified
    assert {v[0] for v in snapshot(plane, "configmaps").values()} == {"v1"}


def test_denied_update_names_the_object_and_changes_nothing(plane, capsys):
    put_configmaps(plane, 12, version="v1")
    before = snapshot(plane, "configmaps")
    plane.admin.fault("deny_update", resource="configmaps", namespace="demo", name="old-0005", code=422,
                      message="ValidatingAdmissionPolicy 'freeze' with binding 'freeze' denied request: frozen")
    failed, result = run(plane, capsys, resources=["configmaps"], backend="client", chunk_size=4, concurrency=1)
    assert failed
    assert "configmaps demo/old-0005" in result["msg"] and "frozen" in result["msg"] and "422" in result["msg"]
    after = snapshot(plane, "configmaps")
    assert contents(after) == contents(before)
    entry = result["migrations"][0]
    assert [f["object"] for f in entry["failed_objects"]] == ["configmaps demo/old-0005"]
    # the resource went on: every other object is rewritten, the denied one is still in its old encoding
    assert {k for k, v in after.items() if v[0] != "v1"} == set()  # configmaps' old and new encodings are both v1
    assert entry["objects_migrated"] == len(before) - 1 and entry["status"] == "failed"
    assert (_storage_state(plane, "configmaps") or {}).get("persistedStorageVersionHashes") != [entry["storage_hash"]]


def test_undecodable_object_gives_a_clear_decode_error(plane, capsys):
    put_configmaps(plane, 5, version="v1")
    plane.admin.put_raw("configmaps", "demo", "victim", "v9", {"data": {"k": "v"}})
    before = snapshot(plane, "configmaps")
    failed, result = run(plane, capsys, resources=["configmaps"], backend="client")
    assert failed
    message = result["msg"]
    assert "cannot decode" in message and "demo" in message and "Not retried" in message
    assert snapshot(plane, "configmaps") == before


# -- cluster-side failures ------------------------------------------------------------------------------------

def test_intree_nonexistent_resource_stalls_with_a_reason(plane, capsys):
    # A CR whose CRD exists but whose controller path never progresses: stall detection must fire before timeout.
    plane.admin.fault("deny_update", resource="widgets.example.com", namespace="demo", name="widget-0", code=422,
                      message="widgets are frozen")
    failed, result = run(plane, capsys, resources=[WIDGETS], backend="intree", stall_timeout=5, timeout=60)
    assert failed
    assert WIDGETS in result["msg"] and ("Failed" in result["msg"] or "stalled" in result["msg"])


# -- the agreement gate ---------------------------------------------------------------------------------------

def test_gate_refuses_to_start_while_endpoints_disagree(control_plane_factory, capsys):
    plane = control_plane_factory(apiservers=3, releases=["1.32", "1.32", "1.31"], tls=True)
    failed, result = run(plane, capsys, resources=[LEASECANDIDATES], backend="client")
    assert failed and "apiservers did not agree" in result["msg"], result
    assert plane.endpoints[2] in result["msg"]
    assert "Finish or roll back the upgrade of the disagreeing apiservers" in result["msg"]  # 1.31 beside 1.32


def _candidate(i):
    return {"spec": {"leaseName": f"lease-{i}", "binaryVersion": "1.32.0", "emulationVersion": "1.32",
                     "strategy": "OldestEmulationVersion"}}


@pytest.mark.parametrize("backend", ["client", "intree"])
def test_gate_stops_a_running_migration_when_an_endpoint_is_switched_back(control_plane_factory, capsys, backend):
    plane = control_plane_factory(apiservers=3, releases="1.32", tls=True, migrator_delay=3.0)
    for i in range(80):
        plane.admin.put_raw(LEASECANDIDATES, "kube-system", f"candidate-{i:03d}", "coordination.k8s.io/v1alpha2",
                            _candidate(i))
    plane.admin.fault("slow", delay=0.1, method="PUT", path_regex="/leasecandidates/")
    switch = threading.Timer(1.0, plane.admin.set_release, args=(2, "1.31"))
    switch.start()
    started = time.monotonic()
    failed, result = run(plane, capsys, resources=[LEASECANDIDATES], backend=backend, chunk_size=5, concurrency=1,
                         poll_interval=0.2, timeout=60)
    switch.join()
    assert failed, result
    assert "stopped agreeing" in result["msg"] and plane.endpoints[2] in result["msg"]
    assert time.monotonic() - started < 30
    if backend == "intree":
        names = [m["name"] for m in result.get("migrations", []) if m.get("name")]
        remaining = [s["name"] for s in plane.admin.stored_objects("storageversionmigrations.storagemigration.k8s.io")]
        assert names and not set(names) & set(remaining)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))


@pytest.mark.parametrize("backend,needle", [("sigs", "retries a failing LIST forever"), ("intree", "cannot decode")])
def test_stuck_cluster_migration_on_undecodable_object_is_stopped_with_a_reason(plane, capsys, backend, needle):
    if backend == "sigs":
        _install_crd(plane, "storage_migration_crd.json")
    plane.admin.put_raw("configmaps", "demo", "victim", "v9", {"data": {"k": "v"}})
    started = time.monotonic()
    failed, result = run(plane, capsys, resources=["configmaps"], backend=backend, stall_timeout=3, timeout=60)
    assert failed and "stalled" in result["msg"] and needle in result["msg"], result["msg"]
    assert time.monotonic() - started < 30  # the stall is noticed long before the timeout
    group = "migration.k8s.io" if backend == "sigs" else "storagemigration.k8s.io"
    assert plane.admin.stored_objects(f"storageversionmigrations.{group}") == []  # the stuck object was deleted


# -- bounded, locked, stormed ---------------------------------------------------------------------------------

def test_tiny_qps_and_a_short_timeout_end_at_the_deadline(plane, capsys):
    put_configmaps(plane, 30, version="v1")
    before = snapshot(plane, "configmaps")
    started = time.monotonic()
    failed, result = run(plane, capsys, resources=["configmaps"], backend="client", qps=0.01, timeout=5, chunk_size=5)
    elapsed = time.monotonic() - started
    assert failed and ("timed out" in result["msg"] or "timeout" in result["msg"]), result["msg"]
    assert elapsed < 5 + 5, elapsed  # the whole task, observation included, ends within a few seconds of it
    assert contents(snapshot(plane, "configmaps")) == contents(before)
    assert _storage_state(plane, "configmaps") is None or _storage_state(plane, "configmaps").get(
        "persistedStorageVersionHashes") != [result["migrations"][0]["storage_hash"]]


def test_a_storm_of_twenty_429_with_retry_after_is_ridden_out(plane, capsys):
    put_configmaps(plane, 20, version="v1")
    before = snapshot(plane, "configmaps")
    plane.admin.fault("status", code=429, retry_after=1, count=20, method="PUT", path_regex="/configmaps/")
    failed, result = run(plane, capsys, resources=["configmaps"], backend="client", chunk_size=50, concurrency=1,
                         timeout=120)
    assert not failed, result["msg"]
    entry = result["migrations"][0]
    assert entry["progress"]["retries"] >= 20 and entry["verified"] and entry["objects_failed"] == 0
    assert contents(snapshot(plane, "configmaps")) == contents(before)


def test_a_second_run_waits_for_the_lease_and_fails_naming_the_holder(plane, capsys):
    holder = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
              "metadata": {"name": "kubeupgrade-storage-migration-configmaps", "namespace": "kube-system"},
              "spec": {"holderIdentity": "other-run@elsewhere", "leaseDurationSeconds": 3600,
                       "renewTime": time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())}}
    plane.admin.put_raw("leases.coordination.k8s.io", "kube-system", holder["metadata"]["name"],
                        "coordination.k8s.io/v1", holder)
    put_configmaps(plane, 5, version="v1")
    before = snapshot(plane, "configmaps")
    started = time.monotonic()
    failed, result = run(plane, capsys, resources=["configmaps"], backend="client", timeout=4)
    assert failed and "other-run@elsewhere" in result["msg"], result["msg"]
    assert time.monotonic() - started < 4 + 5
    assert snapshot(plane, "configmaps") == before  # not a single write while someone else holds the Lease


def test_the_lease_is_released_after_a_run(plane, capsys):
    put_configmaps(plane, 5, version="v1")
    failed, result = run(plane, capsys, resources=["configmaps"], backend="client")
    assert not failed, result["msg"]
    lease = [o["object"] for o in plane.admin.stored_objects("leases.coordination.k8s.io")
             if o["name"] == "kubeupgrade-storage-migration-configmaps"]
    assert lease and not lease[0]["spec"].get("holderIdentity")
