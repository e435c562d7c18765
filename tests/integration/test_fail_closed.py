# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The upgrade gate fails closed, and every verdict is about what is actually stored.

Against the simulator, through ``ansible-playbook`` the way an operator runs it, asserting on the
cluster's state (which release each apiserver runs, which objects are stored) and on the reports:

- 1.31 -> 1.32 with a broken aggregated APIService, ResourceClaims stored as v1alpha2 (which
  neither 1.31 nor 1.32 can read) and PodSchedulingContexts (which 1.32 no longer has):
  ``upgrade.yml`` with its defaults stops before any apiserver is upgraded; the report names the
  two resources, and the broken group is reported as not stored in this etcd, nothing else;
- following the report's next steps (delete those objects) makes the same play pass;
- a resource whose record lists Unknown, with objects, blocks by default and passes once accepted
  by name, with the reason in the report.
"""

from __future__ import annotations

import json
import ssl
import urllib.request

import pytest
import real_cluster
from apisim.harness import ControlPlane
from test_playbooks_helpers import INVENTORY, PLAYBOOKS, TLS, explain, get, releases, run

RESOURCECLAIMS = "resourceclaims.resource.k8s.io"
PODSCHEDULINGCONTEXTS = "podschedulingcontexts.resource.k8s.io"
STORAGE_STATES = "storagestates.migration.k8s.io"


def request(plane, method, path, body=None):
    """One request through the first apiserver with the admin token; returns (status, body)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(plane.endpoints[0] + path, data=data, method=method, headers={
        "Authorization": f"Bearer {plane.token}", "Content-Type": "application/json"})
    context = ssl.create_default_context(cafile=plane.ca_file) if plane.endpoints[0].startswith("https") else None
    try:
        with urllib.request.urlopen(req, timeout=10, context=context) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def report(tmp_path, name):
    return json.loads((tmp_path / "reports" / f"{name}.json").read_text(encoding="utf-8"))


@pytest.fixture
def plane_130(tmp_path):
    """Three apiservers on 1.30 with a namespace; stopped at teardown."""
    if real_cluster.real_kubeconfig():
        pytest.skip(real_cluster.NEEDS_ADMIN)
    plane = ControlPlane(tmp_path / "plane", apiservers=3, releases="1.30", tls=TLS)
    plane.start()
    try:
        status, body = request(plane, "POST", "/api/v1/namespaces", {"metadata": {"name": "demo"}})
        assert status == 201, body
        yield plane
    finally:
        plane.stop()


def _switch_all(plane, release):
    for index in range(len(plane.endpoints)):
        plane.admin.set_release(index, release)


