# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every verdict's next step, followed, clears the verdict (the README's verdict table, as a test).

Modules run in-process against the simulated control plane (three apiservers on 1.32 with the demo
data); each case makes the check block, does exactly what its next step says, and checks again.
``removed`` and ``unsafe`` with stored objects (delete them) are followed through ``upgrade.yml`` in
``test_fail_closed.py``.
"""

from __future__ import annotations

import pytest

from ansible_collections.kubeupgrade.storage.plugins.modules import storage_migration, storage_state, storage_version_check

WIDGETS = "widgets.example.com"
# The application's next widgets CRD: v1 only (the cluster still lists v1alpha1 in storedVersions).
WIDGETS_V1_ONLY = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": WIDGETS},
    "spec": {"group": "example.com", "scope": "Namespaced",
             "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
             "versions": [{"name": "v1", "served": True, "storage": True,
                           "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]},
}


@pytest.fixture
def plane(control_plane):
    control_plane.admin.seed("demo")
    return control_plane


def check(run, plane, **extra):
    _failed, result = run(storage_version_check, plane.module_args(target_release="1.32", **extra))
    return result, {b["subject"]: b for b in result["blocking"]}


def migrate(run, plane, *names):
    failed, result = run(storage_migration, plane.module_args(resources=list(names), backend="client", timeout=60))
    assert not failed, result["msg"]


def test_unknown_record_cleared_by_migrating(run, plane):
    run(storage_state, plane.module_args())  # fresh records: [Unknown, current]
    _result, blocking = check(run, plane, resources=["configmaps"])
    assert blocking["configmaps"]["verdict"] == "unknown" and "migrate configmaps" in blocking["configmaps"]["next_step"]
    migrate(run, plane, "configmaps")
    result, blocking = check(run, plane, resources=["configmaps"])
    assert blocking == {} and result["resources"][0]["verdict"] == "safe"


def test_needs_migration_cleared_by_migrating(run, plane):
    run(storage_state, plane.module_args())
    _result, blocking = check(run, plane, resources=[WIDGETS], target_crds=[WIDGETS_V1_ONLY])
    assert blocking[WIDGETS]["verdict"] == "needs_migration" and "storedVersions" in blocking[WIDGETS]["next_step"]
    migrate(run, plane, WIDGETS)
    result, blocking = check(run, plane, resources=[WIDGETS], target_crds=[WIDGETS_V1_ONLY])
    assert blocking == {} and result["resources"][0]["verdict"] == "safe", result["msg"]


def test_unreachable_apiserver_cleared_by_bringing_it_back(run, plane):
    run(storage_state, plane.module_args())
    migrate(run, plane, "configmaps")
    plane.admin.stop(2)
    _result, blocking = check(run, plane, resources=["configmaps"])
    assert list(blocking) == [plane.endpoints[2]] and "agreement" in blocking[plane.endpoints[2]]["reason"]
    assert "reachable" in blocking[plane.endpoints[2]]["next_step"]
    plane.admin.start(2)
    result, blocking = check(run, plane, resources=["configmaps"])
    assert blocking == {} and result["findings"] == []


def test_failed_group_discovery_cleared_when_it_answers(run, plane):
    run(storage_state, plane.module_args())
    migrate(run, plane, "configmaps", "deployments.apps")
    plane.admin.fault("status", apiserver=1, code=503, path_regex="^/apis/apps/v1$")
    result, blocking = check(run, plane, resources=["configmaps", "deployments.apps"])
    assert set(blocking) == {"apps/v1", "deployments.apps"}, blocking  # only the apps group, nothing else
    assert {r["resource"]: r["verdict"] for r in result["resources"]}["configmaps"] == "safe"
    assert "/apis/apps/v1" in blocking["apps/v1"]["next_step"]
    plane.admin.clear_faults()
    _result, blocking = check(run, plane, resources=["configmaps", "deployments.apps"])
    assert blocking == {}
