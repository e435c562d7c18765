# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The client-side migrator against an in-memory fake apiserver: every retry class, 410, decode, denial."""

import base64
import copy
import json
import os

import pytest

from ansible_collections.kubeupgrade.storage.plugins.module_utils import migrate_client as mc
from ansible_collections.kubeupgrade.storage.plugins.module_utils.client import ApiResponse
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import (
    ApiError,
    EndpointUnreachable,
    MigrationError,
)
from ansible_collections.kubeupgrade.storage.plugins.module_utils.resources import GroupResource
from ansible_collections.kubeupgrade.storage.plugins.module_utils.retries import RetryPolicy

ENDPOINT = "https://10.0.0.11:6443"
DECODE_MESSAGE = 'no kind "ConfigMap" is registered for version "v9" in scheme "pkg/api/legacyscheme/scheme.go:30"'


def _token(rv, start):
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start}).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _untoken(token):
    return json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))


class Fault:
    def __init__(self, method, error, count=1, match=None):
        self.method, self.error, self.count, self.match = method, error, count, match


def api_error(status, message="boom", reason="", retry_after=None, body=None, method="GET", path="/"):
    return ApiError(f"{method} {path} on apiserver {ENDPOINT} failed: HTTP {status} {reason}: {message}",
                    endpoint=ENDPOINT, method=method, path=path, status=status, reason=reason,
                    api_message=message, retry_after=retry_after, body=body)


class FakeApiserver:
    """Configmaps in memory: chunked LIST with continue tokens, PUT and apply with rv/uid preconditions."""

    endpoint = ENDPOINT

    def __init__(self, count=7, namespaces=("a", "b")):
        self.objects = {}
        self.rv = 100
        for index in range(count):
            namespace = namespaces[index % len(namespaces)]
            self._add(namespace, f"cm-{index:03d}", {"k": str(index)})
        self.faults = []
        self.calls = []
        self.writes = []
        self.deleted_after_list = set()
        self.modified_after_list = set()
        self.undecodable_namespaces = set()

    def _add(self, namespace, name, data):
        self.rv += 1
        self.objects[f"{namespace}/{name}"] = {
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", "resourceVersion": str(self.rv)},
            "data": data, "encoded": "v0"}

    def fault(self, method, error, count=1, match=None):
        self.faults.append(Fault(method, error, count, match))

    def _take_fault(self, method, path, query):
        for fault in self.faults:
            if fault.count and fault.method == method and (fault.match is None or fault.match(path, query)):
                fault.count -= 1
                error = fault.error
                return error() if callable(error) else error
        return None

    def request(self, method, path, query=None, body=None, content_type="application/json", accept=None, timeout=None):
        query = dict(query or {})
        self.calls.append((method, path, query))
        error = self._take_fault(method, path, query)
        if error is not None:
            raise error
        if method == "GET":
            return self._list(path, query)
        return self._write(method, path, body, content_type, query)

    def _list(self, path, query):
        if path == "/api/v1/namespaces":
            names = sorted({k.split("/")[0] for k in self.objects} | {"clean"})
            return _resp({"items": [{"metadata": {"name": n}} for n in names], "metadata": {}})
        namespace = path.split("/namespaces/")[1].split("/")[0] if "/namespaces/" in path else None
        keys = sorted(k for k in self.objects if namespace is None or k.startswith(namespace + "/"))
        if any(k.split("/")[0] in self.undecodable_namespaces for k in keys):
            raise api_error(500, DECODE_MESSAGE, path=path)
        start = _untoken(query["continue"])["start"] if query.get("continue") else ""
        keys = [k for k in keys if k >= start]
        limit = int(query.get("limit") or 0) or len(keys)
        page, rest = keys[:limit], keys[limit:]
        items = [{"metadata": copy.deepcopy(self.objects[k]["metadata"]), "data": dict(self.objects[k]["data"])}
                 for k in page]
        for key in page:
            if key in self.deleted_after_list:
                del self.objects[key]
            if key in self.modified_after_list:
                self.rv += 1
                self.objects[key]["metadata"]["resourceVersion"] = str(self.rv)
        metadata = {"resourceVersion": str(self.rv)}
        if rest:
            metadata["continue"] = _token(self.rv, page[-1] + "\x00")
            metadata["remainingItemCount"] = len(rest)
        return _resp({"kind": "ConfigMapList", "apiVersion": "v1", "metadata": metadata, "items": items})

    def _write(self, method, path, body, content_type, query):
        parts = path.split("/")
        key = f"{parts[4]}/{parts[6]}"
        current = self.objects.get(key)
        meta = body["metadata"]
        if current is None:
            raise api_error(404 if method == "PUT" else 409, "not found", "NotFound", method=method, path=path)
        if meta.get("resourceVersion") != current["metadata"]["resourceVersion"] or (
                meta.get("uid") and meta["uid"] != current["metadata"]["uid"]):
            raise api_error(409, "the object has been modified", "Conflict", method=method, path=path)
        if method == "PUT":
            assert body["data"] == current["data"], "content must be written back unchanged"
            assert body["apiVersion"] == "v1" and body["kind"] == "ConfigMap"
        else:
            assert content_type == "application/apply-patch+yaml"
            assert query["fieldManager"] == mc.FIELD_MANAGER
            assert set(body) == {"apiVersion", "kind", "metadata"}
        self.writes.append(key)
        current["encoded"] = "v1"
        return _resp({})


