# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Decoding etcd values built exactly as the apiserver builds them, encrypted or not, and garbage."""

from __future__ import annotations

import base64
import os
import random

import pytest
from audit_values import aescbc, aesgcm, encryption_config, json_value, kms, protobuf_value, secretbox

from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd import envelope

KEY = b"/registry/secrets/default/token"
AES32 = bytes(range(32))
AES16 = bytes(range(16))
BOX = bytes(range(100, 132))
OTHER = bytes(range(50, 82))
KEYS = envelope.keys_from_encryption_config(encryption_config({
    "aescbc": [("cbc1", AES32)], "aesgcm": [("gcm1", AES16)], "secretbox": [("box1", BOX)]}))

SECRET_PROTO = protobuf_value("v1", "Secret", raw=b"\x0a\x05hello")
WIDGET_JSON = json_value("example.com/v1alpha1", "Widget", metadata={"name": "w"})


@pytest.mark.parametrize("value, encoding, api_version, kind", [
    (protobuf_value("v1", "Pod"), "proto", "v1", "Pod"),
    (protobuf_value("flowcontrol.apiserver.k8s.io/v1beta3", "FlowSchema"), "proto", "flowcontrol.apiserver.k8s.io/v1beta3", "FlowSchema"),
    (protobuf_value("apps/v1", "Deployment", raw=os.urandom(300)), "proto", "apps/v1", "Deployment"),
    (WIDGET_JSON, "json", "example.com/v1alpha1", "Widget"),
    (json_value("apiextensions.k8s.io/v1beta1", "CustomResourceDefinition"), "json", "apiextensions.k8s.io/v1beta1", "CustomResourceDefinition"),
])
def test_plain_values(value, encoding, api_version, kind):
    decoded = envelope.decode_value(value, KEY)
    assert (decoded.encoding, decoded.api_version, decoded.kind, decoded.provider) == (encoding, api_version, kind, None)
    assert decoded.readable


def test_protobuf_fields_in_any_order_and_with_unknown_wire_types():
    """TypeMeta found after a varint and a fixed64 field; kind before apiVersion inside TypeMeta."""
    type_meta = b"\x12\x03Pod" + b"\x0a\x02v1"
    body = b"\x28\x96\x01" + b"\x31" + b"\x00" * 8 + b"\x0a" + bytes([len(type_meta)]) + type_meta
    decoded = envelope.decode_value(b"k8s\x00" + body)
    assert (decoded.api_version, decoded.kind) == ("v1", "Pod")


@pytest.mark.parametrize("name, build, provider, key_name", [
    ("aescbc", lambda p: aescbc(AES32, "cbc1", p), "aescbc", "cbc1"),
    ("aesgcm", lambda p: aesgcm(AES16, "gcm1", p, KEY), "aesgcm", "gcm1"),
    ("secretbox", lambda p: secretbox(BOX, "box1", p), "secretbox", "box1"),
])
@pytest.mark.parametrize("plaintext, encoding, api_version", [(SECRET_PROTO, "proto", "v1"), (WIDGET_JSON, "json", "example.com/v1alpha1")])
def test_encrypted_values_decrypt_locally(name, build, provider, key_name, plaintext, encoding, api_version):
    decoded = envelope.decode_value(build(plaintext), KEY, KEYS)
    assert (decoded.encoding, decoded.api_version, decoded.provider, decoded.key_name) == (encoding, api_version, provider, key_name)


@pytest.mark.parametrize("value, keys, reason_part", [
    (aescbc(OTHER, "cbc1", SECRET_PROTO), KEYS, "does not decrypt"),  # same name, other secret
    (aesgcm(OTHER[:16], "gcm1", SECRET_PROTO, KEY), KEYS, "does not decrypt"),
    (secretbox(OTHER, "box1", SECRET_PROTO), KEYS, "does not decrypt"),
    (aesgcm(AES16, "gcm1", SECRET_PROTO, b"/registry/secrets/default/other"), KEYS, "does not decrypt"),  # copied from another key
    (aescbc(AES32, "rotated", SECRET_PROTO), KEYS, "no aescbc key named rotated"),
    (aescbc(AES32, "cbc1", SECRET_PROTO), None, "no EncryptionConfiguration"),
    (kms("v1", "vault"), KEYS, "KMS plugin vault"),
    (kms("v2", "vault"), KEYS, "KMS plugin vault"),
    (b"k8s:enc:rot13:v1:k:xyz", KEYS, "unknown encryption provider"),
], ids=["aescbc-other-secret", "aesgcm-other-secret", "secretbox-other-secret", "aesgcm-other-key", "aescbc-rotated",
        "no-config", "kms-v1", "kms-v2", "unknown-provider"])
