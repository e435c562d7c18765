# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The client-side storage migrator: works on any cluster, needs only ``list`` and ``update`` (or ``patch``).

As kube-storage-version-migrator's ``pkg/migrator`` core loop: every object of a resource is listed in
chunks (``limit``/``continue``) and written back, which makes the apiserver re-encode it in the current
storage version. Two writes (``ClientOptions.write``):

- ``put`` (the default, as kube-storage-version-migrator): LIST full objects and PUT each object back
  exactly as read: as protobuf where the apiserver serves it (every built-in; ``_http/protobuf.py``), so the PUT
  carries the very bytes the apiserver served, which no client re-encodes; a custom resource, served as JSON only, as
  JSON. Its ``metadata.uid`` and ``metadata.resourceVersion`` are the preconditions: an object
  changed since it was read gets 409, and so does one deleted (and one deleted and created again), because
  the uid no longer matches: a real apiserver answers 409 ``Precondition failed: UID in precondition``
  even for resources that allow create-on-update (Leases, Endpoints, Events, LimitRanges). An item
  without a uid or resourceVersion is never written (without the uid such a PUT re-creates a deleted
  Lease): it is a failed object. The cheapest write a real apiserver serves for an unchanged object.
- ``apply``: LIST metadata only (``as=PartialObjectMetadataList``) and send a server-side apply carrying
  only identity and ``metadata.uid``/``metadata.resourceVersion`` as preconditions (like the in-tree
  controller). Needs ``patch`` instead of ``update``; a ``put`` migration whose PUT RBAC forbids (``cannot
  update resource``) goes on with ``apply`` for that resource (``progress.write_fallback`` says why).

