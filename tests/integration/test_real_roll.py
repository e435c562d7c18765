# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rolling upgrade on real kube-apiservers (tests/realcp), judged by what they answer afterwards.

- the one-minor roll operators make (1.32 -> 1.33) at the playbook's defaults, with and without etcd
  settings, and with a new API version enabled on the target;
- 1.28 -> 1.32 on a clean cluster: a real older apiserver next to a newer one lists the newer
  release's group/versions (it answers 404 for them) and stops listing its own alpha ones;
- an unreachable or failing host stops the roll: no later host is touched.
"""

from __future__ import annotations

import time

import pytest
import yaml
from real_binaries import (
    PATHS_128,
    REMOVED_IN_132,
    UNREADABLE_ON_132,
    delete_all,
    explain,
    report,
    run,
    seed_128_unreadable_on_132,
    seed_132,
    unreadable,
    versions,
    write_inventory,
)

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("with_etcd", [False, True], ids=["records", "etcd-audit"])
def test_one_minor_roll_at_defaults_rolls_every_host_and_everything_reads_after(real_plane_factory, ansible_playbook,
                                                                                tmp_path, with_etcd):
    plane = real_plane_factory(["1.32", "1.32"], etcd_tls=with_etcd, encryption=with_etcd)
    seed_132(plane)
    extra = {"kubeupgrade_etcd": plane.etcd_settings, "kubeupgrade_etcd_become": False} if with_etcd else {}
    result = run(ansible_playbook, "upgrade.yml", plane, tmp_path, kubeupgrade_target_release="1.33", **extra)
    assert result.rc == 0, explain(result)
    assert versions(plane) == ["v1.33.5", "v1.33.5"]
    final = report(tmp_path, "final-1.33")
    assert final["blocking"] == [] and final["verdict"] == "safe", final
    for index in range(2):
        assert unreadable(plane, index) == []
    if with_etcd:  # the way back was made before the first host: a snapshot etcd's own tool reads
        assert (tmp_path / "etcd-before-upgrade.db").stat().st_size > 0 and "etcdutl snapshot restore" in result.stdout


def test_one_minor_roll_with_a_new_api_version_enabled_on_the_target(real_plane_factory, ansible_playbook, tmp_path):
    """The 1.32 apiserver lists resource.k8s.io/v1beta2 once the 1.33 one registered it, and answers 404 for it."""
    plane = real_plane_factory(["1.32", "1.32"], runtime_config={"1.33": {"resource.k8s.io/v1beta2": "true"}})
    seed_132(plane)
    result = run(ansible_playbook, "upgrade.yml", plane, tmp_path, kubeupgrade_target_release="1.33")
    assert result.rc == 0, explain(result)
    assert versions(plane) == ["v1.33.5", "v1.33.5"]
    assert plane.request("GET", "/apis/resource.k8s.io/v1beta2", index=1)[0] == 200
    for index in range(2):
        assert unreadable(plane, index) == []


@pytest.mark.parametrize("with_etcd", [False, True], ids=["records", "etcd-audit"])
def test_skip_roll_128_to_132_on_a_clean_cluster_completes(real_plane_factory, ansible_playbook, tmp_path, with_etcd):
    plane = real_plane_factory(["1.28", "1.28"])
    plane.create("/api/v1/namespaces", {"metadata": {"name": "app"}})
    plane.create("/api/v1/namespaces/app/configmaps", {"metadata": {"name": "settings"}, "data": {"k": "v"}})
    extra = {"kubeupgrade_etcd": plane.etcd_settings, "kubeupgrade_etcd_become": False} if with_etcd else {}
    result = run(ansible_playbook, "upgrade.yml", plane, tmp_path, kubeupgrade_target_release="1.32", **extra)
    assert result.rc == 0, explain(result)
    assert versions(plane) == ["v1.32.6", "v1.32.6"]
    for index in range(2):
        assert unreadable(plane, index) == []


def test_a_failing_host_stops_the_roll_and_is_rolled_back(real_plane_factory, ansible_playbook, tmp_path):
    plane = real_plane_factory(["1.32", "1.32", "1.32"])
    result = run(ansible_playbook, "upgrade.yml", plane, tmp_path, kubeupgrade_target_release="1.33",
                 kubeupgrade_realcp_broken_hosts=["cp2"], kubeupgrade_wait_retries=3)
    assert result.rc != 0, explain(result)
    assert "Run the per-host rollback tasks" in result.stdout, explain(result)
    # cp1 rolled, cp2 failed and is back on 1.32, cp3 untouched
    assert versions(plane) == ["v1.33.5", "v1.32.6", "v1.32.6"]
    assert plane.apiserver(2)["pid"] and "cp3" not in result.recap or result.recap["cp3"].get("changed", 0) == 0


def test_an_unreachable_host_stops_the_roll_at_the_next_host(real_plane_factory, ansible_playbook, tmp_path):
    """With serial: 1 Ansible drops an unreachable host and runs the next batch, and rescue does not run for it:
    the check before cp2 must find, from the apiservers, that cp1 is not on the target."""
    plane = real_plane_factory(["1.32", "1.32"])
    unreachable = {"cp1": {"ansible_connection": "ssh", "ansible_host": "127.0.0.1", "ansible_port": 9,
                           "ansible_ssh_common_args": "-o ConnectTimeout=3 -o BatchMode=yes"}}
    inventory = write_inventory(plane, tmp_path, host_vars=unreachable)
    result = run(ansible_playbook, "upgrade.yml", plane, tmp_path, inventory=inventory, kubeupgrade_target_release="1.33")
    assert result.rc != 0, explain(result)
    assert result.recap["cp1"]["unreachable"] == 1, explain(result)
    assert "not touching " + plane.endpoints[1] in result.stdout, explain(result)
    assert versions(plane) == ["v1.32.6", "v1.32.6"], "a host was upgraded past an unreachable one"


@pytest.mark.parametrize("with_etcd", [False, True], ids=["records", "etcd-audit"])
def test_a_roll_to_a_release_that_cannot_read_what_is_stored_stops_before_any_host(
        real_plane_factory, ansible_playbook, tmp_path, with_etcd):
    """1.28 -> 1.32 with DRA v1alpha2 objects (some encrypted at rest) and resources 1.32 no longer has."""
    plane = real_plane_factory(["1.28", "1.28"], etcd_tls=with_etcd, encryption=True)
    seed_128_unreadable_on_132(plane)
    extra = {"kubeupgrade_etcd": plane.etcd_settings, "kubeupgrade_etcd_become": False} if with_etcd else {}
    result = run(ansible_playbook, "upgrade.yml", plane, tmp_path, kubeupgrade_target_release="1.32", **extra)
    assert result.rc != 0, explain(result)
    assert versions(plane) == ["v1.28.0", "v1.28.0"], "an apiserver was touched"
    assert "Rolling upgrade of the control plane" not in result.stdout, explain(result)
    found = report(tmp_path, "preflight-1.32")
    blocking = {b["subject"]: b["verdict"] for b in found["blocking"]}
    assert blocking == {**{name: "unsafe" for name in UNREADABLE_ON_132}, **{name: "removed" for name in REMOVED_IN_132}}, \
        found["blocking"]
    if with_etcd:  # measured: the report names every undecodable object, and only those
        named = {r["resource"]: r["objects_named"] for r in found["resources"] if r["resource"] in UNREADABLE_ON_132}
        assert named == {"resourceclaims.resource.k8s.io": ["dra/claim"],
                         "resourceclaimtemplates.resource.k8s.io": ["dra/template"]}, named


def test_an_apiservice_without_a_backend_blocks_fast_until_accepted_by_name_then_the_roll_completes(
        real_plane_factory, ansible_playbook, tmp_path):
    """A local APIService that no apiserver serves: every apiserver lists it and answers 404. It blocks (its
    resources cannot be judged) without waiting minutes for an agreement that cannot come; accepted, it does not."""
    plane = real_plane_factory(["1.32", "1.32"])
    plane.create("/apis/apiregistration.k8s.io/v1/apiservices", {
        "metadata": {"name": "v1.dangling.example.com"},
        "spec": {"group": "dangling.example.com", "version": "v1", "groupPriorityMinimum": 1000, "versionPriority": 15}})
    started = time.monotonic()
    blocked = run(ansible_playbook, "upgrade.yml", plane, tmp_path, kubeupgrade_target_release="1.33")
    assert blocked.rc != 0, explain(blocked)
    assert time.monotonic() - started < 240, "the gate waited for an agreement a failed discovery cannot give"
    assert "dangling.example.com/v1" in blocked.stdout, explain(blocked)
    assert versions(plane) == ["v1.32.6", "v1.32.6"], "a host was touched"
    accepted = run(ansible_playbook, "upgrade.yml", plane, tmp_path, kubeupgrade_target_release="1.33",
                   kubeupgrade_accept={"dangling.example.com/v1": "an APIService without a backend; stores nothing (CHG-9)"})
    assert accepted.rc == 0, explain(accepted)
    assert versions(plane) == ["v1.33.5", "v1.33.5"]
    for index in range(2):
        assert unreadable(plane, index) == []


def test_mixed_releases_behind_one_url_are_found_by_the_identity_leases(real_plane_factory, ansible_playbook, tmp_path):
    """An inventory that reaches two apiservers through one URL (a load balancer) observes one: the cluster's identity
    Leases list two, so the pre-flight blocks instead of judging whichever apiserver answered."""
    plane = real_plane_factory(["1.32", "1.33"])
    inventory = tmp_path / "lb.yml"
    inventory.write_text(yaml.safe_dump({"kube_control_plane": {
        "hosts": {"lb": {"kubeupgrade_apiserver_url": plane.endpoints[0]}},
        "vars": {"ansible_connection": "local", "kubeupgrade_connection": {"kubeconfig": str(plane.kubeconfig)}}}}))
    result = run(ansible_playbook, "preflight.yml", plane, tmp_path, inventory=inventory, kubeupgrade_target_release="1.33")
    assert result.rc != 0, explain(result)
    found = report(tmp_path, "preflight-1.33")
    unobserved = [b for b in found["blocking"] if b["subject"] == "(apiservers not observed)"]
    assert len(unobserved) == 1 and "lists 2 apiservers" in unobserved[0]["reason"], found["blocking"]


def test_following_the_next_steps_verbatim_clears_the_block_and_the_same_play_then_rolls(
        real_plane_factory, ansible_playbook, tmp_path):
    plane = real_plane_factory(["1.28", "1.28"], encryption=True)
    seed_128_unreadable_on_132(plane)
    blocked = run(ansible_playbook, "upgrade.yml", plane, tmp_path, kubeupgrade_target_release="1.32")
    assert blocked.rc != 0, explain(blocked)
    steps = {b["subject"]: b["next_step"] for b in report(tmp_path, "preflight-1.32")["blocking"]}
    assert set(steps) == UNREADABLE_ON_132 | REMOVED_IN_132, steps
    for name, step in steps.items():
        # each step says to export and delete the objects while the running release still reads them
        assert f"kubectl get {name} -A -o yaml" in step and "delete" in step, step
        delete_all(plane, PATHS_128[name])
    rolled = run(ansible_playbook, "upgrade.yml", plane, tmp_path, kubeupgrade_target_release="1.32")
    assert rolled.rc == 0, explain(rolled)
    assert versions(plane) == ["v1.32.6", "v1.32.6"]
    for index in range(2):
        assert unreadable(plane, index) == []
