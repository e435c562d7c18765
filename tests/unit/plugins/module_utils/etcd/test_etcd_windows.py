# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The pieces of the audit's reader that need no etcd: the range request, the windows that bound each range request
(against a model of etcd's range: every key read once, in order), the throttle."""

from __future__ import annotations

import bisect
import random

import pytest

from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd import client as etcd_client
from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd import windows as range_windows
from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd.client import prefix_range_end
from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd.settings import ScanOptions


@pytest.mark.parametrize("revision, keys_only, tail", [
    (0, False, b""), (42, False, b"\x20\x2a\x38\x01"), (0, True, b"\x40\x01"), (300, True, b"\x20\xac\x02\x38\x01\x40\x01"),
])
def test_range_request_pins_the_revision_serializable(revision, keys_only, tail):
    request = etcd_client._range_request(b"/registry/", b"/registry0", ScanOptions(page_size=500, keys_only=keys_only), revision).SerializeToString()
    assert request == b"\x0a\x0a/registry/\x12\x0a/registry0\x18\xf4\x03" + tail


def _etcd(keys):
    """A model of etcd's range: up to ``limit`` keys in [start, end), more, and the count of all keys in the range."""
    def range_(start, end, limit):
        low, high = bisect.bisect_left(keys, start), bisect.bisect_left(keys, end)
        return range_windows._RangePage(1, [(k, b"") for k in keys[low:min(high, low + limit)]], high - low > limit, high - low)
    return range_


def _walk(keys, page_size, prefix=b"/registry/"):
    """Scan the model as EtcdReader does; (keys read, requests, keys etcd walked to count them)."""
    etcd = _etcd(sorted(keys))
    windows = range_windows._Windows(prefix, prefix_range_end(prefix), page_size)
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
    throttle = etcd_client._Throttle(options)
    for keys in (100, 50, 0, 400):
        throttle.wait(keys)
    assert pauses == [0.5, 0.25, 0.5]  # an empty answer: no pause (etcd counted and sent nothing)


def _clocked(**given):
    """A throttle on a clock that moves only when it sleeps (etcd answering at once), and its pauses."""
    now, pauses = [0.0], []
    options = ScanOptions(clock=lambda: now[0], sleep=lambda s: pauses.append(s) or now.__setitem__(0, now[0] + s), **given)
    return etcd_client._Throttle(options), pauses, now


def test_the_burst_is_read_at_etcd_s_pace_then_every_page_at_the_rate():
    throttle, pauses, now = _clocked(page_size=100, pages_per_second=2, burst_pages=3)
    for _page in range(6):
        throttle.wait(100)
    assert pauses == [0.5, 0.5, 0.5]  # pages 4-6; a scan of 1,000 pages takes (1000 - 3) / 2 s
    assert now[0] == 1.5


def test_a_slow_answer_refills_the_bucket_up_to_the_burst_and_no_further():
    throttle, pauses, now = _clocked(page_size=100, pages_per_second=2, burst_pages=2)
    throttle.wait(100), throttle.wait(100)  # the burst spent, no pause
    now[0] += 100.0  # etcd took long to answer: 200 pages of credit, held to the burst of 2
    for _page in range(4):
        throttle.wait(100)
    assert pauses == [0.5, 0.5]


def test_no_burst_paces_from_the_first_page_and_no_rate_never_pauses():
    throttle, pauses, _now = _clocked(page_size=100, pages_per_second=2, burst_pages=0)
    throttle.wait(100)
    assert pauses == [0.5]
    throttle, pauses, _now = _clocked(page_size=100, pages_per_second=0, burst_pages=0)
    for _page in range(5):
        throttle.wait(100)
    assert pauses == []


def test_the_audit_and_the_rehearsal_read_a_burst_of_50_pages_unless_told_otherwise():
    from ansible_collections.kubeupgrade.storage.plugins.modules import storage_rehearsal, storage_version_audit
    for module in (storage_version_audit, storage_rehearsal):
        assert module.argument_spec()["burst_pages"] == {"type": "int", "default": 50}
    assert ScanOptions.from_params({"burst_pages": 50}).burst_pages == 50
    assert ScanOptions.from_params({}).burst_pages == 0  # a caller that gives none: paced from the first page
