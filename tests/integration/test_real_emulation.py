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
