# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""storage_migration objects_from_audit: checked before any request; nothing listed, no request; check mode."""

from __future__ import annotations

import pytest
from kube_module_args import BASE_ARGS

from ansible_collections.kubeupgrade.storage.plugins.modules import storage_migration as module


def audit(names, not_readable=None):
    entry = {"objects": 5, "judged": True, "readable_versions": ["v1"], "unreadable": 0, "unreadable_names": [],
             "versions": [{"api_version": "apps/v1", "kind": "Deployment", "count": 5 - len(names), "hash": "8aSe+NMegvE="}],
             "not_readable": len(names) if not_readable is None else not_readable, "not_readable_names": names}
    return {"changed": False, "keys_scanned": 9, "endpoint": "http://127.0.0.1:2379", "measured_at": "2026-11-21T14:00:00Z",
            "not_readable": entry["not_readable"], "resources": {"deployments.apps": entry}}


@pytest.mark.parametrize("args, needle", [
    pytest.param({"objects_from_audit": "{{ audit }}"}, "objects_from_audit must be a dict", id="unrendered"),
    pytest.param({"objects_from_audit": {"failed": True}}, "failed or skipped", id="failed-audit"),
    pytest.param({"objects_from_audit": audit(["a/web"], not_readable=40)}, "first names of deployments.apps",
                 id="truncated"),
    pytest.param({"objects_from_audit": audit([]), "select": "from_records"}, "cannot be combined with select",
                 id="with-select"),
    pytest.param({"objects_from_audit": audit([]), "backend": "intree"}, "backend: client", id="cluster-side-backend"),
])
def test_bad_objects_from_audit_fails_before_any_request(run_module, fake_cluster, args, needle):
    failed, result = run_module(module, {**BASE_ARGS, **args})
    assert failed and needle in result["msg"], result["msg"]
    assert fake_cluster.log == []


def test_nothing_listed_makes_no_request(run_module, fake_cluster):
    failed, result = run_module(module, {**BASE_ARGS, "objects_from_audit": audit([])})
    assert not failed and not result["changed"] and result["migrations"] == []
    assert "Nothing to migrate" in result["msg"]
    assert fake_cluster.log == []


def test_check_mode_names_the_resource_and_how_many_objects(run_module, fake_cluster):
    failed, result = run_module(module, {**BASE_ARGS, "objects_from_audit": audit(["a/web", "b/api"])}, check_mode=True)
    assert not failed, result["msg"]
    assert [(m["resource"], m["objects_from_audit"], m["status"]) for m in result["migrations"]] == [
        ("deployments.apps", 2, "would_migrate")]
    assert fake_cluster.writes() == []


def test_refresh_records_sets_every_record_but_the_rewritten_ones_from_the_audit(run_module, fake_cluster):
    """The migrate role's rewrite sets the records too: those it rewrites are the migration's ([current] once done),
    every other one is the audit's (what storage_state with audit would write), here planned in check mode."""
    listed = audit(["a/web", "b/api"])
    failed, result = run_module(module, {**BASE_ARGS, "objects_from_audit": listed, "refresh_records": True},
                                check_mode=True)
    assert not failed, result["msg"]
    assert [(m["resource"], m["status"]) for m in result["migrations"]] == [("deployments.apps", "would_migrate")]
    planned = {r["name"]: r for r in result["records_refreshed"]["records"]}
    assert "deployments.apps" not in planned and planned, "the rewrite's record, not the audit's"
    assert {r["after"].get("measured_at") for r in planned.values()} == {listed["measured_at"]}
    assert "records_not_current" not in result, "check mode writes no record, so it cannot say what is left"
    assert fake_cluster.writes() == []


def test_refresh_records_with_nothing_listed_still_sets_the_records_from_the_audit(run_module, fake_cluster):
    """A second run finds nothing to rewrite, and its audit is still the measurement the records are set from."""
    listed = audit([])
    failed, result = run_module(module, {**BASE_ARGS, "objects_from_audit": listed, "refresh_records": True},
                                check_mode=True)
    assert not failed and "Nothing to migrate" in result["msg"] and result["migrations"] == []
    planned = {r["name"]: r for r in result["records_refreshed"]["records"]}
    assert planned["deployments.apps"]["after"]["measured_at"] == listed["measured_at"]
    assert planned["deployments.apps"]["action"] == "created" and result["changed"] is True
    assert fake_cluster.writes() == []
