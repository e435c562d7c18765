# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Operator scenarios on real kube-apiserver binaries (tests/realcp), judged by what the binaries answer and by etcd.

- Rollback judged on a mixed plane: a 1.28/1.32 plane where the 1.32 apiserver wrote objects 1.28 cannot decode.
  The truth is what the real 1.28 binary answers for every stored object of the affected groups (a GET per etcd
  key, a LIST per resource), not what the test created: the 1.32 apiserver writes objects of its own (bootstrap
  FlowSchemas, the default ServiceCIDR, IPAddresses). The pre-flight of the rollback with the etcd audit must name
  exactly the objects the 1.28 binary fails on, and none it reads.
- The README's "First run on your cluster" (steps 1 to 3) on a fresh 2 x 1.32 plane, as an operator types it, and
  its etcd variant: a measured first pre-flight has no ``unknown`` verdict.
- The cluster-side backends driven by their real controllers: the in-tree migrator of a real
  kube-controller-manager 1.32 (v1alpha1) and 1.36 (v1beta1, which prunes a CRD's storedVersions itself, so the
  collection must not write it a second time), and kube-storage-version-migrator (trigger and migrator) next to the collection's
  own StorageState bookkeeping, which share one CRD and must not fight over the records.

Only a real apiserver and real controllers decide these: what a binary can decode, what the controllers write in
their StorageVersionMigration and StorageState objects, and how long they take.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import collections_path
from real_binaries import (
    GADGETS_PATH,
    NO_KIND,
    SCHEMA,
    create,
    explain,
    gadgets_stored_as,
    object_path,
    report,
    run,
    seed_132,
    served,
    switch_gadgets_storage,
    unreadable,
    wait_for,
    write_inventory,
)
from test_demo import readme_block

from ansible_collections.kubeupgrade.storage.plugins.module_utils._remember import records as records_

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
KSVM_CRDS = [REPO / "tests" / "fixtures" / "ksvm" / name for name in ("storage_state_crd.yaml", "storage_migration_crd.yaml")]


# --- helpers ----------------------------------------------------------------------------------------------------


def run_module(ansible_playbook, tmp_path, plane, name, module, args, timeout=900):
    """One task of ``kubeupgrade.storage.<module>`` on localhost against every apiserver of ``plane``; returns
    (the ansible-playbook run, the registered result as a dict)."""
    saved = tmp_path / f"{name}.json"
    play = [{"name": name, "hosts": "localhost", "connection": "local", "gather_facts": False,
             "module_defaults": {"group/kubeupgrade.storage.storage": {
                 "kubeconfig": str(plane.kubeconfig), "endpoints": plane.endpoints}},
             "tasks": [{"name": f"Run {module}", f"kubeupgrade.storage.{module}": args, "register": "result",
                        "ignore_errors": True},
                       {"name": "Save the result", "ansible.builtin.copy": {"content": "{{ result | to_json }}",
                                                                            "dest": str(saved)}}]}]
    playbook = tmp_path / f"{name}.yml"
    playbook.write_text(yaml.safe_dump(play, sort_keys=False), encoding="utf-8")
    result = ansible_playbook(playbook, timeout=timeout)
    assert saved.is_file(), explain(result)
    return result, json.loads(saved.read_text(encoding="utf-8"))


def storage_state(plane, name, index=0):
    status, body = plane.request("GET", f"/apis/migration.k8s.io/v1alpha1/storagestates/{name}", index=index)
    assert status == 200, f"StorageState {name}: {status} {body}"
    return body


def discovery_hash(plane, group_version, resource, index=0):
    path = f"/api/{group_version}" if group_version == "v1" else f"/apis/{group_version}"
    status, doc = plane.request("GET", path, index=index)
    assert status == 200, doc
    return next(item["storageVersionHash"] for item in doc["resources"] if item["name"] == resource)


