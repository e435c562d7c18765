# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``playbooks/upgrade.yml`` with the collection's default kubeadm per-host tasks, on a real kubeadm control plane.

One node of this machine (tests/integration/kubeadm_node.py: containerd, the kubelet, ``kubeadm init`` 1.35.3 with
encryption at rest and the beta APIs an operator enables, objects seeded in every version 1.35 stores), reached
through the local connection as root (``become`` through su: this machine has no sudo), with the target kubeadm and
kubelet first on ``PATH``, as the role expects them installed:

- the roll at the playbook's defaults, 1.35.3 -> 1.36.2, with the etcd settings read from the node (kubeadm's
  certificates, the collection's defaults), the snapshot and the rehearsal with the target kube-apiserver taken from
  its image in the node's containerd (no path given; mounted read-only, nothing left after): ``kubeadm upgrade apply``
  and the kubelet restart run for real; the apiserver, the manifests and the running static pods say 1.36.2, the final
  report is safe and every seeded object reads back;
- a failure injected after ``kubeadm upgrade apply``: the default rollback puts back every component kubeadm changed,
  controller-manager and scheduler before the apiserver (never newer than it), the kubelet's configuration and
  kubeadm's stored version, and the control plane is healthy on 1.35.3 and within the version skew policy; what the
  rollback cannot restore (the kubelet package, the kubelet-config ConfigMap) it names.

The apply command is the role's default plus the preflight errors this node has and an operator of such a host would
skip (cgroup v1, no CoreDNS addon); the node is cordoned first, as before any upgrade.

The node's etcd is etcd 3.5 behind the 3.6 tag kubeadm asks for (see kubeadm_node): kubeadm's etcd steps run, a
3.5 -> 3.6 data change does not. The host's kernel settings, mounts, cgroups and paths are compared before and after.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml
from kubeadm_node import (
    BIND_TARGETS,
    ETCD_VERSION,
    FROM_VERSION,
    HOST_PATHS,
    LEDGER,
    TO_VERSION,
    KubeadmNode,
    asset,
    build_images,
    host_state,
    machine_lock,
    missing_requirements,
    undo_a_killed_node,
)
from real_binaries import PLAYBOOKS, explain, report, seed_135, seeded_objects_read, unreadable

pytestmark = pytest.mark.slow

TASKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kubeadm_tasks")
DEFAULT_TASKS = os.path.join(os.path.dirname(PLAYBOOKS), "roles", "rolling_upgrade", "tasks")
TARGET_RELEASE = TO_VERSION.rsplit(".", 1)[0]
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")


@pytest.fixture(scope="module")
def kubeadm_images(tmp_path_factory):
    """The OCI archive of the node's images, built once for the module from the real binaries."""
    if os.environ.get("KUBEUPGRADE_TEST_KUBECONFIG"):
        pytest.skip("starts its own kubeadm control plane; with KUBEUPGRADE_TEST_KUBECONFIG only the tests against "
                    "that cluster run")
    missing = missing_requirements()
    if missing:
        reason = f"a kubeadm node cannot run here, missing: {'; '.join(missing)}"
        if os.environ.get("CI") == "true" or os.environ.get("KUBEUPGRADE_TEST_REQUIRE_CONTAINERD") \
                or os.environ.get("KUBEUPGRADE_TEST_REQUIRE_K8S_ASSETS"):
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    return build_images(tmp_path_factory.mktemp("kubeadm-images"), asset(TO_VERSION, "kubeadm"))


@pytest.fixture
def kubeadm_node(kubeadm_images, tmp_path):
    """A kubeadm control-plane node on 1.35.3 with seed_135's objects; torn down whatever happened, and the host
    found as it was before (kernel settings, mounts, kubepods cgroups, host paths)."""
    node = KubeadmNode(tmp_path / "node", kubeadm_images)
    try:
        node.start()
        seed_135(node)
        yield node
    finally:
        problems = node.stop()  # with any difference of the host's state from before the node (host_state)
        print(f"kubeadm node times (s): {node.times}")
        assert problems == [], problems


