# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The etcd client: paged, read-only range reads of etcd's v3 API under a prefix, and a member's status and snapshot.
The audit, the rehearsal and the snapshot read etcd through here.

Two transports, one rule. By default everything is read from etcd's gRPC API, what ``etcdctl`` uses: the pages
(``etcdserverpb.KV/Range``), the member's status (``Maintenance/Status``) and its snapshot (``Maintenance/Snapshot``, a
server stream), through ``grpcio``, with the messages generated from etcd's ``rpc.proto`` and ``kv.proto`` (the subset in
``etcdpb/``). etcd's JSON gateway (``POST /v3/kv/range``, ``/v3/maintenance/status``, ``/v3/maintenance/snapshot``,
etcd 3.4+), through urllib3, the HTTP stack the collection already ships with, is used only where gRPC cannot be spoken:
against https with ``validate_certs: false`` (grpcio cannot skip the certificate check), and with a member that
answers but not in gRPC (a TLS handshake that does not agree on HTTP/2, as through a proxy that speaks HTTP/1.1 only).
The gateway costs etcd about 20 times the CPU per key (it marshals every key and value to JSON):
``benchmarks/bench_audit.py`` measures both against ``etcdctl``. ``ScanOptions.transport`` (and the ``transport``
argument of ``status`` and ``snapshot``) forces one.

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
import http.client
import json
import os
import re
import ssl
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterator, Optional, Tuple
from urllib.parse import urlsplit

from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd.settings import EtcdSettings, ScanOptions
from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd.windows import _RangePage, _Windows
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ConfigurationError, KubeUpgradeError

try:
    import grpc
    from google.protobuf import json_format

    from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd.etcdpb import rpc_pb2

    GRPC_IMPORT_ERROR = None
except ImportError as error:  # pragma: no cover - the collection's requirements name grpcio and protobuf
    GRPC_IMPORT_ERROR = error

RANGE_PATH = "/v3/kv/range"
METRICS_PATH = "/metrics"  # read-only: Prometheus text, served on the client URL unless --listen-metrics-urls moves it
STATUS_PATH = "/v3/maintenance/status"  # read-only: the member's database size and revision
SNAPSHOT_PATH = "/v3/maintenance/snapshot"  # read-only: the whole backend, streamed (what `etcdctl snapshot save` reads)
RANGE_METHOD = "/etcdserverpb.KV/Range"  # the gRPC methods behind RANGE_PATH, STATUS_PATH and SNAPSHOT_PATH
STATUS_METHOD = "/etcdserverpb.Maintenance/Status"
SNAPSHOT_METHOD = "/etcdserverpb.Maintenance/Snapshot"
_REQUESTS = {RANGE_PATH: "range read", STATUS_PATH: "status request", SNAPSHOT_PATH: "snapshot request"}  # in errors
TRANSPORTS = ("auto", "grpc", "gateway")


class EtcdError(KubeUpgradeError):
    """etcd could not be read: names the endpoint and the next step."""


def prefix_range_end(prefix: bytes) -> bytes:
    """The smallest key greater than every key starting with ``prefix`` (etcd's ``--prefix``)."""
    end = bytearray(prefix)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\x00"


def _urllib3():
    """urllib3, imported at the JSON gateway's first use: the gRPC path, the default, needs none of it (an audit task's
    process took 0.055 s less CPU without it, benchmarks/bench_module_cost.py)."""
    try:
        import urllib3  # pylint: disable=import-outside-toplevel
    except ImportError:  # pragma: no cover - urllib3 comes with the kubernetes package
        raise ConfigurationError("the Python package urllib3 is required to read etcd's JSON gateway; install it on the "
                                 "host running the module") from None
    return urllib3


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


