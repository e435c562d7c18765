# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rolling upgrade on real kube-apiservers (tests/realcp), judged by what they answer afterwards.

- today's roll (1.35 -> 1.36 on etcd 3.5, as kubeadm ships them) at the playbook's defaults, with and without
  the etcd settings (audit, snapshot, rehearsal), and its rollback; the 1.35 apiserver lists the group/versions
  1.36 registers (scheduling.k8s.io/v1alpha2) and answers 404 for them mid-roll;
- 1.28 -> 1.32 (on etcd 3.4): stores that newer releases cannot read, which today's releases no longer write;
- an unreachable or failing host stops the roll: no later host is touched;
- a rollback rehearsed at the playbook's defaults, from the target's image in a private containerd, as on a kubeadm host.
"""

from __future__ import annotations

import os
import time

import pytest
import yaml
from containerd_images import mounts, upstream_images
from real_binaries import (
    PATHS_128,
    REMOVED_IN_132,
    TODAY_ETCD,
    TODAY_FROM,
    TODAY_TO,
    UNREADABLE_ON_132,
    delete_all,
    etcd_extra,
    explain,
    report,
    run,
    seed_128_unreadable_on_132,
    seed_135,
    seeded_objects_read,
    static_pod_manifests,
    unreadable,
    versions,
    write_inventory,
)

pytestmark = pytest.mark.slow


def todays_plane(real_plane_factory, count=2, **options):
    """``count`` × kube-apiserver 1.35.3 on etcd 3.5.30, as kubeadm ships them."""
    return real_plane_factory([TODAY_FROM] * count, etcd_version=TODAY_ETCD, **options)


@pytest.mark.slow(minutes=6)
@pytest.mark.parametrize("with_etcd", [False, True], ids=["records", "etcd-audit"])
def test_todays_roll_at_defaults_then_its_rollback_every_host_rolled_and_every_object_read(
        real_plane_factory, ansible_playbook, tmp_path, with_etcd):
    """1.35.3 -> 1.36.2 on etcd 3.5.30 with TLS client certificates and encryption at rest, objects in every version
    1.35 stores with the beta APIs an operator enables; then back to 1.35.3 with the same playbook. With the etcd
    settings: the audit (no warning on a healthy 1.35 or 1.36 cluster), the snapshot proved with etcd 3.5's own tools,
    and the rehearsal with each target binary, before any host."""
    plane = todays_plane(real_plane_factory, etcd_tls=True, encryption=True)
    seed_135(plane)
    versions_before = "v1.35.3"
    for target, binary_version, done in ((TODAY_TO, "v1.36.2", "final-1.36"), (TODAY_FROM, "v1.35.3", "final-1.35")):
        extra = etcd_extra(plane, tmp_path, target) if with_etcd else {}
        result = run(ansible_playbook, "upgrade.yml", plane, tmp_path, kubeupgrade_target_release=target, **extra)
        assert result.rc == 0, explain(result)
        assert versions(plane) == [binary_version, binary_version]
        final = report(tmp_path, done)
        assert final["blocking"] == [] and final["verdict"] == "safe", final
        # The timeline: each step as the apiservers said it, both hosts rolled in order, the last step this report.
        steps = {step["step"]: step for step in final["timeline"]}
        names = [step["step"] for step in final["timeline"]]
        order = ["pre-flight", "gate before the first host", "gate before cp1", "cp1 upgraded", "gate before cp2", "cp2 upgraded"]
        assert [name for name in names if name in order] == order and names[-1].startswith("Storage pre-flight"), names
        before = [api["version"] for api in steps["gate before the first host"]["apiservers"]]
        assert before == [versions_before] * 2 and steps["gate before the first host"]["gate"] == "passed", steps
        assert [api["version"] for api in steps["gate before cp2"]["apiservers"]] == [binary_version, versions_before], steps
        assert [api["version"] for api in steps["cp2 upgraded"]["apiservers"]] == [binary_version], steps
        assert steps["agreement before migrating"]["agreed"] is True, steps  # the last one: after the roll
        assert final["timeline"][-1]["gate"] == "passed" and final["timeline"][-1]["step"].startswith("Storage pre-flight")
        markdown = (tmp_path / "reports" / f"{done}.md").read_text(encoding="utf-8")
        assert "## Timeline" in markdown and "| gate before cp1 |" in markdown, markdown[-3000:]
        versions_before = binary_version
        assert seeded_objects_read(plane) == {0: [], 1: []}
        for index in range(2):
            assert unreadable(plane, index) == []
        assert "outside the apiserver's key layout" not in result.stdout, explain(result)
        if with_etcd:
            assert "rehearsal passes" in result.stdout, explain(result)
            snapshot = tmp_path / f"etcd-before-{target}.db"
            assert snapshot.stat().st_size > 0 and "etcdutl snapshot restore" in result.stdout, explain(result)
    # 1.36 stores VolumeAttributesClasses as storage.k8s.io/v1 (1.35 as v1beta1): the roll's final migration rewrote
    # the one object, which 1.35 reads back after the rollback.
    status = plane.request("GET", "/apis/storage.k8s.io/v1/volumeattributesclasses/gold")
    assert status[0] == 200, status


def test_a_failing_host_stops_the_roll_and_is_rolled_back(real_plane_factory, ansible_playbook, tmp_path):
    plane = todays_plane(real_plane_factory, count=3)
    result = run(ansible_playbook, "upgrade.yml", plane, tmp_path, kubeupgrade_target_release=TODAY_TO,
                 kubeupgrade_realcp_broken_hosts=["cp2"], kubeupgrade_wait_retries=3)
    assert result.rc != 0, explain(result)
    assert "Run the per-host rollback tasks" in result.stdout, explain(result)
    # cp1 rolled, cp2 failed and is back on 1.35, cp3 untouched
    assert versions(plane) == ["v1.36.2", "v1.35.3", "v1.35.3"]
    assert plane.apiserver(2)["pid"] and "cp3" not in result.recap or result.recap["cp3"].get("changed", 0) == 0


def test_an_unreachable_host_stops_the_roll_at_the_next_host(real_plane_factory, ansible_playbook, tmp_path):
    """With serial: 1 Ansible drops an unreachable host and runs the next batch, and rescue does not run for it:
    the check before cp2 must find, from the apiservers, that cp1 is not on the target."""
    plane = todays_plane(real_plane_factory)
    unreachable = {"cp1": {"ansible_connection": "ssh", "ansible_host": "127.0.0.1", "ansible_port": 9,
                           "ansible_ssh_common_args": "-o ConnectTimeout=3 -o BatchMode=yes"}}
    inventory = write_inventory(plane, tmp_path, host_vars=unreachable)
    result = run(ansible_playbook, "upgrade.yml", plane, tmp_path, inventory=inventory, kubeupgrade_target_release=TODAY_TO)
    assert result.rc != 0, explain(result)
    assert result.recap["cp1"]["unreachable"] == 1, explain(result)
    assert "not touching " + plane.endpoints[1] in result.stdout, explain(result)
    assert versions(plane) == ["v1.35.3", "v1.35.3"], "a host was upgraded past an unreachable one"


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


@pytest.mark.slow(minutes=4)
def test_an_apiservice_without_a_backend_blocks_fast_until_accepted_by_name_then_the_roll_completes(
        real_plane_factory, ansible_playbook, tmp_path):
    """A local APIService that no apiserver serves: every apiserver lists it and answers 404. It blocks (its
    resources cannot be judged) without waiting minutes for an agreement that cannot come; accepted, it does not."""
    plane = todays_plane(real_plane_factory)
    plane.create("/apis/apiregistration.k8s.io/v1/apiservices", {
        "metadata": {"name": "v1.dangling.example.com"},
        "spec": {"group": "dangling.example.com", "version": "v1", "groupPriorityMinimum": 1000, "versionPriority": 15}})
    started = time.monotonic()
    blocked = run(ansible_playbook, "upgrade.yml", plane, tmp_path, kubeupgrade_target_release=TODAY_TO)
    assert blocked.rc != 0, explain(blocked)
    assert time.monotonic() - started < 240, "the gate waited for an agreement a failed discovery cannot give"
    assert "dangling.example.com/v1" in blocked.stdout, explain(blocked)
    assert versions(plane) == ["v1.35.3", "v1.35.3"], "a host was touched"
    accepted = run(ansible_playbook, "upgrade.yml", plane, tmp_path, kubeupgrade_target_release=TODAY_TO,
                   kubeupgrade_accept={"dangling.example.com/v1": "an APIService without a backend; stores nothing (CHG-9)"})
    assert accepted.rc == 0, explain(accepted)
    assert versions(plane) == ["v1.36.2", "v1.36.2"]
    for index in range(2):
        assert unreadable(plane, index) == []


def test_mixed_releases_behind_one_url_are_found_by_the_identity_leases(real_plane_factory, ansible_playbook, tmp_path):
    """An inventory that reaches two apiservers through one URL (a load balancer) observes one: the cluster's identity
    Leases list two, so the pre-flight blocks instead of judging whichever apiserver answered."""
    plane = real_plane_factory([TODAY_FROM, TODAY_TO], etcd_version=TODAY_ETCD)
    inventory = tmp_path / "lb.yml"
    inventory.write_text(yaml.safe_dump({"kube_control_plane": {
        "hosts": {"lb": {"kubeupgrade_apiserver_url": plane.endpoints[0]}},
        "vars": {"ansible_connection": "local", "kubeupgrade_connection": {"kubeconfig": str(plane.kubeconfig)}}}}))
    result = run(ansible_playbook, "preflight.yml", plane, tmp_path, inventory=inventory, kubeupgrade_target_release=TODAY_TO)
    assert result.rc != 0, explain(result)
    found = report(tmp_path, "preflight-1.36")
    unobserved = [b for b in found["blocking"] if b["subject"] == "(apiservers not observed)"]
    assert len(unobserved) == 1 and "lists 2 apiservers" in unobserved[0]["reason"], found["blocking"]


@pytest.mark.slow(minutes=5)
def test_following_the_next_steps_verbatim_clears_the_block_and_the_same_play_then_rolls(
        real_plane_factory, ansible_playbook, tmp_path):
    plane = real_plane_factory(["1.28", "1.28"], encryption=True)
    seed_128_unreadable_on_132(plane)
    blocked = run(ansible_playbook, "upgrade.yml", plane, tmp_path, kubeupgrade_target_release="1.32")
    assert blocked.rc != 0, explain(blocked)
    steps = {b["subject"]: b["next_step"] for b in report(tmp_path, "preflight-1.32")["blocking"]}
    # 1.32 has IPAddresses only as v1beta1, which the 1.28 apiservers (v1alpha1) do not show enabled: rehearse
    assert "rehearse with the target binary" in steps.pop("ipaddresses.networking.k8s.io", "rehearse with the target binary")
    assert set(steps) == UNREADABLE_ON_132 | REMOVED_IN_132, steps
    for name, step in steps.items():
        # each step says to export and delete the objects while the running release still reads them
        assert f"kubectl get {name} -A -o yaml" in step and "delete" in step, step
        delete_all(plane, PATHS_128[name])
    rolled = run(ansible_playbook, "upgrade.yml", plane, tmp_path, kubeupgrade_target_release="1.32",
                 **etcd_extra(plane, tmp_path, "1.32"))
    assert rolled.rc == 0, explain(rolled)
    assert versions(plane) == ["v1.32.6", "v1.32.6"]
    for index in range(2):
        assert unreadable(plane, index) == []


def test_a_rollback_to_a_release_that_serves_a_stored_resource_only_behind_an_unset_gate_blocks_before_any_host(
        real_plane_factory, ansible_playbook, tmp_path):
    """A 1.36 cluster stores a DeviceTaintRule (written through resource.k8s.io/v1beta2); 1.35 has the resource only as
    v1alpha3, behind an alpha gate and runtime-config this cluster does not set. From release data alone the rollback
    was safe, and it stranded the object half-way: now it blocks before any host, and the pre-flight passes once the
    object is gone."""
    plane = real_plane_factory([TODAY_TO, TODAY_TO], etcd_version=TODAY_ETCD,
                               runtime_config={"*": {"resource.k8s.io/v1alpha3": "false"}})
    plane.create("/apis/resource.k8s.io/v1beta2/devicetaintrules", {"metadata": {"name": "gpu-broken"}, "spec": {
        "deviceSelector": {"driver": "gpu.example.com"}, "taint": {"key": "broken", "value": "yes", "effect": "NoSchedule"}}})
    extra = {"kubeupgrade_etcd": plane.etcd_settings, "kubeupgrade_etcd_become": False}  # records measured, not Unknown
    blocked = run(ansible_playbook, "upgrade.yml", plane, tmp_path, kubeupgrade_target_release=TODAY_FROM, **extra)
    assert blocked.rc != 0, explain(blocked)
    assert versions(plane) == ["v1.36.2", "v1.36.2"], "a host was touched"
    verdicts = {r["resource"]: r for r in report(tmp_path, f"preflight-{TODAY_FROM}")["resources"]}
    taints = verdicts["devicetaintrules.resource.k8s.io"]
    assert taints["verdict"] == "unknown" and "only in v1alpha3" in taints["reason"], taints
    assert taints["objects_named"] == ["gpu-broken"], taints
    # these hosts run no static pod: the default rehearsal says it did not run and why, and release data blocks alone
    notes = report(tmp_path, f"preflight-{TODAY_FROM}")["notes"]
    assert any(note.startswith("Not rehearsed") and "kube-apiserver static pod manifest" in note for note in notes), notes
    # once the object is gone nothing blocks; the rollback roll itself is the containerd test's below (same cluster)
    delete_all(plane, "/apis/resource.k8s.io/v1beta2/devicetaintrules")
    cleared = run(ansible_playbook, "preflight.yml", plane, tmp_path, kubeupgrade_target_release=TODAY_FROM, **extra)
    assert cleared.rc == 0, explain(cleared)
    found = report(tmp_path, f"preflight-{TODAY_FROM}")
    assert found["blocking"] == [] and found["verdict"] == "safe", found


ETCD_IMAGE = "registry.k8s.io/etcd:3.5.30-0"  # the plane's etcd release, under kubeadm's name for it


def _image_mounts():
    """The rehearsal's image mount points on this machine (kubeupgrade-<component>-image-*)."""
    return sorted(point for point, _fs, _src in mounts() if "/kubeupgrade-" in point and "-image-" in point)


