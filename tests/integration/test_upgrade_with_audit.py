# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The first run on a cluster whose etcd is reachable: ``upgrade.yml`` with etcd settings does all of it.

A simulated 1.35 control plane keeps its store in a real etcd (TLS client certificates). Objects are
stored in versions 1.35 reads and 1.36 does not (HorizontalPodAutoscalers as ``autoscaling/v2beta2``,
PriorityClasses as ``scheduling.k8s.io/v1alpha1``), and no StorageState record exists yet. The
playbook audits etcd, sets the records from it, judges with no ``unknown`` anywhere, migrates only the
objects the audit listed, and rolls every apiserver to 1.36; a second audit finds nothing left.
"""

from __future__ import annotations

import json
import os

import etcd_fixture
import pytest
from test_playbooks_helpers import TLS, explain, releases, run

from ansible_collections.kubeupgrade.storage.plugins.module_utils import audit_result
from ansible_collections.kubeupgrade.storage.plugins.module_utils._audit import runner

# resource -> (version 1.36 cannot read, current version, objects in the old version, objects already current)
OLD = {
    "horizontalpodautoscalers.autoscaling": ("autoscaling/v2beta2", "autoscaling/v2", 3, 2),
    "priorityclasses.scheduling.k8s.io": ("scheduling.k8s.io/v1alpha1", "scheduling.k8s.io/v1", 2, 1),
}
NAMESPACED = {"horizontalpodautoscalers.autoscaling"}


@pytest.fixture
def etcd_tls(tmp_path):
    yield from etcd_fixture.serve(tmp_path / "etcd", tls=True)


@pytest.fixture
def plane(control_plane_factory, etcd_tls):
    pki = etcd_tls.pki
    plane = control_plane_factory(apiservers=3, releases="1.35", tls=TLS, etcd={
        "endpoint": etcd_tls.url, "ca_file": pki.ca_cert, "cert_file": pki.client_cert, "key_file": pki.client_key})
    for resource, (old, current, stale, fresh) in OLD.items():
        namespace = "default" if resource in NAMESPACED else None
        for i in range(stale + fresh):
            plane.admin.put_raw(resource, namespace, f"obj-{i}", old if i < stale else current, {"spec": {"index": i}})
    return plane


def _etcd_vars(etcd):
    return {"kubeupgrade_etcd": {"endpoints": [etcd.url], "ca_cert": etcd.pki.ca_cert, "client_cert": etcd.pki.client_cert,
                                 "client_key": etcd.pki.client_key},
            "kubeupgrade_etcd_delegate_to": "localhost", "kubeupgrade_etcd_become": False,
            # the snapshot upgrade.yml takes before the first host, in the test's directory
            "kubeupgrade_snapshot": {"dest": os.path.join(etcd.workdir, "etcd-before-upgrade.db"), "work_dir": etcd.workdir}}


def _stored(plane, resource):
    return {o["name"]: (o["encoded_version"], o["resource_version"], o["object"].get("spec")) for o in plane.admin.stored_objects(resource)}


def test_upgrade_with_etcd_settings_audits_records_migrates_only_listed_objects(plane, etcd_tls, ansible_playbook, tmp_path):
    before = {resource: _stored(plane, resource) for resource in OLD}
    result = run(ansible_playbook, "upgrade.yml", plane, tmp_path, kubeupgrade_target_release="1.36", **_etcd_vars(etcd_tls))
    assert result.rc == 0, explain(result)
    assert releases(plane) == ["1.36", "1.36", "1.36"]
    snapshot = os.path.join(etcd_tls.workdir, "etcd-before-upgrade.db")
    assert os.path.getsize(snapshot) > 0 and "etcdutl snapshot restore " + snapshot in result.stdout, explain(result)
    kept = json.loads((tmp_path / "reports" / "etcd-snapshot-1.36.json").read_text(encoding="utf-8"))
    assert kept["path"] == snapshot and kept["bytes"] == os.path.getsize(snapshot) and kept["revision"] > 0, kept

    first = json.loads((tmp_path / "reports" / "preflight-1.36.json").read_text(encoding="utf-8"))
    verdicts = {r["resource"]: r for r in first["resources"]}
    assert not [name for name, r in verdicts.items() if r["verdict"] == "unknown"], "a first run with the audit is never unknown"
    for resource, (old, _current, stale, _fresh) in OLD.items():
        assert verdicts[resource]["verdict"] == "needs_migration" and verdicts[resource]["measured"], verdicts[resource]
        assert len(verdicts[resource]["objects_named"]) == stale and old.rpartition("/")[2] in verdicts[resource]["reason"]

    for resource, (_old, current, _stale, _fresh) in OLD.items():
        after = _stored(plane, resource)
        assert set(after) == set(before[resource]), f"{resource}: objects appeared or disappeared"
        for name, (version, resource_version, spec) in before[resource].items():
            assert after[name][2] == spec, f"{resource}/{name}: content changed"
            if version == current:  # already current: the audit did not list it, nothing rewrote it
                assert after[name][:2] == (version, resource_version), f"{resource}/{name} was rewritten"
            else:
                assert after[name][0] == current, f"{resource}/{name} still stored as {after[name][0]}"

    second = runner.audit(runner.build_request({
        "etcd_endpoints": [etcd_tls.url], "etcd_ca_cert": etcd_tls.pki.ca_cert, "etcd_client_cert": etcd_tls.pki.client_cert,
        "etcd_client_key": etcd_tls.pki.client_key, "target_release": "1.36", "pages_per_second": 0}))
    assert second["not_readable"] == 0 and audit_result.objects_from_audit(second) == {}
