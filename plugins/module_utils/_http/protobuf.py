# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Kubernetes' protobuf encoding of API answers, read with protobuf's own runtime and the messages of
proto/k8s.proto (the field numbers of Kubernetes' generated.proto files).

Every built-in resource is served as protobuf (``application/vnd.kubernetes.protobuf``); custom resources are not,
and an apiserver asked for ``protobuf, json`` answers them as JSON. An answer is the 4 bytes ``k8s\\x00`` and a
``runtime.Unknown`` whose ``raw`` is the object, list or Status (k8s.io/apimachinery
``pkg/runtime/serializer/protobuf``). Only what the collection needs is decoded: an object's identity and
preconditions (name, namespace, uid, resourceVersion), a list's paging, an error's Status. An object's bytes are never
re-encoded: the client-side migrator writes back exactly the bytes it read, so no field can change on the way, however
the JSON form of it would render.
"""

from __future__ import annotations

import functools
from typing import List, Optional

PROTOBUF = "application/vnd.kubernetes.protobuf"
# Every protobuf answer of the apiserver starts with it (k8s.io/apimachinery/pkg/runtime/serializer/protobuf).
MAGIC = b"k8s\x00"


class NotDecodable(ValueError):
    """An answer that says it is protobuf but is not a Kubernetes envelope of the expected message."""


class Unavailable(NotDecodable):
    """The protobuf package cannot be imported on this host."""


@functools.cache
def messages():
    """The generated messages (``k8spb/k8s_pb2.py``) and the exceptions a parse may raise, imported on first use: the
    protobuf runtime costs every module's start about 30 ms, and only protobuf to decode needs it - an answer here, a
    value stored in etcd in ``_etcd/envelope.py``. Without the protobuf package, ``Unavailable`` (the collection's
    requirements name it)."""
    try:
        from google.protobuf.message import DecodeError  # pylint: disable=import-outside-toplevel

        from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.k8spb import (  # pylint: disable=import-outside-toplevel
            k8s_pb2,
        )
    except ImportError as error:
        raise Unavailable(f"the Python package protobuf is required to decode protobuf ({error}): install it on the host "
                          "running the module (pip install protobuf; the collection's requirements.txt)") from None
    # RecursionError: protobuf's pure-Python parser before 4.25.5 on deeply nested groups (CVE-2024-7254)
    return k8s_pb2, (DecodeError, RecursionError)


@functools.cache
def available() -> bool:
    """protobuf can be read here: else a client asks for JSON alone."""
    try:
        messages()
    except Unavailable:
        return False
    return True


def served(response) -> bool:
    """The answer is in Kubernetes' protobuf encoding (its content type, and the envelope's magic)."""
    content_type = (response.content_type or "").split(";")[0].strip()
    return content_type == PROTOBUF and (response.data or b"").startswith(MAGIC)


def _text(value: bytes) -> str:
    return value.decode("utf-8", "replace")


def _envelope(data: bytes):
    if not data.startswith(MAGIC):
        raise NotDecodable(f"not a Kubernetes protobuf answer (it does not start with {MAGIC!r})")
    return _parsed("Unknown", data[len(MAGIC):], "an envelope")


def _parsed(name: str, raw: bytes, what: str):
    generated, parse_errors = messages()
    message = getattr(generated, name)()
    try:
        message.ParseFromString(raw)
    except parse_errors as error:
        raise NotDecodable(f"{what} that does not decode as protobuf: {error}") from None
    return message


class StoredItem(dict):
    """An object as listed in protobuf: its metadata (name, namespace, uid, resourceVersion: what the migrator reads of
    it, as a JSON item's) and, in ``stored``, its bytes exactly as served, which a PUT sends back untouched."""

    __slots__ = ("stored", "api_version", "kind")

    def __init__(self, metadata: dict, stored: bytes, api_version: str, kind: str):
        super().__init__(metadata=metadata)
        self.stored, self.api_version, self.kind = stored, api_version, kind

    def put_body(self) -> bytes:
        """The object's bytes in the envelope, as the body of its PUT (the LIST's group/version and the item's kind)."""
        generated, _errors = messages()
        envelope = generated.Unknown(typeMeta=generated.TypeMeta(apiVersion=self.api_version.encode("utf-8"),
                                                                 kind=self.kind.encode("utf-8")), raw=self.stored)
        return MAGIC + envelope.SerializeToString()


def _metadata(meta) -> dict:
    """The set fields of an ObjectMeta, as JSON names them."""
    return _set({"name": _text(meta.name), "namespace": _text(meta.namespace), "uid": _text(meta.uid),
                 "resourceVersion": _text(meta.resourceVersion)})


def _item(raw: bytes, api_version: str, kind: str) -> StoredItem:
    obj = _parsed("Object", raw, "an object")
    return StoredItem(_metadata(obj.metadata), raw, api_version, kind)


def list_page(data: bytes, kind: str = "") -> dict:
    """A LIST answered as protobuf, as the JSON page the migrator reads: ``metadata`` (continue, remainingItemCount,
    resourceVersion) and ``items`` (``StoredItem``). ``kind`` names the items; else the list's kind without ``List``."""
    envelope = _envelope(data)
    page = _parsed("List", envelope.raw, "a list")
    api_version = _text(envelope.typeMeta.apiVersion)
    list_kind = _text(envelope.typeMeta.kind)
    if not list_kind.endswith("List") or _has_unknown_fields(page, envelope.raw):
        # not laid out as every list of k8s.io/api (metadata 1, items 2): its items would be lost, not read
        raise NotDecodable(f"a {list_kind or 'kindless'} answer that is not laid out as a Kubernetes list")
    item_kind = kind or list_kind[:-len("List")]
    meta = page.metadata
    metadata = _set({"resourceVersion": _text(meta.resourceVersion), "continue": _text(getattr(meta, "continue"))})
    if meta.HasField("remainingItemCount"):
        metadata["remainingItemCount"] = meta.remainingItemCount
    items: List[StoredItem] = [_item(raw, api_version, item_kind) for raw in page.items]
    return {"apiVersion": api_version, "kind": list_kind, "metadata": metadata, "items": items}


def _has_unknown_fields(page, raw: bytes) -> bool:
    """The list (with its ListMeta) holds a field that is not one of Kubernetes' list fields: protobuf keeps such a
    field aside instead of failing, so it is found by what is left once unknown fields are dropped - from ``page``
    itself, whose known fields alone are read afterwards (no copy of a page of up to 16 MiB)."""
    page.DiscardUnknownFields()
    return len(page.SerializeToString()) != len(raw)


def stored_object(data: bytes, kind: str = "") -> StoredItem:
    """One object answered as protobuf (a GET), as a ``StoredItem``."""
    envelope = _envelope(data)
    return _item(envelope.raw, _text(envelope.typeMeta.apiVersion), kind or _text(envelope.typeMeta.kind))


def status_document(data: bytes) -> Optional[dict]:
    """An error answer in protobuf as the JSON Status document it stands for (None when it is no Status): what the
    client reads of any error - message, reason, code, details with causes and retryAfterSeconds, metadata.continue
    (an expired list's fallback token)."""
    try:
        envelope = _envelope(data)
        if _text(envelope.typeMeta.kind) != "Status":
            return None
        status = _parsed("Status", envelope.raw, "a Status")
    except NotDecodable:
        return None
    metadata = {"continue": _text(getattr(status.metadata, "continue")), "resourceVersion": _text(status.metadata.resourceVersion)}
    document = {"kind": "Status", "apiVersion": _text(envelope.typeMeta.apiVersion) or "v1", "metadata": _set(metadata),
                "status": _text(status.status), "message": _text(status.message), "reason": _text(status.reason),
                "code": status.code or None}
    if status.HasField("details"):
        details = status.details
        causes = [_set({"reason": _text(cause.reason), "message": _text(cause.message), "field": _text(cause.field)})
                  for cause in details.causes]
        document["details"] = _set({"name": _text(details.name), "group": _text(details.group), "kind": _text(details.kind),
                                    "uid": _text(details.uid), "retryAfterSeconds": details.retryAfterSeconds, "causes": causes})
    return {key: value for key, value in document.items() if value not in ("", None)}


def _set(fields: dict) -> dict:
    """The fields that are set: Go writes an unset string or number as empty, which JSON leaves out."""
    return {key: value for key, value in fields.items() if value}
