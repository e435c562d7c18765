# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""storage_rehearsal on real binaries: the target kube-apiserver reads a copy of a real etcd.

Upgrade (1.28 store, 1.32 binary) and rollback (1.32 store, 1.28 binary); from a live TLS etcd and from a
snapshot file; encryption at rest; the check and upgrade.yml gating on it; and bad inputs that must leave
nothing running.
"""

from __future__ import annotations

import glob
import json
import os
import re
import signal
import stat
import subprocess
import sys
import textwrap
import time
from types import SimpleNamespace

import pytest
from real_binaries import (
    PATHS_128,
    REMOVED_IN_132,
    SCHEMA,
    UNREADABLE_ON_132,
    WIDGETS_ALPHA_CRD,
    delete_all,
    explain,
    report,
    run,
    seed_128_unreadable_on_132,
    seed_132,
    versions,
    wait_for,
)
from realcp.plane import binary, release_flags

from ansible_collections.kubeupgrade.storage.plugins.module_utils._audit import runner as audit_runner
from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd import scratch
from ansible_collections.kubeupgrade.storage.plugins.module_utils._rehearse import runner
from ansible_collections.kubeupgrade.storage.plugins.module_utils._rehearse.model import RehearsalError
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ConfigurationError

pytestmark = pytest.mark.slow


def flags_of(release, drop=()):
    flags = release_flags(release)
    gates = {k: v for k, v in flags["feature_gates"].items() if k not in drop}
    return {"feature_gates": ",".join(f"{k}={v}" for k, v in sorted(gates.items())),
            "runtime_config": ",".join(f"{k}={v}" for k, v in sorted(flags["runtime_config"].items()))}


def params_for(plane, release, tmp_path, **extra):
    """Module options of a rehearsal of ``plane``'s etcd with ``release``'s binary and that release's flags."""
    etcd = plane.etcd_settings
    params = {"apiserver_binary": binary(release), "apiserver_manifest": "", "etcd_endpoints": etcd["endpoints"],
              "etcd_ca_cert": etcd.get("ca_cert"), "etcd_client_cert": etcd.get("client_cert"),
              "etcd_client_key": etcd.get("client_key"), "encryption_config": etcd.get("encryption_config"),
              "work_dir": str(tmp_path), "pages_per_second": 0, "names_limit": -1, **flags_of(release)}
    params.update(extra)
    return params


def rehearse(params):
    return runner.rehearse(runner.plan(params))


def by_verdict(result):
    found = {}
    for name, entry in result["resources"].items():
        found.setdefault(entry["verdict"], {})[name] = entry
    return found


def nothing_left(work_dir):
    leftovers = glob.glob(os.path.join(str(work_dir), scratch.PREFIX + "*"))
    running = subprocess.run(["pgrep", "-f", os.path.join(str(work_dir), scratch.PREFIX)], capture_output=True, check=False)
    return leftovers == [] and running.stdout.strip() == b""


