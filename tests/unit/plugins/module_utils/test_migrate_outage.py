# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""An outage behind the apiserver (etcd stopped or restarted) costs time, not the run: the Lease renewal retries with
short tries until the Lease would expire, the default duration outlasts what the writes ride out, a run that stops
names what did not answer, and a wait for another run's Lease says whose and until when. Clocks are fake."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from kube_fakes import FakeClock
from test_migrate_bookkeeping import ENDPOINT, LEASE, WIDGETS, Store, acquired, books, lease_for

from ansible_collections.kubeupgrade.storage.plugins.module_utils._http import diagnosis
from ansible_collections.kubeupgrade.storage.plugins.module_utils._migrate import lease as lease_mod
from ansible_collections.kubeupgrade.storage.plugins.module_utils._migrate import progress
from ansible_collections.kubeupgrade.storage.plugins.module_utils._rewrite import migrator as mig
from ansible_collections.kubeupgrade.storage.plugins.module_utils._rewrite.ratelimit import Deadline
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ApiError, EndpointUnreachable, MigrationError
from ansible_collections.kubeupgrade.storage.plugins.module_utils.resources import GroupResource
from ansible_collections.kubeupgrade.storage.plugins.modules import storage_migration


class Hanging(Store):
    """An apiserver whose etcd stops answering from ``start`` to ``end`` (fake seconds): a request sent then gets no
    answer; the client gives up after its timeout (the fake clock moves by it). Answers normally otherwise."""

    def __init__(self, fake, start, end):
        super().__init__()
        self.fake, self.start, self.end = fake, start, end
        self.timeouts = []

    def request(self, method, path, query=None, body=None, **options):
        if method == "PUT" and path == LEASE and self.start <= self.fake.now < self.end:
            self.timeouts.append(options.get("timeout"))
            self.fake.now += options.get("timeout") or 30.0
            raise EndpointUnreachable(f"apiserver {ENDPOINT} did not answer PUT {path}: The read operation timed out.",
                                      endpoint=ENDPOINT, method=method, path=path)
        return super().request(method, path, query=query, body=body, **options)


def _lease(store, fake, duration):
    lease = lease_for(store, fake)
    lease.duration = duration
    lease.acquire(Deadline(None, fake.clock), sleep=fake.sleep)
    lease._halt.set()
    lease._thread.join()
    lease._halt.clear()
    return lease


@pytest.mark.parametrize("duration, outage", [(30, 10.6), (90, 20.0), (90, 60.0)])
def test_a_renewal_retries_short_tries_until_etcd_answers_again_within_the_lease(duration, outage):
    fake = FakeClock()
    store = Hanging(fake, 0.0, outage)
    lease = _lease(store, fake, duration)
    fake.now = 0.0
    lease._renew_once(fake.clock())
    assert lease._lease["spec"]["holderIdentity"] == "run-a@host"
    assert len(store.timeouts) >= 2 and max(store.timeouts) <= duration / lease_mod.RENEW_TRIES
    assert outage <= fake.now < duration


def test_a_renewal_gives_up_when_the_lease_would_expire_and_says_what_did_not_answer():
    fake = FakeClock()
    store = Hanging(fake, 0.0, 1000.0)
    lease = _lease(store, fake, 30)
    fake.now = 0.0
    with pytest.raises(ApiError) as raised:
        lease._renew_once(fake.clock())
    assert fake.now <= 30.0 + 0.5
    message = lease._lost_message(raised.value, fake.now)
    assert "could not be renewed before it expires (lock_duration 30s; the last renewal that got through was sent " in message
    assert f"the apiserver {ENDPOINT} took the request but sent no answer within 5s" in message
    assert "most likely its etcd" in message and "etcdctl endpoint health" in message


def test_the_default_lock_outlasts_the_migrations_retry_budget():
    from ansible_collections.kubeupgrade.storage.plugins.module_utils._rewrite.migrator import MIGRATION_RETRY
    assert lease_mod.DEFAULT_DURATION >= MIGRATION_RETRY.budget
    assert storage_migration.argument_spec()["lock_duration"]["default"] == lease_mod.DEFAULT_DURATION
    assert lease_mod.ResourceLease(Store(), WIDGETS, "run-a@host").duration == lease_mod.DEFAULT_DURATION