def test_gate_blocks_on_stored_objects_only_and_clears_when_they_are_deleted(plane_130, ansible_playbook, tmp_path):
    plane = plane_130
    # On 1.30: a ResourceClaim (stored as v1alpha2), and every record settled by a migration.
    status, body = request(plane, "POST", "/apis/resource.k8s.io/v1alpha2/namespaces/demo/resourceclaims",
                           {"metadata": {"name": "gpu-claim"}, "spec": {"resourceClassName": "gpu"}})
    assert status == 201, body
    migrated = run(ansible_playbook, "migrate.yml", plane, tmp_path, kubeupgrade_target_release="")
    assert migrated.rc == 0, explain(migrated)
    # The cluster was moved to 1.31 without this collection; 1.31 cannot read the v1alpha2 claim.
    _switch_all(plane, "1.31")
    status, body = request(plane, "POST", "/apis/resource.k8s.io/v1alpha3/namespaces/demo/podschedulingcontexts",
                           {"metadata": {"name": "gpu-pod"}, "spec": {"selectedNode": "node-1"}})
    assert status == 201, body
    plane.admin.add_apiservice("metrics.k8s.io", "v1beta1")

    blocked = run(ansible_playbook, "upgrade.yml", plane, tmp_path, kubeupgrade_target_release="1.32")
    assert blocked.rc != 0, explain(blocked)
    assert releases(plane) == ["1.31", "1.31", "1.31"], "an apiserver was upgraded"
    assert "Rolling upgrade of the control plane" not in blocked.stdout, "a host was reached"
    found = report(tmp_path, "preflight-1.32")
    verdicts = {r["resource"]: r for r in found["resources"]}
    assert verdicts[RESOURCECLAIMS]["verdict"] == "unsafe" and verdicts[RESOURCECLAIMS]["objects"] == "undecodable"
    assert "etcdctl del" in verdicts[RESOURCECLAIMS]["next_step"]
    assert verdicts[PODSCHEDULINGCONTEXTS]["verdict"] == "removed" and verdicts[PODSCHEDULINGCONTEXTS]["objects"] == "present"
    assert sorted(b["subject"] for b in found["blocking"]) == [PODSCHEDULINGCONTEXTS, RESOURCECLAIMS]
    assert [n["group_version"] for n in found["not_stored"]] == ["metrics.k8s.io/v1beta1"]
    assert found["findings"] == [], "the broken aggregated API spread to a finding"
    assert not [r["resource"] for r in found["resources"] if r["verdict"] == "unknown"], "unknown spread to other resources"

    # The next steps: delete the objects (the claim only through etcd: no apiserver can read it).
    status, body = request(plane, "DELETE", "/apis/resource.k8s.io/v1alpha3/namespaces/demo/podschedulingcontexts/gpu-pod")
    assert status == 200, body
    status, _body = request(plane, "GET", "/apis/resource.k8s.io/v1alpha3/namespaces/demo/resourceclaims")
    assert status == 500, "1.31 should fail to list a v1alpha2 claim"
    assert plane.admin.delete_raw(RESOURCECLAIMS, "demo", "gpu-claim") is True

    passed = run(ansible_playbook, "upgrade.yml", plane, tmp_path, kubeupgrade_target_release="1.32")
    assert passed.rc == 0, explain(passed)
    assert releases(plane) == ["1.32", "1.32", "1.32"]
    gate = report(tmp_path, "gate-1.32")
    assert gate["blocking"] == [] and {r["verdict"] for r in gate["resources"]} == {"safe"}
    for endpoint in plane.endpoints:
        status, body = get(plane, endpoint, "/apis/resource.k8s.io/v1beta1/namespaces/demo/resourceclaims")
        assert status == 200 and body["items"] == [], body


def _forget(plane, resource):
    """Lose the StorageState record of ``resource``: the next refresh recreates it as [Unknown, current]."""
    assert plane.admin.delete_raw(STORAGE_STATES, None, resource) is True


def test_unknown_with_objects_blocks_until_accepted_by_name(plane_130, ansible_playbook, tmp_path):
    plane = plane_130
    for i in range(2):
        status, body = request(plane, "POST", "/api/v1/namespaces/demo/configmaps", {"metadata": {"name": f"cm-{i}"}})
        assert status == 201, body
    migrated = run(ansible_playbook, "migrate.yml", plane, tmp_path, kubeupgrade_target_release="")
    assert migrated.rc == 0, explain(migrated)
    _forget(plane, "configmaps")

    blocked = run(ansible_playbook, "preflight.yml", plane, tmp_path, kubeupgrade_target_release="1.30")
    assert blocked.rc != 0, explain(blocked)
    found = report(tmp_path, "preflight-1.30")
    assert [(b["subject"], b["verdict"]) for b in found["blocking"]] == [("configmaps", "unknown")], found["blocking"]
    assert "lists Unknown" in found["blocking"][0]["reason"]

    reason = "configmaps are re-created by the platform team after the upgrade (CHG-42)"
    accepted = run(ansible_playbook, "preflight.yml", plane, tmp_path, kubeupgrade_target_release="1.30",
                   kubeupgrade_accept={"configmaps": reason})
    assert accepted.rc == 0, explain(accepted)
    found = report(tmp_path, "preflight-1.30")
    assert found["blocking"] == [] and found["accepted"] == [{"subject": "configmaps", "verdict": "unknown", "reason": reason}]
    assert f"accepted: {reason}" in (tmp_path / "reports" / "preflight-1.30.md").read_text(encoding="utf-8")

    typo = run(ansible_playbook, "preflight.yml", plane, tmp_path, kubeupgrade_target_release="1.30",
               kubeupgrade_accept={"configmap": reason})
    # A misspelt accept lets nothing through (configmaps still blocks) and is named with a warning, not an error:
    # one run's accepts go to every gate in it.
    assert typo.rc != 0 and "did you mean configmaps" in typo.stdout + typo.stderr, explain(typo)
    assert [(b["subject"], b["verdict"]) for b in report(tmp_path, "preflight-1.30")["blocking"]] == [("configmaps", "unknown")]


