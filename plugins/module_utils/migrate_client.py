# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The built-in client-side storage migrator: works on any cluster, needs only list and patch/update.

Every object of a resource is read in chunks (``limit``/``continue``) and written back unchanged
with its ``resourceVersion`` as a precondition, so the apiserver re-encodes it in the current
storage version. A 409 means someone rewrote it after we read it (done), a 404 that it is gone
(done: never re-created). Transient failures are retried with bounded, jittered backoff that honours
``Retry-After``; a decode failure is reported, never retried; any other refusal stops the resource
with the object named. Memory holds at most two chunks, whatever the number of objects, and a
checkpoint file after each finished chunk lets an interrupted run resume where it stopped.

Write method: the minimal server-side apply patch of the in-tree controller (``apiVersion``, ``kind``,
``metadata.uid`` and ``metadata.resourceVersion`` as preconditions) is the default. A full-object PUT
is kept for comparison (``write_method="put"``) but is weaker: a PUT of a deleted object whose
resource allows create-on-update (events, endpoints) re-creates it, which the uid precondition of
the apply patch forbids.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Callable, List, Optional

from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import (
    ApiError,
    EndpointUnreachable,
    MigrationError,
    is_decode_failure,
)
from ansible_collections.kubeupgrade.storage.plugins.module_utils.resources import GroupResource
from ansible_collections.kubeupgrade.storage.plugins.module_utils.retries import RetryPolicy, call_with_retries

FIELD_MANAGER = "kubeupgrade-storage-migrator"
APPLY = "apply"
PUT = "put"
WRITE_METHODS = (APPLY, PUT)
CHECKPOINT_FORMAT = 1
MAX_LIST_RESTARTS = 3
MAX_EXPIRED_TOKENS = 20
MAX_NAMESPACE_PROBES = 500


class DecodeFailure(MigrationError):
    """An object stored in a version the apiserver cannot decode: retrying never helps."""


@dataclass
class ResourceTarget:
    """What to migrate: the resource and the served version to read and write it through."""

    group_resource: GroupResource
    version: str
    namespaced: bool = True
    kind: str = ""
    storage_hash: str = ""  # the hash the migration targets; a checkpoint from another hash is ignored

    @property
    def name(self) -> str:
        return self.group_resource.name

    @property
    def api_version(self) -> str:
        return self.group_resource.group_version(self.version)

    @property
    def list_path(self) -> str:
        return f"{self.group_resource.api_prefix(self.version)}/{self.group_resource.resource}"

    def object_path(self, namespace: Optional[str], name: str) -> str:
        prefix = self.group_resource.api_prefix(self.version)
        if namespace:
            return f"{prefix}/namespaces/{namespace}/{self.group_resource.resource}/{name}"
        return f"{prefix}/{self.group_resource.resource}/{name}"


@dataclass
class ClientProgress:
    """Counters of one resource's client-side migration, returned in the module result."""

    resource: str
    objects_listed: int = 0
    objects_written: int = 0
    conflicts: int = 0  # 409: rewritten by someone else since we read it
    gone: int = 0  # 404: deleted since we read it
    chunks: int = 0
    objects_remaining: Optional[int] = None  # remainingItemCount of the last chunk, when the server said
    retries: int = 0
    expired_tokens: int = 0
    list_restarts: int = 0
    resumed: bool = False
    checkpoint: Optional[str] = None

    @property
    def objects_migrated(self) -> int:
        return self.objects_written + self.conflicts + self.gone

    def to_dict(self) -> dict:
        result = asdict(self)
        result["objects_migrated"] = self.objects_migrated
        return result


class RateLimiter:
    """Token bucket shared by all worker threads; ``qps <= 0`` disables it."""

    def __init__(self, qps: float, burst: Optional[int] = None, clock=time.monotonic, sleep=time.sleep):
        self.qps = float(qps or 0)
        self.capacity = float(burst or max(1.0, self.qps))
        self.tokens = self.capacity
        self.clock = clock
        self.sleep = sleep
        self.stamp = clock()
        self.lock = threading.Lock()

    def acquire(self) -> None:
        if self.qps <= 0:
            return
        with self.lock:
            now = self.clock()
            self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.qps)
            self.stamp = now
            self.tokens -= 1.0
            wait = -self.tokens / self.qps if self.tokens < 0 else 0.0
        if wait > 0:
            self.sleep(wait)


def checkpoint_path(checkpoint_dir: str, cluster: str, resource: str) -> str:
    """One file per cluster (hash of its URL) and resource, so parallel plays never share one."""
    cluster_id = hashlib.sha256(cluster.encode("utf-8")).hexdigest()[:12]
    return os.path.join(checkpoint_dir, f"storage-migration-{cluster_id}-{resource}.json")


