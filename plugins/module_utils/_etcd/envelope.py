# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Decode one etcd value written by a kube-apiserver into the apiVersion and kind it is stored as.

Three encodings exist (taken from the Kubernetes source):

- protobuf: ``k8s\\x00`` then a ``runtime.Unknown`` message whose field 1 is a ``TypeMeta``
  (field 1 apiVersion, field 2 kind) and field 2 the raw object
  (``staging/src/k8s.io/apimachinery/pkg/runtime/serializer/protobuf/protobuf.go``);
- JSON: a JSON object with top-level ``apiVersion`` and ``kind`` (custom resources, CRDs, APIServices);
- encrypted at rest: ``k8s:enc:<provider>:v1:<key name>:`` then the provider's ciphertext
  (``staging/src/k8s.io/apiserver/pkg/storage/value/encrypt``; KMS v1/v2 put the plugin name where
  the key name is). ``aescbc`` is IV(16) + AES-CBC with PKCS#7 padding; ``aesgcm`` is nonce(12) +
  AES-GCM ciphertext and tag, with the full etcd key as additional authenticated data;
  ``secretbox`` is nonce(24) + NaCl secretbox (XSalsa20-Poly1305). This module decrypts these
  three locally, given the keys of the apiserver's EncryptionConfiguration, to read the apiVersion
  underneath; KMS values are reported as encrypted by their plugin, never decrypted.

