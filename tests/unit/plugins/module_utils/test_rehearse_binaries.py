# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where the rehearsal's binaries come from when no path is given: the images a kubeadm host's containerd holds,
mounted read-only and unmounted after; and, as the default evidence, what the host cannot provide is said, not
failed. containerd's client is a stand-in here (``ctr`` on PATH, logging its calls); the real one is exercised by
the kubeadm node test."""

from __future__ import annotations

import os

import pytest

from ansible_collections.kubeupgrade.storage.plugins.module_utils._judge import rehearsed
from ansible_collections.kubeupgrade.storage.plugins.module_utils._rehearse import binaries, model
from ansible_collections.kubeupgrade.storage.plugins.module_utils._rehearse import runner as rehearse_runner
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ConfigurationError

CTR = r"""#!/bin/sh
# ctr --address A --namespace k8s.io images (ls -q | mount IMAGE DIR | unmount --rm DIR | pull IMAGE)
echo "$*" >> "$CTR_LOG"
shift 4
case "$1 $2" in
  "images ls") cat "$CTR_IMAGES" ;;
  "images mount")
    key=$(echo "$3" | tr '/:' '__')
    [ -d "$CTR_STORE/$key" ] || { echo "ctr: image \"$3\": not found" >&2; exit 1; }
    cp -a "$CTR_STORE/$key/." "$4/" ;;
  "images unmount") rm -rf "$4/usr" ;;
  "images pull")
    key=$(echo "$3" | tr '/:' '__')
    [ -d "$CTR_REGISTRY/$key" ] || {
      echo "ctr: failed to resolve reference \"$3\": failed to do request: dial tcp: lookup registry.k8s.io: no such host" >&2
      exit 1; }
    mkdir -p "$CTR_STORE" && cp -a "$CTR_REGISTRY/$key" "$CTR_STORE/$key" && echo "$3" >> "$CTR_IMAGES" ;;
