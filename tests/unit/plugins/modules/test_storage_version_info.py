# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""storage_version_info: arguments, per-endpoint report, unreachable endpoints, never a write."""

from __future__ import annotations

import pytest
from kube_fakes import recorded, recorded_route, unreachable
from kube_module_args import BASE_ARGS, ENDPOINTS, HOST

from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe import apiserver_io as observe
from ansible_collections.kubeupgrade.storage.plugins.modules import storage_version_info as module


def with_cluster_records(cluster):
    crd = recorded("crd/09-get-crd-storedVersions-v1alpha1-v1.json")["body"]
    cluster.routes[HOST][observe.CRD_PATH] = (200, {"items": [crd], "metadata": {}})
    cluster.routes[HOST][observe.STORAGE_STATE_PATH] = recorded_route("svm-sigs/07-list-storagestates-after-trigger-initial-cycle.json")
    cluster.routes[HOST][observe.LEASE_PATH] = recorded_route("storageversion-api/08-list-identity-leases-distinct-hostnames.json")
    cluster.routes[HOST][observe.STORAGE_VERSION_PATH] = recorded_route("storageversion-api/10-list-storageversions-two-apiservers.json")


def test_reports_every_endpoint_and_agreement(run_module, fake_cluster):
    with_cluster_records(fake_cluster)
    failed, result = run_module(module, BASE_ARGS)
    assert not failed and result["changed"] is False
    assert [e["endpoint"] for e in result["endpoints"]] == ENDPOINTS
    assert result["agreed"] is True and result["unreachable_endpoints"] == []
    assert result["resources"]["pods"]["hashes"] == {url: "xPOwRZ+Yhw8=" for url in ENDPOINTS}
    assert result["endpoints"][0]["resources"]["deployments.apps"] == {"hash": "8aSe+NMegvE=", "storage_version": "v1", "served_versions": ["v1"]}
    assert result["crds"]["widgets.example.com"]["stored_versions"] == ["v1alpha1", "v1"]
    assert result["storage_states"]["configmaps"]["persisted_hashes"] == ["qFsyl6wFWjQ="]
    assert len(result["identity_leases"]) == 2 and result["storage_version_api_served"] is True
    assert fake_cluster.writes() == []


def test_disagreeing_endpoint_means_not_agreed(run_module, fake_cluster):
    fake_cluster.serve_deployments_hash(ENDPOINTS[2], "zzzzzzzzzzz=")
    failed, result = run_module(module, {**BASE_ARGS, "resources": ["deployments.apps"]})
    assert not failed and result["agreed"] is False
    assert result["resources"]["deployments.apps"]["agreed"] is False
    assert result["resources"]["deployments.apps"]["storage_versions"][ENDPOINTS[2]] is None


def test_unreachable_endpoint_is_reported_with_a_warning(run_module, fake_cluster):
    for path in list(fake_cluster.routes[ENDPOINTS[1]]):
        fake_cluster.routes[ENDPOINTS[1]][path] = unreachable()
    failed, result = run_module(module, {**BASE_ARGS, "resources": ["pods"]})
    assert not failed and result["agreed"] is False and result["unreachable_endpoints"] == [ENDPOINTS[1]]
    assert ENDPOINTS[1] in result["endpoints"][1]["error"] and "NOT" in result["msg"]


def test_unauthorised_endpoint_names_the_status(run_module, fake_cluster):
    for path in list(fake_cluster.routes[ENDPOINTS[0]]):
        fake_cluster.routes[ENDPOINTS[0]][path] = recorded_route("auth/01-wrong-bearer-token-401.json")
    failed, result = run_module(module, {**BASE_ARGS, "resources": ["pods"]})
    assert not failed
    assert result["endpoints"][0]["status"] == 401 and "HTTP 401" in result["endpoints"][0]["error"]


def test_check_mode_is_supported(run_module, fake_cluster):
    failed, result = run_module(module, {**BASE_ARGS, "resources": ["pods"]}, check_mode=True)
    assert not failed and result["changed"] is False and fake_cluster.writes() == []


def test_include_without_crds_omits_them(run_module, fake_cluster):
    with_cluster_records(fake_cluster)
    failed, result = run_module(module, {**BASE_ARGS, "include": ["leases"]})
    assert not failed and result["crds"] == {} and result["storage_states"] == {} and result["identity_leases"]


def test_bad_include_value_is_one_clear_error(run_module, fake_cluster):
    failed, result = run_module(module, {**BASE_ARGS, "include": ["pods"]})
    assert failed and "include" in result["msg"]


def test_bad_endpoint_url_is_one_clear_error(run_module, fake_cluster):
    failed, result = run_module(module, {**BASE_ARGS, "endpoints": ["10.0.0.11:6443"]})
    assert failed and "endpoints" in result["msg"] and "https://" in result["msg"]


def test_kubeconfig_without_the_context_is_one_clear_error(run_module, fake_cluster, tmp_path):
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://10.0.0.10:6443'}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: real, context: {cluster: c, user: u}}]\ncurrent-context: real\n")
    failed, result = run_module(module, {"kubeconfig": str(kubeconfig), "context": "missing"})
    assert failed and "missing" in result["msg"] and "real" in result["msg"]
    assert "exception" not in result


def test_a_name_no_apiserver_serves_is_an_error_naming_the_option_and_the_apiservers(run_module, fake_cluster):
    with_cluster_records(fake_cluster)
    failed, result = run_module(module, {**BASE_ARGS, "resources": ["pods", "deployment.apps"]})
    assert failed and result["error"]["type"] == "ConfigurationError"
    assert result["msg"].startswith("resources: no apiserver serves 'deployment.apps' (did you mean deployments.apps"), result["msg"]
    assert f"asked {', '.join(ENDPOINTS)}" in result["msg"]
    assert result["resources"]["pods"]["agreed"] is True, "the observation is returned with the failure"