Nothing here raises on bad input: a value that cannot be decoded is a ``Decoded`` with
``encoding="undecodable"`` and a reason. Reasons never contain value bytes or key material. A missing protobuf
package is not bad input: it raises a ``ConfigurationError`` at the first protobuf value, since every built-in object
is stored as protobuf.
"""

from __future__ import annotations

import base64
import binascii
import functools
import importlib.util
import json
from typing import Dict, List, NamedTuple, Optional, Tuple

from ansible_collections.kubeupgrade.storage.plugins.module_utils._http import protobuf
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ConfigurationError

# The ciphers are imported on first use (cryptography and PyNaCl cost ~30 ms to import): every module
# that reads StorageState records imports this file, and only an audit of encrypted values needs them.
_LIBRARIES = {"aescbc": ("cryptography", "cryptography"), "aesgcm": ("cryptography", "cryptography"),
              "secretbox": ("nacl", "PyNaCl")}


PROTOBUF_MAGIC = protobuf.MAGIC
ENCRYPTED_PREFIX = b"k8s:enc:"
LOCAL_PROVIDERS = ("aescbc", "aesgcm", "secretbox")
KMS_PROVIDERS = ("kms",)

PROTO = "proto"
JSON = "json"
UNDECODABLE = "undecodable"
ENCRYPTED = "encrypted"  # encrypted and not decrypted (KMS, no matching key, missing library)


class Decoded(NamedTuple):
    """What one value is stored as. ``provider``/``key_name`` are set for values encrypted at rest
    (``provider`` is ``aescbc``, ``kms:v2``...); ``encoding`` is that of the plaintext when it could be
    read, ``encrypted`` when it could not, ``undecodable`` for garbage. A named tuple: one is made per key."""

    encoding: str
    api_version: Optional[str] = None
    kind: Optional[str] = None
    provider: Optional[str] = None
    key_name: Optional[str] = None
    reason: Optional[str] = None

    @property
    def readable(self) -> bool:
        return bool(self.api_version) and self.encoding in (PROTO, JSON)


class EncryptionKeys:
    """Keys of an EncryptionConfiguration, by provider and key name, kept only in memory.

    The same key name may appear under several resources with different secrets: every candidate is
    tried, as the apiserver would for the resource's own list.
    """

    def __init__(self, keys: Optional[Dict[Tuple[str, str], List[bytes]]] = None):
        self._keys = keys or {}

    def candidates(self, provider: str, name: str) -> List[bytes]:
        return self._keys.get((provider, name), [])

    def __bool__(self) -> bool:
        return bool(self._keys)

    def __repr__(self) -> str:  # never print key material
        return f"EncryptionKeys({len(self._keys)} keys)"


_CONFIG_KINDS = ("EncryptionConfiguration", "EncryptionConfig")
_KEY_LENGTHS = {"aescbc": (16, 24, 32), "aesgcm": (16, 24, 32), "secretbox": (32,)}


def keys_from_encryption_config(config) -> EncryptionKeys:
    """Parse an ``apiserver.config.k8s.io/v1`` EncryptionConfiguration (already loaded from YAML).

    Raises ``ValueError`` naming the JSON path of what is wrong; the message never contains a secret.
    """
    if not isinstance(config, dict) or config.get("kind") not in _CONFIG_KINDS:
        raise ValueError("not an EncryptionConfiguration (kind must be EncryptionConfiguration)")
    entries = config.get("resources")
    if not isinstance(entries, list):
        raise ValueError("resources must be a list")
    found: Dict[Tuple[str, str], List[bytes]] = {}
    for index, entry in enumerate(entries):
        providers = (entry or {}).get("providers") if isinstance(entry, dict) else None
        if not isinstance(providers, list):
            raise ValueError(f"resources[{index}].providers must be a list")
        for pindex, provider in enumerate(providers):
            _collect_provider_keys(provider, f"resources[{index}].providers[{pindex}]", found)
    return EncryptionKeys(found)


def _collect_provider_keys(provider, path: str, found: dict) -> None:
    if not isinstance(provider, dict):
        raise ValueError(f"{path} must be a mapping")
    for name in LOCAL_PROVIDERS:
        if name not in provider:
            continue
        keys = (provider[name] or {}).get("keys") if isinstance(provider[name], dict) else None
        if not isinstance(keys, list):
            raise ValueError(f"{path}.{name}.keys must be a list")
        for kindex, key in enumerate(keys):
            key_path = f"{path}.{name}.keys[{kindex}]"
            if not isinstance(key, dict) or not isinstance(key.get("name"), str) or not isinstance(key.get("secret"), str):
                raise ValueError(f"{key_path} needs a name and a secret")
            try:
                secret = base64.b64decode(key["secret"], validate=True)
            except (binascii.Error, ValueError):
                raise ValueError(f"{key_path}.secret is not valid base64") from None
            if len(secret) not in _KEY_LENGTHS[name]:
                raise ValueError(f"{key_path}.secret has {len(secret)} bytes; {name} needs {' or '.join(map(str, _KEY_LENGTHS[name]))}")
            found.setdefault((name, key["name"]), []).append(secret)


def decode_value(value: bytes, etcd_key: bytes = b"", keys: Optional[EncryptionKeys] = None) -> Decoded:
    """Decode one etcd value; ``etcd_key`` is the full key (AES-GCM authenticates it)."""
    if value.startswith(PROTOBUF_MAGIC):
        return _decode_protobuf(value)
    if value.startswith(ENCRYPTED_PREFIX):
        return _decode_encrypted(value, etcd_key, keys)
    return _decode_json(value)


def _decode_plain(value: bytes) -> Decoded:
    if value.startswith(PROTOBUF_MAGIC):
        return _decode_protobuf(value)
    return _decode_json(value)


# --- protobuf -----------------------------------------------------------------------------------


def _messages():
    """The generated messages of the stored values and the exceptions a parse may raise (``protobuf.messages``, imported
    on first use: the modules that only read records never decode a value). Without the protobuf package, a
    ConfigurationError: every built-in object is stored as protobuf, and calling them undecodable would be a false
    verdict."""
    try:
        return protobuf.messages()
    except protobuf.Unavailable as error:
        raise ConfigurationError(f"{error}; kube-apiserver stores every built-in object in etcd as protobuf") from None


# A head: the magic, the envelope's tag 0x0A (field 1, TypeMeta), a one-byte length, then the TypeMeta itself.
_TYPE_META_AT = len(PROTOBUF_MAGIC) + 2


def type_meta_head(value: bytes) -> Optional[bytes]:
    """``value[:6 + value[5]]`` for a protobuf envelope that starts, as the apiserver writes it, with its TypeMeta under
    a one-byte length (magic, tag 0x0A, length under 0x80, the TypeMeta); None for any other value.

    Such a head alone decides what ``decode_value`` says (the TypeMeta is the envelope's first field: nothing after it
    is read), so values can be grouped by it undecoded: for any bytes ``v``, ``v[:6 + v[5]]`` equals a head only when
    ``v`` starts with that very head (its sixth byte is the head's length byte)."""
    if (len(value) >= _TYPE_META_AT and value[_TYPE_META_AT - 2] == 0x0A and value[_TYPE_META_AT - 1] < 0x80
            and value.startswith(PROTOBUF_MAGIC) and _TYPE_META_AT + value[_TYPE_META_AT - 1] <= len(value)):
        return value[:_TYPE_META_AT + value[_TYPE_META_AT - 1]]
    return None


_PROTO_CACHE: Dict[bytes, Decoded] = {}


def _decode_protobuf(value: bytes) -> Decoded:
    """Fast path for what the apiserver writes (TypeMeta first, short lengths), cached per distinct TypeMeta head
    (``type_meta_head``); anything else is parsed whole as a ``runtime.Unknown``."""
    head = type_meta_head(value)
    if head is None:
        return _decode_protobuf_fields(value, None)
    found = _PROTO_CACHE.get(head)
    if found is None:
        found = _decode_protobuf_fields(value, head)
        if found.readable and len(_PROTO_CACHE) < 4096:
            _PROTO_CACHE[head] = found
    return found


def _decode_protobuf_fields(value: bytes, head: Optional[bytes]) -> Decoded:
    """The TypeMeta's apiVersion and kind, parsed by protobuf: from the head alone where there is one (the envelope's
    first field decides, whatever follows it), else from the whole envelope as a ``runtime.Unknown``."""
    messages, parse_errors = _messages()
    try:
        if head is not None:
            type_meta = messages.TypeMeta.FromString(head[_TYPE_META_AT:])
        else:
            envelope = messages.Unknown.FromString(value[len(PROTOBUF_MAGIC):])
            if not envelope.HasField("typeMeta"):
                return Decoded(UNDECODABLE, reason="protobuf envelope without TypeMeta")
            type_meta = envelope.typeMeta
        api_version, kind = type_meta.apiVersion.decode("utf-8"), type_meta.kind.decode("utf-8")
    except parse_errors:
        return Decoded(UNDECODABLE, reason="malformed protobuf envelope (protobuf cannot parse it)")
    except UnicodeDecodeError:
        return Decoded(UNDECODABLE, reason="malformed protobuf envelope (apiVersion or kind is not UTF-8)")
    if not api_version or not kind:
        return Decoded(UNDECODABLE, reason="protobuf TypeMeta without apiVersion or kind")
    return Decoded(PROTO, api_version, kind)


def protobuf_uid(value: bytes) -> str:
    """``metadata.uid`` of an object stored as protobuf ("" when it cannot be read): the envelope's ``raw`` is the
    object, whose field 1 is its ObjectMeta (a Namespace's, as every built-in object's), whose field 5 is the uid."""
    if not value.startswith(PROTOBUF_MAGIC):
        return ""
    messages, parse_errors = _messages()
    try:
        stored = messages.Namespace.FromString(messages.Unknown.FromString(value[len(PROTOBUF_MAGIC):]).raw)
        return stored.metadata.uid.decode("utf-8")
    except (*parse_errors, UnicodeDecodeError):
        return ""


# --- JSON ---------------------------------------------------------------------------------------


def _decode_json(value: bytes) -> Decoded:
    if value[:1] not in (b"{", b" ", b"\n", b"\t", b"\r"):
        return Decoded(UNDECODABLE, reason="neither a protobuf envelope, JSON nor an encrypted value")
    try:
        document = json.loads(value)
    except (ValueError, UnicodeDecodeError):
        return Decoded(UNDECODABLE, reason="malformed JSON")
    if not isinstance(document, dict):
        return Decoded(UNDECODABLE, reason="JSON value is not an object")
    api_version, kind = document.get("apiVersion"), document.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str) or not api_version or not kind:
        return Decoded(UNDECODABLE, reason="JSON object without apiVersion or kind")
    return Decoded(JSON, api_version, kind)


