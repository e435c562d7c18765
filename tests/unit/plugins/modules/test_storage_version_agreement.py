# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""storage_version_agreement: agrees on identical endpoints, fails with a clear message on timeout."""

from __future__ import annotations

from kube_fakes import recorded
from kube_module_args import BASE_ARGS, ENDPOINTS

from ansible_collections.kubeupgrade.storage.plugins.modules import storage_version_agreement as module


def test_agreeing_endpoints(run_module, fake_cluster):
    failed, result = run_module(module, {**BASE_ARGS, "resources": ["pods"], "polls": 2, "interval": 0})
    assert not failed and result["agreed"] and result["polls_observed"] == 2
    # The last poll's view of each endpoint: a play learns the running release without observing again.
    assert [e["endpoint"] for e in result["endpoints"]] == ENDPOINTS
    assert all(e["reachable"] and e["ready"] and e["release"] for e in result["endpoints"]), result["endpoints"]


def test_disagreement_times_out_naming_each_endpoint(run_module, fake_cluster):
    doc = recorded("discovery/apis-apps_v1-legacy.json")["body"]
    for item in doc["resources"]:
        if item["name"] == "deployments":
            item["storageVersionHash"] = "zzzzzzzzzzz="
    fake_cluster.routes[ENDPOINTS[2]]["/apis/apps/v1"] = (200, doc)
    failed, result = run_module(module, {**BASE_ARGS, "resources": ["deployments.apps"], "interval": 0, "timeout": 0})
    assert failed and not result["agreed"] and "deployments.apps" in result["msg"] and ENDPOINTS[2] in result["msg"]
    assert result["disagreeing"][0]["resource"] == "deployments.apps"
    assert [e["endpoint"] for e in result["endpoints"]] == ENDPOINTS


def test_bad_polls_is_one_clear_error(run_module, fake_cluster):
    failed, result = run_module(module, {**BASE_ARGS, "polls": 0})
    assert failed and "polls" in result["msg"]
