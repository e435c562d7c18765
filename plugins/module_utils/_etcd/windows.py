# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where each range request of a scan starts and ends (``_Windows``), as pure functions: no socket, no clock.

``client.py`` holds the connections and uses these, whichever transport reads the pages.
"""

from __future__ import annotations

from typing import Optional


class _Windows:
    """Where each range request starts and ends.

    etcd (3.4 to 3.6) walks its in-memory index over the whole requested range to count it, whatever the limit, so
    pages of [last key, end of the prefix) cost it O(keys left) each and O(n² / page_size) for the scan: 1.5 s of
    etcd's CPU for 100k keys in pages of 500, where reading them all takes 0.15 s. Once more than ``FROM`` pages are
    left, each request is bounded to a window estimated to hold ``TARGET`` pages of keys, from the key density of the
    answers so far (the first ``KEY_BYTES`` bytes of a key read as a number); every answer's ``count`` (the keys in its
    window) corrects the next estimate. Any end is correct: a window read to its end continues at its end. Measured on
    models of etcd's range (tests/unit/.../test_audit_windows.py): etcd walks 5 to 12 keys per key read, and requests
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


class _RangePage:
    """One range answer: the revision it was read at, (key, value) pairs in key order, whether more keys follow."""

    __slots__ = ("revision", "pairs", "more", "count")

    def __init__(self, revision: int, pairs: list, more: bool, count: int = 0):
        self.revision = revision
        self.pairs = pairs
        self.more = more
        self.count = count  # the keys in the requested range at that revision (etcd counts them whatever the limit)
