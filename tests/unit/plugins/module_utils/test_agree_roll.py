# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where a roll stands, from the apiservers: no host skipped, none upgraded twice."""

from __future__ import annotations

import pytest

from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe import roll
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.model import EndpointObservation
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ConfigurationError
from ansible_collections.kubeupgrade.storage.plugins.module_utils.profiles import ReleaseProfile

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


def observed(*states):
    """Endpoints of ORDER as (release, reachable, ready)."""
    return [EndpointObservation(endpoint=url, reachable=reachable, release=release if reachable else None, ready=ready)
            for url, (release, reachable, ready) in zip(ORDER, states)]


ON, OLD, DOWN, UNREADY = ("1.33", True, True), ("1.32", True, True), ("1.32", False, False), ("1.33", True, False)


@pytest.mark.parametrize("states, upgrading, check_mode, stop, unready, starts", [
    ((ON, OLD, OLD), 1, False, False, [], f"{ORDER[1]} (release 1.32, ready) is next"),
    ((ON, ON, OLD), 1, False, False, [], f"{ORDER[1]} already runs 1.33"),
    ((OLD, OLD, OLD), 2, False, True, [], f"not touching {ORDER[2]}: the hosts before it"),
    ((OLD, OLD, OLD), 2, True, False, [], f"{ORDER[2]} (release 1.32, ready): 2 host(s) before it are not on 1.33"),
    ((ON, OLD, DOWN), 1, False, True, [ORDER[2]], f"not touching {ORDER[1]}: not every apiserver is reachable and ready"),
    ((ON, OLD, DOWN), 1, True, True, [ORDER[2]], f"not touching {ORDER[1]}: not every apiserver"),
    ((UNREADY, OLD, OLD), 1, False, True, [ORDER[0]], f"not touching {ORDER[1]}: not every apiserver"),
], ids=["next", "done", "pending", "pending-check-mode", "unreachable", "unreachable-check-mode", "not-ready-first"])
def test_the_roll_stops_on_an_unready_apiserver_or_a_pending_host_outside_check_mode(
        states, upgrading, check_mode, stop, unready, starts):
    found = roll.position(observed(*states), ORDER, ORDER[upgrading], "1.33", check_mode=check_mode)
    assert (found["stop"], found["unready"]) == (stop, unready)
    assert found["msg"].startswith(starts), found["msg"]


def test_an_unready_apiserver_is_named_with_its_state():
    found = roll.position(observed(ON, OLD, DOWN), ORDER, ORDER[1], "1.33")
    assert f"{ORDER[2]}: unreachable" in found["msg"] and found["msg"].endswith("Fix the control plane first.")


def test_a_host_at_the_target_binary_still_emulating_the_old_release_is_not_done():
    """Step 1 of the two-step upgrade (KEP-4330): the 1.36 binary emulating 1.35 serves and stores as 1.35."""
    emulating = endpoints("1.36", "1.36")
    emulating[1].emulated_release, emulating[1].min_compatibility_release = "1.35", "1.34"
    found = roll.position(emulating, ORDER[:2], ORDER[1], "1.36")
    assert not found["done"] and "release 1.36 emulating 1.35" in found["msg"], found
    emulating[1].emulated_release = "1.36"
    assert roll.position(emulating, ORDER[:2], ORDER[1], "1.36")["done"]


STEP1 = ReleaseProfile(release="1.36", emulated="1.35", min_compatibility="1.34")


def _emulating(release, emulated):
    return [EndpointObservation(endpoint=url, reachable=True, release=rel, ready=True, emulated_release=emu)
            for url, rel, emu in zip(ORDER, release, emulated)]


def test_step_one_of_a_two_step_upgrade_counts_a_host_done_at_the_target_binary_emulating_the_current_release():
    """1.36 emulating 1.35 is done for step 1 and not for step 2; a 1.36 host at its own release is not done for step 1
    (it would have to go back to emulating 1.35, which this roll does not do silently)."""
    plane = _emulating(["1.36", "1.35", "1.36"], ["1.35", None, None])
    step1 = roll.position(plane, ORDER, ORDER[1], STEP1)
    assert (step1["done"], step1["pending_before"]) == (False, []) and "1.36 emulating 1.35" in step1["msg"]
    assert roll.position(plane, ORDER, ORDER[0], STEP1)["done"] is True
    assert roll.position(plane, ORDER, ORDER[0], "1.36")["done"] is False
    assert roll.position(plane, ORDER, ORDER[2], STEP1)["pending_before"] == [ORDER[1]]
    assert roll.position(plane, ORDER, ORDER[2], "1.36")["done"] is True


@pytest.mark.parametrize("releases, emulated, step, emulating", [
    (["1.35", "1.35", "1.35"], [None, None, None], 1, "1.35"),
    (["1.36", "1.35", "1.35"], ["1.35", None, None], 1, "1.35"),  # step 1 resumed
    (["1.36", "1.36", "1.36"], ["1.35", "1.35", "1.35"], 2, None),
    (["1.36", "1.36", "1.36"], [None, "1.35", "1.35"], 2, None),  # step 2 resumed
    (["1.36", "1.36", "1.36"], [None, None, None], 0, None),
])
def test_the_two_step_plan_is_the_next_step_the_apiservers_are_at(releases, emulated, step, emulating):
    plan = roll.two_step(_emulating(releases, emulated), "1.36")
    assert (plan["step"], plan["emulated_release"]) == (step, emulating), plan


def test_the_two_step_plan_refuses_a_one_step_roll_in_progress_and_a_plane_nobody_answered_for():
    with pytest.raises(ConfigurationError, match="one-step roll in progress"):
        roll.two_step(_emulating(["1.36", "1.35", "1.35"], [None, None, None]), "1.36")
    with pytest.raises(ConfigurationError, match="no apiserver answered"):
        roll.two_step(endpoints(None, None, None), "1.36")


def test_the_host_s_emulated_release_is_returned_only_when_it_emulates_an_older_one():
    """1.35+ reports its own release as emulated: a rollback must not start a binary at --emulated-version of itself."""
    plane = _emulating(["1.35", "1.36"], ["1.35", "1.35"])
    assert roll.position(plane, ORDER[:2], ORDER[0], "1.36")["emulated_release"] is None
    assert roll.position(plane, ORDER[:2], ORDER[1], "1.36")["emulated_release"] == "1.35"
