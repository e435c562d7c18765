# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The migration's bookkeeping requests (Lease, CRD, StorageState) under the migration's retry policy and deadline.

An in-memory apiserver keeps objects by path with ``resourceVersion`` preconditions; faults are raised before a
request is applied, or after it (the apiserver stored it and the answer was lost). Clocks and sleeps are fake.
"""

import copy
import json

import pytest
from kube_fakes import FakeClock

from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.client import ApiResponse
from ansible_collections.kubeupgrade.storage.plugins.module_utils._migrate import bookkeeping
from ansible_collections.kubeupgrade.storage.plugins.module_utils._migrate.lease import LEASES_PATH, ResourceLease
from ansible_collections.kubeupgrade.storage.plugins.module_utils._remember import storage_state_io
from ansible_collections.kubeupgrade.storage.plugins.module_utils._rewrite import migrator as mig
from ansible_collections.kubeupgrade.storage.plugins.module_utils._rewrite import stored_versions_io
from ansible_collections.kubeupgrade.storage.plugins.module_utils._rewrite.ratelimit import Deadline
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import (
    ApiError,
    EndpointUnreachable,
    MigrationError,
)
from ansible_collections.kubeupgrade.storage.plugins.module_utils.retries import (
    NO_RETRY,
    RetriedClient,
    RetryClock,
    RetryPolicy,
)

ENDPOINT = "https://10.0.0.11:6443"
WIDGETS = "widgets.example.com"
LEASE = f"{LEASES_PATH}/kubeupgrade-storage-migration-{WIDGETS}"
CRD = f"{bookkeeping.CRD_PATH}/{WIDGETS}"
STATE = f"{storage_state_io.STATES_PATH}/{WIDGETS}"
HASH = "gIwvi5rymmg="


def api_error(status, reason="", retry_after=None, method="GET", path="/"):
    return ApiError(f"{method} {path} on apiserver {ENDPOINT} failed: HTTP {status} {reason}", endpoint=ENDPOINT,
                    method=method, path=path, status=status, reason=reason, retry_after=retry_after)


def dropped(method="GET", path="/"):
    return EndpointUnreachable(f"{method} {path} on apiserver {ENDPOINT}: connection reset", endpoint=ENDPOINT,
                               method=method, path=path)


TRANSIENT = {
    "503": lambda m, p: api_error(503, "ServiceUnavailable", method=m, path=p),
    "dropped": dropped,
    "429-retry-after": lambda m, p: api_error(429, "TooManyRequests", retry_after=3, method=m, path=p),
}


class Store:
    """Objects by path; POST to a collection creates ``<collection>/<name>``; PUT (also to ``/status``) needs the
    stored resourceVersion. ``fault(method, path, make, count, after)``: ``after`` applies the request first."""

    endpoint = ENDPOINT
    settings = None

    def __init__(self):
        self.objects = {}
        self.rv = 0
        self.faults = []
        self.calls = []

    def fault(self, method, path, make, count=1, after=False):
        self.faults.append({"method": method, "path": path, "make": make, "count": count, "after": after})

    def _take(self, method, path):
        for fault in self.faults:
            if fault["count"] and fault["method"] == method and fault["path"] == path:
                fault["count"] -= 1
                return fault
        return None

    def put_object(self, path, obj):
        self.rv += 1
        obj = copy.deepcopy(obj)
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
        self.objects[path] = obj

    def request(self, method, path, query=None, body=None, content_type=None, accept=None, timeout=None):
        self.calls.append((method, path, timeout))
        fault = self._take(method, path)
        if fault is not None and not fault["after"]:
            raise fault["make"](method, path)
        answer = self._apply(method, path, body)
        if fault is not None:
            raise fault["make"](method, path)
        return ApiResponse(200, {"Content-Type": "application/json"}, json.dumps(answer).encode())

    def _apply(self, method, path, body):
        if method == "GET":
            if path not in self.objects:
                raise api_error(404, "NotFound", method=method, path=path)
            return self.objects[path]
        if method == "POST":
            target = f"{path}/{body['metadata']['name']}"
            if target in self.objects:
                raise api_error(409, "AlreadyExists", method=method, path=path)
            self.put_object(target, body)
            return self.objects[target]
        target = path[:-len("/status")] if path.endswith("/status") else path
        stored = self.objects.get(target)
        if stored is None:
            raise api_error(404, "NotFound", method=method, path=path)
        if (body.get("metadata") or {}).get("resourceVersion") != stored["metadata"]["resourceVersion"]:
            raise api_error(409, "Conflict", method=method, path=path)
        self.put_object(target, body)
        return self.objects[target]

    def count(self, method, path):
        return sum(1 for m, p, _t in self.calls if (m, p) == (method, path))


def books(store, fake, deadline=None):
    return bookkeeping.bookkeeping_client(store, Deadline(deadline, fake.clock), sleep=fake.sleep)


def lease_for(store, fake, deadline=None, holder="run-a@host"):
    return ResourceLease(books(store, fake, deadline), WIDGETS, holder, duration=30)


def acquired(store, fake):
    """A Lease taken, its background renewal stopped: the tests renew by hand with the fake clock."""
    lease = lease_for(store, fake)
    lease.acquire(Deadline(None, fake.clock), sleep=fake.sleep)
    lease._halt.set()
    lease._thread.join()
    lease._halt.clear()
    return lease


def released(store):
    store.put_object(LEASE, {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                             "metadata": {"name": LEASE.rsplit("/", 1)[1], "namespace": "kube-system"},
                             "spec": {"holderIdentity": None, "leaseDurationSeconds": 1,
                                      "renewTime": "2020-01-01T00:00:00.000000Z"}})


def crd_object(stored_versions=("v1alpha1", "v1")):
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": WIDGETS},
            "spec": {"group": "example.com", "names": {"plural": "widgets", "kind": "Widget"}, "scope": "Namespaced",
                     "versions": [{"name": "v1alpha1", "served": True, "storage": False},
                                  {"name": "v1", "served": True, "storage": True}]},
            "status": {"storedVersions": list(stored_versions)}}


# -- the Lease -------------------------------------------------------------------------------------------------

LEASE_REQUESTS = [("GET", LEASE, False), ("POST", LEASES_PATH, False), ("PUT", LEASE, True)]


@pytest.mark.parametrize("fault", sorted(TRANSIENT))
@pytest.mark.parametrize("method,path,existing", LEASE_REQUESTS, ids=["get", "create", "update"])
def test_a_transient_fault_on_a_lease_request_is_retried(method, path, existing, fault):
    store, fake = Store(), FakeClock()
    if existing:
        released(store)
    store.fault(method, path, TRANSIENT[fault], count=2)
    lease = lease_for(store, fake)
    lease.acquire(Deadline(None, fake.clock), sleep=fake.sleep)
    lease._halt.set()
    assert store.objects[LEASE]["spec"]["holderIdentity"] == "run-a@host" and lease.waited_for is None
    assert store.count(method, path) == 3 and len(fake.slept) == 2
    if fault == "429-retry-after":
        assert all(s >= 3 for s in fake.slept)


@pytest.mark.parametrize("method,path,existing", [("POST", LEASES_PATH, False), ("PUT", LEASE, True)],
                         ids=["create", "update"])
def test_a_lease_write_whose_answer_was_lost_is_recognised_as_ours(method, path, existing):
    """The apiserver stored the write and the connection dropped: the retry gets 409, the Lease names us."""
    store, fake = Store(), FakeClock()
    if existing:
        released(store)
    store.fault(method, path, dropped, after=True)
    lease = lease_for(store, fake)
    lease.acquire(Deadline(None, fake.clock), sleep=fake.sleep)
    lease._halt.set()
    assert lease.waited_for is None and lease._lease["spec"]["holderIdentity"] == "run-a@host"
    assert fake.now < 10  # no poll waiting for "another run"


def test_a_lease_that_stays_unreadable_fails_naming_the_resource_and_its_lease_within_the_retry_budget():
    store, fake = Store(), FakeClock()
    store.fault("GET", LEASE, TRANSIENT["503"], count=1000)
    with pytest.raises(MigrationError) as raised:
        lease_for(store, fake).acquire(Deadline(None, fake.clock), sleep=fake.sleep)
    message = str(raised.value)
    assert f"Migration of {WIDGETS} not started" in message
    assert f"Lease kube-system/kubeupgrade-storage-migration-{WIDGETS}" in message
    assert "up to 40 attempts within 90s" in message and "503" in message, message
    assert raised.value.details["lease"] == f"kube-system/kubeupgrade-storage-migration-{WIDGETS}"
    assert fake.now <= mig.MIGRATION_RETRY.budget


def test_a_lease_fault_never_waits_past_the_deadline():
    store, fake = Store(), FakeClock()
    store.fault("POST", LEASES_PATH, TRANSIENT["429-retry-after"], count=1000)
    with pytest.raises(MigrationError, match="after the task's timeout") as raised:
        lease_for(store, fake, deadline=10).acquire(Deadline(10, fake.clock), sleep=fake.sleep)
    assert WIDGETS in str(raised.value) and fake.now <= 10


def test_a_refused_lease_request_is_not_retried():
    store, fake = Store(), FakeClock()
    store.fault("GET", LEASE, lambda m, p: api_error(403, "Forbidden", method=m, path=p), count=1000)
    with pytest.raises(MigrationError, match="not retried") as raised:
        lease_for(store, fake).acquire(Deadline(None, fake.clock), sleep=fake.sleep)
    assert "403" in str(raised.value) and store.count("GET", LEASE) == 1


def test_a_renewal_rides_out_a_fault_and_a_lost_answer():
    store, fake = Store(), FakeClock()
    lease = acquired(store, fake)
    store.fault("PUT", LEASE, TRANSIENT["503"])
    store.fault("PUT", LEASE, dropped, after=True)  # stored; the retry gets 409, the Lease still names us
    lease._renew_once(fake.clock())
    assert lease._lease["spec"]["holderIdentity"] == "run-a@host" and not lease.lost
    assert lease._lease["metadata"]["resourceVersion"] == store.objects[LEASE]["metadata"]["resourceVersion"]


def test_a_renewal_retries_only_until_the_lease_would_expire():
    store, fake = Store(), FakeClock()
    lease = acquired(store, fake)
    store.fault("PUT", LEASE, TRANSIENT["503"], count=1000)
    with pytest.raises(ApiError):
        lease._renew_once(fake.clock())
    assert fake.now <= lease.duration


def test_a_renewal_taken_over_by_another_run_is_not_adopted():
    store, fake = Store(), FakeClock()
    lease = acquired(store, fake)
    taken = copy.deepcopy(store.objects[LEASE])
    taken["spec"]["holderIdentity"] = "run-b@elsewhere"
    store.put_object(LEASE, taken)
    with pytest.raises(ApiError) as raised:
        lease._renew_once(fake.clock())
    assert raised.value.status == 409


def test_release_clears_the_holder_after_a_transient_fault():
    store, fake = Store(), FakeClock()
    lease = lease_for(store, fake)
    lease.acquire(Deadline(None, fake.clock), sleep=fake.sleep)
    store.fault("PUT", LEASE, dropped)
    lease.release()
    assert store.objects[LEASE]["spec"]["holderIdentity"] is None


def test_a_plain_client_gets_no_retry():
    store = Store()
    lease = ResourceLease(store, WIDGETS, "run-a@host")
    assert isinstance(lease.client, RetriedClient) and lease.client.policy is NO_RETRY


# -- the CRD and the StorageState record -----------------------------------------------------------------------

@pytest.mark.parametrize("fault", sorted(TRANSIENT))
def test_a_transient_fault_on_the_crd_read_is_retried(fault):
    store, fake = Store(), FakeClock()
    store.put_object(CRD, crd_object())
    store.fault("GET", CRD, TRANSIENT[fault], count=2)
    assert bookkeeping.crd_or_none(books(store, fake), WIDGETS)["metadata"]["name"] == WIDGETS
    assert store.count("GET", CRD) == 3


def test_a_crd_that_stays_unreadable_fails_naming_the_resource():
    store, fake = Store(), FakeClock()
    store.fault("GET", CRD, TRANSIENT["dropped"], count=1000)
    with pytest.raises(MigrationError, match=f"Migration of {WIDGETS} not started: its CustomResourceDefinition") as raised:
        bookkeeping.crd_or_none(books(store, fake, deadline=20), WIDGETS)
    assert "after the task's timeout" in str(raised.value) and fake.now <= 20


RECORD_REQUESTS = [("GET", STATE, False), ("POST", storage_state_io.STATES_PATH, False),
                   ("PUT", f"{STATE}/status", False), ("PUT", f"{STATE}/status", True)]


@pytest.mark.parametrize("fault", sorted(TRANSIENT))
@pytest.mark.parametrize("method,path,after", RECORD_REQUESTS, ids=["get", "create", "status", "status-answer-lost"])
def test_a_transient_fault_on_the_record_is_retried(method, path, after, fault):
    store, fake = Store(), FakeClock()
    store.fault(method, path, TRANSIENT[fault], count=1 if after else 2, after=after)
    assert bookkeeping.mark_migrated(books(store, fake), WIDGETS, HASH) in ("created", "updated", "unchanged")
    status = store.objects[STATE]["status"]
    assert status["persistedStorageVersionHashes"] == [HASH] and status["currentStorageVersionHash"] == HASH


def test_a_record_that_cannot_be_written_fails_naming_the_resource():
    store, fake = Store(), FakeClock()
    store.fault("POST", storage_state_io.STATES_PATH, TRANSIENT["503"], count=1000)
    with pytest.raises(MigrationError, match=f"{WIDGETS} was migrated, but its StorageState record") as raised:
        bookkeeping.mark_migrated(books(store, fake), WIDGETS, HASH)
    assert "up to 40 attempts within 90s" in str(raised.value)


class JustInstalled(Store):
    """The StorageState CRD was installed a moment ago by another resource of the run: its records answer 404 (page
    not found) until ``served_after`` polls of the collection have passed (None: never)."""

    def __init__(self, served_after):
        super().__init__()
        self.put_object(storage_state_io.CRD_PATH, {"metadata": {"name": storage_state_io.CRD_NAME},
                                                    "status": {"conditions": [{"type": "Established", "status": "True"}]}})
        self.served_after = served_after

    def _apply(self, method, path, body):
        if path.startswith(storage_state_io.STATES_PATH):
            served = self.served_after is not None and self.served_after <= 0
            if method == "GET" and path == storage_state_io.STATES_PATH:
                if not served:
                    if self.served_after is not None:
                        self.served_after -= 1
                    raise api_error(404, "", method=method, path=path)
                return {"items": []}
            if not served:
                raise api_error(404, "", method=method, path=path)
        return super()._apply(method, path, body)


def test_a_record_of_a_crd_installed_a_moment_ago_by_another_resource_waits_until_it_is_served():
    store, fake = JustInstalled(served_after=3), FakeClock()
    assert bookkeeping.mark_migrated(books(store, fake), WIDGETS, HASH) == "created"
    assert store.objects[STATE]["status"]["persistedStorageVersionHashes"] == [HASH]
    assert store.count("POST", bookkeeping.CRD_PATH) == 0  # installed by someone else: not installed again
    assert store.count("GET", storage_state_io.STATES_PATH) == 4 and fake.now < 5


def test_records_that_are_never_served_fail_naming_the_resource_and_the_crd():
    store, fake = JustInstalled(served_after=None), FakeClock()
    expected = f"{WIDGETS} was migrated, but its StorageState record could not be updated"
    with pytest.raises(MigrationError, match=expected) as raised:
        bookkeeping.mark_migrated(books(store, fake, deadline=300), WIDGETS, HASH)
    assert "were not served within 60s" in str(raised.value) and fake.now <= 61


def test_a_pruned_crd_whose_answer_was_lost_is_not_blamed_on_someone_else():
    store, fake = Store(), FakeClock()
    store.put_object(CRD, crd_object())
    at_start = copy.deepcopy(store.objects[CRD])
    store.fault("PUT", f"{CRD}/status", dropped, after=True)
    assert stored_versions_io.prune_stored_versions(books(store, fake), at_start) == ["v1"]
    assert store.objects[CRD]["status"]["storedVersions"] == ["v1"]


@pytest.mark.parametrize("persisted,stored_versions,expected", [
    ([HASH], ("v1",), True),  # another run migrated, recorded and pruned it
    ([HASH], ("v1alpha1", "v1"), False),  # recorded, but storedVersions still to prune: the selection's rule
    (["Unknown"], ("v1",), False),
    (None, ("v1",), False),  # no record at all
])
def test_the_record_read_again_under_the_lease(persisted, stored_versions, expected):
    store, fake = Store(), FakeClock()
    if persisted is not None:
        store.put_object(STATE, {"metadata": {"name": WIDGETS},
                                 "status": {"persistedStorageVersionHashes": persisted,
                                            "currentStorageVersionHash": HASH}})
    store.fault("GET", STATE, TRANSIENT["503"])
    assert bookkeeping.migrated_meanwhile(books(store, fake), WIDGETS, HASH, crd_object(stored_versions)) is expected


# -- the retried client itself ---------------------------------------------------------------------------------

def test_a_request_timeout_is_cut_to_what_is_left_before_the_deadline():
    store, fake = Store(), FakeClock()
    store.put_object(CRD, crd_object())
    client = books(store, fake, deadline=2.0)
    client.get(CRD)
    assert store.calls[-1][2] == pytest.approx(2.0)
    fake.now = 5.0
    client.get(CRD)
    assert store.calls[-1][2] == pytest.approx(0.5)  # past the deadline: one short try, no retry


def test_bounded_takes_the_earlier_deadline():
    fake = FakeClock()
    client = RetriedClient(Store(), RetryPolicy(), RetryClock(sleep=fake.sleep, deadline=Deadline(50.0, fake.clock)))
    assert client.bounded(Deadline(20.0, fake.clock)).timing.deadline.at == 20.0
    assert client.bounded(Deadline(80.0, fake.clock)).timing.deadline.at == 50.0
    assert client.bounded(None).timing.deadline.at == 50.0
    assert client.bounded(Deadline(None, fake.clock)).timing.deadline.at == 50.0
    assert RetriedClient(Store(), RetryPolicy(), RetryClock(deadline=Deadline(None, fake.clock))).bounded(
        Deadline(20.0, fake.clock)).timing.deadline.at == 20.0