def test_encrypted_values_not_decrypted_are_reported(value, keys, reason_part):
    decoded = envelope.decode_value(value, KEY, keys)
    assert decoded.encoding == "encrypted" and not decoded.readable and decoded.api_version is None
    assert reason_part in decoded.reason


def test_kms_provider_names_version():
    assert envelope.decode_value(kms("v2", "vault"), KEY, KEYS).provider == "kms:v2"


def test_same_key_name_in_two_resources_tries_both_secrets():
    config = encryption_config({"aescbc": [("k", OTHER)]})
    config["resources"].append({"resources": ["configmaps"], "providers": [{"aescbc": {"keys": [
        {"name": "k", "secret": base64.b64encode(AES32).decode()}]}}]})
    keys = envelope.keys_from_encryption_config(config)
    assert envelope.decode_value(aescbc(AES32, "k", SECRET_PROTO), KEY, keys).api_version == "v1"


GARBAGE = [
    b"",
    b"\x00\x01\x02",
    b"k8s\x00",
    b"k8s\x00\x0a\xff\xff\xff\xff\x0f",  # length beyond the value
    b"k8s\x00\x0a\x02\x0a\x05",  # truncated TypeMeta
    b"k8s\x00\x12\x00",  # no TypeMeta
    b"k8s\x00\x0f",  # wire type 7
    b"k8s\x00\x0a\x04\x0a\x02\xff\xfe",  # apiVersion not UTF-8
    b"{not json",
    b"[1, 2]",
    b'{"apiVersion": "v1"}',
    b'{"apiVersion": 3, "kind": "Pod"}',
    b"k8s:enc:",
    b"k8s:enc:aescbc:v1:cbc1:",
    b"k8s:enc:aescbc:v1:cbc1:" + b"\x00" * 17,
    b"k8s:enc:aescbc:v1:cbc1:" + os.urandom(48),
    b"k8s:enc:aesgcm:v1:gcm1:" + os.urandom(11),
    b"k8s:enc:secretbox:v1:box1:" + os.urandom(30),
    b"k8s:enc:aescbc:v9:cbc1:" + os.urandom(48),
    os.urandom(64),
]


@pytest.mark.parametrize("value", GARBAGE)
def test_garbage_is_reported_never_raised(value):
    decoded = envelope.decode_value(value, KEY, KEYS)
    assert not decoded.readable
    assert decoded.encoding in ("undecodable", "encrypted")
    assert decoded.reason


def test_reasons_and_repr_never_show_key_material():
    decoded = envelope.decode_value(aescbc(OTHER, "cbc1", SECRET_PROTO), KEY, KEYS)
    for secret in (AES32, AES16, BOX):
        assert base64.b64encode(secret).decode() not in decoded.reason + repr(KEYS) + repr(decoded)


@pytest.mark.parametrize("config, message", [
    ({"kind": "Pod"}, "not an EncryptionConfiguration"),
    ({"kind": "EncryptionConfiguration", "resources": {}}, "resources must be a list"),
    ({"kind": "EncryptionConfiguration", "resources": [{"providers": "x"}]}, "resources[0].providers must be a list"),
    ({"kind": "EncryptionConfiguration", "resources": [{"providers": [{"aescbc": {"keys": [{"name": "k"}]}}]}]},
     "resources[0].providers[0].aescbc.keys[0] needs a name and a secret"),
    ({"kind": "EncryptionConfiguration", "resources": [{"providers": [{"aescbc": {"keys": [{"name": "k", "secret": "!!"}]}}]}]},
     "not valid base64"),
    ({"kind": "EncryptionConfiguration", "resources": [{"providers": [{"secretbox": {"keys": [
        {"name": "k", "secret": base64.b64encode(b"short").decode()}]}}]}]}, "secretbox needs 32"),
])
def test_bad_encryption_configs(config, message):
    with pytest.raises(ValueError) as raised:
        envelope.keys_from_encryption_config(config)
    assert message in str(raised.value)


