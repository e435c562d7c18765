# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The client-side migrator's write can be set from the roles and playbooks: ``kubeupgrade_migration_write``.

Every ``storage_migration`` task the collection ships passes ``write``, from the role variable (``migrate_write``,
``rolling_upgrade_migrate_write``) whose default, set once in the role's defaults, reads the operator variable; the
argument specs document it with the module's choices and default.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ansible_collections.kubeupgrade.storage.plugins.module_utils._rewrite import migrator

REPO = Path(__file__).resolve().parents[2]
MODULE = "kubeupgrade.storage.storage_migration"
OPERATOR = "kubeupgrade_migration_write"


def _tasks(node):
    """Every task of a play, tasks file or block, blocks and plays descended into."""
    if isinstance(node, list):
        for item in node:
            yield from _tasks(item)
    elif isinstance(node, dict):
        if any(key in node for key in ("tasks", "block", "rescue", "always", "pre_tasks", "post_tasks")):
            for key in ("tasks", "block", "rescue", "always", "pre_tasks", "post_tasks"):
                yield from _tasks(node.get(key) or [])
        else:
            yield node


def _migration_tasks():
    files = sorted(REPO.glob("roles/*/tasks/*.yml")) + sorted(REPO.glob("playbooks/*.yml"))
    for path in files:
        for task in _tasks(yaml.safe_load(path.read_text(encoding="utf-8")) or []):
            if MODULE in task:
                yield path.relative_to(REPO), task


def test_every_shipped_storage_migration_task_passes_the_write():
    found = list(_migration_tasks())
    assert len(found) >= 3, found  # the migrate role's two, upgrade.yml's objects from the audit
    for path, task in found:
        write = task[MODULE].get("write")
        assert write in ('{{ migrate_write }}', "{{ kubeupgrade_migration_write | default(omit) }}"), (path, task["name"])


@pytest.mark.parametrize("role, variable", [("migrate", "migrate_write"), ("rolling_upgrade", "rolling_upgrade_migrate_write")])
def test_the_role_variable_reads_the_operator_variable_and_is_documented(role, variable):
    defaults = yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text(encoding="utf-8"))
    assert defaults[variable] == f"{{{{ {OPERATOR} | default('{migrator.WRITE_PUT}') }}}}"
    spec = yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text(encoding="utf-8"))["argument_specs"]["main"]
    option = spec["options"][variable]
    assert option["default"] == migrator.WRITE_PUT and option["choices"] == list(migrator.WRITES)
    assert f"O({variable}) C({OPERATOR})" in " ".join(spec["description"])
    assert f"`{variable}`" in (REPO / "roles" / role / "README.md").read_text(encoding="utf-8")


def test_the_rolling_upgrade_passes_its_write_to_the_final_migration():
    [include] = [task for task in yaml.safe_load((REPO / "roles/rolling_upgrade/tasks/finalise.yml").read_text(encoding="utf-8"))
                 if task.get("ansible.builtin.include_role", {}).get("name") == "kubeupgrade.storage.migrate"]
    assert include["vars"]["migrate_write"] == "{{ rolling_upgrade_migrate_write }}"
