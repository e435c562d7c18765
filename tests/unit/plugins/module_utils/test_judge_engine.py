# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The verdict engine, on the real 1.32 discovery and on clusters built from the release data."""

from __future__ import annotations

import copy
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from ansible_collections.kubeupgrade.storage.plugins.module_utils._judge import engine, report, views
from ansible_collections.kubeupgrade.storage.plugins.module_utils._judge.model import (
    NEEDS_MIGRATION,
    REMOVED,
    SAFE,
    UNKNOWN,
    UNSAFE,
    VERDICT_ORDER,
    JudgeOptions,
    Target,
    worst_of,
)
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe import crds, discovery
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.model import (
    EndpointObservation,
    ObjectCount,
    Observation,
    ObservedApiService,
    ObservedResource,
    ObservedStorageVersion,
    StorageStateRecord,
    StorageVersionEntry,
)
from ansible_collections.kubeupgrade.storage.plugins.module_utils._remember import records
from ansible_collections.kubeupgrade.storage.plugins.module_utils.hashing import UNKNOWN as UNKNOWN_HASH
from ansible_collections.kubeupgrade.storage.plugins.module_utils.hashing import storage_version_hash
from ansible_collections.kubeupgrade.storage.plugins.module_utils.profiles import load_profiles
from ansible_collections.kubeupgrade.storage.plugins.module_utils.resources import GroupResource

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "real-apiserver-1.32"
UPSTREAM = json.loads((Path(__file__).resolve().parents[3] / "fixtures" / "k8s-storage-profiles.json").read_text(encoding="utf-8"))
RELEASES = sorted((k for k in UPSTREAM if not k.startswith("_")), key=lambda r: tuple(map(int, r.split("."))))
PROFILES = load_profiles()
NOW = datetime(2026, 11, 21, 15, 0, 0, tzinfo=timezone.utc)
EP1, EP2, EP3 = "https://10.0.0.11:6443", "https://10.0.0.12:6443", "https://10.0.0.13:6443"
FLOWSCHEMAS = "flowschemas.flowcontrol.apiserver.k8s.io"
SVM = "storageversionmigrations.storagemigration.k8s.io"


def judge(observation, target, profiles, **options):
    return engine.judge(observation, target, profiles, JudgeOptions(**options))


def body(relative):
    return json.loads((FIXTURES / relative).read_text(encoding="utf-8"))["body"]


def hash_of(name, version):
    return storage_version_hash(PROFILES.storage_group_of(name), version, PROFILES.kind_of(name))


def endpoint(url, release, stored, **kwargs):
    """An apiserver of ``release`` reporting, for each resource, the hash of the given storage version."""
    resources = {}
    for name, version in stored.items():
        entry = PROFILES.get(release).get(name)
        resources[name] = ObservedResource(name=name, group=entry.group, kind=entry.kind, namespaced=True,
                                           storage_hash=hash_of(name, version), served_versions=list(entry.served))
    return EndpointObservation(endpoint=url, reachable=True, ready=True, release=release,
                               resources=discovery.map_storage_versions(resources, PROFILES), **kwargs)


def record(name, *versions, heartbeat=NOW - timedelta(minutes=1), hashes=None):
    gr = name.partition(".")
    return StorageStateRecord(name=name, group=gr[2], resource=gr[0],
                              persisted_hashes=list(hashes) if hashes is not None else [hash_of(name, v) for v in versions],
                              current_hash=None, last_heartbeat=records.format_time(heartbeat) if heartbeat else None)


def one(observation, target, name, **kwargs):
    result = judge(observation, target, PROFILES, resources=[name], now=NOW, **kwargs)
    assert len(result.resources) == 1
    return result.resources[0]


# ---- the real 1.32 cluster against every release, with an oracle read straight from the upstream table -------------

def real_cluster(with_records=True):
    docs = {}
    for path in sorted((FIXTURES / "discovery").glob("*-legacy.json")):
        recording = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(recording["body"], dict) and recording["body"].get("kind") == "APIResourceList":
            docs[recording["request"]["path"]] = recording["body"]
    resources = discovery.map_storage_versions(discovery.endpoint_resources(docs), PROFILES)
    eps = [EndpointObservation(endpoint=url, reachable=True, ready=True, git_version="v1.32.0-beta.0", release="1.32",
                               resources=copy.deepcopy(resources)) for url in (EP1, EP2)]
    states = {}
    if with_records:
        states = {name: StorageStateRecord(name=name, group=r.group, resource=name.partition(".")[0], persisted_hashes=[r.storage_hash],
                                           current_hash=r.storage_hash, last_heartbeat="2026-11-21T14:59:00Z")
                  for name, r in resources.items()}
    return Observation(endpoints=eps, storage_states=states)


def _key(name):
    resource, _unused, group = name.partition(".")
    return f"{group}/{resource}"


def oracle(name, target_release):
    """Expected verdict from the raw table: is 1.32's storage version among the target's versions?"""
    key = _key(name)
    stored = UPSTREAM["1.32"][key]["storage"]
    entry = UPSTREAM[target_release].get(key)
    if entry is None:  # removed after 1.32, or introduced after the target: the target has no types for it
        return REMOVED
    readable = set(entry.get("decodable", [])) | set(entry["served"]) | {entry["storage"]}
    return SAFE if stored in readable else UNSAFE


@pytest.mark.parametrize("target_release", RELEASES)
def test_real_1_32_cluster_against_every_release(target_release):
    observation = real_cluster()
    result = judge(observation, Target(release=PROFILES.get(target_release)), PROFILES, now=NOW)
    assert {r.resource for r in result.resources} == set(observation.endpoints[0].resources)
    for item in result.resources:
        assert item.verdict == oracle(item.resource, target_release), item.reason
        assert item.current_versions == {EP1: PROFILES.get("1.32").get(item.resource).storage_version,
                                         EP2: PROFILES.get("1.32").get(item.resource).storage_version}
        assert not item.conservative
    assert sum(result.counts.values()) == len(result.resources)
    assert result.worst == max((r.verdict for r in result.resources), key=VERDICT_ORDER.index)


