# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Shared helpers of the playbook and scenario tests (no tests here).

A fresh simulated control plane per test (three apiservers on 1.32, seeded with the demo data),
the playbook runner's common arguments, and readers of the cluster's state through the admin
interface: every stored object with the version it is encoded in, StorageState records, CRD
storedVersions, and reads through each apiserver endpoint.
"""

from __future__ import annotations

import json
import os
import ssl
import sys
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "simulator"))


PLAYBOOKS = REPO / "playbooks"
INVENTORY = REPO / "tests" / "integration" / "inventories" / "simulator.yml"
DEMO_UPGRADE_TASKS = str(REPO / "demo" / "upgrade_apiserver.yml")
DEMO_ROLLBACK_TASKS = str(REPO / "demo" / "rollback_apiserver.yml")
TLS = os.environ.get("KUBEUPGRADE_TEST_SIMULATOR_TLS", "1") == "1"

# What the scenario is about: 1.32 -> 1.33 moves LeaseCandidates from v1alpha2 to v1beta1.
LEASECANDIDATES = "leasecandidates.coordination.k8s.io"
HASH_V1ALPHA2 = "RuOD9aJW3DI="  # storageVersionHash(coordination.k8s.io, v1alpha2, LeaseCandidate)
HASH_V1BETA1 = "lvME0iHWE20="  # storageVersionHash(coordination.k8s.io, v1beta1, LeaseCandidate)

# The seeded data whose storage must never change content.
DATA_RESOURCES = ["configmaps", "secrets", "deployments.apps", "widgets.example.com", LEASECANDIDATES]
STORAGE_STATES = "storagestates.migration.k8s.io"
CRDS = "customresourcedefinitions.apiextensions.k8s.io"

# Short gate settings so a disagreement fails quickly in tests.
FAST = {
    "kubeupgrade_agreement_polls": 2,
    "kubeupgrade_agreement_interval": 1,
    "kubeupgrade_agreement_timeout": 3,
    "kubeupgrade_agreement_attempts": 2,
    "kubeupgrade_wait_retries": 10,
    "kubeupgrade_wait_delay": 1,
    # The in-tree backend of the simulator fails some resources ("resource not found"): use the
    # client-side migrator, which works on any cluster.
    "kubeupgrade_migrate_backend": "client",
}


def playbook_vars(plane, tmp_path, **extra):
    """Extra vars every run needs: where the simulator is, where reports go, fast gates, demo host tasks."""
    values = {
        "kubeupgrade_demo_state_file": os.path.join(plane.workdir, "control-plane.json"),
        "kubeupgrade_report_dir": str(tmp_path / "reports"),
        "kubeupgrade_target_release": "1.33",
        "kubeupgrade_host_upgrade_tasks": DEMO_UPGRADE_TASKS,
        "kubeupgrade_host_rollback_tasks": DEMO_ROLLBACK_TASKS,
    }
    values.update(FAST)
    values.update(extra)
    return values


def run(ansible_playbook, name, plane, tmp_path, check=False, **extra):
    result = ansible_playbook(PLAYBOOKS / name, inventory=INVENTORY, extra_vars=playbook_vars(plane, tmp_path, **extra),
                              check=check)
    return result


def explain(result):
    """The end of a playbook run, for assertion messages."""
    return f"rc={result.rc}\n{result.stdout[-6000:]}\n{result.stderr[-2000:]}"


def snapshot(plane, resources=None):
    """{resource: {(namespace, name): (encoded_version, resource_version, object)}} from the store."""
    resources = DATA_RESOURCES if resources is None else resources
    return {
        resource: {(o["namespace"], o["name"]): (o["encoded_version"], o["resource_version"], o["object"])
                   for o in plane.admin.stored_objects(resource)}
        for resource in resources
    }


def content(obj):
    """An object's content without the fields a storage rewrite may legitimately change."""
    obj = json.loads(json.dumps(obj))
    obj.pop("apiVersion", None)
    obj.pop("kind", None)
    meta = obj.get("metadata", {})
    for key in ("resourceVersion", "managedFields", "generation"):
        meta.pop(key, None)
    return obj


def assert_content_unchanged(before, after):
    for resource, objects in before.items():
        assert set(after[resource]) == set(objects), f"{resource}: objects appeared or disappeared"
        for key, (_version, _rv, obj) in objects.items():
            assert content(after[resource][key][2]) == content(obj), f"{resource} {key}: content changed"


def encodings(plane, resource):
    return {o["encoded_version"] for o in plane.admin.stored_objects(resource)}


def storage_state(plane, resource):
    for obj in plane.admin.stored_objects(STORAGE_STATES):
        if obj["name"] == resource:
            return obj["object"].get("status", {})
    return None


def crd_stored_versions(plane, name):
    for obj in plane.admin.stored_objects(CRDS):
        if obj["name"] == name:
            return obj["object"].get("status", {}).get("storedVersions")
    return None


def releases(plane):
    return [s["release"] for s in plane.admin.status()]


def get(plane, endpoint, path):
    """GET through one apiserver endpoint with the admin token; returns (status, body)."""
    request = urllib.request.Request(endpoint + path, headers={"Authorization": f"Bearer {plane.token}"})
    context = ssl.create_default_context(cafile=plane.ca_file) if endpoint.startswith("https") else None
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def assert_readable_everywhere(plane):
    """Every apiserver serves every seeded object (LeaseCandidates through v1alpha2, served by 1.32 and 1.33)."""
    paths = [
        "/api/v1/namespaces/demo/configmaps",
        "/api/v1/namespaces/demo/secrets",
        "/apis/apps/v1/namespaces/demo/deployments",
        "/apis/example.com/v1/namespaces/demo/widgets",
        "/apis/coordination.k8s.io/v1alpha2/namespaces/kube-system/leasecandidates",
    ]
    for endpoint in plane.endpoints:
        for path in paths:
            status, body = get(plane, endpoint, path)
            assert status == 200, f"{endpoint}{path}: HTTP {status}: {body}"
            assert body.get("items"), f"{endpoint}{path}: no items"
