# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The playbooks against a simulated control plane, judged by the cluster's state afterwards.

- check mode runs end to end and changes nothing in the store;
- after upgrade.yml (which pre-flights and migrates too), a run of each playbook reports changed=0
  and rewrites no object;
- a failing host upgrade runs the rollback tasks and leaves the cluster readable;
- a pre-flight that finds `unsafe` stops before any host is touched.
"""

from __future__ import annotations

import re

import pytest
import yaml
from test_playbooks_helpers import (
    CRDS,
    DATA_RESOURCES,
    HASH_V1BETA1,
    INVENTORY,
    LEASECANDIDATES,
    PLAYBOOKS,
    STORAGE_STATES,
    assert_content_unchanged,
    assert_readable_everywhere,
    crd_stored_versions,
    encodings,
    explain,
    playbook_vars,
    releases,
    run,
    snapshot,
    storage_state,
)

EVERYTHING = DATA_RESOURCES + [STORAGE_STATES, CRDS]

# The application's next widgets CRD without v1, the version the cluster stores widgets in: no
# migration can make that safe.
WIDGETS_WITHOUT_V1 = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": "example.com",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
        "scope": "Namespaced",
        "versions": [{"name": "v2", "served": True, "storage": True,
                      "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}],
    },
}

# Several playbook runs each: started first (tests/conftest.py) so that parallel workers share them out.
pytestmark = pytest.mark.slow


def test_check_mode_changes_nothing(sim, ansible_playbook, tmp_path):
    """With every gate's default fail_on: check mode migrates nothing, and the check module (not the playbooks)
    reports what a skipped migration earlier in the play would settle instead of stopping on it; a pre-flight of its
    own blocks in check mode exactly where its real run would (no record yet: unknown)."""
    before = snapshot(sim, EVERYTHING)
    for playbook in ("preflight.yml", "migrate.yml", "upgrade.yml"):
        result = run(ansible_playbook, playbook, sim, tmp_path, check=True)
        if playbook == "preflight.yml":
            assert result.rc != 0 and re.search(rf"{re.escape(LEASECANDIDATES)} +unknown +BLOCKS", result.stdout), explain(result)
            assert "would block are reported, not blocking" not in result.stdout, explain(result)
        else:
            assert result.rc == 0, f"{playbook}: {explain(result)}"
        if playbook == "upgrade.yml":  # the gate after the skipped migration: would block, reported instead
            assert "verdict(s) that would block are reported, not blocking" in result.stdout, explain(result)
            assert f"{LEASECANDIDATES} (unknown)" in result.stdout, explain(result)
        assert snapshot(sim, EVERYTHING) == before, f"{playbook} --check changed the store"
        assert releases(sim) == ["1.32", "1.32", "1.32"], f"{playbook} --check upgraded an apiserver"
    real = run(ansible_playbook, "preflight.yml", sim, tmp_path)
    assert real.rc != 0 and re.search(rf"{re.escape(LEASECANDIDATES)} +unknown +BLOCKS", real.stdout), \
        "the dry run blocked where the real run passes"


@pytest.mark.slow(minutes=4)
def test_second_runs_change_nothing(sim, ansible_playbook, tmp_path):
    # upgrade.yml runs the pre-flight and the migration too: after it, every playbook's run is a second run.
    before = snapshot(sim)
    first = run(ansible_playbook, "upgrade.yml", sim, tmp_path, kubeupgrade_preflight_fail_on=[])
    assert first.rc == 0, f"upgrade.yml: {explain(first)}"
    assert first.changed_total > 0, "the first run changed nothing: the test would prove nothing"
    for playbook in ("preflight.yml", "migrate.yml", "upgrade.yml"):
        store = snapshot(sim, EVERYTHING)
        second = run(ansible_playbook, playbook, sim, tmp_path, kubeupgrade_preflight_fail_on=[])
        assert second.rc == 0, f"{playbook} (second run): {explain(second)}"
        assert second.changed_total == 0, f"{playbook} (second run) changed something: {explain(second)}"
        after = snapshot(sim, EVERYTHING)
        for resource in DATA_RESOURCES + [CRDS]:
            assert after[resource] == store[resource], f"{playbook} (second run) rewrote {resource}"
    assert releases(sim) == ["1.33", "1.33", "1.33"]
    assert storage_state(sim, LEASECANDIDATES)["persistedStorageVersionHashes"] == [HASH_V1BETA1]
    assert encodings(sim, LEASECANDIDATES) == {"coordination.k8s.io/v1beta1"}
    assert crd_stored_versions(sim, "widgets.example.com") == ["v1"]
    assert_content_unchanged(before, snapshot(sim))
    assert_readable_everywhere(sim)


def test_failing_host_upgrade_rolls_back(sim, ansible_playbook, tmp_path):
    before = snapshot(sim)
    # cp2 never comes back: 4 waits for it (not the default 10) are enough to show the rollback.
    result = run(ansible_playbook, "upgrade.yml", sim, tmp_path, kubeupgrade_demo_broken_hosts=["cp2"],
                 kubeupgrade_wait_retries=4)
    assert result.rc != 0, explain(result)
    assert "Run the per-host rollback tasks" in result.stdout, explain(result)
    # cp1 was upgraded, cp2 failed and is back on 1.32 and running, cp3 was never touched.
    assert releases(sim) == ["1.33", "1.32", "1.32"]
    assert all(s["running"] and s["ready"] for s in sim.admin.status()), sim.admin.status()
    assert result.recap["cp2"]["rescued"] == 1
    assert "cp3" not in result.recap or result.recap["cp3"].get("changed", 0) == 0
    # Nothing was migrated while the apiservers disagree; every object is readable everywhere.
    assert encodings(sim, LEASECANDIDATES) == {"coordination.k8s.io/v1alpha2"}
    assert_content_unchanged(before, snapshot(sim))
    assert_readable_everywhere(sim)


def test_unsafe_preflight_stops_before_any_host(sim, ansible_playbook, tmp_path):
    before = snapshot(sim)
    result = run(ansible_playbook, "upgrade.yml", sim, tmp_path, kubeupgrade_target_crds=[WIDGETS_WITHOUT_V1])
    assert result.rc != 0, explain(result)
    assert "unsafe" in result.stdout, explain(result)
    assert "Rolling upgrade of the control plane" not in result.stdout, "a host was reached"
    assert releases(sim) == ["1.32", "1.32", "1.32"]
    after = snapshot(sim)
    for resource in DATA_RESOURCES:
        assert after[resource] == before[resource], f"{resource} changed"
    assert (tmp_path / "reports" / "preflight-1.33.md").exists()


def test_a_canary_run_then_a_resumed_run_upgrade_each_host_once_whatever_its_url_spelling(sim, ansible_playbook, tmp_path):
    """A canary run limited to cp1 stops before the final migration (the other apiservers still run 1.32); the run
    that resumes the roll skips cp1 although its URL is written with a trailing slash and its ansible_host is empty
    (the role's own endpoint and the filter's once differed on both, and such a host was upgraded again)."""
    before = snapshot(sim)
    canary = run(ansible_playbook, "upgrade.yml", sim, tmp_path, kubeupgrade_upgrade_hosts="cp1")
    assert canary.rc == 0, explain(canary)
    assert upgraded_hosts(canary) == ["cp1"] and releases(sim) == ["1.33", "1.32", "1.32"]
    assert "Not migrating or writing the final report yet" in canary.stdout, explain(canary)
    assert encodings(sim, LEASECANDIDATES) == {"coordination.k8s.io/v1alpha2"}, "migrated while releases were mixed"

    inventory = yaml.safe_load(INVENTORY.read_text(encoding="utf-8"))
    inventory["kube_control_plane"]["hosts"]["cp1"].update(
        {"ansible_host": "", "kubeupgrade_apiserver_url": "{{ kubeupgrade_demo.endpoints[0] }}/"})
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump(inventory), encoding="utf-8")
    resumed = ansible_playbook(PLAYBOOKS / "upgrade.yml", inventory=path, extra_vars=playbook_vars(sim, tmp_path))
    assert resumed.rc == 0, explain(resumed)
    assert upgraded_hosts(resumed) == ["cp2", "cp3"], explain(resumed)
    assert releases(sim) == ["1.33", "1.33", "1.33"]
    assert encodings(sim, LEASECANDIDATES) == {"coordination.k8s.io/v1beta1"}, "the final migration did not run"
    assert_content_unchanged(before, snapshot(sim))


def upgraded_hosts(result) -> list:
    """The hosts whose per-host upgrade tasks ran, in order (the demo's task that switches an apiserver's release)."""
    chunks = result.stdout.split("Switch the apiserver of this host to the target release] ***")[1:]
    return [chunk.split("changed: [", 1)[1].split("]", 1)[0].split(" ->")[0] for chunk in chunks
            if "changed: [" in chunk.split("TASK [", 1)[0]]
