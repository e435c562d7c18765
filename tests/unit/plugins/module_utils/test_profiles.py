# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

import json
from pathlib import Path

import pytest

from ansible_collections.kubeupgrade.storage.plugins.module_utils import errors, hashing
from ansible_collections.kubeupgrade.storage.plugins.module_utils.profiles import PROFILE_SCHEMA, ProfileSet, load_profiles, normalize_release

UPSTREAM = json.loads((Path(__file__).resolve().parents[3] / "fixtures" / "k8s-storage-profiles.json").read_text(encoding="utf-8"))
UPSTREAM_RELEASES = sorted((k for k in UPSTREAM if not k.startswith("_")), key=lambda r: tuple(map(int, r.split("."))))


def _name(key):
    group, _unused, resource = key.partition("/")
    return f"{resource}.{group}" if group else resource


@pytest.fixture(scope="module")
def shipped():
    return load_profiles()


@pytest.mark.parametrize("value,expected", [
    ("v1.34.2", "1.34"), ("1.34", "1.34"), ("1.34.0", "1.34"), ("v1.34.0-beta.0", "1.34"),
    (" v1.9.11 ", "1.9"), ("1.30", "1.30"), ("v1.32.0-beta.0+abc", "1.32"), ("01.05", "1.5"),
])
def test_normalize_release(value, expected):
    assert normalize_release(value) == expected


@pytest.mark.parametrize("value,fragment", [
    ("1", "not a version"), ("latest", "not a version"), ("", "not a version"), ("1.x", "not a version"),
    (1.3, "quote it"), (None, "must be a string"), (134, "must be a string"),
])
def test_normalize_release_rejects_garbage(value, fragment):
    with pytest.raises(errors.ProfileError, match=fragment):
        normalize_release(value)


def test_shipped_releases_are_the_upstream_releases(shipped):
    assert shipped.releases() == UPSTREAM_RELEASES


@pytest.mark.parametrize("release", UPSTREAM_RELEASES)
def test_every_upstream_entry_becomes_a_resource_profile(shipped, release):
    profile = shipped.get(release)
    assert profile.source == "shipped"
    assert set(profile.resources) == {_name(k) for k in UPSTREAM[release]}
    for key, entry in UPSTREAM[release].items():
        resource = profile.get(_name(key))
        assert (resource.kind, resource.storage_version, resource.served) == (entry["kind"], entry["storage"], entry["served"])
        assert resource.storage_group == entry.get("storage_group", key.partition("/")[0])
        assert resource.readable_versions() == set(entry.get("decodable", [])) | set(entry["served"]) | {entry["storage"]}
        assert resource.storage_hash() == entry["storageVersionHash_computed"]
    assert sorted(profile.removed) == sorted(_name(k) for k in UPSTREAM["_removed_resources"].get(release, []))


def test_events_k8s_io_hashes_as_core_event(shipped):
    events = shipped.get("1.32").get("events.events.k8s.io")
    assert events.storage_group == ""
    assert events.storage_hash() == hashing.storage_version_hash("", "v1", "Event") == shipped.get("1.32").get("events").storage_hash()
    assert shipped.storage_group_of("events.events.k8s.io") == ""
    assert shipped.storage_group_of("deployments.apps") == "apps"
    assert shipped.storage_group_of("widgets.example.com") is None


def test_readable_versions_include_unserved_decodable_versions(shipped):
    flowschemas = shipped.get("1.29").get("flowschemas.flowcontrol.apiserver.k8s.io")
    assert flowschemas.storage_version == "v1beta3"
    assert "v1beta1" in flowschemas.readable_versions() and "v1beta1" not in flowschemas.served


def test_candidate_versions_span_every_release(shipped):
    candidates = shipped.candidate_versions("flowschemas.flowcontrol.apiserver.k8s.io")
    per_release = set()
    for release in shipped.releases():
        entry = shipped.get(release).get("flowschemas.flowcontrol.apiserver.k8s.io")
        if entry:
            per_release |= entry.readable_versions()
    assert candidates == per_release and {"v1beta2", "v1beta3", "v1"} <= candidates
    assert shipped.candidate_versions("widgets.example.com") == set()
    assert shipped.kind_of("deployments.apps") == "Deployment" and shipped.kind_of("nope") is None


@pytest.mark.parametrize("release", ["v1.24.3", "1.99", "2.0"])
def test_unknown_release_names_known_ones_and_how_to_add(shipped, release):
    with pytest.raises(errors.ProfileError) as info:
        shipped.get(release)
    message = str(info.value)
    assert normalize_release(release) in message
    assert UPSTREAM_RELEASES[0] in message and UPSTREAM_RELEASES[-1] in message
    assert "profiles_file" in message


def test_get_accepts_patch_versions(shipped):
    assert shipped.get("v1.32.4").release == "1.32"
    assert "v1.32.0" in shipped and "1.99" not in shipped and "junk" not in shipped