# --- encryption at rest -------------------------------------------------------------------------


def _split_encrypted(value: bytes) -> Tuple[str, str, bytes]:
    """``k8s:enc:<provider>:v1:<name>:`` (KMS v2: ``k8s:enc:kms:v2:<name>:``) -> (provider, name, payload)."""
    parts = value[len(ENCRYPTED_PREFIX):].split(b":", 3)
    if len(parts) < 4 or parts[1] not in (b"v1", b"v2") or not parts[0] or not parts[2]:
        raise ValueError("malformed k8s:enc: prefix")
    provider = parts[0].decode("ascii")
    if provider in KMS_PROVIDERS:
        provider = f"{provider}:{parts[1].decode('ascii')}"
    return provider, parts[2].decode("utf-8"), parts[3]


def _decode_encrypted(value: bytes, etcd_key: bytes, keys: Optional[EncryptionKeys]) -> Decoded:
    try:
        provider, name, payload = _split_encrypted(value)
    except (ValueError, UnicodeDecodeError):
        return Decoded(UNDECODABLE, reason="malformed k8s:enc: prefix")
    if provider.startswith("kms:"):
        return Decoded(ENCRYPTED, provider=provider, key_name=name, reason=f"encrypted by KMS plugin {name}; not decrypted")
    if provider not in LOCAL_PROVIDERS:
        return Decoded(ENCRYPTED, provider=provider, key_name=name, reason=f"unknown encryption provider {provider}")
    candidates = keys.candidates(provider, name) if keys else []
    if not candidates:
        return Decoded(ENCRYPTED, provider=provider, key_name=name,
                       reason=f"no {provider} key named {name} in the EncryptionConfiguration" if keys else "no EncryptionConfiguration given")
    missing = _missing_library(provider)
    if missing:
        return Decoded(ENCRYPTED, provider=provider, key_name=name, reason=f"the Python package {missing} is needed to decrypt {provider}")
    for secret in candidates:
        plaintext = _DECRYPTERS[provider](secret, payload, etcd_key)
        if plaintext is not None:
            inner = _decode_plain(plaintext)
            if inner.readable:
                return Decoded(inner.encoding, inner.api_version, inner.kind, provider, name)
    return Decoded(ENCRYPTED, provider=provider, key_name=name,
                   reason=f"the {provider} key named {name} in the EncryptionConfiguration does not decrypt this value")


