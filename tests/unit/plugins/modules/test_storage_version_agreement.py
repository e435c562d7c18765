# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""storage_version_agreement: agrees on identical endpoints, fails with a clear message on timeout."""

from __future__ import annotations

import json

from kube_module_args import BASE_ARGS, ENDPOINTS

from ansible_collections.kubeupgrade.storage.plugins.modules import storage_version_agreement as module


def test_agreeing_endpoints(run_module, fake_cluster):
    failed, result = run_module(module, {**BASE_ARGS, "resources": ["pods"], "polls": 2, "interval": 0})
    assert not failed and result["agreed"] and result["polls_observed"] == 2
    # The last poll's view of each endpoint: a play learns the running release without observing again.
    assert [e["endpoint"] for e in result["endpoints"]] == ENDPOINTS
    assert all(e["reachable"] and e["ready"] and e["release"] for e in result["endpoints"]), result["endpoints"]


def test_disagreement_times_out_naming_each_endpoint(run_module, fake_cluster):
    fake_cluster.serve_deployments_hash(ENDPOINTS[2], "zzzzzzzzzzz=")
    failed, result = run_module(module, {**BASE_ARGS, "resources": ["deployments.apps"], "interval": 0, "timeout": 0})
    assert failed and not result["agreed"] and "deployments.apps" in result["msg"] and ENDPOINTS[2] in result["msg"]
    assert result["disagreeing"][0]["resource"] == "deployments.apps"
    assert [e["endpoint"] for e in result["endpoints"]] == ENDPOINTS


def test_bad_polls_is_one_clear_error(run_module, fake_cluster):
    failed, result = run_module(module, {**BASE_ARGS, "polls": 0})
    assert failed and "polls" in result["msg"]


def _dangling(fake_cluster):
    """Every apiserver lists a local APIService's group/version that none serves (404): an APIService without a backend."""
    for routes in fake_cluster.routes.values():
        status, apis = routes["/apis"][0], json.loads(json.dumps(routes["/apis"][1]))
        apis["groups"].append({"name": "dangling.example.com", "versions": [
            {"groupVersion": "dangling.example.com/v1", "version": "v1"}]})
        routes["/apis"] = (status, apis)


def test_a_failed_discovery_is_named_with_its_own_next_step_and_waiting_does_not_help(run_module, fake_cluster):
    _dangling(fake_cluster)
    failed, result = run_module(module, {**BASE_ARGS, "interval": 0, "timeout": 0})
    assert failed and not result["agreed"]
    assert result["msg"].startswith("agreement could not be established"), result["msg"]
    assert "dangling.example.com/v1" in result["msg"] and "accept it by name" in result["msg"]
    assert "Finish or roll back" not in result["msg"], "a failed discovery is not an upgrade to finish"
    assert result["failed_group_versions"] == {"dangling.example.com/v1": ENDPOINTS}
    assert result["waiting_helps"] is False


def test_an_accepted_failed_discovery_does_not_stop_agreement(run_module, fake_cluster):
    _dangling(fake_cluster)
    failed, result = run_module(module, {**BASE_ARGS, "interval": 0, "polls": 1,
                                         "accept": {"dangling.example.com/v1": "an APIService without a backend (CHG-7)"}})
    assert not failed and result["agreed"], result["msg"]


def test_an_accept_without_a_reason_is_refused_before_any_request(run_module, fake_cluster):
    failed, result = run_module(module, {**BASE_ARGS, "accept": {"dangling.example.com/v1": ""}})
    assert failed and "needs a reason" in result["msg"]


def test_rejected_credentials_are_named_as_such_not_as_an_apiserver_to_make_reachable(run_module, fake_cluster):
    status = {"kind": "Status", "status": "Failure", "reason": "Unauthorized", "code": 401, "message": "Unauthorized"}
    for path in ("/version", "/api", "/apis", "/readyz"):
        fake_cluster.routes[ENDPOINTS[1]][path] = (401, status)
    failed, result = run_module(module, {**BASE_ARGS, "interval": 0, "timeout": 0})
    assert failed and result["msg"].startswith("agreement could not be established"), result["msg"]
    assert f"Fix the credentials used for {ENDPOINTS[1]}" in result["msg"] and "HTTP 401" in result["msg"]
    assert f"Make {ENDPOINTS[1]} reachable" not in result["msg"], "a rejected credential is not an unreachable apiserver"


def test_a_name_no_apiserver_serves_is_refused_at_once_as_storage_version_info_refuses_it(run_module, fake_cluster):
    """The one rule and message of resources.unserved_names: the option, did you mean (from the apiservers and the
    release data of the releases they run), the apiservers asked; no wait for a name that cannot agree."""
    failed, result = run_module(module, {**BASE_ARGS, "resources": ["pods", "deployment.apps"], "interval": 0, "timeout": 60})
    assert failed, result
    assert result["msg"].startswith("resources: no apiserver serves 'deployment.apps' (did you mean deployments.apps"), result["msg"]
    assert all(endpoint in result["msg"] for endpoint in ENDPOINTS), result["msg"]
    assert "'pods'" not in result["msg"]