def test_inline_profile_overrides_one_resource_field():
    profiles = load_profiles(profiles={"releases": {"1.32": {"resources": {"deployments.apps": {"decodable": ["v1", "v1beta9"]}}}}})
    deployments = profiles.get("1.32").get("deployments.apps")
    assert deployments.decodable == ["v1", "v1beta9"]
    assert deployments.storage_version == load_profiles().get("1.32").get("deployments.apps").storage_version
    assert profiles.get("1.32").source == "the profiles option"
    assert profiles.get("1.31").source == "shipped"
    assert len(profiles.get("1.32").resources) == len(load_profiles().get("1.32").resources)


def test_new_release_extends_an_existing_one():
    profiles = load_profiles(profiles={"releases": {"1.38": {
        "extends": "1.37",
        "resources": {"widgets.example.com": {"kind": "Widget", "storage": "v2"}},
        "removed": ["clustercidrs.networking.k8s.io"]}}})
    new = profiles.get("v1.38.1")
    assert new.get("widgets.example.com").served == ["v2"] and new.get("widgets.example.com").decodable == []
    assert set(new.resources) == set(profiles.get("1.37").resources) | {"widgets.example.com"}
    assert new.removed == ["clustercidrs.networking.k8s.io"]
    assert profiles.get("1.37").get("widgets.example.com") is None
    assert profiles.releases()[-1] == "1.38"


def test_replace_drops_existing_resources():
    profiles = load_profiles(profiles={"releases": {"1.32": {"replace": True, "resources": {"pods": {"kind": "Pod", "storage": "v1"}}}}})
    assert list(profiles.get("1.32").resources) == ["pods"]


def test_file_then_inline(tmp_path):
    path = tmp_path / "profiles.yml"
    path.write_text('releases:\n  "1.40":\n    resources:\n      pods: {kind: Pod, storage: v1, served: [v1]}\n', encoding="utf-8")
    profiles = load_profiles(profiles_file=str(path), profiles={"releases": {"1.40": {"resources": {"pods": {"decodable": ["v1"]}}}}})
    pods = profiles.get("1.40").get("pods")
    assert (pods.storage_version, pods.decodable) == ("v1", ["v1"])
    assert profiles.get("1.40").source == "the profiles option"


def test_json_file(tmp_path):
    path = tmp_path / "profiles.json"
    path.write_text(json.dumps({"format": 1, "releases": {"1.41": {"resources": {"pods": {"kind": "Pod", "storage": "v1"}}}}}), encoding="utf-8")
    assert load_profiles(profiles_file=str(path)).get("1.41").source == str(path)


@pytest.mark.parametrize("text,fragments", [
    ("releases:\n  \"1.40\":\n    resources:\n      pods: {kind: Pod, storage: 1}\n", ["$.releases[\"1.40\"].resources.pods.storage", "not of type"]),
    ("releases:\n  \"1.40\":\n    resources:\n      pods: {kind: Pod, storage: v1, colour: red}\n", ["$.releases[\"1.40\"].resources.pods", "colour"]),
    ("releases:\n  \"1.40\":\n    resources:\n      /pods: {kind: Pod, storage: v1}\n", ["$.releases[\"1.40\"].resources", "/pods"]),
    ("releases:\n  \"1.40\":\n    resources:\n      pods: {storage: v1}\n", ["$.releases[\"1.40\"].resources[\"pods\"]", "needs kind"]),
    ("releases:\n  \"1.40\":\n    extends: \"1.10\"\n", ["extends", "1.10 is not known"]),
    ("releases:\n  1.30:\n    resources: {}\n", ["quote it"]),
    ("releases:\n  \"1.40\":\n    resources:\n      pods: {kind: Pod, storage: v1, served: [v1, v1]}\n", ["served", "non-unique"]),
    ("profiles: {}\n", ["$", "releases"]),
    ("", ["empty"]),
    ("releases: [unclosed\n", ["not valid YAML"]),
])
def test_bad_file_gives_one_error_naming_file_and_path(tmp_path, text, fragments):
    path = tmp_path / "bad.yml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(errors.ProfileError) as info:
        load_profiles(profiles_file=str(path))
    message = str(info.value)
    assert str(path) in message
    for fragment in fragments:
        assert fragment in message


def test_missing_file():
    with pytest.raises(errors.ProfileError, match="cannot read the release profiles file /nonexistent/p.yml"):
        load_profiles(profiles_file="/nonexistent/p.yml")


def test_bad_inline_names_the_option():
    with pytest.raises(errors.ProfileError, match="the profiles option at \\$.releases"):
        load_profiles(profiles={"releases": {"1.40": {"resources": "nope"}}})


def test_schema_accepts_the_documented_example():
    import jsonschema
    import yaml

    from ansible_collections.kubeupgrade.storage.plugins.module_utils import profiles as module

    example = module.__doc__.split("Format::", 1)[1].split("For a resource", 1)[0]
    data = yaml.safe_load(example)
    jsonschema.validate(data, PROFILE_SCHEMA)
    assert load_profiles(profiles=data).get("1.38").get("flowschemas.flowcontrol.apiserver.k8s.io").storage_version == "v1"


def test_profile_set_without_releases():
    with pytest.raises(errors.ProfileError, match="Known releases: none"):
        ProfileSet({}).get("1.30")
