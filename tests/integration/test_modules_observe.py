# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The observe/remember/judge/agree modules against the simulated three-apiserver control plane.

Modules run in-process (``patch_module_args``) with the plane's kubeconfig; the cluster's state is
checked afterwards through the simulator's admin interface and plain GETs, not only return values.
"""

from __future__ import annotations

import copy

import pytest


@pytest.fixture
def plane(control_plane):
    control_plane.admin.seed("demo")
    return control_plane


def modules():
    from ansible_collections.kubeupgrade.storage.plugins.modules import (
        storage_state,
        storage_version_agreement,
        storage_version_check,
        storage_version_info,
    )

    return storage_version_info, storage_state, storage_version_check, storage_version_agreement


def cluster_client(plane):
    from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.client import ApiClient
    from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.settings import ConnectionSettings

    return ApiClient(ConnectionSettings.from_params({"kubeconfig": plane.kubeconfig}))


def test_info_shows_per_endpoint_hashes_and_disagreement(plane, run):
    info = modules()[0]
    failed, result = run(info, plane.module_args())
    assert not failed and result["agreed"] is True
    plane.admin.set_release(2, "1.33")
    failed, result = run(info, plane.module_args())
    assert not failed and result["agreed"] is False
    lc = result["resources"]["leasecandidates.coordination.k8s.io"]
    assert lc["agreed"] is False
    assert lc["storage_versions"][plane.endpoints[0]] == "v1alpha2" and lc["storage_versions"][plane.endpoints[2]] == "v1beta1"
    assert [e["release"] for e in result["endpoints"]] == ["1.32", "1.32", "1.33"]


def test_storage_state_creates_unknown_then_is_idempotent_and_check_mode_writes_nothing(plane, run):
    state = modules()[1]
    before = plane.admin.stored_objects("storagestates.migration.k8s.io") if _has_states(plane) else []
    failed, result = run(state, plane.module_args(resources=["pods", "deployments.apps"]), check_mode=True)
    assert not failed and result["changed"] is True
    assert {r["action"] for r in result["records"]} == {"created"}
    assert (plane.admin.stored_objects("storagestates.migration.k8s.io") if _has_states(plane) else []) == before
    failed, result = run(state, plane.module_args(resources=["pods", "deployments.apps"]))
    assert not failed and result["changed"] is True
    obj = cluster_client(plane).get("/apis/migration.k8s.io/v1alpha1/storagestates/deployments.apps")
    assert obj["status"]["persistedStorageVersionHashes"] == ["Unknown", "8aSe+NMegvE="]
    failed, result = run(state, plane.module_args(resources=["pods", "deployments.apps"]))
    assert not failed and result["changed"] is False
    assert {r["action"] for r in result["records"]} == {"unchanged"}


def _has_states(plane):
    try:
        plane.admin.stored_objects("storagestates.migration.k8s.io")
    except Exception:
        return False
    return True


def test_check_verdicts(plane, run):
    info, state, check, _agreement = modules()
    from ansible_collections.kubeupgrade.storage.plugins.module_utils._remember import storage_state_io

    run(state, plane.module_args())  # records: Unknown + current for every resource
    client = cluster_client(plane)
    failed, observed = run(info, plane.module_args(resources=["pods", "podtemplates", "widgets.example.com"]))
    for name in ("pods", "podtemplates", "widgets.example.com"):
        current = next(iter(observed["resources"][name]["hashes"].values()))
        storage_state_io.mark_migrated(client, name, current)
    crd = client.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com")
    assert crd["status"]["storedVersions"] == ["v1alpha1", "v1"], crd["status"]
    only_v1 = copy.deepcopy(crd)
    only_v1["spec"]["versions"] = [v for v in only_v1["spec"]["versions"] if v["name"] == "v1"]
    only_v1.pop("status", None)
    failed, result = run(check, plane.module_args(target_release="1.33", target_crds=[only_v1],
                                                  resources=["pods", "configmaps", "widgets.example.com"]))
    verdict = {r["resource"]: r["verdict"] for r in result["resources"]}
    assert failed and result["resources"] and "pre-flight blocks" in result["msg"]
    assert verdict["pods"] == "safe"
    assert verdict["configmaps"] == "unknown"  # persisted still has Unknown
    assert verdict["widgets.example.com"] == "needs_migration", [r["reason"] for r in result["resources"]]
    assert result["counts"]["safe"] >= 1 and result["report_markdown"].startswith("# Storage pre-flight for 1.33")

    gone = {"releases": {"1.99": {"replace": True, "resources": {"pods": {"kind": "Pod", "storage": "v1"}}, "removed": ["podtemplates"]}}}
    failed, result = run(check, plane.module_args(target_release="1.99", profiles=gone, resources=["podtemplates", "pods"],
                                                  count_objects=False))
    assert failed and {r["resource"]: r["verdict"] for r in result["resources"]} == {"podtemplates": "removed", "pods": "safe"}
    # Judged by objects: the demo data has no PodTemplate, so nothing stored is safe.
    failed, result = run(check, plane.module_args(target_release="1.99", profiles=gone, resources=["podtemplates", "pods"]))
    podtemplates = next(r for r in result["resources"] if r["resource"] == "podtemplates")
    assert not failed and podtemplates["verdict"] == "safe" and podtemplates["objects"] == "none", podtemplates

    no_storage = copy.deepcopy(only_v1)
    no_storage["spec"]["versions"] = [dict(v, name="v2") for v in no_storage["spec"]["versions"]]
    failed, result = run(check, plane.module_args(target_release="1.32", target_crds=[no_storage], resources=["widgets.example.com"],
                                                  fail_on=["unsafe"]))
    assert failed and result["verdict"] == "unsafe"

    failed, result = run(check, plane.module_args(target_release="1.32", resources=["pods"], fail_on=["unsafe"]))
    assert not failed and result["verdict"] == "safe"


def test_check_refreshes_the_records_as_storage_state_would_then_judges_from_them(plane, run):
    _info, _state, check, _agreement = modules()
    wanted = ["pods", "deployments.apps"]
    args = plane.module_args(resources=wanted, target_release="1.33", fail_on=[], refresh_records=True)
    failed, result = run(check, args, check_mode=True)
    assert not failed and result["changed"] is True
    assert {r["action"] for r in result["records_refreshed"]["records"]} == {"created"}
    assert not _has_states(plane) or plane.admin.stored_objects("storagestates.migration.k8s.io") == []

    failed, result = run(check, args)
    assert not failed and result["changed"] is True and result["agreed"] is True
    assert sorted(r["name"] for r in result["records_refreshed"]["records"]) == sorted(wanted)
    obj = cluster_client(plane).get("/apis/migration.k8s.io/v1alpha1/storagestates/deployments.apps")
    assert obj["status"]["persistedStorageVersionHashes"] == ["Unknown", "8aSe+NMegvE="]
    # Judged from the records it just wrote: Unknown with objects stored, exactly as after storage_state.
    verdicts = {r["resource"]: r for r in result["resources"]}
    assert verdicts["deployments.apps"]["verdict"] == "unknown"
    assert verdicts["deployments.apps"]["persisted_hashes"] == ["Unknown", "8aSe+NMegvE="]
    assert "record for deployments.apps lists Unknown" in verdicts["deployments.apps"]["reason"]

    failed, again = run(check, args)
    assert not failed and again["changed"] is False
    assert {r["action"] for r in again["records_refreshed"]["records"]} == {"unchanged"}

    failed, plain = run(check, plane.module_args(resources=wanted, target_release="1.33", fail_on=[]))
    assert not failed and "records_refreshed" not in plain and plain["changed"] is False


def test_unreachable_endpoint_is_reported_and_judged_unknown(plane, run):
    info, state, check, _agreement = modules()
    from ansible_collections.kubeupgrade.storage.plugins.module_utils._remember import storage_state_io

    run(state, plane.module_args(resources=["pods"]))
    storage_state_io.mark_migrated(cluster_client(plane), "pods", "xPOwRZ+Yhw8=")
    plane.admin.stop(1)
    failed, result = run(info, plane.module_args(resources=["pods"]))
    assert not failed and result["unreachable_endpoints"] == [plane.endpoints[1]]
    assert plane.endpoints[1] in result["endpoints"][1]["error"]
    failed, result = run(check, plane.module_args(target_release="1.33", resources=["pods"]))
    assert failed and result["verdict"] == "unknown" and plane.endpoints[1] in result["msg"]
    failed, result = run(check, plane.module_args(target_release="1.33", resources=["pods"], fail_on=["unsafe", "removed"]))
    assert not failed and result["verdict"] == "unknown"


def test_a_partial_observation_writes_no_record(plane, run):
    """One apiserver down: neither storage_state nor the check's refresh writes a record from the others."""
    _info, state, check, _agreement = modules()
    run(state, plane.module_args(resources=["pods"]))
    before = plane.admin.stored_objects("storagestates.migration.k8s.io")
    plane.admin.stop(1)
    failed, result = run(state, plane.module_args(resources=["pods", "deployments.apps"]))
    assert failed and "No StorageState record was written" in result["msg"] and plane.endpoints[1] in result["msg"]
    assert result["unreachable_endpoints"] == [plane.endpoints[1]] and result["records"] == []
    failed, result = run(check, plane.module_args(target_release="1.33", resources=["pods", "deployments.apps"],
                                                  refresh_records=True))
    assert failed and "records_refreshed" not in result and result["changed"] is False
    assert plane.admin.stored_objects("storagestates.migration.k8s.io") == before


