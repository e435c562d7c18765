# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How many objects a LIST page through the rehearsed apiserver asks for: etcd counts the rest of the range on every
page, so a resource of many objects is read in about 100 pages, never in pages of more stored data than the target
should decode at once."""

from __future__ import annotations

import pytest

from ansible_collections.kubeupgrade.storage.plugins.module_utils._rehearse import reader
from ansible_collections.kubeupgrade.storage.plugins.module_utils._rehearse.reader import LARGE_PAGE, PAGE, PAGE_BYTES, page_size


@pytest.mark.parametrize("objects, average, expected", [
    (0, 800, PAGE), (10, 800, PAGE), (50_000, 800, PAGE), (100_000, 800, 1000),
    (1_000_000, 800, LARGE_PAGE), (10_000_000, 800, LARGE_PAGE),
    (1_000_000, 100 << 10, PAGE_BYTES // (100 << 10)),  # 100 KiB values: 655 a page
    (1_000_000, 1 << 20, PAGE),  # 1 MiB values: never fewer than PAGE a page
    (1_000_000, 0, LARGE_PAGE),  # size unknown: the count alone
])
def test_page_size(objects, average, expected):
    assert page_size(objects, average) == expected


def test_pages_of_a_million_objects_are_fewer_and_bounded():
    pages = 1_000_000 / page_size(1_000_000, 828)  # 1,000,000 ConfigMaps in 790 MiB
    assert pages == 200 and page_size(1_000_000, 828) * 828 <= PAGE_BYTES


def test_the_list_asks_for_the_page_size(monkeypatch):
    asked = []

    class Client:
        def get(self, path, query, accept):
            asked.append(query["limit"])
            return {"items": [{}] * 3, "metadata": {"continue": "next" if len(asked) < 2 else ""}}

    assert reader._count_list(Client(), "/api/v1/configmaps", 2000) == 6 and asked == [2000, 2000]


def test_a_copy_folds_its_keys_on_the_way_in_as_a_scan_of_it_would():
    """What the live copy learns while it writes is what a keys-only scan of the copy finds (a restored snapshot is
    scanned): object keys by resource and their prefixes, keys outside the layout, every key counted."""
    pairs = [(b"/registry/configmaps/default/a", b"1"), (b"/registry/configmaps/kube-system/b", b"2"),
             (b"/registry/namespaces/default", b"3"), (b"/registry/example.com/widgets/default/w", b"4"),
             (b"/registry/masterleases/10.0.0.1", b"5"), (b"/registry/health", b"6"), (b"/registry/x", b"7")]
    folded = reader.StoredKeys()
    assert list(folded.folding(iter(pairs), "/registry/")) == pairs  # passed on unchanged, in order
    scanned = reader.stored_keys(iter(pairs), "/registry/")
    assert folded == scanned and folded.keys == len(pairs) and folded.outside_layout == 2
    assert folded.counts == {"configmaps": 2, "namespaces": 1, "widgets.example.com": 1}, folded.counts
    assert folded.prefixes["configmaps"] == {"/registry/configmaps/"}, folded.prefixes