def load_checkpoint(path: Optional[str], target: ResourceTarget) -> Optional[dict]:
    """The saved position, if it belongs to this resource and storage hash; anything else starts over."""
    if not path or not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != CHECKPOINT_FORMAT or data.get("resource") != target.name:
        return None
    if (data.get("storage_hash") or "") != (target.storage_hash or "") or not data.get("continue"):
        return None
    return data


def save_checkpoint(path: Optional[str], target: ResourceTarget, token: Optional[str], progress: ClientProgress) -> None:
    """Atomically record the token of the next unfinished chunk (write to a temp file, then rename)."""
    if not path:
        return
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, mode=0o700, exist_ok=True)
    data = {"format": CHECKPOINT_FORMAT, "resource": target.name, "storage_hash": target.storage_hash,
            "continue": token, "chunks": progress.chunks, "objects_migrated": progress.objects_migrated}
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".checkpoint-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle)
        os.replace(tmp, path)
    except OSError:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def remove_checkpoint(path: Optional[str]) -> None:
    if path and os.path.isfile(path):
        os.unlink(path)


def _object_label(target: ResourceTarget, item: dict) -> str:
    meta = item.get("metadata") or {}
    where = f"{meta.get('namespace')}/{meta.get('name')}" if meta.get("namespace") else str(meta.get("name"))
    return f"{target.name} {where}"