@pytest.mark.parametrize("playbook", ["preflight.yml", "migrate.yml", "upgrade.yml"])
def test_a_control_plane_group_that_matches_no_host_fails_naming_the_variable(ansible_playbook, tmp_path, playbook):
    """A play over no host does nothing and would succeed: every playbook refuses it before anything is read."""
    result = ansible_playbook(PLAYBOOKS / playbook, inventory=INVENTORY,
                              extra_vars={"kubeupgrade_control_plane_group": "control_plane", "kubeupgrade_target_release": "1.33"})
    assert result.rc != 0, explain(result)
    assert "The inventory group control_plane (kubeupgrade_control_plane_group) has no hosts" in result.stdout, explain(result)


def test_upgrade_hosts_that_match_no_host_fail_naming_the_variable(ansible_playbook, tmp_path):
    result = ansible_playbook(PLAYBOOKS / "upgrade.yml", inventory=INVENTORY,
                              extra_vars={"kubeupgrade_upgrade_hosts": "cp9", "kubeupgrade_target_release": "1.33"})
    assert result.rc != 0, explain(result)
    assert "kubeupgrade_upgrade_hosts (cp9) matches no host" in result.stdout, explain(result)


def test_a_two_step_upgrade_with_the_default_kubeadm_tasks_is_refused_before_anything_is_read(ansible_playbook, tmp_path):
    """kubeadm cannot emulate a release (kubernetes/kubeadm#3263): its default per-host tasks would run step 1 as a
    one-step upgrade, so the playbook refuses before any apiserver is asked."""
    result = ansible_playbook(PLAYBOOKS / "upgrade.yml", inventory=INVENTORY, extra_vars={
        "kubeupgrade_target_release": "1.36", "kubeupgrade_upgrade_strategy": "two_step"})
    assert result.rc != 0, explain(result)
    assert "kubeupgrade_upgrade_strategy two_step (or kubeupgrade_target_emulated_release) needs per-host tasks" in result.stdout, explain(result)
    assert "kubeupgrade.storage.storage_version" not in result.stdout, explain(result)


@pytest.mark.parametrize("playbook", ["migrate.yml", "upgrade.yml"])
@pytest.mark.parametrize("value", [0, "four"])
def test_a_migrate_concurrency_below_one_is_refused_naming_the_variable_before_anything_is_read(
        ansible_playbook, tmp_path, playbook, value):
    result = ansible_playbook(PLAYBOOKS / playbook, inventory=INVENTORY, extra_vars={
        "kubeupgrade_target_release": "1.33", "kubeupgrade_migrate_concurrency": value})
    assert result.rc != 0, explain(result)
    assert f"kubeupgrade_migrate_concurrency ({value}) must be a whole number of at least 1" in result.stdout, explain(result)
    assert len([line for line in result.stdout.splitlines() if line.startswith("[ERROR]")]) == 1, explain(result)
    assert "kubeupgrade.storage.storage_" not in result.stdout and "Traceback" not in result.stdout + result.stderr, explain(result)


def test_three_hosts_behind_one_url_are_a_load_balancer_error_before_anything_is_read(ansible_playbook, tmp_path):
    result = ansible_playbook(PLAYBOOKS / "upgrade.yml", inventory=INVENTORY, extra_vars={
        "kubeupgrade_target_release": "1.33", "kubeupgrade_apiserver_url": "https://lb.example:6443"})
    assert result.rc != 0, explain(result)
    assert "hosts cp1, cp2, cp3 share the apiserver URL https://lb.example:6443" in result.stdout, explain(result)
    assert "Rolling upgrade of the control plane" not in result.stdout
