# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""etcd closing the snapshot stream is said as such, never as a certificate problem, through gRPC (the default) and
through the JSON gateway (``validate_certs: false``); a stream that stops sending is cut after the timeout, a long one
is not; the status is the same dict of ints both ways; a full disk names the path."""

from __future__ import annotations

import base64
import errno
import json
import threading

import grpc
import pytest
import urllib3

from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd import client as etcd_client
from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd.etcdpb import rpc_pb2
from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd.settings import EtcdSettings
from ansible_collections.kubeupgrade.storage.plugins.module_utils._snapshot import runner

ENDPOINT = "https://10.0.0.11:2379"
STATUS = {"header": {"revision": 9}, "version": "3.5.30"}
RESET = urllib3.exceptions.ProtocolError("Connection aborted.", ConnectionResetError(104, "Connection reset by peer"))


class _Response:
    status = 200

    def __init__(self, pieces):
        self.pieces = pieces

    def stream(self, _size):
        for piece in self.pieces:
            if isinstance(piece, Exception):
                raise piece
            yield piece

    def release_conn(self):
        pass


class _Pool:
    def __init__(self, answer):
        self.answer = answer

    def request(self, *_args, **_kwargs):
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def _reader(monkeypatch, answer):
    """A reader whose status went through the gateway (``validate_certs: false``), its snapshot answered by ``answer``."""
    settings = EtcdSettings(endpoints=[ENDPOINT], validate_certs=False)
    reader = etcd_client.EtcdReader(settings)
    monkeypatch.setattr(reader, "_status", lambda transport: reader.__dict__.update(endpoint=ENDPOINT) or (None, STATUS))
    reader._gateway = _Pool(answer)
    return reader


def _message(blob: bytes) -> bytes:
    return json.dumps({"result": {"blob": base64.b64encode(blob).decode()}}).encode() + b"\n"


@pytest.mark.parametrize("answer, size", [
    (RESET, 0),  # etcd died as the stream started, after answering its status over TLS
    (_Response([_message(b"x" * 4096), RESET]), 4096),  # ... or in the middle
    (_Response([_message(b"x" * 10), ConnectionResetError(104, "Connection reset by peer")]), 10),
], ids=["at-start", "mid-stream", "raw-reset"])
def test_a_stream_etcd_closed_is_said_as_such(monkeypatch, answer, size):
    written = []
    with pytest.raises(etcd_client.EtcdError) as raised:
        _reader(monkeypatch, answer).snapshot(written.append)
    message = str(raised.value)
    assert message.startswith(f"etcd at {ENDPOINT} closed the snapshot stream after {size} bytes"), message
    assert "etcd stopped or restarted" in message and "TLS" not in message and "certificate" not in message, message


class _RpcError(grpc.RpcError):
    def __init__(self, code, details):
        super().__init__(details)
        self._code, self._details = code, details

    def code(self):
        return self._code

    def details(self):
        return self._details


CLOSED = _RpcError(grpc.StatusCode.UNAVAILABLE, "Stream removed (Socket closed)")  # grpcio's words for a killed etcd


class _Call:
    """grpcio's snapshot call: each piece a SnapshotResponse, an exception raised where it stands; ``None`` waits
    until the call is cancelled (etcd that stops sending)."""

    def __init__(self, pieces):
        self.pieces, self.cancelled = iter(pieces), threading.Event()

    def __iter__(self):
        return self

    def __next__(self):
        piece = next(self.pieces)
        if piece is None:
            assert self.cancelled.wait(10), "the call was never cancelled"
            raise _RpcError(grpc.StatusCode.CANCELLED, "Locally cancelled by application!")
        if isinstance(piece, Exception):
            raise piece
        return rpc_pb2.SnapshotResponse(blob=piece)

    def cancel(self):
        self.cancelled.set()
        return True


class _Channel:
    def __init__(self, pieces, timeout=30.0):
        self.call, self.timeout, self.closed = _Call(pieces), timeout, False

    def snapshot(self):
        return self.call

    def close(self):
        self.closed = True


def _grpc_reader(monkeypatch, pieces, timeout=30.0):
    settings = EtcdSettings(endpoints=[ENDPOINT], ca_cert="/ca.crt", client_cert="/c.crt", client_key="/c.key", timeout=timeout)
    reader, channel = etcd_client.EtcdReader(settings), _Channel(pieces, timeout)
    monkeypatch.setattr(reader, "_status", lambda transport: reader.__dict__.update(endpoint=ENDPOINT) or (channel, STATUS))
    return reader, channel


def test_the_grpc_stream_is_written_piece_by_piece_and_the_call_ended(monkeypatch):
    written = []
    reader, channel = _grpc_reader(monkeypatch, [b"a" * 10, b"", b"b" * 5])
    assert reader.snapshot(written.append) == {"endpoint": ENDPOINT, "revision_before": 9, "bytes": 15, "etcd_version": "3.5.30"}
    assert written == [b"a" * 10, b"", b"b" * 5] and channel.closed and channel.call.cancelled.is_set()


@pytest.mark.parametrize("pieces, size", [
    ([CLOSED], 0),  # etcd died as the stream started, after answering its status over TLS
    ([b"x" * 4096, CLOSED], 4096),  # ... or in the middle
    ([b"x" * 10, _RpcError(grpc.StatusCode.UNAVAILABLE, "recvmsg:Connection reset by peer")], 10),
    ([b"x" * 10, _RpcError(grpc.StatusCode.CANCELLED, "Cancelled")], 10),  # a member stopping cancels its streams
], ids=["at-start", "mid-stream", "reset", "cancelled-by-etcd"])
def test_a_grpc_stream_etcd_closed_is_said_as_such(monkeypatch, pieces, size):
    reader, channel = _grpc_reader(monkeypatch, pieces)
    with pytest.raises(etcd_client.EtcdError) as raised:
        reader.snapshot(lambda _piece: None)
    message = str(raised.value)
    assert message.startswith(f"etcd at {ENDPOINT} closed the snapshot stream after {size} bytes (gRPC "), message
    assert "etcd stopped or restarted" in message and "TLS" not in message and "certificate" not in message, message
    assert raised.value.details == {"endpoint": ENDPOINT, "bytes": size} and channel.closed


def test_an_error_etcd_sends_in_the_stream_is_its_own(monkeypatch):
    reader, _channel = _grpc_reader(monkeypatch, [b"x", _RpcError(grpc.StatusCode.UNKNOWN, "etcdserver: no leader")])
    with pytest.raises(etcd_client.EtcdError, match=rf"^etcd at {ENDPOINT} failed while sending the snapshot: etcdserver: no leader$"):
        reader.snapshot(lambda _piece: None)


def test_a_stream_that_stops_sending_is_cut_after_the_timeout_a_slow_one_is_not(monkeypatch):
    """The timeout bounds each wait for the next piece (as the gateway's read timeout did), not the whole stream."""
    reader, channel = _grpc_reader(monkeypatch, [b"x" * 100, None], timeout=0.3)
    with pytest.raises(etcd_client.EtcdError) as raised:
        reader.snapshot(lambda _piece: None)
    assert str(raised.value).startswith(f"etcd at {ENDPOINT} closed the snapshot stream after 100 bytes (nothing received "
                                        "for 0.3 s)"), str(raised.value)
    assert channel.call.cancelled.is_set()

    slow = threading.Event()
    reader, channel = _grpc_reader(monkeypatch, [b"x"] * 3, timeout=0.3)
    assert reader.snapshot(lambda _piece: slow.wait(0.4))["bytes"] == 3  # 1.2 s in all; time spent writing is not waiting


def test_a_full_disk_stops_the_stream_and_is_the_callers_to_say(monkeypatch):
    reader, channel = _grpc_reader(monkeypatch, [b"x", b"y"])

    def full(_piece):
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError):
        reader.snapshot(full)
    assert channel.call.cancelled.is_set() and channel.closed


