# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""storage_version_audit: every bad option fails once, clearly, before any request; unreachable etcd too."""

from __future__ import annotations

import socket

import pytest

from ansible_collections.kubeupgrade.storage.plugins.modules import storage_version_audit as module


def _dead_endpoint() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture
def files(tmp_path):
    (tmp_path / "ca.crt").write_text("not checked before a request\n")
    (tmp_path / "enc.yaml").write_text("kind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n"
                                       "  - aescbc:\n      keys:\n      - name: k1\n        secret: c2hvcnQ=\n")
    (tmp_path / "notyaml.yaml").write_text("a: [b\n")
    return tmp_path


@pytest.mark.parametrize("args, message", [
    ({}, "missing required arguments: etcd_endpoints"),
    ({"etcd_endpoints": []}, "etcd_endpoints is empty"),
    ({"etcd_endpoints": ["127.0.0.1:2379"]}, "'127.0.0.1:2379' is not an etcd client URL"),
    ({"etcd_endpoints": ["https://127.0.0.1:2379/v3"]}, "is not an etcd client URL"),
    ({"etcd_endpoints": ["https://127.0.0.1:2379"], "etcd_ca_cert": "/nonexistent/ca.crt"}, "etcd_ca_cert: /nonexistent/ca.crt does not exist"),
    ({"etcd_endpoints": ["https://127.0.0.1:2379"], "etcd_client_cert": "{tmp}/ca.crt"}, "must be given together"),
    ({"etcd_endpoints": ["https://127.0.0.1:2379"], "page_size": 20000}, "'page_size' must be at most 10000"),
    ({"etcd_endpoints": ["https://127.0.0.1:2379"], "pages_per_second": -0.5}, "'pages_per_second' must not be negative"),
    ({"etcd_endpoints": ["https://127.0.0.1:2379"], "burst_pages": -1}, "'burst_pages' must not be negative"),
    ({"etcd_endpoints": ["https://127.0.0.1:2379"], "etcd_request_timeout": 0}, "'etcd_request_timeout' must be above 0"),
    ({"etcd_endpoints": ["https://127.0.0.1:2379"], "names_limit": -5}, "'names_limit' must be at least -1"),
    ({"etcd_endpoints": ["https://127.0.0.1:2379"], "etcd_prefix": "//"}, "etcd_prefix must name"),
    ({"etcd_endpoints": ["https://127.0.0.1:2379"], "target_release": "0.1"}, "no release profile for Kubernetes"),
    ({"etcd_endpoints": ["https://127.0.0.1:2379"], "readable_versions": {"pods": [1]}}, "readable_versions[pods] must be a version or a list"),
    ({"etcd_endpoints": ["https://127.0.0.1:2379"], "encryption_config": "{tmp}/enc.yaml"}, "aescbc.keys[0].secret has 5 bytes"),
    ({"etcd_endpoints": ["https://127.0.0.1:2379"], "encryption_config": "{tmp}/notyaml.yaml"}, "is not a readable YAML file"),
    ({"etcd_endpoints": ["https://127.0.0.1:2379"], "encryption_config": "{tmp}/ca.crt"}, "not an EncryptionConfiguration"),
])
def test_bad_options(run_module, files, args, message):
    args = {k: (v.format(tmp=files) if isinstance(v, str) else v) for k, v in args.items()}
    failed, result = run_module(module, args)
    assert failed and message in result["msg"], result
    assert "Unexpected internal error" not in result["msg"]
    assert "c2hvcnQ=" not in str(result)


@pytest.mark.parametrize("check_mode", [False, True])
def test_unreachable_endpoint_fails_once_naming_it(run_module, check_mode):
    dead = _dead_endpoint()
    failed, result = run_module(module, {"etcd_endpoints": [dead], "etcd_request_timeout": 2}, check_mode=check_mode)
    assert failed and f"etcd at {dead} is unreachable" in result["msg"] and result["error"]["endpoint"] == dead