class EtcdReader:
    """Range reads, status and snapshot of the first endpoint that answers; ``revision``/``endpoint`` tell what was read."""

    def __init__(self, settings: EtcdSettings):
        self.settings = settings
        self.endpoint: Optional[str] = None
        self.revision: Optional[int] = None
        self.pages = 0
        self.transport: Optional[str] = None  # what the last scan read through: "grpc" or "gateway"
        self._gateway = None

    @property
    def _pool(self):
        """urllib3's pool for the JSON gateway, made at its first request (gRPC needs no urllib3)."""
        if self._gateway is None:
            urllib3 = _urllib3()
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
        mid_scan = self.pages > 0 and path == RANGE_PATH
        pool = self._pool
        try:
            response = pool.request("POST", endpoint + path, body=json.dumps(body).encode(),
                                    headers={"Content-Type": "application/json"}, preload_content=True)
        except _urllib3().exceptions.HTTPError as error:
            raise _transport_error(endpoint, error, self.settings, mid_scan=mid_scan) from None
        try:
            return _parse_response(endpoint, response.status, response.data, path)
        except EtcdError as error:
            if mid_scan and "compacted" not in str(error):
                raise _mid_scan_error(endpoint, str(error), error.details) from None
            raise

    def db_size(self) -> Optional[int]:
        """The size in bytes of the first answering member's database (what a copy of it needs), None if not said."""
        return self.status().get("dbSize")

    def status(self, transport: str = "auto") -> dict:
        """The first answering member's status (``Maintenance/Status``) as etcd's JSON names it: ``dbSize``,
        ``dbSizeInUse``, ``header.revision`` (ints, absent when 0) and ``version``. Through gRPC, or the JSON gateway by
        the scan's rule (``transport``, see ``_first_answer``)."""
        channel, status = self._status(transport)
        if channel is not None:
            channel.close()
        return status

    def _status(self, transport: str):
        return self._first_answer(transport, STATUS_PATH, lambda channel: channel.status(),
                                  lambda endpoint: _status_document(self._post(endpoint, {}, STATUS_PATH)))

    def quota_bytes(self) -> Optional[int]:
        """The member's space quota (``--quota-backend-bytes`` as it applies it), from the ``etcd_server_quota_backend_bytes``
        gauge of its ``/metrics`` on the client URL; None when it is not served there (``--listen-metrics-urls`` only)."""
        endpoint = self.endpoint or self.settings.endpoints[0]
        parts = urlsplit(endpoint)
        # One small GET: the standard library's HTTP client, as the apiserver layer's transport; urllib3 stays the
        # gateway's alone (see _urllib3). No proxy from the environment, as for every other request to etcd.
        if parts.scheme == "https":
            connection = http.client.HTTPSConnection(parts.hostname, parts.port or 443, timeout=self.settings.timeout,
                                                     context=_tls_context(self.settings, alpn="http/1.1"))
        else:
            connection = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=self.settings.timeout)
        try:
            connection.request("GET", METRICS_PATH)
            response = connection.getresponse()
            if response.status != 200:
                return None
            return quota_from_metrics(response.read().decode("utf-8", "replace"))
        except (OSError, http.client.HTTPException):
            return None
        finally:
            connection.close()

    def snapshot(self, write: Callable[[bytes], None], transport: str = "auto") -> dict:
        """Stream the first answering member's backend into ``write`` (etcd's own snapshot, ``Maintenance/Snapshot``: the
        same bytes as ``etcdctl snapshot save``, ending with their sha256). Returns the endpoint, the revision just
        before, bytes. The status, then the stream on the same channel (or both through the gateway, by the scan's rule);
        each wait for the next piece is bounded by the settings' timeout, the whole stream is not."""
        channel, status = self._status(transport)
        endpoint = self.endpoint
        if channel is None:
            size = self._gateway_snapshot(endpoint, write)
        else:
            try:
                size = _grpc_snapshot(endpoint, channel, write)
            finally:
                channel.close()
        return {"endpoint": endpoint, "revision_before": status["header"].get("revision", 0), "bytes": size,
                "etcd_version": status.get("version")}

    def _gateway_snapshot(self, endpoint: str, write: Callable[[bytes], None]) -> int:
        """The snapshot through the gateway: a stream of JSON lines, each a base64 piece (urllib3's read timeout bounds
        each wait)."""
        pool = self._pool
        try:
            response = pool.request("POST", endpoint + SNAPSHOT_PATH, body=b"{}", headers={"Content-Type": "application/json"},
                                    preload_content=False)
        except _urllib3().exceptions.HTTPError as error:
            # It answered its status over the same connection settings a moment ago: TLS and the certificates work, so a
            # reset or refusal now is etcd going away, not a certificate problem.
            raise _stream_closed(endpoint, 0, error) from None
        size = 0
        try:
            if response.status != 200:
                _parse_response(endpoint, response.status, response.read(), SNAPSHOT_PATH)
            pending = b""
            for chunk in response.stream(1 << 20):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    size += _snapshot_piece(endpoint, line, write)
            size += _snapshot_piece(endpoint, pending, write)
        except (_urllib3().exceptions.HTTPError, ssl.SSLError, ConnectionError) as error:
            raise _stream_closed(endpoint, size, error) from None
        finally:
            response.release_conn()
        return size

    def scan(self, options: ScanOptions) -> Iterator[Tuple[bytes, bytes]]:
        """Yield (key, value) of every key under ``options.prefix``, in key order, page by page, at one revision.

        The next page is requested (after the throttle's pause) while this one is consumed, so etcd's work and ours
        overlap; at most one request is ever in flight. gRPC first (see the module's doc), the JSON gateway where gRPC
        cannot be spoken with a member that answers; ``transport`` tells which one read.
        """
        prefix = options.prefix.encode("utf-8")
        end = prefix_range_end(prefix)
        windows = _Windows(prefix, end, options.page_size)
        throttle = _Throttle(options)
        channel, first = self._first_answer(options.transport, RANGE_PATH,
                                            lambda channel: channel.range(_range_request(prefix, end, options, 0)),
                                            lambda endpoint: _gateway_page(self._post(endpoint, _gateway_body(prefix, end, options, 0))))
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

    def _first_answer(self, transport: str, path: str, ask_grpc: Callable, ask_gateway: Callable[[str], object]):
        """(channel, answer) from the first endpoint that answers over gRPC, or (None, the JSON gateway's answer): the one
        rule of the scan, the status and the snapshot.

        ``auto``: gRPC, except against https with ``validate_certs: false`` (grpcio cannot skip the certificate check),
        which the gateway reads. An endpoint that cannot be reached at all (refused, timed out) is skipped as the gateway
        would skip it; one that answers but not in gRPC (TLS or HTTP/2 trouble: a proxy that speaks HTTP/1.1 only) is
        asked through the gateway, which reads or says why not. ``grpc`` and ``gateway`` ask through that one only.
        """
        if transport not in TRANSPORTS:
            raise ConfigurationError(f"the etcd transport must be one of {', '.join(TRANSPORTS)}, got {transport!r}")
        failures = []
        for endpoint in self.settings.endpoints:
            if transport == "grpc" or (transport == "auto" and (self.settings.validate_certs or not _https(endpoint))):
                channel = _GrpcChannel(endpoint, self.settings)
                try:
                    answer = ask_grpc(channel)
                except grpc.RpcError as error:
                    channel.close()
                    kind = _grpc_failure_kind(error)
                    if kind == "etcd":
                        failures.append(_range_error(endpoint, error.details() or "", {"endpoint": endpoint,
                                                                                       "grpc_status": error.code().name},
                                                     _REQUESTS[path]))
                        continue
                    if kind == "unreachable" or transport == "grpc":
                        failures.append(_grpc_transport_error(endpoint, error, self.settings, kind))
                        continue
                else:
                    self.endpoint = endpoint
                    return channel, answer
            try:
                answer = ask_gateway(endpoint)
            except EtcdError as refused:
                failures.append(refused)
                continue
            self.endpoint = endpoint
            return None, answer
        raise _all_failed(failures, self.settings)