class ClientMigrator:
    """Rewrites every object of one resource through one apiserver (the connection's host)."""

    def __init__(self, client, target: ResourceTarget, chunk_size: int = 500, concurrency: int = 4, qps: float = 0,
                 policy: Optional[RetryPolicy] = None, write_method: str = APPLY, checkpoint: Optional[str] = None,
                 gate: Optional[Callable[[], None]] = None, gate_interval: float = 5.0, deadline: Optional[float] = None,
                 sleep=time.sleep, clock=time.monotonic, field_manager: str = FIELD_MANAGER):
        if write_method not in WRITE_METHODS:
            raise ValueError(f"write_method must be one of {WRITE_METHODS}")
        self.client = _client_with_pool(client, concurrency)
        self.target = target
        self.chunk_size = max(1, int(chunk_size))
        self.concurrency = max(1, int(concurrency))
        self.policy = policy or RetryPolicy()
        self.write_method = write_method
        self.checkpoint = checkpoint
        self.gate = gate
        self.gate_interval = gate_interval
        self.deadline = deadline
        self.sleep = sleep
        self.clock = clock
        self.field_manager = field_manager
        self.limiter = RateLimiter(qps, clock=clock, sleep=sleep)
        self.progress = ClientProgress(resource=target.name, checkpoint=checkpoint)
        self._lock = threading.Lock()
        self._stop = threading.Event()

    # -- LIST --------------------------------------------------------------------------------------------------
    def _count_retry(self, _error, _attempt, _wait) -> None:
        with self._lock:
            self.progress.retries += 1

    def _list_once(self, token: Optional[str]) -> dict:
        self.limiter.acquire()
        query = {"limit": self.chunk_size}
        if token:
            query["continue"] = token
        return self.client.request("GET", self.target.list_path, query=query).json()

    def _list(self, token: Optional[str]) -> dict:
        """One chunk, surviving transient failures and expired tokens (410: server's fallback token, else restart)."""
        while True:
            try:
                return call_with_retries(functools.partial(self._list_once, token), self.policy, self.sleep,
                                         self._count_retry)
            except ApiError as error:
                if error.status == 410 and token:
                    fallback = ((error.body or {}).get("metadata") or {}).get("continue") if isinstance(error.body, dict) else None
                    with self._lock:
                        self.progress.expired_tokens += 1
                    if fallback and fallback != token and self.progress.expired_tokens <= MAX_EXPIRED_TOKENS:
                        token = fallback
                        continue
                    if self.progress.list_restarts >= MAX_LIST_RESTARTS:
                        raise MigrationError(
                            f"Migration of {self.target.name} stopped: the list kept expiring (HTTP 410) after "
                            f"{MAX_LIST_RESTARTS} restarts; the apiserver compacts faster than the migration lists. "
                            "Raise etcd's compaction interval or chunk_size, then re-run.") from None
                    with self._lock:
                        self.progress.list_restarts += 1
                    token = None
                    continue
                raise self._list_error(error, token) from None

    def _list_error(self, error: ApiError, token: Optional[str]) -> MigrationError:
        where = f"apiserver {error.endpoint or getattr(self.client, 'endpoint', '?')}"
        done = self.progress.objects_migrated
        if is_decode_failure(error.status, error.api_message):
            namespaces = self._locate_undecodable() if self.target.namespaced else []
            located = (f" in namespace(s) {', '.join(namespaces)}" if namespaces else "")
            return DecodeFailure(
                f"Migration of {self.target.name} stopped: {where} cannot decode an object of {self.target.name}"
                f"{located} (LIST failed with HTTP 500: {error.api_message}). The object is stored in etcd in a "
                "version this apiserver cannot read, so no API call can read, rewrite or delete it, and every LIST "
                f"covering it fails. {done} objects were migrated before. Next step: find the key "
                f"(etcdctl get --prefix --keys-only /registry/...{'/' + namespaces[0] if namespaces else ''}), restore "
                "it with an apiserver release that can decode it or delete the key, then re-run: the migration "
                "resumes from its checkpoint. Not retried.",
                details={"resource": self.target.name, "endpoint": error.endpoint, "namespaces": namespaces,
                         "status": error.status, "message": error.api_message, "objects_migrated": done})
        if isinstance(error, EndpointUnreachable) or error.status in self.policy.retry_statuses:
            cause = f"gave up after {self.policy.attempts} attempts"
        else:
            cause = "the apiserver refused"
        return MigrationError(
            f"Migration of {self.target.name} stopped: listing it on {where} failed ({cause}): {error}",
            details={"resource": self.target.name, "status": error.status, "reason": error.reason,
                     "objects_migrated": done, "continue": token})

    def _locate_undecodable(self) -> List[str]:
        """Namespaces whose LIST fails to decode: LISTs of clean namespaces still work (decode/09)."""
        found: List[str] = []
        try:
            token = None
            probes = 0
            while probes < MAX_NAMESPACE_PROBES:
                query = {"limit": 500}
                if token:
                    query["continue"] = token
                page = self.client.request("GET", "/api/v1/namespaces", query=query).json()
                for item in page.get("items") or []:
                    namespace = (item.get("metadata") or {}).get("name")
                    probes += 1
                    if probes > MAX_NAMESPACE_PROBES:
                        break
                    path = f"{self.target.group_resource.api_prefix(self.target.version)}/namespaces/{namespace}/" \
                           f"{self.target.group_resource.resource}"
                    try:
                        self.client.request("GET", path, query={"limit": 1})
                    except ApiError as error:
                        if is_decode_failure(error.status, error.api_message):
                            found.append(namespace)
                token = (page.get("metadata") or {}).get("continue")
                if not token:
                    break
        except ApiError:
            pass  # locating is a courtesy; the failure itself is already known
        return found

    # -- writes ------------------------------------------------------------------------------------------------
    def _body(self, item: dict, api_version: str, kind: str) -> dict:
        if self.write_method == PUT:
            body = dict(item)
            body.setdefault("apiVersion", api_version)
            body.setdefault("kind", kind)
            return body
        meta = item.get("metadata") or {}
        metadata = {"name": meta.get("name"), "uid": meta.get("uid"), "resourceVersion": meta.get("resourceVersion")}
        if meta.get("namespace"):
            metadata["namespace"] = meta["namespace"]
        return {"apiVersion": item.get("apiVersion") or api_version, "kind": item.get("kind") or kind,
                "metadata": metadata}

    def _send(self, path: str, body: dict) -> None:
        self.limiter.acquire()
        if self.write_method == PUT:
            self.client.request("PUT", path, body=body)
        else:
            self.client.request("PATCH", path, body=body, content_type="application/apply-patch+yaml",
                                query={"fieldManager": self.field_manager})

    def _write(self, item: dict, api_version: str, kind: str) -> Optional[MigrationError]:
        """Write one object back; return the error that must stop the resource, None when done."""
        if self._stop.is_set():
            return None
        meta = item.get("metadata") or {}
        path = self.target.object_path(meta.get("namespace"), meta.get("name"))
        body = self._body(item, api_version, kind)
        try:
            call_with_retries(lambda: self._send(path, body), self.policy, self.sleep, self._count_retry)
        except ApiError as error:
            if error.status == 409:
                with self._lock:
                    self.progress.conflicts += 1
                return None
            if error.status == 404:
                with self._lock:
                    self.progress.gone += 1
                return None
            self._stop.set()
            return self._write_error(error, item)
        with self._lock:
            self.progress.objects_written += 1
        return None

    def _write_error(self, error: ApiError, item: dict) -> MigrationError:
        label = _object_label(self.target, item)
        details = {"resource": self.target.name, "object": label, "endpoint": error.endpoint,
                   "status": error.status, "reason": error.reason, "message": error.api_message}
        if is_decode_failure(error.status, error.api_message):
            return DecodeFailure(
                f"Migration of {self.target.name} stopped at {label}: apiserver {error.endpoint} cannot decode it "
                f"(HTTP 500: {error.api_message}). It is stored in a version this apiserver cannot read; restore it "
                "with a release that can, or delete its etcd key, then re-run. Not retried.", details=details)
        if isinstance(error, EndpointUnreachable) or error.status in self.policy.retry_statuses:
            return MigrationError(
                f"Migration of {self.target.name} stopped at {label}: gave up after {self.policy.attempts} attempts: "
                f"{error}. Re-run when the apiserver is healthy; it resumes from the checkpoint.", details=details)
        return MigrationError(
            f"Migration of {self.target.name} stopped at {label}: the apiserver refused to write it back: "
            f"HTTP {error.status} {error.reason}: {error.api_message or error}. Nothing was changed by this write. "
            "Fix the cause (RBAC for patch/update, an admission policy or webhook denying updates, a validation "
            "error), then re-run.", details=details)

    # -- the loop ----------------------------------------------------------------------------------------------
    def _check_between_chunks(self, last_gate: float) -> float:
        now = self.clock()
        if self.deadline is not None and now > self.deadline:
            raise MigrationError(
                f"Migration of {self.target.name} timed out after {self.progress.objects_migrated} objects "
                f"({self.progress.chunks} chunks); re-run to resume from the checkpoint, or raise 'timeout'.",
                details={"resource": self.target.name, "progress": self.progress.to_dict()})
        if self.gate is not None and now - last_gate >= self.gate_interval:
            self.gate()
            return self.clock()
        return last_gate

    def run(self) -> ClientProgress:
        """Migrate every object; raise ``MigrationError`` naming the object and cause on the first hard failure."""
        saved = load_checkpoint(self.checkpoint, self.target)
        token = saved.get("continue") if saved else None
        if saved:
            self.progress.resumed = True
        with ThreadPoolExecutor(max_workers=self.concurrency) as writers, ThreadPoolExecutor(max_workers=1) as lister:
            page = self._list(token)
            last_gate = self.clock()
            while True:
                next_token = (page.get("metadata") or {}).get("continue") or None
                prefetch = lister.submit(self._list, next_token) if next_token else None
                items = page.get("items") or []
                api_version = page.get("apiVersion") or self.target.api_version
                kind = self.target.kind or (page.get("kind") or "")[:-len("List")]
                self.progress.objects_listed += len(items)
                remaining = (page.get("metadata") or {}).get("remainingItemCount")
                self.progress.objects_remaining = remaining if next_token else 0
                del page
                failure = self._write_chunk(writers, items, api_version, kind)
                if failure is not None:
                    if prefetch is not None:
                        prefetch.cancel()
                    raise failure
                self.progress.chunks += 1
                del items
                if next_token:
                    save_checkpoint(self.checkpoint, self.target, next_token, self.progress)
                try:
                    last_gate = self._check_between_chunks(last_gate)
                except Exception:
                    if prefetch is not None:
                        prefetch.cancel()
                    raise
                if prefetch is None:
                    break
                page = prefetch.result()
        remove_checkpoint(self.checkpoint)
        return self.progress

    def _write_chunk(self, writers, items: list, api_version: str, kind: str) -> Optional[MigrationError]:
        if self.concurrency == 1:
            for item in items:
                failure = self._write(item, api_version, kind)
                if failure is not None:
                    return failure
            return None
        failures = [f for f in writers.map(lambda item: self._write(item, api_version, kind), items) if f]
        return failures[0] if failures else None


