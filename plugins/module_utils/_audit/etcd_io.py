# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Paged, read-only range reads of etcd's v3 API under a prefix: the audit's only I/O.

It speaks etcd's JSON gateway (``POST /v3/kv/range``, served by etcd 3.4 and later on the client
port) through urllib3, the HTTP stack the collection already ships with, instead of a gRPC client
or ``etcd3gw`` (which adds a dependency tree for the one call needed). Each page asks for at most
``page_size`` keys in ``[key, range_end)``, continues from the last key + ``\\x00``, and pins the
revision of the first page, so the whole scan is one consistent snapshot that never blocks writers.
Only range, status and snapshot (read) requests are ever sent: nothing here can write to etcd.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Iterator, List, Optional, Tuple
from urllib.parse import urlsplit

from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ConfigurationError, KubeUpgradeError

try:
    import urllib3

    HAS_URLLIB3 = True
except ImportError:  # pragma: no cover - urllib3 comes with the kubernetes package
    HAS_URLLIB3 = False

RANGE_PATH = "/v3/kv/range"
STATUS_PATH = "/v3/maintenance/status"  # read-only: the member's database size and revision
SNAPSHOT_PATH = "/v3/maintenance/snapshot"  # read-only: the whole backend, streamed (what `etcdctl snapshot save` reads)


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
    """``pages_per_second`` 0 = no throttle; ``keys_only`` yields empty values (etcd sends no values)."""

    prefix: str = "/registry/"
    page_size: int = 500
    pages_per_second: float = 0.0
    keys_only: bool = False
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
        if not HAS_URLLIB3:
            raise ConfigurationError("the Python package urllib3 is required to read etcd; install it on the host running the module")
        self.settings = settings
        self.endpoint: Optional[str] = None
        self.revision: Optional[int] = None
        self.pages = 0
        kwargs = {"timeout": urllib3.Timeout(connect=min(10.0, settings.timeout), read=settings.timeout),
                  "retries": False, "maxsize": 1}
        if any(urlsplit(url).scheme == "https" for url in settings.endpoints):
            kwargs["cert_reqs"] = "CERT_REQUIRED" if settings.validate_certs else "CERT_NONE"
            if settings.ca_cert:
                kwargs["ca_certs"] = settings.ca_cert
            if settings.client_cert:
                kwargs["cert_file"] = settings.client_cert
                kwargs["key_file"] = settings.client_key
        self._pool = urllib3.PoolManager(**kwargs)
        if not settings.validate_certs:
            urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)

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
                raise EtcdError(f"etcd at {endpoint} stopped answering in the middle of the scan ({error}): the audit is "
                                "incomplete and reports nothing; check etcd's health and run the audit again",
                                details=error.details) from None
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
            raise _transport_error(endpoint, error, self.settings, mid_scan=False) from None
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
        except urllib3.exceptions.HTTPError as error:
            raise EtcdError(f"etcd at {endpoint} stopped sending the snapshot after {size} bytes ({type(error).__name__}): "
                            "the file is incomplete; take it again", details={"endpoint": endpoint}) from None
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
        if len(failures) == 1:
            raise failures[0]
        raise EtcdError("no etcd endpoint could be read: " + "; ".join(str(f) for f in failures),
                        details={"endpoints": list(self.settings.endpoints)})

    def scan(self, options: ScanOptions) -> Iterator[Tuple[bytes, bytes]]:
        """Yield (key, value) of every key under ``options.prefix``, in key order, page by page.

        The next page is requested (after the throttle's pause) while this one is decoded, so etcd's work and
        ours overlap; at most one request is ever in flight.
        """
        prefix = options.prefix.encode("utf-8")
        body = {"key": _b64(prefix), "range_end": _b64(prefix_range_end(prefix)), "limit": options.page_size}
        if options.keys_only:
            body["keys_only"] = True
        throttle = _Throttle(options)
        page = self._first_page(body)
        self.revision = int(page.get("header", {}).get("revision", 0))
        body["revision"] = self.revision
        decode = binascii.a2b_base64
        executor = ThreadPoolExecutor(max_workers=1)
        try:
            while True:
                self.pages += 1
                kvs = page.get("kvs") or []
                following = None
                if page.get("more") and kvs:
                    body["key"] = _b64(decode(kvs[-1]["key"]) + b"\x00")
                    throttle.wait()
                    following = executor.submit(self._post, self.endpoint, dict(body))
                for kv in kvs:
                    yield decode(kv["key"]), decode(kv.get("value", ""))
                if following is None:
                    return
                page = following.result()
        finally:
            executor.shutdown(wait=False)


