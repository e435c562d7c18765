# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A module SIGKILLed while it talks to an apiserver leaves no kubeconfig key behind (SIGKILL skips atexit).

The module runs as Ansible runs it, in its own process, with a kubeconfig whose user has ``client-key-data`` (on
kubeadm, admin.conf's key is cluster-admin); a slow apiserver holds it until it is killed. Its temporary directory is
searched for the key's bytes while it runs, after the kill, and after the next run of a module: with a memory file
(nothing on disk), without one (the private directory, removed by the next run), and through the kubernetes loaders (a
kubeconfig with an exec plugin: their files go to the same private directory).
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time

import pytest

MODULE_PACKAGE = "ansible_collections.kubeupgrade.storage.plugins.modules"
# Python without os.memfd_create (not Linux, or a sandbox that forbids it): the fallback, a private directory.
NO_MEMFD = "import os, runpy; del os.memfd_create; runpy.run_module({module!r}, run_name='__main__')"


def _holding(root, needle: bytes):
    """Every file under ``root`` whose content holds ``needle``."""
    found = []
    for directory, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(directory, name)
            try:
                with open(path, "rb") as handle:
                    if needle in handle.read():
                        found.append(path)
            except OSError:
                pass
    return found


def _run(argv, args, tmp):
    env = dict(os.environ, TMPDIR=str(tmp), PYTHONPATH=os.pathsep.join(sys.path))
    process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    process.stdin.write(json.dumps({"ANSIBLE_MODULE_ARGS": args}).encode())
    process.stdin.close()
    return process


def _exec_plugin(token: str) -> dict:
    """A kubeconfig exec credential plugin giving ``token``: such a kubeconfig goes through the kubernetes loaders."""
    status = {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "status": {"token": token}}
    return {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
            "args": ["-c", f"print({json.dumps(json.dumps(status))})"], "interactiveMode": "Never"}


@pytest.mark.parametrize("how", ["memory-file", "private-directory", "kubernetes-loader"])
def test_a_killed_module_leaves_no_client_key_after_the_next_run(control_plane_factory, tmp_path, how):
    plane = control_plane_factory(apiservers=1, releases="1.32", tls=True)
    pki = os.path.dirname(plane.ca_file)
    with open(os.path.join(pki, "server.key"), "rb") as handle:
        key = handle.read()  # a key and certificate that match: the client loads them (the simulator asks for none)
    with open(os.path.join(pki, "server.crt"), "rb") as handle:
        cert = handle.read()
    with open(plane.kubeconfig, encoding="utf-8") as handle:
        kubeconfig = json.load(handle)
    kubeconfig["users"][0]["user"].update({"client-certificate-data": base64.b64encode(cert).decode(),
                                           "client-key-data": base64.b64encode(key).decode()})
    if how == "kubernetes-loader":
        user = kubeconfig["users"][0]["user"]
        user["exec"] = _exec_plugin(user.pop("token"))
    args = {"kubeconfig": kubeconfig, "endpoints": plane.endpoints, "request_timeout": 120}
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    module = f"{MODULE_PACKAGE}.storage_version_info"
    plane.admin.fault("slow", delay=120)
    plane.admin.reset_stats()  # the harness's readiness probes counted

    memfd = how == "memory-file"
    argv = [sys.executable, "-c", NO_MEMFD.format(module=module)] if how == "private-directory" else [sys.executable, "-m", module]
    killed = _run(argv, args, tmp)
    try:
        deadline = time.monotonic() + 60
        while not plane.admin.stats()["apiservers"][0]["requests"]:
            assert killed.poll() is None, killed.stderr.read().decode()
            assert time.monotonic() < deadline, "the module sent no request"
            time.sleep(0.05)
        held = _holding(tmp, key)
        if memfd:
            assert held == []  # in memory only
        else:
            assert len(held) == 1 and os.path.basename(os.path.dirname(held[0])).startswith("kubeupgrade-keys-"), held
            assert os.stat(os.path.dirname(held[0])).st_mode & 0o777 == 0o700
    finally:
        killed.send_signal(signal.SIGKILL)
        killed.wait(30)
        killed.stdout.close()
        killed.stderr.close()
    assert len(_holding(tmp, key)) == (0 if memfd else 1)  # the private directory outlives a SIGKILL ...

    plane.admin.clear_faults()
    following = _run([sys.executable, "-m", module], dict(args, request_timeout=30), tmp)
    assert following.wait(120) == 0, (following.stdout.read(), following.stderr.read())
    following.stdout.close()
    following.stderr.close()
    assert _holding(tmp, key) == []  # ... until the next run of a module
    assert sorted(p.name for p in tmp.iterdir()) == []