esac
"""


def _script(path, body):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body)
    path.chmod(0o755)
    return path


@pytest.fixture
def host(tmp_path, monkeypatch):
    """A control-plane host: ctr on PATH (no etcd there), a containerd socket, images in its store, and the static pod
    manifests moved under tmp_path (this machine's /etc/kubernetes may be the kubeadm node test's)."""
    path_dir = tmp_path / "bin"
    _script(path_dir / "ctr", CTR)
    monkeypatch.setenv("PATH", f"{path_dir}:/usr/bin:/bin")
    monkeypatch.setattr(rehearse_runner.shutil, "which", lambda name: str(path_dir / name) if (path_dir / name).exists() else None)
    socket = tmp_path / "containerd.sock"
    socket.write_text("")
    store, images, log = tmp_path / "store", tmp_path / "images", tmp_path / "ctr.log"
    monkeypatch.setenv("CTR_STORE", str(store))
    monkeypatch.setenv("CTR_IMAGES", str(images))
    monkeypatch.setenv("CTR_LOG", str(log))
    monkeypatch.setenv("CTR_REGISTRY", str(tmp_path / "registry"))  # what a pull finds; none: the pull fails
    images.write_text("")
    monkeypatch.setattr(model, "MANIFEST", str(tmp_path / "manifests" / "kube-apiserver.yaml"))
    monkeypatch.setattr(binaries, "ETCD_MANIFEST", str(tmp_path / "manifests" / "etcd.yaml"))
    monkeypatch.setattr(binaries.tempfile, "tempdir", str(tmp_path))

    def image(name, binary, version_line, remote=False):
        key = name.replace("/", "_").replace(":", "_")
        _script((tmp_path / "registry" if remote else store) / key / "usr" / "local" / "bin" / binary,
                f"#!/bin/sh\necho '{version_line}'\n")
        if not remote:
            with images.open("a") as handle:
                handle.write(name + "\n")

    def manifests(apiserver=True, etcd_image=None):
        directory = tmp_path / "manifests"
        directory.mkdir(exist_ok=True)
        if apiserver:
            (directory / "kube-apiserver.yaml").write_text(
                "apiVersion: v1\nkind: Pod\nmetadata: {name: kube-apiserver, namespace: kube-system}\nspec:\n  containers:\n"
                "  - name: kube-apiserver\n    image: registry.k8s.io/kube-apiserver:v1.35.3\n    command: [kube-apiserver,"
                " --etcd-servers=https://127.0.0.1:2379, --feature-gates=DRADeviceTaints=true]\n")
        if etcd_image:
            (directory / "etcd.yaml").write_text(
                f"apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: etcd\n    image: {etcd_image}\n")

    return {"socket": str(socket), "image": image, "manifests": manifests, "log": log, "tmp": tmp_path}


def params(host, **given):
    return dict({"containerd_address": host["socket"], "target_release": "1.36", "work_dir": str(host["tmp"])}, **given)


@pytest.mark.parametrize("names, release, expected", [
    (["registry.k8s.io/kube-apiserver:v1.36.1", "registry.k8s.io/kube-apiserver:v1.36.2",
      "registry.k8s.io/kube-apiserver:v1.35.3"], "1.36", "registry.k8s.io/kube-apiserver:v1.36.2"),
    (["mirror.example.com:5000/k8s/kube-apiserver:v1.36.2"], "1.36", "mirror.example.com:5000/k8s/kube-apiserver:v1.36.2"),
    (["registry.k8s.io/kube-apiserver:v1.36.1", "registry.k8s.io/kube-apiserver:v1.36.2"], "1.36.1",
     "registry.k8s.io/kube-apiserver:v1.36.1"),
    (["registry.k8s.io/kube-apiserver:v1.36.2-rc.0", "registry.k8s.io/kube-apiserver:v1.36.2"], "1.36",
     "registry.k8s.io/kube-apiserver:v1.36.2"),
    (["registry.k8s.io/kube-controller-manager:v1.36.2", "registry.k8s.io/kube-apiserver:v1.35.3",
      "sha256:0123abcd"], "1.36", None),
])
def test_the_target_image_is_the_newest_patch_of_the_release_from_any_registry(names, release, expected):
    assert binaries.newest_for_release(names, "kube-apiserver", release) == expected


def test_the_target_and_etcd_come_from_the_images_mounted_read_only_and_are_unmounted_after(host):
    host["image"]("registry.k8s.io/kube-apiserver:v1.36.2", "kube-apiserver", "Kubernetes v1.36.2")
    host["image"]("registry.k8s.io/etcd:3.6.5-0", "etcd", "etcd Version: 3.6.5")
    host["manifests"](etcd_image="registry.k8s.io/etcd:3.6.5-0")
    with binaries.ImageMounts(host["socket"]) as mounts:
        plan = rehearse_runner.plan(params(host), mounts)
        assert plan.git_version == "v1.36.2" and str(plan.etcd_version) == "3.6.5"
        assert plan.binary.endswith("/usr/local/bin/kube-apiserver") and os.path.isfile(plan.binary)
        assert [m["image"] for m in mounts.summary()] == ["registry.k8s.io/kube-apiserver:v1.36.2", "registry.k8s.io/etcd:3.6.5-0"]
        assert plan.flags_from == f"the manifest {model.MANIFEST}"
        directories = [m["mounted_at"] for m in mounts.summary()]
    calls = host["log"].read_text().splitlines()
    assert sum("images mount" in call for call in calls) == 2 and sum("images unmount --rm" in call for call in calls) == 2
    assert all(f"--address {host['socket']} --namespace k8s.io" in call for call in calls)
    assert not any(os.path.exists(directory) for directory in directories)


def test_a_mount_a_killed_run_left_is_unmounted_before_the_next_mount_and_a_live_runs_is_not(host, monkeypatch):
    host["image"]("registry.k8s.io/kube-apiserver:v1.36.2", "kube-apiserver", "Kubernetes v1.36.2")
    host["image"]("registry.k8s.io/etcd:3.6.5-0", "etcd", "etcd Version: 3.6.5")
    host["manifests"](etcd_image="registry.k8s.io/etcd:3.6.5-0")
    killed = host["tmp"] / f"{binaries.MOUNT_PREFIX}kube-apiserver-{2 ** 22 + 7}-x1"  # above any pid_max: no such process
    (killed / "usr" / "local" / "bin").mkdir(parents=True)
    alive = host["tmp"] / f"{binaries.MOUNT_PREFIX}etcd-{os.getpid()}-x2"
    (alive / "usr").mkdir(parents=True)
    monkeypatch.setattr(binaries.os.path, "ismount", lambda path: path in (str(killed), str(alive)))
    with binaries.ImageMounts(host["socket"]) as mounts:
        rehearse_runner.plan(params(host), mounts)
        assert mounts.stale_unmounted == [str(killed)] and not killed.exists() and alive.exists()
    # whole arguments, not substrings: the etcd mount's own mkdtemp name may begin with the live directory's name
    calls = [call.split() for call in host["log"].read_text().splitlines()]
    assert sum(call[4:] == ["images", "unmount", "--rm", str(killed)] for call in calls) == 1
    assert not any(str(alive) in call for call in calls)


def test_etcd_comes_from_the_etcd_static_pod_beside_the_apiserver_manifest_given(host):
    """A manifests directory elsewhere than kubeadm's (apiserver_manifest given): its etcd.yaml names etcd's image."""
    host["image"]("registry.k8s.io/kube-apiserver:v1.36.2", "kube-apiserver", "Kubernetes v1.36.2")
    host["image"]("registry.k8s.io/etcd:3.5.30-0", "etcd", "etcd Version: 3.5.30")
    host["manifests"]()
    elsewhere = host["tmp"] / "elsewhere"
    elsewhere.mkdir()
    os.rename(host["tmp"] / "manifests" / "kube-apiserver.yaml", elsewhere / "kube-apiserver.yaml")
    (elsewhere / "etcd.yaml").write_text("apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: etcd\n"
                                         "    image: registry.k8s.io/etcd:3.5.30-0\n")
    with binaries.ImageMounts(host["socket"]) as mounts:
        plan = rehearse_runner.plan(params(host, apiserver_manifest=str(elsewhere / "kube-apiserver.yaml")), mounts)
        assert str(plan.etcd_version) == "3.5.30" and "registry.k8s.io/etcd:3.5.30-0" in [m["image"] for m in mounts.summary()]
    assert binaries.etcd_manifest_beside("") == binaries.ETCD_MANIFEST


def _backup(host, stamp, image, gates):
    directory = host["tmp"] / "tmp" / f"kubeadm-backup-manifests-{stamp}"
    directory.mkdir(parents=True)
    (directory / "kube-apiserver.yaml").write_text(
        "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: kube-apiserver\n"
        f"    image: {image}\n    command: [kube-apiserver, --etcd-servers=https://10.0.0.9:2379, --feature-gates={gates}]\n")
    return directory / "kube-apiserver.yaml"


def test_a_rollback_runs_with_the_flags_of_kubeadms_backup_of_the_target_release_and_says_so(host):
    """The current manifest is 1.35.3's (the fixture's); rolling back to 1.34 takes kubeadm's newest 1.34 backup."""
    host["image"]("registry.k8s.io/kube-apiserver:v1.34.4", "kube-apiserver", "Kubernetes v1.34.4")
    host["manifests"]()
    _backup(host, "2026-01-01-10-00-00", "registry.k8s.io/kube-apiserver:v1.34.1", "Old=true")
    newest = _backup(host, "2026-02-01-10-00-00", "registry.k8s.io/kube-apiserver:v1.34.4", "DRADeviceTaints=false")
    os.utime(newest.parent, (2e9, 2e9))
    with binaries.ImageMounts(host["socket"]) as mounts:
        plan = rehearse_runner.plan(params(host, target_release="1.34", etcd_binary=_etcd(host)), mounts)
    assert plan.flags["feature-gates"] == "DRADeviceTaints=false"
    assert plan.flags_from.startswith(f"kubeadm's backup {newest} of the 1.34 manifest")
    assert plan.etcd.endpoints == ["https://127.0.0.1:2379"]  # the etcd connection stays the current manifest's
    with binaries.ImageMounts(host["socket"]) as mounts:  # "": no backup read, and the current manifest said as such
        plan = rehearse_runner.plan(params(host, target_release="1.34", etcd_binary=_etcd(host), apiserver_manifest_backups=""),
                                    mounts)
    assert plan.flags["feature-gates"] == "DRADeviceTaints=true"
    assert plan.flags_from.startswith(f"the manifest {model.MANIFEST} (a rollback from registry.k8s.io/kube-apiserver:v1.35.3, "
                                      "and kubeadm kept no backup of a 1.34")
    with pytest.raises(ConfigurationError, match=r"apiserver_manifest_backups: .*absent is not a directory"):
        rehearse_runner.plan(params(host, apiserver_manifest_backups=str(host["tmp"] / "absent")))