class _Throttle:
    """At most ``pages_per_second`` requests per second, with the clock and sleep passed in."""

    def __init__(self, options: ScanOptions):
        self.options = options
        self.interval = 1.0 / options.pages_per_second if options.pages_per_second > 0 else 0.0
        self.last = options.clock()

    def wait(self) -> None:
        if not self.interval:
            return
        pause = self.last + self.interval - self.options.clock()
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


def _parse_response(endpoint: str, status: int, data: bytes) -> dict:
    try:
        document = json.loads(data)
    except ValueError:
        document = None
    if status == 200 and isinstance(document, dict):
        return document
    message = (document or {}).get("message") or (document or {}).get("error") if isinstance(document, dict) else None
    message = message or data[:200].decode("utf-8", "replace").strip() or f"HTTP {status}"
    if "compacted" in message:
        raise EtcdError(f"etcd at {endpoint} compacted the revision the audit was reading ({message}): the scan is not "
                        "complete; run the audit again, with a larger page_size or fewer pages_per_second limits if it recurs",
                        details={"endpoint": endpoint, "status": status})
    if status == 404:
        raise EtcdError(f"{endpoint}{RANGE_PATH} answered 404: this is not an etcd 3.4+ client URL (check etcd_endpoints; "
                        "kubeadm's etcd listens on https://<node>:2379)", details={"endpoint": endpoint, "status": status})
    raise EtcdError(f"etcd at {endpoint} refused the range read: {message}", details={"endpoint": endpoint, "status": status})


def _transport_error(endpoint: str, error, settings: EtcdSettings, mid_scan: bool) -> EtcdError:
    text = str(error)
    details = {"endpoint": endpoint}
    if mid_scan:
        return EtcdError(f"etcd at {endpoint} stopped answering in the middle of the scan ({type(error).__name__}): the audit is "
                         "incomplete and reports nothing; check etcd's health and run the audit again", details=details)
    if "CERTIFICATE_VERIFY_FAILED" in text or "certificate verify failed" in text:
        return EtcdError(f"etcd at {endpoint}: its TLS certificate is not signed by etcd_ca_cert ({settings.ca_cert or 'system CAs'}); "
                         "give etcd's CA (kubeadm: /etc/kubernetes/pki/etcd/ca.crt)", details=details)
    if isinstance(error, urllib3.exceptions.SSLError) or "alert" in text or (
            isinstance(error, urllib3.exceptions.ProtocolError) and urlsplit(endpoint).scheme == "https"):
        hint = ("give etcd_client_cert and etcd_client_key (kubeadm: /etc/kubernetes/pki/apiserver-etcd-client.crt and .key)"
                if not settings.client_cert else "check that etcd_client_cert is signed by the CA etcd trusts for clients")
        return EtcdError(f"etcd at {endpoint} refused the TLS connection ({_short(text)}): {hint}", details=details)
    return EtcdError(f"etcd at {endpoint} is unreachable ({_short(text)}): check etcd_endpoints (kubeadm: "
                     "https://<control-plane node>:2379) and that etcd runs", details=details)


def _short(text: str) -> str:
    return text if len(text) <= 200 else text[:197] + "..."