def _rollback_blocked_by_a_device_taint_rule(real_plane_factory):
    """Two 1.36.2 apiservers storing a DeviceTaintRule (through resource.k8s.io/v1beta2); 1.35 has the resource only as
    v1alpha3, which this cluster's runtime-config turns off."""
    plane = real_plane_factory([TODAY_TO, TODAY_TO], etcd_version=TODAY_ETCD,
                               runtime_config={"*": {"resource.k8s.io/v1alpha3": "false"}})
    plane.create("/apis/resource.k8s.io/v1beta2/devicetaintrules", {"metadata": {"name": "gpu-broken"}, "spec": {
        "deviceSelector": {"driver": "gpu.example.com"}, "taint": {"key": "broken", "value": "yes", "effect": "NoSchedule"}}})
    return plane


@pytest.mark.slow(minutes=5)
def test_a_rollback_rehearsed_from_the_target_image_in_containerd_at_defaults_names_the_object_and_blocks_before_any_host(
        real_plane_factory, ansible_playbook, tmp_path, containerd):
    """The same rollback on a host laid out as kubeadm's: the apiserver's static pod manifest (its flags, its etcd),
    the etcd static pod's, and the target's image in containerd (kubeadm config images pull). With no rehearsal
    setting, the pre-flight rehearses: 1.35.3 from its image reads the copy with the cluster's flags, names the object
    it does not serve, and blocks before any host; nothing of the images stays mounted. Once the object is gone, the
    rollback completes, rehearsed with the flags of kubeadm's backup of the 1.35 manifest."""
    from realcp.plane import binary
    plane = _rollback_blocked_by_a_device_taint_rule(real_plane_factory)
    target = binary(TODAY_FROM)
    target_image = f"registry.k8s.io/kube-apiserver:{os.path.basename(os.path.dirname(target))}"
    upstream_images(tmp_path / "images", {target_image: ("/usr/local/bin/kube-apiserver", target),
                                          ETCD_IMAGE: ("/usr/local/bin/etcd", plane.etcd.binary)}, containerd)
    manifest = static_pod_manifests(plane, tmp_path / "kubernetes" / "manifests", etcd_image=ETCD_IMAGE)
    snapshots, leases, mounted = containerd.snapshots(), containerd.leases(), _image_mounts()
    extra = {"kubeupgrade_etcd": plane.etcd_settings, "kubeupgrade_etcd_become": False,
             "kubeupgrade_apiserver_manifest": str(manifest), "kubeupgrade_containerd_address": str(containerd.socket)}
    blocked = run(ansible_playbook, "upgrade.yml", plane, tmp_path, kubeupgrade_target_release=TODAY_FROM, **extra)
    assert blocked.rc != 0, explain(blocked)
    assert versions(plane) == ["v1.36.2", "v1.36.2"], "a host was touched"
    found = report(tmp_path, f"preflight-{TODAY_FROM}")
    rehearsed = [note for note in found["notes"] if note.startswith("Rehearsed")]
    assert len(rehearsed) == 1 and all(part in rehearsed[0] for part in (target_image, ETCD_IMAGE, str(manifest))), found["notes"]
    taints = {r["resource"]: r for r in found["resources"]}["devicetaintrules.resource.k8s.io"]
    assert taints["verdict"] == "removed" and taints["objects_named"] == ["gpu-broken"], taints
    assert "Measured by the rehearsal with v1.35.3" in taints["reason"], taints
    # the images were mounted read-only for the run, then unmounted with their snapshots and leases
    assert (containerd.snapshots(), containerd.leases(), _image_mounts()) == (snapshots, leases, mounted)
    assert "kubeadm kept no backup of a 1.35 kube-apiserver manifest" in rehearsed[0], rehearsed
    delete_all(plane, "/apis/resource.k8s.io/v1beta2/devicetaintrules")
    # kubeadm upgrade apply kept the 1.35 manifest it replaced: the rollback is rehearsed with the flags 1.35 ran with
    backup = static_pod_manifests(plane, tmp_path / "kubernetes" / "tmp" / "kubeadm-backup-manifests-2026-03-01-10-00-00",
                                  release=TODAY_FROM)
    rolled = run(ansible_playbook, "upgrade.yml", plane, tmp_path, kubeupgrade_target_release=TODAY_FROM, **extra)
    assert rolled.rc == 0, explain(rolled)
    assert versions(plane) == ["v1.35.3", "v1.35.3"]
    notes = report(tmp_path, f"preflight-{TODAY_FROM}")["notes"]
    assert any(note.startswith("Rehearsed") and f"kubeadm's backup {backup}" in note for note in notes), notes
    for index in range(2):
        assert unreadable(plane, index) == []
    assert (containerd.snapshots(), containerd.leases(), _image_mounts()) == (snapshots, leases, mounted)