def test_an_upgrade_runs_with_the_current_manifests_flags_whatever_the_backups(host):
    host["image"]("registry.k8s.io/kube-apiserver:v1.36.2", "kube-apiserver", "Kubernetes v1.36.2")
    host["manifests"]()
    _backup(host, "2026-01-01-10-00-00", "registry.k8s.io/kube-apiserver:v1.36.1", "Old=true")
    with binaries.ImageMounts(host["socket"]) as mounts:
        plan = rehearse_runner.plan(params(host, etcd_binary=_etcd(host)), mounts)
    assert plan.flags["feature-gates"] == "DRADeviceTaints=true" and plan.flags_from == f"the manifest {model.MANIFEST}"


def test_kubeupgrade_target_version_picks_that_patch_and_a_given_image_must_be_there(host):
    for version in ("1.36.1", "1.36.2"):
        host["image"](f"registry.k8s.io/kube-apiserver:v{version}", "kube-apiserver", f"Kubernetes v{version}")
    host["manifests"]()
    with binaries.ImageMounts(host["socket"]) as mounts:
        plan = rehearse_runner.plan(params(host, target_version="1.36.1", etcd_binary=_etcd(host)), mounts)
        assert plan.git_version == "v1.36.1"
    with binaries.ImageMounts(host["socket"]) as mounts, pytest.raises(binaries.Unavailable, match=r"apiserver_image: .*v1\.36\.9 is not in "
                                                                                                   r"containerd's k8s\.io namespace.*pulling it failed.*"
                                                                                                   r"--kubernetes-version v1\.36\.9"):
        rehearse_runner.plan(params(host, apiserver_image="registry.k8s.io/kube-apiserver:v1.36.9", etcd_binary=_etcd(host)), mounts)