def _resp(doc):
    return ApiResponse(200, {}, json.dumps(doc).encode())


TARGET = mc.ResourceTarget(GroupResource("", "configmaps"), "v1", namespaced=True, kind="ConfigMap",
                           storage_hash="qFsyl6wFWjQ=")
FAST = RetryPolicy(attempts=4, base_delay=0.01, max_delay=0.02)


def migrator(server, sleeps=None, **kwargs):
    options = {"chunk_size": 3, "concurrency": 1, "policy": FAST}
    options.update(kwargs)
    sleep = sleeps.append if sleeps is not None else (lambda _s: None)
    return mc.ClientMigrator(server, TARGET, sleep=sleep, **options)


@pytest.mark.parametrize("write_method", [mc.APPLY, mc.PUT])
@pytest.mark.parametrize("concurrency", [1, 4])
def test_every_object_rewritten_once_content_unchanged(write_method, concurrency):
    server = FakeApiserver(count=10)
    before = {k: copy.deepcopy(v["data"]) for k, v in server.objects.items()}
    progress = migrator(server, write_method=write_method, concurrency=concurrency).run()
    assert sorted(server.writes) == sorted(before)
    assert all(o["encoded"] == "v1" for o in server.objects.values())
    assert {k: v["data"] for k, v in server.objects.items()} == before
    assert progress.objects_written == 10 and progress.chunks == 4 and progress.objects_remaining == 0
    lists = [c for c in server.calls if c[0] == "GET"]
    assert all(c[2]["limit"] == 3 for c in lists) and len(lists) == 4


def test_conflict_and_gone_count_as_done_and_are_never_recreated():
    server = FakeApiserver(count=6)
    server.deleted_after_list = {"a/cm-000"}
    server.modified_after_list = {"b/cm-001"}
    progress = migrator(server).run()
    assert progress.gone + progress.conflicts == 2 and progress.objects_written == 4
    assert "a/cm-000" not in server.objects  # a deleted object stays deleted
    assert progress.objects_migrated == 6


@pytest.mark.parametrize("status,reason,retry_after", [
    (429, "TooManyRequests", 2.5), (500, "InternalError", None), (503, "ServiceUnavailable", 1), (504, "Timeout", None)])
@pytest.mark.parametrize("method", ["GET", "PATCH"])
def test_transient_statuses_are_retried_honouring_retry_after(status, reason, retry_after, method):
    server = FakeApiserver(count=4)
    server.fault(method, api_error(status, "try later", reason, retry_after=retry_after, method=method), count=2)
    sleeps = []
    progress = migrator(server, sleeps=sleeps).run()
    assert progress.objects_written == 4 and progress.retries == 2
    assert len(sleeps) == 2
    if retry_after:
        assert all(s >= retry_after for s in sleeps)