def test_real_cluster_against_its_own_release_is_all_safe():
    result = judge(real_cluster(), Target(release=PROFILES.get("1.32")), PROFILES, now=NOW)
    assert result.counts[SAFE] == len(result.resources) > 30 and result.worst == SAFE


def test_storageversionmigrations_v1alpha1_cannot_be_read_by_1_35():
    item = one(real_cluster(), Target(release=PROFILES.get("1.35")), SVM)
    assert item.verdict == UNSAFE and "v1alpha1" in item.reason
    assert item.target_storage_version == "v1beta1" and "v1alpha1" not in item.target_decodable_versions
    assert item.running_can_read_target is False


def test_events_k8s_io_is_judged_in_its_storage_group():
    item = one(real_cluster(), Target(release=PROFILES.get("1.37")), "events.events.k8s.io")
    assert item.verdict == SAFE and item.persisted_versions == ["v1"] and item.unresolved_hashes == []
    assert item.persisted_hashes == [storage_version_hash("", "v1", "Event")]


# ---- downgrades and upgrades of flowcontrol (stored v1beta3 in 1.29, v1 from 1.30) ------------------------------

@pytest.mark.parametrize("cluster_release,persisted,target_release,expected", [
    ("1.29", ["v1beta3"], "1.25", UNSAFE),          # 1.25 has no v1beta3 types at all
    ("1.29", ["v1beta3"], "1.26", SAFE),            # 1.26 decodes v1beta3 although it stores v1beta2
    ("1.29", ["v1beta3"], "1.28", SAFE),
    ("1.29", ["v1beta3"], "1.30", SAFE),
    ("1.29", ["v1beta2", "v1beta3"], "1.37", SAFE),  # v1beta2 is decodable in 1.37 though not served
    ("1.30", ["v1beta3", "v1"], "1.28", UNSAFE),     # rollback below v1: the current storage version is unreadable
    ("1.30", ["v1beta3", "v1"], "1.29", SAFE),
    ("1.27", ["v1beta2", "v1beta3"], "1.25", UNSAFE),
    ("1.26", ["v1beta1", "v1beta2"], "1.29", SAFE),
])
def test_flowcontrol_across_releases(cluster_release, persisted, target_release, expected):
    current = PROFILES.get(cluster_release).get(FLOWSCHEMAS).storage_version
    assert current == persisted[-1]
    observation = Observation(endpoints=[endpoint(EP1, cluster_release, {FLOWSCHEMAS: current})],
                              storage_states={FLOWSCHEMAS: record(FLOWSCHEMAS, *persisted)})
    item = one(observation, Target(release=PROFILES.get(target_release)), FLOWSCHEMAS)
    assert item.verdict == expected, item.reason
    assert item.persisted_versions == discovery.sort_versions(persisted)
    assert item.current_versions == {EP1: current}


def _migratable_case():
    """From the release data: a resource whose running release reads an old version that the target cannot."""
    for running, target in zip(RELEASES, RELEASES[1:]):
        for name, entry in PROFILES.get(running).resources.items():
            later = PROFILES.get(target).get(name)
            if later is None or entry.storage_version not in later.readable_versions():
                continue
            for old in sorted(entry.readable_versions() - later.readable_versions()):
                if old != entry.storage_version:
                    return name, running, target, old, entry.storage_version
    raise AssertionError("the release data has no migratable case")


def test_needs_migration_when_only_an_old_persisted_version_is_unreadable():
    name, running, target, old, current = _migratable_case()
    observation = Observation(endpoints=[endpoint(EP1, running, {name: current})],
                              storage_states={name: record(name, old, current)})
    item = one(observation, Target(release=PROFILES.get(target)), name)
    assert item.verdict == NEEDS_MIGRATION, item.reason
    assert old in item.reason and "migrate" in item.next_step and current in item.next_step
    assert item.persisted_versions == discovery.sort_versions([old, current])


def test_persisted_version_the_running_release_cannot_read_either_is_unsafe():
    # 1.37 reads only v1beta1 of storageversionmigrations: v1alpha1 objects are out of reach of any migration.
    observation = Observation(endpoints=[endpoint(EP1, "1.37", {SVM: "v1beta1"})],
                              storage_states={SVM: record(SVM, "v1alpha1", "v1beta1")})
    item = one(observation, Target(release=PROFILES.get("1.37")), SVM)
    assert item.verdict == UNSAFE and "neither" in item.reason and "running apiservers (1.37)" in item.reason
    assert "etcdctl del" in item.next_step and "roll back to" in item.next_step and "1.34" in item.next_step


def test_resourceclaims_v1alpha2_on_1_31_to_1_32_is_unsafe_not_needs_migration():
    name = "resourceclaims.resource.k8s.io"
    observation = Observation(endpoints=[endpoint(EP1, "1.31", {name: "v1alpha3"})],
                              storage_states={name: record(name, "v1alpha2", "v1alpha3")})
    item = one(observation, Target(release=PROFILES.get("1.32")), name)
    assert item.verdict == UNSAFE and "v1alpha2" in item.reason
    assert "Kubernetes 1.30" in item.next_step  # the one release that reads v1alpha2


