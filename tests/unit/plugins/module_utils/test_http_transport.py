# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The transport under the API client: keep-alive connections, request framing, proxies."""

import datetime
import hashlib
import ipaddress
import json
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible_collections.kubeupgrade.storage.plugins.module_utils import errors
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http import transport
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.client import ApiClient
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.settings import ConnectionSettings


class _Recorder(BaseHTTPRequestHandler):
    """An HTTP/1.1 server that records each request (client port, path, headers, body) and answers JSON."""

    protocol_version = "HTTP/1.1"
    close_after = False  # answer "Connection: close" and drop the connection
    drop_silently = False  # answer as keep-alive, then drop the connection

    def _answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.server.seen.append({"port": self.client_address[1], "path": self.path, "method": self.command,
                                 "headers": self.headers, "body": body})
        payload = json.dumps({"path": self.path}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        if self.close_after:
            self.send_header("Connection", "close")
        self.close_connection = self.close_after or self.drop_silently
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_PATCH = do_POST = do_PUT = _answer

    def log_message(self, *args):
        pass


class _Server(ThreadingHTTPServer):
    def shutdown_request(self, request):
        super().shutdown_request(request)
        self.closed.set()  # a connection is closed on the server's side


def _serve(handler):
    httpd = _Server(("127.0.0.1", 0), handler)
    httpd.seen = []
    httpd.closed = threading.Event()
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


@pytest.fixture
def server():
    httpd = _serve(_Recorder)
    yield httpd
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def tls_server(tmp_path):
    """The recording server over TLS, with a self-signed certificate for 127.0.0.1; ``der`` is that certificate."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "apiserver")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key()).serial_number(1)
            .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .sign(key, hashes.SHA256()))
    (tmp_path / "server.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "server.key").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                            serialization.NoEncryption()))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "server.crt", tmp_path / "server.key")
    httpd = _Server(("127.0.0.1", 0), _Recorder)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    httpd.seen = []
    httpd.closed = threading.Event()
    httpd.der = cert.public_bytes(serialization.Encoding.DER)
    httpd.ca = str(tmp_path / "server.crt")
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def _client(server, **settings):
    settings.setdefault("host", f"http://127.0.0.1:{server.server_address[1]}")
    return ApiClient(ConnectionSettings(headers={"Authorization": "Bearer t"}, timeout=5, **settings))


def test_requests_of_one_thread_share_one_keep_alive_connection(server):
    client = _client(server)
    for path in ("/a", "/b", "/c"):
        client.get(path)
    assert [seen["path"] for seen in server.seen] == ["/a", "/b", "/c"]
    assert len({seen["port"] for seen in server.seen}) == 1


def test_a_connection_the_server_closed_is_dialled_again(server, monkeypatch):
    client = _client(server)
    monkeypatch.setattr(_Recorder, "close_after", True)
    client.get("/a")
    client.get("/b")  # the server closed the first connection: the request must not fail on it
    monkeypatch.setattr(_Recorder, "close_after", False)
    assert client.get("/c") == {"path": "/c"}
    assert [seen["path"] for seen in server.seen] == ["/a", "/b", "/c"]
    assert len({seen["port"] for seen in server.seen}) == 3


def test_an_idle_connection_dropped_by_the_server_is_not_reused(server, monkeypatch):
    client = _client(server)
    monkeypatch.setattr(_Recorder, "drop_silently", True)
    client.get("/a")  # answered as keep-alive, then closed by the server, as an apiserver's idle timeout does
    monkeypatch.setattr(_Recorder, "drop_silently", False)
    assert server.closed.wait(5)
    assert client.get("/b") == {"path": "/b"}
    assert server.seen[0]["port"] != server.seen[1]["port"]


def test_bodies_carry_their_length_and_arrive_whole(server):
    client = _client(server)
    client.request("PATCH", "/p", query={"fieldManager": "m"}, body={"metadata": {"name": "x"}},
                   content_type="application/apply-patch+yaml")
    client.request("POST", "/empty")
    client.get("/after")  # the connection is still in step: nothing of a body was read as a request
    patch, empty, after = server.seen
    assert patch["path"] == "/p?fieldManager=m"
    assert json.loads(patch["body"]) == {"metadata": {"name": "x"}}
    assert patch["headers"]["Content-Type"] == "application/apply-patch+yaml"
    assert empty["headers"]["Content-Length"] == "0"
    assert after["path"] == "/after" and after["method"] == "GET"


def test_a_request_and_its_body_go_out_in_one_write(server, monkeypatch):
    """One send per request (one TLS record over TLS): http.client alone sends the headers and the body apart."""
    sends = []
    real_send = transport._PlainConnection.send
    monkeypatch.setattr(transport._PlainConnection, "send", lambda conn, data: sends.append(bytes(data)) or real_send(conn, data))
    client = _client(server)
    client.request("PUT", "/objects/x", body={"metadata": {"name": "x"}})
    client.request("POST", "/empty")
    client.get("/g")
    assert len(sends) == 3, sends
    head, _separator, body = sends[0].partition(b"\r\n\r\n")
    assert head.startswith(b"PUT /objects/x HTTP/1.1") and json.loads(body) == {"metadata": {"name": "x"}}
    assert sends[1].endswith(b"Content-Length: 0\r\n\r\n")
    assert [seen["path"] for seen in server.seen] == ["/objects/x", "/empty", "/g"]


def test_impersonated_groups_are_sent_as_repeated_headers(server):
    ApiClient(ConnectionSettings(host=f"http://127.0.0.1:{server.server_address[1]}", impersonate_groups=["a", "b"],
                                 headers={"Impersonate-User": "u"})).get("/x")
    headers = server.seen[-1]["headers"]
    assert headers.get_all("Impersonate-Group") == ["a", "b"]
    assert headers["Impersonate-User"] == "u"
    assert headers["Accept"] == "application/json"


def test_a_proxy_carries_the_request_unless_no_proxy_names_the_host(server):
    proxy = _serve(_Recorder)  # answers in place of the apiserver: what matters is where the request went
    try:
        proxy_url = f"http://127.0.0.1:{proxy.server_address[1]}"
        endpoint = f"http://apiserver.example.test:{server.server_address[1]}"
        assert _client(server, host=endpoint, proxy=proxy_url).get("/version") == {"path": endpoint + "/version"}
        assert proxy.seen[-1]["path"] == endpoint + "/version"
        direct = _client(server, proxy=proxy_url, no_proxy="127.0.0.1")
        assert direct.get("/direct") == {"path": "/direct"}
        assert len(proxy.seen) == 1 and server.seen[-1]["path"] == "/direct"
    finally:
        proxy.shutdown()
        proxy.server_close()


def test_transports_are_shared_by_setup():
    first = ConnectionSettings(host="https://a:6443", ca_cert="/ca")
    assert transport.transport_for(first, "https://a:6443", 10) is transport.transport_for(first, "https://b:6443", 4)
    other = ConnectionSettings(host="https://a:6443", ca_cert="/other-ca")
    assert transport.transport_for(other, "https://a:6443", 10) is not transport.transport_for(first, "https://a:6443", 10)


@pytest.mark.parametrize("method, replayed", [("GET", True), ("PATCH", False), ("POST", False)])
def test_a_kept_connection_closed_as_the_request_goes_out_replays_reads_only(server, monkeypatch, method, replayed):
    # The race the idle check cannot see: the server closes the kept connection after the check passed.
    client = _client(server)
    monkeypatch.setattr(_Recorder, "drop_silently", True)
    client.get("/first")
    monkeypatch.setattr(_Recorder, "drop_silently", False)
    assert server.closed.wait(5)
    monkeypatch.setattr(transport, "_dropped", lambda sock: False)  # the check runs just before the close
    if replayed:
        assert client.request(method, "/again").json() == {"path": "/again"}
        assert [seen["path"] for seen in server.seen] == ["/first", "/again"]
    else:
        with pytest.raises(errors.EndpointUnreachable, match=f"did not answer {method} /again"):
            client.request(method, "/again", body={"metadata": {"resourceVersion": "1"}})
        assert [seen["path"] for seen in server.seen] == ["/first"]  # a write is never sent twice by the transport
        assert client.get("/next") == {"path": "/next"}  # and the next request dials a new connection


def test_an_answer_names_the_certificate_its_connection_was_served_without_a_handshake_of_its_own(tls_server, monkeypatch):
    """The apiserver that answered is told by the certificate of the connection the answer came on: no second
    connection to the endpoint, which a load balancer could send to another apiserver."""
    client = _client(tls_server, host=f"https://127.0.0.1:{tls_server.server_address[1]}", ca_cert=tls_server.ca)
    digest = f"sha256:{hashlib.sha256(tls_server.der).hexdigest()[:16]}"
    assert [client.request("GET", path).server_certificate for path in ("/api", "/apis")] == [digest, digest]
    assert len({seen["port"] for seen in tls_server.seen}) == 1
    monkeypatch.setattr(_Recorder, "close_after", True)
    assert client.request("GET", "/version").server_certificate == digest  # an answer that closed its connection


def test_an_answer_over_http_names_no_certificate(server):
    assert _client(server).request("GET", "/api").server_certificate is None


def test_a_query_sent_again_is_the_same_and_one_and_true_stay_apart(server):
    client = _client(server)
    for query in ({"fieldManager": "m", "limit": 1}, {"fieldManager": "m", "limit": True}, {"fieldManager": "m", "limit": 1},
                  {"fieldManager": "m", "continue": None}, {"labelSelector": ["a", "b"]}):
        client.request("GET", "/q", query=query)
    assert [seen["path"] for seen in server.seen] == ["/q?fieldManager=m&limit=1", "/q?fieldManager=m&limit=True",
                                                      "/q?fieldManager=m&limit=1", "/q?fieldManager=m",
                                                      "/q?labelSelector=%5B%27a%27%2C+%27b%27%5D"]


def test_an_answer_s_headers_are_read_without_regard_to_case(server):
    response = _client(server).request("GET", "/h")
    assert response.headers.get("content-type") == response.headers.get("Content-Type") == "application/json"
    assert response.content_type == "application/json"