def test_upgrade_rehearsal_names_exactly_what_132_cannot_read_live_tls_etcd_and_snapshot_with_encryption(
        real_plane_factory, tmp_path):
    plane = real_plane_factory(["1.28"], etcd_tls=True, encryption=True)
    seed_128_unreadable_on_132(plane)
    live = rehearse(params_for(plane, "1.32", tmp_path))
    verdicts = by_verdict(live)
    assert set(verdicts.get("unsafe", {})) == UNREADABLE_ON_132, live["report_text"]
    assert set(verdicts.get("removed", {})) == REMOVED_IN_132, live["report_text"]
    assert set(verdicts) <= {"safe", "unsafe", "removed"}, live["report_text"]
    assert verdicts["unsafe"]["resourceclaims.resource.k8s.io"]["undecodable_names"] == ["dra/claim"]
    assert verdicts["unsafe"]["resourceclaimtemplates.resource.k8s.io"]["undecodable_names"] == ["dra/template"]
    assert {n: e["removed_names"] for n, e in verdicts["removed"].items()} == {
        "resourceclasses.resource.k8s.io": ["gpu"], "podschedulingcontexts.resource.k8s.io": ["dra/runner"],
        "clustercidrs.networking.k8s.io": ["pods"]}
    assert live["started"] and live["target_git_version"] == "v1.32.6" and live["source"]["kind"] == "etcd"
    assert live["flags"]["encryption-provider-config"] == plane.encryption_config
    assert live["copy_dir"]["removed"] and os.path.dirname(live["copy_dir"]["path"]) == str(tmp_path), live["copy_dir"]
    assert "the copy was in " + live["copy_dir"]["path"] in live["report_text"] and live["stale_removed"] == []
    assert nothing_left(tmp_path)

    # The audit with release data names the same objects on the same store: they agree here.
    audit = audit_runner.audit(audit_runner.build_request(dict(
        etcd_endpoints=plane.etcd_settings["endpoints"], etcd_ca_cert=plane.etcd_settings["ca_cert"],
        etcd_client_cert=plane.etcd_settings["client_cert"], etcd_client_key=plane.etcd_settings["client_key"],
        encryption_config=plane.encryption_config, target_release="1.32", names_limit=-1)))
    predicted = {name: entry["not_readable_names"] for name, entry in audit["resources"].items() if entry.get("not_readable_names")}
    measured = {name: entry["undecodable_names"] for name, entry in verdicts["unsafe"].items()}
    assert predicted == measured

    # The same from a snapshot file (`etcdctl snapshot save`), restored with the etcd tools on the host.
    snapshot = tmp_path / "before-upgrade.db"
    etcd = plane.etcd_settings
    subprocess.run(["etcdctl", f"--endpoints={etcd['endpoints'][0]}", f"--cacert={etcd['ca_cert']}", f"--cert={etcd['client_cert']}",
                    f"--key={etcd['client_key']}", "snapshot", "save", str(snapshot)], check=True, capture_output=True,
                   env=dict(os.environ, ETCDCTL_API="3"))
    restored = rehearse(params_for(plane, "1.32", tmp_path, snapshot=str(snapshot)))
    assert restored["source"]["kind"] == "snapshot"
    assert {n: e["verdict"] for n, e in restored["resources"].items() if e["verdict"] != "safe"} == \
        {n: e["verdict"] for n, e in live["resources"].items() if e["verdict"] != "safe"}
    assert nothing_left(tmp_path)


def test_rollback_rehearsal_with_128_after_132_wrote_names_each_object_and_that_it_never_becomes_ready(
        real_plane_factory, tmp_path):
    """1.32 writes FlowSchemas and PriorityLevelConfigurations v1, VAP v1 and ResourceClaims v1beta1; 1.28 reads
    none of them and waits for its flow-control caches forever."""
    plane = real_plane_factory(["1.32"], encryption=True, feature_gates={"1.32": {"MultiCIDRServiceAllocator": "false"}})
    seed_132(plane)
    result = rehearse(params_for(plane, "1.28", tmp_path, start_timeout=25,
                                 **flags_of("1.28", drop=("StorageVersionAPI", "APIServerIdentity"))))
    assert not result["started"] and result["start_failure"]["verdict"] == "unsafe", result["report_text"]
    assert "FlowSchema (flowcontrol.apiserver.k8s.io/v1)" in result["start_failure"]["reason"]
    assert any("no kind" in line for line in result["fatal_log"])
    verdicts = by_verdict(result)
    assert set(verdicts.get("unsafe", {})) == {"flowschemas.flowcontrol.apiserver.k8s.io",
                                               "prioritylevelconfigurations.flowcontrol.apiserver.k8s.io",
                                               "validatingadmissionpolicies.admissionregistration.k8s.io",
                                               "resourceclaims.resource.k8s.io"}, result["report_text"]
    assert set(verdicts.get("removed", {})) == {"deviceclasses.resource.k8s.io"}, result["report_text"]
    assert verdicts["unsafe"]["resourceclaims.resource.k8s.io"]["undecodable_names"] == ["app/claim"]
    assert verdicts["unsafe"]["validatingadmissionpolicies.admissionregistration.k8s.io"]["undecodable_names"] == ["app"]
    assert "app" in verdicts["unsafe"]["flowschemas.flowcontrol.apiserver.k8s.io"]["undecodable_names"]
    assert result["blocking"][0]["subject"] == "target apiserver start"
    assert nothing_left(tmp_path)


