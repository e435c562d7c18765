# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Kubernetes' protobuf answers as the collection reads them (``_http/protobuf.py``): a list's items keep their very
bytes, an error's Status reads as the JSON document it stands for, and what is not such an answer is refused with a
reason. The field numbers are Kubernetes' (tests/unit/plugins/module_utils/etcd/test_etcd_protos.py); real answers
are read in tests/integration/test_real_migration_write.py."""

from __future__ import annotations

import json

import pytest

from ansible_collections.kubeupgrade.storage.plugins.module_utils._http import protobuf
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.client import ApiResponse, _error_body
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.k8spb import k8s_pb2 as pb
from ansible_collections.kubeupgrade.storage.plugins.module_utils._rewrite import migrator as mig
from ansible_collections.kubeupgrade.storage.plugins.module_utils.resources import GroupResource


def _envelope(api_version, kind, raw):
    return protobuf.MAGIC + pb.Unknown(typeMeta=pb.TypeMeta(apiVersion=api_version, kind=kind), raw=raw,
                                       contentEncoding=b"", contentType=b"").SerializeToString()


def _object(name, namespace=b"", uid=b"u-1", resource_version=b"7", tail=b"\x12\x05\x0a\x01k\x12\x00"):
    """An object's bytes: its metadata as Go writes it (unset strings as empty) and a field the collection never reads."""
    meta = pb.ObjectMeta(name=name, namespace=namespace, uid=uid, resourceVersion=resource_version)
    return pb.Object(metadata=meta).SerializeToString() + tail


def _response(data, content_type=protobuf.PROTOBUF, status=200):
    return ApiResponse(status, {"Content-Type": content_type}, data)


def test_a_list_keeps_each_items_bytes_and_reads_its_identity_and_paging():
    items = [_object(b"cm-0", b"app"), _object(b"cm-1", b"app", uid=b"u-2", resource_version=b"9")]
    meta = pb.ListMeta(resourceVersion=b"12", remainingItemCount=3)
    setattr(meta, "continue", b"token")
    data = _envelope(b"v1", b"ConfigMapList", pb.List(metadata=meta, items=items).SerializeToString())
    page = protobuf.list_page(data)
    assert page["kind"] == "ConfigMapList" and page["apiVersion"] == "v1"
    assert page["metadata"] == {"resourceVersion": "12", "continue": "token", "remainingItemCount": 3}
    assert [item["metadata"] for item in page["items"]] == [
        {"name": "cm-0", "namespace": "app", "uid": "u-1", "resourceVersion": "7"},
        {"name": "cm-1", "namespace": "app", "uid": "u-2", "resourceVersion": "9"}]
    # the PUT body is the item's bytes untouched (the field never read included), in an envelope of its kind
    body, content_type = mig.put_body(mig.ResourceTarget(GroupResource("", "configmaps"), "v1", True, "ConfigMap"),
                                      page["items"][1])
    assert content_type == protobuf.PROTOBUF and body.startswith(protobuf.MAGIC)
    sent = pb.Unknown.FromString(body[len(protobuf.MAGIC):])
    assert (sent.typeMeta.apiVersion, sent.typeMeta.kind, sent.raw) == (b"v1", b"ConfigMap", items[1])


def test_an_item_without_uid_or_resource_version_lacks_them_as_a_json_item_would():
    data = _envelope(b"v1", b"ConfigMapList", pb.List(items=[_object(b"cm", uid=b"", resource_version=b"")]).SerializeToString())
    [item] = protobuf.list_page(data)["items"]
    assert item["metadata"] == {"name": "cm"} and mig.missing_preconditions(item) == "uid and resourceVersion"


def test_one_object_read_by_a_get():
    item = protobuf.stored_object(_envelope(b"apps/v1", b"ControllerRevision", _object(b"rev", b"app")))
    assert item["metadata"]["name"] == "rev" and (item.api_version, item.kind) == ("apps/v1", "ControllerRevision")


