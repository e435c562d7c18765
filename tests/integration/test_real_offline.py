# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One etcd audit of a real mixed 1.28/1.32 plane, judged for the upgrade (1.33) and the rollback (1.28), online and
with no apiserver running; the truth is what the real target binaries answer for every audited object.

The 1.28 apiserver wrote objects only 1.28 reads (DRA ``v1alpha2``, ResourceClasses, PodSchedulingContexts,
ClusterCIDRs); the 1.32 apiserver wrote objects 1.28 cannot read (flowcontrol ``v1``, admission policies ``v1``, DRA
``v1beta1``, ServiceCIDRs, IPAddresses ``v1beta1``), some of them its own. Secrets are encrypted at rest.

- Online, each check names, for its own target, exactly the audited objects that target's binary fails to GET
  (500 "no kind is registered") or does not serve: the 1.28 apiserver of the plane for the rollback, a 1.33
  apiserver started on the same etcd at the end for the upgrade.
- Offline (both apiservers stopped, ``offline: true``, ``running_releases``) the verdicts and names are the online
  ones.
"""

from __future__ import annotations

import json

import pytest
from real_binaries import NO_KIND, create, object_path, seed_128_unreadable_on_132, served, wait_for
from test_offline_judgement import run_tasks, verdicts

from ansible_collections.kubeupgrade.storage.plugins.module_utils.resources import GroupResource

pytestmark = pytest.mark.slow

RUNNING = ["1.28", "1.32"]
GROUPS = ("flowcontrol.apiserver.k8s.io", "admissionregistration.k8s.io", "resource.k8s.io", "networking.k8s.io")


def seed_132_only(plane, index, namespace="dra"):
    """Through the 1.32 apiserver ``index``, next to what 1.28 wrote: objects in versions 1.28 lacks."""
    create(plane, "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas", {"metadata": {"name": "app-v1"}, "spec": {
        "priorityLevelConfiguration": {"name": "global-default"}, "matchingPrecedence": 5000}}, index=index)
    rule = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["configmaps"]}
    create(plane, "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies", {"metadata": {"name": "app-v1"}, "spec": {
        "validations": [{"expression": "true"}], "matchConstraints": {"resourceRules": [rule]}}}, index=index)
    create(plane, "/apis/resource.k8s.io/v1beta1/deviceclasses", {"metadata": {"name": "gpu-132"}, "spec": {}}, index=index)
    create(plane, f"/apis/resource.k8s.io/v1beta1/namespaces/{namespace}/resourceclaims", {"metadata": {"name": "claim-132"}, "spec": {
        "devices": {"requests": [{"name": "gpu", "deviceClassName": "gpu-132"}]}}}, index=index)
    create(plane, f"/api/v1/namespaces/{namespace}/services", {"metadata": {"name": "web"}, "spec": {
        "clusterIP": "10.0.0.80", "ports": [{"port": 80}]}}, index=index)


def audited_objects(audit):
    """{resource: {object name}} of every object the audit read in ``GROUPS`` (names_limit -1: all of them)."""
    found = {}
    for name, entry in audit["resources"].items():
        if entry["group"] in GROUPS:
            found[name] = {n for version in entry["versions"] for n in version["names"]}
    return found


def undecodable_through(plane, index, audit):
    """{resource: {names}} of the audited objects apiserver ``index`` cannot decode (its GET answers 500 "no kind is
    registered") or whose resource it does not serve at all: what its release cannot read of that store."""
    reader = served(plane, index, GROUPS)
    failing = {}
    for name, names in sorted(audited_objects(audit).items()):
        entry = audit["resources"][name]
        if entry["resource"] not in reader or reader[entry["resource"]][0] != entry["group"]:
            failing[name] = set(names)
            continue
        _group, gv_path, namespaced = reader[entry["resource"]]
        for object_name in sorted(names):
            status, body = plane.request("GET", object_path(gv_path, entry["resource"], namespaced, object_name), index=index)
            if status != 200:
                assert status == 500 and NO_KIND in str(body), f"GET {name} {object_name} through {index}: {status} {body}"
                failing.setdefault(name, set()).add(object_name)
    return failing


def answers(plane, index) -> bool:
    try:
        return plane.request("GET", "/version", index=index)[0] == 200
    except OSError:  # not listening yet
        return False


def in_groups(result):
    """{resource: {names}} a check named, for the resources of ``GROUPS``."""
    return {r["resource"]: set(r["objects_named"]) for r in result["resources"]
            if r["objects_named"] and GroupResource.parse(r["resource"]).group in GROUPS}


def test_one_audit_of_a_real_mixed_plane_names_what_each_target_binary_cannot_decode_online_and_offline(
        real_plane_factory, ansible_playbook, tmp_path):
    plane = real_plane_factory(["1.28", "1.28"], encryption=True)
    seed_128_unreadable_on_132(plane)
    plane.restart(1, "1.32")
    seed_132_only(plane, index=1)
    etcd = plane.etcd_settings
    audit_args = {"etcd_endpoints": etcd["endpoints"], "encryption_config": etcd["encryption_config"],
                  "target_release": "1.33", "names_limit": -1, "pages_per_second": 0}
    live = run_tasks(ansible_playbook, tmp_path, "online", [
        {"name": "audit", "register": "audit", "kubeupgrade.storage.storage_version_audit": audit_args},
        {"name": "upgrade", "register": "upgrade", "kubeupgrade.storage.storage_version_check": {
            "target_release": "1.33", "audit": "{{ audit }}", "fail_on": []}},
        {"name": "rollback", "register": "rollback", "kubeupgrade.storage.storage_version_check": {
            "target_release": "1.28", "audit": "{{ audit }}", "fail_on": []}},
    ], defaults={"kubeconfig": str(plane.kubeconfig), "endpoints": plane.endpoints})
    audit = live["audit"]
    assert not audit.get("failed") and audit["unreadable"] == 0, audit.get("msg")
    for register in ("upgrade", "rollback"):
        assert not live[register].get("failed") and not live[register]["offline"], live[register].get("msg")

    # The rollback's truth: what the real 1.28 binary of the plane answers for every audited object.
    truth_128 = undecodable_through(plane, 0, audit)
    assert {"app-v1"} <= truth_128.get("flowschemas.flowcontrol.apiserver.k8s.io", set()), truth_128  # the scenario
    assert {"dra/claim-132"} <= truth_128.get("resourceclaims.resource.k8s.io", set()), truth_128
    assert in_groups(live["rollback"]) == truth_128, (in_groups(live["rollback"]), truth_128)

    plane.stop(0)
    plane.stop(1)  # no apiserver runs: the same audit judged offline
    (tmp_path / "audit.json").write_text(json.dumps(audit), encoding="utf-8")
    down = run_tasks(ansible_playbook, tmp_path, "offline", [
        {"name": "load", "register": "loaded", "ansible.builtin.set_fact": {
            "saved_audit": "{{ lookup('file', '" + str(tmp_path / "audit.json") + "') | from_json }}"}},
        {"name": "upgrade", "register": "upgrade", "kubeupgrade.storage.storage_version_check": {
            "target_release": "1.33", "audit": "{{ saved_audit }}", "offline": True, "running_releases": RUNNING}},
        {"name": "rollback", "register": "rollback", "kubeupgrade.storage.storage_version_check": {
            "target_release": "1.28", "audit": "{{ saved_audit }}", "offline": True, "running_releases": RUNNING}},
    ])
    for register in ("upgrade", "rollback"):
        offline, online = down[register], live[register]
        assert offline["failed"] and offline["offline"] is True, offline.get("msg")
        judged = verdicts(offline)
        differing = {name: (verdict, verdicts(online).get(name)) for name, verdict in judged.items()
                     if verdicts(online).get(name) != verdict}
        assert differing == {}, (register, differing)
        assert {b["subject"] for b in offline["blocking"]} == {name for name, (verdict, _names) in verdicts(online).items()
                                                               if verdict != "safe" and name in judged}
    assert in_groups(down["rollback"]) == truth_128

    # The upgrade's truth: a 1.33 apiserver started on the same etcd (it need not become ready to answer GETs).
    plane.start_one(0, "1.33", wait=False)
    wait_for(lambda: answers(plane, 0), "the 1.33 apiserver to answer", timeout=120)
    assert plane.request("GET", "/version", index=0)[1]["gitVersion"].startswith("v1.33")
    truth_133 = undecodable_through(plane, 0, audit)
    assert {"dra/claim"} <= truth_133.get("resourceclaims.resource.k8s.io", set()), truth_133
    assert in_groups(live["upgrade"]) == truth_133, (in_groups(live["upgrade"]), truth_133)
    assert in_groups(down["upgrade"]) == truth_133
