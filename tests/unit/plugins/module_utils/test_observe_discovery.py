# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Discovery parsing against the real kube-apiserver 1.32 recordings."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from ansible_collections.kubeupgrade.storage.plugins.module_utils import errors, hashing
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe import discovery
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.model import CrdVersion, ObservedCrd
from ansible_collections.kubeupgrade.storage.plugins.module_utils.profiles import load_profiles

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "real-apiserver-1.32"
PROFILES = load_profiles()


def body(relative):
    return json.loads((FIXTURES / relative).read_text(encoding="utf-8"))["body"]


def legacy_resource_lists():
    """The recorded per-group-version docs of apiserver1, keyed by request path, as observe.py would pass them."""
    docs = {}
    for path in sorted((FIXTURES / "discovery").glob("*-legacy.json")):
        recording = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(recording["body"], dict) and recording["body"].get("kind") == "APIResourceList":
            docs[recording["request"]["path"]] = recording["body"]
    return docs


def crd_of(relative):
    obj = body(relative)
    return ObservedCrd(
        name=obj["metadata"]["name"], group=obj["spec"]["group"], kind=obj["spec"]["names"]["kind"],
        plural=obj["spec"]["names"]["plural"], scope=obj["spec"]["scope"],
        versions=[CrdVersion(v["name"], v["served"], v["storage"]) for v in obj["spec"]["versions"]],
        stored_versions=obj.get("status", {}).get("storedVersions", []))


def test_group_versions_cover_every_recorded_document():
    found = discovery.group_versions(body("discovery/api-legacy.json"), body("discovery/apis-legacy.json"))
    assert ("", "v1", "/api/v1") in found
    assert ("autoscaling", "v2", "/apis/autoscaling/v2") in found and ("autoscaling", "v1", "/apis/autoscaling/v1") in found
    assert {path for _unused, _unused, path in found} == set(legacy_resource_lists())


@pytest.mark.parametrize("relative", ["discovery/apis-aggregated-v2.json", "discovery/api-aggregated-v2.json",
                                      "discovery/apis-aggregated-v2beta1.json", "crd/10-discovery-aggregated-apis-after-storage-switch.json"])
def test_aggregated_documents_are_recognised_and_refused(relative):
    doc = body(relative)
    assert discovery.is_aggregated(doc)
    with pytest.raises(errors.KubeUpgradeError, match="aggregated discovery"):
        discovery.group_versions(doc, doc) if "api-" in relative else discovery.group_versions(body("discovery/api-legacy.json"), doc)


@pytest.mark.parametrize("relative", ["discovery/api-legacy.json", "discovery/apis-legacy.json", "discovery/apis-apps_v1-legacy.json"])
def test_legacy_documents_are_not_aggregated(relative):
    assert not discovery.is_aggregated(body(relative))


def test_endpoint_resources_skip_subresources_and_unpersisted():
    resources = discovery.endpoint_resources(legacy_resource_lists())
    assert not [name for name in resources if "/" in name]
    for virtual in ("tokenreviews.authentication.k8s.io", "bindings", "componentstatuses", "selfsubjectreviews.authentication.k8s.io"):
        assert virtual not in resources
    assert resources["horizontalpodautoscalers.autoscaling"].served_versions == ["v1", "v2"]
    assert resources["pods"].namespaced and not resources["nodes"].namespaced
    assert resources["pods"].storage_hash == "xPOwRZ+Yhw8="


def _recorded_builtin_rows():
    rows = []
    for path, doc in legacy_resource_lists().items():
        for item in doc["resources"]:
            if item.get("storageVersionHash"):
                group = doc["groupVersion"].rpartition("/")[0]
                rows.append(pytest.param(f"{item['name']}.{group}" if group else item["name"], item["storageVersionHash"], id=f"{path}:{item['name']}"))
    return rows


@pytest.mark.parametrize("name,recorded_hash", _recorded_builtin_rows())
def test_every_builtin_hash_maps_back_to_the_1_32_storage_version(name, recorded_hash):
    mapped = discovery.map_storage_versions(discovery.endpoint_resources(legacy_resource_lists()), PROFILES)
    expected = PROFILES.get("1.32").get(name)
    assert mapped[name].storage_hash == recorded_hash == expected.storage_hash()
    assert mapped[name].storage_version == expected.storage_version


