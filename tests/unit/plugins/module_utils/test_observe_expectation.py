# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether the apiservers are as a wait after upgrading or rolling back a host expects them."""

from __future__ import annotations

import pytest

from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.expectation import expected
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.model import EndpointObservation

URL = "https://cp1:6443"


def ep(release="1.33", ready=True, reachable=True):
    return EndpointObservation(endpoint=URL, reachable=reachable, release=release if reachable else None,
                               ready=ready and reachable, error=None if reachable else "connection refused")


@pytest.mark.parametrize("endpoints, ready, release, met", [
    ([ep()], True, "1.33", True),
    ([ep(release="1.32")], True, "1.33", False),
    ([ep(ready=False)], True, "1.33", False),
    ([ep(ready=False)], False, "1.33", True),
    ([ep(reachable=False)], True, None, False),
    ([ep(release="1.32")], True, None, True),
    ([ep(reachable=False)], False, None, False),  # nothing expected: reachable
    ([ep(ready=False)], False, None, True),
    ([], False, None, False),
], ids=["upgraded", "old-release", "not-ready", "release-only", "unreachable", "ready-only", "unreachable-nothing-expected",
        "reachable", "none-observed"])
def test_as_expected(endpoints, ready, release, met):
    assert expected(endpoints, ready=ready, release=release)[0] is met


@pytest.mark.parametrize("endpoint, release, msg", [
    (ep(), "1.33", f"{URL}: ready, release 1.33 (as expected: ready, release 1.33)"),
    (ep(release="1.32", ready=False), "1.33", f"{URL}: NOT ready, release 1.32 (expected: ready, release 1.33)"),
    (ep(reachable=False), None, f"{URL}: unreachable (connection refused) (expected: ready)"),
])
def test_the_message_says_what_was_seen_and_expected(endpoint, release, msg):
    assert expected([endpoint], ready=True, release=release)[1] == msg


def test_a_binary_of_the_release_emulating_an_older_one_is_not_at_it():
    emulating = EndpointObservation(endpoint=URL, reachable=True, release="1.36", ready=True, emulated_release="1.35",
                                    min_compatibility_release="1.34")
    met, msg = expected([emulating], True, "1.36")
    assert not met and "release 1.36 emulating 1.35" in msg, msg
    assert expected([emulating], True, "1.35")[0] is False  # nor at the release it emulates: its binary is 1.36
    emulating.emulated_release = "1.36"
    assert expected([emulating], True, "1.36")[0] is True


def test_an_expected_emulated_release_is_met_only_by_the_binary_at_that_emulation():
    step1 = EndpointObservation(endpoint="https://cp1:6443", reachable=True, ready=True, release="1.36", emulated_release="1.35")
    own = EndpointObservation(endpoint="https://cp2:6443", reachable=True, ready=True, release="1.36")
    assert expected([step1], ready=True, release="1.36", emulated="1.35")[0] is True
    met, msg = expected([own], ready=True, release="1.36", emulated="1.35")
    assert met is False and "expected: ready, release 1.36 emulating 1.35" in msg
    assert expected([step1], ready=True, release="1.36")[0] is False
