# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The real control plane fixture itself: binaries found, ports kept apart, apiservers ready and distinct,
rolling restarts (in process and from another process), encryption at rest, and no process left behind."""

import json
import os
import select
import signal
import subprocess
import sys
import time

import pytest

from realcp import plane

IDENTITY_LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases?labelSelector=apiserver.kubernetes.io%2Fidentity%3Dkube-apiserver"


def _assets(tmp_path, *versions):
    for version in versions:
        path = tmp_path / f"v{version}" / "kube-apiserver"
        path.parent.mkdir(parents=True)
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
    return str(tmp_path)


def test_binary_picks_the_newest_patch_of_a_release(tmp_path):
    assets = _assets(tmp_path, "1.32.2", "1.32.10", "1.33.5", "1.3.0")
    assert plane.binary("1.32", assets=assets) == os.path.join(assets, "v1.32.10", "kube-apiserver")
    assert plane.binary("1.32.2", assets=assets) == os.path.join(assets, "v1.32.2", "kube-apiserver")
    assert plane.binary("1.3", assets=assets) == os.path.join(assets, "v1.3.0", "kube-apiserver")
    with pytest.raises(FileNotFoundError, match="v1.31"):
        plane.binary("1.31", assets=assets)
    with pytest.raises(FileNotFoundError, match="kube-controller-manager"):
        plane.binary("1.32", "kube-controller-manager", assets=assets)


@pytest.mark.parametrize("ci", ["", "true"])
def test_require_assets_skips_locally_and_fails_in_ci(monkeypatch, ci):
    monkeypatch.delenv(plane.ASSETS_ENV, raising=False)
    monkeypatch.delenv("KUBEUPGRADE_TEST_REQUIRE_K8S_ASSETS", raising=False)
    monkeypatch.setenv("CI", ci)
    expected = pytest.fail.Exception if ci else pytest.skip.Exception
    with pytest.raises(expected, match="scripts/test.sh"):
        plane.require_assets("1.32")


def test_each_xdist_worker_has_its_own_ports(monkeypatch):
    ranges = {}
    for worker in ("", "gw0", "gw3"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        ranges[worker] = [plane.allocate_port() for _port in range(3)]
    assert all(21000 <= port < 21400 for port in ranges[""])
    assert all(21400 <= port < 21800 for port in ranges["gw0"])
    assert all(22600 <= port < 23000 for port in ranges["gw3"])
    assert len({port for ports in ranges.values() for port in ports}) == 9
    plane.release_ports([port for ports in ranges.values() for port in ports])


def test_flags_follow_the_release_and_the_overrides(tmp_path, monkeypatch):
    monkeypatch.setenv(plane.ASSETS_ENV, _assets(tmp_path / "assets", "1.28.0", "1.32.6", "1.33.5"))
    control = plane.ControlPlane(tmp_path / "plane", releases=["1.28", "1.33"], feature_gates={"1.33": {"StorageVersionMigrator": None}},
                                 runtime_config={1: {"batch/v2alpha1": False}}, extra_flags=["--v=2"])
    state = control.state()

    def flags(index, release):
        argv = plane.apiserver_argv(state, index, plane.binary(release))
        return dict(arg.split("=", 1) for arg in argv[1:])

    old, new = flags(0, "1.28"), flags(1, "1.33")
    assert "ValidatingAdmissionPolicy=true" in old["--feature-gates"] and "resource.k8s.io/v1alpha2=true" in old["--runtime-config"]
    assert "StorageVersionMigrator" not in new["--feature-gates"] and "resource.k8s.io/v1beta1=true" in new["--runtime-config"]
    assert "batch/v2alpha1=false" in new["--runtime-config"] and "batch/v2alpha1" not in flags(0, "1.32")["--runtime-config"]
    assert old["--v"] == new["--v"] == "2"
    assert old["--secure-port"] != new["--secure-port"] and old["--tls-cert-file"] != new["--tls-cert-file"]
    control.stop_all()


def _wait_for(condition, timeout=60.0):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.5)


def _identity_leases(control):
    status, leases = control.request("GET", IDENTITY_LEASES)
    items = leases.get("items", []) if status == 200 else []
    return items if len(items) >= 2 else None


def _pids(control):
    state = control.state()
    return [(entry["pid"], entry["pid_start"]) for entry in [*state["apiservers"], state["etcd_process"]] if entry["pid"]]


def _cli(state_file, *args):
    """``python -m realcp`` from another process that knows only the state file (no assets variable)."""
    state = plane.load_state(state_file)
    env = {key: value for key, value in os.environ.items() if key != plane.ASSETS_ENV}
    env["PYTHONPATH"] = state["cli"]["pythonpath"]
    return subprocess.run([*state["cli"]["argv"], *args, "--state", state_file], env=env, capture_output=True, text=True, timeout=180, check=False)


def test_two_apiservers_serve_one_cluster_and_roll(real_plane_factory):
    control = real_plane_factory(["1.32", "1.32"])
    seen = _pids(control)
    for index in (0, 1):
        assert control.request("GET", "/readyz", index=index) == (200, "ok")

    leases = _wait_for(lambda: _identity_leases(control))
    assert leases, "each apiserver writes an identity Lease within seconds"
    assert len({lease["spec"]["holderIdentity"] for lease in leases}) == 2
    if control.state()["unshare"]:
        assert {lease["metadata"]["labels"]["kubernetes.io/hostname"] for lease in leases} == {"apiserver-0", "apiserver-1"}

    control.create("/api/v1/namespaces/default/configmaps", {"metadata": {"name": "through-0"}, "data": {"k": "v"}}, index=0)
    assert control.get("/api/v1/namespaces/default/configmaps/through-0", index=1)["data"] == {"k": "v"}
    assert control.request("GET", "/api/v1/secrets", token=plane.NOBODY_TOKEN)[0] == 403
    assert "/registry/configmaps/default/through-0" in control.etcd_keys("/registry/configmaps/")

    control.restart(1, "1.33")
    seen += _pids(control)
    assert control.request("GET", "/version", index=1)[1]["gitVersion"] == "v1.33.5"
    assert (control.release_of(1), control.version_of(1), control.release_of(0)) == ("1.33", "1.33.5", "1.32")
    with open(control.apiserver(1)["log"]) as log:
        assert log.read().count("===== ") == 2, "one separator per start, the log appended"

    result = _cli(control.state_file, "restart", "--index", "0", "--release", "1.33")
    assert result.returncode == 0, result.stderr
    seen += _pids(control)
    assert control.request("GET", "/version", index=0)[1]["gitVersion"] == "v1.33.5"
    assert control.get("/api/v1/namespaces/default/configmaps/through-0", index=0)["data"] == {"k": "v"}

    result = _cli(control.state_file, "restart", "--index", "1", "--broken")
    assert result.returncode == 1 and "exited with 1" in result.stderr and "unknown flag" in result.stderr, result.stderr
    assert not plane.alive(control.apiserver(1)["pid"], control.apiserver(1)["pid_start"])

    control.close()
    assert not [pid for pid, start in seen if plane.alive(pid, start)]


def test_encryption_at_rest_with_tls_etcd(real_plane_factory):
    plane.require_assets("1.32", name="kube-controller-manager")
    control = real_plane_factory(["1.32"], etcd_tls=True, encryption=True)
    settings = control.etcd_settings
    assert settings["endpoints"][0].startswith("https://127.0.0.1:")
    assert {"ca_cert", "client_cert", "client_key", "encryption_config"} <= set(settings)
    assert plane.load_state(control.state_file)["etcd"] == settings

    control.create("/api/v1/namespaces/default/secrets", {"metadata": {"name": "sealed"}, "stringData": {"password": "hunter2"}})
    control.create("/api/v1/namespaces/default/configmaps", {"metadata": {"name": "open"}, "data": {"k": "v"}})
    assert control.etcd_value("/registry/secrets/default/sealed").startswith(b"k8s:enc:aescbc:v1:")
    assert control.etcd_value("/registry/configmaps/default/open").startswith(b"k8s\x00")

    with open(control.state_file) as handle:
        state = json.load(handle)
    assert state["endpoints"] == control.endpoints and state["kubeconfig"] == control.kubeconfig
    server = state["apiservers"][0]
    assert {"index", "release", "port", "pid", "log", "hostname"} <= set(server)
    assert server["endpoint"] == f"https://127.0.0.1:{server['port']}" and os.path.exists(server["log"])
    result = _cli(control.state_file, "stop", "--index", "0")
    assert result.returncode == 0, result.stderr
    assert not plane.alive(server["pid"], server["pid_start"])
    control.start_one(0)
    assert control.get("/api/v1/namespaces/default/secrets/sealed")["data"]["password"] == "aHVudGVyMg=="

    manager = control.start_controller_manager()
    root_ca = "/api/v1/namespaces/default/configmaps/kube-root-ca.crt"
    assert _wait_for(lambda: control.request("GET", root_ca)[0] == 200), "the controller manager publishes the root CA"
    seen = [*_pids(control), (manager.pid, plane.process_start(manager.pid))]
    control.close()
    assert not [pid for pid, start in seen if plane.alive(pid, start)]


CHILD = """
import sys, time
from realcp import ControlPlane
ControlPlane(sys.argv[1], releases=["1.32"]).start()
print("ready", flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill-then-reap"])
def test_no_process_outlives_its_test_process(tmp_path, signum):
    """SIGTERM: the test process's own handler stops the plane; SIGKILL: reap_leftovers does, later."""
    plane.require_assets("1.32")
    workdir = tmp_path / "plane"
    env = dict(os.environ, PYTHONPATH=plane.TESTS_DIR)
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(workdir)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        ready, _writable, _errors = select.select([child.stdout], [], [], 150)
        assert ready and child.stdout.readline() == b"ready\n", child.stderr.read1().decode() if child.poll() is not None else "no answer"
        state = plane.load_state(workdir / plane.STATE_NAME)
        pids = [(entry["pid"], entry["pid_start"]) for entry in [*state["apiservers"], state["etcd_process"]]]
        assert all(plane.alive(pid, start) for pid, start in pids)
        child.send_signal(signum)
        assert child.wait(timeout=60) == -signum
        if signum == signal.SIGKILL:
            assert plane.reap_leftovers(tmp_path) == 2
        assert _wait_for(lambda: not [pid for pid, start in pids if plane.alive(pid, start)], timeout=30)
    finally:
        child.kill()
        child.wait()
        plane.reap_leftovers(tmp_path)