@pytest.mark.parametrize("cluster_release,target_release,expected", [
    ("1.29", "1.30", True),   # 1.29 already reads v1, which 1.30 writes
    ("1.28", "1.30", False),  # 1.28 cannot read v1: after the swap, a rollback needs a migration back first
])
def test_running_can_read_target(cluster_release, target_release, expected):
    current = PROFILES.get(cluster_release).get(FLOWSCHEMAS).storage_version
    observation = Observation(endpoints=[endpoint(EP1, cluster_release, {FLOWSCHEMAS: current})],
                              storage_states={FLOWSCHEMAS: record(FLOWSCHEMAS, current)})
    item = one(observation, Target(release=PROFILES.get(target_release)), FLOWSCHEMAS)
    assert item.verdict == SAFE
    assert item.running_can_read_target is expected
    assert ("cannot read v1" in item.next_step) is (not expected)


def test_rolling_upgrade_mixed_endpoints():
    observation = Observation(endpoints=[endpoint(EP1, "1.30", {FLOWSCHEMAS: "v1"}), endpoint(EP2, "1.29", {FLOWSCHEMAS: "v1beta3"})],
                              storage_states={FLOWSCHEMAS: record(FLOWSCHEMAS, "v1beta3")})
    item = one(observation, Target(release=PROFILES.get("1.28")), FLOWSCHEMAS)
    assert item.verdict == UNSAFE and item.current_versions == {EP1: "v1", EP2: "v1beta3"}
    assert item.persisted_hashes == [hash_of(FLOWSCHEMAS, "v1beta3"), hash_of(FLOWSCHEMAS, "v1")]
    assert one(observation, Target(release=PROFILES.get("1.31")), FLOWSCHEMAS).verdict == SAFE


# ---- removed resources -------------------------------------------------------------------------------------------

def _removed_case():
    """A resource the newest releases list as removed, with the last release that had it."""
    for target in reversed(RELEASES):
        for key in UPSTREAM["_removed_resources"].get(target, []):
            older = [r for r in RELEASES if key in UPSTREAM[r]]
            if older:
                group, _unused, resource = key.partition("/")
                return f"{resource}.{group}" if group else resource, older[-1], target
    raise AssertionError("the release data lists no removed resource")


def test_removed_resource():
    name, last, target = _removed_case()
    stored = PROFILES.get(last).get(name).storage_version
    observation = Observation(endpoints=[endpoint(EP1, last, {name: stored})], storage_states={name: record(name, stored)})
    item = one(observation, Target(release=PROFILES.get(target)), name)
    assert item.verdict == REMOVED and "export" in item.next_step and name in item.next_step
    assert one(observation, Target(release=PROFILES.get(last)), name).verdict == SAFE


def test_downgrade_below_the_release_that_introduced_a_resource_is_removed_too():
    newest = RELEASES[-1]
    introduced = sorted(set(PROFILES.get(newest).resources) - set(PROFILES.get(RELEASES[0]).resources)
                        - set(PROFILES.get(RELEASES[0]).removed))
    name = introduced[0]
    stored = PROFILES.get(newest).get(name).storage_version
    observation = Observation(endpoints=[endpoint(EP1, newest, {name: stored})], storage_states={name: record(name, stored)})
    item = one(observation, Target(release=PROFILES.get(RELEASES[0])), name)
    assert item.verdict == REMOVED and "has no types" in item.reason and "export" in item.next_step
    removed, last, target = _removed_case()
    stored = PROFILES.get(last).get(removed).storage_version
    upgrade = Observation(endpoints=[endpoint(EP1, last, {removed: stored})], storage_states={removed: record(removed, stored)})
    assert one(upgrade, Target(release=PROFILES.get(target)), removed).reason.startswith(f"Kubernetes {target} has no types")


# ---- Unknown, stale and unmapped records ------------------------------------------------------------------------

def _deployments(**record_kwargs):
    states = {"deployments.apps": record("deployments.apps", "v1", **record_kwargs)} if record_kwargs is not None else {}
    return Observation(endpoints=[endpoint(EP1, "1.32", {"deployments.apps": "v1"})], storage_states=states)


@pytest.mark.parametrize("states,max_age,fragment", [
    ({}, None, "no StorageState record"),
    ({"deployments.apps": record("deployments.apps", hashes=[UNKNOWN_HASH])}, None, "lists Unknown"),
    ({"deployments.apps": record("deployments.apps", hashes=[UNKNOWN_HASH, hash_of("deployments.apps", "v1")])}, None, "lists Unknown"),
    ({"deployments.apps": record("deployments.apps", hashes=[])}, None, "lists no persisted versions at all"),
    ({"deployments.apps": record("deployments.apps", "v1", heartbeat=None)}, 3600, "has no heartbeat (never refreshed)"),
    ({"deployments.apps": record("deployments.apps", "v1", heartbeat=NOW - timedelta(hours=2))}, 3600, "more than 3600s ago"),
    ({"deployments.apps": record("deployments.apps", hashes=["AAAAAAAAAAA="])}, None, "AAAAAAAAAAA= is no storage version of deployments.apps"),
])
def test_unknown_persisted_is_never_safe(states, max_age, fragment):
    observation = Observation(endpoints=[endpoint(EP1, "1.32", {"deployments.apps": "v1"})], storage_states=states)
    item = one(observation, Target(release=PROFILES.get("1.32")), "deployments.apps", record_max_age=max_age)
    assert item.verdict == UNKNOWN and fragment in item.reason
    assert "migrate deployments.apps" in item.next_step
    assert item.unresolved_hashes


def test_stale_record_is_trusted_without_max_age():
    observation = Observation(endpoints=[endpoint(EP1, "1.32", {"deployments.apps": "v1"})],
                              storage_states={"deployments.apps": record("deployments.apps", "v1", heartbeat=NOW - timedelta(days=30))})
    assert one(observation, Target(release=PROFILES.get("1.32")), "deployments.apps").verdict == SAFE