def test_identity_and_kms_only_config_has_no_local_keys():
    config = {"kind": "EncryptionConfiguration", "resources": [{"resources": ["secrets"], "providers": [
        {"kms": {"apiVersion": "v2", "name": "vault", "endpoint": "unix:///kms.sock"}}, {"identity": {}}]}]}
    assert not envelope.keys_from_encryption_config(config)


HEADED = [protobuf_value("v1", "Pod"), protobuf_value("apps/v1", "Deployment", raw=bytes(range(50))), b"k8s\x00\x0a\x04\x0a\x02v1",
          b"k8s\x00\x0a\x01\x0a", b"k8s\x00\x0a\x00", b"k8s\x00\x0a\x05\x12\x03Pod", b"k8s\x00\x0a\x03\x0a\x01\xff"]
NOT_HEADED = [protobuf_value("v1", "ConfigMap" + "x" * 140), b"k8s\x00\x0a\x40\x0a\x02v1", b"k8s\x00\x0a", b"k8s\x00",
              b"k8s\x00\x10\x01", b"", b"\x00garbage", WIDGET_JSON, b"XXXX\x0a\x02\x0a\x00", kms("v2", "vault")]


def test_a_type_meta_head_alone_decides_the_decoding():
    """The audit groups values by ``type_meta_head`` undecoded: whatever follows a head, the value decodes as any
    value of that head; a value with no head (not an envelope, a TypeMeta over 127 bytes, truncated) has none."""
    assert [envelope.type_meta_head(v) for v in NOT_HEADED] == [None] * len(NOT_HEADED)
    for value in HEADED:
        head = envelope.type_meta_head(value)
        assert head is not None and value.startswith(head) and len(head) == 6 + head[5]
        for tail in (b"", b"\x12\x00", bytes(range(256)), b"\xff" * 3):
            assert envelope.type_meta_head(head + tail) == head
            assert envelope.decode_value(head + tail) == envelope.decode_value(value)


def test_only_a_value_that_starts_with_a_head_is_looked_up_as_it():
    """The audit's scan looks a value up as ``value[:6 + value[5]]``: among any bytes, only those that start with a
    head (cut, grown or flipped envelopes, garbage) are found under it."""
    heads = {envelope.type_meta_head(v): envelope.decode_value(v) for v in HEADED}
    rng = random.Random(5)
    candidates = list(NOT_HEADED)
    for value in HEADED + NOT_HEADED:
        for _mutation in range(300):
            mutated = bytearray(value[:rng.randrange(len(value) + 1)] + rng.randbytes(rng.randrange(4)))
            if mutated and rng.random() < 0.5:
                mutated[rng.randrange(len(mutated))] = rng.randrange(256)
            candidates.append(bytes(mutated))
    found = 0
    for value in candidates:
        looked_up = value[:6 + value[5]] if len(value) > 5 else None
        if looked_up in heads:
            found += 1
            assert envelope.type_meta_head(value) == looked_up and envelope.decode_value(value) == heads[looked_up]
    assert found > 100


@pytest.mark.parametrize("value, reason", [
    (b"k8s\x00\n\x06\n\x02\xff\xfe\x12\x00", "malformed protobuf envelope (apiVersion or kind is not UTF-8)"),  # under a head
    (b"k8s\x00\x12\x01x\n\x06\n\x02\xff\xfe\x12\x00", "malformed protobuf envelope (apiVersion or kind is not UTF-8)"),  # TypeMeta second
    (b"k8s\x00\n\x05\n\x09v1", "malformed protobuf envelope (protobuf cannot parse it)"),  # a length past the end
    (b"k8s\x00\x12\x03abc", "protobuf envelope without TypeMeta"),
], ids=["head", "no-head", "truncated", "no-typemeta"])
def test_a_protobuf_envelope_protobuf_cannot_read_says_why(value, reason):
    decoded = envelope.decode_value(value)
    assert (decoded.encoding, decoded.reason) == ("undecodable", reason)
