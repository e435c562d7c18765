# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""storage_version_check offline: no connection needed, no request sent; unreachable apiservers accepted still block."""

from __future__ import annotations

import pytest
from kube_fakes import unreachable
from kube_module_args import BASE_ARGS, ENDPOINTS
from test_judge_offline import CANNOT_DECODE, MIXED, audit_of

from ansible_collections.kubeupgrade.storage.plugins.modules import storage_version_check as module


def test_offline_needs_no_connection_and_sends_nothing(run_module, fake_cluster, monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config either
    for name in ("K8S_AUTH_HOST", "K8S_AUTH_KUBECONFIG", "KUBERNETES_SERVICE_HOST"):
        monkeypatch.delenv(name, raising=False)
    args = {"offline": True, "audit": audit_of(MIXED, target="1.33"), "target_release": "1.28",
            "running_releases": ["1.28", "1.32"]}
    failed, result = run_module(module, args)
    assert failed and result["offline"] is True and fake_cluster.log == []
    assert {r["resource"]: r["objects_named"] for r in result["resources"] if r["objects_named"]} == CANNOT_DECODE["1.28"]
    assert {b["subject"] for b in result["blocking"]} == set(CANNOT_DECODE["1.28"])
    assert result["endpoints"] == [] and result["agreed"] is False and result["running_releases"] == ["1.28", "1.32"]
    assert "Judged offline (offline: true)" in result["msg"]  # in the notes below the headline
    assert result["notes"] and "offline: judged from the etcd audit" in result["report_text"]
    assert "> Judged offline" in result["report_markdown"]


def test_offline_ignores_connection_options_under_module_defaults(run_module, fake_cluster):
    failed, result = run_module(module, {**BASE_ARGS, "offline": True, "audit": audit_of(MIXED[-1:]), "target_release": "1.33"})
    assert not failed and result["verdict"] == "safe" and result["offline"] and fake_cluster.log == []
    assert "pre-flight passes" in result["headline"] and "judged offline" in result["headline"]


@pytest.mark.parametrize("extra, needle", [
    ({}, "give audit"),
    ({"audit": audit_of([]), "target_endpoint": "https://10.0.0.14:6443"}, "target_endpoint needs"),
    ({"audit": audit_of([]), "running_releases": ["1.99"]}, "running_releases: no release profile"),
])
def test_offline_options_are_refused_before_anything(run_module, fake_cluster, extra, needle):
    failed, result = run_module(module, {**BASE_ARGS, "offline": True, "target_release": "1.33", **extra})
    assert failed and needle in result["msg"] and fake_cluster.log == []


def _all_down(fake_cluster):
    for url in ENDPOINTS:
        for path in list(fake_cluster.routes[url]):
            fake_cluster.routes[url][path] = unreachable()


def test_every_apiserver_unreachable_and_accepted_judges_the_audit_and_still_blocks(run_module, fake_cluster):
    _all_down(fake_cluster)
    accept = {url: "the hosts are down for maintenance (CHG-7)" for url in ENDPOINTS}
    failed, result = run_module(module, {**BASE_ARGS, "target_release": "1.33", "accept": accept,
                                         "audit": audit_of(MIXED, target="1.33")})
    assert failed and result["offline"] is True, result["msg"]
    assert {b["subject"] for b in result["blocking"]} == set(CANNOT_DECODE["1.33"])
    assert {r["resource"]: r["objects_named"] for r in result["resources"] if r["objects_named"]} == CANNOT_DECODE["1.33"]
    assert {a["subject"] for a in result["accepted"]} == set(ENDPOINTS)
    assert [e["endpoint"] for e in result["endpoints"]] == ENDPOINTS and not any(e["reachable"] for e in result["endpoints"])
    assert "no apiserver answered" in result["notes"][0] and "gate passes" not in result["msg"]


def test_every_apiserver_unreachable_and_accepted_without_an_audit_does_not_pass(run_module, fake_cluster):
    _all_down(fake_cluster)
    accept = {url: "down" for url in ENDPOINTS}
    failed, result = run_module(module, {**BASE_ARGS, "target_release": "1.33", "accept": accept})
    assert failed and [b["subject"] for b in result["blocking"]] == ["(nothing judged)"], result["msg"]
    assert result["offline"] is False
