# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The two-step upgrade of compatibility versions (KEP-4330) with upgrade.yml on real binaries: 2 x kube-apiserver
1.35.3 -> 1.36.2 on etcd 3.5.30 (TLS, encryption at rest, the audit, snapshot and rehearsal), objects in every version
1.35 stores. Step 1 puts the 1.36.2 binaries at --emulated-version=1.35 (with --emulation-forward-compatible, as the
beta MutatingAdmissionPolicy API of 1.35 needs), step 2 moves them to 1.36; then the way back, in KEP-4330's order:
the emulation rollback (the same binaries back at 1.35's APIs), after which the binary rollback to 1.35.3 is open and
is taken with the same playbook. One plane for the whole story: each step starts where the last one left the cluster,
as an operator's would (a plane and step 1 cost minutes of this suite's time)."""

from __future__ import annotations

import pytest
from real_binaries import (
    TODAY_ETCD,
    TODAY_FROM,
    TODAY_TO,
    etcd_extra,
    explain,
    report,
    run,
    seed_135,
    seeded_objects_read,
    versions,
)
from test_real_scenarios import discovery_hash

from ansible_collections.kubeupgrade.storage.plugins.module_utils import hashing

pytestmark = pytest.mark.slow

# 1.36's test gates that 1.35 does not have: refused by a 1.36 binary emulating 1.35, so left off in both steps.
NEWER_THAN_135 = {"DRAResourcePoolStatus": None, "GenericWorkload": None}
TWO_STEP = {"kubeupgrade_upgrade_strategy": "two_step"}


def _plane(real_plane_factory):
    plane = real_plane_factory([TODAY_FROM, TODAY_FROM], etcd_version=TODAY_ETCD, etcd_tls=True, encryption=True,
                               feature_gates={TODAY_TO: NEWER_THAN_135})
    seed_135(plane)
    return plane


def _extra(plane, tmp_path, target, step=None):
    """The etcd settings and the rehearsal's flags as the test plane runs ``target`` in ``step`` of a two-step roll."""
    extra = etcd_extra(plane, tmp_path, target)
    rehearsal = extra["kubeupgrade_rehearsal"]
    rehearsal["feature_gates"] = ",".join(gate for gate in rehearsal["feature_gates"].split(",")
                                          if gate.split("=")[0] not in NEWER_THAN_135)
    if step == 1:
        rehearsal["emulation_forward_compatible"] = True
    return {**extra, **(TWO_STEP if step else {})}


def _emulating(plane) -> list:
    return [plane.get("/version", index=i).get("emulationMinor") for i in range(len(plane.endpoints))]


def _step1(ansible_playbook, plane, tmp_path):
    result = run(ansible_playbook, "upgrade.yml", plane, tmp_path, kubeupgrade_target_release=TODAY_TO,
                 **_extra(plane, tmp_path, TODAY_TO, step=1))
    assert result.rc == 0, explain(result)
    assert "step 1 of 2" in result.stdout, explain(result)
    assert versions(plane) == ["v1.36.2", "v1.36.2"] and _emulating(plane) == ["35", "35"], explain(result)
    step1 = report(tmp_path, "step1-1.36")
    assert step1["verdict"] == "safe" and step1["blocking"] == [], step1
    # The promise of step 1, judged after it: the binary rollback to 1.35 is open.
    assert "The binary rollback to 1.35 is open" in result.stdout, explain(result)
    assert report(tmp_path, "rollback-1.35")["blocking"] == []
    assert seeded_objects_read(plane) == {0: [], 1: []}
    # What step 1 writes, as predicted: VolumeAttributesClasses v1 (1.35 pins v1beta1; 1.35 reads v1).
    assert {discovery_hash(plane, "storage.k8s.io/v1", "volumeattributesclasses", index=i) for i in (0, 1)} == {
        hashing.storage_version_hash("storage.k8s.io", "v1", "VolumeAttributesClass")}


@pytest.mark.slow(minutes=19)
def test_the_two_step_upgrade_then_the_emulation_rollback_then_the_binary_rollback_every_object_read(
        real_plane_factory, ansible_playbook, tmp_path):
    plane = _plane(real_plane_factory)
    _step1(ansible_playbook, plane, tmp_path)

    result = run(ansible_playbook, "upgrade.yml", plane, tmp_path, kubeupgrade_target_release=TODAY_TO,
                 **_extra(plane, tmp_path, TODAY_TO, step=2))
    assert result.rc == 0, explain(result)
    assert "step 2 of 2" in result.stdout and "The binary rollback to 1.35 is " in result.stdout, \
        [line for line in result.stdout.splitlines() if "rollback" in line.lower() or "way back" in line.lower()]
    assert versions(plane) == ["v1.36.2", "v1.36.2"] and _emulating(plane) == ["36", "36"], explain(result)
    final = report(tmp_path, "final-1.36")
    assert final["verdict"] == "safe" and final["blocking"] == [], final
    assert seeded_objects_read(plane) == {0: [], 1: []}

    result = run(ansible_playbook, "upgrade.yml", plane, tmp_path, kubeupgrade_target_release=TODAY_TO,
                 **_extra(plane, tmp_path, TODAY_TO, step=2))
    assert result.rc == 0 and "the two-step upgrade is done" in result.stdout, explain(result)

    # The emulation rollback (KEP-4330's story 2): the same binaries back at 1.35's APIs, host by host.
    result = run(ansible_playbook, "upgrade.yml", plane, tmp_path, kubeupgrade_target_release=TODAY_TO,
                 kubeupgrade_target_emulated_release=TODAY_FROM, **_extra(plane, tmp_path, TODAY_TO, step=1))
    assert result.rc == 0, explain(result)
    assert versions(plane) == ["v1.36.2", "v1.36.2"] and _emulating(plane) == ["35", "35"], explain(result)
    assert report(tmp_path, "step1-1.36")["verdict"] == "safe"
    assert seeded_objects_read(plane) == {0: [], 1: []}

    # Back where step 1 left the cluster: the binary rollback to 1.35.3 is open, and taken with the same playbook.
    result = run(ansible_playbook, "upgrade.yml", plane, tmp_path, kubeupgrade_target_release=TODAY_FROM,
                 **_extra(plane, tmp_path, TODAY_FROM))
    assert result.rc == 0, explain(result)
    assert versions(plane) == ["v1.35.3", "v1.35.3"], explain(result)
    final = report(tmp_path, "final-1.35")
    assert final["verdict"] == "safe" and final["blocking"] == [], final
    assert seeded_objects_read(plane) == {0: [], 1: []}
