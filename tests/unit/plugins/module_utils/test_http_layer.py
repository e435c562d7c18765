# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The API layer: one body parser, get_or_none, paged list_all, poll_until, and connection-option checks."""

from __future__ import annotations

import pytest
from kube_fakes import FakeApiClient, FakeClock

from ansible_collections.kubeupgrade.storage.plugins.module_utils._http import paths
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.client import ApiResponse, parse_json_body
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.poll import PollTimeout, poll_past, poll_until
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.settings import (
    ConnectionSettings,
    check_kubeconfig_shape,
    check_proxy,
    check_timeout,
)
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ApiError, ConfigurationError

EP = "https://10.0.0.11:6443"
HTML = {"Content-Type": "text/html"}


@pytest.mark.parametrize("status, data, headers, needles", [
    (200, b"<html><body>Sign in</body></html>", HTML, ["HTTP 200", "not JSON", "text/html", "Sign in"]),
    (200, b'{"kind": "List", "items": [', {"Content-Type": "application/json"}, ["not JSON", "application/json", "27 bytes"]),
    (200, b"", {}, ["an empty body", "no content type"]),
    (200, b"[1, 2]", {"Content-Type": "application/json"}, ["a JSON list, not an object"]),
    (200, b"null", {"Content-Type": "application/json"}, ["a JSON NoneType, not an object"]),
])
def test_a_body_that_is_not_a_json_object_names_apiserver_path_status_and_type(status, data, headers, needles):
    with pytest.raises(ApiError) as error:
        parse_json_body(ApiResponse(status, headers, data), EP, "GET", "/apis/apps/v1")
    text = str(error.value)
    assert EP in text and "GET /apis/apps/v1" in text
    for needle in needles:
        assert needle in text
    assert error.value.status == status and error.value.endpoint == EP


def test_json_object_and_no_content_parse():
    assert parse_json_body(ApiResponse(200, {}, b'{"a": 1}'), EP, "GET", "/x") == {"a": 1}
    assert parse_json_body(ApiResponse(204, {}, b""), EP, "DELETE", "/x") == {}


@pytest.mark.parametrize("method", ["get", "post", "put", "patch", "delete"])
def test_every_verb_parses_through_the_one_parser(method):
    client = FakeApiClient(EP, {(method.upper(), "/x"): (200, "<html>proxy</html>", HTML)})
    call = getattr(client, method)
    with pytest.raises(ApiError, match="text/html"):
        call("/x") if method in ("get", "delete") else call("/x", {})


def test_get_or_none_is_none_only_for_404():
    client = FakeApiClient(EP, {"/found": (200, {"kind": "X"}), "/denied": (403, {"kind": "Status", "reason": "Forbidden"})})
    assert client.get_or_none("/found") == {"kind": "X"}
    assert client.get_or_none("/missing") is None
    with pytest.raises(ApiError) as error:
        client.get_or_none("/denied")
    assert error.value.status == 403


def _pager(pages, expire_first=False):
    """A LIST route answering ``pages`` by continue token; optionally a 410 for the first token once."""
    state = {"expired": not expire_first}

    def route(_method, _path, query, _body):
        token = query.get("continue")
        if token and not state["expired"]:
            state["expired"] = True
            return 410, {"kind": "Status", "reason": "Expired", "message": "too old resource version"}
        index = int(token or 0)
        meta = {"continue": str(index + 1)} if index + 1 < len(pages) else {}
        return 200, {"items": pages[index], "metadata": meta}
    return route


@pytest.mark.parametrize("pages, expire_first, expected", [
    ([[1, 2], [3]], False, [1, 2, 3]),
    ([[1], [2], [3]], True, [1, 2, 3]),
    ([[]], False, []),
])
def test_list_all_pages_and_restarts_once_on_410(pages, expire_first, expected):
    client = FakeApiClient(EP, {"/items": _pager(pages, expire_first)})
    assert client.list_all("/items", chunk=2) == expected
    assert all(q.get("limit") == 2 for _e, _m, _p, q, _b in client.log)


def test_list_all_gives_up_after_a_second_410():
    def route(_method, _path, query, _body):
        if query.get("continue"):
            return 410, {"kind": "Status", "reason": "Expired"}
        return 200, {"items": [1], "metadata": {"continue": "t"}}
    client = FakeApiClient(EP, {"/items": route})
    with pytest.raises(ApiError) as error:
        client.list_all("/items")
    assert error.value.status == 410 and len(client.log) == 4


@pytest.mark.parametrize("values, timeout, interval, result, polls, slept", [
    ([True], 10, 1, True, 1, []),
    ([False, False, True], 10, 2, True, 3, [2, 2]),
    ([False] * 10, 5, 2, PollTimeout, 4, [2, 2, 1]),
    ([False, True], 0, 2, PollTimeout, 1, []),
])
def test_poll_until(values, timeout, interval, result, polls, slept):
    clock = FakeClock(100.0)
    seen = iter(values)
    fetched = []

    def fetch():
        fetched.append(1)
        return next(seen)
    if result is PollTimeout:
        with pytest.raises(PollTimeout) as error:
            poll_until(fetch, bool, timeout, interval, clock, clock.sleep)
        assert error.value.polls == polls and error.value.last is False
    else:
        assert poll_until(fetch, bool, timeout, interval, clock, clock.sleep) is result
    assert len(fetched) == polls and clock.slept == slept