class _GrpcChannel:
    """One grpcio channel to one member; ``range`` reads a page, ``send``/``receive`` one page ahead, ``status`` and
    ``snapshot`` the maintenance calls; ``unary`` makes any other call (the scratch etcd's ``KV/Txn``, ``scratch.py``)."""

    def __init__(self, endpoint: str, settings: EtcdSettings):
        if GRPC_IMPORT_ERROR is not None:
            raise ConfigurationError(f"the Python packages grpcio and protobuf are required to read etcd's gRPC API "
                                     f"({GRPC_IMPORT_ERROR}): install them on the host running the module "
                                     "(pip install grpcio protobuf, as in the collection's requirements.txt)")
        parts = urlsplit(endpoint)
        target = parts.netloc if parts.port else f"{parts.hostname}:{443 if parts.scheme == 'https' else 80}"
        # As the gateway's urllib3 pool (and etcdctl): no proxy from the environment (grpcio would follow grpc_proxy,
        # https_proxy, http_proxy), any answer size, no retries of grpcio's own.
        options = [("grpc.max_receive_message_length", -1), ("grpc.primary_user_agent", "kubeupgrade.storage"),
                   ("grpc.enable_retries", 0), ("grpc.enable_http_proxy", 0)]
        if parts.scheme == "https":
            self._channel = grpc.secure_channel(target, _grpc_credentials(settings), options=options)
        else:
            self._channel = grpc.insecure_channel(target, options=options)
        self._range = self.unary(RANGE_METHOD, rpc_pb2.RangeRequest, rpc_pb2.RangeResponse)
        self._status = self.unary(STATUS_METHOD, rpc_pb2.StatusRequest, rpc_pb2.StatusResponse)
        self._snapshot = self._channel.unary_stream(SNAPSHOT_METHOD, request_serializer=rpc_pb2.SnapshotRequest.SerializeToString,
                                                    response_deserializer=rpc_pb2.SnapshotResponse.FromString)
        self.timeout = settings.timeout
        self._ahead = None  # the worker thread that waits for the page requested ahead

    def close(self) -> None:
        if self._ahead is not None:
            self._ahead.shutdown(wait=False)
        self._channel.close()

    def unary(self, method: str, request_type, response_type):
        """grpcio's callable for the unary call ``method`` (``/package.Service/Method``) with these messages."""
        return self._channel.unary_unary(method, request_serializer=request_type.SerializeToString,
                                         response_deserializer=response_type.FromString)

    def range(self, request) -> _RangePage:
        return _page(self._range(request, timeout=self.timeout))

    def status(self) -> dict:
        answer = self._status(rpc_pb2.StatusRequest(), timeout=self.timeout)
        return _status_document(json_format.MessageToDict(answer, preserving_proto_field_name=True))

    def snapshot(self):
        """etcd's snapshot stream: grpcio's call, an iterator of ``SnapshotResponse`` that ``cancel`` ends. It has no
        deadline (a large database streams as long as it takes); ``_Idle`` bounds each wait for the next piece."""
        return self._snapshot(rpc_pb2.SnapshotRequest())

    def send(self, request):
        """The next page, asked for now and waited for on one worker thread: a blocking call there costs less than
        grpcio's ``future()``, which starts a thread of its own for every call."""
        if self._ahead is None:
            self._ahead = ThreadPoolExecutor(max_workers=1)
        return self._ahead.submit(self.range, request)

    @staticmethod
    def receive(future) -> _RangePage:
        return future.result()