def start_ksvm(plane, workdir, names=("trigger", "migrator")):
    """kube-storage-version-migrator's controllers (``names``) against apiserver 0, each in its own session."""
    kubeconfig = plane.write_kubeconfig(os.path.join(str(workdir), "ksvm.kubeconfig"))
    base = Path(os.environ["KUBEUPGRADE_TEST_K8S_ASSETS"]) / "ksvm"
    processes = []
    flags = {"trigger": [], "migrator": ["--kube-api-qps", "50", "--kube-api-burst", "100"]}
    for name, extra in ((name, flags[name]) for name in names):
        log = open(os.path.join(str(workdir), f"ksvm-{name}.log"), "ab")
        processes.append(subprocess.Popen([str(base / name), "--kubeconfig", kubeconfig, *extra], stdin=subprocess.DEVNULL,
                                          stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        log.close()
    return processes


def stop_processes(processes):
    for process in processes:
        if process.poll() is None:
            os.killpg(process.pid, 15)
    for process in processes:
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            process.wait(timeout=15)


# --- 1. a rollback judged on a mixed 1.28/1.32 plane --------------------------------------------------------------

ROLLBACK_GROUPS = ("flowcontrol.apiserver.k8s.io", "admissionregistration.k8s.io", "resource.k8s.io", "networking.k8s.io")


def seed_132_only(plane, index, namespace="rollback"):
    """Through the 1.32 apiserver ``index``: objects in versions 1.28 lacks (flowcontrol v1, admissionregistration
    v1 policies, resource v1beta1, networking v1beta1)."""
    create(plane, "/api/v1/namespaces", {"metadata": {"name": namespace}}, index=index)
    create(plane, "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas", {"metadata": {"name": "app-v1"}, "spec": {
        "priorityLevelConfiguration": {"name": "global-default"}, "matchingPrecedence": 5000}}, index=index)
    rule = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["configmaps"]}
    create(plane, "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies", {"metadata": {"name": "app-v1"}, "spec": {
        "validations": [{"expression": "true"}], "matchConstraints": {"resourceRules": [rule]}}}, index=index)
    create(plane, "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings", {
        "metadata": {"name": "app-v1"}, "spec": {"policyName": "app-v1", "validationActions": ["Deny"]}}, index=index)
    create(plane, "/apis/resource.k8s.io/v1beta1/deviceclasses", {"metadata": {"name": "gpu"}, "spec": {}}, index=index)
    create(plane, f"/apis/resource.k8s.io/v1beta1/namespaces/{namespace}/resourceclaims", {"metadata": {"name": "claim"}, "spec": {
        "devices": {"requests": [{"name": "gpu", "deviceClassName": "gpu"}]}}}, index=index)
    create(plane, f"/api/v1/namespaces/{namespace}/services", {"metadata": {"name": "web"}, "spec": {
        "clusterIP": "10.0.0.77", "ports": [{"port": 80}]}}, index=index)
    create(plane, "/apis/networking.k8s.io/v1beta1/ipaddresses", {"metadata": {"name": "10.0.0.78"}, "spec": {
        "parentRef": {"group": "", "resource": "services", "namespace": namespace, "name": "web"}}}, index=index)


def truth_through(plane, index, writer_index, groups):
    """What apiserver ``index`` answers for every object stored in etcd under the resources of ``groups`` (as the
    apiserver ``writer_index`` serves them): ``({resource.group: {names it fails to decode}}, {resource.group:
    {names of a resource it does not serve}}, {resource.group: {names it reads}})``."""
    reader, writer = served(plane, index, groups), served(plane, writer_index, groups)
    failing, absent, readable = {}, {}, {}
    for resource, (group, _gv, namespaced) in sorted(writer.items()):
        full = f"{resource}.{group}"
        for key in plane.etcd_keys(f"/registry/{resource}/"):
            rest = key[len(f"/registry/{resource}/"):]
            name = rest  # namespace/name or name, as the report names objects
            if resource not in reader:
                absent.setdefault(full, set()).add(name)
                continue
            status, body = plane.request("GET", object_path(reader[resource][1], resource, namespaced, rest), index=index)
            if status == 200:
                readable.setdefault(full, set()).add(name)
            else:
                assert status == 500 and NO_KIND in str(body), f"GET {key} through apiserver {index}: {status} {body}"
                failing.setdefault(full, set()).add(name)
    return failing, absent, readable


def test_rollback_preflight_on_a_mixed_plane_names_what_the_older_binary_cannot_read(
        real_plane_factory, ansible_playbook, tmp_path):
    plane = real_plane_factory(["1.28", "1.28"], encryption=True)
    plane.restart(1, "1.32")
    seed_132_only(plane, index=1)
    result = run(ansible_playbook, "preflight.yml", plane, tmp_path, kubeupgrade_target_release="1.28",
                 kubeupgrade_etcd=plane.etcd_settings, kubeupgrade_etcd_become=False, kubeupgrade_preflight_fail_on=[])
    assert result.rc == 0, explain(result)

    failing, absent, readable = truth_through(plane, 0, 1, ROLLBACK_GROUPS)
    # What the test wrote is among what the 1.28 binary cannot decode (a sanity check of the scenario, not the truth).
    assert {"app-v1"} <= failing.get("flowschemas.flowcontrol.apiserver.k8s.io", set()), failing
    assert {"app-v1"} <= failing.get("validatingadmissionpolicies.admissionregistration.k8s.io", set()), failing
    assert {"rollback/claim"} <= failing.get("resourceclaims.resource.k8s.io", set()), failing
    # The LISTs through 1.28 fail for exactly the resources with an object it cannot decode: those of the versions
    # it serves itself, and every other LIST its discovery offers.
    reader = served(plane, 0, ROLLBACK_GROUPS)
    failing_lists = set()
    for resource, (group, gv_path, _namespaced) in reader.items():
        status, body = plane.request("GET", f"{gv_path}/{resource}?limit=500", index=0)
        assert status == 200 or (status == 500 and NO_KIND in str(body)), f"LIST {resource}: {status} {body}"
        if status != 200:
            failing_lists.add(f"{resource}.{group}")
    assert failing_lists == set(failing), (failing_lists, failing)
    listed_failures = unreadable(plane, 0)
    assert all(NO_KIND in line and line.split("/")[2] in ROLLBACK_GROUPS for line in listed_failures), listed_failures

    found = report(tmp_path, "preflight-1.28")
    named = {r["resource"]: set(r["objects_named"]) for r in found["resources"] if r["objects_named"]}
    print("\n1.28 cannot decode:", json.dumps({k: sorted(v) for k, v in failing.items()}, indent=1))
    print("1.28 does not serve:", json.dumps({k: sorted(v) for k, v in absent.items()}, indent=1))
    print("report names:", json.dumps({k: sorted(v) for k, v in named.items()}, indent=1))
    print("verdicts:", {r["resource"]: r["verdict"] for r in found["resources"] if r["verdict"] != "safe"})
    assert {name: named.get(name, set()) for name in failing} == failing, "the report misses an object 1.28 cannot decode"
    for name, names in named.items():
        assert not names & readable.get(name, set()), f"the report names {name} objects the 1.28 binary reads: " \
                                                      f"{sorted(names & readable.get(name, set()))}"
    verdicts = {r["resource"]: r["verdict"] for r in found["resources"]}
    assert all(verdicts.get(name) in ("unsafe", "needs_migration") for name in failing), verdicts
    assert all(verdicts.get(name) == "removed" for name in absent), verdicts


# --- 2. the README's first run, on a fresh real cluster -----------------------------------------------------------


def operator_env(workdir):
    """The shell of an operator after the README's set-up lines: the checkout's venv and collection on the paths."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "PYTEST_", "K8S_AUTH_"))}
    env.update({"PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}", "PWD": str(workdir),
                "ANSIBLE_COLLECTIONS_PATH": collections_path(), "ANSIBLE_NOCOLOR": "1"})
    return env


def records(plane):
    status, body = plane.request("GET", "/apis/migration.k8s.io/v1alpha1/storagestates")
    assert status == 200, body
    return {item["metadata"]["name"]: item.get("status") or {} for item in body["items"]}


def test_readme_first_run_on_a_fresh_real_cluster(real_plane_factory, tmp_path):
    commands = readme_block("## First run on your cluster")[:3]
    assert [shlex.split(c)[3] for c in commands] == ["kubeupgrade.storage.preflight", "kubeupgrade.storage.migrate",
                                                     "kubeupgrade.storage.preflight"], commands
    plane = real_plane_factory(["1.32", "1.32"])
    seed_132(plane)
    workdir = tmp_path / "operator"
    workdir.mkdir()
    write_inventory(plane, workdir)
    env = operator_env(workdir)
    outputs, seconds, first, after_first = [], [], {}, {}
    for command in commands:
        started = time.monotonic()
        proc = subprocess.run(shlex.split(command), cwd=workdir, env=env, capture_output=True, text=True, timeout=900,
                              check=False)
        seconds.append(time.monotonic() - started)
        outputs.append(proc.stdout + proc.stderr)
        assert proc.returncode == 0, f"{command}\n{outputs[-1][-6000:]}"
        assert "Traceback" not in outputs[-1], outputs[-1]
        if len(outputs) == 1:
            after_first = records(plane)
            first = json.loads((workdir / "kubeupgrade-reports" / "preflight-1.33.json").read_text(encoding="utf-8"))

    assert "Storage pre-flight: unknown, gate passes" in outputs[0], outputs[0][-4000:]
    final = json.loads((workdir / "kubeupgrade-reports" / "preflight-1.33.json").read_text(encoding="utf-8"))
    assert final["blocking"] == [] and final["verdict"] == "safe", final["blocking"]
    assert "Storage pre-flight: safe, gate passes" in outputs[2], outputs[2][-4000:]
    # Every record the first run left Unknown is now exactly what the apiservers report, and everything reads.
    after = records(plane)
    unknown_before = sorted(name for name, status in after_first.items()
                            if "Unknown" in (status.get("persistedStorageVersionHashes") or []))
    for name in unknown_before:
        status = after[name]
        assert status["persistedStorageVersionHashes"] == [status["currentStorageVersionHash"]], (name, status)
    for index in range(2):
        assert unreadable(plane, index) == []
    # 1. reported, did not block: every resource with objects stored is unknown on a first run, none is unsafe.
    assert first["blocking"] == [] and first["counts"]["unknown"] > 0, first["counts"]
    assert first["counts"]["unsafe"] == first["counts"]["removed"] == 0, first["counts"]
    migrated = re.findall(r"^\W*(\S+)\s+succeeded\s+(\w+)\s+(\d+)\s", outputs[1], re.M)
    assert migrated and {row[0] for row in migrated} >= {"configmaps", "secrets", "gadgets.example.com"}, outputs[1][-6000:]
    print(f"\nmigrate.yml took {seconds[1]:.1f} s and migrated {len(migrated)} resources "
          f"({sum(int(row[2]) for row in migrated)} objects, backends {sorted({row[1] for row in migrated})}); "
          f"pre-flights took {seconds[0]:.1f} s and {seconds[2]:.1f} s; first report: {first['counts']}, "
          f"{len(unknown_before)} records Unknown after step 1")


def test_first_preflight_with_etcd_access_is_measured_not_unknown(real_plane_factory, ansible_playbook, tmp_path):
    """README "With access to etcd": on a cluster the collection never saw, the first pre-flight audits etcd, sets the
    records from it and judges from it: no verdict is unknown."""
    plane = real_plane_factory(["1.32", "1.32"], etcd_tls=True, encryption=True)
    seed_132(plane)
    result = run(ansible_playbook, "preflight.yml", plane, tmp_path, kubeupgrade_target_release="1.33",
                 kubeupgrade_etcd=plane.etcd_settings, kubeupgrade_etcd_become=False, kubeupgrade_preflight_fail_on=[])
    assert result.rc == 0, explain(result)
    found = report(tmp_path, "preflight-1.33")
    unknown = [r["resource"] for r in found["resources"] if r["verdict"] == "unknown"]
    unknown += [f.get("subject") for f in found.get("findings") or [] if f.get("verdict") == "unknown"]
    assert unknown == [] and found["counts"]["unknown"] == 0, (unknown, found["counts"])
    assert found["blocking"] == [] and found["verdict"] == "safe", found["blocking"]
    # The records were set from etcd: each names exactly the hash the apiservers store in (nothing older was stored).
    for name, status in records(plane).items():
        assert "Unknown" not in status.get("persistedStorageVersionHashes", []), (name, status)


def gadget_writes(plane) -> int:
    """PUTs and PATCHes of gadgets every apiserver of ``plane`` answered, from its own request counter."""
    total = 0
    for index in range(len(plane.endpoints)):
        status, text = plane.request("GET", "/metrics", index=index)
        assert status == 200, text
        total += sum(int(float(line.rsplit(" ", 1)[1])) for line in text.splitlines()
                     if line.startswith("apiserver_request_total{") and 'resource="gadgets"' in line
                     and re.search(r'verb="(PUT|PATCH|APPLY)"', line))
    return total


def test_migrate_yml_with_etcd_settings_rewrites_only_the_objects_stored_in_an_old_version(
        real_plane_factory, ansible_playbook, tmp_path):
    """With etcd settings, migrate.yml audits etcd against each resource's current storage version (what the
    apiservers agree on) and rewrites only the objects the audit names: 4 gadgets stored as v1alpha1 are rewritten,
    the 3 already stored as v1 are not (counted by the apiservers), nothing is left old and storedVersions is pruned."""
    plane = real_plane_factory(["1.32", "1.32"])
    gadgets_stored_as(plane, "v1alpha1")

    def gadget(name):
        return {"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": name}, "spec": {"size": 1}}
    for i in range(4):
        create(plane, "/apis/example.com/v1/namespaces/app/gadgets", gadget(f"old{i}"))
    switch_gadgets_storage(plane, "v1")
    wait_for(lambda: all(plane.request("GET", GADGETS_PATH, index=i)[1]["spec"]["versions"][1]["storage"] for i in range(2)),
             "both apiservers to see v1 stored")
    time.sleep(2)  # the CRD handler of each apiserver swaps its storage after the watch event
    for i in range(3):
        create(plane, "/apis/example.com/v1/namespaces/app/gadgets", gadget(f"new{i}"))

    def stored():
        return {key.rsplit("/", 1)[1]: json.loads(plane.etcd_value(key))["apiVersion"]
                for key in plane.etcd_keys("/registry/example.com/gadgets/")}
    assert stored() == {**{f"old{i}": "example.com/v1alpha1" for i in range(4)}, **{f"new{i}": "example.com/v1" for i in range(3)}}
    before = gadget_writes(plane)
    result = run(ansible_playbook, "migrate.yml", plane, tmp_path, kubeupgrade_etcd=plane.etcd_settings, kubeupgrade_etcd_become=False)
    assert result.rc == 0, explain(result)
    assert set(stored().values()) == {"example.com/v1"}, stored()
    assert gadget_writes(plane) - before == 4, explain(result)
    crd = plane.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gadgets.example.com")
    assert crd["status"]["storedVersions"] == ["v1"], crd["status"]
    record = records(plane)["gadgets.example.com"]
    assert record["persistedStorageVersionHashes"] == [record["currentStorageVersionHash"]], record
    assert "Objects stored in another version than the current one (the audit):" in result.stdout, explain(result)
    # the rewrite set every record and left nothing to the migration from the records, which did not run
    assert "none: after the rewrite every record says [current]" in result.stdout, explain(result)


def test_the_object_rewrite_installs_the_records_crd_first_and_sets_every_other_record_from_its_audit(
        real_plane_factory, ansible_playbook, tmp_path):
    """The migrate role's rewrite (storage_migration with objects_from_audit and refresh_records) on a cluster without
    the StorageState CRD: it installs the CRD before the rewrite, rewrites the gadget the audit names, marks the
    gadgets' record [current] (no measurement annotation: the migration's), and sets every other record from the
    audit (its measured-at) - the records one task of the role used to set before migrating. Its CRD's storedVersions,
    left unpruned here, is what it says is left for a migration from the records."""
    plane = real_plane_factory(["1.32", "1.32"])
    gadgets_stored_as(plane, "v1alpha1")
    create(plane, "/apis/example.com/v1alpha1/namespaces/app/gadgets",
           {"apiVersion": "example.com/v1alpha1", "kind": "Gadget", "metadata": {"name": "old"}, "spec": {"size": 1}})
    switch_gadgets_storage(plane, "v1")
    wait_for(lambda: all(plane.request("GET", GADGETS_PATH, index=i)[1]["spec"]["versions"][1]["storage"] for i in range(2)),
             "both apiservers to see v1 stored")
    assert plane.request("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/storagestates.migration.k8s.io")[0] == 404
    saved = tmp_path / "rewrite.json"
    play = [{"name": "rewrite", "hosts": "localhost", "connection": "local", "gather_facts": False,
             "vars": {"etcd": plane.etcd_settings},
             "module_defaults": {"group/kubeupgrade.storage.storage": {"kubeconfig": str(plane.kubeconfig),
                                                                       "endpoints": plane.endpoints},
                                 "group/kubeupgrade.storage.etcd": "{{ etcd | kubeupgrade.storage.etcd_connection }}"},
             "tasks": [
                 {"name": "agree", "kubeupgrade.storage.storage_version_agreement": {"polls": 1}, "register": "gate"},
                 {"name": "audit", "kubeupgrade.storage.storage_version_audit": {
                     "readable_versions": "{{ gate.storage_versions }}", "names_limit": -1}, "register": "audit"},
                 {"name": "rewrite", "kubeupgrade.storage.storage_migration": {
                     "objects_from_audit": "{{ audit }}", "refresh_records": True, "timeout": 120,
                     "prune_crd_stored_versions": False,
                     "checkpoint_dir": str(tmp_path / "checkpoints")}, "register": "rewrite"},
                 {"name": "save", "ansible.builtin.copy": {
                     "content": "{{ {'audit': audit, 'rewrite': rewrite} | to_json }}", "dest": str(saved), "mode": "0600"}}]}]
    playbook = tmp_path / "rewrite.yml"
    playbook.write_text(yaml.safe_dump(play, sort_keys=False), encoding="utf-8")
    result = ansible_playbook(playbook, timeout=300)
    assert result.rc == 0, explain(result)
    outcome = json.loads(saved.read_text(encoding="utf-8"))
    audit, rewrite = outcome["audit"], outcome["rewrite"]
    assert [(m["resource"], m["status"], m["objects_migrated"]) for m in rewrite["migrations"]] == [
        ("gadgets.example.com", "succeeded", 1)], rewrite["migrations"]
    refreshed = rewrite["records_refreshed"]
    assert refreshed["crd_installed"] is True, refreshed
    assert "gadgets.example.com" not in {r["name"] for r in refreshed["records"]}, "the migration's record, not the audit's"
    crd = plane.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gadgets.example.com")
    assert crd["status"]["storedVersions"] == ["v1alpha1", "v1"], crd["status"]
    assert rewrite["records_not_current"] == ["gadgets.example.com"], "its storedVersions is left to the records path"
    status, body = plane.request("GET", "/apis/migration.k8s.io/v1alpha1/storagestates")
    assert status == 200, body
    stored = {item["metadata"]["name"]: item for item in body["items"]}
    gadgets = stored.pop("gadgets.example.com")
    assert gadgets["status"]["persistedStorageVersionHashes"] == [gadgets["status"]["currentStorageVersionHash"]], gadgets
    assert records_.MEASURED_AT_ANNOTATION not in (gadgets["metadata"].get("annotations") or {}), gadgets["metadata"]
    assert len(stored) >= 40 and "configmaps" in stored and "storagestates.migration.k8s.io" in stored, sorted(stored)
    assert {name: (item["metadata"].get("annotations") or {}).get(records_.MEASURED_AT_ANNOTATION) for name, item in stored.items()} == {
        name: records_.format_time(records_.parse_time(audit["measured_at"])) for name in stored}, \
        "every other record is set from the audit"
    assert json.loads(plane.etcd_value(plane.etcd_keys("/registry/example.com/gadgets/")[0]))["apiVersion"] == "example.com/v1"


# --- 3. the in-tree backend, driven by a real kube-controller-manager ---------------------------------------------

INTREE_MIGRATIONS = "/apis/storagemigration.k8s.io/v1alpha1/storageversionmigrations"


def condition(obj, kind):
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == kind), {})


def test_intree_backend_with_the_real_controller_manager_records_current(real_plane_factory, ansible_playbook, tmp_path):
    plane = real_plane_factory(["1.32", "1.32"])
    plane.start_controller_manager()
    plane.create("/api/v1/namespaces", {"metadata": {"name": "app"}})
    for number in range(20):
        plane.create("/api/v1/namespaces/app/configmaps", {"metadata": {"name": f"settings-{number}"}, "data": {"n": str(number)}})
    started = time.monotonic()
    result, outcome = run_module(ansible_playbook, tmp_path, plane, "intree", "storage_migration", {
        "resources": ["configmaps"], "backend": "intree", "keep_migration_objects": True, "timeout": 300,
        "stall_timeout": 240, "refresh_records": True})  # a fresh cluster: the StorageState CRD is installed by the refresh
    took = time.monotonic() - started
    assert not outcome.get("failed"), (outcome.get("msg"), explain(result))
    (migration,) = outcome["migrations"]
    assert (migration["resource"], migration["backend"], migration["status"]) == ("configmaps", "intree", "succeeded"), migration
    assert migration["api_version"] == "storagemigration.k8s.io/v1alpha1", migration
    assert migration["verified"] and not migration["record"].startswith("skipped"), migration
    # The controller's own object says Succeeded, for configmaps.
    obj = plane.get(f"{INTREE_MIGRATIONS}/{migration['name']}")
    resource = obj["spec"]["resource"]
    assert (resource.get("group", ""), resource["resource"]) == ("", "configmaps"), obj["spec"]
    assert condition(obj, "Succeeded").get("status") == "True", obj.get("status")
    # Recorded: the record says every object is stored in the hash both apiservers report for configmaps.
    current = {discovery_hash(plane, "v1", "configmaps", index) for index in range(2)}
    assert len(current) == 1, current
    status = storage_state(plane, "configmaps")["status"]
    assert status["currentStorageVersionHash"] in current, status
    assert status["persistedStorageVersionHashes"] == [status["currentStorageVersionHash"]], status
    print(f"\nin-tree migration of configmaps: {took:.1f} s (module {migration.get('seconds')} s)")


CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
GIZMOS = "gizmos.example.com"
GIZMOS_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": GIZMOS},
    "spec": {"group": "example.com", "scope": "Namespaced",
             "names": {"plural": "gizmos", "singular": "gizmo", "kind": "Gizmo", "listKind": "GizmoList"},
             "versions": [{"name": "v1alpha1", "served": True, "storage": True, "schema": SCHEMA},
                          {"name": "v1", "served": True, "storage": False, "schema": SCHEMA}]},
}


def seed_old_gizmos(plane, namespace, count):
    """Gizmos stored as v1alpha1, then v1 made the storage version: status.storedVersions [v1alpha1, v1]."""
    plane.create(CRDS, GIZMOS_CRD)
    wait_for(lambda: all(plane.request("GET", "/apis/example.com/v1alpha1/gizmos", index=i)[0] == 200
                         for i in range(len(plane.endpoints))), "the gizmos CRD to be served")
    for number in range(count):
        plane.create(f"/apis/example.com/v1alpha1/namespaces/{namespace}/gizmos", {
            "apiVersion": "example.com/v1alpha1", "kind": "Gizmo", "metadata": {"name": f"g-{number}"}, "spec": {"n": number}})
    crd = plane.get(f"{CRDS}/{GIZMOS}")
    for version in crd["spec"]["versions"]:
        version["storage"] = version["name"] == "v1"
    status, body = plane.request("PUT", f"{CRDS}/{GIZMOS}", crd)
    assert status == 200, body
    assert plane.get(f"{CRDS}/{GIZMOS}")["status"]["storedVersions"] == ["v1alpha1", "v1"]


def stored_as(plane, namespace, count):
    """The apiVersion each gizmo is stored in, as etcd holds it (CRs are stored as JSON)."""
    return {json.loads(plane.etcd_value(f"/registry/example.com/gizmos/{namespace}/g-{n}"))["apiVersion"] for n in range(count)}


def _managers(crd):
    return {(e["manager"], e["operation"], e.get("subresource", "")): e.get("time") for e in crd["metadata"]["managedFields"]}


def crd_writes(plane, before):
    """Every write to the CRD since ``before`` (the CRD as read then), replayed from the apiserver's watch cache:
    ``[(storedVersions, the managers whose managedFields entry this write added or re-timed)]``."""
    status, body = plane.request("GET", f"{CRDS}?watch=1&resourceVersion={before['metadata']['resourceVersion']}"
                                        f"&fieldSelector=metadata.name%3D{before['metadata']['name']}&timeoutSeconds=2")
    assert status == 200, body
    events = [body] if isinstance(body, dict) else [json.loads(line) for line in body.splitlines() if line.strip()]
    writes, seen = [], _managers(before)
    for event in events:
        assert event["type"] == "MODIFIED", event
        entries = _managers(event["object"])
        touched = sorted("/".join(part for part in key if part) for key, at in entries.items() if seen.get(key) != at)
        writes.append((event["object"]["status"].get("storedVersions"), touched))
        seen = entries
    return writes


def stored_versions_owners(crd):
    """The managers owning ``status.storedVersions`` in the CRD's managedFields."""
    return sorted(e["manager"] for e in crd["metadata"]["managedFields"]
                  if "f:storedVersions" in json.dumps((e.get("fieldsV1") or {}).get("f:status") or {}))


