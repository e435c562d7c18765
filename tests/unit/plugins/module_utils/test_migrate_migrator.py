# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The client-side migrator against an in-memory fake apiserver: retries, 410, decode, denials, deadline, checkpoints."""

import base64
import copy
import json
import os
import time

import pytest

from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.client import ApiResponse
from ansible_collections.kubeupgrade.storage.plugins.module_utils._migrate import checkpoint as cp
from ansible_collections.kubeupgrade.storage.plugins.module_utils._migrate import migrator as mig
from ansible_collections.kubeupgrade.storage.plugins.module_utils._migrate.ratelimit import (
    Deadline,
    DeadlineExceeded,
    RateLimiter,
)
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
        self.accepts = []
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
        self.accepts.append(accept)
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
        items = [{"metadata": copy.deepcopy(self.objects[k]["metadata"])} for k in page]  # metadata only
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
        return _resp({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": metadata,
                      "items": items})

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
        assert content_type == "application/apply-patch+yaml"
        assert query["fieldManager"] == mig.FIELD_MANAGER
        assert set(body) == {"apiVersion", "kind", "metadata"}  # identity and preconditions only
        assert body["apiVersion"] == "v1" and body["kind"] == "ConfigMap"
        self.writes.append(key)
        current["encoded"] = "v1"
        return _resp({})


def _resp(doc):
    return ApiResponse(200, {}, json.dumps(doc).encode())


TARGET = mig.ResourceTarget(GroupResource("", "configmaps"), "v1", namespaced=True, kind="ConfigMap",
                            storage_hash="qFsyl6wFWjQ=")
FAST = RetryPolicy(attempts=4, base_delay=0.01, max_delay=0.02)


def migrator(server, sleeps=None, store=None, hooks=None, deadline=None, run_id="run-1", **kwargs):
    options = {"chunk_size": 3, "concurrency": 1, "policy": FAST}
    options.update(kwargs)
    sleep = sleeps.append if sleeps is not None else (lambda _s: None)
    migrator = mig.ClientMigrator(server, TARGET, mig.ClientOptions(**options), mig.RunIdentity(run_id, ENDPOINT), store)
    return migrator.configure(deadline=deadline, hooks=hooks, sleep=sleep)


@pytest.mark.parametrize("concurrency", [1, 4])
def test_every_object_rewritten_once_content_unchanged_listing_metadata_only(concurrency):
    server = FakeApiserver(count=10)
    before = {k: copy.deepcopy(v["data"]) for k, v in server.objects.items()}
    progress = migrator(server, concurrency=concurrency).run()
    assert sorted(server.writes) == sorted(before)
    assert all(o["encoded"] == "v1" for o in server.objects.values())
    assert {k: v["data"] for k, v in server.objects.items()} == before
    assert progress.objects_written == 10 and progress.chunks == 4 and progress.objects_remaining == 0
    assert progress.verified and not progress.resumed
    lists = [c for c in server.calls if c[0] == "GET"]
    assert all(c[2]["limit"] == 3 for c in lists) and len(lists) == 4
    assert all("as=PartialObjectMetadataList" in (a or "") for (m, _p, _q), a in zip(server.calls, server.accepts) if m == "GET")


def test_conflict_and_gone_count_as_done_and_are_never_recreated():
    server = FakeApiserver(count=6)
    server.deleted_after_list = {"a/cm-000"}
    server.modified_after_list = {"b/cm-001"}
    progress = migrator(server).run()
    assert progress.gone + progress.conflicts == 2 and progress.objects_written == 4
    assert "a/cm-000" not in server.objects  # a deleted object stays deleted
    assert progress.objects_migrated == 6 and progress.verified


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


def test_an_object_that_keeps_failing_is_reported_and_the_resource_goes_on():
    server = FakeApiserver(count=6)
    server.fault("PATCH", lambda: api_error(503, "unavailable", "ServiceUnavailable", method="PATCH"), count=4,
                 match=lambda p, q: p.endswith("cm-000"))
    progress = migrator(server).run()
    assert not progress.verified and progress.failed == 1 and progress.objects_written == 5
    assert progress.failures[0]["object"] == "configmaps a/cm-000" and "retrying" in progress.failures[0]["why"]
    assert len([c for c in server.calls if c[0] == "PATCH" and c[1].endswith("cm-000")]) == 4


