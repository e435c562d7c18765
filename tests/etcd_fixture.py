# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A real etcd (Debian's etcd-server) on loopback for tests and benchmarks: plain, or TLS with client certificates.

``scripts/setup-etcd.sh`` installs it. When ``etcd`` is missing the fixtures fail in CI (``CI=true``) and
skip locally, with the reason either way. The integration tests' ``etcd_plain`` and ``etcd_tls`` fixtures
(tests/integration/conftest.py) are built with ``serve``; a module that needs another one does the same::

    @pytest.fixture(params=[False, True])
    def etcd(tmp_path, request):
        yield from etcd_fixture.serve(tmp_path / "etcd", tls=request.param)
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "simulator"))  # for apisim.harness
from apisim.harness import stop_process

MISSING = ("etcd is not installed: run 'bash scripts/setup-etcd.sh' as root (installs Debian's etcd-server and "
           "etcd-client), or install etcd 3.4+ so that 'etcd' is on PATH")


ASSETS_ENV = "KUBEUPGRADE_TEST_K8S_ASSETS"  # also holds v<etcd version>/etcd, as envtest's asset directory holds etcd


def _version(text):
    return tuple(int(part) for part in text.lstrip("v").split("."))


def etcd_binary(version=None):
    """etcd of ``version`` ("3.5": the newest v3.5.*/etcd in the asset directory), or None for the one on PATH
    (Debian's etcd-server, 3.4). None when that version is not at hand."""
    if version is None:
        return shutil.which("etcd")
    assets = os.environ.get(ASSETS_ENV) or ""
    want = _version(str(version))
    found = [_version(entry) for entry in (os.listdir(assets) if os.path.isdir(assets) else ())
             if entry.startswith("v") and entry[1:].replace(".", "").isdigit() and _version(entry)[:len(want)] == want
             and os.access(os.path.join(assets, entry, "etcd"), os.X_OK)]
    return os.path.join(assets, "v{}.{}.{}".format(*max(found)), "etcd") if found else None


def require_etcd(version=None) -> str:
    path = etcd_binary(version)
    if path:
        return path
    if version is not None:
        reason = (f"etcd {version} is missing: set {ASSETS_ENV} to a directory holding v{version}.*/etcd "
                  "(.ci/run unpacks etcd 3.5 there)")
        if os.environ.get("KUBEUPGRADE_TEST_REQUIRE_ETCD") or os.environ.get("CI") == "true":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    # scripts/test.sh installs etcd before its pytest steps: there, and in CI, a missing etcd is a failure
    if os.environ.get("KUBEUPGRADE_TEST_REQUIRE_ETCD") or os.environ.get("CI") == "true":
        pytest.fail(MISSING, pytrace=False)
    pytest.skip(MISSING)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _name(common_name):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write(path, data, mode=0o644):
    with open(path, "wb") as handle:
        handle.write(data)
    os.chmod(path, mode)
    return path


class Pki:
    """A CA, etcd's serving certificate (127.0.0.1), a client certificate, and an unrelated CA."""

    def __init__(self, directory):
        os.makedirs(directory, exist_ok=True)
        self.directory = directory
        self._valid = _validity()
        ca_key, ca_cert = self._ca("etcd-ca")
        self.ca_cert = _write(os.path.join(directory, "ca.crt"), ca_cert.public_bytes(serialization.Encoding.PEM))
        # etcd's JSON gateway dials its own gRPC port with the serving certificate, so (as kubeadm's etcd
        # server certificate does) it must allow client authentication too
        self.server_cert, self.server_key = self._leaf("server", ca_key, ca_cert,
                                                       [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH])
        self.client_cert, self.client_key = self._leaf("client", ca_key, ca_cert, [ExtendedKeyUsageOID.CLIENT_AUTH])
        _other_key, other = self._ca("unrelated-ca")
        self.other_ca_cert = _write(os.path.join(directory, "other-ca.crt"), other.public_bytes(serialization.Encoding.PEM))

    def _ca(self, name):
        return make_ca(name, self._valid)

    def _leaf(self, name, ca_key, ca_cert, usage):
        return sign_leaf(self.directory, name, ca_key, ca_cert, usage, self._valid)


def _validity():
    now = datetime.datetime.now(datetime.timezone.utc)
    return now - datetime.timedelta(hours=1), now + datetime.timedelta(days=7)


def make_ca(name, valid=None):
    """A self-signed CA (key, certificate): the one trust root a test's servers and clients share."""
    valid = valid or _validity()
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(_name(name)).issuer_name(_name(name)).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(valid[0]).not_valid_after(valid[1])
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False, key_agreement=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return key, cert