def test_current_hash_mapping_to_nothing_is_unknown():
    ep = endpoint(EP1, "1.32", {"deployments.apps": "v1"})
    ep.resources["deployments.apps"].storage_hash = "AAAAAAAAAAA="
    ep.resources["deployments.apps"].storage_version = None
    observation = Observation(endpoints=[ep], storage_states={"deployments.apps": record("deployments.apps", "v1")})
    item = one(observation, Target(release=PROFILES.get("1.32")), "deployments.apps")
    assert item.verdict == UNKNOWN and item.current_versions == {EP1: None} and "AAAAAAAAAAA=" in item.unresolved_hashes


# ---- unreachable and incomplete endpoints ----------------------------------------------------------------------

@pytest.mark.parametrize("broken,step", [
    (EndpointObservation(endpoint=EP3, reachable=False, error="apiserver https://10.0.0.13:6443 is unreachable"), "reachable"),
    (EndpointObservation(endpoint=EP3, reachable=False, error="rejected the credentials (HTTP 401)", status=401), "credentials"),
    (EndpointObservation(endpoint=EP3, reachable=False, error="refused access (HTTP 403)", status=403), "nonResourceURLs"),
])
def test_unreachable_endpoint_blocks_with_its_own_reason_and_nothing_else(broken, step):
    observation = real_cluster()
    observation.endpoints.append(broken)
    result = judge(observation, Target(release=PROFILES.get("1.32")), PROFILES, now=NOW)
    assert result.counts[SAFE] == len(result.resources)  # the resources are judged on the apiservers that answered
    assert [b["subject"] for b in result.blocking] == [EP3]
    finding = result.findings[0]
    assert finding.scope == "apiserver" and "agreement" in finding.reason and step in finding.next_step
    assert result.worst == UNKNOWN and all(r.current_versions[EP3] is None for r in result.resources)


def test_failed_group_discovery_makes_only_that_group_unknown():
    observation = real_cluster()
    observation.endpoints[1].failed_groups = ["apps/v1"]
    observation.endpoints[1].resources = {n: r for n, r in observation.endpoints[1].resources.items() if r.group != "apps"}
    result = judge(observation, Target(release=PROFILES.get("1.32")), PROFILES, now=NOW)
    unknown = sorted(r.resource for r in result.resources if r.verdict == UNKNOWN)
    assert unknown and all(name.endswith(".apps") for name in unknown)
    assert result.counts[SAFE] == len(result.resources) - len(unknown)
    assert "apps/v1" in result.resources[[r.resource for r in result.resources].index(unknown[0])].reason
    assert [f.subject for f in result.findings] == ["apps/v1"] and result.findings[0].blocking


def _with_aggregated(observation, gv, *, service="kube-system/metrics-server", broken=True):
    group, _unused, version = gv.rpartition("/")
    observation.api_services_read = True
    observation.api_services[gv] = ObservedApiService(name=f"{version}.{group}", group_version=gv, service=service,
                                                      available=not broken, message="FailedDiscoveryCheck" if broken else "")
    if broken:
        for ep in observation.endpoints:
            ep.failed_groups.append(gv)
    return observation


def test_broken_aggregated_apiservice_is_not_stored_here_and_blocks_nothing():
    observation = _with_aggregated(real_cluster(), "metrics.k8s.io/v1beta1")
    result = judge(observation, Target(release=PROFILES.get("1.32")), PROFILES, now=NOW)
    assert result.counts[SAFE] == len(result.resources) and result.blocking == [] and result.worst == SAFE
    assert [n["group_version"] for n in result.not_stored] == ["metrics.k8s.io/v1beta1"]
    assert "not in this etcd" in result.not_stored[0]["reason"] and "discovery failed" in result.not_stored[0]["reason"]


def test_broken_local_group_without_apiservices_read_is_one_blocking_finding():
    observation = real_cluster()
    for ep in observation.endpoints:
        ep.failed_groups.append("metrics.k8s.io/v1beta1")
    result = judge(observation, Target(release=PROFILES.get("1.32")), PROFILES, now=NOW)
    assert result.counts[SAFE] == len(result.resources)
    assert [b["subject"] for b in result.blocking] == ["metrics.k8s.io/v1beta1"]
    assert "APIServices could not be read" in result.findings[0].reason


def test_unreachable_endpoint_still_reports_unsafe():
    observation = real_cluster()
    observation.endpoints.append(EndpointObservation(endpoint=EP3, reachable=False, error="timeout"))
    assert one(observation, Target(release=PROFILES.get("1.35")), SVM).verdict == UNSAFE


def test_no_endpoints_is_one_blocking_finding():
    observation = Observation(storage_states={"deployments.apps": record("deployments.apps", "v1")})
    result = judge(observation, Target(release=PROFILES.get("1.32")), PROFILES, now=NOW)
    assert result.worst == UNKNOWN and [b["subject"] for b in result.blocking] == ["(no apiserver)"]


def test_endpoint_missing_the_resource_is_unknown():
    observation = Observation(endpoints=[endpoint(EP1, "1.32", {"deployments.apps": "v1"}), endpoint(EP2, "1.32", {})],
                              storage_states={"deployments.apps": record("deployments.apps", "v1")})
    item = one(observation, Target(release=PROFILES.get("1.32")), "deployments.apps")
    assert item.verdict == UNKNOWN and "does not serve" in item.reason and "storage_version_agreement" in item.next_step


# ---- live targets (conservative) and StorageVersion decodableVersions --------------------------------------------

def test_live_target_is_conservative():
    observation = Observation(endpoints=[endpoint(EP1, "1.30", {FLOWSCHEMAS: "v1"})],
                              storage_states={FLOWSCHEMAS: record(FLOWSCHEMAS, "v1beta2", "v1")})
    live = endpoint("https://10.0.0.99:6443", "1.37", {FLOWSCHEMAS: "v1"})
    item = one(observation, Target(live=live), FLOWSCHEMAS)
    assert item.verdict == NEEDS_MIGRATION and item.conservative and "live discovery" in item.reason
    assert item.target_decodable_versions == ["v1"]
    # The release profile knows 1.37 still decodes v1beta2, so it is not conservative and is safe.
    precise = one(observation, Target(release=PROFILES.get("1.37"), live=live), FLOWSCHEMAS)
    assert precise.verdict == SAFE and not precise.conservative