def test_a_node_whose_test_process_was_killed_is_undone_before_the_next_one_starts(tmp_path):
    """What a run killed mid-test leaves (a CI machine met it: the next run's node refused to start): the bind mounts,
    the kubelet's self-bind stacked on /var/lib/kubelet, a kubelet and a pod's process, the kubepods cgroups, the
    kubelet's kernel setting, containerd's socket directory. The next node undoes them from the ledger, and the host
    is as it was."""
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true" or os.environ.get("KUBEUPGRADE_TEST_REQUIRE_CONTAINERD"):
            pytest.fail("needs root (mounts, cgroups)", pytrace=False)
        pytest.skip("needs root (mounts, cgroups)")
    lock = machine_lock()  # no node of this machine runs meanwhile
    workdir, socket_dir = tmp_path / "killed-node", tmp_path / "kubeupgrade-ctr-killed"
    sleeper = [sys.executable, "-c", "import time; time.sleep(300)"]
    processes = []
    try:
        before = host_state()
        assert not before["cgroups"] and not [mount for mount in before["mounts"] if mount[0] in BIND_TARGETS], before
        Path(LEDGER).write_text(json.dumps({
            "workdir": str(workdir), "socket_dir": str(socket_dir), "host_before": before,
            "created_paths": [path for path in HOST_PATHS if not os.path.lexists(path)]}), encoding="utf-8")
        for target in BIND_TARGETS:
            private = workdir / "host" / target.strip("/").replace("/", "-")
            private.mkdir(parents=True)
            os.makedirs(target, exist_ok=True)
            subprocess.run(["mount", "--bind", str(private), target], check=True)
        for args in (["--make-private", "/var/lib/kubelet"], ["--bind", "/var/lib/kubelet", "/var/lib/kubelet"],
                     ["--make-rshared", "/var/lib/kubelet"]):  # what the kubelet does to its root directory
            subprocess.run(["mount", *args], check=True)
        (Path("/var/lib/kubelet") / "config.yaml").write_text("kind: KubeletConfiguration\n", encoding="utf-8")
        socket_dir.mkdir()
        processes.append(subprocess.Popen([*sleeper, f"--config={workdir}/kubelet.yaml"]))  # the kubelet names the workdir
        processes.append(subprocess.Popen(sleeper))  # a pod's process, in a kubepods cgroup
        hierarchy = "/sys/fs/cgroup/pids" if os.path.isdir("/sys/fs/cgroup/pids") else "/sys/fs/cgroup"
        pod_cgroup = Path(hierarchy, "kubepods", "besteffort", "pod-killed")
        pod_cgroup.mkdir(parents=True)
        (pod_cgroup / "cgroup.procs").write_text(str(processes[1].pid), encoding="utf-8")
        Path("/proc/sys/vm/overcommit_memory").write_text("1", encoding="utf-8")  # the kubelet's setting
        assert host_state() != before

        assert undo_a_killed_node() == []

        assert [process.wait(timeout=30) for process in processes] == [-15, -15]  # stopped (SIGTERM), by PID
        assert host_state() == before
        assert not os.path.exists(LEDGER) and not socket_dir.exists()
        assert undo_a_killed_node() == []  # nothing left: nothing done
    finally:
        for process in processes:
            process.kill()
        if os.path.exists(LEDGER):
            print(f"undone after the test: {undo_a_killed_node()}")
        lock.close()


def inventory(node, tmp_path):
    """One control-plane host, the node, on the local connection (its name is the kubeadm node's)."""
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump({"kube_control_plane": {
        "hosts": {node.name: {"kubeupgrade_apiserver_url": node.endpoint}},
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                 "ansible_become_method": "su", "kubeupgrade_connection": {"kubeconfig": node.kubeconfig},
                 # where this node's containerd listens (a private socket: this machine's own containerd is not the node's)
                 "kubeupgrade_containerd_address": str(node.socket)}}}))
    return path


def upgrade(ansible_playbook, node, tmp_path, **extra):
    """upgrade.yml to 1.36.2 at its defaults (the kubeadm per-host tasks), the node's PATH holding kubeadm 1.36.2."""
    values = {"kubeupgrade_target_release": TARGET_RELEASE, "kubeupgrade_target_version": TO_VERSION,
              "kubeupgrade_apiserver_manifest": "/etc/kubernetes/manifests/kube-apiserver.yaml",  # kubeadm's: the default
              "kubeupgrade_report_dir": str(tmp_path / "reports"),
              # The one role variable set, the preflight errors this machine's node has and an operator would skip:
              # kubeadm 1.35+ on a cgroup v1 host refuses unless SystemVerification is skipped explicitly (the kubelet
              # has failCgroupV1: false, see kubeadm_node), and the node has no CoreDNS addon to check (no CNI).
              "rolling_upgrade_kubeadm_apply_command":
                  "kubeadm upgrade apply -y v{{ rolling_upgrade_target_version }}"
                  " --ignore-preflight-errors=SystemVerification,CoreDNSUnsupportedPlugins,CoreDNSMigration",
              **extra}
    started = time.monotonic()
    result = ansible_playbook(PLAYBOOKS / "upgrade.yml", inventory=inventory(node, tmp_path), extra_vars=values,
                              env=node.env, timeout=1800)
    node.times["playbook"] = round(time.monotonic() - started, 1)
    return result


