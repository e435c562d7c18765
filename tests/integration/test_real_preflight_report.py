# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A pre-flight whose rehearsal target does not start still judges and writes its reports: the start failure is a
measurement (the check blocks on it), not a failure of the play before the check (which left no report)."""

from __future__ import annotations

import pytest
from real_binaries import TODAY_ETCD, TODAY_TO, explain, report, run, seed_135
from realcp.plane import binary

pytestmark = pytest.mark.slow


def test_a_target_that_does_not_start_still_writes_the_report(real_plane_factory, ansible_playbook, tmp_path):
    plane = real_plane_factory([TODAY_TO], etcd_version=TODAY_ETCD, etcd_tls=True, encryption=True)
    seed_135(plane)
    # 1.36 has no networking.k8s.io/v1alpha1: the target exits at start ("group version ... not registered")
    rehearsal = {"apiserver_binary": binary(TODAY_TO), "apiserver_manifest": "", "work_dir": str(tmp_path),
                 "etcd_binary": plane.etcd.binary, "runtime_config": "networking.k8s.io/v1alpha1=true"}
    result = run(ansible_playbook, "preflight.yml", plane, tmp_path, kubeupgrade_target_release=TODAY_TO,
                 kubeupgrade_etcd=plane.etcd_settings, kubeupgrade_etcd_become=False, kubeupgrade_rehearsal=rehearsal)
    assert result.rc != 0, explain(result)
    found = report(tmp_path, f"preflight-{TODAY_TO}")
    start = [b for b in found["blocking"] if b["subject"] == "rehearsal: v1.36.2 start"]
    assert start and "exited" in start[0]["reason"] and "networking.k8s.io/v1alpha1" in start[0]["reason"], found["blocking"]
    assert (tmp_path / "reports" / f"preflight-{TODAY_TO}.md").is_file()
    errors = [line for line in result.stdout.splitlines() if line.startswith("[ERROR]")]
    assert errors and "rehearsal: v1.36.2 start" in errors[0], errors