def test_list_retries_are_bounded():
    server = FakeApiserver(count=4)
    server.fault("GET", lambda: EndpointUnreachable("refused", endpoint=ENDPOINT), count=100)
    with pytest.raises(MigrationError, match="gave up after retrying"):
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
    with pytest.raises(mig.DecodeFailure) as info:
        migrator(server).run()
    message = str(info.value)
    assert "cannot decode" in message and "namespace(s) b" in message and ENDPOINT in message
    assert "Not retried" in message and "etcdctl" in message
    configmap_lists = [c for c in server.calls if c[1] == "/api/v1/configmaps"]
    assert len(configmap_lists) == 1
    assert not server.writes


def test_decode_failure_on_write_names_the_object_and_is_not_retried():
    server = FakeApiserver(count=4)
    server.fault("PATCH", api_error(500, DECODE_MESSAGE, method="PATCH"), match=lambda p, q: p.endswith("cm-001"))
    progress = migrator(server).run()
    assert progress.failures[0]["object"] == "configmaps b/cm-001" and "cannot decode" in progress.failures[0]["why"]
    assert len([c for c in server.calls if c[0] == "PATCH" and c[1].endswith("cm-001")]) == 1
    assert not progress.verified


@pytest.mark.parametrize("status,reason,message", [
    (403, "Forbidden", 'configmaps "cm-002" is forbidden: User "alice" cannot patch resource'),
    (405, "MethodNotAllowed", "the server does not allow this method"),
    (422, "Invalid", "ValidatingAdmissionPolicy 'deny' with binding 'deny' denied request: frozen"),
    (400, "BadRequest", "admission webhook \"deny.example.com\" denied the request"),
])
def test_a_refused_object_is_named_and_the_resource_goes_on(status, reason, message):
    server = FakeApiserver(count=6)
    server.fault("PATCH", api_error(status, message, reason, method="PATCH"), match=lambda p, q: p.endswith("cm-002"))
    progress = migrator(server).run()
    assert progress.failures == [{"object": "configmaps a/cm-002", "status": status, "reason": reason,
                                  "message": message, "why": progress.failures[0]["why"]}]
    assert "refused" in progress.failures[0]["why"]
    assert len([c for c in server.calls if c[1].endswith("cm-002")]) == 1
    assert sorted(server.writes) == sorted(k for k in server.objects if k != "a/cm-002")  # every other object
    assert not progress.verified


@pytest.mark.parametrize("max_failures,stops", [(0, True), (2, True), (3, False)])
def test_more_failures_than_max_failures_stop_the_resource(max_failures, stops):
    server = FakeApiserver(count=9)
    server.fault("PATCH", lambda: api_error(422, "denied", "Invalid", method="PATCH"), count=3,
                 match=lambda p, q: p.endswith(("cm-000", "cm-001", "cm-002")))
    if stops:
        with pytest.raises(MigrationError, match="more than max_failures") as info:
            migrator(server, max_failures=max_failures).run()
        assert info.value.details["failures"][0]["object"] == "configmaps a/cm-000"
        assert len(server.writes) < 6
    else:
        progress = migrator(server, max_failures=max_failures).run()
        assert progress.failed == 3 and len(server.writes) == 6


def test_checkpoint_resumes_and_a_resumed_run_verifies_every_object(tmp_path):
    store = cp.FileStore(str(tmp_path))
    server = FakeApiserver(count=9)
    calls = {"n": 0}

    def gate():
        calls["n"] += 1
        if calls["n"] == 2:
            raise MigrationError("apiservers disagree")

    with pytest.raises(MigrationError, match="disagree"):
        migrator(server, store=store, hooks=mig.Hooks(gate=gate, gate_interval=0)).run()
    wanted = cp.Checkpoint("configmaps", ENDPOINT, TARGET.storage_hash, "run-2", "", 0)
    saved = json.load(open(store.path(wanted)))
    assert saved["chunks"] == 2 and saved["resource"] == "configmaps" and saved["run_id"] == "run-1"
    assert len(server.writes) == 6
    server.writes.clear()
    progress = migrator(server, store=store, run_id="run-2").run()
    # the last chunk, then a verification pass over all 9: the first 6 may have been undone meanwhile
    assert progress.resumed and progress.verification_pass and progress.verified
    assert len(server.writes) == 3 + 9
    assert not os.path.exists(store.path(wanted))


