# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""storage_version_check: bad input gives one clear error; unreachable endpoints are unknown, never safe."""

from __future__ import annotations

from kube_fakes import unreachable
from kube_module_args import BASE_ARGS, ENDPOINTS

from ansible_collections.kubeupgrade.storage.plugins.modules import storage_version_check as module


def test_no_target_is_one_clear_error(run_module, fake_cluster):
    failed, result = run_module(module, BASE_ARGS)
    assert failed and "target_release" in result["msg"]


def test_release_without_profile_names_the_known_ones(run_module, fake_cluster):
    failed, result = run_module(module, {**BASE_ARGS, "target_release": "1.99"})
    assert failed and "1.99" in result["msg"] and "1.32" in result["msg"] and "profiles" in result["msg"]


def test_malformed_profile_is_one_clear_error(run_module, fake_cluster):
    failed, result = run_module(module, {**BASE_ARGS, "target_release": "1.33", "profiles": {"releases": {"1.40": {"bogus": 1}}}})
    assert failed and "profiles option" in result["msg"]


def test_missing_manifest_path_is_named(run_module, fake_cluster, tmp_path):
    failed, result = run_module(module, {**BASE_ARGS, "target_release": "1.33", "target_crds": [str(tmp_path / "nope.yaml")]})
    assert failed and "nope.yaml" in result["msg"] and "does not exist" in result["msg"]


def test_malformed_inline_manifest_is_named(run_module, fake_cluster):
    failed, result = run_module(module, {**BASE_ARGS, "target_release": "1.33", "target_crds": ["kind: Foo\nspec: [\n"]})
    assert failed and "target_crds #1" in result["msg"]


def test_unreachable_endpoint_is_unknown_and_fails_by_default(run_module, fake_cluster):
    for path in list(fake_cluster.routes[ENDPOINTS[1]]):
        fake_cluster.routes[ENDPOINTS[1]][path] = unreachable()
    args = {**BASE_ARGS, "target_release": "1.33", "resources": ["pods"]}
    failed, result = run_module(module, args)
    assert failed and result["verdict"] == "unknown" and ENDPOINTS[1] in result["msg"]
    assert ENDPOINTS[1] in [b["subject"] for b in result["blocking"]]
    assert result["resources"] and result["counts"]["unknown"] == 1 and result["report_markdown"]
    failed, result = run_module(module, {**args, "fail_on": ["unsafe"]}, check_mode=True)
    assert not failed and result["verdict"] == "unknown" and fake_cluster.writes() == []


def test_unreachable_target_endpoint_is_one_clear_error(run_module, fake_cluster):
    fake_cluster.routes["https://10.0.0.99:6443"] = {"/version": unreachable()}
    for path in ("/api", "/apis", "/readyz"):
        fake_cluster.routes["https://10.0.0.99:6443"][path] = unreachable()
    failed, result = run_module(module, {**BASE_ARGS, "target_endpoint": "https://10.0.0.99:6443"})
    assert failed and "10.0.0.99" in result["msg"] and "target_endpoint" in result["msg"]


def test_audit_that_is_not_an_audit_result_is_one_clear_error(run_module, fake_cluster):
    for audit in ("yes", {"summary": "x"}, {"resources": {}, "measured_at": "t", "failed": True}):
        failed, result = run_module(module, {**BASE_ARGS, "target_release": "1.33", "audit": audit})
        assert failed and result["msg"].startswith("audit"), result["msg"]
        assert fake_cluster.log == [], "a request was sent before the option was checked"


def test_accept_without_a_reason_is_refused_before_any_request(run_module, fake_cluster):
    failed, result = run_module(module, {**BASE_ARGS, "target_release": "1.33", "accept": {"secrets": ""}})
    assert failed and "accept" in result["msg"] and "needs a reason" in result["msg"]
    assert fake_cluster.log == []


def test_disagreeing_resources_are_returned_as_the_agreement_gate_sees_them(run_module, fake_cluster):
    args = {**BASE_ARGS, "target_release": "1.33", "fail_on": []}
    failed, result = run_module(module, args)
    assert not failed and result["disagreeing"] == [], result["disagreeing"]

    fake_cluster.serve_deployments_hash(ENDPOINTS[2], "zzzzzzzzzzz=")
    failed, result = run_module(module, args)
    assert not failed
    assert [d["resource"] for d in result["disagreeing"]] == ["deployments.apps"], result["disagreeing"]
    assert set(result["disagreeing"][0]["storage_versions"]) == set(ENDPOINTS)


def test_a_roll_position_outside_the_order_is_refused_before_any_request(run_module, fake_cluster):
    failed, result = run_module(module, {**BASE_ARGS, "target_release": "1.33", "upgrade_order": ENDPOINTS[:2],
                                         "upgrading": ENDPOINTS[2]})
    assert failed and "upgrading" in result["msg"] and "not in upgrade_order" in result["msg"]
    assert fake_cluster.log == []


def test_the_roll_position_says_which_earlier_host_is_not_done(run_module, fake_cluster):
    failed, result = run_module(module, {**BASE_ARGS, "target_release": "1.33", "fail_on": [],
                                         "upgrade_order": ENDPOINTS, "upgrading": ENDPOINTS[1]})
    assert not failed, result["msg"]
    # every fake apiserver runs 1.32: the first host of the roll is not on 1.33, so the second must not be touched
    assert result["roll"]["pending_before"] == [ENDPOINTS[0]] and not result["roll"]["done"]
    assert result["roll"]["msg"].startswith(f"not touching {ENDPOINTS[1]}")


