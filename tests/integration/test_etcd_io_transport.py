# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The audit's reader against a real etcd, through gRPC and through the JSON gateway: the same (key, value) sequence
as one unbounded range, one revision across bounded windows, compaction named, the gateway where gRPC cannot be had;
the member's status and snapshot by the same rule. Correctness only: the speed is measured by benchmarks/bench_audit.py,
never asserted."""

from __future__ import annotations

import base64
import hashlib
import json
import random

import etcd_fixture
import grpc
import pytest
from etcd_fixture import free_port

from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd import client as etcd_client
from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd import windows
from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd.client import EtcdError, EtcdReader
from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd.settings import EtcdSettings, ScanOptions

PAGE = 20  # small pages: the stores below are more than _Windows.FROM pages, so requests go to bounded windows


def _settings(server, **extra) -> EtcdSettings:
    kwargs = {"endpoints": [server.url], "timeout": 10.0}
    if server.tls:
        kwargs.update(ca_cert=server.pki.ca_cert, client_cert=server.pki.client_cert, client_key=server.pki.client_key)
    kwargs.update(extra)
    return EtcdSettings(**kwargs)


def _store():
    """Keys shaped like an apiserver's (decimal, hex and random names, resources of very different sizes), values of
    every length from empty to 40 KiB, keys outside the prefix around it."""
    rng = random.Random(5)
    pairs = [(f"/registry/configmaps/bulk/cm-{i:05d}".encode(), rng.randbytes(rng.randrange(0, 600))) for i in range(1500)]
    pairs += [(f"/registry/events/ns-{rng.randrange(9)}/pod.{rng.getrandbits(60):x}".encode(), rng.randbytes(200))
              for _i in range(700)]
    pairs += [(b"/registry/leases/kube-system/" + name, b"") for name in (b"a", b"b", b"z" * 300)]
    pairs += [(b"/registry/secrets/big/s-%d" % i, rng.randbytes(40000)) for i in range(5)]
    pairs += [(b"/registry/zz/" + rng.randbytes(rng.randrange(1, 20)), b"\xff" * 3) for _i in range(100)]
    return pairs + [(b"/registrx/outside", b"no"), (b"/registry", b"no"), (b"/other/key", b"no")]


def _put(server, pairs):
    server.put_many(pairs, batch=64)


def _one_range(server, prefix=b"/registry/"):
    """Every (key, value) under the prefix in one unbounded range: what the scan must reproduce."""
    return server.range_prefix(prefix)


@pytest.mark.parametrize("fixture", ["etcd_plain", "etcd_tls"])
def test_grpc_and_gateway_read_the_same_pairs_as_one_range(request, fixture):
    server = request.getfixturevalue(fixture)
    _put(server, _store())
    expected = _one_range(server)
    assert len(expected) > windows._Windows.FROM * PAGE
    revisions = set()
    for transport in ("auto", "grpc", "gateway"):
        for keys_only in (False, True):
            reader = EtcdReader(_settings(server))
            got = list(reader.scan(ScanOptions(page_size=PAGE, transport=transport, keys_only=keys_only)))
            assert got == ([(k, b"") for k, _v in expected] if keys_only else expected), (transport, keys_only)
            assert reader.transport == ("gateway" if transport == "gateway" else "grpc")
            assert reader.endpoint == server.url and reader.pages >= len(expected) / PAGE
            revisions.add(reader.revision)
    assert len(revisions) == 1


@pytest.mark.parametrize("transport", ["grpc", "gateway"])
def test_one_revision_across_windows(etcd_plain, transport):
    _put(etcd_plain, _store())
    expected = _one_range(etcd_plain)
    reader = EtcdReader(_settings(etcd_plain))
    got = []
    for index, pair in enumerate(reader.scan(ScanOptions(page_size=PAGE, transport=transport))):
        got.append(pair)
        if index == 0:  # after the first page: writes and deletes in every later window must not be seen
            _put(etcd_plain, [(b"/registry/configmaps/bulk/cm-%05d-new" % i, b"new") for i in range(0, 1500, 100)])
            _put(etcd_plain, [(b"/registry/configmaps/bulk/cm-00700", b"changed"), (b"/registry/aaa/new", b"new")])
            etcd_plain._request("POST", "/v3/kv/deleterange", {"key": base64.b64encode(b"/registry/events/").decode(),
                                                               "range_end": base64.b64encode(b"/registry/events0").decode()})
    assert got == expected
    assert reader.revision < int(json.loads(etcd_plain._request("POST", "/v3/kv/range", {"key": "eA=="}))["header"]["revision"])


@pytest.mark.parametrize("transport", ["grpc", "gateway"])
def test_compaction_under_the_scan_is_named(etcd_plain, transport):
    _put(etcd_plain, [(b"/registry/configmaps/ns/cm-%03d" % i, b"v") for i in range(300)])
    scan = EtcdReader(_settings(etcd_plain)).scan(ScanOptions(page_size=10, transport=transport))
    next(scan)
    etcd_plain.put("/registry/configmaps/ns/later", b"v")
    revision = int(json.loads(etcd_plain._request("POST", "/v3/kv/range", {"key": "eA=="}))["header"]["revision"])
    etcd_plain._request("POST", "/v3/kv/compaction", {"revision": revision, "physical": True})
    with pytest.raises(EtcdError) as raised:
        list(scan)
    message = str(raised.value)
    assert f"etcd at {etcd_plain.url} compacted the revision the audit was reading" in message
    assert "required revision has been compacted" in message and "run the audit again" in message


class _NoHttp2(grpc.RpcError):
    """What grpcio raises when the TLS handshake does not agree on h2 (its words, as through an HTTP/1.1-only proxy)."""

    def code(self):
        return grpc.StatusCode.UNAVAILABLE

    def details(self):
        return "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:2379: Cannot check peer: missing selected ALPN property."


def test_without_http2_the_gateway_reads(etcd_tls, monkeypatch):
    _put(etcd_tls, _store()[:400])
    expected = _one_range(etcd_tls)

    def no_http2(channel, request):
        raise _NoHttp2()

    monkeypatch.setattr(etcd_client._GrpcChannel, "range", no_http2)
    reader = EtcdReader(_settings(etcd_tls))
    assert list(reader.scan(ScanOptions(page_size=PAGE))) == expected and reader.transport == "gateway"
    with pytest.raises(EtcdError) as raised:
        list(EtcdReader(_settings(etcd_tls)).scan(ScanOptions(page_size=PAGE, transport="grpc")))
    assert f"etcd at {etcd_tls.url} answered, but not in gRPC" in str(raised.value) and "ALPN h2" in str(raised.value)


def test_without_certificate_validation_the_gateway_reads(etcd_tls):
    """grpcio cannot skip the server's certificate check: ``validate_certs: false`` reads through the gateway."""
    _put(etcd_tls, _store()[:100])
    reader = EtcdReader(_settings(etcd_tls, ca_cert=None, validate_certs=False))
    assert list(reader.scan(ScanOptions(page_size=PAGE))) == _one_range(etcd_tls) and reader.transport == "gateway"