def test_an_error_status_reads_as_its_json_document():
    cause = pb.StatusCause(reason=b"FieldValueInvalid", message=b"Invalid value", field=b"metadata.name")
    meta = pb.ListMeta(resourceVersion=b"")
    setattr(meta, "continue", b"fallback-token")
    status = pb.Status(metadata=meta, status=b"Failure", message=b"the list expired", reason=b"Expired", code=410,
                       details=pb.StatusDetails(name=b"", group=b"", kind=b"configmaps", causes=[cause], retryAfterSeconds=2,
                                                uid=b""))
    data = _envelope(b"v1", b"Status", status.SerializeToString())
    document, message = _error_body(_response(data, status=410))
    assert message == "the list expired"
    assert document == {"kind": "Status", "apiVersion": "v1", "metadata": {"continue": "fallback-token"},
                        "status": "Failure", "message": "the list expired", "reason": "Expired", "code": 410,
                        "details": {"kind": "configmaps", "retryAfterSeconds": 2, "causes": [
                            {"reason": "FieldValueInvalid", "message": "Invalid value", "field": "metadata.name"}]}}


@pytest.mark.parametrize("data, content_type", [
    (b"k8s\x00\xff\xff\xff", protobuf.PROTOBUF),  # says protobuf, does not decode
    (b"<html>bad gateway</html>", protobuf.PROTOBUF),  # says protobuf, is not
    (b"k8s\x00" + pb.Unknown(typeMeta=pb.TypeMeta(apiVersion=b"v1", kind=b"ConfigMap")).SerializeToString(), protobuf.PROTOBUF),
], ids=["truncated", "not-an-envelope", "not-a-status"])
def test_an_error_answer_that_is_no_protobuf_status_is_its_own_text(data, content_type):
    document, _message = _error_body(_response(data, content_type, status=502))
    assert document is None


@pytest.mark.parametrize("data", [b"k8s\x00\x0a\xff", b"{}", b""], ids=["truncated", "json", "empty"])
def test_a_list_that_is_not_one_is_refused_with_a_reason(data):
    with pytest.raises(protobuf.NotDecodable):
        protobuf.list_page(data)


def test_served_needs_the_content_type_and_the_magic():
    assert protobuf.served(_response(b"k8s\x00..."))
    assert protobuf.served(_response(b"k8s\x00...", protobuf.PROTOBUF + "; charset=binary"))
    assert not protobuf.served(_response(b"{}", "application/json"))
    assert not protobuf.served(_response(b"{}", protobuf.PROTOBUF))


def _status(code, reason, message, continue_token=b""):
    meta = pb.ListMeta()
    setattr(meta, "continue", continue_token)
    status = pb.Status(metadata=meta, status=b"Failure", message=message, reason=reason, code=code,
                       details=pb.StatusDetails(kind=b"configmaps"))
    return _envelope(b"v1", b"Status", status.SerializeToString())


