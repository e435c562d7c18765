# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Objects whose JSON round trip is a change, on real kube-apiservers (1.36 on etcd 3.5, 1.32 and 1.28 on the default
etcd).

A ControllerRevision's ``data`` is a ``runtime.RawExtension``: stored byte for byte as the client sent it, served
compacted (Go's encoding/json compacts what ``MarshalJSON`` returns), and compared byte for byte on update
(``ValidateControllerRevisionUpdate``, pkg/apis/apps/validation). A client that sends it with spaces - Python's
``json.dumps``, as the official Python client and Ansible's Kubernetes modules do - makes an object that no JSON
round trip can write back: the PUT of it as read is ``422 Invalid ... data: field is immutable``.

- Which writes store such an object in the current encoding without changing it, measured: PUT as read and an empty
  merge patch are refused; the identity-only server-side apply and a protobuf round trip (GET as protobuf, PUT of the
  very bytes) rewrite it unchanged, byte for byte in etcd - except that the apply adds a ``before-first-apply``
  managedFields entry to an object that has none (one written before server-side apply): only the protobuf round
  trip changes nothing at all, so it is the migrator's fallback.
- ``storage_migration`` at its defaults migrates such objects (with and without managedFields) and a normal one: no
  failure, every object's content unchanged through the API, every object rewritten in etcd (its mod_revision moved,
  now encrypted, the plaintext byte-equal to before), and the result says which write stored which objects. It reads
  them as protobuf, so nothing is refused; read as JSON only (as through a proxy that answers JSON), the objects sent
  with spaces are refused as read and written as stored instead.

Every object is made not current first: encryption at rest is turned on for ControllerRevisions, so a write that
reaches etcd is seen (the value becomes ``k8s:enc:aescbc:v1:``) and its plaintext can be compared byte for byte.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import urllib.error
import urllib.request

import pytest
from apisim import k8s_protobuf
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from real_binaries import create
from realcp.plane import ADMIN_TOKEN, locked_state
from test_real_migration_write import _canonical, _run_module

from ansible_collections.kubeupgrade.storage.plugins.module_utils._rewrite import migrator as mig
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ApiError

NAMESPACE = "app"
REVISIONS = f"/apis/apps/v1/namespaces/{NAMESPACE}/controllerrevisions"
PROTOBUF = "application/vnd.kubernetes.protobuf"
ENCRYPTED = b"k8s:enc:aescbc:v1:key1:"
RELEASES = [pytest.param("1.36", "3.5", id="1.36-etcd-3.5"), pytest.param("1.32", None, id="1.32-default-etcd")]
# The issue was found on 1.28 stores: the measurement covers it too.
MEASURED = [*RELEASES, pytest.param("1.28", None, id="1.28-default-etcd")]


def _data(i):
    return {"spec": {"template": {"metadata": {"labels": {"app": f"web-{i}"}},
                                  "spec": {"containers": [{"name": "web", "image": f"nginx:1.{i}", "ports": [80, 443]}]}},
                     "replicas": i, "ratio": 0.5, "note": "é ✓"}}


def _revision_bytes(name, data, separators=None):
    """A ControllerRevision as a client sends it: ``json.dumps`` with its default separators (spaces) or compact."""
    body = {"apiVersion": "apps/v1", "kind": "ControllerRevision", "metadata": {"name": name}, "revision": 1, "data": data}
    return json.dumps(body, separators=separators).encode(), json.dumps(data, separators=separators).encode()


def _raw(plane, method, path, body=None, content_type="application/json", accept="application/json"):
    """(status, body bytes) of one request with the admin token, the body sent as given."""
    headers = {"Accept": accept, "Authorization": f"Bearer {ADMIN_TOKEN}"}
    if body is not None:
        headers["Content-Type"] = content_type
    request = urllib.request.Request(plane.endpoints[0] + path, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30, context=ssl.create_default_context(cafile=plane.ca_cert)) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def _etcd(plane, key):
    """(mod_revision, value) of ``key`` through etcd's JSON gateway."""
    assert not plane.etcd.tls
    body = json.dumps({"key": base64.b64encode(key.encode()).decode()}).encode()
    request = urllib.request.Request(plane.etcd.url + "/v3/kv/range", data=body, method="POST")
    with urllib.request.urlopen(request, timeout=10) as answer:
        kvs = json.loads(answer.read()).get("kvs") or []
    assert len(kvs) == 1, key
    return int(kvs[0]["mod_revision"]), base64.b64decode(kvs[0]["value"])


def _key(name):
    return f"/registry/controllerrevisions/{NAMESPACE}/{name}"