def test_an_unreachable_endpoint_is_skipped_and_grpc_kept(etcd_plain):
    _put(etcd_plain, _store()[:100])
    dead = f"http://127.0.0.1:{free_port()}"
    reader = EtcdReader(_settings(etcd_plain, endpoints=[dead, etcd_plain.url]))
    assert list(reader.scan(ScanOptions(page_size=PAGE))) == _one_range(etcd_plain)
    assert reader.endpoint == etcd_plain.url and reader.transport == "grpc"
    with pytest.raises(EtcdError) as raised:
        list(EtcdReader(_settings(etcd_plain, endpoints=[dead], timeout=3.0)).scan(ScanOptions(transport="grpc")))
    assert f"etcd at {dead} is unreachable" in str(raised.value)


def test_a_proxy_in_the_environment_is_not_used(etcd_plain, monkeypatch):
    """etcd is reached directly, as through the gateway: grpcio would otherwise follow these variables."""
    _put(etcd_plain, _store()[:100])
    dead = f"http://127.0.0.1:{free_port()}"
    for name in ("grpc_proxy", "https_proxy", "http_proxy"):
        monkeypatch.setenv(name, dead)
    reader = EtcdReader(_settings(etcd_plain, timeout=5.0))
    assert list(reader.scan(ScanOptions(page_size=PAGE, transport="grpc"))) == _one_range(etcd_plain)