def test_live_target_without_the_resource_is_removed():
    observation = Observation(endpoints=[endpoint(EP1, "1.32", {SVM: "v1alpha1"})], storage_states={SVM: record(SVM, "v1alpha1")})
    live = endpoint("https://10.0.0.99:6443", "1.32", {})
    item = one(observation, Target(live=live), SVM)
    assert item.verdict == REMOVED and item.conservative


def test_unreadable_live_target_is_unknown():
    observation = Observation(endpoints=[endpoint(EP1, "1.32", {"deployments.apps": "v1"})],
                              storage_states={"deployments.apps": record("deployments.apps", "v1")})
    live = EndpointObservation(endpoint="https://10.0.0.99:6443", reachable=False, error="connection refused")
    item = one(observation, Target(live=live), "deployments.apps")
    assert item.verdict == UNKNOWN and "connection refused" in item.reason


def _storage_version(relative):
    obj = body(relative)
    return ObservedStorageVersion(
        name=obj["metadata"]["name"], common_encoding_version=obj["status"].get("commonEncodingVersion"),
        entries=[StorageVersionEntry(api_server_id=e["apiServerID"], encoding_version=e["encodingVersion"],
                                     decodable_versions=e["decodableVersions"], served_versions=e.get("servedVersions", []))
                 for e in obj["status"]["storageVersions"]])


def test_storage_version_decodable_versions_as_target():
    sv = _storage_version("storageversion-api/09-get-storageversion-apps.deployments-two-apiservers.json")
    observation = Observation(endpoints=[endpoint(EP1, "1.32", {"deployments.apps": "v1"})],
                              storage_states={"deployments.apps": record("deployments.apps", hashes=[
                                  storage_version_hash("apps", "v1beta2", "Deployment"), storage_version_hash("apps", "v1", "Deployment")])})
    item = one(observation, Target(storage_versions={sv.name: sv}), "deployments.apps")
    assert item.verdict == SAFE and "StorageVersion apps.deployments" in item.target_source
    assert item.target_decodable_versions == ["v1beta1", "v1beta2", "v1"] and item.target_storage_version == "v1"
    # One target apiserver that lost v1beta2 makes the whole target unable to read it.
    narrowed = copy.deepcopy(sv)
    narrowed.entries[1].decodable_versions = ["apps/v1"]
    assert one(observation, Target(storage_versions={sv.name: narrowed}), "deployments.apps").verdict == NEEDS_MIGRATION


def test_storage_version_names_core_resources_core():
    sv = _storage_version("storageversion-api/09-get-storageversion-core.configmaps-two-apiservers.json")
    assert views.storage_version_object_name("configmaps") == sv.name == "core.configmaps"
    observation = Observation(endpoints=[endpoint(EP1, "1.32", {"configmaps": "v1"})], storage_states={"configmaps": record("configmaps", "v1")})
    assert one(observation, Target(storage_versions={sv.name: sv}), "configmaps").verdict == SAFE


# ---- custom resources: live CRD and target CRD manifests ---------------------------------------------------------

def _widget_cluster(crd_relative, discovery_relative, persisted):
    crd = crds.crd_from_object(body(crd_relative))
    doc = body(discovery_relative)
    resources = discovery.map_storage_versions(discovery.endpoint_resources({"/apis/example.com/v1": doc}), PROFILES, {crd.name: crd})
    ep = EndpointObservation(endpoint=EP1, reachable=True, ready=True, release="1.32", resources=resources)
    hashes = [storage_version_hash("example.com", v, "Widget") for v in persisted]
    return Observation(endpoints=[ep], crds={crd.name: crd},
                       storage_states={crd.name: record(crd.name, hashes=hashes)})


def _manifest(*versions, storage):
    manifest = copy.deepcopy(json.loads((FIXTURES / "crd/02-create-crd-201.json").read_text(encoding="utf-8"))["request"]["body"])
    template = manifest["spec"]["versions"][0]
    manifest["spec"]["versions"] = [dict(template, name=v, served=True, storage=(v == storage)) for v in versions]
    return crds.parse_manifests([manifest])


SWITCHED = ("crd/09-get-crd-storedVersions-v1alpha1-v1.json", "crd/10-discovery-example.com-v1-after-storage-switch.json")


@pytest.mark.parametrize("manifest,persisted,expected", [
    (None, ["v1"], SAFE),                                     # judged against the live CRD (v1alpha1 and v1)
    (_manifest("v1alpha1", "v1", storage="v1"), ["v1"], SAFE),
    (_manifest("v1", storage="v1"), ["v1"], NEEDS_MIGRATION),  # storedVersions still has v1alpha1
    (_manifest("v1", "v2", storage="v2"), ["v1"], NEEDS_MIGRATION),
    (_manifest("v2", storage="v2"), ["v1"], UNSAFE),           # drops the current storage version
])
def test_crd_manifests(manifest, persisted, expected):
    observation = _widget_cluster(*SWITCHED, persisted)
    item = one(observation, Target(release=PROFILES.get("1.32"), crd_manifests=manifest), "widgets.example.com")
    assert item.verdict == expected, item.reason
    assert item.persisted_versions == ["v1alpha1", "v1"]  # storedVersions counts even when the record says [v1]
    if expected == NEEDS_MIGRATION:
        assert "storedVersions" in item.next_step and "v1alpha1" in item.next_step
    if expected == UNSAFE:
        assert "keep version v1" in item.next_step


