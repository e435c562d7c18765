# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cause first: a playbook that stops on a module's failure says, on its first error line, what failed and what
to do - never ansible-core's "A 'failed_when' expression evaluated to 'True'." with the cause further down, nor a
suppressed-exception line. Through ansible-playbook against the simulated control plane.
"""

from __future__ import annotations

import pytest
import yaml
from test_playbooks_helpers import explain, run


def first_error(result) -> str:
    errors = [line for line in result.stdout.splitlines() if line.startswith("[ERROR]")]
    assert errors, explain(result)
    return errors[0]


FIRST_LINE = 200  # characters of the [ERROR] line, ansible-core's "Task failed: Module failed:" included


def assert_cause_first(result, needle, step):
    """The first error line names the cause (``needle``) and the step to take (``step``), in at most FIRST_LINE."""
    assert result.rc != 0, explain(result)
    line = first_error(result)
    print(f"\nfirst error line ({len(line)} characters): {line}")
    assert needle in line and step in line, line
    assert len(line) <= FIRST_LINE, f"{len(line)} characters: {line}"
    assert "failed_when" not in result.stdout and "suppressed_exception" not in result.stdout, explain(result)


@pytest.mark.parametrize("playbook", ["preflight.yml", "migrate.yml"])
def test_a_release_no_profile_knows_is_the_first_line(sim, ansible_playbook, tmp_path, playbook):
    result = run(ansible_playbook, playbook, sim, tmp_path, kubeupgrade_target_release="1.99")
    assert_cause_first(result, "1.99", "give a release from 1.25 to")


def test_an_agreement_that_does_not_come_is_the_first_line(sim, ansible_playbook, tmp_path):
    sim.admin.set_release(0, "1.33")  # LeaseCandidates: v1beta1 on apiserver 0, v1alpha2 on the others
    result = run(ansible_playbook, "migrate.yml", sim, tmp_path)
    assert_cause_first(result, "clustertrustbundles.certificates.k8s.io and 1 more", "finish or roll back the disagreeing")


def test_rejected_credentials_are_the_first_line(sim, ansible_playbook, tmp_path):
    """A token the apiservers do not accept (HTTP 401). The first line says the credentials
    were not accepted and what to fix, not that an apiserver is to be brought back."""
    config = yaml.safe_load(open(sim.kubeconfig, encoding="utf-8"))
    for user in config["users"]:
        user["user"]["token"] = "not-a-token-of-this-cluster"
    rejected = tmp_path / "rejected.kubeconfig"
    rejected.write_text(yaml.safe_dump(config), encoding="utf-8")
    result = run(ansible_playbook, "preflight.yml", sim, tmp_path, kubeupgrade_connection={"kubeconfig": str(rejected)})
    assert_cause_first(result, "HTTP 401", "fix the credentials")


def test_an_apiserver_that_does_not_come_back_is_the_first_line(sim, ansible_playbook, tmp_path):
    """The host's upgrade tasks leave its apiserver stopped: the wait after the host fails on the expectation."""
    result = run(ansible_playbook, "upgrade.yml", sim, tmp_path, kubeupgrade_demo_broken_hosts=["cp2"],
                 kubeupgrade_wait_retries=2)
    assert result.rc != 0, explain(result)
    assert "failed_when" not in result.stdout and "suppressed_exception" not in result.stdout, explain(result)
