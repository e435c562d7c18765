"""apisim.k8s_protobuf writes the bytes a kube-apiserver writes: tags, lengths and order, to the byte."""

from apisim import k8s_protobuf

# k8s\0, Unknown{1: TypeMeta{1: "v1", 2: "ConfigMap"}, 2: raw, 3: "", 4: ""}: gogo-protobuf writes the empty strings
CONFIGMAP_ENVELOPE = b"k8s\x00" + b"\x0a\x0f\x0a\x02v1\x12\x09ConfigMap" + b"\x12\x02\x0a\x00" + b"\x1a\x00" + b"\x22\x00"


def test_the_envelope_is_byte_for_byte_the_apiservers():
    assert k8s_protobuf.envelope("v1", "ConfigMap", b"\x0a\x00") == CONFIGMAP_ENVELOPE
    raw = b"x" * 300  # a length of two varint bytes
    assert k8s_protobuf.envelope("v1", "ConfigMap", raw) == CONFIGMAP_ENVELOPE[:-8] + b"\x12\xac\x02" + raw + b"\x1a\x00\x22\x00"


def test_a_configmap_has_its_metadata_then_its_data_in_key_order():
    raw = k8s_protobuf.configmap("cm", "ns", "u-1", {"b": "2", "a": "1"}, labels={"app": "web"})
    meta = b"\x0a\x02cm" + b"\x1a\x02ns" + b"\x2a\x03u-1" + b"\x5a\x0a" + b"\x0a\x03app\x12\x03web"
    assert raw == b"\x0a" + bytes([len(meta)]) + meta + b"\x12\x06\x0a\x01a\x12\x011" + b"\x12\x06\x0a\x01b\x12\x012"


def test_without_managed_fields_every_other_byte_stays_in_its_order():
    managed = b"\x8a\x01\x04\x0a\x02me"  # field 17, length-delimited
    meta = b"\x0a\x02cr" + managed + b"\x32\x011" + b"\x38\x96\x01" + managed  # name, managedFields, resourceVersion, generation
    revision = b"\x0a" + bytes([len(meta)]) + meta + b"\x12\x03\x0a\x01{" + b"\x18\x07"  # metadata, data, revision
    bare = b"\x0a\x02cr" + b"\x32\x011" + b"\x38\x96\x01"
    expected = b"\x0a" + bytes([len(bare)]) + bare + b"\x12\x03\x0a\x01{" + b"\x18\x07"
    stored = k8s_protobuf.envelope("apps/v1", "ControllerRevision", revision)
    assert k8s_protobuf.without_managed_fields(stored) == k8s_protobuf.envelope("apps/v1", "ControllerRevision", expected)