@pytest.mark.parametrize("status, message, expected", [
    (504, "Timeout: request did not complete within requested timeout - context deadline exceeded",
     "answered HTTP 504 'Timeout: request did not complete within requested timeout - context deadline exceeded': "
     "etcd behind it did not answer"),
    (500, "etcdserver: request timed out", "answered HTTP 500 'etcdserver: request timed out': etcd behind it did not answer"),
    (500, "rpc error: code = Unavailable desc = connection error", "etcd behind it did not answer"),
    (503, "", "answered HTTP 503 no message"),
    (None, "apiserver X did not answer PUT /p: [Errno 111] Connection refused.",
     "no TCP answer from https://a:6443: the connection was refused"),
    (None, "apiserver X did not answer PUT /p: The read operation timed out.",
     "the apiserver https://a:6443 took the request but sent no answer"),
    (None, "apiserver X did not answer PUT /p: [Errno 104] Connection reset by peer.", "the connection to https://a:6443 was dropped"),
    (None, "apiserver X did not answer PUT /p: timed out.", "no answer from https://a:6443 (apiserver X did not answer"),
])
def test_what_did_not_answer_is_said_as_observed(status, message, expected):
    said = diagnosis.unanswered(status, message, "https://a:6443")
    assert expected in said, said
    assert ("etcd" in diagnosis.unanswered_step(status, message)) == ("etcd" in said)


def test_a_wait_for_another_runs_lease_says_whose_and_until_when():
    fake = FakeClock()
    store = Store()
    other = lease_for(store, fake, holder="run-b@elsewhere")
    other.now = lambda: datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
    other.acquire(Deadline(None, fake.clock), sleep=fake.sleep)
    other._halt.set()
    mine = lease_mod.ResourceLease(books(store, fake, 20.0), WIDGETS, "run-a@host", duration=30,
                                   now=lambda: datetime(2026, 1, 1, 12, 0, 10, tzinfo=timezone.utc))
    lines = []
    mine.on_wait = lines.append
    with pytest.raises(MigrationError):
        mine.acquire(Deadline(20.0, fake.clock), sleep=fake.sleep)
    assert lines, "no progress line while waiting"
    assert lines[0] == (f"{WIDGETS}: waiting for Lease kube-system/{LEASE.rsplit('/', 1)[1]}, held by run-b@elsewhere "
                        "(renewed 10s ago; expires at 12:00:30 UTC unless renewed); waiting until 12:00:30 UTC at most "
                        "(the task's timeout)")


def test_each_try_of_a_retried_request_gets_a_timeout_cut_to_what_is_left_then():
    fake = FakeClock()
    store = Hanging(fake, 0.0, 1000.0)
    lease = acquired(store, fake)
    client = lease.client.bounded(Deadline(12.0, fake.clock))
    fake.now = 0.0
    with pytest.raises(ApiError):
        client.request("PUT", LEASE, body={})
    assert store.timeouts[0] == 12.0 and all(t <= 12.0 - sum(store.timeouts[:i]) + 1 for i, t in enumerate(store.timeouts))


def test_a_stalled_migration_says_so_and_why_instead_of_a_stale_rate():
    fake = FakeClock()
    pace = progress.Pace("configmaps", clock=fake)
    fake.now = 5.0
    assert pace.line(500, 1500, "unused") == "configmaps: 500/1500 objects, 100/s, ETA 10s"
    fake.now = 14.0
    assert pace.line(500, 1500, "no answer yet").startswith("configmaps: 500/1500 objects, 36/s")  # 9s: not yet
    fake.now = 15.0
    assert pace.line(500, 1500, "no answer yet from https://a:6443") == (
        "configmaps: 500/1500 objects, stalled for 10s: no answer yet from https://a:6443")
    fake.now = 16.0
    assert pace.line(501, 1500, "") == "configmaps: 501/1500 objects, 31/s, ETA 32s"  # moving again


def test_a_low_qps_is_not_a_stall():
    fake = FakeClock()
    pace = progress.Pace("configmaps", clock=fake, stalled_after=30.0)
    fake.now = 20.0
    assert "stalled" not in pace.line(0, 10, "x")
    fake.now = 30.0
    assert pace.line(0, 10, "x") == "configmaps: 0/10 objects, stalled for 30s: x"


def test_the_stall_reason_is_the_failures_in_a_row_else_requests_without_an_answer():
    class Plain:
        endpoint = ENDPOINT

    migrator = mig.ClientMigrator(Plain(), mig.ResourceTarget(GroupResource("", "configmaps"), "v1"))
    fake = FakeClock(100.0)
    migrator.configure(Deadline(None, fake.clock))
    assert migrator.stall_reason() == f"no answer yet from {ENDPOINT} (waiting on the apiserver, or on etcd behind it)"
    failure = ApiError("x", status=504, reason="Timeout", endpoint=ENDPOINT, method="PUT", path="/api/v1/x",
                       api_message="Timeout: request did not complete within requested timeout - context deadline exceeded")
    migrator._streak.note(failure, 100.0)
    fake.now = 112.0
    assert migrator.stall_reason() == (
        f"1 tries failed in the last 12s, the last PUT /api/v1/x: the apiserver {ENDPOINT} answered HTTP 504 'Timeout: "
        "request did not complete within requested timeout - context deadline exceeded': etcd behind it did not answer")
