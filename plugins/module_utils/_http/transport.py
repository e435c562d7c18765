# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How bytes reach an apiserver: keep-alive connections, TLS, proxies, and nothing else.

Direct connections use the standard library's ``http.client``, one keep-alive connection per thread
and endpoint: a migration writes every object of a cluster, and urllib3's pool manager costs about
240 µs of client CPU more per request than ``http.client`` (URL parsing, pool keys, header copies, the
body sent in a second TLS record), which is as much as the request's own work. Importing urllib3 also
costs each module run about 0.1 s. Connections through a proxy (``proxy``, a kubeconfig's
``proxy-url``) use urllib3's ``ProxyManager``, imported only then, which also speaks TLS to an
``https://`` proxy.

A transport answers ``send()`` with a ``RawResponse`` for every status; a request that got no answer
raises ``EndpointUnreachable`` naming the apiserver and the next step. Errors by status are the
client's business (``client.py``).
"""

from __future__ import annotations

import http.client
import select
import socket
import ssl
import threading
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Tuple
from urllib.parse import urlsplit

from ansible_collections.kubeupgrade.storage.plugins.module_utils._http import diagnosis
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.settings import ConnectionSettings
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ConfigurationError, EndpointUnreachable

Headers = List[Tuple[str, str]]
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})  # sent with Content-Length: 0 when they carry no body
# Requests sent again, once, on a new connection when a reused keep-alive connection turns out closed
# before any answer: the methods Go's net/http replays (isReplayable in net/http/request.go), which
# client-go inherits. A write is never sent twice by the transport.
_REPLAYABLE = frozenset({"GET", "HEAD", "OPTIONS"})
# What a keep-alive connection the server (or a load balancer) closed looks like when it is reused.
_CLOSED_UNDER_US = (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError, ConnectionAbortedError,
                    ssl.SSLEOFError, ssl.SSLZeroReturnError)


@dataclass
class RawResponse:
    status: int
    # The answer's headers: http.client's own message (looked up without regard to case), not copied into a dict for
    # every request, since a caller reads one or two of them at most.
    headers: Mapping[str, str]
    data: bytes
    # The DER leaf certificate of the TLS connection that carried the answer (None over http or a proxy): the
    # apiserver that answered, which a load balancer or a host's URL written for another host may hide.
    certificate: Optional[bytes] = None


def _short(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    return str(reason or exc or type(exc).__name__)[:300]


def unreachable(endpoint: str, method: str, path: str, exc: BaseException, tls: bool) -> EndpointUnreachable:
    """The one message for a request that got no answer (TLS failures name the certificate options)."""
    if tls:
        text = (f"TLS to {endpoint} failed ({_short(exc)}). Check 'ca_cert' / the kubeconfig's certificate-authority, "
                "or that the endpoint URL matches the apiserver's certificate.")
    else:
        text = (f"apiserver {endpoint} did not answer {method} {path}: {_short(exc)}. "
                "Check that the endpoint URL is right and the apiserver is running.")
    return EndpointUnreachable(text, endpoint=endpoint, method=method, path=path,
                               problem=diagnosis.TLS if tls else diagnosis.NO_ANSWER)


def tls_context(settings: ConnectionSettings) -> ssl.SSLContext:
    """The TLS setup the settings ask for: verification against 'ca_cert' (or the system store), client certificates."""
    if settings.verify:
        try:
            context = ssl.create_default_context(cafile=settings.ca_cert or None)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigurationError(f"The CA certificate {settings.ca_cert} cannot be loaded ({_short(exc)}): give a PEM "
                                     "certificate in 'ca_cert' or the kubeconfig's certificate-authority(-data).") from None
        # As kubectl (Go's crypto/x509) verifies: Python 3.13's strict X.509 checks refuse a CA without keyUsage or an
        # authority key identifier that the cluster's own clients accept.
        context.verify_flags &= ~getattr(ssl, "VERIFY_X509_STRICT", 0)
    else:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["http/1.1"])  # as urllib3 offers: a server or proxy that requires ALPN gets an answer
    try:
        if settings.client_cert:
            context.load_cert_chain(settings.client_cert, settings.client_key or None)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigurationError(f"The client certificate {settings.client_cert} (or its key {settings.client_key}) "
                                 f"cannot be loaded: {_short(exc)}. Check 'client_cert' and 'client_key' (or the kubeconfig's "
                                 "client-certificate(-data) and client-key(-data)).") from None
    return context


class _OneWrite:
    """Headers and a bytes body in one ``send``: one TLS record and one system call per request, not two (http.client
    sends them apart); a migration's PUTs are most of its requests."""

    def _send_output(self, message_body=None, encode_chunked=False):
        if not isinstance(message_body, bytes) or encode_chunked:
            super()._send_output(message_body, encode_chunked)  # pylint: disable=no-member
            return
        self._buffer.extend((b"", b""))  # pylint: disable=no-member
        message = b"\r\n".join(self._buffer) + message_body  # pylint: disable=no-member
        del self._buffer[:]  # pylint: disable=no-member
        self.send(message)  # pylint: disable=no-member


