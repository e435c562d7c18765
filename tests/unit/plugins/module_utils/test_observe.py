# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""observe() against fake apiservers serving the real 1.32 recordings: every hash mapped back,
the request budget held, and every way an endpoint can fail reported instead of skipped."""

from __future__ import annotations

import copy

import pytest
from kube_fakes import FakeApiClient, discovery_routes, recorded, recorded_route, unreachable

from ansible_collections.kubeupgrade.storage.plugins.module_utils import hashing
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe import apiserver_io as observe
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe import discovery
from ansible_collections.kubeupgrade.storage.plugins.module_utils.profiles import load_profiles

PROFILES = load_profiles()
EP = ["https://10.0.0.11:6443", "https://10.0.0.12:6443", "https://10.0.0.13:6443"]
CLUSTER = "https://10.0.0.10:6443"


def no_sleep(_seconds):
    return None


TUNING = observe.Tuning(sleep=no_sleep)


def cluster_routes():
    crd = recorded("crd/09-get-crd-storedVersions-v1alpha1-v1.json")["body"]
    return {
        observe.CRD_PATH: (200, {"kind": "CustomResourceDefinitionList", "metadata": {}, "items": [crd]}),
        observe.STORAGE_STATE_PATH: recorded_route("svm-sigs/07-list-storagestates-after-trigger-initial-cycle.json"),
        observe.STORAGE_VERSION_PATH: recorded_route("storageversion-api/10-list-storageversions-two-apiservers.json"),
        observe.LEASE_PATH: recorded_route("storageversion-api/08-list-identity-leases-distinct-hostnames.json"),
    }


def make_clients(routes_per_endpoint=None, cluster=True):
    log = []
    clients = []
    for index, url in enumerate(EP):
        routes = discovery_routes()
        routes.update((routes_per_endpoint or {}).get(index, {}))
        clients.append(FakeApiClient(url, routes, log))
    cluster_client = FakeApiClient(CLUSTER, cluster_routes(), log) if cluster else None
    return clients, cluster_client


def gv_count():
    routes = discovery_routes()
    return len(discovery.group_versions(routes["/api"][1], routes["/apis"][1]))


def test_every_endpoint_reports_every_recorded_hash_mapped_back():
    clients, cluster = make_clients()
    obs = observe.Observer(clients, PROFILES, cluster, TUNING).observe()
    assert [e.endpoint for e in obs.endpoints] == EP
    for ep in obs.endpoints:
        assert ep.reachable and ep.ready and ep.complete, ep.error
        assert ep.git_version == "v1.32.0-beta.0" and ep.release == "1.32"
        assert len(ep.resources) > 40
        for name, res in ep.resources.items():
            assert res.storage_version, f"{name} hash {res.storage_hash} not mapped back"
            group = PROFILES.storage_group_of(name) if PROFILES.known(name) else res.group
            kind = PROFILES.kind_of(name) or res.kind
            assert hashing.storage_version_hash(group, res.storage_version, kind) == res.storage_hash
    pods = obs.endpoints[0].resources["pods"]
    assert (pods.storage_hash, pods.storage_version) == ("xPOwRZ+Yhw8=", "v1")
    assert obs.endpoints[0].resources["customresourcedefinitions.apiextensions.k8s.io"].storage_version == "v1beta1"
    assert obs.endpoints[0].resources["events.events.k8s.io"].storage_version == "v1"


def unlisted_release_versions():
    """The 1.32 group/versions /apis does not list (alpha and beta versions off by default): asked for too."""
    routes = discovery_routes()
    listed = {(g, v) for g, v, _p in discovery.group_versions(routes["/api"][1], routes["/apis"][1])}
    return PROFILES.served_group_versions("1.32") - listed


def test_request_budget_is_four_plus_one_per_group_version():
    clients, cluster = make_clients()
    observe.Observer(clients, PROFILES, cluster, TUNING).observe()
    expected = 4 + gv_count() + len(unlisted_release_versions())
    for client in clients:
        paths = client.requests_to()
        assert len(paths) == expected
        assert len(set(paths)) == expected, "a document was fetched twice"
    assert cluster.requests_to(), "cluster-wide reads go through the cluster client"


def test_an_unlisted_version_of_the_release_that_answers_is_observed_and_a_404_is_not_a_failure():
    """Mid-roll, /apis lists what the newest apiserver registered: an older one stops listing versions it still
    serves (they are asked for by release) and lists the newer release's versions, which it answers 404 for."""
    routes = discovery_routes()
    listed = {(g, v) for g, v, _p in discovery.group_versions(routes["/api"][1], routes["/apis"][1])}
    coordination = routes.pop("/apis/coordination.k8s.io/v1")
    apis = copy.deepcopy(routes["/apis"])
    for group in apis[1]["groups"]:
        if group["name"] == "coordination.k8s.io":
            group["versions"] = [v for v in group["versions"] if v["version"] != "v1"]
    assert ("coordination.k8s.io", "v1") in listed
    newer = {"name": "example.newer.k8s.io", "versions": [{"groupVersion": "example.newer.k8s.io/v1", "version": "v1"}],
             "preferredVersion": {"groupVersion": "example.newer.k8s.io/v1", "version": "v1"}}
    apis[1]["groups"].append(newer)
    newer_doc = (200, {"kind": "APIResourceList", "groupVersion": "example.newer.k8s.io/v1", "resources": []})
    older = {"/apis": apis, "/apis/coordination.k8s.io/v1": coordination}
    clients, cluster = make_clients({0: {"/apis": apis}, 1: {"/apis": apis, "/apis/example.newer.k8s.io/v1": newer_doc},
                                     2: {"/apis": apis, "/apis/example.newer.k8s.io/v1": newer_doc}})
    clients[0].routes.update(older)
    for client in clients[1:]:  # the newer release
        client.routes["/version"] = (200, {"gitVersion": "v1.33.1", "major": "1", "minor": "33"})
    obs = observe.Observer(clients, PROFILES, cluster, TUNING).observe()
    first = obs.endpoints[0]
    assert first.complete and first.failed_groups == [], first.error
    assert first.other_release_groups == ["example.newer.k8s.io/v1"]
    assert "leases.coordination.k8s.io" in first.resources, "the unlisted version it serves was not asked for"


