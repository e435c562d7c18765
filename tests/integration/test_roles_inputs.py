# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rolling_upgrade role refuses bad inputs with one line naming its role variable, before anything is read.

Through ``ansible-playbook``, the role included directly (not through upgrade.yml, whose first play checks
the group): an empty target release, a control-plane group that names no host, and a play whose host is not
in that group each fail on the role's first task, naming the role variable - never the module's option, never
Python's attribute error of ``groups[...]``. No apiserver is needed: nothing is read.
"""

from __future__ import annotations

import pytest
from test_playbooks_helpers import explain

INVENTORY = """
kube_control_plane:
  hosts:
    cp1: {kubeupgrade_apiserver_url: "https://127.0.0.1:9"}
others:
  hosts:
    other1: {}
all:
  vars: {ansible_connection: local}
"""


def _run(ansible_playbook, tmp_path, hosts, **variables):
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(INVENTORY)
    playbook = tmp_path / "roll.yml"
    lines = "".join(f"        {name}: {value!r}\n" for name, value in variables.items())
    playbook.write_text(f"""
- hosts: {hosts}
  gather_facts: false
  serial: 1
  tasks:
    - ansible.builtin.include_role:
        name: kubeupgrade.storage.rolling_upgrade
      vars:
{lines}""")
    return ansible_playbook(playbook, inventory=inventory)


@pytest.mark.parametrize("hosts, variables, needle", [
    ("cp1", {"rolling_upgrade_target_release": ""},
     'rolling_upgrade_target_release is empty: set it to the release to upgrade to, quoted ("1.33").'),
    ("cp1", {"rolling_upgrade_target_release": "1.33", "rolling_upgrade_control_plane_group": "no_such_group"},
     "rolling_upgrade_control_plane_group: the inventory group no_such_group has no hosts."),
    ("cp1", {"rolling_upgrade_target_release": "1.33", "rolling_upgrade_control_plane_group": ""},
     "rolling_upgrade_control_plane_group: the inventory group (empty) has no hosts."),
    ("other1", {"rolling_upgrade_target_release": "1.33"},
     "rolling_upgrade_control_plane_group: other1 is not in the inventory group kube_control_plane."),
], ids=["empty-release", "group-without-hosts", "group-empty-name", "host-outside-the-group"])
def test_rolling_upgrade_refuses_bad_inputs_naming_the_role_variable(ansible_playbook, tmp_path, hosts, variables, needle):
    result = _run(ansible_playbook, tmp_path, hosts, **variables)
    assert result.rc != 0, explain(result)
    assert needle in result.stdout, explain(result)
    errors = [line for line in result.stdout.splitlines() if line.startswith("[ERROR]")]
    assert len(errors) == 1, errors  # one clear line, on the role's first task
    assert "Require a target release and this host in the control-plane group" in result.stdout, explain(result)
    # Nothing was read: the check before the host never ran, and no Python error text reached the operator.
    assert "Check every apiserver" not in result.stdout, explain(result)
    for wrong in ("has no attribute", "Traceback", "give target_release", "Nothing to check against"):
        assert wrong not in result.stdout + result.stderr, explain(result)