class _PlainConnection(_OneWrite, http.client.HTTPConnection):
    """HTTP without TLS (an apiserver's insecure port, a test server)."""


class _TlsConnection(_OneWrite, http.client.HTTPSConnection):
    """HTTPS to an apiserver whose certificate names ``server_name`` rather than the host dialled (tls-server-name).

    ``certificate`` is the one the peer served in this connection's handshake, read at no extra cost: it stays set
    after the connection closes, so an answer that closed it still names who sent it."""

    certificate: Optional[bytes] = None

    def __init__(self, host, port, timeout, context, server_name):
        super().__init__(host, port, timeout=timeout, context=context)
        self._server_name = server_name

    def connect(self):
        self.certificate = None
        http.client.HTTPConnection.connect(self)
        self.sock = self._context.wrap_socket(self.sock, server_hostname=self._server_name)
        self.certificate = self.sock.getpeercert(binary_form=True)


class DirectTransport:
    """Keep-alive ``http.client`` connections, one per thread and endpoint, shared by every client of one setup."""

    def __init__(self, settings: ConnectionSettings):
        self.settings = settings
        self._context: Optional[ssl.SSLContext] = None
        self._local = threading.local()

    def _connection(self, endpoint: str, timeout: float) -> Tuple[http.client.HTTPConnection, bool]:
        """This thread's connection to ``endpoint`` and whether it is an open one being reused."""
        connections = getattr(self._local, "connections", None)
        if connections is None:
            connections = self._local.connections = {}
        conn = connections.get(endpoint)
        if conn is not None and conn.sock is not None and _dropped(conn.sock):
            conn.close()  # the apiserver closed the idle connection: dial again rather than fail the request
        if conn is None:
            conn = connections[endpoint] = self._dial(endpoint, timeout)
        reused = conn.sock is not None
        if reused and conn.timeout != timeout:
            conn.sock.settimeout(timeout)
        conn.timeout = timeout
        return conn, reused

    def _dial(self, endpoint: str, timeout: float) -> http.client.HTTPConnection:
        parts = urlsplit(endpoint)
        if parts.scheme == "http":
            return _PlainConnection(parts.hostname, parts.port, timeout=timeout)
        if self._context is None:
            self._context = tls_context(self.settings)
        return _TlsConnection(parts.hostname, parts.port, timeout, self._context,
                              self.settings.tls_server_name or parts.hostname)

    def send(self, method: str, endpoint: str, path: str, target: str, request: tuple) -> RawResponse:
        """``request``: (headers as pairs, body bytes or None, timeout in seconds)."""
        headers, body, timeout = request
        conn, reused = self._connection(endpoint, timeout)
        for attempt in (1, 2):
            try:
                return _exchange(conn, method, target, headers, body)
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                if attempt == 1 and reused and method in _REPLAYABLE and isinstance(exc, _CLOSED_UNDER_US):
                    # The server closed the kept connection as the request went out (an idle timeout racing
                    # the reuse): the request got no answer, so a read goes once more on a new connection.
                    continue
                raise unreachable(endpoint, method, path, exc, tls=isinstance(exc, ssl.SSLError)) from None
        raise AssertionError("not reached")


