# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run ansible-playbook the way an operator does, and read its recap.

Integration tests assert on the cluster's state afterwards (through the simulator's admin
interface); the recap is only used for "changed=0 on a second run" style checks.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import etcd_fixture
import pytest
import real_cluster

REPO = Path(__file__).resolve().parents[2]
RECAP = re.compile(r"^(?P<host>\S+)\s+:\s+(?P<counts>(?:\w+=\d+\s*)+)$")


def collections_path() -> str:
    """``collections/ansible_collections/kubeupgrade/storage`` must point at this checkout."""
    root = REPO / "collections"
    link = root / "ansible_collections" / "kubeupgrade" / "storage"
    if not link.exists():
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(REPO)
    return str(root)


@dataclass
class PlaybookRun:
    rc: int
    stdout: str
    stderr: str
    recap: dict = field(default_factory=dict)

    @property
    def changed_total(self) -> int:
        return sum(counts.get("changed", 0) for counts in self.recap.values())

    @property
    def failed_total(self) -> int:
        return sum(counts.get("failed", 0) + counts.get("unreachable", 0) for counts in self.recap.values())


def parse_recap(stdout: str) -> dict:
    recap, in_recap = {}, False
    for line in stdout.splitlines():
        if line.startswith("PLAY RECAP"):
            in_recap, recap = True, {}
            continue
        match = RECAP.match(line.strip()) if in_recap else None
        if match:
            recap[match.group("host")] = {k: int(v) for k, v in (kv.split("=") for kv in match.group("counts").split())}
    return recap


def run_playbook(playbook, inventory=None, extra_vars=None, check=False, diff=False, tags=None, env=None, timeout=900) -> PlaybookRun:
    """Run ``ansible-playbook`` with this checkout as the collection and the test Python as interpreter."""
    cmd = [str(Path(sys.executable).with_name("ansible-playbook")), str(playbook)]
    cmd += ["-i", str(inventory) if inventory else "localhost,"]
    if extra_vars:
        cmd += ["-e", json.dumps(extra_vars)]
    cmd += ["-e", json.dumps({"ansible_python_interpreter": sys.executable})]
    if "kubeupgrade_apiserver_manifest" not in (extra_vars or {}):
        # This machine's /etc/kubernetes is the kubeadm node's while its test runs: no other run may take it for its
        # cluster's manifest (the pre-flight's default rehearsal would rehearse on that node's etcd).
        cmd += ["-e", json.dumps({"kubeupgrade_apiserver_manifest": ""})]
    if check:
        cmd.append("--check")
    if diff:
        cmd.append("--diff")
    if tags:
        cmd += ["--tags", tags]
    run_env = dict(os.environ)
    run_env.update({
        "ANSIBLE_COLLECTIONS_PATH": collections_path(),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_RETRY_FILES_ENABLED": "0",
        "ANSIBLE_HOST_KEY_CHECKING": "0",
        "ANSIBLE_LOCALHOST_WARNING": "0",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0",
    })
    run_env.update(env or {})
    proc = subprocess.run(cmd, capture_output=True, text=True, env=run_env, cwd=str(REPO), timeout=timeout, check=False)
    return PlaybookRun(proc.returncode, proc.stdout, proc.stderr, parse_recap(proc.stdout))


@pytest.fixture
def ansible_playbook():
    """``ansible_playbook(playbook, inventory=None, extra_vars=None, check=False, ...) -> PlaybookRun``."""
    return run_playbook


@pytest.fixture
def sim(tmp_path):
    """A running simulated control plane for playbook runs: three apiservers on 1.32 with the demo data."""
    from apisim.harness import ControlPlane
    from test_playbooks_helpers import TLS

    if real_cluster.real_kubeconfig():
        pytest.skip(real_cluster.NEEDS_ADMIN)

    plane = ControlPlane(tmp_path / "plane", apiservers=3, releases="1.32", tls=TLS, seed="demo")
    plane.start()
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture
def run(capsys):
    """``run(module, args, check_mode=False) -> (failed, result)``: a module in-process, as Ansible calls it."""
    from ansible.module_utils.testing import patch_module_args  # ansible-core 2.19+, the oldest supported

    def call(module, args, check_mode=False):
        args = dict(args)
        if check_mode:
            args["_ansible_check_mode"] = True
        with patch_module_args(args), pytest.raises(SystemExit):
            module.main()
        result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert "exception" not in result, result.get("exception")
        return bool(result.get("failed")), result

    return call


@pytest.fixture
def real_cluster_kubeconfig():
    """A real cluster's kubeconfig, when the run was given one (``KUBEUPGRADE_TEST_KUBECONFIG``)."""
    return real_cluster.real_kubeconfig()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """The cluster of the real-cluster-capable tests: ``KUBEUPGRADE_TEST_KUBECONFIG``'s, else one
    simulated control plane (three apiservers on 1.32) shared by the test module."""
    kubeconfig = real_cluster.real_kubeconfig()
    if kubeconfig:
        yield real_cluster.connect(kubeconfig)
        return
    from apisim.harness import ControlPlane
    from test_playbooks_helpers import TLS

    plane = ControlPlane(tmp_path_factory.mktemp("cluster"), apiservers=3, releases="1.32", tls=TLS)
    plane.start()
    try:
        yield real_cluster.connect(plane.kubeconfig, plane.endpoints, simulated=True)
    finally:
        plane.stop()


@pytest.fixture
def sandbox(cluster):
    """A namespace and a CRD group of this test's own on ``cluster``, deleted afterwards."""
    box = real_cluster.Sandbox(cluster)
    try:
        yield box
    finally:
        box.cleanup()


@pytest.fixture
def etcd_plain(tmp_path):
    """Debian's etcd on loopback, plain HTTP, in this test's directory; stopped at teardown."""
    yield from etcd_fixture.serve(tmp_path / "etcd")


@pytest.fixture
def etcd_tls(tmp_path):
    """The same etcd serving TLS, with client certificates."""
    yield from etcd_fixture.serve(tmp_path / "etcd", tls=True)


@pytest.fixture
def containerd(tmp_path):
    """A private containerd (its own root, state and socket; no CRI), stopped at teardown."""
    from containerd_images import Containerd, missing_requirements

    missing = missing_requirements()
    if missing:
        reason = f"a private containerd cannot run here, missing: {'; '.join(missing)}"
        if os.environ.get("CI") == "true" or os.environ.get("KUBEUPGRADE_TEST_REQUIRE_CONTAINERD"):
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    daemon = Containerd(tmp_path / "containerd", tmp_path / "containerd.log")
    try:
        yield daemon.start()
    finally:
        daemon.stop()