def test_the_status_is_the_same_dict_of_ints_through_grpc_and_the_gateway():
    """The gateway writes etcd's 64-bit integers as strings, protobuf gives ints; callers read dbSize, dbSizeInUse,
    header.revision and version."""
    answer = rpc_pb2.StatusResponse(header=rpc_pb2.ResponseHeader(cluster_id=2**63 + 5, revision=7), version="3.5.30",
                                    dbSize=4096, dbSizeInUse=2048, raftIndex=12)
    channel = etcd_client._GrpcChannel.__new__(etcd_client._GrpcChannel)
    channel._status, channel.timeout = (lambda request, timeout: answer), 3.0
    gateway = etcd_client._status_document({"header": {"cluster_id": str(2**63 + 5), "revision": "7"}, "version": "3.5.30",
                                            "dbSize": "4096", "dbSizeInUse": "2048", "raftIndex": "12"})
    assert channel.status() == gateway == {"header": {"cluster_id": 2**63 + 5, "revision": 7}, "version": "3.5.30",
                                           "dbSize": 4096, "dbSizeInUse": 2048, "raftIndex": 12}


def test_without_certificate_validation_the_status_and_snapshot_go_through_the_gateway(monkeypatch):
    """grpcio cannot skip the certificate check: no channel is made; with it, gRPC (the default) is asked first."""
    made = []
    monkeypatch.setattr(etcd_client, "_GrpcChannel", lambda endpoint, settings: made.append(endpoint) or pytest.fail("gRPC"))
    reader = etcd_client.EtcdReader(EtcdSettings(endpoints=[ENDPOINT], validate_certs=False))
    monkeypatch.setattr(reader, "_post", lambda endpoint, body, path: {"header": {"revision": "3"}, "dbSize": "10"})
    assert reader.status() == {"header": {"revision": 3}, "dbSize": 10} and reader.db_size() == 10 and made == []


def test_a_full_disk_names_the_directory_and_the_space_needed():
    error = runner._write_error(OSError(errno.ENOSPC, "No space left on device"), "/var/lib/kubeupgrade/s.db.part", 123456)
    assert str(error).startswith("dest: /var/lib/kubeupgrade has no space left for the snapshot (No space left on device): "
                                 "it needs about 123456 bytes"), str(error)
    other = runner._write_error(OSError(errno.EROFS, "Read-only file system"), "/ro/s.db.part", 1)
    assert str(other).startswith("dest: /ro/s.db.part could not be written (Read-only file system)"), str(other)
