# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The test fixtures' own races, which other tests running on the machine at the same time can trigger: a port taken
between its pick and etcd's bind, and mounts other tests make while a kubeadm node compares the host's."""

from __future__ import annotations

import socket

import etcd_fixture
import pytest
from kubeadm_node import _on_host_paths


def test_a_port_taken_before_etcd_binds_it_is_picked_again_and_fixed_ports_are_not(tmp_path, monkeypatch):
    etcd_fixture.require_etcd()
    pick = etcd_fixture.free_port
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        picks = iter([taken, pick()])  # the first pick is a port another process holds
        monkeypatch.setattr(etcd_fixture, "free_port", lambda: next(picks, None) or pick())
        server = etcd_fixture.EtcdServer(tmp_path / "picked")
        assert server.port == taken
        with server:
            assert server.port != taken and server.url.endswith(f":{server.port}")
            server.put("/registry/k", b"v")
            assert server.range_prefix("/registry/k") == [(b"/registry/k", b"v")]
        with pytest.raises(RuntimeError, match="etcd exited"):
            etcd_fixture.EtcdServer(tmp_path / "fixed", ports=(taken, pick())).start()


@pytest.mark.parametrize("point, compared", [
    ("/etc/kubernetes", True), ("/var/lib/kubelet", True), ("/var/lib/kubelet/pods/p/volumes/v", True),
    ("/run/containerd/io.containerd.runtime.v2.task/k8s.io/c/rootfs", True),
    ("/etc/kubernetes-other", False), ("/tmp/pytest-of-root/pytest-1/test0/small", False), ("/", False),
])
def test_a_node_compares_only_the_mounts_on_its_host_paths(point, compared):
    assert _on_host_paths(point) is compared