Read as protobuf, an object is written back with every byte as served, untouched. Read as JSON (a custom resource; a built-in
when protobuf cannot be read: through a proxy that answers JSON only, or without the protobuf package), some objects
cannot be written back as read: the JSON the apiserver serves is not what it stores. A
ControllerRevision's ``data`` (a ``runtime.RawExtension``) is stored byte for byte as the client sent it, and a client
that sent it with spaces (Python's ``json.dumps``: the official Python client, Ansible's Kubernetes modules) gets it
back compacted (Go's encoding/json compacts what a ``MarshalJSON`` returns), so a PUT of it as read changes ``data``,
which ``ValidateControllerRevisionUpdate`` (pkg/apis/apps/validation) refuses: ``422 ... data: field is immutable``.
An object refused that way is written back as stored instead (``progress.objects_written_as_stored`` counts them,
``progress.write_as_stored`` says so): a GET as protobuf, which carries every byte as stored, and a PUT of those very
bytes. Nothing is parsed; the uid and resourceVersion travel in the bytes, so the preconditions hold as for ``put``.
Every built-in serves protobuf; a custom resource does not, but its JSON round trip has no such problem. Measured on
real kube-apiservers 1.28, 1.32 and 1.36: the object is rewritten (a new etcd revision) with its content unchanged,
byte for byte in etcd, where the JSON PUT, a merge patch ``{}`` and a strategic merge patch ``{}`` are all refused.
The identity-only apply is accepted too, but on an object without managedFields (one written before server-side
apply) it adds a ``before-first-apply`` entry: a change.

Either way the content of an object never changes: the apiserver finds it unchanged (only its storage
encoding may differ), and nothing is ever re-created. A 409 means someone rewrote or deleted it after we
read it (done: that write stored it in the current version, or it is gone), a 404 that it is gone (done).

Transient failures are retried within a time budget, honouring ``Retry-After``. etcd's space alarm (a 500 ``database
space exceeded``: the cluster is read-only) and rejected credentials (401) are answers no retry and no other object
gets past: every worker stops at once, with the recovery (``halt``), not a list of failed objects. An object that is
refused (admission, validation, RBAC) or keeps failing is recorded by name and the resource goes on,
until more than ``max_failures`` objects failed. A decode failure on LIST stops the resource (every
LIST covering the object fails), naming the namespaces it is in. Nothing waits past the task's deadline:
not the rate limiter, not a retry, not a request. After each finished chunk a checkpoint is saved
through a ``CheckpointStore``. Memory holds at most two chunks (the one being written and the next,
listed meanwhile), whatever the number of objects; with ``put`` a chunk also stays near ``chunk_bytes``:
the first LIST asks for at most ``FIRST_CHUNK`` objects, the next ones for as many as fit.
"""

from __future__ import annotations

import functools
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Callable, List, Optional, Tuple

from ansible_collections.kubeupgrade.storage.plugins.module_utils._http import diagnosis, paths, protobuf
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.client import is_missing, none_if_missing
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.poll import Deadline, DeadlineExceeded
from ansible_collections.kubeupgrade.storage.plugins.module_utils._rewrite import checkpoint as cp
from ansible_collections.kubeupgrade.storage.plugins.module_utils._rewrite.ratelimit import RateLimiter
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import (
    ApiError,
    EndpointUnreachable,
    MigrationError,
    is_decode_failure,
)
from ansible_collections.kubeupgrade.storage.plugins.module_utils.resources import GroupResource
from ansible_collections.kubeupgrade.storage.plugins.module_utils.retries import (
    SPACE_RECOVERY,
    RetryClock,
    RetryPolicy,
    call_with_retries,
    etcd_out_of_space,
    retry_bound,
)

FIELD_MANAGER = "kubeupgrade-storage-migrator"
METADATA_OBJECT = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
APPLY_PATCH = "application/apply-patch+yaml"
FULL_JSON = "application/json"
PROTOBUF = protobuf.PROTOBUF
PROTOBUF_MAGIC = protobuf.MAGIC
# write: put reads whole objects as protobuf where the apiserver serves it (every built-in), else as JSON.
FULL_PROTOBUF_OR_JSON = f"{PROTOBUF}, {FULL_JSON}"
ENCODING_PROTOBUF, ENCODING_JSON = "protobuf", "json"
WRITE_PUT = "put"
WRITE_APPLY = "apply"
WRITES = (WRITE_PUT, WRITE_APPLY)
WRITE_AS_STORED = "protobuf"  # the write of an object refused as a change when written back as read (see above)
IMMUTABLE = "field is immutable"  # apimachinery's validation.FieldImmutableErrorMsg
_WRITTEN = {WRITE_PUT: "PUT back as read", WRITE_APPLY: "written with the identity-only apply"}
FIELD_MANAGER_QUERY = {"fieldManager": FIELD_MANAGER}
# With write: put every chunk holds whole objects (a Secret may be 1 MiB): the first LIST asks for at most
# FIRST_CHUNK objects, the following ones for as many as the previous chunk's bytes per object fit in chunk_bytes.
FIRST_CHUNK = 50
CHUNK_BYTES = 16 * 1024 * 1024
MAX_LIST_RESTARTS = 3
MAX_EXPIRED_TOKENS = 20
MAX_NAMESPACE_PROBES = 500
MAX_REPORTED_FAILURES = 100
# client-go retries a 429 ten times; an apiserver restart behind a load balancer answers 503 for several
# seconds. Attempts are many; the time budget (and the task's deadline) is what bounds a retry. The runner's
# bookkeeping requests (Lease, CRD, StorageState) go through the same policy and deadline.
MIGRATION_RETRY = RetryPolicy(attempts=40, base_delay=0.25, max_delay=8.0, budget=90.0)


class DecodeFailure(MigrationError):
    """An object stored in a version the apiserver cannot decode: retrying never helps."""


class Stopped(MigrationError):
    """The run was told to stop (its playbook is gone, its Lease was lost, the apiservers stopped agreeing)."""


class Halted(MigrationError):
    """An answer that no retry and no other object can get past (etcd's space alarm, rejected credentials): every
    worker stops at once, and the message is that cause and its recovery, not a list of failed objects."""


def halt(error: ApiError, name: str, done: int) -> Optional[Halted]:
    """The stop ``error`` calls for when no retry and no other object can get past it, else None."""
    if etcd_out_of_space(error):
        return Halted(
            f"Migration of {name} stopped at once after {done} objects: etcd's space alarm (NOSPACE) is raised: "
            f"{describe_failure(error)}. {SPACE_RECOVERY} Nothing was lost: every object not rewritten yet is stored "
            "as it was, and the one refused was not written. Re-run once `etcdctl alarm list` shows no alarm.",
            details={"resource": name, "cause": "etcd_space_exceeded", "status": error.status,
                     "message": (error.api_message or "")[:500], "objects_migrated": done})
    if not isinstance(error, EndpointUnreachable) and (error.problem == diagnosis.CREDENTIALS or error.status == 401):
        where = error.endpoint or "the apiserver"
        return Halted(
            f"Migration of {name} stopped at once after {done} objects: {describe_failure(error)}. The credentials "
            f"stopped working during the run (a token revoked or expired, its ServiceAccount deleted). Next step: "
            f"{diagnosis.step(diagnosis.CREDENTIALS, where)}, then re-run; nothing was written since.",
            details={"resource": name, "cause": diagnosis.CREDENTIALS, "status": error.status,
                     "endpoint": error.endpoint, "objects_migrated": done})
    return None


@dataclass
class ResourceTarget:
    """What to migrate: the resource and the served version to read and write it through."""

    group_resource: GroupResource
    version: str
    namespaced: bool = True
    kind: str = ""
    storage_hash: str = ""  # the hash the migration targets; a checkpoint for another hash is discarded

    @property
    def name(self) -> str:
        return self.group_resource.name

    @property
    def api_version(self) -> str:
        return self.group_resource.group_version(self.version)

    @property
    def list_path(self) -> str:
        return self.namespace_path(None)

    def namespace_path(self, namespace: Optional[str]) -> str:
        """The LIST of the resource in ``namespace`` (None: across namespaces)."""
        gr = self.group_resource
        return paths.resource_collection(gr.group, self.version, gr.resource, namespace)

    def object_path(self, namespace: Optional[str], name: str) -> str:
        gr = self.group_resource
        return paths.resource_object(gr.group, self.version, gr.resource, name, namespace)


@dataclass
class ClientOptions:
    chunk_size: int = 500
    concurrency: int = 4
    qps: float = 0.0
    max_failures: int = 10
    policy: RetryPolicy = field(default_factory=lambda: MIGRATION_RETRY)
    write: str = WRITE_PUT  # put: full objects PUT back as read; apply: metadata-only LIST, identity-only apply
    chunk_bytes: int = CHUNK_BYTES  # write: put only: about this many bytes of objects per chunk


@dataclass
class RunIdentity:
    """Who runs the migration, and against which cluster: written into checkpoints (and Lease holders)."""

    run_id: str
    cluster: str


@dataclass
class Hooks:
    """What the runner plugs in: the agreement gate, a stop signal, a progress sink."""

    gate: Optional[Callable[[], None]] = None
    gate_interval: float = 5.0
    should_stop: Optional[Callable[[], Optional[str]]] = None  # returns why to stop, or None
    on_progress: Optional[Callable[[object], None]] = None


@dataclass
class ClientProgress:
    """Counters of one resource's client-side migration, returned in the module result."""

    resource: str
    objects_listed: int = 0
    objects_written: int = 0
    conflicts: int = 0  # 409: rewritten by someone else since we read it
    gone: int = 0  # 404: deleted since we read it
    failed: int = 0
    chunks: int = 0
    objects_remaining: Optional[int] = None  # remainingItemCount of the last chunk, when the server said
    retries: int = 0
    expired_tokens: int = 0
    list_restarts: int = 0
    resumed: bool = False
    verification_pass: bool = False
    verified: bool = False  # a full pass from the first object, by this run, without a failed object
    checkpoint: Optional[str] = None
    checkpoint_discarded: str = ""
    write: str = ""  # the write used: put or apply (apply after a fallback)
    write_fallback: str = ""  # why a put migration went on with apply (RBAC forbids update), empty otherwise
    encoding: str = ""  # write: put: how objects were read and written back: protobuf (their bytes as served) or json
    encoding_fallback: str = ""  # why a resource served as protobuf was read as JSON after all, empty otherwise
    objects_written_as_stored: int = 0  # of objects_written: refused as a change as read, written as stored (protobuf)
    write_as_stored: str = ""  # why some objects were written as stored, and which write that is; empty otherwise
    bytes_to_rewrite: Optional[int] = None  # write: put: the first chunk's bytes per object times the objects listed
    failures: List[dict] = field(default_factory=list)

    @property
    def objects_migrated(self) -> int:
        return self.objects_written + self.conflicts + self.gone

    def to_dict(self) -> dict:
        result = asdict(self)
        result["objects_migrated"] = self.objects_migrated
        return result


@dataclass
class FailureStreak:
    """The requests that failed in a row, for a timeout's message: only transient failures (5xx, 429, no answer)
    count; any answer, successful or not, ends the streak."""

    started: Optional[float] = None  # on the task's clock
    since: Optional[float] = None  # wall-clock time of the first failure of the streak
    attempts: int = 0
    last: Optional[ApiError] = None

    def note(self, error: Optional[ApiError], now: float) -> None:
        if error is None:
            self.started, self.since, self.attempts, self.last = None, None, 0, None
            return
        if self.last is None:
            self.started, self.since = now, time.time()
        self.attempts += 1
        self.last = error

    def describe(self, now: float) -> str:
        """``every request since 12:00:03 UTC (the last 9s) failed; last: HTTP 500 ... (12 attempts)``, or empty."""
        if self.last is None:
            return ""
        stamp = time.strftime("%H:%M:%S UTC", time.gmtime(self.since))
        return (f"every request since {stamp} (the last {max(0.0, now - self.started):.0f}s) failed; last: "
                f"{describe_failure(self.last)} ({self.attempts} attempt{'s' if self.attempts != 1 else ''})")

    def in_short(self, now: float) -> str:
        """The same for a progress line: how many tries failed for how long, and what did not answer; or empty."""
        if self.last is None:
            return ""
        return (f"{self.attempts} tries failed in the last {max(0.0, now - self.started):.0f}s, the last "
                f"{self.last.method} {self.last.path}: {what_did_not_answer(self.last)}")

    def details(self) -> dict:
        if self.last is None:
            return {}
        return {"failed_attempts": self.attempts, "last_error": {
            "status": self.last.status, "reason": self.last.reason, "endpoint": self.last.endpoint,
            "method": self.last.method, "path": self.last.path, "message": (self.last.api_message or str(self.last))[:500]}}


def what_did_not_answer(error: ApiError) -> str:
    """What a failed request observed did not answer: etcd behind the apiserver, the apiserver, the network."""
    message = str(error) if error.status is None else (error.api_message or error.reason or "")
    return diagnosis.unanswered(error.status, message, error.endpoint or "")


def describe_failure(error: ApiError) -> str:
    """One failed request in a line: ``HTTP 500 InternalError from https://...:6443 (GET /api/v1/secrets): <message>``."""
    if isinstance(error, EndpointUnreachable) or error.status is None:
        return f"no answer from {error.endpoint or 'the apiserver'} ({error.method} {error.path}): {str(error)[:300]}"
    reason = f" {error.reason}" if error.reason else ""
    text = f"HTTP {error.status}{reason} from {error.endpoint or 'the apiserver'} ({error.method} {error.path})"
    return text + (f": {error.api_message[:300]}" if error.api_message else "")


def _causes(error: ApiError) -> str:
    """The causes of a refusal in a line (``data: field is immutable``; the value, often a byte dump, left out), else
    its message."""
    body = error.body if isinstance(error.body, dict) else {}
    texts = []
    for cause in (body.get("details") or {}).get("causes") or []:
        if isinstance(cause, dict):
            message = IMMUTABLE if IMMUTABLE in str(cause.get("message")) else str(cause.get("message"))
            texts.append(f"{cause['field']}: {message}" if cause.get("field") else message)
    return ("; ".join(texts) or error.api_message or str(error))[:300]


def _object_label(target: ResourceTarget, item: dict) -> str:
    meta = item.get("metadata") or {}
    where = f"{meta.get('namespace')}/{meta.get('name')}" if meta.get("namespace") else str(meta.get("name"))
    return f"{target.name} {where}"


def apply_body(target: ResourceTarget, item: dict) -> dict:
    """Identity and preconditions only: the apiserver re-encodes the object and changes nothing else."""
    meta = item.get("metadata") or {}
    metadata = {"name": meta.get("name"), "uid": meta.get("uid"), "resourceVersion": meta.get("resourceVersion")}
    if meta.get("namespace"):
        metadata["namespace"] = meta["namespace"]
    return {"apiVersion": target.api_version, "kind": target.kind, "metadata": metadata}


def put_body(target: ResourceTarget, item: dict) -> Tuple[bytes, str]:
    """The object exactly as read, as the body of its PUT, and that body's content type: an object read as protobuf
    is its very bytes (``protobuf.StoredItem``). Items of a LIST carry no apiVersion and kind: they are the LIST's own
    (the version listed through), as kube-storage-version-migrator sets them."""
    if isinstance(item, protobuf.StoredItem):
        item.api_version, item.kind = item.api_version or target.api_version, item.kind or target.kind
        return item.put_body(), PROTOBUF
    if not item.get("apiVersion"):
        item["apiVersion"] = target.api_version
    if not item.get("kind") and target.kind:
        item["kind"] = target.kind
    return json.dumps(item, separators=(",", ":")).encode("utf-8"), FULL_JSON


def refused_as_a_change(error: ApiError) -> bool:
    """The apiserver refused an object written back as read as a change to a field that may not change (422 with a
    ``field is immutable`` cause): what it served is not what it stores, so the round trip through JSON changed it."""
    if error.status != 422 or isinstance(error, EndpointUnreachable):
        return False
    body = error.body if isinstance(error.body, dict) else {}
    causes = [c for c in (body.get("details") or {}).get("causes") or [] if isinstance(c, dict)]
    if causes:
        return any(IMMUTABLE in str(cause.get("message") or "") for cause in causes)
    return IMMUTABLE in (error.api_message or "")


def kubectl_get(target: ResourceTarget, item: dict) -> str:
    """The kubectl command that reads the object as the apiserver serves it."""
    meta = item.get("metadata") or {}
    where = f" -n {meta['namespace']}" if meta.get("namespace") else ""
    return f"kubectl get {target.name}{where} {meta.get('name')} -o json"


def missing_preconditions(item: dict) -> str:
    """What the object as read lacks to be written safely (its uid and resourceVersion), empty when nothing."""
    meta = item.get("metadata") or {}
    return " and ".join(key for key in ("uid", "resourceVersion") if not meta.get(key))


def rbac_forbids(error: ApiError, verb: str) -> bool:
    """The apiserver's authorizer refused ``verb`` (not an admission policy or webhook, which also answer 403)."""
    return error.status == 403 and f"cannot {verb} resource" in (error.api_message or "")


class ClientMigrator:
    """Rewrites every object of one resource through one apiserver (the connection's host)."""

    def __init__(self, client, target: ResourceTarget, options: Optional[ClientOptions] = None,
                 identity: Optional[RunIdentity] = None, store: Optional[cp.CheckpointStore] = None):
        self.options = options or ClientOptions()
        self.client = _client_with_pool(client, self.options.concurrency)
        self.target = target
        self.identity = identity or RunIdentity("", getattr(client, "endpoint", ""))
        self.store = store
        self.deadline = Deadline(None)
        self.hooks = Hooks()
        self.sleep = time.sleep
        self.limiter = RateLimiter(self.options.qps, self.deadline, sleep=self.sleep)
        if self.options.write not in WRITES:
            raise ValueError(f"write must be one of {', '.join(WRITES)}, got {self.options.write!r}")
        self.progress = ClientProgress(resource=target.name, write=self.options.write)
        self._mode = self.options.write  # becomes apply when RBAC forbids the PUT (see _fall_back)
        self._limit = max(1, int(self.options.chunk_size))
        if self._mode == WRITE_PUT:
            self._limit = min(self._limit, FIRST_CHUNK)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._timed_out = threading.Event()  # a write gave up for the deadline: its chunk is not finished
        self._halted: Optional[Halted] = None  # the first answer no retry nor other object gets past (see halt)
        self._streak = FailureStreak()

    def configure(self, deadline: Optional[Deadline] = None, hooks: Optional[Hooks] = None, sleep=None) -> ClientMigrator:
        """Plug in the task's deadline, the runner's hooks and (for tests) the sleep function."""
        self.deadline = deadline or self.deadline
        self.hooks = hooks or self.hooks
        self.sleep = sleep or self.sleep
        self.limiter = RateLimiter(self.options.qps, self.deadline, sleep=self.sleep)
        return self

    # -- requests ----------------------------------------------------------------------------------------------
    def _timing(self) -> RetryClock:
        return RetryClock(sleep=self.sleep, deadline=self.deadline)

    def _request_timeout(self) -> Optional[float]:
        remaining = self.deadline.remaining()
        if remaining is None:
            return None
        base = float(getattr(getattr(self.client, "settings", None), "timeout", 30.0) or 30.0)
        return max(0.5, min(base, remaining))

    def _count_retry(self, _error, _attempt, _wait) -> None:
        with self._lock:
            self.progress.retries += 1

    def _attempt(self, fn):
        """One try of a request, its outcome noted in the failure streak (what a timeout's message names)."""
        try:
            result = fn()
        except ApiError as error:
            with self._lock:
                self._streak.note(error if self.options.policy.should_retry(error) else None, self.deadline.clock())
            raise
        with self._lock:
            self._streak.note(None, self.deadline.clock())
        return result

    def _call(self, fn):
        timing = self._timing()
        try:
            return call_with_retries(functools.partial(self._attempt, fn), self.options.policy,
                                     on_retry=self._count_retry, timing=timing)
        except ApiError:
            if timing.deadline_hit or self.deadline.expired():
                raise self._timeout() from None
            raise

    def stall_reason(self) -> str:
        """Why no object is being written, as observed, for a stalled progress line: the failures in a row, else
        requests still waiting for their answer."""
        with self._lock:
            failing = self._streak.in_short(self.deadline.clock())
        where = getattr(self.client, "endpoint", None) or "the apiserver"
        return failing or f"no answer yet from {where} (waiting on the apiserver, or on etcd behind it)"

    # -- LIST --------------------------------------------------------------------------------------------------
    def _list_once(self, token: Optional[str]) -> dict:
        self.limiter.acquire()
        if self.deadline.expired():
            raise self._timeout()
        query = {"limit": self._limit}
        if token:
            query["continue"] = token
        if self._mode != WRITE_PUT:
            return self.client.request("GET", self.target.list_path, query=query, accept=METADATA_LIST,
                                       timeout=self._request_timeout()).json()
        response, page = self._get_whole(self.target.list_path, query, protobuf.list_page)
        self._fit_chunk(len(response.data or b""), len(page.get("items") or ()))
        if not token and self.progress.bytes_to_rewrite is None:
            self._estimate(len(response.data or b""), page)
        return page

    def _get_whole(self, path: str, query: Optional[dict], decode):
        """(response, page or object) of a GET of whole objects: as protobuf where the apiserver serves it (every
        built-in: the bytes as served, which a PUT sends back untouched), else JSON; the encoding is noted in the
        progress. A protobuf answer that does not decode as a Kubernetes list or object, or an apiserver that fails to
        encode one (an aggregated API whose types have no protobuf), turns the resource to JSON from then on."""
        accept = FULL_JSON if self.progress.encoding_fallback else _whole_objects()  # JSON from a fallback on
        try:
            response = self.client.request("GET", path, query=query, accept=accept, timeout=self._request_timeout())
        except ApiError as error:
            if accept == FULL_JSON or not _no_protobuf_encoding(error):
                raise
            return self._get_as_json(path, query, describe_failure(error))
        if not protobuf.served(response):
            self._note_encoding(ENCODING_JSON)
            return response, response.json()
        try:
            found = decode(response.data, self.target.kind)
        except protobuf.NotDecodable as error:
            return self._get_as_json(path, query, f"GET {path} answered {PROTOBUF} that could not be read: {error}")
        self._note_encoding(ENCODING_PROTOBUF)
        return response, found

    def _get_as_json(self, path: str, query: Optional[dict], why: str):
        """The same GET as JSON, and every later one of this resource: ``why`` goes in ``progress.encoding_fallback``."""
        with self._lock:
            self.progress.encoding_fallback = self.progress.encoding_fallback or (
                f"{why[:300]}: read and written back as JSON instead")
        self.limiter.acquire()
        response = self.client.request("GET", path, query=query, accept=FULL_JSON, timeout=self._request_timeout())
        self._note_encoding(ENCODING_JSON)
        return response, response.json()

    def _note_encoding(self, encoding: str) -> None:
        with self._lock:
            if self.progress.encoding != ENCODING_JSON:  # json once any object was read so
                self.progress.encoding = encoding

    def _estimate(self, size: int, page: dict) -> None:
        """About what the pass adds to etcd until its next compaction: every rewrite keeps the old value until then."""
        count = len(page.get("items") or ())
        if count:
            total = count + int((page.get("metadata") or {}).get("remainingItemCount") or 0)
            self.progress.bytes_to_rewrite = size * total // count

    def _fit_chunk(self, size: int, count: int) -> None:
        """The next LIST's limit: as many objects as the last chunk's bytes per object fit in ``chunk_bytes``."""
        if count:
            fit = int(self.options.chunk_bytes * count // max(1, size))
            self._limit = max(1, min(int(self.options.chunk_size), fit))

    def _list(self, token: Optional[str]) -> dict:
        """One chunk, surviving transient failures and expired tokens (410: server's fallback token, else restart)."""
        while True:
            try:
                return self._call(functools.partial(self._list_once, token))
            except DeadlineExceeded:
                raise
            except ApiError as error:
                if error.status != 410 or not token:
                    raise self._list_error(error, token) from None
                token = self._after_expired(error, token)

    def _after_expired(self, error: ApiError, token: str) -> Optional[str]:
        fallback = ((error.body or {}).get("metadata") or {}).get("continue") if isinstance(error.body, dict) else None
        with self._lock:
            self.progress.expired_tokens += 1
        if fallback and fallback != token and self.progress.expired_tokens <= MAX_EXPIRED_TOKENS:
            return fallback
        if self.progress.list_restarts >= MAX_LIST_RESTARTS:
            raise MigrationError(
                f"Migration of {self.target.name} stopped: the list kept expiring (HTTP 410) after "
                f"{MAX_LIST_RESTARTS} restarts; the apiserver compacts faster than the migration lists. "
                "Raise etcd's compaction interval or chunk_size, then re-run.", details={"resource": self.target.name})
        with self._lock:
            self.progress.list_restarts += 1
        return None

    def _list_error(self, error: ApiError, token: Optional[str]) -> MigrationError:
        where = f"apiserver {error.endpoint or getattr(self.client, 'endpoint', '?')}"
        done = self.progress.objects_migrated
        stop = halt(error, self.target.name, done)
        if stop is not None:
            return stop
        if is_decode_failure(error.status, error.api_message):
            namespaces = self._locate_undecodable() if self.target.namespaced else []
            located = (f" in namespace(s) {', '.join(namespaces)}" if namespaces else "")
            return DecodeFailure(
                f"Migration of {self.target.name} stopped: {where} cannot decode an object of {self.target.name}"
                f"{located} (LIST failed with HTTP 500: {error.api_message}). The object is stored in etcd in a "
                "version this apiserver cannot read, so no API call can read, rewrite or delete it, and every LIST "
                f"covering it fails. {done} objects were migrated before. Next step: find the key "
                f"(etcdctl get --prefix --keys-only /registry/...{'/' + namespaces[0] if namespaces else ''}), restore "
                "it with an apiserver release that can decode it or delete the key, then re-run. Not retried.",
                details={"resource": self.target.name, "endpoint": error.endpoint, "namespaces": namespaces,
                         "status": error.status, "message": error.api_message, "objects_migrated": done})
        cause = "the apiserver refused"
        if isinstance(error, EndpointUnreachable) or error.status in self.options.policy.retry_statuses:
            cause = f"gave up after retrying ({retry_bound(self.options.policy)})"
        return MigrationError(
            f"Migration of {self.target.name} stopped: listing it on {where} failed ({cause}): {error}",
            details={"resource": self.target.name, "status": error.status, "reason": error.reason,
                     "objects_migrated": done, "continue": token})

    def _locate_undecodable(self) -> List[str]:
        """Namespaces whose LIST fails to decode: LISTs of clean namespaces still work."""
        found: List[str] = []
        try:
            page = self.client.request("GET", paths.NAMESPACE_COLLECTION, query={"limit": MAX_NAMESPACE_PROBES},
                                       accept=METADATA_LIST, timeout=self._request_timeout()).json()
            for item in page.get("items") or []:
                namespace = (item.get("metadata") or {}).get("name")
                try:
                    self.client.request("GET", self.target.namespace_path(namespace), query={"limit": 1}, accept=METADATA_LIST,
                                        timeout=self._request_timeout())
                except ApiError as error:
                    if is_decode_failure(error.status, error.api_message):
                        found.append(namespace)
        except ApiError:
            pass  # locating is a courtesy; the failure itself is already known
        return found

    # -- writes ------------------------------------------------------------------------------------------------
    def _send(self, mode: str, path: str, body) -> None:
        self.limiter.acquire()
        if mode == WRITE_PUT:
            data, content_type = body
            self.client.request("PUT", path, body=data, content_type=content_type, query=FIELD_MANAGER_QUERY,
                                timeout=self._request_timeout())
        else:
            self.client.request("PATCH", path, body=body, content_type=APPLY_PATCH, query=FIELD_MANAGER_QUERY,
                                timeout=self._request_timeout())

    def _count(self, counter: str) -> None:
        with self._lock:
            setattr(self.progress, counter, getattr(self.progress, counter) + 1)

    def _write(self, item: dict) -> None:
        """Write one object back; a refused or failing object is recorded and the resource goes on."""
        if self._stop.is_set():
            return
        meta = item.get("metadata") or {}
        missing = missing_preconditions(item)
        if missing:
            self._failed(item, None, "NoPreconditions", f"the object as listed has no metadata.{missing}",
                         "not written: without its uid and resourceVersion a write could re-create a deleted object")
            return
        path = self.target.object_path(meta.get("namespace"), meta.get("name"))
        mode = self._mode
        body = put_body(self.target, item) if mode == WRITE_PUT else apply_body(self.target, item)
        try:
            self._call(functools.partial(self._send, mode, path, body))
        except DeadlineExceeded:
            self._time_is_up()
            return
        except ApiError as error:
            if self._settled(error) or self._halts(error):
                return
            if mode == WRITE_PUT and rbac_forbids(error, "update"):
                self._fall_back(error)
                self._write(item)
                return
            if refused_as_a_change(error) and not isinstance(item, protobuf.StoredItem):  # sent as served already
                self._write_as_stored(mode, path, item, error)
                return
            self._record_failure(error, item)
            return
        self._count("objects_written")

    def _time_is_up(self) -> None:
        """The task's deadline passed during a write: every worker stops, and the run ends timed out."""
        self._timed_out.set()
        self._stop.set()

    def _halts(self, error: ApiError) -> bool:
        """etcd's space alarm or rejected credentials: every worker stops, and the run ends with that cause."""
        stop = halt(error, self.target.name, self.progress.objects_migrated)
        if stop is None:
            return False
        with self._lock:
            self._halted = self._halted or stop
        self._stop.set()
        return True

    def _settled(self, error: ApiError) -> bool:
        """A 409 (someone rewrote or deleted the object after we read it) or a 404 (gone) settles the object: counted,
        nothing more to write."""
        if error.status == 409 or is_missing(error):
            self._count("conflicts" if error.status == 409 else "gone")
            return True
        return False

    def _get_as_stored(self, path: str):
        self.limiter.acquire()
        return self.client.request("GET", path, accept=PROTOBUF, timeout=self._request_timeout())

    def _put_as_stored(self, path: str, data: bytes) -> None:
        self.limiter.acquire()
        self.client.request("PUT", path, body=data, content_type=PROTOBUF, query=FIELD_MANAGER_QUERY,
                            timeout=self._request_timeout())

    def _write_as_stored(self, mode: str, path: str, item: dict, refused: ApiError) -> None:
        """The object written back as read was refused as a change: GET it as protobuf, which carries every byte as
        stored, and PUT those very bytes back (its uid and resourceVersion are in them). Unparsed, so unchanged."""
        try:
            response = self._call(functools.partial(self._get_as_stored, path))
            if not protobuf.served(response):
                served = response.content_type.split(";")[0].strip()
                problem = (f"GET as {PROTOBUF} answered {served or 'no content type'}: the apiserver does not serve "
                           "this resource as protobuf (a custom resource, an aggregated API)")
                self._as_stored_failed(mode, item, refused, ApiError(problem, reason="NotProtobuf", api_message=problem))
                return
            self._call(functools.partial(self._put_as_stored, path, response.data))
        except DeadlineExceeded:
            self._time_is_up()
            return
        except ApiError as error:
            if self._settled(error) or self._halts(error):
                return
            self._as_stored_failed(mode, item, refused, error)
            return
        with self._lock:
            self.progress.objects_written += 1
            self.progress.objects_written_as_stored += 1
            if not self.progress.write_as_stored:
                self.progress.write_as_stored = (
                    f"{WRITE_AS_STORED}: {_WRITTEN[mode]}, {_object_label(self.target, item)} (and any other object "
                    f"counted in objects_written_as_stored) was refused as a change (HTTP 422: {_causes(refused)}): "
                    "the JSON the apiserver serves is not the bytes it stores, e.g. a ControllerRevision's data sent "
                    f"with spaces. Written as stored instead: GET as {PROTOBUF} and a PUT of those very bytes, with "
                    "their uid and resourceVersion; nothing changed.")

    def _as_stored_failed(self, mode: str, item: dict, refused: ApiError, error: ApiError) -> None:
        """The object can be written neither as read nor as stored: name what an operator can do."""
        instead = ("re-run with write: apply (the roles' kubeupgrade_migration_write: apply), the identity-only apply, "
                   "which stores it unchanged but for a managedFields entry when it has none; if that is refused too, "
                   if mode == WRITE_PUT else "")
        why = (f"{_WRITTEN[mode]} it was refused as a change (HTTP 422: {_causes(refused)}), and written as stored "
               f"({WRITE_AS_STORED}: GET as {PROTOBUF} and PUT of those bytes) it failed too. Next step: read it with "
               f"`{kubectl_get(self.target, item)}`; {instead}only its owner can store it again (delete it so that "
               "its controller re-creates it, or re-create it from what you read), then re-run")
        self._failed(item, error.status, error.reason, error.api_message or str(error), why)

    def _fall_back(self, error: ApiError) -> None:
        """RBAC forbids the PUT: go on with the identity-only apply (``patch``), and say so in the progress."""
        with self._lock:
            if self._mode == WRITE_APPLY:
                return
            self._mode = WRITE_APPLY
            self._limit = max(1, int(self.options.chunk_size))  # metadata-only chunks from now on
            self.progress.write = WRITE_APPLY
            self.progress.write_fallback = (
                f"RBAC forbids update on {self.target.name} ({(error.api_message or str(error))[:300]}): written with "
                "the identity-only apply (patch) instead. Grant update (the collection's rbac/migrate.yaml) for the "
                "cheaper PUT, or set write: apply.")

    def _record_failure(self, error: ApiError, item: dict) -> None:
        if is_decode_failure(error.status, error.api_message):
            why = "stored in a version this apiserver cannot decode; restore it with a release that can, or delete its etcd key"
        elif isinstance(error, EndpointUnreachable) or error.status in self.options.policy.retry_statuses:
            why = f"still failing after retrying ({retry_bound(self.options.policy)})"
        else:
            verb = "update" if self._mode == WRITE_PUT else "patch"
            why = ("refused by the apiserver (an admission policy or webhook denying updates, a validation error, or "
                   f"RBAC without {verb})")
        self._failed(item, error.status, error.reason, error.api_message or str(error), why)

    def _failed(self, item: dict, status, reason, message: str, why: str) -> None:
        entry = {"object": _object_label(self.target, item), "status": status, "reason": reason,
                 "message": (message or "")[:500], "why": why}
        with self._lock:
            self.progress.failed += 1
            if len(self.progress.failures) < MAX_REPORTED_FAILURES:
                self.progress.failures.append(entry)
            if self.progress.failed > self.options.max_failures:
                self._stop.set()

    # -- the loop ----------------------------------------------------------------------------------------------
    def _timeout(self) -> MigrationError:
        """The task's timeout ran out; when every request since some moment failed, the message says so and names the
        last failure (a timeout under persistent 500s or dropped connections is that failure, not a slow apiserver)."""
        with self._lock:
            failing = self._streak.describe(self.deadline.clock())
            details = {"resource": self.target.name, "progress": self.progress.to_dict(), **self._streak.details()}
        return DeadlineExceeded(
            f"Migration of {self.target.name} timed out after {self.progress.objects_migrated} objects "
            f"({self.progress.chunks} chunks){': ' + failing if failing else ''}; re-run to resume from the checkpoint, "
            "or raise 'timeout'.", details=details)

    def _between_chunks(self, last_gate: float) -> float:
        if self.deadline.expired():
            raise self._timeout()
        why = self.hooks.should_stop() if self.hooks.should_stop else None
        if why:
            raise Stopped(f"Migration of {self.target.name} stopped after {self.progress.objects_migrated} objects: {why}",
                          details={"resource": self.target.name})
        now = self.deadline.clock()
        if self.hooks.gate is not None and now - last_gate >= self.hooks.gate_interval:
            self.hooks.gate()
            return self.deadline.clock()
        return last_gate

    def _after_chunk(self, next_token: Optional[str]) -> None:
        if self._halted is not None:
            raise self._halted
        if self.progress.failed > self.options.max_failures:
            raise self._too_many_failures()
        if self._timed_out.is_set():
            raise self._timeout()
        self.progress.chunks += 1
        if next_token and self.store is not None:
            self.store.save(cp.Checkpoint(self.target.name, self.identity.cluster, self.target.storage_hash,
                                          self.identity.run_id, next_token, time.time(),
                                          self.progress.objects_migrated, self.progress.chunks))
        if self.hooks.on_progress is not None:
            self.hooks.on_progress(self.progress)

    def _too_many_failures(self) -> MigrationError:
        return MigrationError(
            f"Migration of {self.target.name} stopped: {self.progress.failed} objects failed, more than max_failures "
            f"({self.options.max_failures}). First: {self.progress.failures[0]['object']}: "
            f"{self.progress.failures[0]['message']} ({self.progress.failures[0]['why']}). Fix the cause and re-run.",
            details={"resource": self.target.name, "failures": self.progress.failures})

    def _pass(self, token: Optional[str], pick: Optional[Callable[[dict], tuple]] = None) -> None:
        """One pass over the objects from ``token`` (None: from the first) to the end; ``pick`` (a page -> the items to
        write and how many remain) writes only some of each page."""
        with ThreadPoolExecutor(max_workers=self.options.concurrency) as writers, \
                ThreadPoolExecutor(max_workers=1) as lister:
            page = self._list(token)
            last_gate = self.deadline.clock()
            while True:
                next_token = (page.get("metadata") or {}).get("continue") or None
                prefetch = lister.submit(self._list, next_token) if next_token else None
                items, remaining = (pick or _whole_page)(page)
                self.progress.objects_listed += len(items)
                self.progress.objects_remaining = remaining if next_token else 0
                del page
                try:
                    self._write_chunk(writers, items)
                    self._after_chunk(next_token)
                    last_gate = self._between_chunks(last_gate)
                except Exception:
                    if prefetch is not None:
                        prefetch.cancel()
                    raise
                if prefetch is None:
                    return
                page = prefetch.result()

    def _write_chunk(self, writers, items: list) -> None:
        if self.options.concurrency == 1:
            for item in items:
                self._write(item)
            return
        list(writers.map(self._write, items))

    def run(self) -> ClientProgress:
        """Migrate every object; a resumed run ends with a verification pass over every object.

        ``progress.verified`` is True only when this run went over every object from the first one
        without a failed object: only then may a record say ``[current]``.
        """
        wanted = cp.Checkpoint(self.target.name, self.identity.cluster, self.target.storage_hash,
                               self.identity.run_id, "", time.time())
        saved = None
        if self.store is not None:
            saved, self.progress.checkpoint_discarded = self.store.load(wanted)
        self.progress.resumed = saved is not None
        self._pass(saved.token if saved else None)
        if saved is not None:
            # The chunks before the checkpoint were migrated by another run, possibly before a rollback or
            # by an apiserver writing another version: go over every object again before trusting it.
            self.progress.verification_pass = True
            self._pass(None)
        if self.store is not None:
            self.store.remove(wanted)
        self.progress.verified = self.progress.failed == 0
        return self.progress


class ObjectListMigrator(ClientMigrator):
    """Rewrites only named objects (an audit's list): a GET of each (the whole object for ``put``, its metadata
    for ``apply``), then the same write as the full loop. Requests are proportional to the names, never to the
    resource.

    ``progress.verified`` is True when every named object was rewritten, found rewritten by someone else
    (409) or gone (404): whether that makes the whole resource current is the caller's question.
    """

    def _fetch_once(self, namespace: Optional[str], name: str) -> dict:
        self.limiter.acquire()
        path = self.target.object_path(namespace, name)
        if self._mode == WRITE_PUT:
            return self._get_whole(path, None, protobuf.stored_object)[1]
        return self.client.request("GET", path, accept=METADATA_OBJECT, timeout=self._request_timeout()).json()

    def _rewrite(self, label: str) -> None:
        if self._stop.is_set():
            return
        namespace, _sep, name = label.rpartition("/")
        try:
            item = none_if_missing(functools.partial(self._call, functools.partial(self._fetch_once, namespace or None, name)))
        except DeadlineExceeded:
            self._time_is_up()
            return
        except ApiError as error:
            if not self._halts(error):
                self._record_failure(error, {"metadata": {"namespace": namespace or None, "name": name}})
            return
        if item is None:
            self._count("gone")
            return
        with self._lock:
            self.progress.objects_listed += 1
        self._write(item)

    def _estimate(self, size: int, page: dict) -> None:
        """Nothing: a LIST's first page sizes the whole resource, and only the named objects are rewritten; what they
        add to etcd is the audit plan's (``plan.rewrite_bytes``), checked against etcd's space before any request."""

    def run_listed(self, labels: List[str]) -> ClientProgress:
        """Rewrite the named objects as a LIST of the resource in chunks finds them (the same write, with the uid and
        resourceVersion as listed): fewer requests than a GET of each when they are a large share of the resource. A
        named object no page holds was deleted since the audit (``gone``); the others listed are not written."""
        wanted, found = set(labels), set()

        def pick(page: dict) -> tuple:
            items = [item for item in page.get("items") or [] if _label(item) in wanted and _label(item) not in found]
            found.update(_label(item) for item in items)
            return items, len(wanted) - len(found)

        self._pass(None, pick)
        self.progress.gone += len(wanted - found)
        self.progress.verified = self.progress.failed == 0
        return self.progress

    def run_objects(self, labels: List[str]) -> ClientProgress:
        """Rewrite the named objects (``namespace/name`` or ``name``) in chunks of ``chunk_size``, checking the
        deadline, the stop signal and the agreement gate between chunks."""
        last_gate = self.deadline.clock()
        size = max(1, int(self.options.chunk_size))
        with ThreadPoolExecutor(max_workers=self.options.concurrency) as workers:
            for start in range(0, len(labels), size):
                chunk = labels[start:start + size]
                self.progress.objects_remaining = len(labels) - start - len(chunk)
                list(workers.map(self._rewrite, chunk))
                self._after_chunk(None)
                last_gate = self._between_chunks(last_gate)
        self.progress.verified = self.progress.failed == 0
        return self.progress


def _no_protobuf_encoding(error: ApiError) -> bool:
    """The apiserver could not encode the answer as protobuf (an aggregated API whose types lack it answers 500
    ``... does not implement the protobuf marshalling interface ...``; kubernetes/kubernetes#86253)."""
    return error.status == 500 and "does not implement the protobuf marshalling interface" in (error.api_message or "")


def _whole_objects() -> str:
    """What a LIST or GET of whole objects accepts: protobuf first (the bytes to send back) when protobuf can be read."""
    return FULL_PROTOBUF_OR_JSON if protobuf.available() else FULL_JSON


def _whole_page(page: dict) -> tuple:
    """Every item of a page, and how many the server says remain after it."""
    return page.get("items") or [], (page.get("metadata") or {}).get("remainingItemCount")


def _label(item: dict) -> str:
    """An object's name as an audit lists it: ``namespace/name``, or ``name`` when cluster-scoped."""
    meta = item.get("metadata") or {}
    return f"{meta['namespace']}/{meta.get('name')}" if meta.get("namespace") else str(meta.get("name"))


def _client_with_pool(client, concurrency: int):
    """A client whose connection pool fits every worker plus the prefetching lister (no blocking on the pool)."""
    needed = int(concurrency) + 2
    if hasattr(client, "settings") and hasattr(client, "for_endpoint") and getattr(client, "maxsize", needed) < needed:
        return type(client)(client.settings, client.endpoint, maxsize=needed)
    return client


def progress_fields(progress: ClientProgress) -> dict:
    return {k: v for k, v in progress.to_dict().items() if k not in ("resource", "failures")}