def _page(response) -> _RangePage:
    return _RangePage(response.header.revision, [(kv.key, kv.value) for kv in response.kvs], response.more, response.count)


_STATUS_INTEGERS = ("dbSize", "dbSizeInUse", "leader", "raftIndex", "raftTerm", "raftAppliedIndex")
_HEADER_INTEGERS = ("cluster_id", "member_id", "revision", "raft_term")


def _status_document(document: dict) -> dict:
    """A member's status as etcd's JSON names it (the gateway's answer, or protobuf's JSON mapping of the gRPC one, both
    without the fields at 0), its integers as ints: both write 64-bit integers as strings."""
    status = dict(document)
    status["header"] = {key: int(value) if key in _HEADER_INTEGERS else value for key, value in (status.get("header") or {}).items()}
    for key in _STATUS_INTEGERS:
        if key in status:
            status[key] = int(status[key])
    return status


class _Idle:
    """Cancels a streaming call that waits more than ``seconds`` for its next message (what the gateway's read timeout
    did), with no bound on the whole stream. ``since`` is when the wait began, None while a message is handled. One
    timer at a time, started again only when it fires early, so a message costs two assignments."""

    def __init__(self, call, seconds: float, clock: Callable[[], float] = time.monotonic):
        self.call, self.seconds, self.clock = call, seconds, clock
        self.since: Optional[float] = clock()
        self.expired = False
        self._lock = threading.Lock()
        self._stopped = False
        self._timer: Optional[threading.Timer] = None
        self._arm(seconds)

    def _arm(self, delay: float) -> None:
        self._timer = threading.Timer(delay, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self) -> None:
        with self._lock:
            if self._stopped:
                return
            since = self.since
            waited = 0.0 if since is None else self.clock() - since
            if waited < self.seconds:
                self._arm(self.seconds - waited)
                return
            self.expired = True
        self.call.cancel()

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            self._timer.cancel()