def test_a_custom_resource_a_crd_defines_is_not_refused(run_module, fake_cluster):
    with_cluster_records(fake_cluster)
    failed, result = run_module(module, {**BASE_ARGS, "resources": ["widgets.example.com"]})
    assert not failed, result["msg"]


def test_a_name_is_not_refused_while_an_apiserver_cannot_tell(run_module, fake_cluster):
    for path in list(fake_cluster.routes[ENDPOINTS[1]]):
        fake_cluster.routes[ENDPOINTS[1]][path] = unreachable()
    failed, result = run_module(module, {**BASE_ARGS, "resources": ["deployment.apps"]})
    assert not failed and result["resources"]["deployment.apps"]["hashes"] == {} and result["agreed"] is False


def test_as_expected_is_reachable_ready_and_at_the_release_asked(run_module, fake_cluster):
    args = {**BASE_ARGS, "endpoints": ENDPOINTS[:1], "include": []}
    failed, result = run_module(module, args)
    assert not failed and result["as_expected"] is True  # nothing expected: reachable
    failed, result = run_module(module, {**args, "expect_ready": True, "expect_release": "1.32"})
    assert not failed and result["as_expected"] is True
    assert result["expectation_msg"] == f"{ENDPOINTS[0]}: ready, release 1.32 (as expected: ready, release 1.32)"
    failed, result = run_module(module, {**args, "expect_ready": True, "expect_release": "1.33"})
    assert not failed and result["as_expected"] is False and "(expected: ready, release 1.33)" in result["expectation_msg"]


def test_an_unreachable_apiserver_is_not_as_expected_and_says_why(run_module, fake_cluster):
    for path in list(fake_cluster.routes[ENDPOINTS[0]]):
        fake_cluster.routes[ENDPOINTS[0]][path] = unreachable()
    failed, result = run_module(module, {**BASE_ARGS, "endpoints": ENDPOINTS[:1], "expect_ready": True})
    assert failed and result["as_expected"] is False
    assert result["expectation_msg"].startswith(f"{ENDPOINTS[0]}: unreachable")


def test_a_failed_run_is_never_as_expected(run_module, fake_cluster):
    """A name nothing serves fails the task: as_expected is false, so failed_when on its negation keeps it failed."""
    args = {**BASE_ARGS, "endpoints": ENDPOINTS[:1], "expect_ready": True, "expect_release": "1.32", "resources": ["podz"]}
    failed, result = run_module(module, args)
    assert failed and result["as_expected"] is False and "podz" in result["expectation_msg"]


@pytest.mark.parametrize("value, needle", [("1.3", "YAML reads an unquoted 1.30"), ("one", "is not a version")])
def test_an_expected_release_that_can_never_match_is_refused_before_any_request(run_module, fake_cluster, value, needle):
    failed, result = run_module(module, {**BASE_ARGS, "expect_release": value})
    assert failed and result["msg"].startswith("expect_release:") and needle in result["msg"], result["msg"]
    assert fake_cluster.log == []


def test_an_expected_release_is_compared_by_minor(run_module, fake_cluster):
    failed, result = run_module(module, {**BASE_ARGS, "endpoints": ENDPOINTS[:1], "include": [], "expect_release": "v1.32.6"})
    assert not failed and result["as_expected"] is True, result["expectation_msg"]


def test_without_discovery_only_the_head_of_each_apiserver_is_asked_and_nothing_is_said_to_agree(run_module, fake_cluster):
    """The wait after a restart: four requests an apiserver (identity, readiness), no group/version and no record."""
    with_cluster_records(fake_cluster)
    args = {**BASE_ARGS, "discovery": False, "expect_ready": True, "expect_release": "1.32"}
    failed, result = run_module(module, args)
    assert not failed and result["as_expected"] is True, result
    asked = sorted({path for _endpoint, method, path, _query, _body in fake_cluster.log if method == "GET"})
    assert asked == ["/api", "/apis", "/readyz", "/version"], asked
    assert len(fake_cluster.log) == 4 * len(ENDPOINTS)
    assert [e["release"] for e in result["endpoints"]] == ["1.32"] * len(ENDPOINTS)
    assert all(e["resources"] == {} and e["ready"] for e in result["endpoints"])
    assert result["resources"] == {} and result["crds"] == {} and result["storage_states"] == {}
    assert result["agreed"] is False and "identity and readiness only" in result["msg"]
    failed, result = run_module(module, {**args, "expect_release": "1.33"})
    assert not failed and result["as_expected"] is False and "(expected: ready, release 1.33)" in result["expectation_msg"]


def test_without_discovery_naming_resources_is_refused_before_any_request(run_module, fake_cluster):
    failed, result = run_module(module, {**BASE_ARGS, "discovery": False, "resources": ["pods"]})
    assert failed and result["msg"].startswith("resources:") and "discovery" in result["msg"], result["msg"]
    assert fake_cluster.log == [] and result["as_expected"] is False


def test_without_discovery_the_two_step_decision_is_made_from_the_releases_the_apiservers_run(run_module, fake_cluster):
    failed, result = run_module(module, {**BASE_ARGS, "discovery": False, "two_step_to": "1.33"})
    assert not failed and result["two_step"]["step"] == 1 and result["two_step"]["emulated_release"] == "1.32", result
    assert len(fake_cluster.log) == 4 * len(ENDPOINTS)