def test_intree_beta_backend_with_the_real_controller_manager_136_prunes_stored_versions_once(
        real_plane_factory, ansible_playbook, tmp_path):
    """kube-controller-manager 1.36 (storagemigration.k8s.io/v1beta1): from Kubernetes 1.35 its migration runner
    (pkg/controller/storageversionmigrator/migrationrunner.go) prunes a CRD's storedVersions itself a moment after the
    migration says Succeeded. The collection records [current] for each resource, waits for the controller and leaves
    the CRD to it: storedVersions is written once, by the controller."""
    plane = real_plane_factory(["1.36", "1.36"], etcd_version="3.5")
    plane.create("/api/v1/namespaces", {"metadata": {"name": "app"}})
    for number in range(20):
        plane.create("/api/v1/namespaces/app/configmaps", {"metadata": {"name": f"settings-{number}"}, "data": {"n": str(number)}})
    seed_old_gizmos(plane, "app", 5)
    assert stored_as(plane, "app", 5) == {"example.com/v1alpha1"}
    plane.start_controller_manager(release="1.36")  # after the CRD exists: its GC cache then knows gizmos at once
    before = plane.get(f"{CRDS}/{GIZMOS}")
    started = time.monotonic()
    result, outcome = run_module(ansible_playbook, tmp_path, plane, "intree-136", "storage_migration", {
        "resources": ["configmaps", GIZMOS], "backend": "intree", "keep_migration_objects": True, "timeout": 300,
        "stall_timeout": 240, "refresh_records": True})
    took = time.monotonic() - started
    assert not outcome.get("failed"), (outcome.get("msg"), explain(result), outcome.get("migrations"))
    migrations = {m["resource"]: m for m in outcome["migrations"]}
    assert set(migrations) == {"configmaps", GIZMOS}, outcome["migrations"]
    for name, migration in migrations.items():
        assert (migration["backend"], migration["status"], migration["api_version"]) == \
            ("intree", "succeeded", "storagemigration.k8s.io/v1beta1"), migration
        assert migration["verified"] and not migration["record"].startswith("skipped"), migration
        # The controller's own object: Succeeded, for this resource.
        obj = plane.get(f"/apis/storagemigration.k8s.io/v1beta1/storageversionmigrations/{migration['name']}")
        spec = obj["spec"]["resource"]
        assert f"{spec['resource']}.{spec['group']}".rstrip(".") == name, obj["spec"]
        assert condition(obj, "Succeeded").get("status") == "True", obj.get("status")
        # ... and the controller finished it before the collection went on (1.36.2: Running False, MigrationCompleted).
        assert (condition(obj, "Running").get("status"), condition(obj, "Running").get("reason")) == \
            ("False", "MigrationCompleted"), obj.get("status")
        # Recorded: every object stored in the hash both apiservers report.
        group_version = "v1" if name == "configmaps" else "example.com/v1"
        current = {discovery_hash(plane, group_version, name.split(".")[0], index) for index in range(2)}
        assert len(current) == 1, current
        status = storage_state(plane, name)["status"]
        assert status["currentStorageVersionHash"] in current, status
        assert status["persistedStorageVersionHashes"] == [status["currentStorageVersionHash"]], (name, status)
    # The gizmos were rewritten as v1, and the CRD's storedVersions is exactly [v1] ([current]).
    assert stored_as(plane, "app", 5) == {"example.com/v1"}
    after = plane.get(f"{CRDS}/{GIZMOS}")
    assert after["status"]["storedVersions"] == ["v1"], after["status"]
    assert after["metadata"]["generation"] == before["metadata"]["generation"]
    migrating = next(c for c in after["status"]["conditions"] if c["type"] == "StorageMigrating")
    # Written once: one write changed storedVersions, the controller's; the collection wrote none and says so.
    writes = crd_writes(plane, before)
    seen = [before["status"]["storedVersions"]] + [versions for versions, _managers in writes]
    changes = [(previous, now) for previous, now in zip(seen, seen[1:]) if previous != now]
    per_resource = {name: m.get('seconds') for name, m in migrations.items()}
    print(f"\nin-tree v1beta1 migration of configmaps and {GIZMOS}: {took:.1f} s; per resource (module): {per_resource}")
    print("CRD writes:", writes, "| storedVersions owners:", stored_versions_owners(after), "| StorageMigrating:",
          migrating, "| the collection's result:", {k: v for k, v in migrations[GIZMOS].items() if k.startswith("stored")})
    assert changes == [(["v1alpha1", "v1"], ["v1"])], writes
    assert not any("kubeupgrade.storage" in manager for _versions, managers in writes for manager in managers), writes
    assert stored_versions_owners(after) == ["migration-runner-controller"], after["metadata"]["managedFields"]
    assert (migrations[GIZMOS]["stored_versions"], migrations[GIZMOS]["stored_versions_pruned_by"]) == \
        (None, "kube-controller-manager"), migrations[GIZMOS]
    assert migrations["configmaps"]["stored_versions_pruned_by"] is None, migrations["configmaps"]
    assert (migrating["status"], migrating["reason"]) == ("False", "MigrationSucceeded"), migrating