@pytest.mark.slow(minutes=6)
def test_upgrade_yml_gates_on_the_rehearsal_before_any_host_then_rolls_once_the_next_steps_are_followed(
        real_plane_factory, ansible_playbook, tmp_path):
    plane = real_plane_factory(["1.28", "1.28"], encryption=True)
    seed_128_unreadable_on_132(plane)
    rehearsal = {"apiserver_binary": binary("1.32"), "apiserver_manifest": "", "work_dir": str(tmp_path), **flags_of("1.32")}
    extra = {"kubeupgrade_etcd": plane.etcd_settings, "kubeupgrade_etcd_become": False, "kubeupgrade_rehearsal": rehearsal}
    blocked = run(ansible_playbook, "upgrade.yml", plane, tmp_path, kubeupgrade_target_release="1.32", **extra)
    assert blocked.rc != 0, explain(blocked)
    assert versions(plane) == ["v1.28.0", "v1.28.0"], "an apiserver was touched"
    shown = blocked.stdout[blocked.stdout.find("Rehearse with the target"):][:3000]
    assert "rehearsal finds (fail_on lets them through here) 5 resource(s) not safe" in shown, shown
    found = report(tmp_path, "preflight-1.32")
    named = {r["resource"]: r["objects_named"] for r in found["resources"] if r["verdict"] != "safe"}
    assert named["resourceclaims.resource.k8s.io"] == ["dra/claim"], named
    assert "Measured by the rehearsal with v1.32.6" in str(found["resources"]), found
    for name in sorted(UNREADABLE_ON_132 | REMOVED_IN_132):  # the next step: delete them through the running apiservers
        delete_all(plane, PATHS_128[name])
    rolled = run(ansible_playbook, "upgrade.yml", plane, tmp_path, kubeupgrade_target_release="1.32", **extra)
    assert rolled.rc == 0, explain(rolled)
    assert "rehearsal passes" in rolled.stdout, explain(rolled)
    assert versions(plane) == ["v1.32.6", "v1.32.6"]
    assert nothing_left(tmp_path)


# --- bad inputs: one clear error each, nothing left running --------------------------------------------------


def fake_binary(tmp_path, name, body):
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + textwrap.dedent(body), encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


@pytest.fixture
def any_plane(real_plane_factory):
    plane = real_plane_factory(["1.32"])
    seed_132(plane)
    return plane


def test_bad_inputs_fail_clearly_before_anything_starts(any_plane, tmp_path):
    good = params_for(any_plane, "1.33", tmp_path)
    not_executable = tmp_path / "kube-apiserver-not-executable"
    not_executable.write_text("", encoding="utf-8")
    cases = [
        ({"apiserver_binary": str(tmp_path / "missing")}, "apiserver_binary: .*missing does not exist"),
        ({"apiserver_binary": str(not_executable)}, "apiserver_binary: .* is not executable"),
        ({"apiserver_binary": "/bin/true"}, "apiserver_binary: /bin/true is not a kube-apiserver"),
        ({"target_release": "1.32"}, "target_release is 1.32, but apiserver_binary .* reports v1.33.5"),
        ({"etcd_binary": str(tmp_path / "no-etcd")}, "etcd_binary: .*no-etcd does not exist"),
        ({"apiserver_manifest": str(tmp_path / "no-manifest.yaml")}, "apiserver_manifest: .* does not exist"),
        ({"etcd_endpoints": None}, "Nothing to copy"),
        ({"snapshot": str(tmp_path / "no.db")}, "snapshot: .*no.db does not exist"),
        ({"work_dir": str(tmp_path / "nowhere")}, "work_dir: .* is not a writable directory"),
        ({"encryption_config": str(tmp_path / "no-encryption.yaml")}, "encryption_config: .* does not exist on this host"),
        ({"start_timeout": 1}, "start_timeout must be between 5 and 3600"),
    ]
    for change, pattern in cases:
        with pytest.raises(ConfigurationError, match=pattern):
            runner.plan(dict(good, **change))
    assert nothing_left(tmp_path)


