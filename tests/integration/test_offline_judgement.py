# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""storage_version_check judged offline from a real etcd's audit, through ansible-playbook.

A simulated 1.28/1.32 control plane keeps its store in a real etcd (TLS client certificates). The store
holds objects in both directions: what only 1.28 reads (DRA ``v1alpha2``, ResourceClasses) and what 1.28
cannot read (flowcontrol ``v1``, DRA ``v1beta1``, ServiceCIDRs), and a CRD with objects in two versions.
One audit (taken for 1.33) is judged online for the upgrade (1.33) and the rollback (1.28); then, with no
apiserver running at all, offline for both, and online against the stopped apiservers with each one
accepted. Every judgement names, per target, exactly the objects that target cannot decode; offline gives
the same verdicts and names as online; accepting the unreachable apiservers still blocks. Finally the
documented play of docs/docsite/rst/audit.rst judges a snapshot of that etcd restored on the controller.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import etcd_fixture
import pytest
import yaml
from test_playbooks_helpers import TLS, explain

REPO = Path(__file__).resolve().parents[2]
RUNNING = ["1.28", "1.32"]
GADGETS_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "gadgets.example.com"},
    "spec": {"group": "example.com", "scope": "Namespaced",
             "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList"},
             "versions": [{"name": "v1alpha1", "served": True, "storage": False}, {"name": "v1", "served": True, "storage": True}]},
    "status": {"storedVersions": ["v1alpha1", "v1"]},
}
GADGETS_V1 = {**GADGETS_CRD, "spec": {**GADGETS_CRD["spec"], "versions": [{"name": "v1", "served": True, "storage": True}]}}
# (resource, namespace, name, stored as)
STORED = [
    ("namespaces", None, "dra", "v1"),
    ("resourceclaims.resource.k8s.io", "dra", "claim-128", "resource.k8s.io/v1alpha2"),
    ("resourceclaims.resource.k8s.io", "dra", "claim-132", "resource.k8s.io/v1beta1"),
    ("resourceclaimtemplates.resource.k8s.io", "dra", "template-128", "resource.k8s.io/v1alpha2"),
    ("resourceclasses.resource.k8s.io", None, "gpu", "resource.k8s.io/v1alpha2"),
    ("flowschemas.flowcontrol.apiserver.k8s.io", None, "app-v1beta3", "flowcontrol.apiserver.k8s.io/v1beta3"),
    ("flowschemas.flowcontrol.apiserver.k8s.io", None, "app-v1", "flowcontrol.apiserver.k8s.io/v1"),
    ("validatingadmissionpolicies.admissionregistration.k8s.io", None, "policy-v1", "admissionregistration.k8s.io/v1"),
    ("servicecidrs.networking.k8s.io", None, "kubernetes", "networking.k8s.io/v1beta1"),
    ("configmaps", "dra", "settings", "v1"),
    ("gadgets.example.com", "dra", "old", "example.com/v1alpha1"),
    ("gadgets.example.com", "dra", "new", "example.com/v1"),
]
# What each target cannot decode (the release data's readable versions; the rollback also lacks ServiceCIDRs,
# the upgrade ResourceClasses): the names each judgement must give, and only those.
CANNOT_DECODE = {
    "1.33": {"resourceclaims.resource.k8s.io": ["dra/claim-128"], "resourceclaimtemplates.resource.k8s.io": ["dra/template-128"],
             "resourceclasses.resource.k8s.io": ["gpu"], "gadgets.example.com": ["dra/old"]},
    "1.28": {"resourceclaims.resource.k8s.io": ["dra/claim-132"], "flowschemas.flowcontrol.apiserver.k8s.io": ["app-v1"],
             "validatingadmissionpolicies.admissionregistration.k8s.io": ["policy-v1"],
             "servicecidrs.networking.k8s.io": ["kubernetes"], "gadgets.example.com": ["dra/old"]},
}