def _encrypt_revisions(plane) -> bytes:
    """Restart the apiserver with aescbc for ControllerRevisions (identity still reads what was stored before): every
    object stored so far is then not current, and a write of it reaches etcd. Returns the key."""
    key = os.urandom(32)
    path = os.path.join(plane.workdir, "encrypt-controllerrevisions.yaml")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n"
                     "  - resources:\n      - controllerrevisions.apps\n    providers:\n      - aescbc:\n"
                     f"          keys:\n            - name: key1\n              secret: {base64.b64encode(key).decode()}\n"
                     "      - identity: {}\n")
    with locked_state(plane.state_file) as state:
        state["overrides"]["extra_flags"].setdefault("*", []).append(f"--encryption-provider-config={path}")
    plane.restart(0)
    return key


def _plaintext(value, key):
    """What etcd holds, decrypted (aescbc: IV then AES-CBC with PKCS#7 padding) when encrypted."""
    if not value.startswith(ENCRYPTED):
        return value
    rest = value[len(ENCRYPTED):]
    decryptor = Cipher(algorithms.AES(key), modes.CBC(rest[:16])).decryptor()
    padded = decryptor.update(rest[16:]) + decryptor.finalize()
    return padded[:-padded[-1]]


def _create_spaced(plane, name, i, bare=False):
    body, data = _revision_bytes(name, _data(i))
    status, answer = _raw(plane, "POST", REVISIONS, body)
    assert status == 201, answer
    _revision, value = _etcd(plane, _key(name))
    assert data in value  # stored byte for byte as sent, spaces included
    if bare:
        plane.etcd.put(_key(name), k8s_protobuf.without_managed_fields(value))  # an object written before server-side apply
    return data


def _state(plane, name, key):
    """What the API serves (JSON and protobuf) and etcd holds (mod_revision and plaintext) of one object."""
    status, served = _raw(plane, "GET", f"{REVISIONS}/{name}")
    assert status == 200, served
    status, protobuf = _raw(plane, "GET", f"{REVISIONS}/{name}", accept=PROTOBUF)
    assert status == 200 and protobuf.startswith(mig.PROTOBUF_MAGIC)
    revision, value = _etcd(plane, _key(name))
    return {"json": json.loads(served), "protobuf": protobuf, "mod_revision": revision,
            "encrypted": value.startswith(ENCRYPTED), "plaintext": _plaintext(value, key)}


def _identity_apply(obj):
    meta = obj["metadata"]
    return json.dumps({"apiVersion": "apps/v1", "kind": "ControllerRevision",
                       "metadata": {"name": meta["name"], "namespace": NAMESPACE, "uid": meta["uid"],
                                    "resourceVersion": meta["resourceVersion"]}}).encode()


WRITES = {
    "put": lambda plane, path, before: _raw(plane, "PUT", path, json.dumps(before["json"], separators=(",", ":")).encode()),
    "merge-patch": lambda plane, path, before: _raw(plane, "PATCH", path, b"{}", "application/merge-patch+json"),
    "apply": lambda plane, path, before: _raw(plane, "PATCH", path + f"?fieldManager={mig.FIELD_MANAGER}",
                                              _identity_apply(before["json"]), mig.APPLY_PATCH),
    "protobuf": lambda plane, path, before: _raw(plane, "PUT", path + f"?fieldManager={mig.FIELD_MANAGER}",
                                                 before["protobuf"], PROTOBUF),
}


