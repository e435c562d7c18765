# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""storage_state: check mode writes nothing; a missing CRD with install_crd=false is one clear error."""

from __future__ import annotations

from kube_module_args import BASE_ARGS

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