@functools.cache
def _missing_library(provider: str) -> Optional[str]:
    """Looked up once per provider, not per value: a missing library would search sys.path for every key."""
    module, package = _LIBRARIES[provider]
    return None if importlib.util.find_spec(module) is not None else package


def _decrypt_aescbc(secret: bytes, payload: bytes, _etcd_key: bytes) -> Optional[bytes]:
    if len(payload) < 32 or len(payload) % 16:
        return None
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes  # pylint: disable=import-outside-toplevel

    decryptor = Cipher(algorithms.AES(secret), modes.CBC(payload[:16])).decryptor()
    padded = decryptor.update(payload[16:]) + decryptor.finalize()
    pad = padded[-1]
    if pad < 1 or pad > 16 or padded[-pad:] != bytes([pad]) * pad:
        return None
    return padded[:-pad]


def _decrypt_aesgcm(secret: bytes, payload: bytes, etcd_key: bytes) -> Optional[bytes]:
    """The apiserver authenticates the etcd key (``value.Context.AuthenticatedData``); a value copied
    from another key does not decrypt, exactly as in the apiserver."""
    if len(payload) < 12 + 16:
        return None
    from cryptography.exceptions import InvalidTag  # pylint: disable=import-outside-toplevel
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM  # pylint: disable=import-outside-toplevel

    try:
        return AESGCM(secret).decrypt(payload[:12], payload[12:], etcd_key or None)
    except InvalidTag:
        return None


def _decrypt_secretbox(secret: bytes, payload: bytes, _etcd_key: bytes) -> Optional[bytes]:
    if len(payload) < 24 + 16:
        return None
    from nacl.exceptions import CryptoError  # pylint: disable=import-outside-toplevel
    from nacl.secret import SecretBox  # pylint: disable=import-outside-toplevel

    try:
        return SecretBox(secret).decrypt(payload[24:], payload[:24])
    except CryptoError:
        return None


_DECRYPTERS = {"aescbc": _decrypt_aescbc, "aesgcm": _decrypt_aesgcm, "secretbox": _decrypt_secretbox}