class _Apiserver:
    """``count`` ConfigMaps of namespace app, listed (two a page) and read as protobuf when asked, else as JSON, as a
    real apiserver answers them; ``answers`` (method -> a list of error answers (status, body), popped one per request,
    None for a normal answer) stand in for the next answers of that method. Every request and PUT is noted."""

    endpoint = "https://cp1:6443"

    def __init__(self, count=2, answers=None, garbled=False):
        self.garbled, self.answers, self.accepts, self.puts, self.queries = garbled, answers or {}, [], [], []
        self.items = [_object(f"cm-{i}".encode(), b"app", uid=f"u-{i}".encode()) for i in range(count)]

    def _answer(self, method, path):
        """Raise the next queued error answer of ``method``, as the client does (None in the queue: answer normally)."""
        queued = self.answers.get(method)
        entry = queued.pop(0) if queued else None
        if entry is not None:
            status, data = entry
            content_type = protobuf.PROTOBUF if data.startswith(protobuf.MAGIC) else "application/json"
            raise _error(method, path, _response(data, content_type, status))

    def request(self, method, path, query=None, body=None, **options):
        if method == "PUT":
            self.puts.append((path, options.get("content_type"), body))
            self._answer(method, path)
            return _response(b"{}", "application/json")
        accept = options.get("accept", "")
        self.accepts.append(accept)
        self.queries.append(dict(query or {}))
        self._answer(method, path)
        start = int((query or {}).get("continue") or 0)
        names = [f"cm-{i}" for i in range(len(self.items))]
        if path.rsplit("/", 1)[-1] in names:  # a GET of one object
            index = names.index(path.rsplit("/", 1)[-1])
            if protobuf.PROTOBUF in accept:
                return _response(_envelope(b"v1", b"ConfigMap", self.items[index]))
            return _response(json.dumps(self._json(index)).encode(), "application/json")
        end = min(start + 2, len(self.items))
        token = str(end).encode() if end < len(self.items) else b""
        if protobuf.PROTOBUF in accept:
            if self.garbled:
                return _response(protobuf.MAGIC + b"\x0a\xff")
            meta = pb.ListMeta()
            setattr(meta, "continue", token)
            page = pb.List(metadata=meta, items=self.items[start:end])
            return _response(_envelope(b"v1", b"ConfigMapList", page.SerializeToString()))
        items = [self._json(i) for i in range(start, end)]
        return _response(json.dumps({"metadata": {"continue": token.decode()}, "items": items}).encode(), "application/json")

    @staticmethod
    def _json(i):
        return {"metadata": {"name": f"cm-{i}", "namespace": "app", "uid": f"u-{i}", "resourceVersion": "7"}}


def _error(method, path, response):
    from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.client import ApiClient

    client = ApiClient.__new__(ApiClient)
    client.endpoint = _Apiserver.endpoint
    return client._error(method, path, response)


TARGET = mig.ResourceTarget(GroupResource("", "configmaps"), "v1", True, "ConfigMap")
FAST = mig.ClientOptions(concurrency=1, policy=mig.RetryPolicy(attempts=2, base_delay=0.0, max_delay=0.0, budget=1.0))


def _migrator(server, cls=mig.ClientMigrator, **options):
    return cls(server, TARGET, mig.ClientOptions(**{**FAST.__dict__, **options})).configure(sleep=lambda _s: None)


@pytest.mark.parametrize("concurrency", [1, 4])
def test_the_migrator_lists_as_protobuf_and_puts_each_items_bytes_back(concurrency):
    server = _Apiserver(count=5)
    progress = _migrator(server, concurrency=concurrency).run()
    assert progress.verified and progress.objects_written == 5 and progress.encoding == "protobuf"
    assert set(server.accepts) == {mig.FULL_PROTOBUF_OR_JSON} and len(server.accepts) == 3  # pages of 2, 2 and 1
    assert {(path, content_type) for path, content_type, _body in server.puts} == {
        (f"/api/v1/namespaces/app/configmaps/cm-{i}", protobuf.PROTOBUF) for i in range(5)}
    assert sorted(pb.Unknown.FromString(body[len(protobuf.MAGIC):]).raw for _p, _c, body in server.puts) == sorted(server.items)


def test_a_protobuf_answer_that_does_not_decode_turns_the_resource_to_json():
    server = _Apiserver(garbled=True)
    progress = _migrator(server).run()
    assert progress.verified and progress.objects_written == 2 and progress.failed == 0
    assert progress.encoding == "json" and server.accepts == [mig.FULL_PROTOBUF_OR_JSON, mig.FULL_JSON]
    assert "could not be read" in progress.encoding_fallback, progress.encoding_fallback
    assert {content_type for _p, content_type, _b in server.puts} == {"application/json"}


def test_an_apiserver_that_cannot_encode_protobuf_turns_the_resource_to_json():
    """An aggregated API whose types lack protobuf answers 500 (kubernetes/kubernetes#86253), not JSON."""
    message = b"object *v1beta1.Widget does not implement the protobuf marshalling interface and cannot be encoded"
    server = _Apiserver(answers={"GET": [(500, _status(500, b"InternalError", message))]})
    progress = _migrator(server).run()
    assert progress.verified and progress.objects_written == 2 and progress.encoding == "json"
    assert server.accepts == [mig.FULL_PROTOBUF_OR_JSON, mig.FULL_JSON]
    assert "does not implement the protobuf marshalling interface" in progress.encoding_fallback


