# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""StorageState writes: create + /status, check mode writes nothing, 409 re-plans, mark_migrated, CRD install."""

from __future__ import annotations

import threading
from datetime import datetime, timezone

import pytest
from kube_fakes import FakeApiClient, recorded

from ansible_collections.kubeupgrade.storage.plugins.module_utils._remember import storage_state_io as io
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ApiError, ConfigurationError

NOW = datetime(2026, 11, 21, 15, 0, tzinfo=timezone.utc)
HOST = "https://10.0.0.10:6443"
OBSERVED = {"deployments.apps": {"https://a": "8aSe+NMegvE=", "https://b": "8aSe+NMegvE="}}


class Store:
    """A tiny StorageState store with resourceVersions, answering like the apiserver."""

    def __init__(self):
        self.objects = {}
        self.rv = 10
        self.conflicts = 0
        self.lock = threading.Lock()  # records are written side by side

    def route(self, method, path, query, body):
        with self.lock:
            return self._route(method, path, query, body)

    def _route(self, method, path, query, body):
        name = path.rsplit("/", 2)[-2] if path.endswith("/status") else path.rsplit("/", 1)[-1]
        if method == "POST":
            self.rv += 1
            obj = dict(body, status={}, metadata=dict(body["metadata"], resourceVersion=str(self.rv)))
            self.objects[obj["metadata"]["name"]] = obj
            return 201, obj
        if method == "GET":
            return (200, self.objects[name]) if name in self.objects else (404, {"kind": "Status", "code": 404, "reason": "NotFound"})
        if method == "PUT":
            if self.conflicts:
                self.conflicts -= 1
                return 409, {"kind": "Status", "code": 409, "reason": "Conflict", "message": "the object has been modified"}
            if body["metadata"].get("resourceVersion") != self.objects[name]["metadata"]["resourceVersion"]:
                return 409, {"kind": "Status", "code": 409, "reason": "Conflict"}
            self.rv += 1
            obj = dict(body, metadata=dict(body["metadata"], resourceVersion=str(self.rv)))
            if not path.endswith("/status"):
                obj["status"] = self.objects[name].get("status", {})
            self.objects[name] = obj
            return 200, obj
        raise AssertionError(method)


def client_for(store, resources=("deployments.apps",), dispatch=None):
    dispatch = dispatch or store.route
    routes = {}
    for method in ("GET", "POST", "PUT"):
        for name in ("", *(f"/{r}{tail}" for r in resources for tail in ("", "/status"))):
            routes[(method, io.STATES_PATH + name)] = dispatch
    routes[("GET", io.STATES_PATH)] = lambda m, p, q, b: (200, {"items": list(store.objects.values()), "metadata": {}})
    return FakeApiClient(HOST, routes)


def test_missing_record_is_created_with_unknown_then_unchanged():
    store = Store()
    client = client_for(store)
    changes = io.apply_records(client, OBSERVED, {}, io.ApplyOptions(600, False, NOW))
    assert [c.action for c in changes] == ["created"]
    status = store.objects["deployments.apps"]["status"]
    assert status["persistedStorageVersionHashes"] == ["Unknown", "8aSe+NMegvE="]
    assert [m for _e, m, _p, _q, _b in client.log] == ["POST", "PUT"]
    again = io.apply_records(client, OBSERVED, io.read_records(client), io.ApplyOptions(600, False, NOW))
    assert [c.action for c in again] == ["unchanged"]


MANY = {f"r{i}.example.com": {"https://a": "8aSe+NMegvE="} for i in range(12)}


def test_records_are_written_side_by_side_and_reported_in_name_order():
    """Two creates must be in flight at once, or the barrier breaks: one after the other they never meet."""
    store, meeting = Store(), threading.Barrier(2, timeout=10)

    def dispatch(method, path, query, body):
        if method == "POST" and body["metadata"]["name"] in ("r0.example.com", "r1.example.com"):
            meeting.wait()
        return store.route(method, path, query, body)

    client = client_for(store, MANY, dispatch)
    changes = io.apply_records(client, MANY, {}, io.ApplyOptions(600, False, NOW))
    assert [c.name for c in changes] == sorted(MANY) and {c.action for c in changes} == {"created"}
    assert sorted(store.objects) == sorted(MANY)
    assert all(obj["status"]["persistedStorageVersionHashes"] == ["Unknown", "8aSe+NMegvE="] for obj in store.objects.values())