def _grpc_snapshot(endpoint: str, channel: _GrpcChannel, write: Callable[[bytes], None]) -> int:
    """Each ``SnapshotResponse.blob`` into ``write``; the bytes written. The stream ending early is said as such."""
    call = channel.snapshot()
    idle = _Idle(call, channel.timeout)
    size = 0
    try:
        for piece in call:
            idle.since = None
            write(piece.blob)
            size += len(piece.blob)
            idle.since = idle.clock()
    except grpc.RpcError as error:
        code, details = error.code(), error.details() or ""
        if idle.expired:
            raise _stream_closed(endpoint, size, f"nothing received for {channel.timeout:g} s") from None
        if _grpc_failure_kind(error) == "etcd" and code != grpc.StatusCode.CANCELLED:
            raise EtcdError(f"etcd at {endpoint} failed while sending the snapshot: {details}",
                            details={"endpoint": endpoint, "bytes": size, "grpc_status": code.name}) from None
        # It answered its status on this channel a moment ago: TLS and the certificates work, so the stream ending now
        # is etcd going away, not a certificate problem.
        raise _stream_closed(endpoint, size, f"gRPC {code.name}: {details}") from None
    finally:
        idle.stop()
        call.cancel()
    return size


def _range_request(key: bytes, range_end: bytes, options: ScanOptions, revision: int):
    """A request at a pinned revision is serializable: the member it goes to answered the first page at that revision."""
    return rpc_pb2.RangeRequest(key=key, range_end=range_end, limit=options.page_size, revision=revision,
                                serializable=bool(revision), keys_only=options.keys_only)


def _https(endpoint: str) -> bool:
    return urlsplit(endpoint).scheme == "https"


