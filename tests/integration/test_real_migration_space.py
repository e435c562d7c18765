# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The audit-driven migration against etcd's space quota, end to end: a real kube-apiserver 1.36 on a real etcd 3.5
started with a small ``--quota-backend-bytes``, and ``ansible-playbook`` running what an operator runs - the audit
with a target and ``names_limit: -1``, then ``storage_migration`` with ``objects_from_audit``.

Custom resources of 16 KiB are written as ``v1alpha1`` until rewriting them all would bring etcd's database past 95%
of its quota (each rewrite keeps the old revision until the apiserver compacts); the CRD's storage version then
becomes ``v1`` and the target CRD drops ``v1alpha1``, so the audit lists every one of them.

- At 16 MiB the play fails on the migration task, its first error line naming the quota and the recovery, before any
  write: no key the migration could touch changes revision in etcd (the apiserver's own leases only), no NOSPACE alarm,
  every object still stored as ``v1alpha1`` with the same content.
- With ``--quota-backend-bytes`` raised (the recovery it names) to where the rewrites fit by the check's estimate but
  pass 75% of it (85%), the same play warns and succeeds: every object is then stored as ``v1`` with the same content,
  no alarm, the CRD's ``storedVersions`` pruned, and etcd's database grew by no more than the check expected (by the
  stored bytes alone it expected 86% of the quota and reached 95%).
"""

from __future__ import annotations

import base64
import json
import os
from concurrent.futures import ThreadPoolExecutor

import yaml
from real_binaries import TODAY_ETCD, TODAY_TO, create, explain, wait_for
from realcp.plane import locked_state, process_start
from test_failure_first_line import FIRST_LINE, first_error

from ansible_collections.kubeupgrade.storage.plugins.module_utils import audit_result
from ansible_collections.kubeupgrade.storage.plugins.module_utils._migrate import plan

MIB = 1 << 20
QUOTA = 16 * MIB
CRD_NAME = "blobs.example.com"
CRD_PATH = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}"
BLOBS = "/apis/example.com/v1/namespaces/default/blobs"
PREFIX = "/registry/example.com/blobs/default/"
# What the apiserver itself renews every few seconds: its identity, peer and leader-election leases (the migration's
# own Lease, kube-system/kubeupgrade-storage-migration-<resource>, is not one of them).
HEARTBEATS = ("/registry/leases/kube-system/", "/registry/peerserverleases/")
SCHEMA = {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}


def _crd(versions, storage):
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": CRD_NAME},
            "spec": {"group": "example.com", "scope": "Namespaced",
                     "names": {"plural": "blobs", "singular": "blob", "kind": "Blob", "listKind": "BlobList"},
                     "versions": [{"name": name, "served": True, "storage": name == storage, "schema": SCHEMA}
                                  for name in versions]}}


# The CRD the target release installs: v1 only, so every object still stored as v1alpha1 must be rewritten first.
TARGET_CRD = _crd(["v1"], "v1")


def _etcd(plane, path, body) -> dict:
    return json.loads(plane.etcd._request("POST", path, body))


def _status(plane) -> dict:
    return _etcd(plane, "/v3/maintenance/status", {})


def _alarms(plane) -> list:
    return _etcd(plane, "/v3/maintenance/alarm", {"action": "GET"}).get("alarms") or []


def _written_since(plane, revision) -> list:
    """Every key under /registry/ whose last write is after ``revision``."""
    prefix = b"/registry/"
    found = _etcd(plane, "/v3/kv/range", {"key": base64.b64encode(prefix).decode(), "keys_only": True,
                                          "range_end": base64.b64encode(prefix[:-1] + b"0").decode()})
    return sorted(base64.b64decode(kv["key"]).decode() for kv in found.get("kvs") or [] if int(kv["mod_revision"]) > revision)


def _stored(plane) -> dict:
    """``{name: (stored apiVersion, content without metadata)}`` of every blob as etcd holds it."""
    return {key.decode().rpartition("/")[2]: (obj["apiVersion"], {k: v for k, v in obj.items() if k not in ("apiVersion", "metadata")})
            for key, value in plane.etcd.range_prefix(PREFIX) for obj in [json.loads(value)]}


def _fill(plane):
    """Blobs of 16 KiB written as v1alpha1, 64 at a time, until etcd's database plus one more copy of every blob (what
    rewriting them all adds) passes 98% of the quota; the database itself stays near half of it. The count."""
    payload = base64.b64encode(os.urandom(12 * 1024)).decode()

    def one(i):
        create(plane, "/apis/example.com/v1alpha1/namespaces/default/blobs",
               {"apiVersion": "example.com/v1alpha1", "kind": "Blob", "metadata": {"name": f"b-{i:04d}"},
                "data": payload[i % 64:] + payload[:i % 64]})

    count, each = 0, 0
    with ThreadPoolExecutor(8) as pool:
        while int(_status(plane)["dbSize"]) + count * each < 0.98 * QUOTA:
            list(pool.map(one, range(count, count + 64)))
            count += 64
            each = each or len(plane.etcd_value(PREFIX + "b-0000"))
    return count


def _switch_storage_to_v1(plane):
    crd = plane.get(CRD_PATH)
    for entry in crd["spec"]["versions"]:
        entry["storage"] = entry["name"] == "v1"
    status, answer = plane.request("PUT", CRD_PATH, crd)
    assert status == 200, answer


def _raise_quota(plane, quota):
    """What the refusal says to do: etcd restarted on the same data with a larger ``--quota-backend-bytes``."""
    plane.etcd.stop()
    plane.etcd.extra_args = [arg for arg in plane.etcd.extra_args if not arg.startswith("--quota-backend-bytes=")]
    plane.etcd.extra_args.append(f"--quota-backend-bytes={quota}")
    plane.etcd.start()
    with locked_state(plane.state_file) as state:  # the reaper of leftover planes finds the new process
        state["etcd_process"] = {"pid": plane.etcd.process.pid, "pid_start": process_start(plane.etcd.process.pid)}
    wait_for(lambda: plane.request("GET", BLOBS + "?limit=1")[0] == 200, "the apiserver to read from etcd again")


def _play(ansible_playbook, plane, tmp_path, name):
    """The operator's play: the audit against the target (1.36 and the target CRD), every name listed, saved; then
    the migration of the objects it lists, saved."""
    audit_out, migrated_out = tmp_path / f"{name}-audit.json", tmp_path / f"{name}-migrated.json"
    playbook = tmp_path / f"{name}.yml"
    playbook.write_text(yaml.safe_dump([{
        "hosts": "localhost", "connection": "local", "gather_facts": False,
        "module_defaults": {"group/kubeupgrade.storage.etcd": {"etcd_endpoints": [plane.etcd.url]},
                            "group/kubeupgrade.storage.storage": {"kubeconfig": plane.kubeconfig, "endpoints": plane.endpoints}},
        "tasks": [
            {"name": "Audit etcd for objects the target cannot decode, listing every one",
             "kubeupgrade.storage.storage_version_audit": {
                 "target_release": TODAY_TO, "target_crds": [TARGET_CRD], "names_limit": -1, "pages_per_second": 0},
             "register": "audit"},
            {"name": "Keep the audit", "ansible.builtin.copy": {
                "content": "{{ audit | to_json }}", "dest": str(audit_out), "mode": "0600"}},
            {"name": "Rewrite only those objects", "kubeupgrade.storage.storage_migration": {
                "objects_from_audit": "{{ audit }}", "checkpoint_dir": str(tmp_path / "checkpoints"), "timeout": 120},
             "register": "migrated"},
            {"name": "Keep the result", "ansible.builtin.copy": {
                "content": "{{ migrated | to_json }}", "dest": str(migrated_out), "mode": "0600"}},
        ]}]))
    result = ansible_playbook(playbook)
    audit = json.loads(audit_out.read_text()) if audit_out.exists() else None
    migrated = json.loads(migrated_out.read_text()) if migrated_out.exists() else None
    return result, audit, migrated


def test_a_migration_past_the_space_quota_is_refused_before_any_write_and_runs_once_the_quota_is_raised(
        real_plane_factory, ansible_playbook, tmp_path):
    plane = real_plane_factory([TODAY_TO], etcd_version=TODAY_ETCD, etcd_args=[f"--quota-backend-bytes={QUOTA}"])
    create(plane, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", _crd(["v1alpha1", "v1"], "v1alpha1"))
    wait_for(lambda: plane.request("GET", BLOBS)[0] == 200, "the blobs CRD to be served")
    count = _fill(plane)
    _switch_storage_to_v1(plane)
    before = _stored(plane)
    assert len(before) == count and {version for version, _content in before.values()} == {"example.com/v1alpha1"}

    # At 16 MiB: refused before the first write.
    result, audit, migrated = _play(ansible_playbook, plane, tmp_path, "refused")

    space, listed = audit["etcd_space"], audit["resources"][CRD_NAME]
    growth = plan.rewrite_bytes(audit, audit_result.objects_from_audit(audit))  # what the check expects etcd to grow by
    print(f"\n{count} blobs, {listed['bytes'] / MIB:.1f} MiB stored, {growth / MIB:.1f} MiB of growth expected; {space}")
    assert space["quota"] == QUOTA and listed["not_readable"] == count, (space, listed["not_readable"])
    assert space["db_size"] + listed["bytes"] > 0.95 * QUOTA > space["db_size"], space  # even by the bytes alone
    assert result.rc != 0 and migrated is None, explain(result)
    line = first_error(result)
    print(f"first error line ({len(line)} characters): {line}")
    assert len(line) <= FIRST_LINE, line
    for needle in ("space quota", "compact", "defragment", "raise --quota-backend-bytes"):
        assert needle in line, (needle, line)
    assert "Rewrite only those objects" in result.stdout and result.failed_total == 1, explain(result)
    written = _written_since(plane, audit["revision"])
    assert not [key for key in written if not key.startswith(HEARTBEATS) or "/kubeupgrade-storage" in key], written
    assert _alarms(plane) == []
    assert _stored(plane) == before

    # The quota raised so that the rewrites fit, past 75% of it: the same play warns and rewrites every object.
    raised = int((space["db_size"] + growth) / 0.85) // MIB * MIB
    _raise_quota(plane, raised)
    result, audit, migrated = _play(ansible_playbook, plane, tmp_path, "raised")

    assert result.rc == 0, explain(result)
    assert audit["etcd_space"]["quota"] == raised, audit["etcd_space"]
    expected = audit["etcd_space"]["db_size"] + plan.rewrite_bytes(audit, audit_result.objects_from_audit(audit))
    share = expected / raised
    assert 0.75 < share < 0.95, share
    warning = f"of its quota, {raised // MIB} MiB: {share:.0%} of it after the migration"
    shown = [line for line in (result.stdout + result.stderr).splitlines() if warning in line]
    assert shown, explain(result)
    print(f"warning: {shown[0]}")
    entry = {m["resource"]: m for m in migrated["migrations"]}[CRD_NAME]
    assert entry["status"] == "succeeded" and entry["objects_migrated"] == count and entry["objects_failed"] == 0, entry
    after = _stored(plane)
    assert {version for version, _content in after.values()} == {"example.com/v1"}
    assert {name: content for name, (_v, content) in after.items()} == {name: content for name, (_v, content) in before.items()}
    assert _alarms(plane) == []
    # The check's estimate held: etcd's database grew by no more than it expected (the rewrites could have raised
    # NOSPACE, at 85% of the quota by the estimate, had it been low).
    grown = int(_status(plane)["dbSize"])
    print(f"after the rewrites: database {grown / MIB:.1f} MiB of {raised / MIB:.0f} MiB, expected at most {expected / MIB:.1f} MiB")
    assert grown <= expected, (grown, expected)
    assert plane.get(CRD_PATH)["status"]["storedVersions"] == ["v1"]
