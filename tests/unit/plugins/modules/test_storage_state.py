# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""storage_state: check mode writes nothing; a missing CRD with install_crd=false is one clear error."""

from __future__ import annotations

import pytest
from kube_fakes import unreachable
from kube_module_args import BASE_ARGS, ENDPOINTS

from ansible_collections.kubeupgrade.storage.plugins.modules import storage_state as module


def test_check_mode_reports_creates_and_writes_nothing(run_module, fake_cluster):
    failed, result = run_module(module, {**BASE_ARGS, "resources": ["pods"]}, check_mode=True, diff=True)
    assert not failed and result["changed"] and result["crd_installed"]
    assert result["records"][0]["action"] == "created" and "pods" in result["diff"]["after"]
    assert fake_cluster.writes() == []


def test_missing_crd_without_install_fails_clearly(run_module, fake_cluster):
    failed, result = run_module(module, {**BASE_ARGS, "resources": ["pods"], "install_crd": False})
    assert failed and "install_crd" in result["msg"] and fake_cluster.writes() == []


def test_bad_heartbeat_interval(run_module, fake_cluster):
    failed, result = run_module(module, {**BASE_ARGS, "heartbeat_interval": 0})
    assert failed and "heartbeat_interval" in result["msg"]


POD_V1 = "xPOwRZ+Yhw8="  # storage_version_hash("", "v1", "Pod"), as the recorded discovery reports it
AUDIT = {"changed": False, "keys_scanned": 3, "endpoint": "https://10.0.0.11:2379", "prefix": "/registry",
         "measured_at": "2026-11-21T14:00:00Z", "outside_layout": 0, "filtered_out": 0,
         "resources": {"pods": {"objects": 3, "hashes": [POD_V1], "unreadable": 0}}}


def test_audit_sets_the_record_from_the_measurement_in_check_mode(run_module, fake_cluster):
    failed, result = run_module(module, {**BASE_ARGS, "resources": ["pods"], "audit": AUDIT}, check_mode=True)
    assert not failed, result
    after = result["records"][0]["after"]
    assert after["status"]["persistedStorageVersionHashes"] == [POD_V1]
    assert after["measured_at"] == "2026-11-21T14:00:00Z" and after["measured_from"] == "https://10.0.0.11:2379/registry"
    assert fake_cluster.writes() == []


@pytest.mark.parametrize("args, fragment", [
    pytest.param({"audit": "{{ audit }}"}, "audit must be a dict", id="unrendered"),
    pytest.param({"audit": {"failed": True, "msg": "etcd unreachable"}}, "audit is a failed or skipped audit", id="failed"),
    pytest.param({"audit": {"resources": {}}}, "not a storage_version_audit result", id="not-an-audit"),
    pytest.param({"audit": AUDIT, "state": "absent"}, "state=absent", id="with-absent"),
])
def test_bad_audit_is_one_error_before_any_request(run_module, fake_cluster, args, fragment):
    failed, result = run_module(module, {**BASE_ARGS, **args})
    assert failed and fragment in result["msg"], result["msg"]
    assert fake_cluster.log == []


def test_a_name_no_apiserver_serves_is_an_error_before_any_write(run_module, fake_cluster):
    failed, result = run_module(module, {**BASE_ARGS, "resources": ["pods", "deployment.apps"]})
    assert failed and result["error"]["type"] == "ConfigurationError"
    assert result["msg"].startswith("resources: no apiserver serves 'deployment.apps' (did you mean deployments.apps"), result["msg"]
    assert "asked https://10.0.0.11:6443, https://10.0.0.12:6443, https://10.0.0.13:6443" in result["msg"]
    assert fake_cluster.writes() == []


def test_a_name_is_not_refused_while_an_apiserver_cannot_tell(run_module, fake_cluster):
    for path in list(fake_cluster.routes[ENDPOINTS[1]]):
        fake_cluster.routes[ENDPOINTS[1]][path] = unreachable()
    failed, result = run_module(module, {**BASE_ARGS, "resources": ["deployment.apps"]}, check_mode=True)
    # Not refused as a name nothing serves: refused because a record set from part of the plane could miss what it stores.
    assert failed and "no apiserver serves" not in result["msg"], result
    assert "No StorageState record was written" in result["msg"] and ENDPOINTS[1] in result["msg"], result


def test_state_absent_removes_the_record_of_a_name_nothing_serves(run_module, fake_cluster):
    failed, result = run_module(module, {**BASE_ARGS, "resources": ["podsecuritypolicies.policy"], "state": "absent"},
                                check_mode=True)
    assert not failed, result["msg"]


def test_the_storage_state_crd_it_installs_is_not_refused(run_module, fake_cluster):
    failed, result = run_module(module, {**BASE_ARGS, "resources": ["storagestates.migration.k8s.io"]}, check_mode=True)
    assert not failed, result["msg"]
    failed, result = run_module(module, {**BASE_ARGS, "resources": ["storagestates.migration.k8s.io"], "install_crd": False})
    assert failed and "storagestates.migration.k8s.io" in result["msg"]