@pytest.fixture
def plane(control_plane_factory, etcd_tls):
    pki = etcd_tls.pki
    plane = control_plane_factory(apiservers=2, releases=RUNNING, tls=TLS, etcd={
        "endpoint": etcd_tls.url, "ca_file": pki.ca_cert, "cert_file": pki.client_cert, "key_file": pki.client_key})
    plane.admin.put_raw("customresourcedefinitions.apiextensions.k8s.io", None, "gadgets.example.com",
                        "apiextensions.k8s.io/v1", GADGETS_CRD)
    for resource, namespace, name, version in STORED:
        plane.admin.put_raw(resource, namespace, name, version, {"spec": {"note": f"{name} as {version}"}})
    return plane


def etcd_args(etcd):
    return {"etcd_endpoints": [etcd.url], "etcd_ca_cert": etcd.pki.ca_cert, "etcd_client_cert": etcd.pki.client_cert,
            "etcd_client_key": etcd.pki.client_key, "pages_per_second": 0, "names_limit": -1}


def run_tasks(ansible_playbook, tmp_path, name, tasks, defaults=None):
    """One play of ``tasks`` on localhost; every task's registered result is saved; returns {register: result}."""
    saved = tmp_path / f"{name}.json"
    play = [{"name": name, "hosts": "localhost", "connection": "local", "gather_facts": False,
             "module_defaults": {"group/kubeupgrade.storage.storage": defaults} if defaults else {},
             "tasks": [dict(task, ignore_errors=True) for task in tasks] + [
                 {"name": "Save the results", "ansible.builtin.copy": {
                     "dest": str(saved),
                     "content": "{{ {" + ", ".join(f"'{t['register']}': {t['register']}" for t in tasks) + "} | to_json }}"}}]}]
    playbook = tmp_path / f"{name}.yml"
    playbook.write_text(yaml.safe_dump(play, sort_keys=False), encoding="utf-8")
    result = ansible_playbook(playbook, timeout=600)
    assert saved.is_file(), explain(result)
    return json.loads(saved.read_text(encoding="utf-8"))


def check(register, target, **args):
    return {"name": f"check {register}", "register": register,
            "kubeupgrade.storage.storage_version_check": {"target_release": target, "target_crds": [GADGETS_V1], **args}}


def verdicts(result):
    return {r["resource"]: (r["verdict"], r["objects_named"]) for r in result["resources"]}


def named(result):
    return {r["resource"]: r["objects_named"] for r in result["resources"] if r["objects_named"]}


def test_one_audit_judged_online_and_offline_for_upgrade_and_rollback(plane, etcd_tls, ansible_playbook, tmp_path):
    live = run_tasks(ansible_playbook, tmp_path, "online", [
        {"name": "audit", "register": "audit", "kubeupgrade.storage.storage_version_audit": {
            **etcd_args(etcd_tls), "target_release": "1.33"}},
        check("upgrade", "1.33", audit="{{ audit }}", fail_on=[]),
        check("rollback", "1.28", audit="{{ audit }}", fail_on=[]),
    ], defaults={"kubeconfig": plane.kubeconfig, "endpoints": plane.endpoints})
    audit = live["audit"]
    assert not audit.get("failed"), audit.get("msg")
    assert audit["target_release"] == "1.33" and set(audit["crds"]) == {"gadgets.example.com"}
    for target, register in (("1.33", "upgrade"), ("1.28", "rollback")):
        result = live[register]
        assert not result.get("failed") and result["offline"] is False and result["notes"] == [], result.get("msg")
        assert named(result) == CANNOT_DECODE[target], (target, named(result))

    plane.stop()  # from here on no apiserver runs
    (tmp_path / "audit.json").write_text(json.dumps(audit), encoding="utf-8")
    down = run_tasks(ansible_playbook, tmp_path, "offline", [
        {"name": "load", "register": "loaded", "ansible.builtin.set_fact": {
            "saved_audit": "{{ lookup('file', '" + str(tmp_path / "audit.json") + "') | from_json }}"}},
        check("upgrade", "1.33", audit="{{ saved_audit }}", offline=True, running_releases=RUNNING),
        check("rollback", "1.28", audit="{{ saved_audit }}", offline=True, running_releases=RUNNING),
        check("accepted", "1.33", audit="{{ saved_audit }}", running_releases=RUNNING,
              kubeconfig=plane.kubeconfig, endpoints=plane.endpoints,
              accept={url: "the control plane is stopped for maintenance (CHG-22)" for url in plane.endpoints}),
        check("nothing", "1.33", kubeconfig=plane.kubeconfig, endpoints=plane.endpoints,
              accept={url: "the control plane is stopped for maintenance (CHG-22)" for url in plane.endpoints}),
    ])
    for target, register in (("1.33", "upgrade"), ("1.28", "rollback")):
        offline, online = down[register], live[register]
        assert offline["failed"] and offline["offline"] is True and offline["endpoints"] == [], offline["msg"]
        judged = verdicts(offline)
        assert judged == {name: v for name, v in verdicts(online).items() if name in judged}, (target, judged)
        assert set(judged) >= set(audit["resources"]) - {"events"}
        assert all(v[0] == "safe" for name, v in verdicts(online).items() if name not in judged)
        assert named(offline) == CANNOT_DECODE[target]
        assert {b["subject"] for b in offline["blocking"]} == set(CANNOT_DECODE[target])
        assert "Judged offline (offline: true)" in offline["msg"] and "release data of 1.28, 1.32" in offline["msg"]
        assert "offline: judged from the etcd audit" in offline["report_text"]

    accepted = down["accepted"]
    assert accepted["failed"] and accepted["offline"] is True, accepted["msg"]
    assert {b["subject"] for b in accepted["blocking"]} == set(CANNOT_DECODE["1.33"]), accepted["blocking"]
    assert {a["subject"] for a in accepted["accepted"]} == set(plane.endpoints)
    assert named(accepted) == CANNOT_DECODE["1.33"] and "no apiserver answered" in accepted["notes"][0]

    nothing = down["nothing"]
    assert nothing["failed"] and [b["subject"] for b in nothing["blocking"]] == ["(nothing judged)"], nothing["msg"]