def test_a_listed_version_no_apiserver_serves_is_a_failed_discovery():
    routes = discovery_routes()
    apis = copy.deepcopy(routes["/apis"])
    apis[1]["groups"].append({"name": "dangling.example.com", "versions": [
        {"groupVersion": "dangling.example.com/v1", "version": "v1"}]})
    clients, cluster = make_clients({i: {"/apis": apis} for i in range(3)})
    obs = observe.Observer(clients, PROFILES, cluster, TUNING).observe()
    for ep in obs.endpoints:
        assert ep.failed_groups == ["dangling.example.com/v1"] and ep.other_release_groups == []


def test_cluster_wide_records_are_read():
    clients, cluster = make_clients()
    obs = observe.Observer(clients, PROFILES, cluster, TUNING).observe()
    assert obs.crds["widgets.example.com"].stored_versions == ["v1alpha1", "v1"]
    assert obs.storage_state_crd_installed
    assert obs.storage_states["configmaps"].persisted_hashes == ["qFsyl6wFWjQ="]
    assert obs.storage_version_api_served and "apps.deployments" in obs.storage_versions
    assert len(obs.storage_versions["apps.deployments"].entries) == 2
    assert len(obs.identity_leases) == 2 and {lease.hostname for lease in obs.identity_leases} == {"vm", "vm2"}
    lease_calls = [q for e, m, p, q, _b in cluster.log if p == observe.LEASE_PATH]
    assert lease_calls[0]["labelSelector"] == observe.IDENTITY_SELECTOR
    assert all("limit" in q for e, m, p, q, _b in cluster.log if e == CLUSTER)


def test_include_limits_cluster_reads_but_crds_are_always_read():
    clients, cluster = make_clients()
    obs = observe.Observer(clients, PROFILES, cluster, TUNING).observe(include=())
    assert {p for _m, p in cluster.requests_to()} == {observe.CRD_PATH, observe.APISERVICE_PATH}
    assert obs.crds and not obs.storage_states and not obs.identity_leases