# --- 4. kube-storage-version-migrator: the sigs backend and the reference implementation's records ---------------

SIGS_MIGRATIONS = "/apis/migration.k8s.io/v1alpha1/storageversionmigrations"
STORAGE_STATES = "/apis/migration.k8s.io/v1alpha1/storagestates"
MANAGED_BY = "app.kubernetes.io/managed-by"


def install_ksvm_crds(plane):
    for path in KSVM_CRDS:
        plane.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", yaml.safe_load(path.read_text(encoding="utf-8")))
    for resource in ("storagestates", "storageversionmigrations"):
        wait_for(lambda r=resource: all(plane.request("GET", f"/apis/migration.k8s.io/v1alpha1/{r}", index=i)[0] == 200
                                        for i in range(len(plane.endpoints))), f"{resource} to be served")


def sigs_migrations(plane):
    """``{resource: [(name, created by the collection, Succeeded)]}`` of every StorageVersionMigration."""
    found = {}
    for item in plane.get(SIGS_MIGRATIONS)["items"]:
        spec = item["spec"]["resource"]
        name = f"{spec['resource']}.{spec['group']}" if spec.get("group") else spec["resource"]
        ours = (item["metadata"].get("labels") or {}).get(MANAGED_BY, "").startswith("kubeupgrade")
        found.setdefault(name, []).append((item["metadata"]["name"], ours, condition(item, "Succeeded").get("status") == "True"))
    return found


