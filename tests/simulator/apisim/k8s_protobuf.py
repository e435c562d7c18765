"""Objects in the kube-apiserver's protobuf encoding, as etcd holds them: what the simulator's etcd mirror, the tests
and the benchmarks write (or rewrite) straight into etcd.

The envelope (k8s.io/apimachinery ``runtime/serializer/protobuf``): the 4 bytes ``k8s\\x00``, then a
``runtime.Unknown`` (1: typeMeta {1: apiVersion, 2: kind}, 2: raw, 3: contentEncoding, 4: contentType). In ``raw``
a ConfigMap (k8s.io/api ``core/v1``: 1: metadata, 2: data) with the ObjectMeta fields written here (1: name,
3: namespace, 5: uid, 11: labels), or any bytes (the simulator's JSON). The messages are protobuf's own, built from a
descriptor with the field numbers of Kubernetes' generated.proto files and, as there, proto2: a string that is set is
written even when empty, as gogo-protobuf writes contentEncoding and contentType. A ``map<string, string>`` is a
repeated {1: key, 2: value} on the wire; it is written in key order, as Go's marshaller writes it.
"""

from google.protobuf import descriptor_pb2, message_factory

MAGIC = b"k8s\x00"

_FIELD = descriptor_pb2.FieldDescriptorProto
_STRING, _BYTES = _FIELD.TYPE_STRING, _FIELD.TYPE_BYTES
_PACKAGE = "kubeupgrade.tests.k8s"
# {message: [(field, number, scalar type or message name[, repeated])]}
_MESSAGES = {
    "TypeMeta": [("apiVersion", 1, _STRING), ("kind", 2, _STRING)],
    "Unknown": [("typeMeta", 1, "TypeMeta"), ("raw", 2, _BYTES), ("contentEncoding", 3, _STRING),
                ("contentType", 4, _STRING)],
    "StringEntry": [("key", 1, _STRING), ("value", 2, _STRING)],
    "ObjectMeta": [("name", 1, _STRING), ("namespace", 3, _STRING), ("uid", 5, _STRING),
                   ("labels", 11, "StringEntry", True)],
    "ConfigMap": [("metadata", 1, "ObjectMeta"), ("data", 2, "StringEntry", True)],
    # Any object read with only its metadata's managedFields (17) known: every other field stays as read, in its order.
    "ManagedFieldsOnly": [("managedFields", 17, _BYTES, True)],
    "AnyObject": [("metadata", 1, "ManagedFieldsOnly")],
}


def _field(name, number, kind, repeated=False):
    field = _FIELD(name=name, number=number, label=_FIELD.LABEL_REPEATED if repeated else _FIELD.LABEL_OPTIONAL)
    if isinstance(kind, str):
        field.type, field.type_name = _FIELD.TYPE_MESSAGE, f".{_PACKAGE}.{kind}"
    else:
        field.type = kind
    return field


def _classes():
    """{message: its class}, the messages' file in a descriptor pool of its own."""
    file = descriptor_pb2.FileDescriptorProto(name="kubeupgrade_tests_k8s.proto", package=_PACKAGE, syntax="proto2")
    for name, fields in _MESSAGES.items():
        file.message_type.add(name=name, field=[_field(*spec) for spec in fields])
    classes = message_factory.GetMessages([file])
    return {name: classes[f"{_PACKAGE}.{name}"] for name in _MESSAGES}


_CLASSES = _classes()


def envelope(api_version, kind, raw):
    """``raw`` (an object's bytes) as etcd holds it: ``k8s\\x00`` + runtime.Unknown."""
    unknown = _CLASSES["Unknown"](raw=raw, contentEncoding="", contentType="")
    unknown.typeMeta.apiVersion, unknown.typeMeta.kind = api_version, kind
    return MAGIC + unknown.SerializeToString()


def configmap(name, namespace, uid, data, labels=None):
    """A ConfigMap's protobuf (the ``raw`` of its envelope): metadata (name, namespace, uid, labels) and data."""
    entry = _CLASSES["StringEntry"]
    meta = _CLASSES["ObjectMeta"](name=name, namespace=namespace, uid=uid,
                                  labels=[entry(key=k, value=v) for k, v in sorted((labels or {}).items())])
    return _CLASSES["ConfigMap"](metadata=meta, data=[entry(key=k, value=v) for k, v in sorted(data.items())]).SerializeToString()


def without_managed_fields(value):
    """etcd's ``value`` of an object (the envelope) with its metadata's managedFields removed and every other byte as
    it was: the object as a kube-apiserver stored it before server-side apply."""
    assert value.startswith(MAGIC), value[:16]
    unknown = _CLASSES["Unknown"].FromString(value[len(MAGIC):])
    obj = _CLASSES["AnyObject"].FromString(unknown.raw)
    obj.metadata.ClearField("managedFields")
    unknown.raw = obj.SerializeToString()
    return MAGIC + unknown.SerializeToString()
