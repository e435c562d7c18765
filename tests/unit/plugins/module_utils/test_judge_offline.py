# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Judged from an etcd audit: names for the check's own target, offline judgement, CRDs carried by the audit.

Audits here are made by the audit's own aggregator (``_audit/model.py``) from stored apiVersions, as the
module makes them from etcd; observations of "live" apiservers are built from the release data, so that an
offline judgement (release data standing in for the apiservers) can be compared with an online one.
"""

from __future__ import annotations

import json

import pytest

from ansible_collections.kubeupgrade.storage.plugins.module_utils import audit_result
from ansible_collections.kubeupgrade.storage.plugins.module_utils._audit import model
from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd import envelope, keys
from ansible_collections.kubeupgrade.storage.plugins.module_utils._judge import measured, offline, report
from ansible_collections.kubeupgrade.storage.plugins.module_utils._judge.engine import judge
from ansible_collections.kubeupgrade.storage.plugins.module_utils._judge.model import (
    NEEDS_MIGRATION,
    REMOVED,
    SAFE,
    UNKNOWN,
    JudgeOptions,
    Target,
)
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe import crds as crds_mod
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.model import EndpointObservation, Observation
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ConfigurationError
from ansible_collections.kubeupgrade.storage.plugins.module_utils.profiles import load_profiles

PROFILES = load_profiles()
MEASURED_AT = "2026-11-21T14:58:00Z"

# A store a 1.28/1.32 plane wrote: (key, apiVersion, kind). 1.33 cannot decode what only 1.28 reads (DRA v1alpha2,
# ResourceClasses it has no types for); 1.28 cannot decode what 1.32 wrote (flowcontrol v1, DRA v1beta1, ServiceCIDRs).
MIXED = [
    ("/registry/resourceclaims/dra/claim", "resource.k8s.io/v1alpha2", "ResourceClaim"),
    ("/registry/resourceclaims/dra/claim-132", "resource.k8s.io/v1beta1", "ResourceClaim"),
    ("/registry/resourceclasses/gpu", "resource.k8s.io/v1alpha2", "ResourceClass"),
    ("/registry/flowschemas/app-v1beta3", "flowcontrol.apiserver.k8s.io/v1beta3", "FlowSchema"),
    ("/registry/flowschemas/app-v1", "flowcontrol.apiserver.k8s.io/v1", "FlowSchema"),
    ("/registry/flowschemas/exempt", "flowcontrol.apiserver.k8s.io/v1", "FlowSchema"),
    ("/registry/servicecidrs/kubernetes", "networking.k8s.io/v1beta1", "ServiceCIDR"),
    ("/registry/configmaps/app/settings", "v1", "ConfigMap"),
]
# What each target cannot decode of MIXED, by resource (the truth the names must match).
CANNOT_DECODE = {
    "1.33": {"resourceclaims.resource.k8s.io": ["dra/claim"], "resourceclasses.resource.k8s.io": ["gpu"]},
    "1.28": {"resourceclaims.resource.k8s.io": ["dra/claim-132"],
             "flowschemas.flowcontrol.apiserver.k8s.io": ["app-v1", "exempt"],
             "servicecidrs.networking.k8s.io": ["kubernetes"]},
}

WIDGETS_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "widgets.example.com"},
    "spec": {"group": "example.com", "scope": "Namespaced",
             "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
             "versions": [{"name": "v1alpha1", "served": True, "storage": False}, {"name": "v1", "served": True, "storage": True}]},
    "status": {"storedVersions": ["v1alpha1", "v1"]},
}
WIDGETS = [("/registry/example.com/widgets/app/w-old", "example.com/v1alpha1", "Widget"),
           ("/registry/example.com/widgets/app/w-new", "example.com/v1", "Widget")]
WIDGETS_V1_ONLY = {**WIDGETS_CRD, "spec": {**WIDGETS_CRD["spec"], "versions": [{"name": "v1", "served": True, "storage": True}]}}


def audit_of(rows, target=None, names_limit=20, definitions=(), readable=None):
    """What storage_version_audit returns for a store of ``rows``, judged for ``target`` like the module does."""
    if target is not None:
        readable = {name: entry.readable_versions() for name, entry in PROFILES.get(target).resources.items()}
    aggregator = model.AuditAggregator(model.AuditOptions(names_limit=names_limit, readable=readable))
    for key, api_version, kind in rows:
        aggregator.add(key, keys.classify_key(key), envelope.Decoded(envelope.JSON, api_version, kind))
    for crd in definitions:
        key = f"/registry/apiextensions.k8s.io/customresourcedefinitions/{crd['metadata']['name']}"
        value = json.dumps(crd).encode()
        aggregator.add(key, keys.classify_key(key), envelope.decode_value(value))
        aggregator.add_definition(keys.classify_key(key), value)
    result = aggregator.result()
    result.update(measured_at=MEASURED_AT, endpoint="http://127.0.0.1:2379", revision=42, target_release=target)
    return result


def live(*releases, audit=None):
    """Apiservers of ``releases`` that answer exactly as release data says (a live observation, with real URLs)."""
    standing_in = offline.build_observation(audit, PROFILES, list(releases))
    for index, endpoint in enumerate(standing_in.endpoints):
        endpoint.endpoint = f"https://10.0.0.{11 + index}:6443"
    return standing_in


def run_judge(observation, target, audit, **options):
    options = JudgeOptions(audit=audit, fail_on=options.pop("fail_on", (NEEDS_MIGRATION, "unsafe", UNKNOWN, REMOVED)),
                           **options)
    first = judge(observation, Target(release=PROFILES.get(target)), PROFILES, options)
    options.counts = measured.counts(audit, [r.resource for r in first.resources])
    return judge(observation, Target(release=PROFILES.get(target)), PROFILES, options)


def offline_judge(target, audit, releases=(), **options):
    observation = offline.build_observation(audit, PROFILES, list(releases))
    return run_judge(observation, target, audit, offline=True, notes=offline.notes(audit, list(releases)), **options)


def named(judgement):
    return {r.resource: r.objects_named for r in judgement.resources if r.objects_named}


# ---- the audit carries its evidence -------------------------------------------------------------------------------

def test_audit_keeps_names_per_stored_version_and_the_crds_it_read():
    audit = audit_of(MIXED + WIDGETS, target="1.33", definitions=[WIDGETS_CRD])
    claims = audit["resources"]["resourceclaims.resource.k8s.io"]
    assert {v["api_version"]: (v["count"], v["names"]) for v in claims["versions"]} == {
        "resource.k8s.io/v1alpha2": (1, ["dra/claim"]), "resource.k8s.io/v1beta1": (1, ["dra/claim-132"])}
    assert claims["not_readable_names"] == ["dra/claim"]  # the audit's own target, as before
    assert audit["crds"]["widgets.example.com"] == {
        "group": "example.com", "kind": "Widget", "plural": "widgets", "scope": "Namespaced", "storage_version": "v1",
        "versions": [{"name": "v1alpha1", "served": True, "storage": False}, {"name": "v1", "served": True, "storage": True}],
        "stored_versions": ["v1alpha1", "v1"]}
    assert audit["crds_unread"] == [] and audit["names_limit"] == 20


@pytest.mark.parametrize("value, reason", [
    (b"k8s:enc:aescbc:v1:key1:" + bytes(32), "encrypted at rest"),
    (b"k8s\x00\x0a\x02", "protobuf"),
    (b"{not json", "not a JSON CustomResourceDefinition"),
    (json.dumps({**WIDGETS_CRD, "spec": {**WIDGETS_CRD["spec"], "versions": []}}).encode(), "spec.versions: Required value"),
])
def test_a_crd_that_cannot_be_read_is_listed_with_its_reason(value, reason):
    aggregator = model.AuditAggregator(model.AuditOptions())
    key = "/registry/apiextensions.k8s.io/customresourcedefinitions/widgets.example.com"
    aggregator.add_definition(keys.classify_key(key), value)
    result = aggregator.result()
    assert result["crds"] == {} and result["crds_unread"][0]["name"] == "widgets.example.com"
    assert reason in result["crds_unread"][0]["reason"]


@pytest.mark.parametrize("readable, expected", [
    ({"v1beta1"}, (["dra/claim"], 1)),
    ({"resource.k8s.io/v1alpha2"}, (["dra/claim-132"], 1)),
    (set(), (["dra/claim", "dra/claim-132"], 2)),
    ({"v1alpha2", "v1beta1"}, ([], 0)),
])
def test_names_not_readable_for_any_target(readable, expected):
    entry = audit_of(MIXED)["resources"]["resourceclaims.resource.k8s.io"]
    assert audit_result.names_not_readable(entry, readable) == expected


def test_an_audit_before_per_version_names_gives_none():
    entry = audit_of(MIXED, target="1.33")["resources"]["resourceclaims.resource.k8s.io"]
    for stored in entry["versions"]:
        del stored["names"]
    assert audit_result.names_not_readable(entry, {"v1"}) is None


# ---- one audit, two targets: each names exactly what it cannot decode -----------------------------------------------

@pytest.mark.parametrize("audit_target", ["1.33", "1.28", None])
@pytest.mark.parametrize("target", ["1.33", "1.28"])
def test_one_audit_judged_for_upgrade_and_rollback_names_what_each_target_cannot_decode(audit_target, target):
    audit = audit_of(MIXED, target=audit_target)
    judgement = run_judge(live("1.28", "1.32"), target, audit)
    assert named(judgement) == CANNOT_DECODE[target]
    assert {r.resource for r in judgement.resources if r.verdict != SAFE} == set(CANNOT_DECODE[target])


def test_an_old_audit_names_only_for_the_target_it_judged_and_says_so_otherwise():
    audit = audit_of(MIXED, target="1.33")
    for entry in audit["resources"].values():
        for stored in entry["versions"]:
            del stored["names"]
    same = run_judge(live("1.28", "1.32"), "1.33", audit)
    assert named(same)["resourceclaims.resource.k8s.io"] == ["dra/claim"]
    other = run_judge(live("1.28", "1.32"), "1.28", audit)
    claims = next(r for r in other.resources if r.resource == "resourceclaims.resource.k8s.io")
    assert claims.objects_named == [] and "Which objects this target cannot decode is not named" in claims.reason
    assert "dra/claim" not in claims.reason


def test_names_cut_at_names_limit_say_how_many_there_are():
    rows = [(f"/registry/flowschemas/fs-{i}", "flowcontrol.apiserver.k8s.io/v1", "FlowSchema") for i in range(5)]
    judgement = run_judge(live("1.32"), "1.28", audit_of(rows, names_limit=2))
    flow = next(r for r in judgement.resources if r.resource == "flowschemas.flowcontrol.apiserver.k8s.io")
    assert flow.objects_named == ["fs-0", "fs-1"] and "(the first 2 of 5" in flow.reason and "names_limit: -1" in flow.reason


# ---- offline: the same verdicts and names as online ---------------------------------------------------------------

@pytest.mark.parametrize("target", ["1.33", "1.28"])
def test_offline_with_running_releases_judges_as_online(target):
    audit = audit_of(MIXED + WIDGETS, target="1.33", definitions=[WIDGETS_CRD])
    online = run_judge(live("1.28", "1.32", audit=audit), target, audit)
    judged = offline_judge(target, audit, releases=("1.28", "1.32"))
    verdicts = {r.resource: (r.verdict, r.objects_named) for r in judged.resources}
    assert verdicts == {r.resource: (r.verdict, r.objects_named) for r in online.resources if r.resource in verdicts}
    assert set(verdicts) == set(audit["resources"]) | {"widgets.example.com"}
    assert all(r.verdict == SAFE for r in online.resources if r.resource not in verdicts)  # nothing stored
    assert [b["subject"] for b in judged.blocking] == [b["subject"] for b in online.blocking if b["scope"] == "resource"]
    assert judged.offline and not online.offline and judged.findings == []


def test_offline_without_running_releases_still_names_and_blocks_and_says_what_it_leaves_out():
    audit = audit_of(MIXED, target="1.33")
    judged = offline_judge("1.33", audit)
    claims = next(r for r in judged.resources if r.resource == "resourceclaims.resource.k8s.io")
    # no verdict promises that a migration fixes what no known apiserver may be able to rewrite
    assert claims.verdict == UNKNOWN and claims.blocking and claims.objects_named == ["dra/claim"]
    assert "what the running apiservers read and write is not known" in claims.reason
    assert "running_releases" in claims.next_step
    classes = next(r for r in judged.resources if r.resource == "resourceclasses.resource.k8s.io")
    assert classes.verdict == REMOVED and classes.objects_named == ["gpu"]
    text = report.render_text(judged)
    assert "offline: judged from the etcd audit" in text and "Note: Judged offline (offline: true)" in text
    assert "give running_releases" in text and "revision 42" in text
    assert "offline: judged from the etcd audit" in report.render_table(judged)
    assert "> Judged offline" in report.render_markdown(judged, title="t")


def test_offline_custom_resources_are_judged_against_the_crds_the_audit_read():
    audit = audit_of(WIDGETS, definitions=[WIDGETS_CRD])
    judged = offline_judge("1.33", audit)
    widgets = next(r for r in judged.resources if r.resource == "widgets.example.com")
    assert widgets.verdict == SAFE and widgets.target_source.startswith("the CRD in the cluster")
    manifests = crds_mod.parse_manifests([WIDGETS_V1_ONLY])
    observation = offline.build_observation(audit, PROFILES, [])
    options = JudgeOptions(audit=audit, offline=True, counts=measured.counts(audit, ["widgets.example.com"]))
    dropped = next(r for r in judge(observation, Target(release=PROFILES.get("1.33"), crd_manifests=manifests), PROFILES,
                                    options).resources if r.resource == "widgets.example.com")
    assert dropped.verdict == NEEDS_MIGRATION and dropped.objects_named == ["app/w-old"], dropped.reason
    assert "current storage version v1" in dropped.next_step


def test_an_audit_without_crds_says_custom_resources_are_left_out():
    audit = audit_of(WIDGETS)
    del audit["crds"]
    judged = offline_judge("1.33", audit)
    assert [r.verdict for r in judged.resources if r.resource == "widgets.example.com"] == [UNKNOWN]
    assert any("carries no CustomResourceDefinitions" in note for note in judged.notes)


def test_an_unreadable_crd_is_named_in_the_notes():
    audit = audit_of(WIDGETS)
    audit["crds_unread"] = [{"name": "widgets.example.com", "reason": "encrypted at rest"}]
    assert any("widgets.example.com could not be read from etcd (encrypted at rest)" in note
               for note in offline.notes(audit, []))


# ---- accepting an unreachable apiserver is judging without it -----------------------------------------------------

def test_with_every_apiserver_unreachable_and_accepted_the_audit_still_blocks():
    audit = audit_of(MIXED, target="1.33")
    down = [EndpointObservation(endpoint="https://10.0.0.11:6443", reachable=False, error="connection refused")]
    observation = offline.build_observation(audit, PROFILES, [], unreachable=down)
    judged = run_judge(observation, "1.33", audit, offline=True, accept={"https://10.0.0.11:6443": "host is down (CHG-1)"},
                       notes=offline.notes(audit, [], ["https://10.0.0.11:6443"]))
    assert {b["subject"] for b in judged.blocking} == set(CANNOT_DECODE["1.33"])
    assert judged.accepted == [{"subject": "https://10.0.0.11:6443", "verdict": UNKNOWN, "reason": "host is down (CHG-1)"}]
    assert "no apiserver answered (https://10.0.0.11:6443)" in judged.notes[0]


def test_with_every_apiserver_unreachable_and_no_audit_nothing_judged_blocks_even_when_accepted():
    down = Observation(endpoints=[EndpointObservation(endpoint="https://10.0.0.11:6443", reachable=False, error="refused")])
    judged = judge(down, Target(release=PROFILES.get("1.33")), PROFILES,
                   JudgeOptions(accept={"https://10.0.0.11:6443": "down", "(nothing judged)": "please"}))
    assert [b["subject"] for b in judged.blocking] == ["(nothing judged)"]
    assert "does not make a check of nothing pass" in judged.blocking[0]["reason"]
    report_only = judge(down, Target(release=PROFILES.get("1.33")), PROFILES, JudgeOptions(fail_on=()))
    assert report_only.blocking == []


# ---- options -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("params, needle", [
    ({"offline": True}, "give audit"),
    ({"offline": True, "audit": {}, "target_endpoint": "https://10.0.0.9:6443"}, "target_endpoint needs a live apiserver"),
    ({"offline": True, "audit": {}, "upgrading": "https://10.0.0.9:6443"}, "upgrading needs a live apiserver"),
    ({"offline": True, "audit": {}, "refresh_records": True}, "refresh_records needs a live apiserver"),
    ({"running_releases": "1.32"}, "running_releases must be a list"),
    ({"running_releases": [""]}, "running_releases must be a list"),
])
def test_offline_options_are_checked_naming_the_option(params, needle):
    with pytest.raises(ConfigurationError, match=needle):
        offline.validate(params)


def test_running_releases_without_a_profile_name_the_option():
    assert offline.running_releases(["v1.32.6", "1.32", "1.28"], PROFILES) == ["1.32", "1.28"]
    with pytest.raises(ConfigurationError, match="running_releases: no release profile for Kubernetes 1.99"):
        offline.running_releases(["1.99"], PROFILES)


@pytest.mark.parametrize("audit", [
    {"resources": {"pods": 5}, "measured_at": "t"},
    {"resources": {"pods": {"versions": [1]}}, "measured_at": "t"},
    {"resources": {}, "measured_at": "t", "crds": []},
])
def test_an_audit_of_the_wrong_shape_is_refused_naming_it(audit):
    with pytest.raises(ConfigurationError, match="^audit"):
        measured.validate(audit)


def test_every_name_for_the_audits_target_and_bounded_names_per_version_for_others(monkeypatch):
    """names_limit -1: the audit's own target gets every name; the evidence per stored version stays bounded."""
    monkeypatch.setattr(model, "VERSION_NAMES_CAP", 2)
    rows = [(f"/registry/flowschemas/fs-{i}", "flowcontrol.apiserver.k8s.io/v1", "FlowSchema") for i in range(5)]
    audit = audit_of(rows, target="1.28", names_limit=-1)
    stored = audit["resources"]["flowschemas.flowcontrol.apiserver.k8s.io"]
    assert stored["versions"][0]["names"] == ["fs-0", "fs-1"] and len(stored["not_readable_names"]) == 5
    assert audit["version_names_limit"] == 2
    own = run_judge(live("1.32"), "1.28", audit)
    flow = next(r for r in own.resources if r.resource == "flowschemas.flowcontrol.apiserver.k8s.io")
    assert flow.objects_named == [f"fs-{i}" for i in range(5)] and "the first" not in flow.reason
    # a target the audit did not judge: computed from the bounded evidence, and said to be cut
    other = audit_result.names_not_readable(stored, {"v1beta3"})
    assert other == (["fs-0", "fs-1"], 5)
    text = measured.object_names(audit, "flowschemas.flowcontrol.apiserver.k8s.io", {"v1beta3", "v1beta2"})
    assert text == (["fs-0", "fs-1"], "(the first 2 of 5: the audit kept 2 name(s) per stored version; audit with "
                                      "names_limit: -1 for the target judged to name every one)")