def _exchange(conn: http.client.HTTPConnection, method: str, target: str, headers: Headers, body) -> RawResponse:
    """One request and its whole answer on ``conn`` (which dials when it is closed)."""
    conn.putrequest(method, target, skip_accept_encoding=True)
    for name, value in headers:
        conn.putheader(name, value)
    if body is not None or method in _BODY_METHODS:
        conn.putheader("Content-Length", str(len(body or b"")))
    conn.endheaders(body)  # headers and body in one write (_OneWrite)
    response = conn.getresponse()
    data = response.read()
    return RawResponse(response.status, response.msg, data, getattr(conn, "certificate", None))


def _dropped(sock: socket.socket) -> bool:
    """An idle keep-alive socket that is readable was closed by the server (or holds garbage): do not reuse it."""
    try:
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        return bool(poller.poll(0))
    except (OSError, ValueError):
        return True


class ProxyTransport:
    """urllib3's ProxyManager: CONNECT tunnels through http:// and https:// proxies (imported only when a proxy is set).
    Its answers name no certificate: the tunnel's is the apiserver's, but urllib3 does not hand it out."""

    def __init__(self, settings: ConnectionSettings, maxsize: int):
        import urllib3  # pylint: disable=import-outside-toplevel

        self._urllib3 = urllib3
        tls = {
            "cert_reqs": "CERT_REQUIRED" if settings.verify else "CERT_NONE",
            "ca_certs": settings.ca_cert if settings.verify else None,
            "cert_file": settings.client_cert,
            "key_file": settings.client_key,
        }
        if settings.tls_server_name:
            tls["server_hostname"] = settings.tls_server_name
        if not settings.verify:
            tls["assert_hostname"] = False
        self._pool = urllib3.ProxyManager(settings.proxy, proxy_headers=settings.proxy_headers or None, num_pools=16,
                                          maxsize=maxsize, block=True, retries=False, **tls)

    def send(self, method: str, endpoint: str, path: str, target: str, request: tuple) -> RawResponse:
        headers, body, timeout = request
        urllib3 = self._urllib3
        merged = urllib3.HTTPHeaderDict()
        for name, value in headers:
            merged.add(name, value)
        try:
            raw = self._pool.request(method, endpoint + target, body=body, headers=merged,
                                     timeout=urllib3.Timeout(total=timeout), preload_content=True, redirect=False)
        except urllib3.exceptions.SSLError as exc:
            raise unreachable(endpoint, method, path, exc, tls=True) from None
        except urllib3.exceptions.HTTPError as exc:
            raise unreachable(endpoint, method, path, exc, tls=False) from None
        return RawResponse(raw.status, raw.headers, raw.data or b"")  # urllib3's HTTPHeaderDict: without regard to case


_TRANSPORTS: Dict[tuple, object] = {}
_TRANSPORTS_LOCK = threading.Lock()


def transport_for(settings: ConnectionSettings, endpoint: str, maxsize: int):
    """The shared transport for this TLS/proxy setup: direct unless a proxy applies to ``endpoint``."""
    proxied = bool(settings.proxy) and not bypasses_proxy(endpoint, settings.no_proxy)
    key = (settings.verify, settings.ca_cert, settings.client_cert, settings.client_key, settings.tls_server_name,
           settings.proxy if proxied else None, maxsize if proxied else 0)
    with _TRANSPORTS_LOCK:
        transport = _TRANSPORTS.get(key)
        if transport is None:
            transport = ProxyTransport(settings, maxsize) if proxied else DirectTransport(settings)
            _TRANSPORTS[key] = transport
    return transport


def bypasses_proxy(host: str, no_proxy: Optional[str]) -> bool:
    if not no_proxy:
        return False
    hostname = urlsplit(host).hostname or ""
    for entry in (e.strip() for e in no_proxy.split(",")):
        if entry and (hostname == entry or hostname.endswith("." + entry.lstrip("."))):
            return True
    return False