def _etcd(host):
    return str(_script(host["tmp"] / "etcd-bin" / "etcd", "#!/bin/sh\necho 'etcd Version: 3.5.30'\n"))


@pytest.mark.parametrize("setup, given, needle", [
    ("no manifest", {"etcd_endpoints": ["https://127.0.0.1:2379"]}, "the cluster's kube-apiserver flags are unknown here"),
    ("nothing", {}, "Nothing to copy"),
    ("no image", {}, "no kube-apiserver image of 1.36 in containerd's k8s.io namespace"),
    ("no socket", {"containerd_address": "/nonexistent/containerd.sock"}, "no containerd socket at /nonexistent/containerd.sock"),
    ("no etcd", {}, "no etcd binary for the copy"),
])
def test_as_the_default_evidence_what_the_host_lacks_is_said_with_how_to_provide_it_and_nothing_fails(host, setup, given, needle):
    if setup not in ("no manifest", "nothing"):
        host["manifests"]()
    if setup == "no etcd":
        host["image"]("registry.k8s.io/kube-apiserver:v1.36.2", "kube-apiserver", "Kubernetes v1.36.2")

    class Module:
        params = dict({k: None for k in ("apiserver_binary", "apiserver_image", "etcd_binary", "etcd_image", "snapshot",
                                         "apiserver_manifest", "names_limit", "start_timeout", "migrate_with")},
                      **params(host, if_unavailable="skip", **given))

        def warn(self, text):
            raise AssertionError(text)

    result = rehearse_runner.run(Module())
    assert result["rehearsed"] is False and result["blocking"] == [], result
    assert needle in result["not_rehearsed"], result["not_rehearsed"]
    calls = host["log"].read_text() if host["log"].exists() else ""
    assert calls.count("images mount") == calls.count("images unmount --rm")  # whatever was mounted is unmounted
    # the check takes it as no measurement, and its report says what was not rehearsed
    rehearsed.validate(result, "1.36")
    assert rehearsed.measured(result) is None
    assert rehearsed.notes(result) == [f"Not rehearsed (judged from release data, which cannot know this cluster's flags): "
                                       f"{result['not_rehearsed']}"]
    if setup == "no manifest":
        return  # asked for (fail), a rehearsal without the cluster's flags runs on the target's defaults, with a warning
    Module.params["if_unavailable"] = "fail"
    with pytest.raises(ConfigurationError, match=needle.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        rehearse_runner.run(Module())


def test_a_bad_option_is_an_error_also_as_the_default_evidence(host):
    with pytest.raises(ConfigurationError, match="start_timeout must be between 5 and 3600"):
        rehearse_runner.plan(params(host, if_unavailable="skip", start_timeout=1))


@pytest.mark.parametrize("image, version, expected", [
    (None, "1.35.3", "registry.k8s.io/kube-apiserver:v1.35.3"),
    (None, "v1.35.3", "registry.k8s.io/kube-apiserver:v1.35.3"),
    ("mirror.example.com/kube-apiserver:v1.35.3", "1.35.3", "mirror.example.com/kube-apiserver:v1.35.3"),
    (None, "1.35", None),  # a minor release: its patch, so the image, is unknown
    (None, None, None),
])
def test_the_image_pulled_is_the_one_given_else_kubeadms_for_the_target_patch(image, version, expected):
    assert binaries.image_to_pull("kube-apiserver", image, version) == expected


def test_an_absent_target_image_is_pulled_then_mounted(host):
    host["image"]("registry.k8s.io/kube-apiserver:v1.36.3", "kube-apiserver", "Kubernetes v1.36.3", remote=True)
    host["manifests"]()
    with binaries.ImageMounts(host["socket"]) as mounts:
        plan = rehearse_runner.plan(params(host, target_version="1.36.3", etcd_binary=_etcd(host)), mounts)
        assert plan.git_version == "v1.36.3"
        assert [(m["image"], m["pulled"]) for m in mounts.summary()] == [("registry.k8s.io/kube-apiserver:v1.36.3", True)]
    calls = host["log"].read_text().splitlines()
    assert any(call.endswith("images pull registry.k8s.io/kube-apiserver:v1.36.3") for call in calls), calls


def test_a_failed_pull_names_the_image_says_it_failed_and_how_to_provide_it(host):
    host["manifests"]()
    with binaries.ImageMounts(host["socket"]) as mounts, pytest.raises(binaries.Unavailable) as failed:
        rehearse_runner.plan(params(host, target_version="1.36.3", etcd_binary=_etcd(host)), mounts)
    message = str(failed.value)
    assert message.startswith("registry.k8s.io/kube-apiserver:v1.36.3 is not in containerd's k8s.io namespace at "), message
    for part in ("pulling it failed (ctr: failed to resolve reference", "no such host",
                 "kubeadm config images pull --kubernetes-version v1.36.3", "ctr --namespace k8s.io images import"):
        assert part in message, message
    # as the default evidence the same reason is said, and nothing fails
    skipped = rehearse_runner.run(_Kum(params(host, target_version="1.36.3", etcd_binary=_etcd(host), if_unavailable="skip")))
    assert skipped["rehearsed"] is False and "pulling it failed" in skipped["not_rehearsed"], skipped


def test_no_pull_without_the_target_patch(host):
    host["manifests"]()
    with binaries.ImageMounts(host["socket"]) as mounts, pytest.raises(binaries.Unavailable, match="no kube-apiserver image of 1.36"):
        rehearse_runner.plan(params(host, etcd_binary=_etcd(host)), mounts)
    assert not any("images pull" in call for call in host["log"].read_text().splitlines())


class _Kum:
    def __init__(self, params):
        self.params = params

    def warn(self, _text):
        pass


def test_check_mode_pulls_nothing_and_says_so(host):
    host["image"]("registry.k8s.io/kube-apiserver:v1.36.3", "kube-apiserver", "Kubernetes v1.36.3", remote=True)
    host["manifests"]()
    with binaries.ImageMounts(host["socket"], pull=False) as mounts, pytest.raises(binaries.Unavailable,
                                                                                   match=r"\(not pulled in check mode\)"):
        rehearse_runner.plan(params(host, target_version="1.36.3", etcd_binary=_etcd(host)), mounts)
    assert not any("images pull" in call for call in host["log"].read_text().splitlines())
