# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""storage_migration: argument errors, check mode, idempotence, the pre-start gate; fake apiservers."""

from __future__ import annotations

import pytest
from kube_fakes import recorded, recorded_route, unreachable
from kube_module_args import BASE_ARGS, ENDPOINTS, HOST

from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe import apiserver_io as observe
from ansible_collections.kubeupgrade.storage.plugins.modules import storage_migration as module


def with_records(cluster, storage_states=True):
    crd = recorded("crd/09-get-crd-storedVersions-v1alpha1-v1.json")["body"]
    cluster.routes[HOST][observe.CRD_PATH] = (200, {"items": [crd], "metadata": {}})
    if storage_states:
        cluster.routes[HOST][observe.STORAGE_STATE_PATH] = recorded_route(
            "svm-sigs/07-list-storagestates-after-trigger-initial-cycle.json")


@pytest.mark.parametrize("args,needle", [
    ({}, "Set 'resources'"),
    ({"select": "from_check", "resources": ["configmaps"], "target_release": "1.33"}, "mutually exclusive"),
    ({"select": "from_records", "resources": ["configmaps"]}, "mutually exclusive"),
    ({"resources": ["configmaps"], "qps": 0.001}, "'qps' 0.001 allows one request every 1000s"),
    ({"resources": ["configmaps"], "parallel_resources": 0}, "'parallel_resources' must be at least 1"),
    ({"resources": ["configmaps"], "max_failures": -1}, "'max_failures' must not be negative"),
    ({"resources": ["configmaps"], "timeout": -3}, "'timeout' must not be negative"),
    ({"resources": ["configmaps"], "lock_duration": 1}, "'lock_duration' must be at least 5"),
    ({"select": "from_check"}, "needs 'target_release'"),
    ({"resources": ["configmaps"], "concurrency": 0}, "'concurrency' must be at least 1"),
    ({"resources": ["configmaps"], "chunk_size": 0}, "'chunk_size' must be at least 1"),
    ({"resources": ["configmaps"], "qps": -1}, "'qps' must not be negative"),
    ({"resources": ["configmaps"], "stall_timeout": -5}, "'stall_timeout' must not be negative"),
    ({"resources": ["configmaps"], "timeout": 0}, "'timeout' must be at least 1"),
    ({"resources": [" "]}, "non-empty string"),
    ({"resources": ["configmaps"], "backend": "magic"}, "backend"),
])
def test_argument_errors_fail_before_any_request(run_module, fake_cluster, args, needle):
    failed, result = run_module(module, {**BASE_ARGS, **args})
    assert failed and needle in result["msg"]
    assert fake_cluster.writes() == []
    assert fake_cluster.log == []  # not even a read


@pytest.mark.parametrize("kind", ["file", "unwritable"])
def test_a_checkpoint_dir_that_cannot_be_written_fails_before_any_request(run_module, fake_cluster, tmp_path, kind):
    target = tmp_path / "checkpoints"
    if kind == "file":
        target.write_text("not a directory")
    else:
        target.mkdir(mode=0o500)
    failed, result = run_module(module, {**BASE_ARGS, "resources": ["configmaps"], "checkpoint_dir": str(target)})
    if kind == "unwritable" and __import__("os").access(str(target), __import__("os").W_OK):
        return  # running as root: every directory is writable, the "file" case covers the check
    assert failed and "'checkpoint_dir'" in result["msg"] and "writable directory" in result["msg"]
    assert fake_cluster.writes() == []


def test_check_mode_reports_backend_and_writes_nothing(run_module, fake_cluster):
    with_records(fake_cluster, storage_states=False)
    failed, result = run_module(module, {**BASE_ARGS, "resources": ["secrets", "deployments.apps"]}, check_mode=True)
    assert not failed and result["changed"] is True
    assert [m["resource"] for m in result["migrations"]] == ["secrets", "deployments.apps"]
    assert {m["status"] for m in result["migrations"]} == {"would_migrate"}
    assert result["backend"]["backend"] == "client"  # the default: works everywhere, fastest
    assert result["backend"]["api_version"] is None
    assert result["migrations"][1]["storage_hash"] == "8aSe+NMegvE="
    assert fake_cluster.writes() == []


@pytest.mark.parametrize("backend,expected,api_version", [
    ("client", "client", None), ("auto", "client", None),
    ("intree", "intree", "storagemigration.k8s.io/v1alpha1"),  # the recorded 1.32 serves v1alpha1
])
def test_check_mode_backend_choice(run_module, fake_cluster, backend, expected, api_version):
    with_records(fake_cluster, storage_states=False)
    failed, result = run_module(module, {**BASE_ARGS, "resources": ["secrets"], "backend": backend}, check_mode=True)
    assert not failed and result["migrations"][0]["backend"] == expected
    assert result["migrations"][0]["api_version"] == api_version