@pytest.mark.parametrize("release, etcd_version", MEASURED)
def test_which_writes_store_a_controller_revision_sent_with_spaces_unchanged(real_plane_factory, release, etcd_version):
    plane = real_plane_factory([release], **({"etcd_version": etcd_version} if etcd_version else {}))
    create(plane, "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
    cases = [(write, False) for write in WRITES] + [("apply", True), ("protobuf", True)]
    for i, (write, bare) in enumerate(cases):
        _create_spaced(plane, f"{write}{'-bare' if bare else ''}", i, bare)
    key = _encrypt_revisions(plane)

    for write, bare in cases:
        name = f"{write}{'-bare' if bare else ''}"
        before = _state(plane, name, key)
        assert not before["encrypted"] and ("managedFields" not in before["json"]["metadata"]) is bare
        status, answer = WRITES[write](plane, f"{REVISIONS}/{name}", before)
        after = _state(plane, name, key)
        if write in ("put", "merge-patch"):  # the round trip through JSON changes data: refused, nothing written
            refusal = json.loads(answer)
            assert status == 422 and refusal["reason"] == "Invalid", (name, status, answer)
            assert mig.refused_as_a_change(ApiError("", status=status, body=refusal)), refusal
            assert [(c["field"], c["message"].endswith(mig.IMMUTABLE)) for c in refusal["details"]["causes"]] == [
                ("data", True)]
            assert after["mod_revision"] == before["mod_revision"] and not after["encrypted"], name
            continue
        assert status == 200, (name, status, answer)
        assert after["mod_revision"] > before["mod_revision"] and after["encrypted"], f"{name}: not rewritten"
        if write == "apply" and bare:  # a change: server-side apply starts tracking the fields of an untracked object
            managers = [entry["manager"] for entry in after["json"]["metadata"].get("managedFields") or []]
            assert managers == ["before-first-apply"], managers
            assert after["plaintext"] != before["plaintext"]
            continue
        # unchanged: byte for byte in etcd, and as served (but for the resourceVersion)
        assert after["plaintext"] == before["plaintext"], name
        assert after["json"]["metadata"].get("managedFields") == before["json"]["metadata"].get("managedFields"), name
        assert _canonical(after["json"]) == _canonical(before["json"]), name


@pytest.mark.parametrize("read", ["as-served", "json-only"])
@pytest.mark.parametrize("release, etcd_version", RELEASES)
def test_the_default_migration_rewrites_controller_revisions_sent_with_spaces_unchanged(
        real_plane_factory, capsys, monkeypatch, release, etcd_version, read):
    """``as-served``: the migrator lists them as protobuf, the bytes as stored, and PUTs those back: no refusal.
    ``json-only``: as through a proxy that answers JSON only - the PUT as read is refused for the objects sent with
    spaces, which are written as stored instead (GET as protobuf, PUT of those bytes)."""
    if read == "json-only":
        monkeypatch.setattr(mig, "FULL_PROTOBUF_OR_JSON", mig.FULL_JSON)
    plane = real_plane_factory([release], **({"etcd_version": etcd_version} if etcd_version else {}))
    create(plane, "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
    spaced = {f"spaced-{i}": _create_spaced(plane, f"spaced-{i}", i) for i in range(3)}
    spaced["spaced-bare"] = _create_spaced(plane, "spaced-bare", 7, bare=True)
    body, _data_bytes = _revision_bytes("compact", _data(9), separators=(",", ":"))
    status, answer = _raw(plane, "POST", REVISIONS, body)
    assert status == 201, answer
    names = [*spaced, "compact"]
    key = _encrypt_revisions(plane)
    before = {name: _state(plane, name, key) for name in names}
    assert not any(state["encrypted"] for state in before.values())

    result = _run_module(plane, capsys, resources=["controllerrevisions.apps"])

    assert not result.get("failed"), result.get("msg")
    [entry] = result["migrations"]
    progress = entry["progress"]
    assert entry["resource"] == "controllerrevisions.apps" and entry["backend"] == "client", entry
    assert entry["status"] == "succeeded" and entry["verified"] and entry["objects_failed"] == 0, entry["failed_objects"]
    assert entry["objects_migrated"] == len(names) and progress["objects_written"] == len(names), progress
    # which write stored which objects: put for the resource; read as stored, nothing is refused; read as JSON, the
    # objects whose PUT as read was refused are written as stored
    assert progress["write"] == "put" and not progress["write_fallback"], progress
    if read == "as-served":
        assert progress["encoding"] == "protobuf", progress
        assert progress["objects_written_as_stored"] == 0 and not progress["write_as_stored"], progress
    else:
        assert progress["encoding"] == "json", progress
        assert progress["objects_written_as_stored"] == len(spaced), progress
        assert progress["write_as_stored"].startswith("protobuf: PUT back as read, controllerrevisions.apps app/spaced-")
        assert "(HTTP 422: data: field is immutable)" in progress["write_as_stored"], progress["write_as_stored"]
    for name in names:
        after = _state(plane, name, key)
        # rewritten: a new etcd revision, encrypted now
        assert after["mod_revision"] > before[name]["mod_revision"] and after["encrypted"], f"{name}: not rewritten"
        # unchanged: etcd's plaintext byte for byte (data with its spaces), and everything the API serves
        assert after["plaintext"] == before[name]["plaintext"], name
        assert spaced.get(name, b"") in after["plaintext"]
        assert after["json"]["metadata"].get("managedFields") == before[name]["json"]["metadata"].get("managedFields")
        assert _canonical(after["json"]) == _canonical(before[name]["json"]), name
        assert after["json"]["metadata"]["resourceVersion"] != before[name]["json"]["metadata"]["resourceVersion"]