def sign_leaf(directory, name, ca_key, ca_cert, usage, valid=None):
    """Write ``name.crt``/``name.key`` signed by the CA (SAN localhost, 127.0.0.1); returns their paths."""
    valid = valid or _validity()
    key = ec.generate_private_key(ec.SECP256R1())
    san = x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    cert = (x509.CertificateBuilder().subject_name(_name(name)).issuer_name(ca_cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(valid[0]).not_valid_after(valid[1])
            .add_extension(san, critical=False).add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usage), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    cert_path = _write(os.path.join(directory, f"{name}.crt"), cert.public_bytes(serialization.Encoding.PEM))
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return cert_path, _write(os.path.join(directory, f"{name}.key"), key_pem, 0o600)


class EtcdServer:
    """One etcd member in ``workdir``; ``url`` is its client URL. ``tls=True`` requires client certificates.

    ``ports`` (client, peer) replaces the OS-chosen ports, for callers that must keep parallel runs apart;
    ``extra_args`` are appended to etcd's command line; ``version`` picks the etcd release ("3.5"; None: the one on
    PATH, Debian's 3.4).
    """

    def __init__(self, workdir, tls=False, ports=None, extra_args=(), version=None):
        self.version = version
        self.workdir = str(workdir)
        os.makedirs(self.workdir, exist_ok=True)
        self.tls = tls
        self.pki = Pki(os.path.join(self.workdir, "pki")) if tls else None
        self._picked_ports = ports is None
        self.port, self.peer_port = ports or (free_port(), free_port())
        self.extra_args = list(extra_args)
        self.process = None
        self._log = None

    @property
    def url(self) -> str:
        """The client URL: follows the port when ``start`` picks another."""
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def command(self, binary):
        peer = f"http://127.0.0.1:{self.peer_port}"
        cmd = [binary, "--name", "audit-test", "--data-dir", os.path.join(self.workdir, "data"),
               "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
               "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
               "--initial-cluster", f"audit-test={peer}", "--log-level", "error", "--logger", "zap"]
        if self.tls:
            cmd += ["--cert-file", self.pki.server_cert, "--key-file", self.pki.server_key,
                    "--client-cert-auth", "--trusted-ca-file", self.pki.ca_cert]
        return cmd + self.extra_args

    def start(self, timeout=30.0, attempts=3):
        """Start etcd and wait until it is healthy. Ports this server picked itself are picked again when another
        process took one between the pick and etcd's bind (other tests and clients run on the machine meanwhile)."""
        binary = require_etcd(self.version)
        self.binary = binary
        log_path = os.path.join(self.workdir, "etcd.log")
        self._log = open(log_path, "ab")
        start = self._log.tell()
        self.process = subprocess.Popen(self.command(binary), stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                # the collection is importable once pytest has started (not yet when conftest imports this file)
                from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd.scratch import PORT_TAKEN

                returncode = self.process.returncode
                self.stop()
                with open(log_path, "rb") as handle:
                    handle.seek(start)
                    taken = PORT_TAKEN.encode() in handle.read()
                if taken and self._picked_ports and attempts > 1:
                    self.port, self.peer_port = free_port(), free_port()
                    return self.start(max(deadline - time.monotonic(), 5.0), attempts - 1)
                raise RuntimeError(f"etcd exited with {returncode}; see {log_path}")
            try:
                if json.loads(self._request("GET", "/health")).get("health") == "true":
                    return self
            except (OSError, ValueError):
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"etcd did not become healthy in {timeout}s; see {self._log.name}")
            time.sleep(0.05)

    def stop(self):
        stop_process(self.process)
        self.process = None
        if self._log:
            self._log.close()
            self._log = None

    def _context(self):
        if not self.tls:
            return None
        import ssl

        context = ssl.create_default_context(cafile=self.pki.ca_cert)
        context.load_cert_chain(self.pki.client_cert, self.pki.client_key)
        return context

    def _request(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.url + path, data=data, method=method, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10, context=self._context()) as response:
            return response.read()

    def put(self, key, value: bytes):
        key = key.encode() if isinstance(key, str) else key
        self._request("POST", "/v3/kv/put", {"key": base64.b64encode(key).decode(), "value": base64.b64encode(value).decode()})

    def put_many(self, items, batch=128):
        """Write (key, value) pairs in transactions of ``batch`` puts (etcd's default limit is 128 operations)."""
        ops = []
        for key, value in items:
            key = key.encode() if isinstance(key, str) else key
            ops.append({"request_put": {"key": base64.b64encode(key).decode(), "value": base64.b64encode(value).decode()}})
            if len(ops) == batch:
                self._request("POST", "/v3/kv/txn", {"success": ops})
                ops = []
        if ops:
            self._request("POST", "/v3/kv/txn", {"success": ops})

    def range_prefix(self, prefix, keys_only=False):
        """[(key, value)] of every key under ``prefix`` (bytes; value b"" with ``keys_only``), through the JSON gateway."""
        prefix = prefix.encode() if isinstance(prefix, str) else prefix
        end = prefix[:-1] + bytes([prefix[-1] + 1])
        body = {"key": base64.b64encode(prefix).decode(), "range_end": base64.b64encode(end).decode(), "keys_only": keys_only}
        kvs = json.loads(self._request("POST", "/v3/kv/range", body)).get("kvs", [])
        return [(base64.b64decode(kv["key"]), base64.b64decode(kv.get("value", ""))) for kv in kvs]

    def etcdctl_env(self):
        env = dict(os.environ, ETCDCTL_API="3", ETCDCTL_ENDPOINTS=self.url)
        if self.tls:
            env.update(ETCDCTL_CACERT=self.pki.ca_cert, ETCDCTL_CERT=self.pki.client_cert, ETCDCTL_KEY=self.pki.client_key)
        return env

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def serve(directory, tls=False, version=None):
    """Generator body of an etcd fixture: fail (CI) or skip when etcd is missing, else start, yield, stop."""
    require_etcd(version)
    with EtcdServer(os.path.join(str(directory), "etcd-tls" if tls else "etcd-plain"), tls=tls, version=version) as server:
        yield server
