# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where a roll stands, from the apiservers: no host skipped, none upgraded twice."""

from __future__ import annotations

import pytest

from ansible_collections.kubeupgrade.storage.plugins.module_utils._agree import roll
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.model import EndpointObservation
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ConfigurationError

ORDER = ["https://cp1:6443", "https://cp2:6443", "https://cp3:6443"]


def endpoints(*releases, ready=True):
    return [EndpointObservation(endpoint=url, reachable=release is not None, release=release, ready=ready)
            for url, release in zip(ORDER, releases)]


def test_the_next_host_after_done_ones_is_not_done_and_nothing_pending():
    found = roll.position(endpoints("1.33", "1.32", "1.32"), ORDER, ORDER[1], "1.33")
    assert (found["done"], found["pending_before"]) == (False, [])


def test_a_host_already_on_the_target_is_done_and_not_upgraded_again():
    found = roll.position(endpoints("1.33", "1.33", "1.32"), ORDER, ORDER[1] + "/", "1.33")
    assert found["done"] and found["pending_before"] == []
    assert "not upgraded again" in found["msg"]


@pytest.mark.parametrize("first", ["1.32", None], ids=["skipped", "unreachable"])
def test_an_earlier_host_not_on_the_target_stops_the_roll(first):
    found = roll.position(endpoints(first, "1.32", "1.32"), ORDER, ORDER[2], "1.33")
    assert found["pending_before"] == [ORDER[0], ORDER[1]]
    assert found["msg"].startswith(f"not touching {ORDER[2]}")


def test_an_earlier_host_on_the_target_but_not_ready_stops_the_roll():
    found = roll.position(endpoints("1.33", "1.32", ready=False), ORDER[:2], ORDER[1], "1.33")
    assert found["pending_before"] == [ORDER[0]] and "NOT ready" in found["msg"]


def test_a_host_outside_the_order_is_a_configuration_error():
    with pytest.raises(ConfigurationError, match="not in upgrade_order"):
        roll.position(endpoints("1.32", "1.32", "1.32"), ORDER[:2], ORDER[2], "1.33")
