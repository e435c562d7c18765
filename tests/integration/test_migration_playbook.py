# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""migrate.yml as an operator runs it: stale records skipped, progress shown, a summary table, any $HOME."""

from __future__ import annotations

import json

from test_playbooks_helpers import (
    INVENTORY,
    PLAYBOOKS,
    assert_content_unchanged,
    explain,
    playbook_vars,
    snapshot,
    storage_state,
)

from ansible_collections.kubeupgrade.storage.plugins.module_utils._migrate.plan import STALE_REASON

STALE = "flunders.wardle.example.com"  # a record left from an earlier release: no apiserver serves it


def _stale_record(plane):
    plane.admin.put_raw("storagestates.migration.k8s.io", None, STALE, "migration.k8s.io/v1alpha1", {
        "metadata": {"name": STALE},
        "spec": {"resource": {"group": "wardle.example.com", "resource": "flunders"}},
        "status": {"currentStorageVersionHash": "abc", "persistedStorageVersionHashes": ["old", "abc"]}})


def test_migrate_playbook_skips_stale_records_shows_progress_and_a_summary_with_any_home(sim, ansible_playbook,
                                                                                         tmp_path):
    ansible_playbook(PLAYBOOKS / "migrate.yml", inventory=INVENTORY, extra_vars=playbook_vars(sim, tmp_path))
    _stale_record(sim)
    for i in range(40):
        sim.admin.put_raw("configmaps", "demo", f"old-{i:03d}", "v1", {"data": {"i": str(i)}})
    before = snapshot(sim)
    home = tmp_path / "elsewhere"  # $HOME not the account's home: no async job files are looked for there
    home.mkdir()
    result = ansible_playbook(PLAYBOOKS / "migrate.yml", inventory=INVENTORY,
                              extra_vars=playbook_vars(sim, tmp_path, kubeupgrade_migrate_resources=[]),
                              env={"HOME": str(home)})
    assert result.rc == 0, explain(result)
    assert STALE in result.stdout and "not served by any apiserver" in result.stdout
    # The summary: nothing was due, the stale record is named with its reason, the rest counted by reason.
    assert "Records not at the current storage version:" in result.stdout
    assert f"  skipped {STALE}: not served by any apiserver" in result.stdout
    assert "  nothing migrated" in result.stdout
    assert "resources: pre-flight verdict is safe (listed in skipped_resources)" in result.stdout
    assert_content_unchanged(before, snapshot(sim))
    assert storage_state(sim, STALE)["persistedStorageVersionHashes"] == ["old", "abc"]  # left alone, not [current]
    assert STALE_REASON.split(":", maxsplit=1)[0] in result.stdout


def test_progress_lines_come_from_the_action_plugin(sim, ansible_playbook, tmp_path):
    for i in range(60):
        sim.admin.put_raw("configmaps", "demo", f"old-{i:03d}", "v1", {"data": {"i": str(i)}})
    playbook = tmp_path / "migrate-one.yml"
    endpoints = json.dumps(sim.endpoints)
    playbook.write_text(f"""
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - kubeupgrade.storage.storage_migration:
        kubeconfig: {sim.kubeconfig}
        endpoints: {endpoints}
        resources: [configmaps, secrets]
        chunk_size: 10
      register: migration
    - ansible.builtin.assert:
        that:
          - migration.summary | length >= 3
          - migration.migrations | map(attribute='status') | unique == ['succeeded']
""")
    home = tmp_path / "home"
    home.mkdir()
    result = ansible_playbook(playbook, env={"HOME": str(home)})
    assert result.rc == 0, explain(result)
    assert "storage_migration: configmaps: succeeded via client" in result.stdout, explain(result)
    assert "storage_migration: secrets: succeeded via client" in result.stdout


def test_the_migrate_role_with_no_apiserver_refuses_instead_of_migrating_through_the_kubeconfig_server(
        sim, ansible_playbook, tmp_path):
    """No inventory group and no endpoints: nothing is read or written (not even through the kubeconfig's server)."""
    sim.admin.put_raw("configmaps", "demo", "old-0", "v1", {"data": {"i": "0"}})
    before = sum(entry["count"] for entry in sim.admin._call("audit"))
    playbook = tmp_path / "migrate-nowhere.yml"
    playbook.write_text(f"""
- hosts: localhost
  connection: local
  gather_facts: false
  module_defaults:
    group/kubeupgrade.storage.storage: {{kubeconfig: {sim.kubeconfig}}}
  tasks:
    - ansible.builtin.include_role:
        name: kubeupgrade.storage.migrate
      vars:
        migrate_control_plane_group: no_such_group
        migrate_target_release: "1.33"
""")
    result = ansible_playbook(playbook)
    assert result.rc != 0, explain(result)
    assert "migrate_endpoints is empty" in result.stdout and "no_such_group" in result.stdout, explain(result)
    assert "Wait until every apiserver" not in result.stdout, explain(result)
    assert sum(entry["count"] for entry in sim.admin._call("audit")) == before, "a request reached the cluster"