@pytest.mark.parametrize("change,needle", [
    ({"storage_hash": "OTHER"}, "made for storage hash OTHER"),
    ({"saved_at": time.time() - 3600}, "older than the apiserver's continue-token lifetime"),
    ({"format": 1}, "unreadable or of another format"),
])
def test_a_stale_checkpoint_is_discarded_with_a_message(tmp_path, change, needle):
    store = cp.FileStore(str(tmp_path))
    saved = cp.Checkpoint("configmaps", ENDPOINT, TARGET.storage_hash, "old-run", _token(1, "b/"), time.time()).to_dict()
    saved.update(change)
    wanted = cp.Checkpoint("configmaps", ENDPOINT, TARGET.storage_hash, "run-1", "", 0)
    with open(store.path(wanted), "w") as handle:
        json.dump(saved, handle)
    server = FakeApiserver(count=5)
    progress = migrator(server, store=store).run()
    assert not progress.resumed and len(server.writes) == 5 and progress.verified
    assert needle in progress.checkpoint_discarded


def test_checkpoint_path_is_per_cluster_and_resource(tmp_path):
    store = cp.FileStore(str(tmp_path))
    paths = {store.path(cp.Checkpoint(r, c, "h", "x", "", 0)) for r, c in
             (("configmaps", "https://a:6443"), ("configmaps", "https://b:6443"), ("widgets.example.com", "https://a:6443"))}
    assert len(paths) == 3 and all(p.startswith(str(tmp_path)) for p in paths)


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def test_deadline_stops_between_chunks():
    server = FakeApiserver(count=9)
    fake = FakeClock()
    original = server.request

    def slow(*args, **kwargs):
        fake.now += 2
        return original(*args, **kwargs)

    server.request = slow
    with pytest.raises(DeadlineExceeded, match="timed out"):
        migrator(server, deadline=Deadline(15, fake.clock)).run()
    assert len(server.writes) < 9


def test_a_tiny_qps_never_sleeps_past_the_deadline():
    server = FakeApiserver(count=9)
    fake = FakeClock()
    with pytest.raises(DeadlineExceeded):
        migrator(server, qps=0.01, sleeps=None, deadline=Deadline(5, fake.clock)).configure(sleep=fake.sleep).run()
    assert fake.now <= 5.0


def test_a_retry_storm_never_waits_past_the_deadline():
    server = FakeApiserver(count=3)
    fake = FakeClock()
    server.fault("PATCH", lambda: api_error(429, "slow down", "TooManyRequests", retry_after=3, method="PATCH"), count=100)
    with pytest.raises(DeadlineExceeded):
        migrator(server, policy=mig.MIGRATION_RETRY, deadline=Deadline(10, fake.clock)).configure(sleep=fake.sleep).run()
    assert fake.now <= 10.0
    assert server.objects["a/cm-000"]["encoded"] == "v0"  # nothing pretended to be done


def test_should_stop_stops_between_chunks_without_finishing():
    server = FakeApiserver(count=9)
    progress_seen = []
    hooks = mig.Hooks(should_stop=lambda: "the playbook is gone" if len(progress_seen) >= 1 else None,
                      on_progress=lambda p: progress_seen.append(p.objects_migrated))
    with pytest.raises(mig.Stopped, match="the playbook is gone"):
        migrator(server, hooks=hooks).run()
    assert progress_seen == [3] and len(server.writes) == 3


@pytest.mark.parametrize("qps,requests,elapsed", [(10, 11, 1.0), (2, 5, 2.0)])
def test_rate_limiter_spaces_requests(qps, requests, elapsed):
    fake = FakeClock()
    limiter = RateLimiter(qps, Deadline(None, fake.clock), burst=1, sleep=fake.sleep)
    for _unused in range(requests):
        limiter.acquire()
    assert fake.now == pytest.approx(elapsed)


def test_qps_zero_means_unlimited():
    limiter = RateLimiter(0, sleep=lambda s: pytest.fail("must not sleep"))
    for _unused in range(100):
        limiter.acquire()


def test_cluster_scoped_paths():
    target = mig.ResourceTarget(GroupResource("rbac.authorization.k8s.io", "clusterroles"), "v1", namespaced=False)
    assert target.list_path == "/apis/rbac.authorization.k8s.io/v1/clusterroles"
    assert target.object_path(None, "x") == "/apis/rbac.authorization.k8s.io/v1/clusterroles/x"
    assert TARGET.object_path("ns", "x") == "/api/v1/namespaces/ns/configmaps/x"
