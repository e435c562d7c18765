# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The client-side migrator against an in-memory fake apiserver: retries, 410, decode, denials, deadline, checkpoints.

Every test runs with both writes (``write_mode``): ``put`` (whole objects listed, each PUT back as read) and ``apply``
(metadata listed, identity-only server-side apply). ``W()`` is the HTTP method of the write under test.
"""

import base64
import copy
import json
import os
import time

import pytest
from kube_fakes import FakeClock

from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.client import ApiResponse
from ansible_collections.kubeupgrade.storage.plugins.module_utils._rewrite import checkpoint as cp
from ansible_collections.kubeupgrade.storage.plugins.module_utils._rewrite import migrator as mig
from ansible_collections.kubeupgrade.storage.plugins.module_utils._rewrite.ratelimit import (
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


MODE = {"write": mig.WRITE_PUT}
WRITE_METHODS = {mig.WRITE_PUT: "PUT", mig.WRITE_APPLY: "PATCH"}


def W():
    """The HTTP method of the write under test: PUT or PATCH."""
    return WRITE_METHODS[MODE["write"]]


@pytest.fixture(autouse=True, params=list(mig.WRITES))
def write_mode(request):
    MODE["write"] = request.param
    yield request.param
    MODE["write"] = mig.WRITE_PUT


class Fault:
    def __init__(self, method, error, count=1, match=None):
        self.method, self.error, self.count, self.match = method, error, count, match


def api_error(status, message="boom", reason="", retry_after=None, body=None, method="GET", path="/"):
    return ApiError(f"{method} {path} on apiserver {ENDPOINT} failed: HTTP {status} {reason}: {message}",
                    endpoint=ENDPOINT, method=method, path=path, status=status, reason=reason,
                    api_message=message, retry_after=retry_after, body=body)


class FakeApiserver:
    """Configmaps in memory: chunked LIST (whole objects, or metadata only for the PartialObjectMetadataList Accept)
    with continue tokens; PUT and apply with uid/resourceVersion preconditions as a real apiserver checks them (the
    uid first, also against a deleted object: 409)."""

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
        self.bodies = []
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
            return self._list(path, query, accept)
        if isinstance(body, bytes):
            body = json.loads(body)
        return self._write(method, path, body, content_type, query)

    @staticmethod
    def _item(stored, full):
        item = {"metadata": copy.deepcopy(stored["metadata"])}
        if full:
            item["data"] = copy.deepcopy(stored["data"])
        return item

    def _list(self, path, query, accept=None):
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
        full = "PartialObjectMetadataList" not in (accept or "")
        items = [self._item(self.objects[k], full) for k in page]
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
        kind = "ConfigMapList" if full else "PartialObjectMetadataList"
        return _resp({"kind": kind, "apiVersion": "v1" if full else "meta.k8s.io/v1", "metadata": metadata, "items": items})

    def _write(self, method, path, body, content_type, query):
        parts = path.split("/")
        key = f"{parts[4]}/{parts[6]}"
        current = self.objects.get(key)
        meta = body["metadata"]
        if method == "PUT" and meta.get("uid") and (current is None or meta["uid"] != current["metadata"]["uid"]):
            raise api_error(409, "StorageError: invalid object, Code: 4, AdditionalErrorMsg: Precondition failed: UID in "
                                 "precondition", "Conflict", method=method, path=path)
        if current is None:
            raise api_error(404 if method == "PUT" else 409, "not found", "NotFound", method=method, path=path)
        if meta.get("resourceVersion") != current["metadata"]["resourceVersion"] or (
                meta.get("uid") and meta["uid"] != current["metadata"]["uid"]):
            raise api_error(409, "the object has been modified", "Conflict", method=method, path=path)
        assert query["fieldManager"] == mig.FIELD_MANAGER
        if method == "PUT":
            assert content_type in (None, "application/json")
            # exactly the object as read: nothing added, nothing left out
            assert body == {"apiVersion": "v1", "kind": "ConfigMap", **self._item(current, True)}, body
        else:
            assert content_type == "application/apply-patch+yaml"
            assert set(body) == {"apiVersion", "kind", "metadata"}  # identity and preconditions only
            assert body["apiVersion"] == "v1" and body["kind"] == "ConfigMap"
        self.writes.append(key)
        self.bodies.append((method, body))
        current["encoded"] = "v1"
        return _resp({})


def _resp(doc):
    return ApiResponse(200, {}, json.dumps(doc).encode())


TARGET = mig.ResourceTarget(GroupResource("", "configmaps"), "v1", namespaced=True, kind="ConfigMap",
                            storage_hash="qFsyl6wFWjQ=")
FAST = RetryPolicy(attempts=4, base_delay=0.01, max_delay=0.02)


def migrator(server, sleeps=None, store=None, hooks=None, deadline=None, run_id="run-1", **kwargs):
    options = {"chunk_size": 3, "concurrency": 1, "policy": FAST, "write": MODE["write"]}
    options.update(kwargs)
    sleep = sleeps.append if sleeps is not None else (lambda _s: None)
    migrator = mig.ClientMigrator(server, TARGET, mig.ClientOptions(**options), mig.RunIdentity(run_id, ENDPOINT), store)
    return migrator.configure(deadline=deadline, hooks=hooks, sleep=sleep)


@pytest.mark.parametrize("concurrency", [1, 4])
def test_every_object_rewritten_once_content_unchanged(concurrency, write_mode):
    server = FakeApiserver(count=10)
    before = {k: copy.deepcopy(v["data"]) for k, v in server.objects.items()}
    progress = migrator(server, concurrency=concurrency).run()
    assert sorted(server.writes) == sorted(before)
    assert all(o["encoded"] == "v1" for o in server.objects.values())
    assert {k: v["data"] for k, v in server.objects.items()} == before
    assert progress.objects_written == 10 and progress.chunks == 4 and progress.objects_remaining == 0
    assert progress.verified and not progress.resumed and progress.write == write_mode and not progress.write_fallback
    lists = [c for c in server.calls if c[0] == "GET"]
    assert all(c[2]["limit"] == 3 for c in lists) and len(lists) == 4
    list_accepts = {a for (m, _p, _q), a in zip(server.calls, server.accepts) if m == "GET"}
    # put: whole objects, as stored where served so, else JSON (each PUT back exactly as read, the fake checks it; it
    # answers JSON); apply: metadata only
    assert list_accepts == ({mig.FULL_PROTOBUF_OR_JSON} if write_mode == mig.WRITE_PUT else {mig.METADATA_LIST})
    assert progress.encoding == ("json" if write_mode == mig.WRITE_PUT else ""), progress
    assert {m for m, _b in server.bodies} == {W()}


def test_conflict_and_gone_count_as_done_and_are_never_recreated():
    server = FakeApiserver(count=6)
    server.deleted_after_list = {"a/cm-000"}
    server.modified_after_list = {"b/cm-001"}
    progress = migrator(server).run()
    assert progress.gone + progress.conflicts == 2 and progress.objects_written == 4
    assert "a/cm-000" not in server.objects  # a deleted object stays deleted
    assert progress.objects_migrated == 6 and progress.verified


def test_an_object_changed_since_it_was_listed_is_not_overwritten():
    server = FakeApiserver(count=6)
    original = server._list

    def list_then_change(path, query, accept=None):
        page = original(path, query, accept)
        if "a/cm-002" in server.objects and not query.get("continue"):
            server.rv += 1
            server.objects["a/cm-002"]["data"] = {"k": "changed by someone"}
            server.objects["a/cm-002"]["metadata"]["resourceVersion"] = str(server.rv)
        return page

    server._list = list_then_change
    progress = migrator(server).run()
    assert server.objects["a/cm-002"]["data"] == {"k": "changed by someone"}  # the write as read got 409
    assert progress.conflicts == 1 and progress.objects_written == 5 and progress.verified


def test_an_object_listed_without_uid_or_resource_version_is_never_written():
    server = FakeApiserver(count=4)
    original = server._list

    def without(path, query, accept=None):
        response = original(path, query, accept)
        page = json.loads(response.data)
        for item in page["items"]:
            if item["metadata"]["name"] == "cm-001":
                del item["metadata"]["uid"]
            if item["metadata"]["name"] == "cm-002":
                del item["metadata"]["resourceVersion"]
        return _resp(page)

    server._list = without
    progress = migrator(server).run()
    assert sorted(server.writes) == ["a/cm-000", "b/cm-003"] and not progress.verified
    assert [(f["object"], f["reason"]) for f in progress.failures] == [
        ("configmaps a/cm-002", "NoPreconditions"), ("configmaps b/cm-001", "NoPreconditions")]
    assert "re-create a deleted object" in progress.failures[0]["why"]
    assert [f["message"] for f in progress.failures] == ["the object as listed has no metadata.resourceVersion",
                                                         "the object as listed has no metadata.uid"]


RBAC_DENIAL = ('configmaps "cm-000" is forbidden: User "system:serviceaccount:kube-system:migrator" cannot update resource '
               '"configmaps" in API group "" in the namespace "a"')


def test_put_forbidden_by_rbac_goes_on_with_apply_and_says_why(write_mode):
    server = FakeApiserver(count=7)
    server.fault("PUT", lambda: api_error(403, RBAC_DENIAL, "Forbidden", method="PUT"), count=100)
    progress = migrator(server, concurrency=3).run()
    assert progress.verified and progress.failed == 0 and progress.objects_written == 7
    assert {m for m, _b in server.bodies} == {"PATCH"}  # every object written, by apply
    assert progress.write == mig.WRITE_APPLY
    if write_mode == mig.WRITE_PUT:
        assert "RBAC forbids update on configmaps" in progress.write_fallback and "write: apply" in progress.write_fallback
        assert len([c for c in server.calls if c[0] == "PUT"]) <= 3  # one refused PUT per writer at most
        # the next LISTs are metadata only, and as large as chunk_size again
        list_accepts = [a for (m, _p, _q), a in zip(server.calls, server.accepts) if m == "GET"]
        assert list_accepts[0] == mig.FULL_PROTOBUF_OR_JSON and list_accepts[-1] == mig.METADATA_LIST
    else:
        assert not progress.write_fallback and not [c for c in server.calls if c[0] == "PUT"]


def test_a_put_refused_by_an_admission_policy_is_a_failed_object_not_a_fallback(write_mode):
    server = FakeApiserver(count=4)
    denial = "admission webhook \"deny.example.com\" denied the request: frozen"
    server.fault(W(), api_error(403, denial, "Forbidden", method=W()), match=lambda p, q: p.endswith("cm-001"))
    progress = migrator(server).run()
    assert progress.write == write_mode and not progress.write_fallback
    assert [f["object"] for f in progress.failures] == ["configmaps b/cm-001"] and not progress.verified


@pytest.mark.parametrize("chunk_size,chunk_bytes,limits", [
    pytest.param(500, mig.CHUNK_BYTES, [mig.FIRST_CHUNK, 500], id="small-objects-first-chunk-then-chunk_size"),
    pytest.param(20, mig.CHUNK_BYTES, [20, 20, 20, 20], id="chunk_size-below-the-first-chunk"),
    pytest.param(500, 2000, [mig.FIRST_CHUNK, 10, 10], id="large-objects-fewer-per-chunk"),  # ~200 bytes each
])
def test_put_chunks_hold_about_chunk_bytes(write_mode, chunk_size, chunk_bytes, limits):
    server = FakeApiserver(count=80)
    for stored in server.objects.values():
        stored["data"] = {"k": "x" * 60}
    progress = migrator(server, chunk_size=chunk_size, chunk_bytes=chunk_bytes).run()
    asked = [c[2]["limit"] for c in server.calls if c[0] == "GET"]
    if write_mode == mig.WRITE_PUT:
        assert asked[:len(limits)] == limits
    else:
        assert set(asked) == {chunk_size}  # metadata only: chunk_size objects, whatever their size
    assert progress.objects_written == 80 and progress.verified


@pytest.mark.parametrize("item,expected", [
    pytest.param({"metadata": {"name": "x"}}, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}},
                 id="list-item-of-a-built-in"),
    pytest.param({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"n": 1.5}},
                 {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"n": 1.5}},
                 id="item-with-its-own-type"),
])
def test_put_body_is_the_object_as_read(item, expected):
    body, content_type = mig.put_body(TARGET, item)
    assert json.loads(body) == expected and content_type == "application/json"


@pytest.mark.parametrize("status,reason,retry_after", [
    (429, "TooManyRequests", 2.5), (500, "InternalError", None), (503, "ServiceUnavailable", 1), (504, "Timeout", None)])
@pytest.mark.parametrize("method", ["GET", "WRITE"])
def test_transient_statuses_are_retried_honouring_retry_after(status, reason, retry_after, method):
    method = W() if method == "WRITE" else method
    server = FakeApiserver(count=4)
    server.fault(method, api_error(status, "try later", reason, retry_after=retry_after, method=method), count=2)
    sleeps = []
    progress = migrator(server, sleeps=sleeps).run()
    assert progress.objects_written == 4 and progress.retries == 2
    assert len(sleeps) == 2
    if retry_after:
        assert all(s >= retry_after for s in sleeps)


@pytest.mark.parametrize("method", ["GET", "WRITE"])
def test_dropped_connections_and_timeouts_are_retried(method):
    method = W() if method == "WRITE" else method
    server = FakeApiserver(count=4)
    server.fault(method, EndpointUnreachable("connection reset", endpoint=ENDPOINT), count=3)
    progress = migrator(server).run()
    assert progress.objects_written == 4 and progress.retries == 3


def test_an_object_that_keeps_failing_is_reported_and_the_resource_goes_on():
    server = FakeApiserver(count=6)
    server.fault(W(), lambda: api_error(503, "unavailable", "ServiceUnavailable", method=W()), count=4,
                 match=lambda p, q: p.endswith("cm-000"))
    progress = migrator(server).run()
    assert not progress.verified and progress.failed == 1 and progress.objects_written == 5
    assert progress.failures[0]["object"] == "configmaps a/cm-000" and "retrying" in progress.failures[0]["why"]
    assert len([c for c in server.calls if c[0] == W() and c[1].endswith("cm-000")]) == 4


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
    server.fault(W(), api_error(500, DECODE_MESSAGE, method=W()), match=lambda p, q: p.endswith("cm-001"))
    progress = migrator(server).run()
    assert progress.failures[0]["object"] == "configmaps b/cm-001" and "cannot decode" in progress.failures[0]["why"]
    assert len([c for c in server.calls if c[0] == W() and c[1].endswith("cm-001")]) == 1
    assert not progress.verified


@pytest.mark.parametrize("status,reason,message", [
    (403, "Forbidden", 'configmaps "cm-002" is forbidden: User "alice" cannot patch resource'),
    (405, "MethodNotAllowed", "the server does not allow this method"),
    (422, "Invalid", "ValidatingAdmissionPolicy 'deny' with binding 'deny' denied request: frozen"),
    (400, "BadRequest", "admission webhook \"deny.example.com\" denied the request"),
])
def test_a_refused_object_is_named_and_the_resource_goes_on(status, reason, message):
    server = FakeApiserver(count=6)
    server.fault(W(), api_error(status, message, reason, method=W()), match=lambda p, q: p.endswith("cm-002"))
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
    server.fault(W(), lambda: api_error(422, "denied", "Invalid", method=W()), count=3,
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
    server.fault(W(), lambda: api_error(429, "slow down", "TooManyRequests", retry_after=3, method=W()), count=100)
    with pytest.raises(DeadlineExceeded):
        migrator(server, policy=mig.MIGRATION_RETRY, deadline=Deadline(10, fake.clock)).configure(sleep=fake.sleep).run()
    assert fake.now <= 10.0
    assert server.objects["a/cm-000"]["encoded"] == "v0"  # nothing pretended to be done


@pytest.mark.parametrize("failure, needles", [
    (lambda: api_error(500, "etcdserver: request timed out", "InternalError", path="/api/v1/configmaps"),
     ["HTTP 500 InternalError from " + ENDPOINT, "(GET /api/v1/configmaps)", "etcdserver: request timed out"]),
    (lambda: EndpointUnreachable(f"apiserver {ENDPOINT} did not answer GET /api/v1/configmaps: Connection reset by peer",
                                 endpoint=ENDPOINT, method="GET", path="/api/v1/configmaps"),
     ["no answer from " + ENDPOINT, "Connection reset by peer"]),
])
def test_a_timeout_under_persistent_failures_names_the_last_one(failure, needles):
    """Persistent 500s (or dropped connections) and a short timeout: the timeout says every request failed, and how."""
    server = FakeApiserver(count=3)
    fake = FakeClock()
    server.fault("GET", failure, count=1000)
    with pytest.raises(DeadlineExceeded) as raised:
        migrator(server, policy=mig.MIGRATION_RETRY, deadline=Deadline(10, fake.clock)).configure(sleep=fake.sleep).run()
    message = str(raised.value)
    assert message.startswith(f"Migration of {TARGET.name} timed out after 0 objects (0 chunks): every request since ")
    assert all(needle in message for needle in needles), message
    attempts = len(server.calls)
    assert f"({attempts} attempts); re-run to resume" in message and attempts > 3
    assert raised.value.details["failed_attempts"] == attempts
    assert raised.value.details["last_error"]["endpoint"] == ENDPOINT and fake.now <= 10.0


def test_an_answer_ends_the_failure_streak():
    """Failures followed by answers are not "every request failed": a timeout after them names no failure."""
    server = FakeApiserver(count=9)
    fake = FakeClock()
    server.fault("GET", lambda: api_error(500, "once", "InternalError"), count=2)
    original = server.request

    def slow(*args, **kwargs):
        fake.now += 2
        return original(*args, **kwargs)

    server.request = slow
    with pytest.raises(DeadlineExceeded) as raised:
        migrator(server, deadline=Deadline(15, fake.clock)).configure(sleep=fake.sleep).run()
    assert "every request" not in str(raised.value) and "last_error" not in raised.value.details


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