def test_storage_versions_are_not_listed_when_not_served():
    apis = copy.deepcopy(discovery_routes()["/apis"][1])
    apis["groups"] = [g for g in apis["groups"] if g["name"] != "internal.apiserver.k8s.io"]
    clients, cluster = make_clients({i: {"/apis": (200, apis)} for i in range(3)})
    obs = observe.Observer(clients, PROFILES, cluster, TUNING).observe()
    assert not obs.storage_version_api_served
    assert observe.STORAGE_VERSION_PATH not in {p for _m, p in cluster.requests_to()}


def test_cluster_reads_default_to_the_first_reachable_endpoint():
    clients, _unused = make_clients({0: {"/version": unreachable()}}, cluster=False)
    for client in clients:
        client.routes.update(cluster_routes())
    obs = observe.Observer(clients, PROFILES, None, TUNING).observe()
    assert obs.crds and ("GET", observe.CRD_PATH) in clients[1].requests_to()


def test_storage_state_crd_missing_is_reported_not_raised():
    clients, cluster = make_clients()
    del cluster.routes[observe.STORAGE_STATE_PATH]
    obs = observe.Observer(clients, PROFILES, cluster, TUNING).observe()
    assert not obs.storage_state_crd_installed and obs.storage_states == {}


@pytest.mark.parametrize("route, status, words", [
    (unreachable("connection refused"), None, "unreachable"),
    (recorded_route("auth/01-wrong-bearer-token-401.json"), 401, "HTTP 401"),
    (recorded_route("auth/02-no-token-anonymous-403.json"), 403, "HTTP 403"),
])
def test_unreachable_or_unauthorised_endpoint_is_reported(route, status, words):
    bad = {path: route for path in discovery_routes()}
    clients, cluster = make_clients({1: bad})
    obs = observe.Observer(clients, PROFILES, cluster, TUNING).observe()
    ep = obs.endpoints[1]
    assert not ep.reachable and ep.status == status and not ep.resources
    assert EP[1] in ep.error and words in ep.error
    assert obs.endpoints[0].reachable and obs.endpoints[2].reachable
    # Nothing is fetched beyond the four fixed documents (plus retries of a dropped connection).
    assert not [p for _m, p in clients[1].requests_to() if p.startswith("/apis/")]


def test_text_plain_404_for_a_group_version_goes_into_failed_groups():
    clients, cluster = make_clients({2: {"/apis/apps/v1": (404, "404 page not found\n", {"Content-Type": "text/plain"})}})
    obs = observe.Observer(clients, PROFILES, cluster, TUNING).observe()
    ep = obs.endpoints[2]
    assert ep.reachable and not ep.complete
    assert ep.failed_groups == ["apps/v1"] and ep.status == 404
    assert "apps/v1" in ep.error and "deployments.apps" not in ep.resources and "pods" in ep.resources
    assert any("404 page not found" in w for w in obs.warnings)


def test_transient_failures_are_retried_once_per_document():
    calls = []

    def flaky(method, path, query, body):
        calls.append(path)
        if len(calls) == 1:
            return 503, {"kind": "Status", "code": 503, "message": "not ready"}, {"Retry-After": "0"}
        return discovery_routes()[path]

    clients, cluster = make_clients({0: {"/apis/batch/v1": flaky}})
    obs = observe.Observer(clients, PROFILES, cluster, TUNING).observe()
    assert obs.endpoints[0].complete and "jobs.batch" in obs.endpoints[0].resources
    assert calls == ["/apis/batch/v1", "/apis/batch/v1"]


def test_not_ready_endpoint_is_reachable_but_not_ready():
    clients, cluster = make_clients({0: {"/readyz": recorded_route("startup/startup-apiserver2-readyz-500.json")}})
    obs = observe.Observer(clients, PROFILES, cluster, TUNING).observe()
    assert obs.endpoints[0].reachable and not obs.endpoints[0].ready and obs.endpoints[1].ready


