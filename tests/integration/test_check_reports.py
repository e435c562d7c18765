# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""storage_version_check writes its reports on the controller (its action plugin), as the roles use it.

Run through ``ansible-playbook``, since only Ansible runs the action plugin: the reports are written
also when verdicts block (that is when they are read), never in check mode, and a report directory
that cannot be written is one clear failure naming the option. The check is confined to a CRD of the
test's own (``sandbox``), so these tests run against a real cluster too (``KUBEUPGRADE_TEST_KUBECONFIG``).
"""

from __future__ import annotations

import json

import pytest
import real_cluster
from test_playbooks_helpers import explain


@pytest.fixture
def blocked(sandbox):
    """The sandbox CRD stores a widget in v1alpha1, and the target CRD manifest serves only v1: that blocks."""
    sandbox.create_crd(storage="v1alpha1")
    sandbox.create_widget("v1alpha1", "w-0", {"size": 1})
    return {"resources": [sandbox.resource],
            "target_crds": [real_cluster.crd_manifest(sandbox.group, storage="v1", versions=("v1",))]}


def _playbook(tmp_path, cluster, blocked, **options):
    """One check task (fail_on default) and an echo of its result."""
    args = {**cluster.module_args(), "target_release": "1.33", **blocked, **options}
    playbook = tmp_path / "check.yml"
    playbook.write_text(f"""
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - kubeupgrade.storage.storage_version_check: {json.dumps(args)}
      register: check
      failed_when: check.blocking is not defined
    - ansible.builtin.debug:
        msg: "RESULT {{{{ {{'files': check.report_files | default('absent'), 'blocking': check.blocking | length}} | to_json }}}}"
""")
    return playbook


def _echo(result) -> dict:
    line = next(line for line in result.stdout.splitlines() if '"msg": "RESULT ' in line)
    return json.loads(line.split('"msg": "RESULT ', 1)[1].rsplit('"', 1)[0].replace('\\"', '"'))


def test_reports_are_written_on_the_controller_also_when_verdicts_block(cluster, blocked, ansible_playbook, tmp_path):
    reports = tmp_path / "nested" / "reports"
    result = ansible_playbook(_playbook(tmp_path, cluster, blocked, report_dir=str(reports), report_name="preflight-1.33"))
    assert result.rc == 0, explain(result)
    echoed = _echo(result)
    assert echoed["blocking"] == 1, explain(result)
    assert echoed["files"] == [str(reports / "preflight-1.33.json"), str(reports / "preflight-1.33.md")]
    document = json.loads((reports / "preflight-1.33.json").read_text(encoding="utf-8"))
    assert document["target_release"] == "1.33"
    assert document["endpoints"] == cluster.endpoints
    assert [b["subject"] for b in document["blocking"]] == [blocked["resources"][0]]
    assert [r["resource"] for r in document["resources"]] == blocked["resources"]
    assert (reports / "preflight-1.33.md").read_text(encoding="utf-8").startswith("# Storage pre-flight for 1.33")
    assert not list(reports.glob(".kubeupgrade-report-*")), "a temporary file was left behind"


def test_no_report_is_written_in_check_mode(cluster, blocked, ansible_playbook, tmp_path):
    reports = tmp_path / "reports"
    result = ansible_playbook(_playbook(tmp_path, cluster, blocked, report_dir=str(reports)), check=True)
    assert result.rc == 0, explain(result)
    assert _echo(result)["files"] == []
    assert not reports.exists()


def test_a_report_dir_that_cannot_be_written_fails_naming_the_option(cluster, blocked, ansible_playbook, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    result = ansible_playbook(_playbook(tmp_path, cluster, blocked, report_dir=str(blocker / "reports")))
    assert result.rc != 0
    assert f"report_dir {blocker / 'reports'}: cannot write the reports on the controller" in result.stdout, explain(result)
    assert "Traceback" not in result.stdout + result.stderr


def test_a_report_name_with_a_directory_is_refused_before_any_request(cluster, blocked, ansible_playbook, tmp_path):
    result = ansible_playbook(_playbook(tmp_path, cluster, blocked, report_dir=str(tmp_path / "r"), report_name="../escape"))
    assert result.rc != 0
    assert "report_name '../escape' must be a file name without a directory" in result.stdout, explain(result)
    assert not (tmp_path / "escape.json").exists()
    # Before the module runs: with a kubeconfig that does not exist, the report_name is still what is named.
    unconnected = ansible_playbook(_playbook(tmp_path, cluster, blocked, kubeconfig=str(tmp_path / "no-kubeconfig"),
                                             report_dir=str(tmp_path / "r"), report_name="../escape"))
    assert unconnected.rc != 0
    assert "report_name '../escape' must be a file name without a directory" in unconnected.stdout, explain(unconnected)
    assert "no-kubeconfig" not in unconnected.stdout, explain(unconnected)
    # An empty name is refused too, not replaced by the default.
    empty = ansible_playbook(_playbook(tmp_path, cluster, blocked, report_dir=str(tmp_path / "r"), report_name=""))
    assert empty.rc != 0 and "report_name '' must be a file name" in empty.stdout, explain(empty)