def test_a_target_that_exits_a_corrupt_snapshot_and_one_never_ready_each_block_and_leave_nothing(any_plane, tmp_path):
    exits = rehearse(params_for(any_plane, "1.33", tmp_path, service_cluster_ip_range="not-a-cidr"))
    assert not exits["started"] and exits["start_failure"]["reason"].startswith("the target kube-apiserver exited with code")
    assert any("not a valid cidr" in line for line in exits["fatal_log"]), exits["report_text"]
    assert nothing_left(tmp_path)

    # This build warns on a feature gate it does not know instead of exiting: the rehearsal says it was ignored.
    ignored = rehearse(params_for(any_plane, "1.33", tmp_path, feature_gates="KubeUpgradeNoSuchGate=true"))
    assert ignored["started"] and ignored["ignored_feature_gates"] == ["KubeUpgradeNoSuchGate"]

    corrupt = tmp_path / "corrupt.db"
    corrupt.write_bytes(os.urandom(4096))
    with pytest.raises(RehearsalError, match="snapshot: .*corrupt.db could not be restored"):
        rehearse(params_for(any_plane, "1.33", tmp_path, snapshot=str(corrupt)))
    assert nothing_left(tmp_path)

    never = fake_binary(tmp_path, "kube-apiserver", """
        case "$1" in --version) echo "Kubernetes v1.33.5"; exit 0;; esac
        exec sleep 600
    """)
    started = time.monotonic()
    hangs = rehearse(params_for(any_plane, "1.33", tmp_path, apiserver_binary=never, start_timeout=5))
    assert time.monotonic() - started < 60
    # the reason gives the seconds it waited: the 5 s timeout, or a second more on a loaded machine
    waited = re.search(r"did not become ready within (\d+) s", hangs["start_failure"]["reason"])
    assert not hangs["started"] and waited and 5 <= int(waited.group(1)) < 60, hangs["start_failure"]["reason"]
    assert nothing_left(tmp_path)


def test_not_enough_disk_is_said_with_what_it_needs(tmp_path, monkeypatch):
    monkeypatch.setattr(runner.shutil, "disk_usage", lambda _path: SimpleNamespace(free=10 << 20))
    with pytest.raises(RehearsalError, match=r"has 10 MiB free; the copy of 100 MiB of etcd data needs 456 MiB"):
        runner.check_room(100 << 20, str(tmp_path))


def test_not_enough_memory_is_said_with_what_it_needs(tmp_path, monkeypatch):
    """The scratch etcd peaks at about four times the data (measured at 1,000,000 keys), plus the target apiserver."""
    monkeypatch.setattr(runner, "_available_memory", lambda: 2048 << 20)
    with pytest.raises(RehearsalError, match=r"has 2048 MiB of memory available; a rehearsal on 400 MiB of data needs about 2368 MiB"):
        runner.check_room(400 << 20, str(tmp_path))
    assert runner.check_room(300 << 20, str(tmp_path))["memory_needed"] == (4 * 300 + 768) << 20