def test_aggregated_answer_is_refused_not_read_as_no_hashes():
    clients, cluster = make_clients({0: {"/apis": recorded_route("discovery/apis-aggregated-v2.json")}})
    obs = observe.Observer(clients, PROFILES, cluster, TUNING).observe()
    assert not obs.endpoints[0].reachable and "aggregated" in obs.endpoints[0].error


def test_resources_limit_discovery_to_their_groups():
    clients, cluster = make_clients()
    obs = observe.Observer(clients, PROFILES, cluster, TUNING).observe(resources=["deployments.apps", "pods"])
    assert set(obs.endpoints[0].resources) == {"deployments.apps", "pods"}
    assert sorted(p for _m, p in clients[0].requests_to() if p.startswith("/api/") or p.startswith("/apis/")) == \
        ["/api/v1", "/apis/apps/v1"]


def test_list_follows_continue_tokens():
    pages = {None: {"items": [{"n": 1}], "metadata": {"continue": "abc"}}, "abc": {"items": [{"n": 2}], "metadata": {}}}
    client = FakeApiClient(CLUSTER, {"/x": lambda m, p, q, b: (200, pages[q.get("continue")])})
    assert observe.list_all(client, "/x", chunk=1, tuning=TUNING) == [{"n": 1}, {"n": 2}]
    assert [q["limit"] for _e, _m, _p, q, _b in client.log] == [1, 1]


def test_list_restarts_once_on_expired_continue_token():
    state = {"calls": 0}

    def answer(method, path, query, body):
        state["calls"] += 1
        if query.get("continue") and state["calls"] == 2:
            return 410, {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
        if query.get("continue"):
            return 200, {"items": [{"n": 2}], "metadata": {}}
        return 200, {"items": [{"n": 1}], "metadata": {"continue": "t"}}

    client = FakeApiClient(CLUSTER, {"/x": answer})
    assert observe.list_all(client, "/x", tuning=TUNING) == [{"n": 1}, {"n": 2}]


def test_storage_version_and_lease_parsing():
    sv = observe.storage_version_from_object(recorded("storageversion-api/02-get-storageversion-apps.deployments.json")["body"])
    assert sv.name == "apps.deployments" and sv.common_encoding_version == "apps/v1"
    assert "apps/v1beta2" in sv.entries[0].decodable_versions
    lease = observe.lease_from_object(recorded("storageversion-api/05-get-identity-lease.json")["body"])
    assert lease.hostname == "vm" and lease.holder_identity.startswith(lease.name + "_")


def test_unknown_include_value_is_one_clear_error():
    clients, cluster = make_clients()
    with pytest.raises(Exception, match="unknown include"):
        observe.observe(clients, PROFILES, include=("crds", "pods"), cluster_client=cluster)


def test_a_url_that_reaches_another_endpoint_s_apiserver_is_named_and_nothing_may_be_written():
    """The second host's URL answers as the first apiserver (the address it advertises in /api): two URLs, one
    apiserver observed, the third observed as itself. Counting identity Leases cannot see this; /api can."""
    api = copy.deepcopy(discovery_routes()["/api"])
    api[1]["serverAddressByClientCIDRs"] = [{"clientCIDR": "0.0.0.0/0", "serverAddress": "10.0.0.11:6443"}]
    clients, cluster = make_clients({1: {"/api": api}})
    observation = observe.Observer(clients, PROFILES, cluster, TUNING).observe()
    assert [ep.server_address for ep in observation.endpoints] == ["10.0.0.11:6443", "10.0.0.11:6443", "10.0.0.13:6443"]
    assert observation.answered_by_one() == [EP[:2]]
    assert observation.not_observed_message().startswith(f"{EP[0]} and {EP[1]} reached one apiserver (it advertises 10.0.0.11:6443)")


def test_distinct_apiservers_and_one_url_given_twice():
    clients, cluster = make_clients()
    observation = observe.Observer(clients, PROFILES, cluster, TUNING).observe()
    assert observation.answered_by_one() == [] and "reached one apiserver" not in observation.not_observed_message()
    twice = [clients[0], FakeApiClient(EP[0], discovery_routes())]
    assert observe.Observer(twice, PROFILES, cluster, TUNING).observe().answered_by_one() == [[EP[0], EP[0]]]
