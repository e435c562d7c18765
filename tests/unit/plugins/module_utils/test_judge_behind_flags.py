# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Release data is conservative where it cannot know: a resource the target release serves only in alpha or beta
versions is served only when the cluster's flags enable it, so a verdict never calls it safe from the release data
alone unless a running apiserver shows the flags enable one of those versions."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ansible_collections.kubeupgrade.storage.plugins.module_utils._judge import steps, views
from ansible_collections.kubeupgrade.storage.plugins.module_utils._judge.model import NEEDS_MIGRATION, SAFE, UNKNOWN
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.model import EndpointObservation, ObservedResource
from ansible_collections.kubeupgrade.storage.plugins.module_utils.profiles import load_profiles

PROFILES = load_profiles()


def case(name, target, served_now, reachable=True, custom=False):
    group = name.partition(".")[2]
    resources = {name: ObservedResource(name=name, group=group, kind="X", namespaced=False, storage_hash="h",
                                        served_versions=list(served_now))} if served_now is not None else {}
    endpoint = EndpointObservation(endpoint="https://cp1:6443", reachable=reachable, release="1.36", resources=resources)
    view = views.builtin_view(name, SimpleNamespace(storage_versions=None, release=PROFILES.get(target), live=None), PROFILES)
    return steps.Case(name, custom, view, ev=None, observation=SimpleNamespace(endpoints=[endpoint]), profiles=PROFILES)


SAFE_DECISION = (SAFE, "every persisted version is readable.", "none: nothing to do for this resource.", None)


@pytest.mark.parametrize("name, target, served_now, verdict", [
    # the rollback of the finding: 1.35 has DeviceTaintRules only in v1alpha3, this 1.36 cluster serves v1beta2
    ("devicetaintrules.resource.k8s.io", "1.35", ["v1beta2"], UNKNOWN),
    ("devicetaintrules.resource.k8s.io", "1.35", ["v1alpha3", "v1beta2"], SAFE),  # the flags enable v1alpha3 now
    ("devicetaintrules.resource.k8s.io", "1.35", None, UNKNOWN),  # not served now at all
    ("clustertrustbundles.certificates.k8s.io", "1.36", ["v1beta1"], SAFE),
    ("volumeattributesclasses.storage.k8s.io", "1.35", [], SAFE),  # v1 is GA in 1.35: served at defaults
    ("configmaps", "1.35", ["v1"], SAFE),
], ids=["rollback-alpha-only", "alpha-enabled-now", "not-served-now", "beta-enabled-now", "ga-served", "core"])
def test_a_target_serving_a_resource_only_behind_flags_is_not_safe_unless_the_flags_show(name, target, served_now, verdict):
    found = steps.behind_flags(case(name, target, served_now), SAFE_DECISION)
    assert found[0] == verdict, found
    if verdict == UNKNOWN:
        assert "only in v1alpha3" in found[1] and "rehearse with the target binary" in found[2], found


def test_a_verdict_that_already_blocks_keeps_its_own_next_step():
    needs = (NEEDS_MIGRATION, "stored in v1beta1.", "migrate.", None)  # once migrated, it is judged safe, then here
    assert steps.behind_flags(case("devicetaintrules.resource.k8s.io", "1.35", ["v1beta2"]), needs) == needs
    unsafe = ("unsafe", "not decodable.", "delete.", None)
    assert steps.behind_flags(case("devicetaintrules.resource.k8s.io", "1.35", ["v1beta2"]), unsafe) == unsafe


def test_only_the_unknown_it_made_is_marked_as_behind_flags():
    """An unknown of another cause (a record listing Unknown) is not one a rehearsal that serves the resource settles."""
    doubted = case("devicetaintrules.resource.k8s.io", "1.35", ["v1beta2"])
    steps.behind_flags(doubted, (UNKNOWN, "the record lists Unknown.", "migrate.", None))
    assert doubted.behind_flags is None
    flagged = case("devicetaintrules.resource.k8s.io", "1.35", ["v1beta2"])
    steps.behind_flags(flagged, SAFE_DECISION)
    assert "only in v1alpha3" in flagged.behind_flags


def test_offline_or_custom_resources_are_left_to_the_other_rules():
    assert steps.behind_flags(case("devicetaintrules.resource.k8s.io", "1.35", None, reachable=False), SAFE_DECISION) \
        == SAFE_DECISION


def test_a_rehearsal_that_served_the_resource_and_read_everything_settles_it():
    from ansible_collections.kubeupgrade.storage.plugins.module_utils._judge import rehearsed
    from ansible_collections.kubeupgrade.storage.plugins.module_utils._judge.model import ResourceVerdict

    def verdicts():
        return [ResourceVerdict("ipaddresses.networking.k8s.io", UNKNOWN, "only in v1beta1", "rehearse", served_behind_flags=True),
                ResourceVerdict("leasecandidates.coordination.k8s.io", UNKNOWN, "record lists Unknown", "migrate")]

    rehearsal = {"target_git_version": "v1.32.6", "rehearsed_at": "2026-11-28T12:00:00Z", "source": {"revision": 7},
                 "resources": {name: {"verdict": SAFE, "served": True, "objects_read": 2}
                               for name in ("ipaddresses.networking.k8s.io", "leasecandidates.coordination.k8s.io")}}
    results = verdicts()
    rehearsed.apply(results, rehearsal)
    assert [(r.verdict, r.served_behind_flags) for r in results] == [(SAFE, False), (UNKNOWN, False)]
    assert "served ipaddresses.networking.k8s.io with the cluster's flags" in results[0].reason
    rehearsal["resources"]["ipaddresses.networking.k8s.io"]["served"] = False  # read nothing: not settled
    results = verdicts()
    rehearsed.apply(results, rehearsal)
    assert results[0].verdict == UNKNOWN
