# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Idempotent bookkeeping against the simulator: a record that would not change is not written.

Writes are counted from the simulator's request log (every create/update/patch/delete of a StorageState, status
included). A second audited pre-flight (a new audit: a new ``measured_at``) that finds what the records say writes
nothing and reports ``changed=false``; a real change is written; a record left alone is judged by its age as before.
"""

from __future__ import annotations

import pytest
from test_playbooks_helpers import TLS, explain, run

WRITES = {"create", "update", "patch", "delete", "deletecollection"}
PRIORITYCLASSES = "priorityclasses.scheduling.k8s.io"


def record_writes(plane) -> int:
    """StorageState writes (any verb that changes it, main resource or /status) the plane served since it started."""
    return sum(entry["count"] for entry in plane.admin._call("audit")
               if entry["group"] == "migration.k8s.io" and entry["resource"] == "storagestates" and entry["verb"] in WRITES)


def audit(measured_at, resources):
    """A storage_version_audit result, as registered, that read the whole prefix."""
    return {"changed": False, "keys_scanned": 500, "endpoint": "https://127.0.0.1:2379", "prefix": "/registry",
            "measured_at": measured_at, "resources": resources, "outside_layout": 0, "filtered_out": 0}


def test_storage_state_with_a_new_audit_that_finds_the_same_writes_nothing(control_plane, run):
    from ansible_collections.kubeupgrade.storage.plugins.modules import storage_state, storage_version_info

    control_plane.admin.seed("demo")
    failed, info = run(storage_version_info, control_plane.module_args(resources=["deployments.apps"]))
    assert not failed
    current = next(iter(info["resources"]["deployments.apps"]["hashes"].values()))
    old = "0000old0000="
    found = {"deployments.apps": {"objects": 3, "hashes": [old, current], "unreadable": 0}}

    failed, first = run(storage_state, control_plane.module_args(audit=audit("2026-11-21T14:00:00Z", found)))
    assert not failed and first["changed"] is True
    written = record_writes(control_plane)
    assert written > 0

    # The next audited run: a new audit, same findings. Nothing is written, changed=false, every record unchanged.
    failed, second = run(storage_state, control_plane.module_args(audit=audit("2026-11-21T14:20:00Z", found)))
    assert not failed and second["changed"] is False, [r for r in second["records"] if r["action"] != "unchanged"]
    assert {r["action"] for r in second["records"]} == {"unchanged"}
    assert record_writes(control_plane) == written
    # ... and the same audit again, and a plain refresh from the apiservers: nothing either.
    failed, third = run(storage_state, control_plane.module_args(audit=audit("2026-11-21T14:20:00Z", found)))
    assert not failed and third["changed"] is False
    failed, plain = run(storage_state, control_plane.module_args())
    assert not failed and plain["changed"] is False
    assert record_writes(control_plane) == written

    # A real change (the old objects were migrated): that one record is written, nothing else.
    migrated = {"deployments.apps": {"objects": 3, "hashes": [current], "unreadable": 0}}
    failed, fourth = run(storage_state, control_plane.module_args(audit=audit("2026-11-21T14:40:00Z", migrated)))
    assert not failed and fourth["changed"] is True
    assert [r["name"] for r in fourth["records"] if r["action"] != "unchanged"] == ["deployments.apps"]
    assert record_writes(control_plane) - written == 2  # its annotations, then its status
    after = next(r for r in fourth["records"] if r["name"] == "deployments.apps")["after"]
    assert after["status"]["persistedStorageVersionHashes"] == [current] and after["measured_at"] == "2026-11-21T14:40:00Z"


def test_record_max_age_still_judges_a_record_by_its_heartbeat(control_plane, run):
    """Records that were confirmed without a write keep their heartbeat: a check with record_max_age trusts them while
    it is young, and a record whose heartbeat is old is still Unknown (nothing refreshed it behind the check's back)."""
    from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.client import ApiClient
    from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.settings import ConnectionSettings
    from ansible_collections.kubeupgrade.storage.plugins.module_utils._remember import storage_state_io
    from ansible_collections.kubeupgrade.storage.plugins.modules import storage_state, storage_version_check

    control_plane.admin.seed("demo")
    resources = ["configmaps"]
    failed, result = run(storage_state, control_plane.module_args(resources=resources,
                                                                  audit=audit("2026-11-21T14:00:00Z", {"configmaps": {"objects": 1, "hashes": []}})))
    assert not failed and result["changed"] is True
    failed, again = run(storage_state, control_plane.module_args(resources=resources,
                                                                 audit=audit("2026-11-21T14:10:00Z", {"configmaps": {"objects": 1, "hashes": []}})))
    assert not failed and again["changed"] is False
    check = control_plane.module_args(target_release="1.32", resources=resources, record_max_age=600, fail_on=[])
    failed, judged = run(storage_version_check, check)
    assert not failed and judged["resources"][0]["verdict"] == "safe", judged["resources"][0]["reason"]

    client = ApiClient(ConnectionSettings.from_params({"kubeconfig": control_plane.kubeconfig}))
    obj = client.get(f"{storage_state_io.STATES_PATH}/configmaps")
    obj["status"]["lastHeartbeatTime"] = "2020-01-01T00:00:00Z"
    client.put(f"{storage_state_io.STATES_PATH}/configmaps/status", obj)
    failed, judged = run(storage_version_check, check)
    assert not failed and judged["resources"][0]["verdict"] == "unknown"
    assert "more than 600s ago" in judged["resources"][0]["reason"]


@pytest.fixture
def etcd_plane(control_plane_factory, etcd_tls):
    pki = etcd_tls.pki
    plane = control_plane_factory(apiservers=3, releases="1.35", tls=TLS, etcd={
        "endpoint": etcd_tls.url, "ca_file": pki.ca_cert, "cert_file": pki.client_cert, "key_file": pki.client_key})
    for i in range(3):  # one object still in a version 1.36 cannot read, two current
        plane.admin.put_raw(PRIORITYCLASSES, None, f"obj-{i}", "scheduling.k8s.io/v1alpha1" if i == 0 else "scheduling.k8s.io/v1",
                            {"value": i})
    return plane


def test_a_second_audited_preflight_writes_no_record(etcd_plane, etcd_tls, ansible_playbook, tmp_path):
    etcd = {"kubeupgrade_etcd": {"endpoints": [etcd_tls.url], "ca_cert": etcd_tls.pki.ca_cert,
                                 "client_cert": etcd_tls.pki.client_cert, "client_key": etcd_tls.pki.client_key},
            "kubeupgrade_etcd_delegate_to": "localhost", "kubeupgrade_etcd_become": False,
            "kubeupgrade_target_release": "1.36", "kubeupgrade_preflight_fail_on": []}
    first = run(ansible_playbook, "preflight.yml", etcd_plane, tmp_path, **etcd)
    assert first.rc == 0, explain(first)
    written = record_writes(etcd_plane)
    assert written > 0, "the first audited pre-flight creates the records"

    second = run(ansible_playbook, "preflight.yml", etcd_plane, tmp_path, **etcd)
    assert second.rc == 0, explain(second)
    assert record_writes(etcd_plane) == written, "the second audited pre-flight rewrote records that did not change"
    assert second.changed_total == 0, explain(second)
    # The check set them from the audit (refresh_records with audit): the record says when etcd was measured.
    from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.client import ApiClient
    from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.settings import ConnectionSettings
    from ansible_collections.kubeupgrade.storage.plugins.module_utils._remember import records, storage_state_io
    client = ApiClient(ConnectionSettings.from_params({"kubeconfig": etcd_plane.kubeconfig}))
    record = client.get(f"{storage_state_io.STATES_PATH}/{PRIORITYCLASSES}")
    assert records.MEASURED_AT_ANNOTATION in record["metadata"].get("annotations", {}), record["metadata"]
    assert len(record["status"]["persistedStorageVersionHashes"]) == 2, "the v1alpha1 object etcd holds is recorded"