@pytest.mark.parametrize("value, needle", [
    (0, "above 0"), (-5, "above 0"), (-0.1, "above 0"), ("30", "a number"), (True, "a number"), (float("nan"), "a number"),
])
def test_request_timeout_must_be_above_zero(value, needle):
    with pytest.raises(ConfigurationError, match=needle) as error:
        check_timeout("request_timeout", value)
    assert "'request_timeout'" in str(error.value)


def test_request_timeout_default_and_value():
    assert check_timeout("request_timeout", None) == 30.0
    assert check_timeout("request_timeout", 2) == 2.0


@pytest.mark.parametrize("proxy", ["proxy:3128", "ftp://proxy:21", "http://", "http://proxy:99999", "http://proxy:port", 5])
def test_malformed_proxy_is_named(proxy):
    with pytest.raises(ConfigurationError, match="'proxy' is not a proxy URL"):
        check_proxy("proxy", proxy)


@pytest.mark.parametrize("doc, needle", [
    ({"clusters": 5}, "'clusters' must be a list"),
    ({"users": "admin"}, "'users' must be a list"),
    ({"contexts": [5]}, "contexts[0] must be a mapping with a string 'name'"),
    ({"clusters": [{"name": "a", "cluster": "https://x"}]}, "clusters[0].cluster must be a mapping"),
    ({"current-context": 3}, "'current-context' must be a string"),
    ([1, 2], "must be a mapping"),
])
def test_kubeconfig_shape(doc, needle):
    with pytest.raises(ConfigurationError) as error:
        check_kubeconfig_shape(doc, "the 'kubeconfig' mapping")
    assert needle in str(error.value) and "the 'kubeconfig' mapping" in str(error.value)


def _kubeconfig(server="https://10.0.0.11:6443"):
    return {"apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "k", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}


@pytest.mark.parametrize("server", ["10.0.0.11:6443", "https://", "https://10.0.0.11:port"])
def test_a_bad_server_in_a_kubeconfig_is_blamed_on_the_kubeconfig(server):
    with pytest.raises(ConfigurationError) as error:
        ConnectionSettings.from_params({"kubeconfig": _kubeconfig(server)})
    assert "The cluster server in the 'kubeconfig' mapping" in str(error.value)
    assert "'host'" not in str(error.value)


def test_target_endpoint_is_blamed_on_its_option():
    client = FakeApiClient(EP)
    with pytest.raises(ConfigurationError, match="'target_endpoint' must be an apiserver URL"):
        client.for_endpoint("10.0.0.12:6443", option="target_endpoint")


def test_paths_are_defined_once():
    assert paths.group_version("", "v1") == "/api/v1"
    assert paths.group_version("apps", "v1") == "/apis/apps/v1"
    assert paths.STORAGE_STATE_CRD == "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/storagestates.migration.k8s.io"
    assert paths.storage_migrations("storagemigration.k8s.io/v1beta1") == "/apis/storagemigration.k8s.io/v1beta1/storageversionmigrations"
    assert paths.resource_collection("apps", "v1", "deployments", "ns") == "/apis/apps/v1/namespaces/ns/deployments"


@pytest.mark.parametrize("method, path, rule", [
    ("GET", "/api/v1/configmaps?limit=1", 'apiGroups: [""], resources: ["configmaps"], verbs: ["list"]'),
    ("GET", "/apis/apps/v1/namespaces/x/deployments", 'apiGroups: ["apps"], resources: ["deployments"], verbs: ["list"]'),
    ("GET", "/api/v1/namespaces/kube-system", 'apiGroups: [""], resources: ["namespaces"], verbs: ["get"]'),
    ("PUT", "/apis/migration.k8s.io/v1alpha1/storagestates/pods/status",
     'apiGroups: ["migration.k8s.io"], resources: ["storagestates/status"], verbs: ["update"]'),
    ("PATCH", "/api/v1/namespaces/a/configmaps/b", 'apiGroups: [""], resources: ["configmaps"], verbs: ["patch"]'),
    ("GET", "/apis/apps/v1", 'nonResourceURLs: ["/apis/apps/v1"], verbs: ["get"] (in a ClusterRole)'),
])
def test_a_403_names_the_rbac_rule_to_add(method, path, rule):
    assert paths.rbac_rule(method, path) == rule


@pytest.mark.parametrize("states, result, slept", [
    (["starting", "ready"], "ready", [1]),
    (["exited"], "exited", []),
    (["starting"] * 10, "starting", [1, 1, 1]),  # the deadline (3 s) passes first: the pending state
])
def test_poll_past_returns_the_first_state_that_is_not_pending(states, result, slept):
    fake = FakeClock(100.0)
    answers = iter(states)
    assert poll_past(lambda: next(answers), "starting", 3, 1, fake, fake.sleep) == result
    assert fake.slept == slept
