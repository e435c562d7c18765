# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Connection arguments and each module's smallest arguments, which the module unit tests share (kept out of
conftest.py: several conftests exist)."""

import importlib

HOST = "https://10.0.0.10:6443"
ENDPOINTS = ["https://10.0.0.11:6443", "https://10.0.0.12:6443", "https://10.0.0.13:6443"]
BASE_ARGS = {"host": HOST, "api_key": "secret-token", "validate_certs": False, "endpoints": ENDPOINTS}

MODULE_PACKAGE = "ansible_collections.kubeupgrade.storage.plugins.modules"
# Every module: (talks to a cluster, the smallest arguments its own required options need: a cluster module's would
# otherwise make it send requests).
MODULES = {
    "storage_version_info": (True, {}),
    "storage_version_check": (True, {"target_release": "1.33"}),
    "storage_state": (True, {}),
    "storage_version_agreement": (True, {"timeout": 0}),
    "storage_migration": (True, {"resources": ["configmaps"]}),
    "storage_version_audit": (False, {"etcd_endpoints": ["https://127.0.0.1:1"]}),
    "storage_version_hash": (False, {"resource": "deployments.apps", "release": "1.33"}),
    "storage_rehearsal": (False, {"apiserver_binary": "/nonexistent/kube-apiserver"}),
    "storage_snapshot": (False, {"dest": "/nonexistent/dir/snapshot.db", "verify": "checksum"}),
}
CLUSTER_MODULES = sorted(name for name, (cluster, _args) in MODULES.items() if cluster)


def module(name):
    """The module ``name`` of the collection, imported."""
    return importlib.import_module(f"{MODULE_PACKAGE}.{name}")