@pytest.mark.parametrize("method", ["GET", "PATCH"])
def test_dropped_connections_and_timeouts_are_retried(method):
    server = FakeApiserver(count=4)
    server.fault(method, EndpointUnreachable("connection reset", endpoint=ENDPOINT), count=3)
    progress = migrator(server).run()
    assert progress.objects_written == 4 and progress.retries == 3


def test_retries_are_bounded_and_the_failure_names_the_object():
    server = FakeApiserver(count=4)
    server.fault("PATCH", lambda: api_error(503, "unavailable", "ServiceUnavailable", method="PATCH"), count=100)
    with pytest.raises(MigrationError) as info:
        migrator(server).run()
    assert "configmaps a/cm-000" in str(info.value) and "gave up after 4 attempts" in str(info.value)
    assert len([c for c in server.calls if c[0] == "PATCH"]) == 4


def test_list_retries_are_bounded():
    server = FakeApiserver(count=4)
    server.fault("GET", lambda: EndpointUnreachable("refused", endpoint=ENDPOINT), count=100)
    with pytest.raises(MigrationError, match="gave up after 4 attempts"):
        migrator(server).run()
    assert len(server.calls) == 4


def _expired(fallback):
    body = {"kind": "Status", "code": 410, "reason": "Expired", "metadata": {"continue": fallback} if fallback else {}}
    return api_error(410, "The provided continue parameter is too old", "Expired", body=body)


def test_expired_token_continues_from_the_fallback_token():
    server = FakeApiserver(count=9)
    fallback = _token(-1, "a/cm-004\x00")
    server.fault("GET", _expired(fallback), match=lambda p, q: "continue" in q)
    progress = migrator(server).run()
    assert progress.expired_tokens == 1 and progress.list_restarts == 0
    assert sorted(set(server.writes)) == sorted(server.objects) and progress.objects_written == 9
    assert any(c[2].get("continue") == fallback for c in server.calls)


def test_expired_token_without_fallback_restarts_the_list():
    server = FakeApiserver(count=9)
    server.fault("GET", _expired(None), match=lambda p, q: "continue" in q)
    progress = migrator(server).run()
    assert progress.list_restarts == 1
    assert sorted(set(server.writes)) == sorted(server.objects)


def test_list_restarts_are_bounded():
    server = FakeApiserver(count=9)
    server.fault("GET", lambda: _expired(None), count=100, match=lambda p, q: "continue" in q)
    with pytest.raises(MigrationError, match="kept expiring"):
        migrator(server).run()


def test_decode_failure_on_list_is_reported_not_retried():
    server = FakeApiserver(count=6, namespaces=("a", "b"))
    server.undecodable_namespaces = {"b"}
    with pytest.raises(mc.DecodeFailure) as info:
        migrator(server).run()
    message = str(info.value)
    assert "cannot decode" in message and "namespace(s) b" in message and ENDPOINT in message
    assert "Not retried" in message and "etcdctl" in message
    configmap_lists = [c for c in server.calls if c[1] == "/api/v1/configmaps"]
    assert len(configmap_lists) == 1
    assert not server.writes


def test_decode_failure_on_write_names_the_object():
    server = FakeApiserver(count=4)
    server.fault("PATCH", api_error(500, DECODE_MESSAGE, method="PATCH"), match=lambda p, q: p.endswith("cm-001"))
    with pytest.raises(mc.DecodeFailure) as info:
        migrator(server).run()
    assert "configmaps b/cm-001" in str(info.value)
    assert len([c for c in server.calls if c[0] == "PATCH" and c[1].endswith("cm-001")]) == 1