def test_crd_after_pruning_is_safe_against_a_v1_only_manifest():
    observation = _widget_cluster("crd/19-update-crd-drop-v1alpha1-after-storedVersions-pruned-200.json",
                                  "crd/21-discovery-example.com-v1-final.json", ["v1"])
    item = one(observation, Target(crd_manifests=_manifest("v1", storage="v1")), "widgets.example.com")
    assert item.verdict == SAFE and item.running_can_read_target is True


def test_crd_running_can_read_target_checks_the_live_crd():
    observation = _widget_cluster(*SWITCHED, ["v1"])
    item = one(observation, Target(crd_manifests=_manifest("v1", "v2", storage="v2")), "widgets.example.com")
    assert item.running_can_read_target is False and item.target_storage_version == "v2"


def test_custom_resource_with_unknown_record_is_unknown():
    observation = _widget_cluster(*SWITCHED, ["v1"])
    observation.storage_states = {}
    assert one(observation, Target(), "widgets.example.com").verdict == UNKNOWN


# ---- reporting ---------------------------------------------------------------------------------------------------

def test_no_target_is_unknown():
    item = one(_deployments(), Target(), "deployments.apps")
    assert item.verdict == UNKNOWN and "no target" in item.reason


def test_rendering_lists_every_resource_worst_first():
    observation = real_cluster()
    observation.storage_states.pop("pods")
    result = judge(observation, Target(release=PROFILES.get("1.35")), PROFILES, now=NOW)
    markdown = report.render_markdown(result)
    rows = [line for line in markdown.splitlines() if line.startswith("| ") and not line.startswith("| resource |") and "---" not in line]
    assert len(rows) == len(result.resources)
    assert rows[0].startswith(f"| {SVM} | unsafe")
    # The decision leads: what is not safe, with reasons, then the safe ones in one compact table after it.
    attention, _sep, safe_part = markdown.partition(f"**Safe ({result.counts[SAFE]})**")
    assert safe_part and "| pods | unknown | BLOCKS" in attention and "| configmaps |" in safe_part
    assert "none: nothing to do" not in markdown
    assert f"**Storage pre-flight: {result.worst}, gate blocks (2)" in markdown
    text = report.render_text(result)
    assert text.splitlines()[0].startswith(f"Storage pre-flight: {result.worst}, gate blocks (2)")
    assert f"- {SVM}: unsafe (BLOCKS)" in text and "- pods: unknown (BLOCKS)" in text
    assert len(text.splitlines()) == 1 + len(result.resources) - result.counts[SAFE]
    assert result.to_dict()["counts"] == result.counts
    assert json.loads(json.dumps(result.to_dict()))["resources"][0]["resource"]


def test_what_blocks_comes_before_what_the_judgement_rests_on():
    observation = real_cluster()
    observation.storage_states.pop("pods")
    result = judge(observation, Target(release=PROFILES.get("1.35")), PROFILES, now=NOW)
    result.notes = ["Rehearsed with the target binary on a copy of etcd.", "Judged against release data for 1.35."]
    lines = report.render_markdown(result, title="Storage pre-flight").splitlines()
    first_ten = "\n".join(lines[:10])
    assert "gate blocks (2)" in lines[2] and f"| {SVM} | unsafe" in first_ten and "| pods | unknown | BLOCKS" in first_ten
    assert lines.index("> " + result.notes[0]) > max(i for i, line in enumerate(lines) if "BLOCKS" in line)


def test_resources_filter_and_unknown_name():
    result = judge(real_cluster(), Target(release=PROFILES.get("1.32")), PROFILES, resources=["pods", "gizmos.example.org"], now=NOW)
    assert [r.resource for r in result.resources] == ["pods", "gizmos.example.org"]
    assert [r.verdict for r in result.resources] == [SAFE, UNKNOWN]


def test_verdict_order():
    assert VERDICT_ORDER[0] == SAFE and VERDICT_ORDER[-1] == UNSAFE and len(set(VERDICT_ORDER)) == 5
    assert worst_of([]) == SAFE and worst_of([SAFE, REMOVED, NEEDS_MIGRATION]) == REMOVED


def test_all_endpoints_unreachable_is_never_safe_overall():
    observation = Observation(endpoints=[EndpointObservation(endpoint=EP1, reachable=False, error="connection refused")])
    result = judge(observation, Target(release=PROFILES.get("1.32")), PROFILES, now=NOW)
    assert result.resources == [] and result.worst == UNKNOWN
    assert judge(Observation(), Target(release=PROFILES.get("1.32")), PROFILES, now=NOW).worst == UNKNOWN


def test_record_hash_of_a_version_dropped_from_spec_maps_through_stored_versions():
    observation = _widget_cluster(*SWITCHED, ["v1alpha1", "v1"])
    crd = observation.crds["widgets.example.com"]
    crd.versions = [v for v in crd.versions if v.name != "v1alpha1"]  # dropped from spec, still in storedVersions
    item = one(observation, Target(), "widgets.example.com")
    assert item.unresolved_hashes == [] and item.persisted_versions == ["v1alpha1", "v1"]
    assert item.verdict == NEEDS_MIGRATION


# ---- judge objects, not types: counts of stored objects -------------------------------------------------------

def _count(name, present, undecodable=False, detail=""):
    return {name: ObjectCount(name, present=present, undecodable=undecodable, endpoint=EP1, detail=detail)}


