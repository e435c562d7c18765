# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Compatibility versions (KEP-4330) seen on a real kube-apiserver 1.36.2 started with ``--emulated-version=1.35``:
step 1 of the two-step upgrade. Its binary is 1.36 but it serves and stores as 1.35, so no gate may count it as at
1.36 (a one-step roll re-run after step 1 skipped every host as "already on 1.36" and wrote a final report)."""

from __future__ import annotations

import pytest
from real_binaries import TODAY_ETCD, TODAY_FROM, TODAY_TO, explain
from test_real_scenarios import run_module

pytestmark = pytest.mark.slow

# The 1.36 gates the test plane sets that 1.35 does not know or has only as alpha: a binary emulating 1.35 refuses
# them (MutatingAdmissionPolicy is beta in 1.35 and needs --emulation-forward-compatible there).
NOT_EMULATED = {"MutatingAdmissionPolicy": None, "DRAResourcePoolStatus": None, "GenericWorkload": None}


def test_an_apiserver_emulating_the_previous_release_is_seen_and_not_counted_as_upgraded(
        real_plane_factory, ansible_playbook, tmp_path):
    plane = real_plane_factory([TODAY_TO, TODAY_TO], etcd_version=TODAY_ETCD, feature_gates={"*": NOT_EMULATED},
                               extra_flags={1: [f"--emulated-version={TODAY_FROM}"]})
    result, info = run_module(ansible_playbook, tmp_path, plane, "info", "storage_version_info",
                              {"include": [], "expect_ready": True, "expect_release": TODAY_TO})
    seen = [(ep["release"], ep["emulated_release"], ep["min_compatibility_release"]) for ep in info["endpoints"]]
    assert seen == [("1.36", "1.36", "1.35"), ("1.36", "1.35", "1.34")], explain(result)
    assert info["as_expected"] is False and "release 1.36 emulating 1.35" in info["expectation_msg"], info
    result, check = run_module(ansible_playbook, tmp_path, plane, "check", "storage_version_check", {
        "target_release": TODAY_TO, "fail_on": [], "upgrade_order": plane.endpoints, "upgrading": plane.endpoints[1]})
    roll = check["roll"]
    assert roll["done"] is False and "emulating 1.35" in roll["msg"], (roll, explain(result))


def test_step_one_of_the_two_step_upgrade_is_judged_and_rolled_at_the_emulated_release(
        real_plane_factory, ansible_playbook, tmp_path):
    """The gate of step 1 (target 1.36 emulating 1.35): the target stores VolumeAttributesClasses as v1 (1.35 pins
    v1beta1, 1.36 does not), which the 1.35 apiservers read; a host is done at binary 1.36 emulating 1.35, and that host
    is not done for step 2 (1.36 at its own release)."""
    plane = real_plane_factory([TODAY_FROM, TODAY_FROM], etcd_version=TODAY_ETCD, feature_gates={TODAY_TO: NOT_EMULATED},
                               extra_flags={TODAY_TO: [f"--emulated-version={TODAY_FROM}"]})
    plane.create("/apis/storage.k8s.io/v1/volumeattributesclasses",
                 {"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttributesClass", "metadata": {"name": "gold"},
                  "driverName": "csi.example.com", "parameters": {"iops": "3000"}})
    step1 = {"target_release": TODAY_TO, "target_emulated_release": TODAY_FROM, "fail_on": [],
             "upgrade_order": plane.endpoints}

    result, check = run_module(ansible_playbook, tmp_path, plane, "before", "storage_version_check",
                               {**step1, "upgrading": plane.endpoints[0]})
    assert check["target_emulation"] == {"release": TODAY_TO, "emulated_release": TODAY_FROM,
                                         "min_compatibility_release": "1.34"}, check
    row = next(r for r in check["resources"] if r["resource"] == "volumeattributesclasses.storage.k8s.io")
    assert row["target_storage_version"] == "v1" and row["verdict"] != "unsafe", row  # 1.35 reads v1
    assert check["roll"]["done"] is False and f"{TODAY_TO} emulating {TODAY_FROM}" in check["roll"]["msg"], check["roll"]

    plane.restart(0, release=TODAY_TO)
    assert plane.get("/version", index=0)["emulationMinor"] == TODAY_FROM.split(".")[1]
    result, check = run_module(ansible_playbook, tmp_path, plane, "next", "storage_version_check",
                               {**step1, "upgrading": plane.endpoints[1]})
    assert check["roll"]["pending_before"] == [] and check["roll"]["stop"] is False, (check["roll"], explain(result))
    result, check = run_module(ansible_playbook, tmp_path, plane, "again", "storage_version_check",
                               {**step1, "upgrading": plane.endpoints[0]})
    assert check["roll"]["done"] is True, check["roll"]
    result, check = run_module(ansible_playbook, tmp_path, plane, "step2", "storage_version_check", {
        "target_release": TODAY_TO, "fail_on": [], "upgrade_order": plane.endpoints, "upgrading": plane.endpoints[0]})
    assert check["roll"]["done"] is False and "emulating" in check["roll"]["msg"], check["roll"]


def test_the_rehearsal_runs_the_target_at_an_emulated_version(real_plane_factory, tmp_path):
    """Step 1 of the two-step upgrade rehearsed: the 1.36 binary at --emulated-version=1.35 on a copy of a 1.35 store."""
    from real_binaries import rehearsal_flags, seed_135
    from realcp.plane import binary

    from ansible_collections.kubeupgrade.storage.plugins.module_utils._rehearse import runner

    plane = real_plane_factory([TODAY_FROM], etcd_version=TODAY_ETCD)
    seed_135(plane)
    gates = ",".join(gate for gate in rehearsal_flags(TODAY_FROM)["feature_gates"].split(",")
                     if gate.split("=")[0] not in NOT_EMULATED)
    params = {"apiserver_binary": binary(TODAY_TO), "apiserver_manifest": "", "etcd_endpoints": plane.etcd_settings["endpoints"],
              "etcd_binary": plane.etcd.binary, "work_dir": str(tmp_path), "pages_per_second": 0, "names_limit": -1,
              "runtime_config": "api/all=true", "feature_gates": gates,
              "emulated_version": TODAY_FROM}
    result = runner.rehearse(runner.plan(params))
    assert result["started"] and result["flags"]["emulated-version"] == TODAY_FROM, result.get("start_failure")
    assert result["verdict"] == "safe" and result["blocking"] == [], result["report_text"]


# (binary, emulated release, beta gates the emulated release has): every persisted resource each serves is compared.
# Alpha gates are refused at an emulated version; --emulation-forward-compatible serves the newer beta versions of
# what the emulated release serves, which the rule must not store.
EMULATIONS = [
    ("1.36", "1.33", "ClusterTrustBundle"),
    ("1.36", "1.34", "ClusterTrustBundle MutatingAdmissionPolicy"),
    ("1.36", "1.35", "StorageVersionMigrator ClusterTrustBundle PodCertificateRequest MutatingAdmissionPolicy"),
    ("1.33", "1.31", ""),
    ("1.33", "1.32", ""),
]


def _discovered_hashes(plane) -> dict:
    """kubectl-style resource name -> the storage version hashes its group/versions report."""
    group_versions = ["/api/v1"] + [f"/apis/{gv['groupVersion']}" for g in plane.get("/apis")["groups"] for gv in g["versions"]]
    found = {}
    for path in group_versions:
        group = path.split("/")[2] if path.startswith("/apis/") else ""
        for resource in plane.get(path)["resources"]:
            if "/" not in resource["name"] and resource.get("storageVersionHash"):
                name = f"{resource['name']}.{group}" if group else resource["name"]
                found.setdefault(name, set()).add(resource["storageVersionHash"])
    return found


@pytest.mark.parametrize("binary, emulated, gates", EMULATIONS, ids=[f"{b}-at-{e}" for b, e, _g in EMULATIONS])
def test_the_predicted_storage_version_at_an_emulated_release_is_what_the_binary_stores(
        real_plane_factory, binary, emulated, gates):
    """KEP-4330's storage rule and the pins that bypass it (emulation.profile_at), against what the real binary's
    discovery reports for every persisted resource it serves at --emulated-version."""
    from realcp.plane import release_flags

    from ansible_collections.kubeupgrade.storage.plugins.module_utils import emulation, profiles

    own = release_flags(binary)
    feature_gates = {**{gate: None for gate in own["feature_gates"]}, **{gate: "true" for gate in gates.split()}}
    runtime_config = {**{api: None for api in own["runtime_config"]}, "api/all": "true"}
    plane = real_plane_factory([binary], etcd_version=TODAY_ETCD, feature_gates={"*": feature_gates},
                               runtime_config={"*": runtime_config},
                               extra_flags={"*": [f"--emulated-version={emulated}", "--emulation-forward-compatible=true"]})
    version = plane.get("/version")
    assert (version["emulationMinor"], version["minCompatibilityMinor"]) == (
        emulated.split(".")[1], emulation.min_compatibility(binary, emulated).split(".")[1]), version
    predicted = emulation.profile_at(profiles.load_profiles(), binary, emulated)
    discovered = _discovered_hashes(plane)
    compared = {name: entry for name, entry in predicted.resources.items() if name in discovered}
    wrong = {name: (entry.storage_version, sorted(discovered[name])) for name, entry in compared.items()
             if discovered[name] != {entry.storage_hash()}}
    assert wrong == {}, wrong
    assert len(compared) >= 50, sorted(compared)
