# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The client-side migrator's writes in flight per resource can be set from the roles and playbooks:
``kubeupgrade_migrate_concurrency``. Every ``storage_migration`` task the collection ships passes ``concurrency`` from
the migrate role's ``migrate_concurrency`` (whose default, set once in the role's defaults, reads the operator variable
and is the module's own default) or, outside the role, from the operator variable itself.
"""

from __future__ import annotations

import yaml
from test_migration_write_variable import REPO, _migration_tasks

from ansible_collections.kubeupgrade.storage.plugins.modules import storage_migration

MODULE = "kubeupgrade.storage.storage_migration"
OPERATOR = "kubeupgrade_migrate_concurrency"


def test_every_shipped_storage_migration_task_passes_the_concurrency():
    found = list(_migration_tasks())
    assert len(found) >= 4, found  # the migrate role's three, upgrade.yml's objects from the audit
    for path, task in found:
        assert task[MODULE].get("concurrency") in ("{{ migrate_concurrency }}", f"{{{{ {OPERATOR} | default(omit) }}}}"), \
            (path, task["name"])


def test_the_role_variable_reads_the_operator_variable_with_the_modules_default_and_is_documented():
    default = storage_migration.argument_spec()["concurrency"]["default"]
    role = REPO / "roles" / "migrate"
    defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text(encoding="utf-8"))
    assert defaults["migrate_concurrency"] == f"{{{{ {OPERATOR} | default({default}) }}}}"
    spec = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text(encoding="utf-8"))["argument_specs"]["main"]
    option = spec["options"]["migrate_concurrency"]
    assert option["default"] == default and option["type"] == "int"
    assert f"O(migrate_concurrency) C({OPERATOR})" in " ".join(spec["description"])
    assert f"`migrate_concurrency` | `{default}`" in (role / "README.md").read_text(encoding="utf-8")
    assert OPERATOR in (REPO / "playbooks" / "migrate.yml").read_text(encoding="utf-8")
