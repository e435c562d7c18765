# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The pieces of the audit's gRPC reader that need no etcd: HPACK (RFC 7541's own examples), the range messages, the
windows that bound each range request (against a model of etcd's range: every key read once, in order), the throttle."""

from __future__ import annotations

import bisect
import random

import pytest

from ansible_collections.kubeupgrade.storage.plugins.module_utils._audit import etcd_io, etcd_wire
from ansible_collections.kubeupgrade.storage.plugins.module_utils._audit.etcd_io import ScanOptions, prefix_range_end


def _hex(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", ""))


# RFC 7541 C.4 (requests, Huffman-coded, one dynamic table) and C.6 (responses, table of 256 bytes: evictions)
C4 = [
    ("8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
     {":method": "GET", ":scheme": "http", ":path": "/", ":authority": "www.example.com"}, 57),
    ("8286 84be 5886 a8eb 1064 9cbf",
     {":method": "GET", ":scheme": "http", ":path": "/", ":authority": "www.example.com", "cache-control": "no-cache"}, 110),
    ("8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
     {":method": "GET", ":scheme": "https", ":path": "/index.html", ":authority": "www.example.com",
      "custom-key": "custom-value"}, 164),
]
DATE1, DATE2, LOCATION = "Mon, 21 Oct 2013 20:13:21 GMT", "Mon, 21 Oct 2013 20:13:22 GMT", "https://www.example.com"
C6 = [
    ("4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6 2d1b ff6e 919d 29ad 1718 63c7 "
     "8f0b 97c8 e9ae 82ae 43d3",
     {":status": "302", "cache-control": "private", "date": DATE1, "location": LOCATION}, 222),
    ("4883 640e ffc1 c0bf", {":status": "307", "cache-control": "private", "date": DATE1, "location": LOCATION}, 222),
    ("88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab 77ad 94e7 821d d7f2 e6c7 b335 "
     "dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f 9587 3160 65c0 03ed 4ee5 b106 3d50 07",
     {":status": "200", "cache-control": "private", "date": DATE2, "location": LOCATION, "content-encoding": "gzip",
      "set-cookie": "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1"}, 215),
]


@pytest.mark.parametrize("blocks, table_size", [(C4, 4096), (C6, 256)], ids=["rfc7541-c4", "rfc7541-c6"])
def test_hpack_decodes_the_rfc_examples_in_sequence(blocks, table_size):
    decoder = etcd_wire._HpackDecoder()
    decoder.limit = table_size
    for block, fields, size in blocks:
        assert decoder.decode(_hex(block)) == fields
        assert decoder.size == size


@pytest.mark.parametrize("coded, text", [
    ("f1e3 c2e5 f23a 6ba0 ab90 f4ff", b"www.example.com"),
    ("a8eb 1064 9cbf", b"no-cache"),
    ("25a8 49e9 5ba9 7d7f", b"custom-key"),
    ("6402", b"302"),
    ("", b""),
])
def test_huffman_decoding(coded, text):
    assert etcd_wire._huffman_decode(_hex(coded)) == text


@pytest.mark.parametrize("coded", ["ff", "f1e3 c2e5 f23a 6ba0 ab90 f4ff ff", "fe"], ids=["8-bit-padding", "long-padding", "zero-in-padding"])
def test_huffman_refuses_bad_padding(coded):
    with pytest.raises(etcd_wire._GrpcProtocolError):
        etcd_wire._huffman_decode(_hex(coded))


def test_hpack_refuses_an_index_outside_the_tables():
    with pytest.raises(etcd_wire._GrpcProtocolError, match="out of the tables"):
        etcd_wire._HpackDecoder().decode(b"\xbf")  # index 63: the dynamic table is empty


def _field(number: int, wire: int, payload) -> bytes:
    tag = etcd_wire._varint_bytes(number << 3 | wire)
    if wire == 0:
        return tag + etcd_wire._varint_bytes(payload)
    return tag + etcd_wire._varint_bytes(len(payload)) + payload


def _kv(key: bytes, value: bytes, revision: int = 7, extra: bytes = b"") -> bytes:
    body = _field(1, 2, key) + _field(2, 0, revision) + _field(3, 0, revision) + _field(4, 0, 1) + extra
    if value:
        body += _field(5, 2, value)
    return _field(2, 2, body + _field(6, 0, 0))


def _answer(*kvs: bytes, revision=123456789, more=True, count=5) -> bytes:
    header = _field(1, 0, 14841639068965178418) + _field(2, 0, 10276657743932975437) + _field(3, 0, revision) + _field(4, 0, 2)
    message = _field(1, 2, header) + b"".join(kvs) + _field(3, 0, int(more)) + _field(4, 0, count)
    return b"\x00" + len(message).to_bytes(4, "big") + message


def test_range_answer_decodes_keys_values_revision_more_and_count():
    big = bytes(range(256)) * 700  # a value longer than a two-byte varint
    answer = _answer(_kv(b"/registry/a", b"x"), _kv(b"/registry/b", b""), _kv(b"/registry/c", big),
                     _kv(b"/registry/d", b"y", extra=_field(99, 2, b"unknown") + _field(17, 0, 3)))
    page = etcd_wire._decode_range(answer)
    assert page.pairs == [(b"/registry/a", b"x"), (b"/registry/b", b""), (b"/registry/c", big), (b"/registry/d", b"y")]
    assert (page.revision, page.more, page.count) == (123456789, True, 5)
    empty = etcd_wire._decode_range(_answer(more=False, count=0))
    assert (empty.pairs, empty.more, empty.count) == ([], False, 0)


@pytest.mark.parametrize("answer", [_answer(_kv(b"k", b"v"))[:-3], _answer(_kv(b"k", b"v")) + b"\x12\x05ab"],
                         ids=["truncated", "overrun"])
def test_range_answer_that_does_not_parse_is_a_protocol_error(answer):
    with pytest.raises(etcd_wire._GrpcProtocolError, match="not a RangeResponse"):
        etcd_wire._decode_range(answer)


@pytest.mark.parametrize("revision, keys_only, tail", [
    (0, False, b""), (42, False, b"\x20\x2a\x38\x01"), (0, True, b"\x40\x01"), (300, True, b"\x20\xac\x02\x38\x01\x40\x01"),
])
def test_range_request_pins_the_revision_serializable(revision, keys_only, tail):
    request = etcd_wire._range_request(b"/registry/", b"/registry0", ScanOptions(page_size=500, keys_only=keys_only), revision)
    assert request == b"\x0a\x0a/registry/\x12\x0a/registry0\x18\xf4\x03" + tail


def _etcd(keys):
    """A model of etcd's range: up to ``limit`` keys in [start, end), more, and the count of all keys in the range."""
    def range_(start, end, limit):
        low, high = bisect.bisect_left(keys, start), bisect.bisect_left(keys, end)
        return etcd_wire._RangePage(1, [(k, b"") for k in keys[low:min(high, low + limit)]], high - low > limit, high - low)
    return range_


def _walk(keys, page_size, prefix=b"/registry/"):
    """Scan the model as EtcdReader does; (keys read, requests, keys etcd walked to count them)."""
    etcd = _etcd(sorted(keys))
    windows = etcd_wire._Windows(prefix, prefix_range_end(prefix), page_size)
    page = etcd(prefix, windows.end, page_size)
    read, requests, walked = [], 1, page.count
    while True:
        read.extend(k for k, _v in page.pairs)
        if not windows.advance(page):
            return read, requests, walked
        assert windows.start < windows.range_end <= windows.end
        page = etcd(windows.start, windows.range_end, page_size)
        requests += 1
        walked += page.count


def _decimal(n):
    return [f"/registry/configmaps/bulk/cm-{i:07d}".encode() for i in range(n)]


def _hex_names(n):
    rng = random.Random(7)
    return [f"/registry/events/ns-{rng.randrange(40)}/pod-{rng.getrandbits(64):016x}.{rng.getrandbits(40):x}".encode()
            for _i in range(n)]


def _mixed(n):
    """Resources of very different sizes next to each other: dense after sparse and back."""
    rng = random.Random(11)
    keys = [f"/registry/{r}/ns/{r[:3]}-{i}".encode() for r, size in
            [("apiservices", 40), ("configmaps", n // 2), ("leases", 3), ("pods", n // 3), ("secrets", n // 6)]
            for i in range(size)]
    return keys + [b"/registry/zz/" + bytes(rng.randrange(256) for _j in range(rng.randrange(1, 30))) for _i in range(200)]


@pytest.mark.parametrize("keys, page_size", [
    (_decimal(20000), 100),
    (_decimal(20000), 7),
    (_hex_names(15000), 50),
    (_mixed(20000), 64),
    (_decimal(1000), 500),  # fewer pages than windows need: plain paging
], ids=["decimal", "decimal-small-pages", "hex", "mixed", "few-pages"])
def test_windows_read_every_key_once_in_order_and_bound_the_walk(keys, page_size):
    read, requests, walked = _walk(keys, page_size)
    assert read == sorted(set(keys))
    pages = -(-len(keys) // page_size)
    assert requests <= 1.75 * pages + 10  # short windows, and none past the last key
    # paging to the end of the range makes etcd walk about n * pages / 2 keys (10 million for "decimal"): windows keep
    # it to a few per key read
    assert walked <= 16 * len(keys)


@pytest.mark.parametrize("keys", [
    [],
    [b"/registry/only"],
    [b"/registry/" + b"\xff" * 40 + i.to_bytes(2, "big") for i in range(3000)],  # at the top of the key space
    [b"/registry/" + b"a" * 200 + f"{i:05d}".encode() for i in range(3000)],  # equal in the bytes read as numbers
    [b"/registry/" + bytes([i % 256, i // 256]) for i in range(3000)],  # every byte value
], ids=["empty", "one", "0xff", "longer-than-key-bytes", "binary"])
def test_windows_read_odd_keys_exactly(keys):
    read, _requests, _walked = _walk(keys, 10)
    assert read == sorted(keys)


def test_throttle_pauses_in_proportion_to_the_keys_of_the_last_answer():
    now, pauses = [0.0], []
    options = ScanOptions(page_size=100, pages_per_second=2, clock=lambda: now[0],
                          sleep=lambda s: pauses.append(s) or now.__setitem__(0, now[0] + s))
    throttle = etcd_io._Throttle(options)
    for keys in (100, 50, 0, 400):
        throttle.wait(keys)
    assert pauses == [0.5, 0.25, 0.5]  # an empty answer: no pause (etcd counted and sent nothing)