def documented_play() -> list:
    """The play of docs/docsite/rst/audit.rst, section "Judging a snapshot on the controller, with no apiserver"."""
    text = (REPO / "docs" / "docsite" / "rst" / "audit.rst").read_text(encoding="utf-8")
    section = text.split("Judging a snapshot on the controller, with no apiserver\n", 1)[1]
    block = re.search(r"\.\. code-block:: yaml\n\n(.*?)\n(?=\S)", section, re.S).group(1)
    return yaml.safe_load(block)


def test_documented_play_judges_a_restored_snapshot_on_the_controller(plane, etcd_tls, ansible_playbook, tmp_path):
    plane.stop()
    snapshot = tmp_path / "before-upgrade.db"
    subprocess.run(["etcdctl", "snapshot", "save", str(snapshot)], env=etcd_tls.etcdctl_env(), check=True, capture_output=True)
    restored = etcd_fixture.EtcdServer(tmp_path / "snapshot-etcd")
    peer = f"http://127.0.0.1:{restored.peer_port}"
    subprocess.run(["etcdctl", "snapshot", "restore", str(snapshot), f"--data-dir={restored.workdir}/data", "--name=audit-test",
                    f"--initial-cluster=audit-test={peer}", f"--initial-advertise-peer-urls={peer}"],
                   env={**etcd_tls.etcdctl_env(), "ETCDCTL_API": "3"}, check=True, capture_output=True)
    etcd_tls.stop()  # the cluster's etcd is gone too: only the snapshot remains
    playbook = tmp_path / "judge-snapshot.yml"
    playbook.write_text(yaml.safe_dump(documented_play(), sort_keys=False), encoding="utf-8")
    with restored:
        for target in ("1.33", "1.28"):
            extra = {"snapshot_etcd": restored.url, "target_release": target, "running_releases": RUNNING}
            result = ansible_playbook(playbook, extra_vars=extra)
            assert result.rc != 0 and "pre-flight blocks" in result.stdout, explain(result)
            report = json.loads((tmp_path / "reports" / f"snapshot-{target}.json").read_text(encoding="utf-8"))
            assert report["offline"] is True and report["notes"], report
            shown = {r["resource"]: r["objects_named"] for r in report["resources"] if r["objects_named"]}
            # the documented play judges custom resources against the CRD in the snapshot: gadgets read there
            assert shown == {k: v for k, v in CANNOT_DECODE[target].items() if k != "gadgets.example.com"}, shown