def test_without_the_protobuf_package_the_migrator_asks_for_json(monkeypatch):
    monkeypatch.setattr(protobuf, "available", lambda: False)
    server = _Apiserver()
    progress = _migrator(server).run()
    assert progress.encoding == "json" and set(server.accepts) == {mig.FULL_JSON} and not progress.encoding_fallback


def test_an_expired_list_goes_on_from_the_continue_token_of_its_protobuf_status():
    server = _Apiserver(count=5, answers={"GET": [None, (410, _status(410, b"Expired", b"too old", b"4"))]})
    progress = _migrator(server).run()
    assert progress.expired_tokens == 1 and progress.list_restarts == 0
    # the pages: from the start, from 2 (expired), from the Status's own token 4
    assert [query.get("continue") for query in server.queries] == [None, "2", "4"]
    assert progress.objects_written == 3  # cm-0, cm-1 and cm-4: what the fallback token skips is its promise


def test_a_stored_item_refused_as_a_change_is_a_failed_object_not_written_as_stored():
    refused = json.dumps({"kind": "Status", "code": 422, "reason": "Invalid", "message": "data: field is immutable",
                          "details": {"causes": [{"field": "data", "message": "field is immutable"}]}}).encode()
    server = _Apiserver(count=1, answers={"PUT": [(422, refused)]})
    progress = _migrator(server).run()
    assert progress.failed == 1 and progress.objects_written_as_stored == 0 and not progress.write_as_stored
    assert server.accepts == [mig.FULL_PROTOBUF_OR_JSON]  # no GET as stored after the refusal
    assert len(server.puts) == 1


def test_named_objects_are_read_as_protobuf_and_one_gone_is_counted_gone():
    server = _Apiserver(count=2, answers={"GET": [(404, _status(404, b"NotFound", b'configmaps "cm-9" not found'))]})
    progress = _migrator(server, mig.ObjectListMigrator).run_objects(["app/cm-9", "app/cm-0", "app/cm-1"])
    assert progress.verified and progress.gone == 1 and progress.objects_written == 2 and progress.encoding == "protobuf"
    assert [content_type for _p, content_type, _b in server.puts] == [protobuf.PROTOBUF] * 2


def test_a_list_not_laid_out_as_a_kubernetes_list_is_not_read_as_empty():
    raw = pb.List(items=[_object(b"cm")]).SerializeToString() + b"\x1a\x03abc"  # an extra field 3 beside the items
    with pytest.raises(protobuf.NotDecodable, match="not laid out as a Kubernetes list"):
        protobuf.list_page(_envelope(b"v1", b"ConfigMapList", raw))
    with pytest.raises(protobuf.NotDecodable, match="not laid out as a Kubernetes list"):
        protobuf.list_page(_envelope(b"v1", b"ConfigMap", pb.List(items=[_object(b"cm")]).SerializeToString()))
    # a real list's ListMeta carries selfLink (field 1) on older releases: known, so still read
    meta = pb.ListMeta(selfLink=b"/api/v1/configmaps", resourceVersion=b"5")
    assert len(protobuf.list_page(_envelope(b"v1", b"ConfigMapList", pb.List(metadata=meta, items=[_object(b"cm")])
                                            .SerializeToString()))["items"]) == 1


def test_put_body_fills_an_empty_type_from_the_target():
    item = protobuf.StoredItem({"name": "cm"}, b"raw", "", "")
    body, _content_type = mig.put_body(TARGET, item)
    sent = pb.Unknown.FromString(body[len(protobuf.MAGIC):])
    assert (sent.typeMeta.apiVersion, sent.typeMeta.kind, sent.raw) == (b"v1", b"ConfigMap", b"raw")
