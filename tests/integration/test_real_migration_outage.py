# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Two etcd outages behind a real kube-apiserver 1.36 (etcd 3.5) in the middle of a client-side migration, at the
module's defaults (lock_duration 90 s: the Lease is renewed every 30 s):

- etcd frozen for 10 s (SIGSTOP, then SIGCONT: its ports stay bound, the apiserver's requests hang);
- etcd killed just before a renewal of the resource's Lease and started again on its data dir 20 s later: the
  renewal's answer waits for etcd, then for the apiserver to reconnect to it (a few seconds more).

Both are ridden out: rc 0, every object migrated and unchanged, the record says [current]; meanwhile the progress
line says the migration is stalled and why, not a rate of the past. Before, the renewal had one try, which waited
out the whole Lease (20 s of its 30): the restart failed the run, blaming an apiserver that was up ("no answer from").
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone

from ansible.module_utils.testing import patch_module_args  # ansible-core 2.19+, the oldest supported
from real_binaries import create
from realcp.plane import locked_state, process_start

from ansible_collections.kubeupgrade.storage.plugins.modules import storage_migration

NAMESPACE = "app"
CONFIGMAPS = f"/api/v1/namespaces/{NAMESPACE}/configmaps"
LEASE = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kubeupgrade-storage-migration-configmaps"
OBJECTS = 1500
QPS = 50  # 30 s of writes and 30 s of outages: the run is still writing when the second outage ends
# (seconds after the Lease was taken, seconds etcd does not answer, how): the second starts just before renewal 1.
OUTAGES = ((5.0, 10.0, "frozen"), (29.5, 20.0, "restarted"))


def _seed(plane):
    create(plane, "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})

    def one(i):
        status, answer = plane.request("POST", CONFIGMAPS, {"metadata": {"name": f"cm-{i:05d}"}, "data": {"i": str(i)}})
        assert status == 201, answer

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(one, range(OBJECTS)))


def _items(plane):
    items, token = {}, ""
    while True:
        status, page = plane.request("GET", f"{CONFIGMAPS}?limit=500" + (f"&continue={token}" if token else ""))
        assert status == 200, page
        items.update({item["metadata"]["name"]: item["data"] for item in page["items"]})
        token = page["metadata"].get("continue")
        if not token:
            return items


def _outages(plane, done):
    """Wait for the Lease, then stop etcd for each outage, timed from when the Lease was taken."""
    while plane.request("GET", LEASE)[0] != 200:
        time.sleep(0.1)
    acquired = datetime.strptime(plane.get(LEASE)["spec"]["acquireTime"], "%Y-%m-%dT%H:%M:%S.%fZ")
    taken = time.monotonic() - (datetime.now(timezone.utc).replace(tzinfo=None) - acquired).total_seconds()
    for start, seconds, how in OUTAGES:
        time.sleep(max(0.0, taken + start - time.monotonic()))
        if how == "frozen":
            os.kill(plane.etcd.process.pid, signal.SIGSTOP)
            try:
                time.sleep(seconds)
            finally:
                os.kill(plane.etcd.process.pid, signal.SIGCONT)
        else:
            plane.etcd.process.kill()
            plane.etcd.process.wait()
            plane.etcd.stop()  # closes its log; the same data dir and ports below
            time.sleep(seconds)
            plane.etcd.start()
            with locked_state(plane.state_file) as state:  # the reaper of leftover planes finds the new process
                state["etcd_process"] = {"pid": plane.etcd.process.pid, "pid_start": process_start(plane.etcd.process.pid)}
        done.append((how, seconds))


def _watch(path, lines, stop):
    """Every running line the module writes to its status file, as the action plugin would print it."""
    while not stop.wait(0.5):
        try:
            with open(path, encoding="utf-8") as handle:
                lines.update((json.load(handle).get("running") or {}).values())
        except (OSError, ValueError):
            pass


def test_etcd_frozen_10s_then_restarted_20s_across_a_lease_renewal_is_ridden_out_at_defaults(real_plane_factory, capsys, tmp_path):
    plane = real_plane_factory(["1.36"], etcd_version="3.5")
    _seed(plane)
    before = _items(plane)
    done, lines, stop = [], set(), threading.Event()
    freezer = threading.Thread(target=_outages, args=(plane, done), daemon=True)
    freezer.start()
    status_file = str(tmp_path / "status.json")
    threading.Thread(target=_watch, args=(status_file, lines, stop), daemon=True).start()
    params = {"kubeconfig": plane.kubeconfig, "endpoints": plane.endpoints, "resources": ["configmaps"],
              "backend": "client", "qps": QPS, "checkpoint_dir": str(tmp_path / "checkpoints"),
              "progress_file": status_file}
    started = time.monotonic()
    with patch_module_args(params):
        try:
            storage_migration.main()
        except SystemExit:
            pass
    took = time.monotonic() - started
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    freezer.join(timeout=30)
    stop.set()

    assert done == [(how, seconds) for _start, seconds, how in OUTAGES], (done, took)  # both landed mid-migration
    assert not result.get("failed"), result.get("msg")
    entry = result["migrations"][0]
    assert entry["status"] == "succeeded" and entry["verified"] and entry["objects_failed"] == 0, entry
    assert entry["objects_migrated"] == OBJECTS + 1  # and kube-root-ca.crt
    assert _items(plane) == before  # every object unchanged
    record = plane.get("/apis/migration.k8s.io/v1alpha1/storagestates/configmaps")
    assert record["status"]["persistedStorageVersionHashes"] == [entry["storage_hash"]], record
    assert took > 30.0  # the outages cost time, not the run
    stalled = [line for line in lines if ", stalled for " in line]
    assert stalled and all(": no answer yet from" in line or " tries failed in the last " in line for line in stalled), sorted(lines)