def test_a_killed_run_is_cleaned_up_by_the_next_one(any_plane, tmp_path):
    """SIGKILL of the process running the rehearsal: its children die with it, the next run of any module removes its
    directory (the copy) from that module's temporary directory."""
    never = fake_binary(tmp_path, "kube-apiserver", """
        case "$1" in --version) echo "Kubernetes v1.33.5"; exit 0;; esac
        exec sleep 600
    """)
    params = params_for(any_plane, "1.33", tmp_path, apiserver_binary=never, start_timeout=300)
    code = ("import sys, json; from ansible_collections.kubeupgrade.storage.plugins.module_utils._rehearse import runner; "
            "runner.rehearse(runner.plan(json.loads(sys.argv[1])))")
    child = subprocess.Popen([sys.executable, "-c", code, json.dumps(params)], env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    deadline = time.monotonic() + 60
    while not glob.glob(str(tmp_path / (scratch.PREFIX + "*") / "kube-apiserver.log")):
        assert time.monotonic() < deadline, "the rehearsal never started its apiserver"
        time.sleep(0.2)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    time.sleep(1)
    assert glob.glob(str(tmp_path / (scratch.PREFIX + "*"))), "the killed run's directory should still be there"
    assert subprocess.run(["pgrep", "-f", str(tmp_path / scratch.PREFIX)], capture_output=True, check=False).stdout == b"", \
        "its children outlived it"
    # The next run of any module (here one that contacts no cluster) removes it from its temporary directory.
    hashed = subprocess.run([sys.executable, "-m", "ansible_collections.kubeupgrade.storage.plugins.modules.storage_version_hash"],
                            input=json.dumps({"ANSIBLE_MODULE_ARGS": {"group": "apps", "version": "v1", "kind": "Deployment"}}),
                            env=dict(os.environ, TMPDIR=str(tmp_path), PYTHONPATH=os.pathsep.join(sys.path)),
                            capture_output=True, text=True, timeout=60, check=False)
    assert hashed.returncode == 0, hashed.stdout + hashed.stderr
    assert nothing_left(tmp_path)
    assert scratch.remove_stale(str(tmp_path)) == []


def test_target_crd_manifests_are_applied_to_the_copy_only_a_refused_one_blocks_a_kept_version_reads(any_plane, tmp_path):
    """widgets.example.com stores v1alpha1 objects; a manifest that drops v1alpha1 is refused (storedVersions), one
    that keeps it serving and moves storage to v1 is applied and every widget is read through it."""
    any_plane.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", WIDGETS_ALPHA_CRD)
    wait_for(lambda: any_plane.request("GET", "/apis/example.com/v1alpha1/widgets")[0] == 200, "widgets to be served")
    any_plane.create("/apis/example.com/v1alpha1/namespaces/default/widgets",
                     {"apiVersion": "example.com/v1alpha1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 1}})
    v1 = {"name": "v1", "served": True, "storage": True, "schema": SCHEMA}
    dropping = {**WIDGETS_ALPHA_CRD, "spec": {**WIDGETS_ALPHA_CRD["spec"], "versions": [v1]}}
    keeping = {**WIDGETS_ALPHA_CRD, "spec": {**WIDGETS_ALPHA_CRD["spec"], "versions": [
        {"name": "v1alpha1", "served": True, "storage": False, "schema": SCHEMA}, v1]}}

    refused = rehearse(params_for(any_plane, "1.33", tmp_path, target_crds=[dropping]))
    entry = refused["resources"]["widgets.example.com"]
    assert entry["verdict"] == "unsafe" and entry["manifest"].startswith("rejected"), refused["report_text"]
    assert "storedVersions" in entry["manifest"], entry
    assert [b["subject"] for b in refused["blocking"]] == ["widgets.example.com"]

    kept = rehearse(params_for(any_plane, "1.33", tmp_path, target_crds=[keeping]))
    entry = kept["resources"]["widgets.example.com"]
    assert entry["verdict"] == "safe" and entry["manifest"] == "applied" and entry["objects_read"] == 1, kept["report_text"]
    # The cluster's CRD is untouched: the manifests went to the copy only.
    status, crd = any_plane.request("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com")
    assert status == 200 and [v["name"] for v in crd["spec"]["versions"]] == ["v1alpha1"]
    assert nothing_left(tmp_path)


def test_a_port_taken_between_the_pick_and_the_bind_is_picked_again(any_plane, tmp_path, monkeypatch):
    """Another process binds a port after the rehearsal picked it (the scratch etcd's client port, then the
    apiserver's): each starts again elsewhere."""
    import socket
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    taken = holder.getsockname()[1]
    picks = iter([taken, 0, 0, 0, taken])  # etcd client, etcd peer; again both; the apiserver
    real_pick = scratch.free_port
    monkeypatch.setattr(scratch, "free_port", lambda: next(picks, None) or real_pick())
    try:
        result = rehearse(params_for(any_plane, "1.33", tmp_path))
    finally:
        holder.close()
    assert result["started"] and result["verdict"] == "safe", result["report_text"]
    assert nothing_left(tmp_path)


def test_rehearsing_the_plan_migrates_the_copy_with_the_current_binary_then_the_target_manifest_applies(any_plane, tmp_path):
    """widgets were stored as v1alpha1 before v1 became the storage version (storedVersions [v1alpha1, v1]); the
    target manifest drops v1alpha1. Alone it is refused; with migrate_with the 1.32 binary rewrites the widgets
    and prunes storedVersions on the copy, and the 1.33 binary then applies the manifest and reads every widget."""
    any_plane.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", WIDGETS_ALPHA_CRD)
    wait_for(lambda: any_plane.request("GET", "/apis/example.com/v1alpha1/widgets")[0] == 200, "widgets to be served")
    for name in ("w1", "w2"):
        any_plane.create("/apis/example.com/v1alpha1/namespaces/default/widgets",
                         {"apiVersion": "example.com/v1alpha1", "kind": "Widget", "metadata": {"name": name}, "spec": {"size": 1}})
    path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com"
    v1 = {"name": "v1", "served": True, "storage": True, "schema": SCHEMA}
    for _attempt in range(10):
        crd = any_plane.request("GET", path)[1]
        crd["spec"]["versions"] = [{"name": "v1alpha1", "served": True, "storage": False, "schema": SCHEMA}, v1]
        if any_plane.request("PUT", path, crd)[0] == 200:
            break
        time.sleep(0.3)
    target = {**WIDGETS_ALPHA_CRD, "spec": {**WIDGETS_ALPHA_CRD["spec"], "versions": [v1]}}

    alone = rehearse(params_for(any_plane, "1.33", tmp_path, target_crds=[target]))
    assert alone["resources"]["widgets.example.com"]["verdict"] == "unsafe", alone["report_text"]
    assert alone["plan_migration"] is None

    planned = rehearse(params_for(any_plane, "1.33", tmp_path, target_crds=[target],
                                  migrate_with={"apiserver_binary": binary("1.32"), **flags_of("1.32")}))
    entry = planned["resources"]["widgets.example.com"]
    assert entry["verdict"] == "safe" and entry["manifest"] == "applied" and entry["objects_read"] == 2, planned["report_text"]
    migrated = planned["plan_migration"]
    assert migrated["git_version"] == "v1.32.6" and migrated["failed"] == 0, migrated
    assert migrated["resources"]["widgets.example.com"]["migrated"] == 2
    assert migrated["resources"]["widgets.example.com"]["pruned_stored_versions"] == ["v1"]
    assert planned["verdict"] == "safe", planned["report_text"]
    # The cluster is untouched: its CRD still lists both stored versions.
    assert any_plane.request("GET", path)[1]["status"]["storedVersions"] == ["v1alpha1", "v1"]
    assert nothing_left(tmp_path)


def test_the_scratch_etcd_is_the_etcd_35_given_restoring_the_snapshot_with_its_own_etcdutl(any_plane, tmp_path):
    """etcd_binary etcd 3.5: the snapshot is restored with the etcdutl beside it and served by that etcd, started with
    the flags of the release it reports; the target reads the copy as on the default etcd."""
    import etcd_fixture

    etcd35 = etcd_fixture.require_etcd("3.5")
    home = os.path.dirname(etcd35)
    snapshot = tmp_path / "before-upgrade.db"
    subprocess.run([os.path.join(home, "etcdctl"), f"--endpoints={any_plane.etcd_settings['endpoints'][0]}", "snapshot", "save",
                    str(snapshot)], check=True, capture_output=True)
    result = rehearse(params_for(any_plane, "1.33", tmp_path, snapshot=str(snapshot), etcd_binary=etcd35))
    assert result["started"] and result["verdict"] == "safe" and result["source"]["kind"] == "snapshot", result["report_text"]
    assert result["scratch_etcd"] == {"etcd_binary": etcd35, "etcd_version": os.path.basename(home).lstrip("v"),
                                      "restore_tool": os.path.join(home, "etcdutl")}, result["scratch_etcd"]
    assert result["scratch_etcd"]["etcd_version"].startswith("3.5.")
    assert nothing_left(tmp_path)


def test_a_target_image_containerd_lacks_is_pulled_and_a_failed_pull_says_how_to_provide_it(containerd):
    """containerd's own client pulls the absent image; from a registry that cannot resolve (.invalid, RFC 2606) the
    pull fails and the message names the image, says the pull failed with ctr's reason, and how to provide it.
    Nothing is left in containerd."""
    from ansible_collections.kubeupgrade.storage.plugins.module_utils._rehearse import binaries
    image = "registry.invalid/kube-apiserver:v1.35.3"
    with binaries.ImageMounts(str(containerd.socket)) as mounts, pytest.raises(binaries.Unavailable) as failed:
        mounts.binary("kube-apiserver", image, "1.35.3", option="apiserver_image",
                      pull=binaries.image_to_pull("kube-apiserver", image, "1.35.3"))
    message = str(failed.value)
    assert message.startswith(f"apiserver_image: {image} is not in containerd's k8s.io namespace at {containerd.socket}, "
                              "and pulling it failed (ctr: "), message
    assert "registry.invalid" in message.split("pulling it failed", 1)[1], message
    assert "kubeadm config images pull --kubernetes-version v1.35.3" in message and "images import" in message, message
    assert containerd.images() == [] and mounts.summary() == []