def test_events_k8s_io_maps_through_the_core_storage_group():
    resources = discovery.endpoint_resources({"/apis/events.k8s.io/v1": body("discovery/apis-events.k8s.io_v1-legacy.json")})
    assert discovery.map_storage_versions(resources, PROFILES)["events.events.k8s.io"].storage_version == "v1"
    # Without release data the served version is hashed with its own group and matches nothing: unknown.
    assert discovery.map_storage_versions(resources, None)["events.events.k8s.io"].storage_version is None


# (discovery doc, CRD object in force when it was recorded): the storage version comes from the CRD.
CRD_ROWS = [
    ("crd/05-discovery-example.com-v1-before-storage-switch.json", "crd/03-get-crd-established.json"),
    ("crd/05-discovery-example.com-v1alpha1-before-storage-switch.json", "crd/03-get-crd-established.json"),
    ("crd/05-discovery-example.com-v1-before-storage-switch-apiserver2.json", "crd/03-get-crd-established.json"),
    ("crd/10-discovery-example.com-v1-after-storage-switch.json", "crd/09-get-crd-storedVersions-v1alpha1-v1.json"),
    ("crd/10-discovery-example.com-v1alpha1-after-storage-switch.json", "crd/09-get-crd-storedVersions-v1alpha1-v1.json"),
    ("crd/10-discovery-example.com-v1-after-storage-switch-apiserver2.json", "crd/09-get-crd-storedVersions-v1alpha1-v1.json"),
    ("crd/21-discovery-example.com-v1-final.json", "crd/19-update-crd-drop-v1alpha1-after-storedVersions-pruned-200.json"),
    ("svm-sigs/12-discovery-example.com-v2.json", "svm-sigs/11-update-crd-add-v2-as-storage-200.json"),
]


@pytest.mark.parametrize("doc_path,crd_path", CRD_ROWS)
def test_custom_resource_hash_maps_to_the_crd_storage_version(doc_path, crd_path):
    doc = body(doc_path)
    crd = crd_of(crd_path)
    resources = discovery.endpoint_resources({f"/apis/{doc['groupVersion']}": doc})
    widget = discovery.map_storage_versions(resources, PROFILES, {crd.name: crd})["widgets.example.com"]
    assert widget.storage_hash == hashing.storage_version_hash("example.com", crd.storage_version, "Widget")
    assert widget.storage_version == crd.storage_version


def test_custom_resource_switch_is_visible_as_a_hash_change():
    before = discovery.endpoint_resources({"/apis/example.com/v1": body("crd/05-discovery-example.com-v1-before-storage-switch.json")})
    after = discovery.endpoint_resources({"/apis/example.com/v1": body("crd/10-discovery-example.com-v1-after-storage-switch.json")})
    assert before["widgets.example.com"].storage_hash != after["widgets.example.com"].storage_hash


def test_hash_of_a_version_no_longer_in_the_crd_maps_to_nothing():
    """After v1alpha1 is dropped from spec.versions its hash no longer maps: unknown, never guessed."""
    doc = copy.deepcopy(body("crd/05-discovery-example.com-v1-before-storage-switch.json"))
    resources = discovery.endpoint_resources({"/apis/example.com/v1": doc})
    final_crd = crd_of("crd/19-update-crd-drop-v1alpha1-after-storedVersions-pruned-200.json")
    assert discovery.map_storage_versions(resources, PROFILES, {final_crd.name: final_crd})["widgets.example.com"].storage_version is None


def test_migration_k8s_io_resources_map_through_served_versions():
    resources = discovery.endpoint_resources({"/apis/migration.k8s.io/v1alpha1": body("svm-sigs/00-discovery-migration.k8s.io-v1alpha1.json")})
    mapped = discovery.map_storage_versions(resources, PROFILES)
    assert {name: r.storage_version for name, r in mapped.items()} == {
        "storagestates.migration.k8s.io": "v1alpha1", "storageversionmigrations.migration.k8s.io": "v1alpha1"}


