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


class _Apiserver:
    """Two ConfigMaps of namespace app, LISTed as protobuf when asked (``garbled``: a protobuf answer that does not
    decode), else JSON; every PUT noted with its content type."""

    endpoint = "https://cp1:6443"

    def __init__(self, garbled=False):
        self.garbled, self.accepts, self.puts = garbled, [], []
        self.items = [_object(f"cm-{i}".encode(), b"app", uid=f"u-{i}".encode()) for i in range(2)]

    def request(self, method, path, query=None, body=None, **options):
        if method == "PUT":
            self.puts.append((path, options.get("content_type"), body))
            return _response(b"{}", "application/json")
        self.accepts.append(options.get("accept"))
        if protobuf.PROTOBUF in options.get("accept", ""):
            if self.garbled:
                return _response(protobuf.MAGIC + b"\x0a\xff")
            return _response(_envelope(b"v1", b"ConfigMapList", pb.List(metadata=pb.ListMeta(), items=self.items).SerializeToString()))
        items = [{"metadata": {"name": f"cm-{i}", "namespace": "app", "uid": f"u-{i}", "resourceVersion": "7"}} for i in range(2)]
        return _response(json.dumps({"metadata": {}, "items": items}).encode(), "application/json")


TARGET = mig.ResourceTarget(GroupResource("", "configmaps"), "v1", True, "ConfigMap")


def test_the_migrator_lists_as_protobuf_and_puts_each_items_bytes_back():
    server = _Apiserver()
    progress = mig.ClientMigrator(server, TARGET, mig.ClientOptions(concurrency=1)).run()
    assert progress.verified and progress.objects_written == 2 and progress.encoding == "protobuf"
    assert server.accepts == [mig.FULL_PROTOBUF_OR_JSON]
    assert [(path, content_type) for path, content_type, _body in server.puts] == [
        ("/api/v1/namespaces/app/configmaps/cm-0", protobuf.PROTOBUF), ("/api/v1/namespaces/app/configmaps/cm-1", protobuf.PROTOBUF)]
    assert [pb.Unknown.FromString(body[len(protobuf.MAGIC):]).raw for _p, _c, body in server.puts] == server.items


def test_a_protobuf_answer_that_does_not_decode_turns_the_resource_to_json():
    server = _Apiserver(garbled=True)
    progress = mig.ClientMigrator(server, TARGET, mig.ClientOptions(concurrency=1)).run()
    assert progress.verified and progress.objects_written == 2 and progress.failed == 0
    assert progress.encoding == "json" and server.accepts == [mig.FULL_PROTOBUF_OR_JSON, mig.FULL_JSON]
    assert {content_type for _p, content_type, _b in server.puts} == {"application/json"}