def versions(node) -> dict:
    """What runs, per component: the apiserver's /version, each static pod's running image tag, the kubelet's."""
    found = {f"{component} image": image.rsplit(":", 1)[1] for component, image in sorted(node.running_images().items())}
    status, version = node.request("GET", "/version")
    found["kube-apiserver /version"] = version.get("gitVersion") if status == 200 else f"({status})"
    status, info = node.request("GET", f"/api/v1/nodes/{node.name}")
    found["kubelet"] = info["status"]["nodeInfo"]["kubeletVersion"] if status == 200 else f"({status})"
    return found


def mount_points() -> list:
    with open("/proc/self/mountinfo") as handle:
        return [line.split()[4] for line in handle]


def minor(version) -> int:
    return int(version.lstrip("v").split(".")[1])


def skew_problems(found) -> list:
    """The control-plane version skew policy: kube-controller-manager and kube-scheduler not newer than the
    kube-apiserver and at most one minor older."""
    apiserver = minor(found["kube-apiserver /version"])
    problems = []
    for component in ("kube-controller-manager", "kube-scheduler"):
        version = found.get(f"{component} image")
        if version is None or not apiserver - 1 <= minor(version) <= apiserver:
            problems.append(f"{component} {version} with kube-apiserver {found['kube-apiserver /version']}")
    return problems


@pytest.mark.slow(minutes=17)
def test_a_failure_after_kubeadm_upgrade_apply_is_rolled_back_then_the_rerun_at_defaults_rolls_the_node(
        kubeadm_node, ansible_playbook, tmp_path):
    """One node for both (kubeadm's ports and paths are the machine's, so nodes cannot run side by side, and each
    costs minutes): the failed upgrade rolled back, then what an operator does next - fix the cause and run the
    playbook again - at its defaults."""
    kubeadm_node.cordon()  # kubeadm's CreateJob check would wait for a pod no CNI can run
    _failure_after_upgrade_apply_is_rolled_back_within_the_skew_policy(kubeadm_node, ansible_playbook, tmp_path / "failed")
    _upgrade_yml_at_its_defaults_rolls_the_node_and_every_object_reads_back(kubeadm_node, ansible_playbook, tmp_path / "rerun")