def test_a_record_that_cannot_be_written_fails_the_task_with_its_error():
    store = Store()

    def dispatch(method, path, query, body):
        if method == "POST" and body["metadata"]["name"] == "r3.example.com":
            return 403, {"kind": "Status", "code": 403, "reason": "Forbidden", "message": "r3 is not yours"}
        return store.route(method, path, query, body)

    with pytest.raises(ApiError) as raised:
        io.apply_records(client_for(store, MANY, dispatch), MANY, {}, io.ApplyOptions(600, False, NOW))
    assert raised.value.status == 403 and "r3 is not yours" in str(raised.value)
    assert "r3.example.com" not in store.objects and "r0.example.com" in store.objects  # the records before it are whole
    assert store.objects["r0.example.com"]["status"]["persistedStorageVersionHashes"] == ["Unknown", "8aSe+NMegvE="]


def test_check_mode_writes_nothing_but_says_what_would_change():
    store = Store()
    client = client_for(store)
    changes = io.apply_records(client, OBSERVED, {}, io.ApplyOptions(600, True, NOW))
    assert changes[0].action == "created" and changes[0].before is None
    assert changes[0].after["status"]["persistedStorageVersionHashes"] == ["Unknown", "8aSe+NMegvE="]
    assert store.objects == {} and all(m == "GET" for _e, m, _p, _q, _b in client.log)


def test_conflict_rereads_and_replans():
    store = Store()
    client = client_for(store)
    io.apply_records(client, OBSERVED, {}, io.ApplyOptions(600, False, NOW))
    store.conflicts = 1
    new = {"deployments.apps": {"https://a": "8aSe+NMegvE=", "https://b": "newhash0000="}}
    changes = io.apply_records(client, new, io.read_records(client), io.ApplyOptions(600, False, NOW))
    assert changes[0].action == "updated"
    assert store.objects["deployments.apps"]["status"]["persistedStorageVersionHashes"] == ["Unknown", "8aSe+NMegvE=", "newhash0000="]


def test_mark_migrated_sets_persisted_to_current_and_is_idempotent():
    store = Store()
    client = client_for(store)
    io.apply_records(client, OBSERVED, {}, io.ApplyOptions(600, False, NOW))
    change = io.mark_migrated(client, "deployments.apps", "8aSe+NMegvE=", now=NOW)
    assert change.action == "updated"
    assert store.objects["deployments.apps"]["status"]["persistedStorageVersionHashes"] == ["8aSe+NMegvE="]
    assert io.mark_migrated(client, "deployments.apps", "8aSe+NMegvE=", now=NOW).action == "unchanged"


def test_missing_crd_without_install_is_one_clear_error():
    client = FakeApiClient(HOST, {})
    with pytest.raises(ConfigurationError, match="install_crd"):
        io.ensure_crd(client, install=False, check_mode=False)
    assert io.ensure_crd(client, install=True, check_mode=True) is True
    assert all(m == "GET" for _e, m, _p, _q, _b in client.log)


def test_crd_is_installed_and_waited_for():
    established = {"status": {"conditions": [{"type": "Established", "status": "True"}]}}
    state = {"created": False}

    def crd(method, path, query, body):
        if method == "POST":
            state["created"] = True
            return 201, body
        return (200, established) if state["created"] else (404, {"kind": "Status", "code": 404})

    client = FakeApiClient(HOST, {("GET", io.CRD_PATH): crd, ("POST", io.CRDS_PATH): crd})
    assert io.ensure_crd(client, install=True, check_mode=False, wait=io.CrdWait(sleep=lambda s: None)) is True


def test_records_read_from_the_real_trigger_objects():
    listing = recorded("svm-sigs/07-list-storagestates-after-trigger-initial-cycle.json")["body"]
    client = FakeApiClient(HOST, {io.STATES_PATH: (200, listing)})
    found = io.read_records(client)
    assert "widgets.example.com" in found and "configmaps" in found
