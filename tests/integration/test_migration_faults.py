# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""storage_migration under faults that need more than one request to go wrong.

Every test compares every object before and after (nothing lost, nothing changed), reads which
version each object is stored in from the simulator's store, and checks that no StorageState record
says ``[current]`` unless this run verified every object. The objects are widgets stored in the old
version ``example.com/v1alpha1``, so a missed object shows as one still in that encoding.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import REPO, collections_path
from test_migration import _crd, _install_crd, _storage_state, contents, run, snapshot

from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.client import ApiClient
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.settings import ConnectionSettings
from ansible_collections.kubeupgrade.storage.plugins.module_utils._rewrite import checkpoint as cp

WIDGETS = "widgets.example.com"
OLD, NEW = "example.com/v1alpha1", "example.com/v1"
WIDGETS_PATH = "/apis/example.com/v1/widgets"


@pytest.fixture
def plane(control_plane_factory):
    plane = control_plane_factory(apiservers=3, releases="1.32", tls=True, seed="demo", migrator_delay=0.2)
    _install_crd(plane, "storage_state_crd.json")
    return plane


def put_widgets(plane, count, version=OLD, namespace="demo"):
    for i in range(count):
        plane.admin.put_raw(WIDGETS, namespace, f"w-{i:04d}", version,
                            {"metadata": {"labels": {"i": str(i)}}, "spec": {"size": i, "note": "x" * 24}})


def encodings(snap) -> dict:
    """{version: number of objects stored in it}."""
    found = {}
    for version, _obj in snap.values():
        found[version] = found.get(version, 0) + 1
    return found


def record_is_current(plane, resource, storage_hash) -> bool:
    state = _storage_state(plane, resource) or {}
    return state.get("persistedStorageVersionHashes") == [storage_hash]


def current_hash(plane, capsys, resource=WIDGETS) -> str:
    failed, result = run(plane, capsys, check_mode=True, resources=[resource], backend="client")
    assert not failed, result["msg"]
    return result["migrations"][0]["storage_hash"]


# -- a checkpoint left by an earlier run ----------------------------------------------------------------------

@pytest.mark.parametrize("case", ["fresh", "too-old", "other-hash"])
def test_a_checkpoint_from_an_earlier_run_never_leaves_an_object_behind(plane, capsys, case):
    """The earlier run stopped after its first chunk without migrating it (as after a rollback of the objects it
    did migrate): resuming from its position alone would skip them. A usable checkpoint is resumed and followed
    by a verification pass; an old one, or one made for another storage hash, is discarded with the reason."""
    put_widgets(plane, 30)
    before = snapshot(plane, WIDGETS)
    storage_hash = current_hash(plane, capsys)
    api = ApiClient(ConnectionSettings.from_params({"kubeconfig": plane.kubeconfig}))
    page = api.request("GET", WIDGETS_PATH, query={"limit": 10}).json()
    token = page["metadata"]["continue"]
    age = 1000 if case == "too-old" else 5
    checkpoint_dir = str(plane.workdir) + "/checkpoints"
    store = cp.FileStore(checkpoint_dir)
    store.check_writable()
    store.save(cp.Checkpoint(WIDGETS, api.endpoint, "someotherhash" if case == "other-hash" else storage_hash,
                             "earlier-run", token, time.time() - age, objects_migrated=10, chunks=1))
    assert os.listdir(checkpoint_dir)

    failed, result = run(plane, capsys, resources=[WIDGETS], backend="client", chunk_size=10, concurrency=2,
                         checkpoint_dir=checkpoint_dir)
    assert not failed, result["msg"]
    entry = result["migrations"][0]
    progress = entry["progress"]
    if case == "fresh":
        assert progress["resumed"] and progress["verification_pass"], progress
    else:
        assert not progress["resumed"], progress
        assert ("older than" if case == "too-old" else "storage hash") in progress["checkpoint_discarded"], progress
    after = snapshot(plane, WIDGETS)
    assert encodings(after) == {NEW: len(before)}, encodings(after)  # not one object left in the old version
    assert contents(after) == contents(before)
    assert entry["verified"] and record_is_current(plane, WIDGETS, storage_hash)
    assert _crd(plane, WIDGETS)["status"]["storedVersions"] == ["v1"]
    assert [n for n in os.listdir(checkpoint_dir) if WIDGETS in n] == []  # a finished run leaves no checkpoint


# -- an apiserver restarts in the middle of a chunk -----------------------------------------------------------