@pytest.mark.parametrize("verdict_case", ["removed", "unknown", "needs_migration"])
def test_nothing_stored_is_safe_whatever_the_types_say(verdict_case):
    if verdict_case == "removed":
        name, last, target = _removed_case()
        stored = PROFILES.get(last).get(name).storage_version
        observation = Observation(endpoints=[endpoint(EP1, last, {name: stored})], storage_states={name: record(name, stored)})
    elif verdict_case == "unknown":
        name, target = "deployments.apps", "1.32"
        observation = Observation(endpoints=[endpoint(EP1, "1.32", {name: "v1"})], storage_states={})
    else:
        name, running, target, old, current = _migratable_case()
        observation = Observation(endpoints=[endpoint(EP1, running, {name: current})], storage_states={name: record(name, old, current)})
    before = one(observation, Target(release=PROFILES.get(target)), name, counts=_count(name, True))
    assert before.verdict == verdict_case and before.objects == "present" and before.blocking
    after = one(observation, Target(release=PROFILES.get(target)), name, counts=_count(name, False))
    assert after.verdict == SAFE and after.reason.startswith("nothing stored") and after.objects == "none" and not after.blocking


def test_undecodable_objects_are_unsafe_with_a_step_that_works():
    name = "resourceclaims.resource.k8s.io"
    observation = Observation(endpoints=[endpoint(EP1, "1.31", {name: "v1alpha3"})], storage_states={name: record(name, "v1alpha3")})
    message = 'no kind "ResourceClaim" is registered for version "resource.k8s.io/v1alpha2"'
    item = one(observation, Target(release=PROFILES.get("1.32")), name, counts=_count(name, True, undecodable=True, detail=message))
    assert item.verdict == UNSAFE and item.objects == "undecodable" and message in item.reason
    assert "etcdctl del" in item.next_step


def test_uncountable_objects_say_how_to_establish_them():
    item = one(_deployments(hashes=[UNKNOWN_HASH]), Target(release=PROFILES.get("1.32")), "deployments.apps",
               counts=_count("deployments.apps", None, detail="HTTP 403"))
    assert item.verdict == UNKNOWN and "could not be established: HTTP 403" in item.reason
    assert "storage_version_audit" in item.next_step and item.objects == "not counted"


def test_custom_resource_with_nothing_stored_still_needs_its_stored_versions_pruned():
    observation = _widget_cluster(*SWITCHED, ["v1"])
    target = Target(release=PROFILES.get("1.32"), crd_manifests=_manifest("v1", storage="v1"))
    item = one(observation, target, "widgets.example.com", counts=_count("widgets.example.com", False))
    assert item.verdict == NEEDS_MIGRATION and "status.storedVersions still lists v1alpha1" in item.reason


# ---- accepting named verdicts ------------------------------------------------------------------------------

def test_accepted_resource_does_not_block_and_keeps_its_verdict():
    observation = Observation(endpoints=[endpoint(EP1, "1.32", {"deployments.apps": "v1", "configmaps": "v1"})], storage_states={})
    accept = {"deployments.apps": "objects re-created by the app after the upgrade (TICKET-1)"}
    result = judge(observation, Target(release=PROFILES.get("1.32")), PROFILES, now=NOW, accept=accept)
    by_name = {r.resource: r for r in result.resources}
    assert by_name["deployments.apps"].verdict == UNKNOWN and by_name["deployments.apps"].accepted.endswith("(TICKET-1)")
    assert not by_name["deployments.apps"].blocking and by_name["configmaps"].blocking
    assert [b["subject"] for b in result.blocking] == ["configmaps"]
    assert result.accepted == [{"subject": "deployments.apps", "verdict": UNKNOWN, "reason": accept["deployments.apps"]}]
    assert "accepted: objects re-created" in report.render_markdown(result)


def test_fail_on_limits_what_blocks():
    observation = Observation(endpoints=[endpoint(EP1, "1.32", {"deployments.apps": "v1"})], storage_states={})
    result = judge(observation, Target(release=PROFILES.get("1.32")), PROFILES, now=NOW, fail_on=("unsafe",))
    assert result.resources[0].verdict == UNKNOWN and result.blocking == []


# ---- stale records, unmapped hashes, specific reasons, rolling upgrades ---------------------------------------

def test_record_of_a_resource_nothing_serves_is_skipped_not_judged():
    name, last, target = _removed_case()
    stored = PROFILES.get(last).get(name).storage_version
    observation = Observation(endpoints=[endpoint(EP1, target, {})], storage_states={name: record(name, stored)})
    result = judge(observation, Target(release=PROFILES.get(target)), PROFILES, now=NOW)
    assert result.resources == [] and result.blocking == []
    assert [s["resource"] for s in result.skipped] == [name] and "state=absent" in result.skipped[0]["next_step"]


def test_events_k8s_io_hash_of_the_served_group_is_flagged():
    name = "events.events.k8s.io"
    wrong = storage_version_hash("events.k8s.io", "v1", "Event")
    observation = Observation(endpoints=[endpoint(EP1, "1.32", {name: "v1"})], storage_states={name: record(name, hashes=[wrong])})
    item = one(observation, Target(release=PROFILES.get("1.32")), name)
    assert item.verdict == UNKNOWN and wrong in item.unresolved_hashes
    assert "it is the hash of events.k8s.io/v1 Event" in item.reason and "stored as core Event" in item.reason


def test_specific_reason_is_shown_even_when_the_record_lists_unknown():
    observation = _widget_cluster(*SWITCHED, [])
    observation.storage_states["widgets.example.com"].persisted_hashes = [UNKNOWN_HASH]
    item = one(observation, Target(crd_manifests=_manifest("v1", storage="v1")), "widgets.example.com")
    assert item.verdict == NEEDS_MIGRATION and "v1alpha1" in item.reason and "lists Unknown" in item.reason


def test_resource_new_in_the_target_is_not_a_disagreement_mid_upgrade():
    name, running, target = None, None, None
    for older, newer in zip(RELEASES, RELEASES[1:]):
        fresh = sorted(set(PROFILES.get(newer).resources) - set(PROFILES.get(older).resources))
        if fresh:
            name, running, target = fresh[0], older, newer
            break
    stored = PROFILES.get(target).get(name).storage_version
    observation = Observation(endpoints=[endpoint(EP1, target, {name: stored}), endpoint(EP2, running, {})],
                              storage_states={name: record(name, stored)})
    assert one(observation, Target(release=PROFILES.get(target)), name).verdict == SAFE