def _client_with_pool(client, concurrency: int):
    """A client whose connection pool fits every worker plus the prefetching lister (no blocking on the pool)."""
    needed = int(concurrency) + 2
    if hasattr(client, "settings") and hasattr(client, "for_endpoint") and getattr(client, "maxsize", needed) < needed:
        return type(client)(client.settings, client.endpoint, maxsize=needed)
    return client


def default_checkpoint_dir(tmpdir: Optional[str] = None) -> str:
    """``~/.ansible/tmp/kubeupgrade-storage-migration`` on the host running the module, else its tmpdir."""
    home = os.path.expanduser("~/.ansible/tmp")
    try:
        os.makedirs(home, mode=0o700, exist_ok=True)
        return os.path.join(home, "kubeupgrade-storage-migration")
    except OSError:
        return os.path.join(tmpdir or tempfile.gettempdir(), "kubeupgrade-storage-migration")


def progress_fields(progress: ClientProgress) -> dict:
    return {k: v for k, v in progress.to_dict().items() if k != "resource"}


__all__ = ["ClientMigrator", "ClientProgress", "DecodeFailure", "ResourceTarget", "RateLimiter", "checkpoint_path",
           "default_checkpoint_dir", "load_checkpoint", "save_checkpoint", "remove_checkpoint"]