@pytest.mark.parametrize("status,reason,message", [
    (403, "Forbidden", 'configmaps "cm-002" is forbidden: User "alice" cannot patch resource'),
    (405, "MethodNotAllowed", "the server does not allow this method"),
    (422, "Invalid", "ValidatingAdmissionPolicy 'deny' with binding 'deny' denied request: frozen"),
    (400, "BadRequest", "admission webhook \"deny.example.com\" denied the request"),
])
def test_refusals_stop_the_resource_naming_object_and_reason(status, reason, message):
    server = FakeApiserver(count=6)
    server.fault("PATCH", api_error(status, message, reason, method="PATCH"), match=lambda p, q: p.endswith("cm-002"))
    with pytest.raises(MigrationError) as info:
        migrator(server).run()
    text = str(info.value)
    assert "configmaps a/cm-002" in text and str(status) in text and message in text
    assert info.value.details["object"] == "configmaps a/cm-002"
    assert len([c for c in server.calls if c[1].endswith("cm-002")]) == 1
    assert "a/cm-004" not in server.writes  # later chunks are not touched


def test_checkpoint_resumes_from_the_last_finished_chunk(tmp_path):
    path = mc.checkpoint_path(str(tmp_path), ENDPOINT, TARGET.name)
    server = FakeApiserver(count=9)
    calls = {"n": 0}

    def gate():
        calls["n"] += 1
        if calls["n"] == 2:
            raise MigrationError("apiservers disagree")

    with pytest.raises(MigrationError, match="disagree"):
        migrator(server, checkpoint=path, gate=gate, gate_interval=0).run()
    assert os.path.isfile(path)
    saved = json.load(open(path))
    assert saved["chunks"] == 2 and saved["resource"] == "configmaps"
    assert len(server.writes) == 6
    server.writes.clear()
    progress = migrator(server, checkpoint=path).run()
    assert progress.resumed and len(server.writes) == 3
    assert not os.path.exists(path)


def test_checkpoint_of_another_storage_hash_is_ignored(tmp_path):
    path = mc.checkpoint_path(str(tmp_path), ENDPOINT, TARGET.name)
    os.makedirs(tmp_path, exist_ok=True)
    with open(path, "w") as handle:
        json.dump({"format": 1, "resource": "configmaps", "storage_hash": "OTHER", "continue": _token(1, "b/")}, handle)
    server = FakeApiserver(count=5)
    progress = migrator(server, checkpoint=path).run()
    assert not progress.resumed and len(server.writes) == 5


def test_checkpoint_path_is_per_cluster_and_resource(tmp_path):
    a = mc.checkpoint_path(str(tmp_path), "https://a:6443", "configmaps")
    b = mc.checkpoint_path(str(tmp_path), "https://b:6443", "configmaps")
    c = mc.checkpoint_path(str(tmp_path), "https://a:6443", "widgets.example.com")
    assert len({a, b, c}) == 3 and all(p.startswith(str(tmp_path)) for p in (a, b, c))


def test_deadline_stops_between_chunks():
    server = FakeApiserver(count=9)
    clock = iter(range(0, 1000, 10))
    with pytest.raises(MigrationError, match="timed out"):
        migrator(server, deadline=15, clock=lambda: next(clock)).run()
    assert len(server.writes) < 9


def test_rate_limiter_spaces_requests():
    now = {"t": 0.0}
    slept = []

    def sleep(seconds):
        slept.append(seconds)
        now["t"] += seconds

    limiter = mc.RateLimiter(10, burst=1, clock=lambda: now["t"], sleep=sleep)
    for _unused in range(11):
        limiter.acquire()
    assert now["t"] == pytest.approx(1.0)


def test_qps_zero_means_unlimited():
    limiter = mc.RateLimiter(0, sleep=lambda s: pytest.fail("must not sleep"))
    for _unused in range(100):
        limiter.acquire()


def test_cluster_scoped_paths():
    target = mc.ResourceTarget(GroupResource("rbac.authorization.k8s.io", "clusterroles"), "v1", namespaced=False)
    assert target.list_path == "/apis/rbac.authorization.k8s.io/v1/clusterroles"
    assert target.object_path(None, "x") == "/apis/rbac.authorization.k8s.io/v1/clusterroles/x"
    assert TARGET.object_path("ns", "x") == "/api/v1/namespaces/ns/configmaps/x"


def test_unknown_write_method_is_refused():
    with pytest.raises(ValueError):
        mc.ClientMigrator(FakeApiserver(), TARGET, write_method="post")