# ---- measured beats remembered: an etcd audit instead of records ---------------------------------------------

def _audit(entries, filtered_out=0):
    return {"resources": entries, "measured_at": "2026-11-21T14:58:00Z", "filtered_out": filtered_out}


def _audited(name, *versions, names=(), unreadable=0):
    """An audit entry as storage_version_audit returns it: ``names`` stored in the first version, one object in each other."""
    group = GroupResource.parse(name).group
    stored = [{"api_version": f"{group}/{v}" if group else v, "kind": PROFILES.kind_of(name), "hash": hash_of(name, v),
               "count": len(names) if i == 0 and names else 1,
               "names": list(names) if i == 0 and names else [f"demo/{v}-0"]} for i, v in enumerate(versions)]
    return {"objects": sum(v["count"] for v in stored), "versions": stored, "hashes": [hash_of(name, v) for v in versions],
            "unreadable": unreadable, "unreadable_reasons": {"garbage after the envelope": unreadable} if unreadable else {},
            "unreadable_names": ["demo/broken"] if unreadable else [], "not_readable_names": list(names)}


def test_audit_replaces_unknown_records_with_measured_versions():
    observation = Observation(endpoints=[endpoint(EP1, "1.32", {"deployments.apps": "v1"})], storage_states={})
    item = one(observation, Target(release=PROFILES.get("1.32")), "deployments.apps",
               audit=_audit({"deployments.apps": _audited("deployments.apps", "v1")}))
    assert item.verdict == SAFE and item.persisted_hashes == [hash_of("deployments.apps", "v1")]
    assert item.measured == "2026-11-21T14:58:00Z" and item.unresolved_hashes == []


def test_audit_names_the_objects_a_target_cannot_read():
    name, running, target, old, current = _migratable_case()
    observation = Observation(endpoints=[endpoint(EP1, running, {name: current})], storage_states={})
    item = one(observation, Target(release=PROFILES.get(target)), name,
               audit=_audit({name: _audited(name, old, current, names=["demo/a", "demo/b"])}))
    assert item.verdict == NEEDS_MIGRATION and "In etcd: demo/a, demo/b." in item.reason
    assert item.objects_named == ["demo/a", "demo/b"]


def test_audit_without_the_resource_means_nothing_stored_unless_it_was_filtered():
    observation = Observation(endpoints=[endpoint(EP1, "1.32", {"deployments.apps": "v1"})], storage_states={})
    complete = one(observation, Target(release=PROFILES.get("1.32")), "deployments.apps", audit=_audit({}))
    assert complete.verdict == SAFE and complete.measured
    filtered = one(observation, Target(release=PROFILES.get("1.32")), "deployments.apps", audit=_audit({}, filtered_out=5))
    assert filtered.verdict == UNKNOWN and "no StorageState record" in filtered.reason and filtered.measured is None


def test_audit_with_unreadable_values_is_unknown_and_says_why():
    observation = Observation(endpoints=[endpoint(EP1, "1.32", {"deployments.apps": "v1"})], storage_states={})
    item = one(observation, Target(release=PROFILES.get("1.32")), "deployments.apps",
               audit=_audit({"deployments.apps": _audited("deployments.apps", "v1", unreadable=1)}))
    assert item.verdict == UNKNOWN and "could not be read in etcd (garbage after the envelope (1)): demo/broken" in item.reason


def test_values_no_apiserver_decodes_get_a_step_that_is_not_a_migration():
    observation = Observation(endpoints=[endpoint(EP1, "1.32", {"deployments.apps": "v1"})], storage_states={})
    entry = dict(_audited("deployments.apps", "v1", unreadable=1), undecodable=1, undecodable_names=["demo/broken"])
    item = one(observation, Target(release=PROFILES.get("1.32")), "deployments.apps", audit=_audit({"deployments.apps": entry}))
    assert item.verdict == UNKNOWN
    assert "no apiserver can decode demo/broken" in item.next_step and "migration cannot rewrite them" in item.next_step
    encrypted = dict(_audited("deployments.apps", "v1", unreadable=1), undecodable=0, undecodable_names=[])
    item = one(observation, Target(release=PROFILES.get("1.32")), "deployments.apps", audit=_audit({"deployments.apps": encrypted}))
    assert "no apiserver can decode" not in item.next_step  # encrypted without the key: a migration or the key helps


def test_a_broken_local_group_a_complete_audit_finds_empty_is_reported_and_blocks_nothing():
    observation = real_cluster()
    for ep in observation.endpoints:
        ep.failed_groups.append("dangling.example.com/v1")
    stored = {"deployments.apps": dict(_audited("deployments.apps", "v1"), group="apps")}
    result = judge(observation, Target(release=PROFILES.get("1.32")), PROFILES, now=NOW, audit=_audit(stored))
    [finding] = [f for f in result.findings if f.subject == "dangling.example.com/v1"]
    assert finding.verdict == SAFE and not finding.blocking and "found no object of group dangling.example.com" in finding.reason
    assert "dangling.example.com/v1" not in [b["subject"] for b in result.blocking]
    # filtered: the audit cannot say the group is empty, so it still blocks
    filtered = judge(observation, Target(release=PROFILES.get("1.32")), PROFILES, now=NOW, audit=_audit(stored, filtered_out=3))
    assert "dangling.example.com/v1" in [b["subject"] for b in filtered.blocking]
    stored["widgets.dangling.example.com"] = dict(_audited("deployments.apps", "v1"), group="dangling.example.com")
    full = judge(observation, Target(release=PROFILES.get("1.32")), PROFILES, now=NOW, audit=_audit(stored))
    assert "dangling.example.com/v1" in [b["subject"] for b in full.blocking]
