# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the check decides for the play around it: the running release, the migration before a roll."""

from __future__ import annotations

import pytest

from ansible_collections.kubeupgrade.storage.plugins.module_utils._judge import decisions
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.model import EndpointObservation
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ConfigurationError


def ep(url, release, reachable=True):
    return EndpointObservation(endpoint=url, reachable=reachable, release=release, ready=True)


@pytest.mark.parametrize("endpoints, expected", [
    ([ep("https://a", "1.32"), ep("https://b", "1.33")], "1.32"),
    ([ep("https://a", None, reachable=False), ep("https://b", "1.33")], "1.33"),
    ([ep("https://a", "1.32", reachable=False), ep("https://b", "")], None),
    ([], None),
], ids=["first", "first-reachable", "none-reported", "no-endpoint"])
def test_the_running_release_is_the_first_one_a_reachable_apiserver_reports(endpoints, expected):
    assert decisions.running_release(endpoints) == expected


def test_no_running_release_is_one_clear_error_naming_the_apiservers():
    with pytest.raises(ConfigurationError, match="target_running_release: no apiserver reported its release .https://a"):
        decisions.require_running_release([ep("https://a", None, reachable=False)])


MIXED_WHY = ("Not migrating before the rolling upgrade: the apiservers run different releases (1.32, 1.33), so a roll is "
             "under way; the check before each host and the final gate after the last one take over.")


@pytest.mark.parametrize("verdict, releases, audit, crds, resources, objects, why", [
    ("safe", ["1.32"], False, False, False, False, ""),
    ("safe", ["1.32", "1.33"], True, True, False, False, ""),
    ("needs_migration", ["1.32"], False, False, True, False, ""),
    ("unknown", ["1.32"], False, True, True, False, ""),
    ("needs_migration", ["1.32"], True, False, False, True, ""),
    ("needs_migration", ["1.32"], True, True, True, True, ""),  # target CRDs need the role, the audit its objects
    ("needs_migration", ["1.32", "1.33"], False, False, False, False, MIXED_WHY),
    ("unknown", ["1.32", "1.33"], True, True, False, False, MIXED_WHY),
    ("needs_migration", [], True, False, False, False,
     "Not migrating before the rolling upgrade: no apiserver reported its release."),
], ids=["safe", "safe-mixed", "records", "crds", "audit", "audit-and-crds", "mixed", "mixed-audit", "no-release"])
def test_what_is_migrated_before_the_roll(verdict, releases, audit, crds, resources, objects, why):
    assert decisions.migration_before_roll(verdict, releases, audit, crds) == {
        "resources": resources, "objects_from_audit": objects, "why": why}


def test_nothing_is_migrated_before_the_roll_while_an_apiserver_the_cluster_lists_was_not_observed():
    reason = "the cluster lists 2 apiservers (identity Leases in kube-system: a, b) but 1 were observed (https://lb)"
    found = decisions.migration_before_roll("needs_migration", ["1.35"], True, False, not_observed=reason)
    assert found == {"resources": False, "objects_from_audit": False,
                     "why": f"Not migrating before the rolling upgrade: {reason}"}


def test_the_way_back_is_the_oldest_release_an_apiserver_serves_as_below_the_target():
    def ep(release, emulated=None, reachable=True):
        return EndpointObservation(endpoint=f"https://{release}-{emulated}", reachable=reachable, release=release,
                                   emulated_release=emulated)

    assert decisions.way_back([ep("1.35"), ep("1.35")], "1.36") == "1.35"
    assert decisions.way_back([ep("1.36", "1.35"), ep("1.35")], "1.36") == "1.35"  # step 1 under way
    assert decisions.way_back([ep("1.36", "1.35"), ep("1.36")], "1.36") == "1.35"  # step 2 under way
    assert decisions.way_back([ep("1.36"), ep("1.36")], "1.36") is None
    assert decisions.way_back([ep("1.36"), ep("1.35", reachable=False)], "1.36") is None
    assert decisions.way_back([ep("1.36")], "1.35") is None  # a rollback's own way back is not below it
