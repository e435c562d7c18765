# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Connection resolution and HTTP error mapping of the one client layer."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml

from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.client import ApiClient
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.settings import ConnectionSettings
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import (
    ApiError,
    ConfigurationError,
    EndpointUnreachable,
)

CA_PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def kubeconfig(tmp_path, contexts=("admin@one", "admin@two"), insecure=False):
    ca = tmp_path / "ca.crt"
    ca.write_text(CA_PEM)
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "one", "cluster": {"server": "https://10.0.0.11:6443", "certificate-authority": str(ca)}},
            {"name": "two", "cluster": {"server": "https://10.0.0.12:6443", "insecure-skip-tls-verify": insecure}},
        ],
        "users": [{"name": "admin", "user": {"token": "secret-token"}}],
        "contexts": [{"name": name, "context": {"cluster": name.split("@")[1], "user": "admin"}} for name in contexts],
        "current-context": contexts[0],
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(doc))
    return path, doc


def test_kubeconfig_file_gives_host_token_and_ca(tmp_path):
    path, _doc = kubeconfig(tmp_path)
    settings = ConnectionSettings.from_params({"kubeconfig": str(path)})
    assert settings.host == "https://10.0.0.11:6443"
    assert settings.headers["Authorization"] == "Bearer secret-token"
    assert settings.ca_cert and open(settings.ca_cert).read() == CA_PEM
    assert settings.verify is True


def test_named_context_and_insecure_cluster(tmp_path):
    path, _doc = kubeconfig(tmp_path, insecure=True)
    settings = ConnectionSettings.from_params({"kubeconfig": str(path), "context": "admin@two"})
    assert settings.host == "https://10.0.0.12:6443"
    assert settings.verify is False


def test_validate_certs_overrides_kubeconfig(tmp_path):
    path, _doc = kubeconfig(tmp_path, insecure=True)
    settings = ConnectionSettings.from_params({"kubeconfig": str(path), "context": "admin@two", "validate_certs": True})
    assert settings.verify is True


def test_inline_kubeconfig_dict(tmp_path):
    _path, doc = kubeconfig(tmp_path)
    settings = ConnectionSettings.from_params({"kubeconfig": doc, "context": "admin@one"})
    assert settings.host == "https://10.0.0.11:6443"


@pytest.mark.parametrize(
    "params, message",
    [
        ({"context": "nope"}, "has no context named 'nope'; its contexts are: admin@one, admin@two"),
        ({"kubeconfig": "/does/not/exist"}, "kubeconfig /does/not/exist does not exist"),
        ({"host": "10.0.0.1:6443", "api_key": "x"}, "'host' must be an apiserver URL"),
        ({"host": "https://10.0.0.1:6443", "api_key": "x", "ca_cert": "/no/ca.crt"}, "'ca_cert' file /no/ca.crt does not exist"),
    ],
)
def test_bad_connection_input_gives_one_clear_error(tmp_path, params, message):
    path, _doc = kubeconfig(tmp_path)
    if "kubeconfig" not in params and "host" not in params:
        params = dict(params, kubeconfig=str(path))
    with pytest.raises(ConfigurationError) as error:
        ConnectionSettings.from_params(params)
    assert message in str(error.value)


def test_explicit_host_and_token_need_no_kubeconfig(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    settings = ConnectionSettings.from_params({"host": "https://10.0.0.1:6443/", "api_key": "abc", "impersonate_groups": ["a", "b"]})
    assert settings.host == "https://10.0.0.1:6443"
    assert settings.headers["Authorization"] == "Bearer abc"
    assert settings.verify is True
    assert settings.impersonate_groups == ["a", "b"]


class _Handler(BaseHTTPRequestHandler):
    routes = {}

    def do_GET(self):
        self.server.seen.append(dict(self.headers))  # before answering: the client may return at once
        status, headers, body = self.routes.get(self.path, (404, {"Content-Type": "text/plain"}, b"404 page not found"))
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.seen = []
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def status_body(code, reason, message, **details):
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "code": code}
    if reason:
        body["reason"] = reason
    if details:
        body["details"] = details
    return json.dumps(body).encode()


def client_for(server):
    settings = ConnectionSettings(host=f"http://127.0.0.1:{server.server_address[1]}", headers={"Authorization": "Bearer t"}, timeout=5)
    return ApiClient(settings)


def test_success_returns_json_and_sends_auth(server):
    _Handler.routes = {"/version": (200, {"Content-Type": "application/json"}, b'{"gitVersion": "v1.32.0"}')}
    assert client_for(server).get("/version") == {"gitVersion": "v1.32.0"}
    assert server.seen[-1]["Authorization"] == "Bearer t"


@pytest.mark.parametrize(
    "status, headers, body, reason, retry_after, hint",
    [
        (409, {}, status_body(409, "Conflict", "the object has been modified"), "Conflict", None, "changed while"),
        (429, {"Retry-After": "3"}, status_body(429, "TooManyRequests", "storage is (re)initializing", retryAfterSeconds=1),
         "TooManyRequests", 3.0, "overloaded"),
        (500, {}, status_body(500, "", 'no kind "ConfigMap" is registered for version "v9" in scheme "x"'), "", None, "cannot decode"),
        (404, {"Content-Type": "text/plain"}, b"404 page not found", "", None, "not served"),
        (401, {}, b'{"kind":"Status","message":"Unauthorized","reason":"Unauthorized","code":401}', "Unauthorized", None, "credentials"),
    ],
)
def test_error_statuses_become_api_errors(server, status, headers, body, reason, retry_after, hint):
    _Handler.routes = {"/x": (status, dict({"Content-Type": "application/json"}, **headers), body)}
    with pytest.raises(ApiError) as error:
        client_for(server).get("/x")
    assert error.value.status == status
    assert error.value.reason == reason
    assert error.value.retry_after == retry_after
    assert error.value.endpoint.startswith("http://127.0.0.1:")
    assert f"GET /x on apiserver {error.value.endpoint} failed: HTTP {status}" in str(error.value)
    assert hint in str(error.value)


def test_refused_connection_is_unreachable():
    settings = ConnectionSettings(host="http://127.0.0.1:9", timeout=2)
    with pytest.raises(EndpointUnreachable) as error:
        ApiClient(settings).get("/version")
    assert "apiserver http://127.0.0.1:9 did not answer GET /version" in str(error.value)


def test_for_endpoint_keeps_credentials(server):
    _Handler.routes = {"/version": (200, {"Content-Type": "application/json"}, b"{}")}
    other = client_for(server).for_endpoint(f"http://localhost:{server.server_address[1]}/")
    other.get("/version")
    assert other.endpoint == f"http://localhost:{server.server_address[1]}"
    assert server.seen[-1]["Authorization"] == "Bearer t"