def test_agreement_waits_and_times_out_while_they_disagree(plane, run):
    agreement = modules()[3]
    failed, result = run(agreement, plane.module_args(polls=2, interval=0.1, timeout=5))
    assert not failed and result["agreed"] is True and result["polls_observed"] == 2
    plane.admin.set_release(0, "1.33")
    # a timeout of several polls even on a loaded machine (a first poll took over 1 s there under load 18)
    failed, result = run(agreement, plane.module_args(polls=2, interval=0.2, timeout=4, resources=["leasecandidates.coordination.k8s.io"]))
    assert failed and result["agreed"] is False and result["polls_observed"] >= 2
    assert "leasecandidates.coordination.k8s.io" in result["msg"] and "v1alpha2" in result["msg"]
    assert result["disagreeing"][0]["resource"] == "leasecandidates.coordination.k8s.io"


def test_bad_inputs_give_one_clear_error(plane, run, tmp_path):
    check = modules()[2]
    failed, result = run(check, plane.module_args(target_release="1.99"))
    assert failed and "1.99" in result["msg"] and "1.37" in result["msg"] and "profiles" in result["msg"]
    failed, result = run(check, plane.module_args(target_release="1.33", target_crds=[str(tmp_path / "missing.yaml")]))
    assert failed and "missing.yaml" in result["msg"] and "does not exist" in result["msg"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: CustomResourceDefinition\nspec: [\n")
    failed, result = run(check, plane.module_args(target_release="1.33", target_crds=[str(bad)]))
    assert failed and "bad.yaml" in result["msg"]
    failed, result = run(check, plane.module_args(target_release="1.33", context="nope"))
    assert failed and "nope" in result["msg"]
