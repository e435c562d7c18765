# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the audit's reads say on the wire, as pure functions: no socket, no clock.

- the range windows (``_Windows``): where each range request starts and ends, so that etcd does not walk the whole
  rest of the prefix for every page;
- HTTP/2 framing and HPACK (RFC 7540, RFC 7541): the frames a unary gRPC call needs, and the decoding of the
  answer's header blocks with the dynamic table etcd's encoder keeps;
- protocol buffers: etcd's RangeRequest out and RangeResponse in (etcd's rpc.proto and kv.proto), only the fields
  the scan uses.

``etcd_io.py`` holds the connections and uses these.
"""

from __future__ import annotations

import struct
from typing import Optional, Tuple


class _Windows:
    """Where each range request starts and ends.

    etcd (3.4 to 3.6) walks its in-memory index over the whole requested range to count it, whatever the limit, so
    pages of [last key, end of the prefix) cost it O(keys left) each and O(n² / page_size) for the scan: 1.5 s of
    etcd's CPU for 100k keys in pages of 500, where reading them all takes 0.15 s. Once more than ``FROM`` pages are
    left, each request is bounded to a window estimated to hold ``TARGET`` pages of keys, from the key density of the
    answers so far (the first ``KEY_BYTES`` bytes of a key read as a number); every answer's ``count`` (the keys in its
    window) corrects the next estimate. Any end is correct: a window read to its end continues at its end. Measured on
    models of etcd's range (tests/unit/.../test_audit_etcd_wire.py): etcd walks 5 to 12 keys per key read, and requests
    are 1.1 to 1.5 times the pages, as key names make the density uneven. No request goes past the last key: the first
    answer counts the keys of the whole range.
    """

    TARGET = 4
    FROM = 16
    KEY_BYTES = 128

    def __init__(self, start: bytes, end: bytes, page_size: int):
        self.start = start
        self.end = end
        self.range_end = end  # of the request in flight
        self.page_size = page_size
        self.width: Optional[int] = None  # of a window, as a number; None while requests go to the end of the range
        self.total: Optional[int] = None  # keys in the whole range at the scan's revision: the first answer's count
        self.read = 0
        self.empty = 0  # empty windows in a row

    def advance(self, page: _RangePage) -> bool:
        """Move past ``page`` (the answer for [start, range_end)); False when the range has been read."""
        self.read += len(page.pairs)
        if self.total is None:
            self.total = page.count if page.count >= len(page.pairs) else 0
        if self.total and self.read >= self.total:  # every key of the revision is read: no window past the last one
            return False
        if page.more:
            if not page.pairs:
                return False
            following = page.pairs[-1][0] + b"\x00"
        elif self.range_end == self.end:
            return False
        else:
            following = self.range_end
        self.width = self._next_width(page)
        self.start = following
        self.range_end = self._window_end(following)
        return True

    def _next_width(self, page: _RangePage) -> Optional[int]:
        """The width that held ``count`` keys, scaled to the target (growing at most 8 times, 256 times after two empty
        windows); where a window held far more than the target (a dense resource after a sparse one), the span of the
        page's own keys instead."""
        target = self.TARGET * self.page_size
        if self.width is None and (self.end == b"\x00" or page.count - len(page.pairs) <= self.FROM * self.page_size):
            return None
        if page.more and len(page.pairs) > 1 and (self.width is None or page.count > 4 * target):
            span = _key_number(page.pairs[-1][0]) - _key_number(page.pairs[0][0])
            return max(1, span * target // len(page.pairs))
        requested = _key_number(self.range_end) - _key_number(self.start)
        self.empty = 0 if page.count else self.empty + 1
        if self.empty > 1:  # a gap between resources: a byte further each time, so at most about KEY_BYTES windows
            return requested * 256
        return max(1, min(requested * 8, requested * target // max(page.count, 1)))

    def _window_end(self, start: bytes) -> bytes:
        if self.width is None:
            return self.end
        number = _key_number(start) + self.width
        if number >= 1 << (8 * self.KEY_BYTES):
            return self.end
        end = number.to_bytes(self.KEY_BYTES, "big").rstrip(b"\x00")
        return end if start < end < self.end else self.end


def _key_number(key: bytes) -> int:
    return int.from_bytes(key[:_Windows.KEY_BYTES].ljust(_Windows.KEY_BYTES, b"\x00"), "big")


class _GrpcProtocolError(Exception):
    """The member answered, but not as a gRPC server (no HTTP/2, a reset stream, a malformed answer)."""


_FRAME = struct.Struct(">BHBBL")  # 24-bit length (8 + 16 bits), type, flags, stream id


_DATA, _HEADERS, _RST_STREAM, _SETTINGS, _PING, _GOAWAY, _WINDOW_UPDATE, _CONTINUATION = 0, 1, 3, 4, 6, 7, 8, 9


_END_STREAM, _ACK, _END_HEADERS, _PADDED, _PRIORITY = 0x1, 0x1, 0x4, 0x8, 0x20


def _frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    size = len(payload)
    return _FRAME.pack(size >> 16, size & 0xFFFF, kind, flags, stream) + payload


def _hpack_int(value: int, prefix_bits: int, first: int = 0) -> bytes:
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out = bytearray([first | limit])
    value -= limit
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _literal(name: bytes, value: bytes) -> bytes:
    """A header field as a literal without indexing, new name, no Huffman coding (RFC 7541 6.2.2)."""
    return b"\x00" + _hpack_int(len(name), 7) + name + _hpack_int(len(value), 7) + value


# HPACK (RFC 7541): the static table (Appendix A) and the Huffman code (Appendix B), which is canonical: the code lengths
# of symbols 0..256 (EOS) rebuild it. One letter a length: "A" = 5 bits ... "Z" = 30 bits.
_HPACK_STATIC = (
    (":authority", ""), (":method", "GET"), (":method", "POST"), (":path", "/"), (":path", "/index.html"),
    (":scheme", "http"), (":scheme", "https"), (":status", "200"), (":status", "204"), (":status", "206"),
    (":status", "304"), (":status", "400"), (":status", "404"), (":status", "500"), ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"), ("accept-language", ""), ("accept-ranges", ""), ("accept", ""),
    ("access-control-allow-origin", ""), ("age", ""), ("allow", ""), ("authorization", ""), ("cache-control", ""),
    ("content-disposition", ""), ("content-encoding", ""), ("content-language", ""), ("content-length", ""),
    ("content-location", ""), ("content-range", ""), ("content-type", ""), ("cookie", ""), ("date", ""), ("etag", ""),
    ("expect", ""), ("expires", ""), ("from", ""), ("host", ""), ("if-match", ""), ("if-modified-since", ""),
    ("if-none-match", ""), ("if-range", ""), ("if-unmodified-since", ""), ("last-modified", ""), ("link", ""),
    ("location", ""), ("max-forwards", ""), ("proxy-authenticate", ""), ("proxy-authorization", ""), ("range", ""),
    ("referer", ""), ("refresh", ""), ("retry-after", ""), ("server", ""), ("set-cookie", ""),
    ("strict-transport-security", ""), ("transfer-encoding", ""), ("user-agent", ""), ("vary", ""), ("via", ""),
    ("www-authenticate", ""),
)


_HUFFMAN_LENGTHS = (
    "ISXXXXXXXTZXXZXXXXXXXXZXXXXXXXXXBFFHIBDGFFDGDBBBAAABBBBBBBCDKBHFIBCCCCCCCCCCCCCCCCCCCCCCDCDIOIJBKABABABBBACCBBBAB"
    "CBAABCCCCCKGJIXPRPPRRRSRSSSSSTSTTRSTSSSSQRSRSSTRQPRRSSQSRRTQRSSQQRQSRSSPRRRSRRSVVPORSRUVVVWWVTUOQVWWVWTQQVVXWWWPTP"
    "QRQQSRRUUTTVSVWVVWWWWWXWWWWWVZ"
)


_HUFFMAN_CODES = None  # {(length, code): symbol}, built at the first Huffman-coded string


def _huffman_codes() -> dict:
    global _HUFFMAN_CODES
    if _HUFFMAN_CODES is None:
        lengths = [ord(letter) - ord("A") + 5 for letter in _HUFFMAN_LENGTHS]
        codes, code, previous = {}, 0, min(lengths)
        for symbol in sorted(range(len(lengths)), key=lambda s: (lengths[s], s)):
            code <<= lengths[symbol] - previous
            previous = lengths[symbol]
            codes[(previous, code)] = symbol
            code += 1
        _HUFFMAN_CODES = codes
    return _HUFFMAN_CODES


def _huffman_decode(data: bytes) -> bytes:
    codes, out, code, length = _huffman_codes(), bytearray(), 0, 0
    for byte in data:
        for shift in range(7, -1, -1):
            code, length = (code << 1) | ((byte >> shift) & 1), length + 1
            symbol = codes.get((length, code))
            if symbol is not None:
                if symbol == 256:
                    raise _GrpcProtocolError("a Huffman-coded header holds the end-of-string symbol")
                out.append(symbol)
                code, length = 0, 0
            elif length > 30:
                raise _GrpcProtocolError("a Huffman-coded header is not valid")
    if length > 7 or code != (1 << length) - 1:  # the padding is at most 7 bits, all ones (the start of EOS)
        raise _GrpcProtocolError("a Huffman-coded header is padded wrongly")
    return bytes(out)


class _HpackDecoder:
    """Decodes header blocks in the order they arrive; keeps the dynamic table (newest first) within 4096 bytes."""

    def __init__(self):
        self.table = []
        self.size = 0
        self.limit = 4096  # SETTINGS_HEADER_TABLE_SIZE, left at its default

    def decode(self, block: bytes) -> dict:
        fields, pos = {}, 0
        while pos < len(block):
            byte = block[pos]
            if byte & 0x80:  # indexed field
                index, pos = _hpack_read_int(block, pos, 7)
                name, value = self._entry(index)
            elif byte & 0xC0 == 0x40:  # literal, added to the table
                name, value, pos = self._literal(block, pos, 6)
                self._add(name, value)
            elif byte & 0xE0 == 0x20:  # dynamic table size update
                size, pos = _hpack_read_int(block, pos, 5)
                if size > 4096:
                    raise _GrpcProtocolError("etcd's HPACK encoder asked for a larger table than allowed")
                self.limit = size
                self._evict()
                continue
            else:  # literal without indexing or never indexed
                name, value, pos = self._literal(block, pos, 4)
            fields[name] = value
        return fields

    def _entry(self, index: int) -> Tuple[str, str]:
        if 1 <= index <= len(_HPACK_STATIC):
            return _HPACK_STATIC[index - 1]
        if 0 < index - len(_HPACK_STATIC) <= len(self.table):
            return self.table[index - len(_HPACK_STATIC) - 1]
        raise _GrpcProtocolError(f"an HPACK index out of the tables ({index})")

    def _literal(self, block: bytes, pos: int, prefix_bits: int) -> Tuple[str, str, int]:
        index, pos = _hpack_read_int(block, pos, prefix_bits)
        if index:
            name = self._entry(index)[0]
        else:
            name, pos = _hpack_read_string(block, pos)
        value, pos = _hpack_read_string(block, pos)
        return name, value, pos

    def _add(self, name: str, value: str) -> None:
        self.table.insert(0, (name, value))
        self.size += len(name.encode("latin-1")) + len(value.encode("latin-1")) + 32
        self._evict()

    def _evict(self) -> None:
        while self.size > self.limit and self.table:
            name, value = self.table.pop()
            self.size -= len(name.encode("latin-1")) + len(value.encode("latin-1")) + 32


def _hpack_read_int(block: bytes, pos: int, prefix_bits: int) -> Tuple[int, int]:
    limit = (1 << prefix_bits) - 1
    value = block[pos] & limit
    pos += 1
    if value < limit:
        return value, pos
    shift = 0
    while True:
        byte = block[pos]
        pos += 1
        value += (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def _hpack_read_string(block: bytes, pos: int) -> Tuple[str, int]:
    huffman = block[pos] & 0x80
    length, pos = _hpack_read_int(block, pos, 7)
    raw = block[pos:pos + length]
    if len(raw) < length:
        raise _GrpcProtocolError("a header block ends inside a string")
    return (_huffman_decode(raw) if huffman else raw).decode("latin-1"), pos + length


class _RangePage:
    """One range answer: the revision it was read at, (key, value) pairs in key order, whether more keys follow."""

    __slots__ = ("revision", "pairs", "more", "count")

    def __init__(self, revision: int, pairs: list, more: bool, count: int = 0):
        self.revision = revision
        self.pairs = pairs
        self.more = more
        self.count = count  # the keys in the requested range at that revision (etcd counts them whatever the limit)


def _varint_bytes(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _range_request(key: bytes, range_end: bytes, options, revision: int) -> bytes:
    """RangeRequest: key (1), range_end (2), limit (3), revision (4), serializable (7), keys_only (8).

    A request at a pinned revision is serializable: the member it goes to answered the first page at that revision.
    """
    out = b"\x0a" + _varint_bytes(len(key)) + key + b"\x12" + _varint_bytes(len(range_end)) + range_end
    out += b"\x18" + _varint_bytes(options.page_size)
    if revision:
        out += b"\x20" + _varint_bytes(revision) + b"\x38\x01"
    if options.keys_only:
        out += b"\x40\x01"
    return out


def _read_varint(data: bytes, pos: int) -> Tuple[int, int]:
    byte = data[pos]
    if byte < 0x80:
        return byte, pos + 1
    value, shift = byte & 0x7F, 7
    while True:
        pos += 1
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos + 1
        shift += 7


def _skip_field(data: bytes, pos: int, wire: int) -> int:
    if wire == 0:
        return _read_varint(data, pos)[1]
    if wire == 2:
        length, pos = _read_varint(data, pos)
        return pos + length
    if wire == 1:
        return pos + 8
    if wire == 5:
        return pos + 4
    raise _GrpcProtocolError(f"a protobuf field of wire type {wire}")


def _decode_range(message: bytes) -> _RangePage:
    """RangeResponse (after the 5-byte gRPC prefix): header (1: revision 3), kvs (2), more (3), count (4)."""
    try:
        return _decode_range_fields(message, 5, len(message))
    except (IndexError, ValueError):
        raise _GrpcProtocolError("the range answer is not a RangeResponse") from None


def _decode_range_fields(data: bytes, pos: int, end: int) -> _RangePage:
    revision, more, count, pairs = 0, False, 0, []
    append = pairs.append
    read = _read_varint
    while pos < end:
        tag, pos = read(data, pos)
        if tag == 0x12:
            length, pos = read(data, pos)
            append(_decode_kv(data, pos, pos + length))
            pos += length
        elif tag == 0x0A:  # ResponseHeader: cluster_id (1), member_id (2), revision (3), raft_term (4)
            length, pos = read(data, pos)
            stop = pos + length
            while pos < stop:
                field_tag, pos = read(data, pos)
                if field_tag == 0x18:
                    revision, pos = read(data, pos)
                else:
                    pos = _skip_field(data, pos, field_tag & 7)
        elif tag == 0x18:
            flag, pos = read(data, pos)
            more = bool(flag)
        elif tag == 0x20:
            count, pos = read(data, pos)
        else:
            pos = _skip_field(data, pos, tag & 7)
    if pos != end:
        raise ValueError("the answer overruns its length")
    return _RangePage(revision, pairs, more, count)


def _decode_kv(data: bytes, pos: int, stop: int) -> Tuple[bytes, bytes]:
    """KeyValue: key (1), create_revision (2), mod_revision (3), version (4), value (5), lease (6)."""
    key = value = b""
    read = _read_varint
    while pos < stop:
        tag = data[pos]
        pos += 1
        if tag == 0x0A or tag == 0x2A:
            length, pos = read(data, pos)
            if tag == 0x0A:
                key = data[pos:pos + length]
            else:
                value = data[pos:pos + length]
            pos += length
        elif tag < 0x80 and not tag & 7:
            pos = read(data, pos)[1]
        else:
            tag, pos = read(data, pos - 1)
            pos = _skip_field(data, pos, tag & 7)
    if pos != stop:
        raise ValueError("a KeyValue overruns its length")
    return key, value
