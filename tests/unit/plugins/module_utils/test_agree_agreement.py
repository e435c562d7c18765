# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe import agreement, discovery
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.model import EndpointObservation

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "real-apiserver-1.32"
EP1, EP2, EP3 = "https://127.0.0.1:16443", "https://127.0.0.1:16444", "https://127.0.0.1:16445"


def _resources(*relatives):
    docs = {}
    for relative in relatives:
        body = json.loads((FIXTURES / relative).read_text(encoding="utf-8"))["body"]
        docs["/apis/" + body["groupVersion"] if "/" in body["groupVersion"] else "/api/v1"] = body
    return discovery.endpoint_resources(docs)


BEFORE = "crd/05-discovery-example.com-v1-before-storage-switch.json"
BEFORE2 = "crd/05-discovery-example.com-v1-before-storage-switch-apiserver2.json"
AFTER = "crd/10-discovery-example.com-v1-after-storage-switch.json"
AFTER2 = "crd/10-discovery-example.com-v1-after-storage-switch-apiserver2.json"
APPS = "discovery/apis-apps_v1-legacy.json"


def ep(url, *relatives, reachable=True, ready=True, failed=()):
    return EndpointObservation(endpoint=url, reachable=reachable, ready=ready, resources=_resources(*relatives) if reachable else {},
                               failed_groups=list(failed))


@pytest.mark.parametrize("endpoints,agreed,disagreeing,unreachable,unready,missing", [
    ([ep(EP1, BEFORE, APPS), ep(EP2, BEFORE2, APPS)], True, [], [], [], {}),
    ([ep(EP1, AFTER, APPS), ep(EP2, AFTER2, APPS)], True, [], [], [], {}),
    ([ep(EP1, AFTER, APPS), ep(EP2, BEFORE2, APPS)], False, ["widgets.example.com"], [], [], {}),
    ([ep(EP1, AFTER, APPS), ep(EP2, reachable=False)], False, [], [EP2], [], {}),
    ([ep(EP1, AFTER, APPS), ep(EP2, AFTER2, APPS, ready=False)], False, [], [], [EP2], {}),
    ([ep(EP1, AFTER, APPS), ep(EP2, APPS)], False, [], [], [], {"widgets.example.com": [EP2]}),
    ([ep(EP1, reachable=False)], False, [], [EP1], [], {}),
    ([], False, [], [], [], {}),
])
def test_compare(endpoints, agreed, disagreeing, unreachable, unready, missing):
    result = agreement.compare(endpoints)
    assert (result.agreed, result.disagreeing, result.unreachable, result.unready, result.missing) == (
        agreed, disagreeing, unreachable, unready, missing)


def test_hashes_are_reported_per_endpoint():
    result = agreement.compare([ep(EP1, AFTER), ep(EP2, BEFORE2)])
    assert result.hashes == {"widgets.example.com": {EP1: "gIwvi5rymmg=", EP2: "aXSEt3iQTdQ="}}
    assert result.to_dict()["hashes"] == result.hashes


def test_unready_is_tolerated_when_not_required():
    assert agreement.compare([ep(EP1, AFTER), ep(EP2, AFTER2, ready=False)], require_ready=False).agreed


def test_incomplete_discovery_fails_closed():
    result = agreement.compare([ep(EP1, AFTER), ep(EP2, AFTER2, failed=["apps/v1"])])
    assert not result.agreed and result.incomplete == [EP2]


def test_resources_filter_ignores_other_disagreements():
    endpoints = [ep(EP1, AFTER, APPS), ep(EP2, BEFORE2, APPS)]
    assert agreement.compare(endpoints, resources=["deployments.apps"]).agreed
    result = agreement.compare(endpoints, resources=["deployments.apps", "gadgets.example.com"])
    assert not result.agreed and result.missing == {"gadgets.example.com": [EP1, EP2]}


def test_self_contradicting_endpoint_disagrees():
    mixed = ep(EP1, BEFORE, "crd/10-discovery-example.com-v1alpha1-after-storage-switch.json")
    result = agreement.compare([mixed, ep(EP2, AFTER2)])
    assert not result.agreed and "widgets.example.com" in result.disagreeing


def _agreement(agreed, widget_hash="gIwvi5rymmg="):
    return agreement.Agreement(agreed=agreed, hashes={"widgets.example.com": {EP1: widget_hash, EP2: widget_hash}})


@pytest.mark.parametrize("required,sequence,expected", [
    (2, [True, True], [False, True]),
    (1, [True], [True]),
    (2, [True, False, True, True], [False, False, False, True]),
    (3, [True, True, True, True], [False, False, True, True]),
])
def test_tracker_counts_consecutive_agreeing_polls(required, sequence, expected):
    tracker = agreement.AgreementTracker(required)
    assert [tracker.update(_agreement(value)) for value in sequence] == expected
    assert tracker.polls == len(sequence)


def test_tracker_resets_when_hashes_change():
    tracker = agreement.AgreementTracker(2)
    assert not tracker.update(_agreement(True, "aXSEt3iQTdQ="))
    assert not tracker.update(_agreement(True, "gIwvi5rymmg="))
    assert tracker.update(_agreement(True, "gIwvi5rymmg="))
    assert tracker.satisfied


def test_tracker_compares_by_value_not_identity():
    tracker = agreement.AgreementTracker(2)
    first = _agreement(True)
    tracker.update(first)
    assert tracker.update(copy.deepcopy(first))


def test_tracker_rejects_zero():
    with pytest.raises(ValueError):
        agreement.AgreementTracker(0)


def _mapped(*endpoints):
    for endpoint in endpoints:
        endpoint.resources = discovery.map_storage_versions(endpoint.resources)
    return list(endpoints)


def test_storage_versions_are_the_agreed_hashes_mapped_back_to_versions():
    endpoints = _mapped(ep(EP1, AFTER, APPS), ep(EP2, AFTER2, APPS))
    versions = agreement.storage_versions(agreement.compare(endpoints), endpoints)
    assert versions["widgets.example.com"] == "v1" and versions["deployments.apps"] == "v1", versions


def test_storage_versions_leave_out_a_disagreement_and_a_hash_that_maps_to_nothing():
    endpoints = _mapped(ep(EP1, AFTER, APPS), ep(EP2, BEFORE2, APPS))
    versions = agreement.storage_versions(agreement.compare(endpoints), endpoints)
    assert "widgets.example.com" not in versions and versions["deployments.apps"] == "v1"
    endpoints = _mapped(ep(EP1, AFTER, APPS), ep(EP2, AFTER2, APPS))
    for endpoint in endpoints:
        endpoint.resources["deployments.apps"].storage_version = None  # the hash of a version no profile knows
    assert "deployments.apps" not in agreement.storage_versions(agreement.compare(endpoints), endpoints)
