# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How long a migration's Lease outlives an outage behind the apiserver can be set from the roles and playbooks:
``kubeupgrade_migration_lock_duration``. Every ``storage_migration`` task the collection ships passes
``lock_duration`` from the role variable (``migrate_lock_duration``, ``rolling_upgrade_migrate_lock_duration``) whose
default, set once in the role's defaults, reads the operator variable and is the module's own default.
"""

from __future__ import annotations

import pytest
import yaml
from test_migration_write_variable import REPO, _migration_tasks

from ansible_collections.kubeupgrade.storage.plugins.module_utils._migrate import lease
from ansible_collections.kubeupgrade.storage.plugins.modules import storage_migration

MODULE = "kubeupgrade.storage.storage_migration"
OPERATOR = "kubeupgrade_migration_lock_duration"


def test_every_shipped_storage_migration_task_passes_the_lock_duration():
    found = list(_migration_tasks())
    assert len(found) >= 3, found
    for path, task in found:
        assert task[MODULE].get("lock_duration") in ("{{ migrate_lock_duration }}",
                                                     f"{{{{ {OPERATOR} | default(omit) }}}}"), (path, task["name"])


@pytest.mark.parametrize("role, variable", [("migrate", "migrate_lock_duration"),
                                            ("rolling_upgrade", "rolling_upgrade_migrate_lock_duration")])
def test_the_role_variable_reads_the_operator_variable_and_is_documented(role, variable):
    default = storage_migration.argument_spec()["lock_duration"]["default"]
    assert default == lease.DEFAULT_DURATION
    defaults = yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text(encoding="utf-8"))
    assert defaults[variable] == f"{{{{ {OPERATOR} | default({default}) }}}}"
    spec = yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text(encoding="utf-8"))["argument_specs"]["main"]
    assert spec["options"][variable]["default"] == default and spec["options"][variable]["type"] == "int"
    assert f"O({variable}) C({OPERATOR})" in " ".join(spec["description"])
    assert f"`{variable}`" in (REPO / "roles" / role / "README.md").read_text(encoding="utf-8")


def test_the_rolling_upgrade_passes_its_lock_duration_to_the_final_migration():
    [include] = [task for task in yaml.safe_load((REPO / "roles/rolling_upgrade/tasks/finalise.yml").read_text(encoding="utf-8"))
                 if task.get("ansible.builtin.include_role", {}).get("name") == "kubeupgrade.storage.migrate"]
    assert include["vars"]["migrate_lock_duration"] == "{{ rolling_upgrade_migrate_lock_duration }}"
