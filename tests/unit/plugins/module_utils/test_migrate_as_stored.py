# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""An object the apiserver refuses as a change when written back unchanged is written back as stored (protobuf).

A ControllerRevision's ``data`` sent with spaces (Python's ``json.dumps``) is stored byte for byte and served
compacted, so a PUT of it as read changes ``data``: ``422 Invalid ... data: field is immutable``. The fake below
refuses a JSON PUT of such objects the same way, serves every object as protobuf (the ``k8s\\x00`` envelope) and
accepts a PUT of exactly the bytes it served, checking their uid and resourceVersion as preconditions.
"""

from __future__ import annotations

import copy
import json

import pytest
from test_migrate_migrator import ENDPOINT, FAST, TARGET, FakeApiserver, _resp, api_error
from test_migrate_objects import ObjectApiserver

from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.client import ApiResponse
from ansible_collections.kubeupgrade.storage.plugins.module_utils._migrate import runner
from ansible_collections.kubeupgrade.storage.plugins.module_utils._rewrite import migrator as mig
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ApiError, MigrationError

IMMUTABLE_CAUSE = {"reason": "FieldValueInvalid", "field": "data",
                   "message": 'Invalid value: {"a":1,"b":[1,2]}: field is immutable'}


def immutable(path="/", method="PUT", causes=(IMMUTABLE_CAUSE,)):
    """The Status a real kube-apiserver (1.28 to 1.36) answers to a PUT of such a ControllerRevision as read."""
    message = 'ControllerRevision.apps "cr" is invalid: ' + "; ".join(f"{c['field']}: {c['message']}" for c in causes)
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "reason": "Invalid",
            "details": {"name": "cr", "group": "apps", "kind": "ControllerRevision", "causes": list(causes)}, "code": 422}
    return api_error(422, message, "Invalid", body=body, method=method, path=path)


def _key(path):
    parts = path.split("/")
    return f"{parts[4]}/{parts[6]}"


class AsStored:
    """Protobuf GET and PUT for the fakes; ``spaced`` objects are refused as a change when PUT as JSON."""

    def setup(self, spaced=(), served_type=mig.PROTOBUF):
        self.spaced = set(spaced)
        self.served_type = served_type
        self.served = {}  # key -> the protobuf bytes last served
        self.as_stored = []  # keys written by a PUT of those bytes
        self.after_protobuf_get = {}  # key -> what someone else does right after the protobuf GET
        self.after_refusal = {}  # key -> what someone else does right after the JSON PUT was refused
        return self

    def request(self, method, path, query=None, body=None, content_type="application/json", accept=None, timeout=None):
        if accept == mig.PROTOBUF or content_type == mig.PROTOBUF:
            self.calls.append((method, path, dict(query or {})))
            self.accepts.append(accept)
            error = self._take_fault(method, path, dict(query or {}))
            if error is not None:
                raise error
            return self._protobuf(method, path, query, body)
        if method == "PUT" and _key(path) in self.spaced and _key(path) in self.objects:
            self.calls.append((method, path, dict(query or {})))
            self.accepts.append(accept)
            self.after_refusal.pop(_key(path), lambda: None)()
            raise immutable(path)
        return super().request(method, path, query, body, content_type, accept, timeout)

    def _protobuf(self, method, path, query, body):
        key = _key(path)
        if method == "GET":
            if key not in self.objects:
                raise api_error(404, "not found", "NotFound", path=path)
            stored = self.objects[key]
            data = mig.PROTOBUF_MAGIC + json.dumps({"metadata": stored["metadata"], "data": stored["data"]},
                                                   separators=(", ", ": ")).encode()
            self.served[key] = data
            self.after_protobuf_get.pop(key, lambda: None)()
            if self.served_type != mig.PROTOBUF:
                return ApiResponse(200, {"Content-Type": self.served_type}, data[len(mig.PROTOBUF_MAGIC):])
            return ApiResponse(200, {"Content-Type": self.served_type}, data)
        assert method == "PUT" and query == {"fieldManager": mig.FIELD_MANAGER}
        assert body == self.served[key]  # the very bytes served: nothing parsed, nothing changed
        meta = json.loads(body[len(mig.PROTOBUF_MAGIC):])["metadata"]
        current = self.objects.get(key)
        if current is None or meta["uid"] != current["metadata"]["uid"]:
            raise api_error(409, "Precondition failed: UID in precondition", "Conflict", method="PUT", path=path)
        if meta["resourceVersion"] != current["metadata"]["resourceVersion"]:
            raise api_error(409, "the object has been modified", "Conflict", method="PUT", path=path)
        self.rv += 1
        current["metadata"]["resourceVersion"] = str(self.rv)
        current["encoded"] = "v1"
        self.writes.append(key)
        self.as_stored.append(key)
        return _resp({})


class StoredApiserver(AsStored, FakeApiserver):
    pass


class StoredObjectApiserver(AsStored, ObjectApiserver):
    pass


def migrator(server, **kwargs):
    options = {"chunk_size": 3, "concurrency": 1, "policy": FAST}
    options.update(kwargs)
    return mig.ClientMigrator(server, TARGET, mig.ClientOptions(**options), mig.RunIdentity("run", ENDPOINT), None) \
        .configure(sleep=lambda _s: None)


SPACED = ("a/cm-002", "b/cm-005")


@pytest.mark.parametrize("concurrency", [1, 3])
def test_an_object_refused_as_a_change_when_put_as_read_is_written_as_stored(concurrency):
    server = StoredApiserver(count=8).setup(spaced=SPACED)
    before = {k: copy.deepcopy(v["data"]) for k, v in server.objects.items()}
    progress = migrator(server, concurrency=concurrency).run()
    assert progress.failed == 0 and progress.verified, progress.failures
    assert all(o["encoded"] == "v1" for o in server.objects.values())  # every object rewritten
    assert {k: v["data"] for k, v in server.objects.items()} == before  # none changed
    assert sorted(server.as_stored) == sorted(SPACED)
    assert progress.objects_written == 8 and progress.objects_written_as_stored == 2 and progress.objects_migrated == 8
    # which write: put for the resource, protobuf (as stored) for the two refused, and why
    assert progress.write == mig.WRITE_PUT and not progress.write_fallback
    assert progress.write_as_stored.startswith("protobuf: PUT back as read, configmaps ")
    assert "HTTP 422: data: field is immutable" in progress.write_as_stored
    fields = mig.progress_fields(progress)
    assert fields["objects_written_as_stored"] == 2 and fields["write_as_stored"] == progress.write_as_stored


def test_nothing_is_written_as_stored_when_every_put_as_read_is_accepted():
    server = StoredApiserver(count=5).setup()
    progress = migrator(server).run()
    assert progress.verified and progress.objects_written == 5
    assert progress.objects_written_as_stored == 0 and progress.write_as_stored == "" and not server.served


def test_an_identity_only_apply_refused_as_a_change_is_written_as_stored_too():
    server = StoredApiserver(count=4).setup()
    server.fault("PATCH", immutable(method="PATCH"), match=lambda p, q: p.endswith("cm-001"))
    progress = migrator(server, write=mig.WRITE_APPLY).run()
    assert progress.verified and progress.objects_written == 4 and server.as_stored == ["b/cm-001"]
    assert progress.write == mig.WRITE_APPLY
    assert progress.write_as_stored.startswith("protobuf: written with the identity-only apply, configmaps b/cm-001")


def _bump(server, key):
    def change():
        server.rv += 1
        server.objects[key]["metadata"]["resourceVersion"] = str(server.rv)
        server.objects[key]["data"] = {"k": "changed by someone else"}
    return change


def test_the_as_stored_write_keeps_the_preconditions_and_never_recreates():
    server = StoredApiserver(count=6).setup(spaced=("a/cm-000", "b/cm-001", "a/cm-002"))
    server.after_protobuf_get["a/cm-000"] = _bump(server, "a/cm-000")  # updated between the GET and the PUT
    server.after_protobuf_get["b/cm-001"] = lambda: server.objects.pop("b/cm-001")  # deleted meanwhile
    server.after_refusal["a/cm-002"] = lambda: server.objects.pop("a/cm-002")  # deleted before the protobuf GET
    progress = migrator(server, chunk_size=10).run()
    assert progress.failed == 0 and progress.verified, progress.failures
    assert server.as_stored == [] and progress.objects_written_as_stored == 0
    assert server.objects["a/cm-000"]["data"] == {"k": "changed by someone else"}  # not overwritten
    assert "b/cm-001" not in server.objects and "a/cm-002" not in server.objects  # not re-created
    assert progress.conflicts == 2 and progress.gone == 1 and progress.objects_written == 3


@pytest.mark.parametrize("error", [
    pytest.param(api_error(422, "ValidatingAdmissionPolicy 'deny' denied request: frozen", "Invalid"), id="policy"),
    pytest.param(immutable(causes=({"reason": "FieldValueRequired", "field": "spec", "message": "Required value"},)),
                 id="another-cause"),
    pytest.param(api_error(409, "field is immutable", "Conflict"), id="not-422"),
])
def test_a_refusal_that_is_not_about_an_immutable_field_is_a_failure_not_a_fallback(error):
    server = StoredApiserver(count=4).setup()
    server.fault("PUT", error, match=lambda p, q: p.endswith("cm-001"))
    progress = migrator(server).run()
    assert not server.served and progress.objects_written_as_stored == 0
    if error.status == 409:
        assert progress.conflicts == 1 and progress.verified
    else:
        assert [f["object"] for f in progress.failures] == ["configmaps b/cm-001"] and not progress.verified


@pytest.mark.parametrize("error, needle", [
    pytest.param(immutable(), "data: field is immutable", id="causes"),
    pytest.param(api_error(422, "spec: Invalid value: 3: field is immutable", "Invalid",
                           body={"kind": "Status", "details": {}}), "field is immutable", id="no-causes"),
])
def test_refused_as_a_change_reads_the_causes_else_the_message(error, needle):
    assert mig.refused_as_a_change(error)
    assert needle in mig._causes(error)
    assert not mig.refused_as_a_change(ApiError("x", status=422, reason="Invalid", api_message="frozen"))


@pytest.mark.parametrize("served_type, fault, reason", [
    pytest.param("application/json", None, "NotProtobuf", id="a-custom-resource-served-as-json"),
    pytest.param(mig.PROTOBUF, ("PUT", lambda: immutable(method="PUT")), "Invalid", id="refused-as-stored-too"),
    pytest.param(mig.PROTOBUF, ("GET", lambda: api_error(403, "cannot get resource", "Forbidden")), "Forbidden",
                 id="get-forbidden"),
])
def test_an_object_refused_as_stored_too_names_a_step_an_operator_can_take(served_type, fault, reason):
    server = StoredApiserver(count=4).setup(spaced=("b/cm-001",), served_type=served_type)
    if fault:
        server.fault(fault[0], fault[1], match=lambda p, q: p.endswith("cm-001") and (fault[0] == "PUT" or "limit" not in q))
    progress = migrator(server).run()
    assert progress.failed == 1 and not progress.verified and progress.objects_written == 3
    failure = progress.failures[0]
    assert failure["object"] == "configmaps b/cm-001" and failure["reason"] == reason
    why = failure["why"]
    assert "PUT back as read it was refused as a change (HTTP 422: data: field is immutable)" in why
    assert "Next step: read it with `kubectl get configmaps -n b cm-001 -o json`" in why
    assert "re-run with write: apply (the roles' kubeupgrade_migration_write: apply)" in why
    # the task's message names the step too
    entry = {"objects_failed": 1, "failed_objects": progress.failures}
    assert "kubectl get configmaps -n b cm-001 -o json" in runner._failed_objects(entry)


def test_too_many_failures_name_the_step_of_the_first():
    server = StoredApiserver(count=4).setup(spaced=("a/cm-000",), served_type="application/json")
    with pytest.raises(MigrationError, match="more than max_failures") as info:
        migrator(server, max_failures=0).run()
    assert "kubectl get configmaps -n a cm-000 -o json" in str(info.value)


@pytest.mark.parametrize("write", list(mig.WRITES))
def test_objects_from_an_audit_get_the_same_fallback(write):
    server = StoredObjectApiserver(count=6).setup(spaced=("a/cm-000", "a/cm-004"))
    if write == mig.WRITE_APPLY:
        server.fault("PATCH", immutable(method="PATCH"), count=2, match=lambda p, q: p.endswith(("cm-000", "cm-004")))
    before = {k: copy.deepcopy(v["data"]) for k, v in server.objects.items()}
    listed = ["a/cm-000", "b/cm-001", "a/cm-004"]
    options = mig.ClientOptions(chunk_size=2, concurrency=1, policy=FAST, write=write)
    migrator = mig.ObjectListMigrator(server, TARGET, options, mig.RunIdentity("run", ENDPOINT), None)
    progress = migrator.configure(sleep=lambda _s: None).run_objects(listed)
    assert progress.verified and progress.failed == 0, progress.failures
    assert sorted(server.as_stored) == ["a/cm-000", "a/cm-004"] and progress.objects_written_as_stored == 2
    assert {k for k, v in server.objects.items() if v["encoded"] == "v1"} == set(listed)
    assert {k: v["data"] for k, v in server.objects.items()} == before
    assert progress.write_as_stored.startswith("protobuf: ")