class _GrpcFetch:
    """Sends a range request on the scan's gRPC channel; receives its answer (errors in etcd's words)."""

    def __init__(self, reader: EtcdReader, channel: _GrpcChannel, options: ScanOptions):
        self.reader, self.channel, self.options = reader, channel, options

    def send(self, start: bytes, range_end: bytes, revision: int):
        return self.channel.send(_range_request(start, range_end, self.options, revision))

    def receive(self, future) -> _RangePage:
        endpoint = self.reader.endpoint
        try:
            return self.channel.receive(future)
        except grpc.RpcError as error:
            details = error.details() or ""
            if "compacted" in details:
                raise _range_error(endpoint, details, {"endpoint": endpoint, "grpc_status": error.code().name}) from None
            reason = f"etcd: {details}" if _grpc_failure_kind(error) == "etcd" else f"gRPC {error.code().name}"
            raise _mid_scan_error(endpoint, reason) from None


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
    """At most ``page_size * pages_per_second`` keys per second once ``burst_pages`` pages are read: a token bucket, as
    client-go's QPS and burst, with the clock and sleep passed in.

    A page costs one token in proportion to the keys its answer brought (a full page: one; a bounded window, see
    ``_Windows``, may come back short, or empty, which cost etcd nothing to count or send). The bucket starts with
    ``burst_pages`` tokens and refills at ``pages_per_second``, holding at most ``max(burst_pages, 1)``: so a small
    store is read at etcd's pace, and a large one, past the burst, at the rate; ``burst_pages`` 0 paces from the
    first page.
    """

    def __init__(self, options: ScanOptions):
        self.options = options
        self.rate = options.pages_per_second
        self.capacity = max(float(options.burst_pages), 1.0)
        self.tokens = float(options.burst_pages)
        self.last = options.clock()

    def wait(self, keys: Optional[int] = None) -> None:
        if self.rate <= 0:
            return
        now = self.options.clock()
        self.tokens = min(self.capacity, self.tokens + (now - self.last) * self.rate)
        self.tokens -= 1.0 if keys is None else min(1.0, keys / self.options.page_size)
        if self.tokens < 0:
            self.options.sleep(-self.tokens / self.rate)
            self.tokens = 0.0
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


def _parse_response(endpoint: str, status: int, data: bytes, path: str = RANGE_PATH) -> dict:
    try:
        document = json.loads(data)
    except ValueError:
        document = None
    if status == 200 and isinstance(document, dict):
        return document
    message = (document or {}).get("message") or (document or {}).get("error") if isinstance(document, dict) else None
    message = message or data[:200].decode("utf-8", "replace").strip() or f"HTTP {status}"
    if status == 404 and "compacted" not in message:
        raise EtcdError(f"{endpoint}{path} answered 404: this is not an etcd 3.4+ client URL (check etcd_endpoints; "
                        "kubeadm's etcd listens on https://<node>:2379)", details={"endpoint": endpoint, "status": status})
    raise _range_error(endpoint, message, {"endpoint": endpoint, "status": status}, _REQUESTS[path])


def _range_error(endpoint: str, message: str, details: dict, request: str = "range read") -> EtcdError:
    """etcd answered a request with an error (the gateway's JSON or a gRPC status): the same words for both."""
    if "compacted" in message and request == "range read":
        return EtcdError(f"etcd at {endpoint} compacted the revision the audit was reading ({message}): the scan is not "
                         "complete and reports nothing; run the audit again, and if it recurs let it read faster (a higher "
                         "pages_per_second, or 0 for no throttle): the apiserver compacts every 5 minutes by default",
                         details=details)
    return EtcdError(f"etcd at {endpoint} refused the {request}: {message}", details=details)


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
    https = urlsplit(endpoint).scheme == "https"
    if not https and ("RemoteDisconnected" in text or "Connection aborted" in text or "BadStatusLine" in text):
        return EtcdError(f"etcd at {endpoint} closed the connection without an answer ({_short(text)}): etcd serving TLS on this "
                         f"port drops plain HTTP; use {endpoint.replace('http://', 'https://', 1)} with etcd_ca_cert, "
                         "etcd_client_cert and etcd_client_key (kubeadm serves only TLS on 2379)", details=details)
    urllib3 = sys.modules.get("urllib3")  # imported only by the gateway: without it, no error can be one of its own
    if isinstance(error, ssl.SSLError) or (urllib3 and isinstance(error, urllib3.exceptions.SSLError)) or "alert" in text or (
            https and (isinstance(error, ConnectionResetError)
                       or (urllib3 and isinstance(error, urllib3.exceptions.ProtocolError)))):
        hint = ("give etcd_client_cert and etcd_client_key (kubeadm: /etc/kubernetes/pki/apiserver-etcd-client.crt and .key)"
                if not settings.client_cert else "check that etcd_client_cert is signed by the CA etcd trusts for clients")
        return EtcdError(f"etcd at {endpoint} refused the TLS connection ({_short(text)}): {hint}", details=details)
    return EtcdError(f"etcd at {endpoint} is unreachable ({_short(text)}): check etcd_endpoints (kubeadm: "
                     "https://<control-plane node>:2379) and that etcd runs", details=details)