def _upgrade_yml_at_its_defaults_rolls_the_node_and_every_object_reads_back(node, ansible_playbook, tmp_path):
    """The default kubeadm per-host tasks (kubeadm upgrade apply -y v1.36.2, the kubelet restarted through the systemd
    module), with the etcd settings read from the node: the audit with kubeadm's client certificates, the snapshot
    proved restorable, the rehearsal of the 1.36.2 kube-apiserver with the flags of the node's own manifest."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    etcd = asset(ETCD_VERSION, "etcd")
    result = upgrade(ansible_playbook, node, tmp_path, kubeupgrade_etcd=node.etcd_settings,
                     kubeupgrade_snapshot={"dest": str(tmp_path / "etcd-before-upgrade.db"), "work_dir": str(tmp_path),
                                           "etcd_binary": etcd})
    assert result.rc == 0, explain(result)
    assert f"kubeadm upgrade apply -y v{TO_VERSION}" in result.stdout or "Upgrade the first control-plane node" in result.stdout
    # no rehearsal variable: the default evidence, the 1.36.2 kube-apiserver from its image in the node's containerd
    # (kubeupgrade_target_version), the scratch etcd from the node's etcd image, the flags from its manifest
    assert "rehearsal passes" in result.stdout and "Not rehearsed" not in result.stdout, explain(result)
    gate = report(tmp_path, f"gate-{TARGET_RELEASE}")
    assert not any("Not rehearsed" in note for note in gate["notes"]), gate["notes"]
    rehearsed = [note for note in gate["notes"] if note.startswith("Rehearsed: rehearsal passes")]
    assert rehearsed and f"kube-apiserver:v{TO_VERSION}" in rehearsed[0] and "registry.k8s.io/etcd:" in rehearsed[0], gate["notes"]
    assert "the manifest /etc/kubernetes/manifests/kube-apiserver.yaml" in rehearsed[0], rehearsed
    # the images were mounted read-only and nothing of them is left: no mount, no directory, no snapshot
    assert not [point for point in mount_points() if "-image-" in point and "kubeupgrade-" in point]
    assert not list(Path(tempfile.gettempdir()).glob("kubeupgrade-*-image-*"))
    assert "kubeupgrade-" not in node.ctr("snapshots", "ls").stdout
    assert (tmp_path / "etcd-before-upgrade.db").stat().st_size > 0 and "etcdutl snapshot restore" in result.stdout
    node.wait_ready(TO_VERSION)
    found = versions(node)
    print(f"after the roll: {found}")
    assert found["kube-apiserver /version"] == f"v{TO_VERSION}", found
    images = node.manifest_images()
    for component in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        assert images[component].endswith(f":v{TO_VERSION}"), images
        assert found[f"{component} image"] == f"v{TO_VERSION}", found
    final = report(tmp_path, f"final-{TARGET_RELEASE}")
    assert final["blocking"] == [] and final["verdict"] == "safe", final
    assert seeded_objects_read(node) == {0: []}
    assert unreadable(node, 0) == []
    # 1.36 stores VolumeAttributesClasses as storage.k8s.io/v1: the final migration rewrote the one object
    assert node.request("GET", "/apis/storage.k8s.io/v1/volumeattributesclasses/gold")[0] == 200


def _failure_after_upgrade_apply_is_rolled_back_within_the_skew_policy(node, ansible_playbook, tmp_path):
    """``kubeadm upgrade apply`` runs for real, then the host's upgrade fails (a post-upgrade check): the role's
    default rollback restores every component manifest kubeadm changed - controller-manager and scheduler before the
    apiserver - and the kubelet's configuration; the control plane is healthy on 1.35.3 and within the skew policy."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    node.wait_ready(FROM_VERSION)  # every static pod running (a loaded machine starts the scheduler last)
    before = versions(node)
    kubelet_config = Path("/var/lib/kubelet/config.yaml").read_text(encoding="utf-8")
    result = upgrade(ansible_playbook, node, tmp_path,
                     kubeupgrade_host_upgrade_tasks=os.path.join(TASKS, "upgrade_then_fail.yml"),
                     kubeupgrade_test_default_upgrade_tasks=os.path.join(DEFAULT_TASKS, "kubeadm_upgrade.yml"))
    assert result.rc != 0, explain(result)
    assert "post-upgrade check failed on purpose" in result.stdout, explain(result)
    assert "Run the per-host rollback tasks" in result.stdout, explain(result)
    node.wait_ready(FROM_VERSION)
    after = versions(node)
    print(f"before the upgrade: {before}\nafter the rollback: {after}")
    assert skew_problems(before) == [] and skew_problems(after) == [], (before, after)
    for component in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        assert after[f"{component} image"] == f"v{FROM_VERSION}", (before, after)
    assert after["kube-apiserver /version"] == f"v{FROM_VERSION}", (before, after)
    assert after["etcd image"] == before["etcd image"], (before, after)
    assert node.manifest_images() == {c: f"registry.k8s.io/{c}:v{FROM_VERSION}" for c in COMPONENTS[1:]} | {
        "etcd": node.manifest_images()["etcd"]}
    # the kubelet's configuration and kubeadm's stored version are put back; what is not (the kubelet package, the
    # kubelet-config ConfigMap) is named with the next step
    assert Path("/var/lib/kubelet/config.yaml").read_text(encoding="utf-8") == kubelet_config
    status, stored = node.request("GET", "/api/v1/namespaces/kube-system/configmaps/kubeadm-config")
    assert status == 200 and yaml.safe_load(stored["data"]["ClusterConfiguration"])["kubernetesVersion"] == f"v{FROM_VERSION}"
    assert "not restored by the rollback - the kubelet package" in result.stdout, explain(result)
    assert "kubelet-config ConfigMap" in result.stdout, explain(result)
    assert seeded_objects_read(node) == {0: []}
    assert unreadable(node, 0) == []
