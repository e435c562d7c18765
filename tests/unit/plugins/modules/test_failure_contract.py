# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The failure contract is literal: every key a module documents as ``returned: always`` is in its result when it
fails too, so a role can test a returned field and never a missing one."""

from __future__ import annotations

import importlib

import pytest
import yaml
from kube_module_args import BASE_ARGS

MODULE_PACKAGE = "ansible_collections.kubeupgrade.storage.plugins.modules"
NOT_A_KUBECONFIG = {"clusters": 5}  # refused before any request
# Each module, with arguments that make it fail before it reads anything.
FAILING = {
    "storage_version_info": {**BASE_ARGS, "kubeconfig": NOT_A_KUBECONFIG},
    "storage_version_check": {**BASE_ARGS, "target_release": "1.33", "kubeconfig": NOT_A_KUBECONFIG},
    "storage_state": {**BASE_ARGS, "kubeconfig": NOT_A_KUBECONFIG},
    "storage_version_agreement": {**BASE_ARGS, "timeout": 0, "kubeconfig": NOT_A_KUBECONFIG},
    "storage_migration": {**BASE_ARGS, "resources": ["configmaps"], "kubeconfig": NOT_A_KUBECONFIG},
    "storage_version_audit": {"etcd_endpoints": ["https://127.0.0.1:1"], "etcd_request_timeout": 1},
    "storage_version_hash": {"resource": "deployments.apps", "release": "9.99"},
    "storage_rehearsal": {"apiserver_binary": "/nonexistent/kube-apiserver"},
    "storage_snapshot": {"dest": "/nonexistent/dir/snapshot.db", "verify": "checksum"},
}


def always_keys(module) -> set:
    returns = yaml.safe_load(module.RETURN) or {}
    return {key for key, spec in returns.items() if isinstance(spec, dict) and spec.get("returned") == "always"}


@pytest.mark.parametrize("name", sorted(FAILING))
def test_a_failed_run_returns_every_key_documented_as_always(run_module, name):
    module = importlib.import_module(f"{MODULE_PACKAGE}.{name}")
    args = {k: v for k, v in FAILING[name].items() if k not in ("host", "api_key")} if "kubeconfig" in FAILING[name] \
        else FAILING[name]
    failed, result = run_module(module, args)
    assert failed, f"{name} did not fail: the test would prove nothing"
    missing = always_keys(module) - set(result)
    assert not missing, f"{name} failed without its always-returned keys {sorted(missing)}: {result.get('msg')}"
