# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Paged, read-only range reads of etcd's v3 API under a prefix: the audit's only I/O.

Two transports, one scan. By default the pages are read from etcd's gRPC API (``etcdserverpb.KV/Range``, what
``etcdctl`` uses) through a small HTTP/2 client built on the standard library alone (``socket``, ``ssl``; HPACK and the
few protobuf fields of a range are decoded here): nothing has to be installed on a control-plane host. Where gRPC cannot
be spoken with a member that answers (no HTTP/2 through a proxy, no ALPN ``h2`` in the TLS handshake, an HTTP/2 error),
the same pages are read from etcd's JSON gateway (``POST /v3/kv/range``, etcd 3.4+) through urllib3, the HTTP stack the
collection already ships with. The gateway costs etcd about 20 times the CPU per key (it marshals every key and value
to JSON): ``benchmarks/bench_audit.py`` measures both against ``etcdctl``. ``ScanOptions.transport`` forces one.

Each page asks for at most ``page_size`` keys in ``[key, range_end)``, continues from the last key + ``\\x00``, and pins
the revision of the first page, so the whole scan is one consistent snapshot that never blocks writers. The first page
is a linearizable read; the following ones are serializable reads of that revision on the same member (the member has
applied it), so a page costs no round of consensus in an HA etcd. The next page is requested (after the throttle's
pause) while this one is consumed: one request in flight ahead. Only range, status and snapshot (read) requests are
ever sent: nothing here can write to etcd.
"""

from __future__ import annotations

import base64
import binascii
import json
import socket
import ssl
import struct
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Iterator, List, Optional, Tuple
from urllib.parse import unquote, urlsplit

from ansible_collections.kubeupgrade.storage.plugins.module_utils._audit.etcd_wire import (
    _ACK,
    _CONTINUATION,
    _DATA,
    _END_HEADERS,
    _END_STREAM,
    _FRAME,
    _GOAWAY,
    _HEADERS,
    _PADDED,
    _PING,
    _PRIORITY,
    _RST_STREAM,
    _SETTINGS,
    _WINDOW_UPDATE,
    _decode_range,
    _frame,
    _GrpcProtocolError,
    _HpackDecoder,
    _literal,
    _range_request,
    _RangePage,
    _Windows,
)
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ConfigurationError, KubeUpgradeError

try:
    import urllib3

    HAS_URLLIB3 = True
except ImportError:  # pragma: no cover - urllib3 comes with the kubernetes package
    HAS_URLLIB3 = False

RANGE_PATH = "/v3/kv/range"
STATUS_PATH = "/v3/maintenance/status"  # read-only: the member's database size and revision
SNAPSHOT_PATH = "/v3/maintenance/snapshot"  # read-only: the whole backend, streamed (what `etcdctl snapshot save` reads)
RANGE_METHOD = "/etcdserverpb.KV/Range"  # the gRPC method behind RANGE_PATH
TRANSPORTS = ("auto", "grpc", "gateway")


class EtcdError(KubeUpgradeError):
    """etcd could not be read: names the endpoint and the next step."""


@dataclass
class EtcdSettings:
    """How to reach etcd. Paths are the kubeadm ones by convention; verification is on by default."""

    endpoints: List[str]
    ca_cert: Optional[str] = None
    client_cert: Optional[str] = None
    client_key: Optional[str] = None
    validate_certs: bool = True
    timeout: float = 30.0


@dataclass
class ScanOptions:
    """``pages_per_second`` 0 = no throttle; ``keys_only`` yields empty values (etcd sends no values).

    ``transport``: ``auto`` (gRPC, the JSON gateway where gRPC cannot be spoken), ``grpc`` or ``gateway`` only.
    """

    prefix: str = "/registry/"
    page_size: int = 500
    pages_per_second: float = 0.0
    keys_only: bool = False
    transport: str = "auto"
    sleep: Callable[[float], None] = field(default=time.sleep)
    clock: Callable[[], float] = field(default=time.monotonic)


def prefix_range_end(prefix: bytes) -> bytes:
    """The smallest key greater than every key starting with ``prefix`` (etcd's ``--prefix``)."""
    end = bytearray(prefix)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\x00"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


class EtcdReader:
    """Range reads against the first endpoint that answers; ``revision``/``endpoint`` tell what was read."""

    def __init__(self, settings: EtcdSettings):
        self.settings = settings
        self.endpoint: Optional[str] = None
        self.revision: Optional[int] = None
        self.pages = 0
        self.transport: Optional[str] = None  # what the last scan read through: "grpc" or "gateway"
        self._gateway = None

    @property
    def _pool(self):
        """urllib3's pool for the JSON gateway, made at its first request (a gRPC scan needs no urllib3)."""
        if self._gateway is None:
            if not HAS_URLLIB3:
                raise ConfigurationError("the Python package urllib3 is required to read etcd's JSON gateway; install it on the "
                                         "host running the module")
            settings = self.settings
            kwargs = {"timeout": urllib3.Timeout(connect=min(10.0, settings.timeout), read=settings.timeout),
                      "retries": False, "maxsize": 1}
            if any(urlsplit(url).scheme == "https" for url in settings.endpoints):
                # The gRPC path's trust, offering HTTP/1.1; urllib3's own context would add Python 3.13's strict X.509
                # checks, which refuse CAs etcd and etcdctl accept (no keyUsage or authority key identifier).
                kwargs["ssl_context"] = _tls_context(settings, alpn="http/1.1")
                if settings.validate_certs:
                    kwargs["cert_reqs"] = "CERT_REQUIRED"
                else:
                    kwargs["cert_reqs"] = "CERT_NONE"
                    kwargs["assert_hostname"] = False
            self._gateway = urllib3.PoolManager(**kwargs)
            if not settings.validate_certs:
                urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
        return self._gateway

    def _post(self, endpoint: str, body: dict, path: str = RANGE_PATH) -> dict:
        try:
            response = self._pool.request("POST", endpoint + path, body=json.dumps(body).encode(),
                                          headers={"Content-Type": "application/json"}, preload_content=True)
        except urllib3.exceptions.HTTPError as error:
            raise _transport_error(endpoint, error, self.settings, mid_scan=self.pages > 0) from None
        try:
            return _parse_response(endpoint, response.status, response.data)
        except EtcdError as error:
            if self.pages and "compacted" not in str(error):
                raise _mid_scan_error(endpoint, str(error), error.details) from None
            raise

    def db_size(self) -> Optional[int]:
        """The size in bytes of the first answering member's database (what a copy of it needs), None if not said."""
        status = self.status()
        size = status.get("dbSize")
        return int(size) if size is not None else None

    def status(self) -> dict:
        """The first answering member's status: ``dbSize``, ``header.revision``, ``version``."""
        return self._first_page({}, STATUS_PATH)

    def snapshot(self, write: Callable[[bytes], None]) -> dict:
        """Stream the first answering member's backend into ``write`` (etcd's own snapshot: the same bytes as
        ``etcdctl snapshot save``, ending with their sha256). Returns the endpoint, the revision just before, bytes."""
        status = self.status()
        endpoint = self.endpoint
        try:
            response = self._pool.request("POST", endpoint + SNAPSHOT_PATH, body=b"{}", headers={"Content-Type": "application/json"},
                                          preload_content=False)
        except urllib3.exceptions.HTTPError as error:
            # It answered its status over the same connection settings a moment ago: TLS and the certificates work, so a
            # reset or refusal now is etcd going away, not a certificate problem.
            raise _stream_closed(endpoint, 0, error) from None
        size = 0
        try:
            if response.status != 200:
                _parse_response(endpoint, response.status, response.read())
            pending = b""
            for chunk in response.stream(1 << 20):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    size += _snapshot_piece(endpoint, line, write)
            size += _snapshot_piece(endpoint, pending, write)
        except (urllib3.exceptions.HTTPError, ssl.SSLError, ConnectionError) as error:
            raise _stream_closed(endpoint, size, error) from None
        finally:
            response.release_conn()
        return {"endpoint": endpoint, "revision_before": int((status.get("header") or {}).get("revision", 0)), "bytes": size,
                "etcd_version": status.get("version")}

    def _first_page(self, body: dict, path: str = RANGE_PATH) -> dict:
        failures = []
        for endpoint in self.settings.endpoints:
            try:
                page = self._post(endpoint, body, path)
            except EtcdError as error:
                failures.append(error)
                continue
            self.endpoint = endpoint
            return page
        raise _all_failed(failures, self.settings)

    def scan(self, options: ScanOptions) -> Iterator[Tuple[bytes, bytes]]:
        """Yield (key, value) of every key under ``options.prefix``, in key order, page by page, at one revision.

        The next page is requested (after the throttle's pause) while this one is consumed, so etcd's work and ours
        overlap; at most one request is ever in flight. gRPC first (see the module's doc), the JSON gateway where gRPC
        cannot be spoken with a member that answers; ``transport`` tells which one read.
        """
        if options.transport not in TRANSPORTS:
            raise ConfigurationError(f"the etcd transport must be one of {', '.join(TRANSPORTS)}, got {options.transport!r}")
        prefix = options.prefix.encode("utf-8")
        end = prefix_range_end(prefix)
        windows = _Windows(prefix, end, options.page_size)
        throttle = _Throttle(options)
        first = None
        if options.transport != "gateway":
            channel, first = self._first_grpc_page(prefix, end, options)
            if channel is not None:
                self.transport = "grpc"
                try:
                    yield from self._pages(first, _GrpcFetch(self, channel, options), windows, throttle)
                finally:
                    channel.close()
                return
        self.transport = "gateway"
        fetch = _GatewayFetch(self, options)
        try:
            if first is None:
                first = _gateway_page(self._first_page(_gateway_body(prefix, end, options, 0)))
            yield from self._pages(first, fetch, windows, throttle)
        finally:
            fetch.close()

    def _pages(self, page: _RangePage, fetch, windows: _Windows, throttle: _Throttle) -> Iterator[Tuple[bytes, bytes]]:
        self.revision = page.revision
        while True:
            self.pages += 1
            following = None
            if windows.advance(page):
                throttle.wait(len(page.pairs))
                following = fetch.send(windows.start, windows.range_end, self.revision)
            yield from page.pairs
            if following is None:
                return
            page = fetch.receive(following)

    def _first_grpc_page(self, prefix: bytes, end: bytes, options: ScanOptions):
        """(channel, first page) from the first endpoint that answers over gRPC, or (None, the gateway's first page).

        An endpoint that cannot be reached at all (refused, timed out) is skipped as the gateway would skip it; one that
        answers but not in gRPC (TLS or HTTP/2 trouble) is asked through the gateway, which reads or says why not.
        """
        request = _range_request(prefix, end, options, 0)
        failures = []
        for endpoint in self.settings.endpoints:
            channel = None
            try:
                channel = _GrpcChannel(endpoint, self.settings)
                page = _decode_range(channel.call(RANGE_METHOD, request))
            except (_Unreachable, socket.timeout) as error:  # no connection, or no answer in time: the gateway cannot do better
                if channel is not None:
                    channel.close()
                failures.append(_transport_error(endpoint, getattr(error, "error", error), self.settings, mid_scan=False))
                continue
            except _GrpcStatus as status:
                channel.close()
                failures.append(_range_error(endpoint, status.message, {"endpoint": endpoint, "grpc_status": status.code}))
                continue
            except (OSError, _GrpcProtocolError) as error:
                if channel is not None:
                    channel.close()
                if options.transport == "grpc":
                    failures.append(_transport_error(endpoint, error, self.settings, mid_scan=False))
                    continue
                try:
                    page = _gateway_page(self._post(endpoint, _gateway_body(prefix, end, options, 0)))
                except EtcdError as refused:
                    failures.append(refused)
                    continue
                self.endpoint = endpoint
                return None, page
            self.endpoint = endpoint
            return channel, page
        raise _all_failed(failures, self.settings)


class _GrpcFetch:
    """Sends a range request on the scan's gRPC channel; receives and decodes its answer (errors in etcd's words)."""

    def __init__(self, reader: EtcdReader, channel: _GrpcChannel, options: ScanOptions):
        self.reader, self.channel, self.options = reader, channel, options

    def send(self, start: bytes, range_end: bytes, revision: int) -> int:
        try:
            return self.channel.send(RANGE_METHOD, _range_request(start, range_end, self.options, revision))
        except (OSError, _GrpcProtocolError) as error:
            raise _mid_scan_error(self.reader.endpoint, type(error).__name__) from None

    def receive(self, stream: int) -> _RangePage:
        endpoint = self.reader.endpoint
        try:
            return _decode_range(self.channel.receive(stream))
        except _GrpcStatus as status:
            if "compacted" in status.message:
                raise _range_error(endpoint, status.message, {"endpoint": endpoint, "grpc_status": status.code}) from None
            raise _mid_scan_error(endpoint, f"etcd: {status.message}") from None
        except (OSError, _GrpcProtocolError) as error:
            raise _mid_scan_error(endpoint, type(error).__name__) from None


class _GatewayFetch:
    """The same through the JSON gateway: the request and its decoding run on a worker thread."""

    def __init__(self, reader: EtcdReader, options: ScanOptions):
        self.reader, self.options = reader, options
        self.executor = ThreadPoolExecutor(max_workers=1)

    def send(self, start: bytes, range_end: bytes, revision: int):
        body = _gateway_body(start, range_end, self.options, revision)
        return self.executor.submit(lambda: _gateway_page(self.reader._post(self.reader.endpoint, body)))

    def receive(self, future) -> _RangePage:
        return future.result()

    def close(self) -> None:
        self.executor.shutdown(wait=False)


def _gateway_body(start: bytes, range_end: bytes, options: ScanOptions, revision: int) -> dict:
    body = {"key": _b64(start), "range_end": _b64(range_end), "limit": options.page_size}
    if revision:
        body.update(revision=revision, serializable=True)  # pinned, and this member answered at that revision
    if options.keys_only:
        body["keys_only"] = True
    return body


def _gateway_page(document: dict) -> _RangePage:
    decode = binascii.a2b_base64
    pairs = [(decode(kv["key"]), decode(kv.get("value", ""))) for kv in document.get("kvs") or []]
    return _RangePage(int((document.get("header") or {}).get("revision", 0)), pairs, bool(document.get("more")),
                      int(document.get("count", 0)))


class _Throttle:
    """At most ``page_size * pages_per_second`` keys per second, with the clock and sleep passed in.

    The pause before a request is in proportion to the keys the last answer brought (a full page: the whole interval):
    a bounded window (see ``_Windows``) may come back short, or empty, which cost etcd nothing to count or send.
    """

    def __init__(self, options: ScanOptions):
        self.options = options
        self.interval = 1.0 / options.pages_per_second if options.pages_per_second > 0 else 0.0
        self.last = options.clock()

    def wait(self, keys: Optional[int] = None) -> None:
        if not self.interval:
            return
        share = 1.0 if keys is None else min(1.0, keys / self.options.page_size)
        pause = self.last + self.interval * share - self.options.clock()
        if pause > 0:
            self.options.sleep(pause)
        self.last = self.options.clock()


def _snapshot_piece(endpoint: str, line: bytes, write: Callable[[bytes], None]) -> int:
    """One message of the gateway's snapshot stream (``{"result": {"blob": base64}}`` or ``{"error": ...}``)."""
    if not line.strip():
        return 0
    try:
        message = json.loads(line)
    except ValueError:
        raise EtcdError(f"etcd at {endpoint} sent a snapshot message that is not JSON; take the snapshot again",
                        details={"endpoint": endpoint}) from None
    if "error" in message:
        error = message["error"]
        text = error.get("message") if isinstance(error, dict) else str(error)
        raise EtcdError(f"etcd at {endpoint} failed while sending the snapshot: {text}", details={"endpoint": endpoint})
    blob = base64.b64decode((message.get("result") or {}).get("blob") or "")
    write(blob)
    return len(blob)


def _stream_closed(endpoint: str, size: int, error) -> EtcdError:
    """etcd ended the snapshot stream early, after answering its status: it stopped or restarted."""
    return EtcdError(f"etcd at {endpoint} closed the snapshot stream after {size} bytes ({_short(str(error) or type(error).__name__)}): "
                     "etcd stopped or restarted (it had answered its status just before); nothing was kept - check that "
                     "etcd runs and take the snapshot again", details={"endpoint": endpoint, "bytes": size})


def _parse_response(endpoint: str, status: int, data: bytes) -> dict:
    try:
        document = json.loads(data)
    except ValueError:
        document = None
    if status == 200 and isinstance(document, dict):
        return document
    message = (document or {}).get("message") or (document or {}).get("error") if isinstance(document, dict) else None
    message = message or data[:200].decode("utf-8", "replace").strip() or f"HTTP {status}"
    if status == 404 and "compacted" not in message:
        raise EtcdError(f"{endpoint}{RANGE_PATH} answered 404: this is not an etcd 3.4+ client URL (check etcd_endpoints; "
                        "kubeadm's etcd listens on https://<node>:2379)", details={"endpoint": endpoint, "status": status})
    raise _range_error(endpoint, message, {"endpoint": endpoint, "status": status})


def _range_error(endpoint: str, message: str, details: dict) -> EtcdError:
    """etcd answered a range read with an error (the gateway's JSON or a gRPC status): the same words for both."""
    if "compacted" in message:
        return EtcdError(f"etcd at {endpoint} compacted the revision the audit was reading ({message}): the scan is not "
                         "complete and reports nothing; run the audit again, and if it recurs let it read faster (a higher "
                         "pages_per_second, or 0 for no throttle): the apiserver compacts every 5 minutes by default",
                         details=details)
    return EtcdError(f"etcd at {endpoint} refused the range read: {message}", details=details)


def _mid_scan_error(endpoint: str, reason: str, details: Optional[dict] = None) -> EtcdError:
    return EtcdError(f"etcd at {endpoint} stopped answering in the middle of the scan ({reason}): the audit is "
                     "incomplete and reports nothing; check etcd's health and run the audit again",
                     details=details or {"endpoint": endpoint})


def _all_failed(failures: list, settings: EtcdSettings) -> EtcdError:
    if len(failures) == 1:
        return failures[0]
    return EtcdError("no etcd endpoint could be read: " + "; ".join(str(f) for f in failures),
                     details={"endpoints": list(settings.endpoints)})


def _transport_error(endpoint: str, error, settings: EtcdSettings, mid_scan: bool) -> EtcdError:
    text = str(error)
    details = {"endpoint": endpoint}
    if mid_scan:
        return _mid_scan_error(endpoint, type(error).__name__, details)
    if "CERTIFICATE_VERIFY_FAILED" in text or "certificate verify failed" in text:
        return EtcdError(f"etcd at {endpoint}: its TLS certificate is not signed by etcd_ca_cert ({settings.ca_cert or 'system CAs'}); "
                         "give etcd's CA (kubeadm: /etc/kubernetes/pki/etcd/ca.crt)", details=details)
    if "KEY_VALUES_MISMATCH" in text or "key values mismatch" in text:
        return EtcdError(f"etcd_client_key ({settings.client_key}) is not the key of etcd_client_cert ({settings.client_cert}): "
                         "give the matching pair (kubeadm: /etc/kubernetes/pki/apiserver-etcd-client.crt and .key)", details=details)
    if isinstance(error, _GrpcProtocolError):
        return EtcdError(f"etcd at {endpoint} answered, but not in gRPC ({_short(text)}): read it through its JSON gateway "
                         "(transport auto or gateway)", details=details)
    https = urlsplit(endpoint).scheme == "https"
    if not https and ("RemoteDisconnected" in text or "Connection aborted" in text or "BadStatusLine" in text):
        return EtcdError(f"etcd at {endpoint} closed the connection without an answer ({_short(text)}): etcd serving TLS on this "
                         f"port drops plain HTTP; use {endpoint.replace('http://', 'https://', 1)} with etcd_ca_cert, "
                         "etcd_client_cert and etcd_client_key (kubeadm serves only TLS on 2379)", details=details)
    if isinstance(error, ssl.SSLError) or (HAS_URLLIB3 and isinstance(error, urllib3.exceptions.SSLError)) or "alert" in text or (
            https and (isinstance(error, ConnectionResetError)
                       or (HAS_URLLIB3 and isinstance(error, urllib3.exceptions.ProtocolError)))):
        hint = ("give etcd_client_cert and etcd_client_key (kubeadm: /etc/kubernetes/pki/apiserver-etcd-client.crt and .key)"
                if not settings.client_cert else "check that etcd_client_cert is signed by the CA etcd trusts for clients")
        return EtcdError(f"etcd at {endpoint} refused the TLS connection ({_short(text)}): {hint}", details=details)
    return EtcdError(f"etcd at {endpoint} is unreachable ({_short(text)}): check etcd_endpoints (kubeadm: "
                     "https://<control-plane node>:2379) and that etcd runs", details=details)


def _short(text: str) -> str:
    return text if len(text) <= 200 else text[:197] + "..."


# --- etcd's gRPC API over HTTP/2, standard library only -------------------------------------------------------------
# What a unary call needs and nothing more: the connection preface and settings, one HEADERS + DATA frame per request,
# HPACK decoding of the answer's headers and trailers (grpc-status, grpc-message), flow control windows kept open, PING
# and SETTINGS acknowledged. Requests are sent as literal header fields (no state in etcd's decoder); the answers'
# header blocks are decoded in order, with the dynamic table etcd's encoder keeps.


class _Unreachable(Exception):
    """No TCP connection to the member (refused, timed out, no route): ``error`` says why."""

    def __init__(self, error: OSError):
        super().__init__(str(error))
        self.error = error


class _GrpcStatus(Exception):
    """etcd answered the call with a gRPC error status (``grpc-status`` not 0) and its message."""

    def __init__(self, code: int, message: str):
        super().__init__(f"gRPC status {code}: {message}")
        self.code = code
        self.message = message


_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_MAX_WINDOW = 2 ** 31 - 1
_REFILL = 2 ** 30  # give back a window once this much of it was used


class _GrpcChannel:
    """One HTTP/2 connection to one member; ``send`` starts a call, ``receive`` waits for its message."""

    def __init__(self, endpoint: str, settings: EtcdSettings):
        parts = urlsplit(endpoint)
        tls = parts.scheme == "https"
        self.endpoint = endpoint
        self._streams = {}
        self._next_stream = 1
        self._unacked = 0  # connection window used since it was last given back
        self._headers = _HpackDecoder()
        self._block = None  # (stream, end_stream, fragments) of a header block awaiting CONTINUATION
        self._prefix = (b"\x83" + (b"\x87" if tls else b"\x86")  # :method POST, :scheme (static table)
                        + _literal(b":authority", parts.netloc.encode("ascii")))
        self._suffix = (_literal(b"content-type", b"application/grpc") + _literal(b"te", b"trailers")
                        + _literal(b"user-agent", b"kubeupgrade.storage"))
        try:
            sock = socket.create_connection((parts.hostname, parts.port or (443 if tls else 80)), timeout=min(10.0, settings.timeout))
        except OSError as error:
            raise _Unreachable(error) from None
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if tls:
                sock = _tls_context(settings).wrap_socket(sock, server_hostname=parts.hostname)
                if sock.selected_alpn_protocol() != "h2":
                    raise _GrpcProtocolError("the TLS handshake did not agree on HTTP/2 (ALPN h2)")
            sock.settimeout(settings.timeout)
            settings_frame = struct.pack(">HLHLHL", 0x2, 0, 0x4, _MAX_WINDOW, 0x5, 1 << 20)  # no push, widest windows, 1 MiB frames
            sock.sendall(_PREFACE + _frame(_SETTINGS, 0, 0, settings_frame)
                         + _frame(_WINDOW_UPDATE, 0, 0, struct.pack(">L", _MAX_WINDOW - 65535)))
        except BaseException:
            sock.close()
            raise
        self._sock = sock
        self._file = sock.makefile("rb", buffering=1 << 16)

    def close(self) -> None:
        try:
            self._file.close()
            self._sock.close()
        except OSError:
            pass

    def call(self, method: str, message: bytes) -> bytes:
        return self.receive(self.send(method, message))

    def send(self, method: str, message: bytes) -> int:
        stream = self._next_stream
        self._next_stream += 2
        block = self._prefix + _literal(b":path", method.encode("ascii")) + self._suffix
        self._streams[stream] = _Stream()
        self._sock.sendall(_frame(_HEADERS, _END_HEADERS, stream, block)
                           + _frame(_DATA, _END_STREAM, stream, b"\x00" + struct.pack(">L", len(message)) + message))
        return stream

    def receive(self, stream: int) -> bytes:
        state = self._streams[stream]
        while not state.closed:
            self._read_frame()
        del self._streams[stream]
        return state.message()

    def _read_frame(self) -> None:
        head = self._file.read(9)
        if len(head) < 9:
            raise ConnectionResetError("etcd closed the connection")
        high, low, kind, flags, stream = _FRAME.unpack(head)
        size = (high << 16) | low
        payload = self._file.read(size) if size else b""
        if len(payload) < size:
            raise ConnectionResetError("etcd closed the connection in the middle of a frame")
        stream &= 0x7FFFFFFF
        if kind == _DATA:
            self._data(stream, flags, payload, size)
        elif kind in (_HEADERS, _CONTINUATION):
            self._header_block(kind, stream, flags, payload)
        else:
            self._control(kind, flags, stream, payload)

    def _control(self, kind: int, flags: int, stream: int, payload: bytes) -> None:
        if kind == _SETTINGS:
            if not flags & _ACK:
                self._sock.sendall(_frame(_SETTINGS, _ACK, 0))
        elif kind == _PING:
            if not flags & _ACK:
                self._sock.sendall(_frame(_PING, _ACK, 0, payload))
        elif kind == _RST_STREAM:
            state = self._streams.get(stream)
            if state is not None:
                state.reset = struct.unpack(">L", payload[:4])[0] if len(payload) >= 4 else -1
                state.closed = True
        elif kind == _GOAWAY:
            last = struct.unpack(">L", payload[:4])[0] & 0x7FFFFFFF if len(payload) >= 8 else 0
            code = struct.unpack(">L", payload[4:8])[0] if len(payload) >= 8 else -1
            for number, state in self._streams.items():
                if number > last and not state.closed:
                    state.reset, state.closed = code, True
        # WINDOW_UPDATE, PRIORITY and unknown frames need nothing from a client that sends only tiny requests

    def _data(self, stream: int, flags: int, payload: bytes, size: int) -> None:
        if flags & _PADDED:
            payload = payload[1:len(payload) - payload[0]] if payload else b""
        state = self._streams.get(stream)
        self._unacked += size
        if self._unacked >= _REFILL:
            self._sock.sendall(_frame(_WINDOW_UPDATE, 0, 0, struct.pack(">L", self._unacked)))
            self._unacked = 0
        if state is None:
            return
        state.data.append(payload)
        state.unacked += size
        if flags & _END_STREAM:
            state.closed = True
        elif state.unacked >= _REFILL:
            self._sock.sendall(_frame(_WINDOW_UPDATE, 0, stream, struct.pack(">L", state.unacked)))
            state.unacked = 0

    def _header_block(self, kind: int, stream: int, flags: int, payload: bytes) -> None:
        if kind == _HEADERS:
            if flags & _PADDED:
                payload = payload[1:len(payload) - payload[0]] if payload else b""
            if flags & _PRIORITY:
                payload = payload[5:]
            self._block = (stream, bool(flags & _END_STREAM), [payload])
        elif self._block is None or self._block[0] != stream:
            raise _GrpcProtocolError("a CONTINUATION frame without its HEADERS frame")
        else:
            self._block[2].append(payload)
        if not flags & _END_HEADERS:
            return
        stream, end_stream, fragments = self._block
        self._block = None
        try:  # always decoded, whoever the block is for: the dynamic table must follow etcd's encoder
            fields = self._headers.decode(b"".join(fragments))
        except (IndexError, ValueError):
            raise _GrpcProtocolError("etcd sent a header block that is not valid HPACK") from None
        state = self._streams.get(stream)
        if state is not None:
            state.headers.update(fields)
            state.closed = state.closed or end_stream


class _Stream:
    """What arrived for one call: headers and trailers (merged), DATA payloads, a reset."""

    __slots__ = ("headers", "data", "closed", "reset", "unacked")

    def __init__(self):
        self.headers = {}
        self.data = []
        self.closed = False
        self.reset = None
        self.unacked = 0

    def message(self) -> bytes:
        if self.reset is not None:
            raise _GrpcProtocolError(f"etcd reset the call (HTTP/2 error code {self.reset})")
        status = self.headers.get(":status")
        if status != "200":
            raise _GrpcProtocolError(f"etcd answered HTTP status {status} to a gRPC call")
        code = self.headers.get("grpc-status")
        if code is None:
            raise _GrpcProtocolError("the call ended without a gRPC status")
        if code != "0":
            raise _GrpcStatus(int(code) if code.isdigit() else -1, unquote(self.headers.get("grpc-message", "")) or f"gRPC status {code}")
        data = b"".join(self.data) if len(self.data) != 1 else self.data[0]
        if len(data) < 5 or data[0] != 0 or int.from_bytes(data[1:5], "big") != len(data) - 5:
            raise _GrpcProtocolError("the answer is not one uncompressed gRPC message")
        return data


def _tls_context(settings: EtcdSettings, alpn: str = "h2") -> ssl.SSLContext:
    """The trust and client certificate of every connection to etcd, offering HTTP/2 (gRPC) or HTTP/1.1 (the gateway).

    A plain client context, as Go's crypto/tls verifies (etcd's own clients): not Python 3.13's default one, whose
    strict X.509 checks refuse a CA without keyUsage or an authority key identifier that etcdctl accepts."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if settings.validate_certs:
        if settings.ca_cert:
            try:
                context.load_verify_locations(cafile=settings.ca_cert)
            except (OSError, ssl.SSLError) as error:
                raise EtcdError(f"etcd_ca_cert {settings.ca_cert} cannot be loaded ({_short(str(error))}): give the PEM "
                                "certificate of etcd's CA (kubeadm: /etc/kubernetes/pki/etcd/ca.crt)") from None
        else:
            context.load_default_certs()
    else:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if settings.client_cert:
        try:
            context.load_cert_chain(settings.client_cert, settings.client_key)
        except ssl.SSLError as error:
            if "KEY_VALUES_MISMATCH" in str(error) or "key values mismatch" in str(error):
                raise EtcdError(f"etcd_client_key ({settings.client_key}) is not the key of etcd_client_cert "
                                f"({settings.client_cert}): give the matching pair (kubeadm: "
                                "/etc/kubernetes/pki/apiserver-etcd-client.crt and .key)") from None
            raise EtcdError(f"etcd_client_cert {settings.client_cert} or etcd_client_key {settings.client_key} cannot be "
                            f"loaded ({_short(str(error))}): give a PEM certificate and its key") from None
    context.set_alpn_protocols([alpn])
    return context


# Protocol buffers: RangeRequest out, RangeResponse in (etcd's rpc.proto, kv.proto). Only the fields the scan uses.