def test_forced_backend_the_cluster_does_not_serve_fails(run_module, fake_cluster):
    with_records(fake_cluster, storage_states=False)
    failed, result = run_module(module, {**BASE_ARGS, "resources": ["secrets"], "backend": "sigs"}, check_mode=True)
    assert failed and "backend=sigs" in result["msg"] and "backend=client" in result["msg"]


def test_already_migrated_resources_are_skipped_unchanged(run_module, fake_cluster):
    with_records(fake_cluster)
    failed, result = run_module(module, {**BASE_ARGS, "resources": ["configmaps"]})
    assert not failed and result["changed"] is False
    assert result["skipped_resources"][0]["resource"] == "configmaps" and "qFsyl6wFWjQ=" in result["skipped_resources"][0]["reason"]
    assert fake_cluster.writes() == []


def test_gate_refuses_to_start_when_endpoints_disagree(run_module, fake_cluster):
    with_records(fake_cluster, storage_states=False)
    fake_cluster.serve_deployments_hash(ENDPOINTS[2], "zzzzzzzzzzz=")
    failed, result = run_module(module, {**BASE_ARGS, "resources": ["deployments.apps"], "backend": "client"})
    assert failed and "apiservers did not agree" in result["msg"]
    # one release everywhere: not an upgrade to finish, but flags that differ
    assert "yet disagree: give them the same --runtime-config" in result["msg"], result["msg"]
    assert f"{ENDPOINTS[2]}=zzzzzzzzzzz=" in result["msg"] and f"{ENDPOINTS[0]}=8aSe+NMegvE=" in result["msg"]
    assert fake_cluster.writes() == []


def test_gate_refuses_to_start_when_an_endpoint_is_unreachable(run_module, fake_cluster):
    with_records(fake_cluster, storage_states=False)
    fake_cluster.routes[ENDPOINTS[1]]["/version"] = unreachable()
    fake_cluster.routes[ENDPOINTS[1]]["/api"] = unreachable()
    failed, result = run_module(module, {**BASE_ARGS, "resources": ["secrets"], "backend": "client"})
    assert failed and "unreachable" in result["msg"] and ENDPOINTS[1] in result["msg"]
    assert fake_cluster.writes() == []


def test_from_check_without_a_known_release_fails_clearly(run_module, fake_cluster):
    with_records(fake_cluster, storage_states=False)
    failed, result = run_module(module, {**BASE_ARGS, "select": "from_check", "target_release": "0.1"},
                                check_mode=True)
    assert failed and "no release profile" in result["msg"]


def test_rejected_credentials_are_not_reported_as_a_disagreement(run_module, fake_cluster):
    status = {"kind": "Status", "status": "Failure", "reason": "Unauthorized", "code": 401, "message": "Unauthorized"}
    for path in ("/version", "/api", "/apis", "/readyz"):
        fake_cluster.routes[ENDPOINTS[1]][path] = (401, status)
    failed, result = run_module(module, {**BASE_ARGS, "resources": ["deployments.apps"], "backend": "client"})
    assert failed and "agreement could not be established" in result["msg"], result["msg"]
    assert f"Fix the credentials used for {ENDPOINTS[1]}" in result["msg"]
    assert "did not agree" not in result["msg"] and fake_cluster.writes() == []


@pytest.mark.parametrize("args, selected_by", [
    ({"select": "auto", "resources": ["secrets"]}, "resources"),
    ({"select": "auto"}, "from_records"),
    ({"select": "auto_from_check", "target_release": "1.33"}, "from_check"),
    ({"select": "resources", "resources": ["secrets"]}, "resources"),
])
def test_select_auto_says_the_mode_it_stood_for(run_module, fake_cluster, args, selected_by):
    with_records(fake_cluster, storage_states=False)
    failed, result = run_module(module, {**BASE_ARGS, **args}, check_mode=True)
    assert not failed, result["msg"]
    assert result["selected_by"] == selected_by
    assert fake_cluster.writes() == []


@pytest.mark.parametrize("args, why", [
    ({"resources": ["secrets"], "target_release": "1.33"}, "the resources named were migrated"),
    ({"target_release": ""}, "no target release"),
    ({"target_crds": [{"kind": "CustomResourceDefinition"}]}, "no target release"),
])
def test_auto_from_check_without_a_target_or_with_resources_selects_nothing_and_sends_no_request(
        run_module, fake_cluster, args, why):
    failed, result = run_module(module, {**BASE_ARGS, "select": "auto_from_check", **args})
    assert not failed and result["changed"] is False and result["selected_by"] == "none"
    assert why in result["msg"] and result["migrations"] == [] and result["summary"] == []
    assert fake_cluster.log == []


def test_a_select_that_selects_nothing_still_refuses_bad_values(run_module, fake_cluster):
    failed, result = run_module(module, {**BASE_ARGS, "select": "auto_from_check", "qps": -1})
    assert failed and "'qps' must not be negative" in result["msg"]
    assert fake_cluster.log == []