def test_an_unknown_transport_is_refused(etcd_plain):
    with pytest.raises(etcd_client.ConfigurationError, match="transport must be one of auto, grpc, gateway"):
        list(EtcdReader(_settings(etcd_plain)).scan(ScanOptions(transport="http3")))


# --- the member's status and snapshot: the same rule ------------------------------------------------------------


@pytest.fixture(params=[(None, False), (None, True), ("3.5", True)], ids=["plain", "tls", "3.5-tls"])
def member(request, tmp_path):
    """Debian's etcd 3.4 (plain and TLS with client certificates) and etcd 3.5 (TLS)."""
    version, tls = request.param
    yield from etcd_fixture.serve(tmp_path / "etcd", tls=tls, version=version)


def _snapshot(reader, transport="auto"):
    pieces = []
    taken = reader.snapshot(pieces.append, transport=transport)
    data = b"".join(pieces)
    assert taken["bytes"] == len(data) and hashlib.sha256(data[:-32]).digest() == data[-32:], taken  # etcd's trailer
    return taken, len(pieces)


def test_status_and_snapshot_read_the_same_through_grpc_and_the_gateway(member):
    """gRPC by default (no urllib3 pool is ever made), the gateway when asked: the same status, as ints, and a whole
    snapshot either way."""
    _put(member, _store()[:400])
    grpc_reader = EtcdReader(_settings(member))
    status = grpc_reader.status()
    assert grpc_reader._gateway is None and grpc_reader.endpoint == member.url
    assert status["dbSize"] >= status["dbSizeInUse"] > 0 and status["header"]["revision"] > 1, status
    assert status["version"].startswith(member.version or "3.4."), status
    gateway_reader = EtcdReader(_settings(member))
    through_gateway = gateway_reader.status(transport="gateway")
    assert gateway_reader._gateway is not None
    assert {key: type(value) for key, value in through_gateway.items()} == {key: type(value) for key, value in status.items()}
    assert through_gateway["header"]["revision"] == status["header"]["revision"], (status, through_gateway)

    taken, pieces = _snapshot(grpc_reader)
    assert grpc_reader._gateway is None and pieces > 1  # etcd's 32 KiB pieces, each one SnapshotResponse
    assert taken["revision_before"] == status["header"]["revision"] and taken["etcd_version"] == status["version"], taken
    assert _snapshot(gateway_reader, "gateway")[0]["bytes"] == taken["bytes"]


def test_without_certificate_validation_the_status_and_snapshot_go_through_the_gateway(etcd_tls):
    _put(etcd_tls, _store()[:100])
    reader = EtcdReader(_settings(etcd_tls, ca_cert=None, validate_certs=False))
    assert reader.status()["dbSize"] > 0 and reader._gateway is not None
    assert _snapshot(reader)[0]["bytes"] > 0


def test_a_status_or_snapshot_without_http2_goes_through_the_gateway(etcd_tls, monkeypatch):
    def no_http2(channel):
        raise _NoHttp2()

    monkeypatch.setattr(etcd_client._GrpcChannel, "status", no_http2)
    reader = EtcdReader(_settings(etcd_tls))
    assert reader.status()["dbSize"] > 0 and reader._gateway is not None
    assert _snapshot(EtcdReader(_settings(etcd_tls)))[0]["bytes"] > 0
    with pytest.raises(EtcdError) as raised:
        EtcdReader(_settings(etcd_tls)).status(transport="grpc")
    assert f"etcd at {etcd_tls.url} answered, but not in gRPC" in str(raised.value) and "ALPN h2" in str(raised.value)


def test_a_status_from_no_member_names_each_and_skips_the_dead_one(etcd_plain):
    dead = f"http://127.0.0.1:{free_port()}"
    reader = EtcdReader(_settings(etcd_plain, endpoints=[dead, etcd_plain.url]))
    assert reader.status()["dbSize"] > 0 and reader.endpoint == etcd_plain.url and reader._gateway is None
    with pytest.raises(EtcdError, match=rf"etcd at {dead} is unreachable"):
        EtcdReader(_settings(etcd_plain, endpoints=[dead], timeout=3.0)).status()
