# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The README's "First run on your cluster", command for command, against a fresh simulated cluster.

The commands are read from the README (so the README and this test cannot drift) and run in a
directory that holds an ``inventory.yml`` for the simulator. The inventory is the one thing that
differs from a real cluster: it points at the simulated apiservers and swaps kubeadm for the
simulator's per-host upgrade tasks (the variables the README names for that). The outcome is
judged on the cluster's state through the simulator's admin interface.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from test_demo import readme_block, user_environment
from test_playbooks_helpers import (
    DATA_RESOURCES,
    DEMO_ROLLBACK_TASKS,
    DEMO_UPGRADE_TASKS,
    FAST,
    HASH_V1BETA1,
    LEASECANDIDATES,
    assert_content_unchanged,
    assert_readable_everywhere,
    crd_stored_versions,
    encodings,
    releases,
    snapshot,
    storage_state,
)

REPO = Path(__file__).resolve().parents[2]


def simulator_inventory(plane) -> dict:
    """inventory.yml for the simulator: the README's shape plus what replaces kubeadm and real hosts."""
    hosts = {f"cp{i + 1}": {"kubeupgrade_apiserver_url": url, "kubeupgrade_demo_index": i}
             for i, url in enumerate(plane.endpoints)}
    group_vars = {
        "kubeupgrade_connection": {"kubeconfig": plane.kubeconfig},
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "kubeupgrade_demo": plane.state,
        "kubeupgrade_host_upgrade_tasks": DEMO_UPGRADE_TASKS,
        "kubeupgrade_host_rollback_tasks": DEMO_ROLLBACK_TASKS,
    }
    # Short gates, so that the test does not wait minutes; the migration backend stays the default.
    group_vars.update({k: v for k, v in FAST.items() if k != "kubeupgrade_migrate_backend"})
    return {"kube_control_plane": {"hosts": hosts, "vars": group_vars}}


def readme_setup_environment(env: dict, tmp_path: Path) -> dict:
    """The environment after the README's "Use it from a checkout" lines, run in this checkout."""
    lines = readme_block("## Use it from a checkout")
    dump = tmp_path / "env"
    script = "\n".join(["set -e", f"cd {shlex.quote(str(REPO))}", *lines, f"env -0 > {shlex.quote(str(dump))}"])
    proc = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, f"the README's set-up lines failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    return dict(item.split("=", 1) for item in dump.read_text().split("\0") if "=" in item)


@pytest.fixture
def fresh_cluster(sim):
    """A cluster the collection has never seen: three apiservers on 1.32 with data, no records (conftest's ``sim``)."""
    return sim


@pytest.mark.slow
def test_readme_first_run_commands(fresh_cluster, tmp_path):
    commands = readme_block("## First run on your cluster")
    assert [shlex.split(c)[2:4] for c in commands] == [
        ["inventory.yml", "kubeupgrade.storage.preflight"],
        ["inventory.yml", "kubeupgrade.storage.migrate"],
        ["inventory.yml", "kubeupgrade.storage.preflight"],
        ["inventory.yml", "kubeupgrade.storage.upgrade"],
    ], f"the README's first run changed: {commands}"

    workdir = tmp_path / "operator"
    workdir.mkdir()
    (workdir / "inventory.yml").write_text(json.dumps(simulator_inventory(fresh_cluster), indent=1))
    home = tmp_path / "home"
    home.mkdir()
    env = readme_setup_environment(user_environment(home), tmp_path)
    env.update({"PWD": str(workdir), "ANSIBLE_NOCOLOR": "1"})
    before = snapshot(fresh_cluster)

    outputs = []
    for command in commands:
        proc = subprocess.run(shlex.split(command), cwd=workdir, env=env, capture_output=True, text=True,
                              timeout=900, check=False)
        output = proc.stdout + proc.stderr
        outputs.append(output)
        assert proc.returncode == 0, f"{command}\n{output[-6000:]}"
        assert "Traceback" not in output, output
        # Readable at the default verbosity: no task result printed as a JSON object.
        assert "=> {" not in output, f"{command}: raw JSON in the output\n{output[-4000:]}"

    # 1. A first run cannot vouch for anything written before the records existed.
    assert "Storage pre-flight: unknown, gate passes" in outputs[0], outputs[0][-4000:]  # report only: fail_on []
    # 3. After the migration the strict pre-flight is safe.
    assert "Storage pre-flight: safe, gate passes" in outputs[2], outputs[2][-4000:]
    # 4. Upgraded, migrated, recorded; no object's content changed; readable everywhere.
    assert releases(fresh_cluster) == ["1.33", "1.33", "1.33"]
    assert encodings(fresh_cluster, LEASECANDIDATES) == {"coordination.k8s.io/v1beta1"}
    assert storage_state(fresh_cluster, LEASECANDIDATES)["persistedStorageVersionHashes"] == [HASH_V1BETA1]
    assert crd_stored_versions(fresh_cluster, "widgets.example.com") == ["v1"]
    assert_content_unchanged(before, snapshot(fresh_cluster, DATA_RESOURCES))
    assert_readable_everywhere(fresh_cluster)

    reports = workdir / "kubeupgrade-reports"
    assert (reports / "preflight-1.33.md").is_file()
    assert json.loads((reports / "preflight-1.33.json").read_text())["verdict"] == "safe"
