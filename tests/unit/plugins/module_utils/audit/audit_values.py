# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Build etcd values exactly as a kube-apiserver writes them, for tests.

The protobuf envelope is the simulator's (``apisim/k8s_protobuf.py``, k8s.io/apimachinery
``runtime/serializer/protobuf``), the one its etcd store writes. Encryption follows
k8s.io/apiserver ``storage/value/encrypt``: ``k8s:enc:<provider>:v1:<key name>:`` then the ciphertext.
"""

from __future__ import annotations

import base64
import json
import os

from apisim.k8s_protobuf import envelope  # tests/simulator
from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from nacl.secret import SecretBox


def protobuf_value(api_version: str, kind: str, raw: bytes = b"\x0a\x00") -> bytes:
    """``raw`` (by default an object with empty metadata) in the protobuf envelope."""
    return envelope(api_version, kind, raw)


def json_value(api_version: str, kind: str, **extra) -> bytes:
    return json.dumps({"apiVersion": api_version, "kind": kind, **extra}, separators=(",", ":")).encode() + b"\n"


def aescbc(secret: bytes, key_name: str, plaintext: bytes) -> bytes:
    iv = os.urandom(16)
    padder = padding.PKCS7(128).padder()
    padded = padder.update(plaintext) + padder.finalize()
    encryptor = Cipher(algorithms.AES(secret), modes.CBC(iv)).encryptor()
    return f"k8s:enc:aescbc:v1:{key_name}:".encode() + iv + encryptor.update(padded) + encryptor.finalize()


def aesgcm(secret: bytes, key_name: str, plaintext: bytes, etcd_key: bytes) -> bytes:
    nonce = os.urandom(12)
    return f"k8s:enc:aesgcm:v1:{key_name}:".encode() + nonce + AESGCM(secret).encrypt(nonce, plaintext, etcd_key)


def secretbox(secret: bytes, key_name: str, plaintext: bytes) -> bytes:
    nonce = os.urandom(24)
    sealed = SecretBox(secret).encrypt(plaintext, nonce)  # nonce + ciphertext + tag, as the apiserver stores it
    return f"k8s:enc:secretbox:v1:{key_name}:".encode() + bytes(sealed)


def kms(version: str, plugin: str, payload: bytes = b"\x0a\x10opaque") -> bytes:
    return f"k8s:enc:kms:{version}:{plugin}:".encode() + payload


def encryption_config(keys_by_provider: dict) -> dict:
    """An EncryptionConfiguration for secrets with ``{provider: [(name, secret bytes), ...]}``, then identity."""
    providers = [{provider: {"keys": [{"name": name, "secret": base64.b64encode(secret).decode()} for name, secret in keys]}}
                 for provider, keys in keys_by_provider.items()]
    return {"apiVersion": "apiserver.config.k8s.io/v1", "kind": "EncryptionConfiguration",
            "resources": [{"resources": ["secrets", "configmaps"], "providers": providers + [{"identity": {}}]}]}