def _short(text: str) -> str:
    return text if len(text) <= 200 else text[:197] + "..."


_TLS_WORDS = ("ssl", "tls", "handshake", "certificate", "alpn", "alert", "peer")


def _grpc_failure_kind(error) -> str:
    """``etcd`` (etcd answered with an error status), ``unreachable`` (no connection, or no answer in time) or
    ``transport`` (a connection that could not speak gRPC: TLS, HTTP/2)."""
    code, details = error.code(), (error.details() or "")
    if details.startswith("etcdserver:") or code not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                                                         grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL):
        return "etcd"
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return "unreachable"
    lowered = details.lower()
    if any(word in lowered for word in _TLS_WORDS):
        return "transport"
    if any(word in lowered for word in ("connection refused", "dns resolution failed", "no route to host",
                                        "network is unreachable", "timeout occurred", "deadline exceeded")):
        return "unreachable"
    return "transport"


class _GrpcTransportFailure(Exception):
    """grpcio's error, for ``_transport_error``: its status code and details are the text matched."""


def _grpc_transport_error(endpoint: str, error, settings: EtcdSettings, kind: str) -> EtcdError:
    text = f"gRPC {error.code().name}: {error.details() or ''}"
    if kind == "unreachable":
        return EtcdError(f"etcd at {endpoint} is unreachable ({_short(text)}): check etcd_endpoints (kubeadm: "
                         "https://<control-plane node>:2379) and that etcd runs", details={"endpoint": endpoint})
    if "alpn" in text.lower():
        return EtcdError(f"etcd at {endpoint} answered, but not in gRPC ({_short(text)}): the TLS handshake did not agree "
                         "on HTTP/2 (ALPN h2); read it through its JSON gateway (transport auto or gateway)",
                         details={"endpoint": endpoint})
    if not _https(endpoint) and "handshake" not in text.lower():
        return EtcdError(f"etcd at {endpoint} closed the connection without an answer ({_short(text)}): etcd serving TLS on "
                         f"this port drops plain HTTP; use {endpoint.replace('http://', 'https://', 1)} with etcd_ca_cert, "
                         "etcd_client_cert and etcd_client_key (kubeadm serves only TLS on 2379)",
                         details={"endpoint": endpoint})
    lowered = text.lower()
    if "certificate_verify_failed" in lowered or "certificate verify failed" in lowered:
        return _transport_error(endpoint, _GrpcTransportFailure("CERTIFICATE_VERIFY_FAILED " + text), settings, False)
    return _transport_error(endpoint, _GrpcTransportFailure("alert " + text), settings, False)


def _grpc_credentials(settings: EtcdSettings):
    """The CA, client certificate and key as grpcio takes them (PEM bytes). Loaded first into an ``ssl`` context,
    which names a file that cannot be read or a key that is not the certificate's (grpcio would only fail the
    handshake); without ``etcd_ca_cert``, the system's CA bundle."""
    _tls_context(settings)
    ca = settings.ca_cert or ssl.get_default_verify_paths().cafile
    root = _read(ca) if ca and os.path.exists(ca) else None
    if settings.client_cert:
        return grpc.ssl_channel_credentials(root_certificates=root, private_key=_read(settings.client_key or settings.client_cert),
                                            certificate_chain=_read(settings.client_cert))
    return grpc.ssl_channel_credentials(root_certificates=root)


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


_QUOTA = re.compile(r"^etcd_server_quota_backend_bytes\s+([0-9.eE+]+)\s*$", re.MULTILINE)


def quota_from_metrics(text: str) -> Optional[int]:
    """``etcd_server_quota_backend_bytes`` of a metrics page (etcd 3.4+), or None."""
    match = _QUOTA.search(text)
    return int(float(match.group(1))) if match else None


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