def test_hash_mismatch_between_served_versions_fails_closed():
    v1 = body("crd/05-discovery-example.com-v1-before-storage-switch.json")
    v1alpha1_after = body("crd/10-discovery-example.com-v1alpha1-after-storage-switch.json")
    resources = discovery.endpoint_resources({"/apis/example.com/v1": v1, "/apis/example.com/v1alpha1": v1alpha1_after})
    widget = resources["widgets.example.com"]
    assert widget.storage_hash == ""
    assert widget.hash_mismatch == {"v1": "aXSEt3iQTdQ=", "v1alpha1": "gIwvi5rymmg="}
    assert discovery.map_storage_versions(resources, PROFILES)["widgets.example.com"].storage_version is None


def test_map_storage_versions_does_not_mutate_its_input():
    resources = discovery.endpoint_resources(legacy_resource_lists())
    discovery.map_storage_versions(resources, PROFILES)
    assert all(r.storage_version is None for r in resources.values())


@pytest.mark.parametrize("doc,fragment", [
    ({"kind": "Status", "status": "Failure"}, "did not return a APIResourceList"),
    ("404 page not found", "did not return a APIResourceList"),
    ({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2"}, "aggregated discovery"),
])
def test_bad_resource_list_names_the_path(doc, fragment):
    with pytest.raises(errors.KubeUpgradeError, match=fragment) as info:
        discovery.endpoint_resources({"/apis/example.com/v9": doc})
    assert "/apis/example.com/v9" in str(info.value)


@pytest.mark.parametrize("doc,expected", [
    ({"gitVersion": "v1.32.0-beta.0", "major": "1", "minor": "32"}, "1.32"),
    ({"gitVersion": "v1.27.3-eks-abc", "major": "1", "minor": "27+"}, "1.27"),
    ({"gitVersion": "weird", "major": "1", "minor": "29+"}, "1.29"),
    ({"major": "", "minor": ""}, None),
    ("not a dict", None),
])
def test_release_from_version(doc, expected):
    assert discovery.release_from_version(doc) == expected


@pytest.mark.parametrize("doc,expected", [
    # kube-apiserver 1.36.2 started with --emulated-version=1.35, as its /version answered
    ({"major": "1", "minor": "36", "emulationMajor": "1", "emulationMinor": "35", "minCompatibilityMajor": "1",
      "minCompatibilityMinor": "34", "gitVersion": "v1.36.2"}, ("1.35", "1.34")),
    ({"major": "1", "minor": "36", "emulationMajor": "1", "emulationMinor": "36", "minCompatibilityMajor": "1",
      "minCompatibilityMinor": "35", "gitVersion": "v1.36.2"}, ("1.36", "1.35")),
    ({"gitVersion": "v1.28.0", "major": "1", "minor": "28"}, (None, None)),  # before compatibility versions
    ("not a dict", (None, None)),
])
def test_emulation_from_version(doc, expected):
    assert discovery.emulation_from_version(doc) == expected


@pytest.mark.parametrize("relative", ["discovery/version.json", "discovery/version-apiserver2.json"])
def test_release_from_recorded_version(relative):
    assert discovery.release_from_version(body(relative)) == "1.32"


@pytest.mark.parametrize("versions,expected", [
    (["v1", "v1beta1", "v1alpha1", "v2", "v1beta2"], ["v1alpha1", "v1beta1", "v1beta2", "v1", "v2"]),
    (["v2beta1", "v1", "v1"], ["v1", "v2beta1"]),
])
def test_sort_versions(versions, expected):
    assert discovery.sort_versions(versions) == expected


def test_crd_candidate_versions_include_unserved_spec_versions():
    crd = ObservedCrd(name="widgets.example.com", group="example.com", kind="Widget", plural="widgets", scope="Namespaced",
                      versions=[CrdVersion("v1alpha1", False, True), CrdVersion("v1", True, False)])
    doc = body("crd/05-discovery-example.com-v1-before-storage-switch.json")
    resources = discovery.endpoint_resources({"/apis/example.com/v1": doc})
    assert resources["widgets.example.com"].served_versions == ["v1"]
    assert discovery.map_storage_versions(resources, PROFILES, {crd.name: crd})["widgets.example.com"].storage_version == "v1alpha1"
