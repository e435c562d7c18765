# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""etcd closing the snapshot stream is said as such, never as a certificate problem; a full disk names the path."""

from __future__ import annotations

import base64
import errno
import json

import pytest
import urllib3

from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd import client as etcd_client
from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd.settings import EtcdSettings
from ansible_collections.kubeupgrade.storage.plugins.module_utils._snapshot import runner

ENDPOINT = "https://10.0.0.11:2379"
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
    settings = EtcdSettings(endpoints=[ENDPOINT], ca_cert="/ca.crt", client_cert="/c.crt", client_key="/c.key")
    reader = etcd_client.EtcdReader(settings)
    monkeypatch.setattr(reader, "status", lambda: reader.__dict__.update(endpoint=ENDPOINT) or {"header": {"revision": "9"}})
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


def test_a_full_disk_names_the_directory_and_the_space_needed():
    error = runner._write_error(OSError(errno.ENOSPC, "No space left on device"), "/var/lib/kubeupgrade/s.db.part", 123456)
    assert str(error).startswith("dest: /var/lib/kubeupgrade has no space left for the snapshot (No space left on device): "
                                 "it needs about 123456 bytes"), str(error)
    other = runner._write_error(OSError(errno.EROFS, "Read-only file system"), "/ro/s.db.part", 1)
    assert str(other).startswith("dest: /ro/s.db.part could not be written (Read-only file system)"), str(other)