def test_check_mode_blocks_as_a_real_run_except_what_skipped_writes_would_settle(run_module, fake_cluster):
    """A dry run of a gate fails when the gate would: only after earlier changes of the play (check_mode_after_changes)
    is every needs_migration/unknown held. The task's own refresh holds nothing (a record it creates says Unknown)."""
    args = {**BASE_ARGS, "target_release": "1.33", "resources": ["pods"]}
    real_failed, real = run_module(module, args)
    assert real_failed and real["blocking"][0]["verdict"] in ("unknown", "needs_migration"), real["msg"]
    failed, dry = run_module(module, args, check_mode=True)
    assert failed and dry["blocking"] == real["blocking"] and not dry.get("would_block"), dry["msg"]
    failed, refreshed = run_module(module, {**args, "refresh_records": True}, check_mode=True)
    assert [r["name"] for r in refreshed["records_refreshed"]["records"] if r["action"] != "unchanged"] == ["pods"]
    assert failed and not refreshed.get("would_block"), "a record the refresh would create says Unknown: still blocks"
    failed, after = run_module(module, {**args, "check_mode_after_changes": True}, check_mode=True)
    assert not failed and [w["subject"] for w in after["would_block"]] == ["pods"], after["msg"]
    assert "would block are reported, not blocking" in after["report_text"]
    assert fake_cluster.writes() == []
    for path in list(fake_cluster.routes[ENDPOINTS[1]]):
        fake_cluster.routes[ENDPOINTS[1]][path] = unreachable()
    failed, unread = run_module(module, {**args, "check_mode_after_changes": True}, check_mode=True)
    assert failed and ENDPOINTS[1] in [b["subject"] for b in unread["blocking"]], "an apiserver not read must block"


def test_the_roll_stops_on_a_pending_host_except_in_check_mode_and_on_an_unready_apiserver_always(run_module, fake_cluster):
    args = {**BASE_ARGS, "target_release": "1.33", "fail_on": [], "upgrade_order": ENDPOINTS, "upgrading": ENDPOINTS[1]}
    failed, result = run_module(module, args)
    assert not failed and result["roll"]["stop"] is True and result["roll"]["unready"] == []
    failed, result = run_module(module, args, check_mode=True)
    assert not failed and result["roll"]["stop"] is False, "check mode upgrades no host: a pending one does not stop it"
    for path in list(fake_cluster.routes[ENDPOINTS[2]]):
        fake_cluster.routes[ENDPOINTS[2]][path] = unreachable()
    failed, result = run_module(module, args, check_mode=True)
    assert result["roll"]["stop"] is True and result["roll"]["unready"] == [ENDPOINTS[2]]
    assert "not every apiserver is reachable and ready" in result["roll"]["msg"] and ENDPOINTS[2] in result["roll"]["msg"]
    assert result["unreachable_endpoints"] == [ENDPOINTS[2]]


def test_the_migration_before_a_roll_is_decided_from_the_verdict_releases_and_audit(run_module, fake_cluster):
    failed, result = run_module(module, {**BASE_ARGS, "target_release": "1.33", "resources": ["pods"], "fail_on": []})
    assert not failed and result["verdict"] != "safe" and result["releases"] == ["1.32"]
    assert result["migration"] == {"resources": True, "objects_from_audit": False, "why": ""}
    assert result["unreachable_endpoints"] == []


POD_V1 = "xPOwRZ+Yhw8="  # storage_version_hash("", "v1", "Pod"), as the recorded discovery reports it
AUDIT = {"changed": False, "keys_scanned": 3, "endpoint": "https://10.0.0.11:2379", "prefix": "/registry",
         "measured_at": "2026-11-21T14:00:00Z", "outside_layout": 0, "filtered_out": 0,
         "resources": {"pods": {"objects": 3, "hashes": [POD_V1], "unreadable": 0}}}


def test_with_an_audit_the_records_are_set_from_its_measurement(run_module, fake_cluster):
    """refresh_records with an audit sets each record from what etcd holds, as storage_state with audit does: one task
    instead of two after an audit."""
    args = {**BASE_ARGS, "target_release": "1.33", "resources": ["pods"], "fail_on": [], "refresh_records": True}
    failed, observed = run_module(module, args, check_mode=True)
    assert not failed and "records_refreshed" in observed
    failed, result = run_module(module, {**args, "audit": AUDIT}, check_mode=True)
    assert not failed, result["msg"]
    pods = {r["name"]: r for r in result["records_refreshed"]["records"]}["pods"]
    assert pods["action"] == "created" and pods["after"]["status"]["persistedStorageVersionHashes"] == [POD_V1]
    assert pods["after"]["measured_at"] == AUDIT["measured_at"], "set from the audit, not from the observation"
    assert not any(r.get("measured_at") for r in observed["records_refreshed"]["records"])
    assert result["migration"]["objects_from_audit"] is (result["verdict"] != "safe")
    assert fake_cluster.writes() == []


def test_target_running_release_judges_the_release_the_apiservers_run(run_module, fake_cluster):
    args = {**BASE_ARGS, "resources": ["pods"], "fail_on": []}
    failed, result = run_module(module, args)
    assert failed and "Nothing to check against" in result["msg"]
    failed, result = run_module(module, {**args, "target_running_release": True})
    assert not failed, result["msg"]
    assert "Storage pre-flight for 1.32" in result["report_markdown"]
    assert [r["target_source"] for r in result["resources"]] == ["the Kubernetes 1.32 release profile (shipped)"]
    failed, named = run_module(module, {**args, "target_running_release": True, "target_release": "1.33"})
    assert [r["target_source"] for r in named["resources"]] == ["the Kubernetes 1.33 release profile (shipped)"]
    for url in ENDPOINTS:
        for path in list(fake_cluster.routes[url]):
            fake_cluster.routes[url][path] = unreachable()
    failed, result = run_module(module, {**args, "target_running_release": True})
    assert failed and "target_running_release: no apiserver reported its release" in result["msg"]