def test_an_apiserver_restart_in_the_middle_of_a_chunk_is_ridden_out_and_verified(plane, capsys):
    put_widgets(plane, 60)
    before = snapshot(plane, WIDGETS)
    plane.admin.fault("slow", delay=0.05, method="PUT", path_regex="/widgets/")  # a chunk of 30: ~0.4 s at concurrency 4

    def restart_every_apiserver():
        for index in range(3):
            time.sleep(0.3)
            plane.admin.restart(index)

    restarter = threading.Thread(target=restart_every_apiserver)
    restarter.start()
    failed, result = run(plane, capsys, resources=[WIDGETS], backend="client", chunk_size=30, concurrency=4,
                         request_timeout=5, timeout=60)
    restarter.join()
    assert not failed, result["msg"]
    entry = result["migrations"][0]
    assert entry["verified"] and entry["objects_failed"] == 0, entry
    after = snapshot(plane, WIDGETS)
    assert encodings(after) == {NEW: len(before)}
    assert contents(after) == contents(before)
    assert record_is_current(plane, WIDGETS, entry["storage_hash"])


# -- two runs at once -----------------------------------------------------------------------------------------

def _module_process(plane, tmp_path, name, **args):
    """storage_migration as Ansible runs it: its own process, its arguments in a file."""
    params = {"kubeconfig": plane.kubeconfig, "endpoints": plane.endpoints, "poll_interval": 0.1,
              "checkpoint_dir": str(tmp_path / f"checkpoints-{name}")}
    params.update(args)
    args_file = tmp_path / f"args-{name}.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": params}), encoding="utf-8")
    module = Path(REPO) / "plugins" / "modules" / "storage_migration.py"
    env = dict(os.environ, PYTHONPATH=collections_path())
    return subprocess.Popen([sys.executable, str(module), str(args_file)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def _lease_holders(plane, name, stop, seen):
    while not stop.is_set():
        for stored in plane.admin.stored_objects("leases.coordination.k8s.io"):
            if stored["name"] == name:
                holder = (stored["object"].get("spec") or {}).get("holderIdentity")
                if holder and (not seen or seen[-1] != holder):
                    seen.append(holder)
        stop.wait(0.05)


def _writes(plane, resource="widgets") -> int:
    """Object writes the simulator's audit counted: PUT (update, the default write) and PATCH (apply)."""
    return sum(e["count"] for e in plane.admin._call("audit") if e["verb"] in ("update", "patch") and e["resource"] == resource)


def test_two_runs_started_together_take_turns_through_the_lease(plane, capsys, tmp_path):
    """The second run waits for the Lease, then reads the record the first left: every object is written once."""
    put_widgets(plane, 25)
    before = snapshot(plane, WIDGETS)
    writes_before = _writes(plane)
    plane.admin.fault("slow", delay=0.1, method="PUT", path_regex="/widgets/")  # each run writes ~2.5 s at concurrency 1
    stop, holders = threading.Event(), []
    sampler = threading.Thread(target=_lease_holders,
                               args=(plane, "kubeupgrade-storage-migration-widgets.example.com", stop, holders))
    sampler.start()
    common = {"resources": [WIDGETS], "backend": "client", "chunk_size": 5, "concurrency": 1, "timeout": 40,
              "lock_duration": 10}
    started = time.monotonic()
    procs = [_module_process(plane, tmp_path, name, **common) for name in ("a", "b")]
    outputs = [p.communicate(timeout=60) for p in procs]
    elapsed = time.monotonic() - started
    stop.set()
    sampler.join()
    results = [json.loads(out.strip().splitlines()[-1]) for out, _err in outputs]
    assert all(not r.get("failed") for r in results), [r.get("msg") for r in results]
    # one held the Lease, then (briefly, maybe unsampled) the other: never back and forth
    assert 1 <= len(holders) <= 2, holders
    first, second = sorted(results, key=lambda r: not r["migrations"])
    assert first["migrations"][0]["status"] == "succeeded" and first["changed"], first["msg"]
    # the second waited for the first to finish writing, then found its record: nothing left to rewrite
    assert second["migrations"] == [] and not second["changed"], second["msg"]
    reason = {s["resource"]: s["reason"] for s in second["skipped_resources"]}[WIDGETS]
    assert "waited for its Lease" in reason and first["migrations"][0]["storage_hash"] in reason, reason
    assert second["msg"] == f"Skipped {WIDGETS}: another run migrated and recorded it meanwhile.", second["msg"]
    assert _writes(plane) - writes_before == len(before)  # every object written once, by the first run
    assert elapsed < 40 + 5
    after = snapshot(plane, WIDGETS)
    assert encodings(after) == {NEW: len(before)}
    assert contents(after) == contents(before)
    assert record_is_current(plane, WIDGETS, first["migrations"][0]["storage_hash"])


# -- the playbook is killed -----------------------------------------------------------------------------------

def _wait_for(predicate, timeout, interval=0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    return predicate()


def test_the_module_stops_on_its_own_when_the_playbook_is_killed(plane, tmp_path):
    put_widgets(plane, 120)
    before = snapshot(plane, WIDGETS)
    plane.admin.fault("slow", delay=0.1, method="PUT", path_regex="/widgets/")  # ~12 s of writes at concurrency 1
    playbook = tmp_path / "migrate.yml"
    playbook.write_text(f"""
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - kubeupgrade.storage.storage_migration:
        kubeconfig: {plane.kubeconfig}
        endpoints: {json.dumps(plane.endpoints)}
        resources: [{WIDGETS}]
        backend: client
        chunk_size: 5
        concurrency: 1
        checkpoint_dir: {tmp_path / "checkpoints"}
""", encoding="utf-8")
    home = tmp_path / "home"
    home.mkdir()
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections_path(), HOME=str(home), ANSIBLE_NOCOLOR="1")
    cmd = [str(Path(sys.executable).with_name("ansible-playbook")), str(playbook), "-i", "localhost,",
           "-e", json.dumps({"ansible_python_interpreter": sys.executable})]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=str(REPO),
                            start_new_session=True)
    try:
        assert _wait_for(lambda: encodings(snapshot(plane, WIDGETS)).get(NEW, 0) >= 10, 60), "the migration never started"
        os.kill(proc.pid, signal.SIGKILL)  # ansible-playbook only: its worker and the module are left running
        proc.wait(timeout=10)
        killed_at = time.monotonic()

        def quiet():
            first = encodings(snapshot(plane, WIDGETS)).get(NEW, 0)
            time.sleep(1.5)
            return first if encodings(snapshot(plane, WIDGETS)).get(NEW, 0) == first else None

        stopped_with = _wait_for(quiet, 20, interval=0)
        assert stopped_with is not None, "the module went on migrating after ansible-playbook was killed"
        assert time.monotonic() - killed_at < 15
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # whatever is left of the process group this test started
        except ProcessLookupError:
            pass
    assert stopped_with < len(before), "it finished before it was stopped: the test proves nothing"
    after = snapshot(plane, WIDGETS)
    assert contents(after) == contents(before)
    assert (_storage_state(plane, WIDGETS) or {}).get("persistedStorageVersionHashes") in (None, [])  # no record
    assert _crd(plane, WIDGETS)["status"]["storedVersions"] == ["v1alpha1", "v1"]  # not pruned


# -- one object denied by admission ---------------------------------------------------------------------------

def test_a_denied_object_is_named_its_resource_goes_on_and_nothing_is_recorded_for_it(plane, capsys):
    put_widgets(plane, 20)
    plane.admin.put_raw("configmaps", "demo", "old-cm", "v1", {"data": {"k": "v"}})
    before, before_cm = snapshot(plane, WIDGETS), snapshot(plane, "configmaps")
    plane.admin.fault("deny_update", resource=WIDGETS, namespace="demo", name="w-0007", code=403,
                      message="admission webhook \"freeze.example.com\" denied the request: frozen")
    failed, result = run(plane, capsys, resources=[WIDGETS, "configmaps"], backend="client", chunk_size=4,
                         concurrency=2)
    assert failed
    assert f"{WIDGETS} demo/w-0007" in result["msg"] and "frozen" in result["msg"], result["msg"]
    entries = {m["resource"]: m for m in result["migrations"]}
    widgets = entries[WIDGETS]
    assert widgets["status"] == "failed" and not widgets["verified"]
    assert [f["object"] for f in widgets["failed_objects"]] == [f"{WIDGETS} demo/w-0007"]
    after = snapshot(plane, WIDGETS)
    assert {k for k, v in after.items() if v[0] == OLD} == {"demo/w-0007"}  # every other object went on
    assert contents(after) == contents(before) and contents(snapshot(plane, "configmaps")) == contents(before_cm)
    assert not record_is_current(plane, WIDGETS, widgets["storage_hash"])
    assert _crd(plane, WIDGETS)["status"]["storedVersions"] == ["v1alpha1", "v1"]  # still holds the old version
    assert entries["configmaps"]["status"] == "succeeded"  # the other resource of the run is not held back
    assert record_is_current(plane, "configmaps", entries["configmaps"]["storage_hash"])


def test_persistent_500s_and_a_short_timeout_name_the_500(plane, capsys):
    """A migration that times out because every request fails says so: the timeout names the last failure (status
    and reason, apiserver, request, how many attempts), not only "timed out after 0 objects"."""
    put_widgets(plane, 5)
    plane.admin.fault("status", code=500, method="GET", path_regex=f"^{re.escape(WIDGETS_PATH)}$")
    failed, result = run(plane, capsys, resources=[WIDGETS], backend="client", timeout=4)
    assert failed
    message = result["msg"]
    assert f"Migration of {WIDGETS} timed out after 0 objects" in message, message
    assert re.search(r"every request since \d\d:\d\d:\d\d UTC \(the last \d+s\) failed; last: HTTP 500 \w+ from https://",
                     message), message
    assert f"(GET {WIDGETS_PATH})" in message and re.search(r"\(\d+ attempts\)", message), message
