# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A CA without keyUsage or an authority key identifier, which Go's clients (etcdctl, kubectl) accept: Python 3.13's
default strict X.509 checks would refuse it, and the collection must not (it said "not signed by etcd_ca_cert")."""

from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
import threading

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd.client import EtcdError, EtcdReader
from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd.settings import EtcdSettings
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.client import ApiClient
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.settings import ConnectionSettings

BODY = b'{"header": {"revision": "7"}, "dbSize": "4096", "major": "1", "minor": "33"}'


def _name(common_name):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _read_request(tls):
    """Read the whole request (headers, then Content-Length bytes): a POST's body may come in a later TLS record, and
    closing with it unread makes the kernel reset the connection before the client reads the answer."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = tls.recv(65536)
        if not chunk:
            return
        data += chunk
    head, _separator, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _colon, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        chunk = tls.recv(65536)
        if not chunk:
            return
        body += chunk


@pytest.fixture
def lenient_ca_server(tmp_path):
    """An HTTPS server on loopback whose CA has basicConstraints only (no keyUsage, no key identifiers)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(_name("bare-ca")).issuer_name(_name("bare-ca")).public_key(ca_key.public_key())
          .serial_number(1).not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=2))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(ca_key, hashes.SHA256()))
    leaf = (x509.CertificateBuilder().subject_name(_name("server")).issuer_name(ca.subject).public_key(key.public_key())
            .serial_number(2).not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    (tmp_path / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "server.crt").write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "server.key").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                            serialization.NoEncryption()))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "server.crt", tmp_path / "server.key")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _address = listener.accept()
                with context.wrap_socket(conn, server_side=True) as tls:
                    _read_request(tls)
                    tls.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                                + f"Content-Length: {len(BODY)}\r\n\r\n".encode() + BODY)
            except OSError:
                continue

    threading.Thread(target=serve, daemon=True).start()
    yield f"https://127.0.0.1:{listener.getsockname()[1]}", str(tmp_path / "ca.crt")
    stop.set()
    listener.close()


def test_etcd_and_apiserver_connections_accept_what_go_clients_accept(lenient_ca_server):
    url, ca = lenient_ca_server
    # grpcio asks first and finds no HTTP/2 (this server speaks HTTP/1.1): the gateway answers, its "4096" read as an int
    assert EtcdReader(EtcdSettings(endpoints=[url], ca_cert=ca)).status()["dbSize"] == 4096
    assert ApiClient(ConnectionSettings(host=url, ca_cert=ca)).get("/version")["minor"] == "33"


def test_an_etcd_ca_that_is_not_pem_is_named(tmp_path):
    """One error naming etcd_ca_cert (it was an SSLError from inside the ssl module)."""
    (tmp_path / "ca.crt").write_text("not a certificate\n")
    reader = EtcdReader(EtcdSettings(endpoints=["https://127.0.0.1:1"], ca_cert=str(tmp_path / "ca.crt")))
    with pytest.raises(EtcdError, match=r"etcd_ca_cert .*ca\.crt cannot be loaded .*the PEM certificate of etcd's CA"):
        reader._pool  # noqa: B018 (the gateway's pool builds the TLS context)