def persisted(plane):
    return {name: (status.get("persistedStorageVersionHashes"), status.get("currentStorageVersionHash"))
            for name, status in records(plane).items()}


def test_sigs_backend_next_to_the_reference_trigger_and_migrator(real_plane_factory, ansible_playbook, tmp_path):
    """The collection migrates through the real kube-storage-version-migrator and keeps its StorageState records next to
    the reference trigger, which reads and writes the same objects: neither undoes the other."""
    plane = real_plane_factory(["1.32", "1.32"])
    install_ksvm_crds(plane)
    plane.create("/api/v1/namespaces", {"metadata": {"name": "app"}})
    for number in range(10):
        plane.create("/api/v1/namespaces/app/configmaps", {"metadata": {"name": f"settings-{number}"}, "data": {"n": str(number)}})
        plane.create("/api/v1/namespaces/app/secrets", {"metadata": {"name": f"token-{number}"}, "stringData": {"t": str(number)}})
    ours = ["configmaps", "secrets"]
    # The migrator first, the trigger once the collection has recorded its migrations: a trigger that finds no record
    # of a resource deletes every migration of it (its relaunch), the collection's included, which would make the
    # outcome a race between the two.
    processes = start_ksvm(plane, tmp_path, ["migrator"])
    try:
        started = time.monotonic()
        result, outcome = run_module(ansible_playbook, tmp_path, plane, "sigs", "storage_migration", {
            "resources": ours, "backend": "sigs", "keep_migration_objects": True, "timeout": 300, "stall_timeout": 120})
        took = time.monotonic() - started
        assert not outcome.get("failed"), (outcome.get("msg"), explain(result), outcome.get("migrations"))
        assert {(m["resource"], m["backend"], m["status"]) for m in outcome["migrations"]} == \
            {(name, "sigs", "succeeded") for name in ours}, outcome["migrations"]
        assert all(m["api_version"] == "migration.k8s.io/v1alpha1" for m in outcome["migrations"]), outcome["migrations"]
        for migration in outcome["migrations"]:
            obj = plane.get(f"{SIGS_MIGRATIONS}/{migration['name']}")
            assert condition(obj, "Succeeded").get("status") == "True", obj.get("status")
        for name in ours:
            hashes, current = persisted(plane)[name]
            assert hashes == [current], (name, hashes, current)

        processes += start_ksvm(plane, tmp_path, ["trigger"])
        wait_for(lambda: len(records(plane)) > len(ours), "the trigger's first StorageState records")
        # With the trigger running, two refreshes of the collection's records ~20 s apart: no record flaps (one that
        # is [current] stays so), and the collection creates no migration of its own.
        reads = [(time.monotonic(), persisted(plane), sigs_migrations(plane))]
        touched = []
        for round_number in range(2):
            result, refreshed = run_module(ansible_playbook, tmp_path, plane, f"refresh-{round_number}", "storage_state", {})
            assert not refreshed.get("failed"), (refreshed.get("msg"), explain(result))
            touched += [(round_number, r["name"], r["action"], r.get("reasons")) for r in refreshed["records"]
                        if r["action"] != "unchanged"]
            reads.append((time.monotonic(), persisted(plane), sigs_migrations(plane)))
            time.sleep(10)
            reads.append((time.monotonic(), persisted(plane), sigs_migrations(plane)))
            time.sleep(10 if round_number == 0 else 0)
        for (_t0, before, _m0), (t1, after, _m1) in zip(reads, reads[1:]):
            for name, (hashes, current) in before.items():
                if hashes == [current]:
                    assert after[name] == (hashes, current), f"{name} flapped at {t1 - reads[0][0]:.0f} s: {before[name]} -> {after[name]}"
        for name in ours:
            assert all(read[1][name][0] == [read[1][name][1]] for read in reads), [read[1][name] for read in reads]
        final_migrations = reads[-1][2]
        collection_made = {name: [m for m in found if m[1]] for name, found in final_migrations.items()}
        assert {name: len(found) for name, found in collection_made.items() if found} == {name: 1 for name in ours}, \
            final_migrations
        # The trigger launched no migration of a resource whose record the collection had set [current].
        assert all(not m for name in ours for m in final_migrations.get(name, []) if not m[1]), final_migrations

        # The pre-flight reads the records the trigger wrote (Unknown until its own migrations finish) without error.
        result, check = run_module(ansible_playbook, tmp_path, plane, "check", "storage_version_check", {
            "target_release": "1.33", "fail_on": []})
        assert not check.get("failed"), (check.get("msg"), explain(result))
        verdicts = {r["resource"]: r["verdict"] for r in check["resources"]}
        assert all(verdicts[name] == "safe" for name in ours), verdicts
        trigger_records = {name for name in reads[-1][1] if name not in ours}
        print(f"\nsigs migration of {ours}: {took:.1f} s; trigger records: {len(trigger_records)}, "
              f"[current] at the end: {sum(1 for h, c in reads[-1][1].values() if h == [c])}/{len(reads[-1][1])}; "
              f"migrations by the trigger: {sum(1 for found in final_migrations.values() for m in found if not m[1])}; "
              f"check: {check.get('counts')}")
        actions = sorted({(round_number, action) for round_number, _name, action, _reasons in touched})
        print("the collection's refreshes:", {key: sum(1 for t in touched if (t[0], t[2]) == key) for key in actions},
              [t for t in touched if t[2] != "created"])
    finally:
        stop_processes(processes)
