# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The migration's waits go through the API layer's one wait loop and one Deadline, on a fake clock: the cluster-side
migration's wait, the agreement gate's grace for an apiserver that restarts (the Lease's wait: test_migrate_bookkeeping)."""

from __future__ import annotations

import pytest
from kube_fakes import FakeClock

from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.poll import Deadline, poll_until
from ansible_collections.kubeupgrade.storage.plugins.module_utils._migrate import plan, runner
from ansible_collections.kubeupgrade.storage.plugins.module_utils._migrate.cluster_driver import ClusterMigrator
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.agreement import Agreement
from ansible_collections.kubeupgrade.storage.plugins.module_utils._rewrite import ratelimit
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import DisagreementError, MigrationError

HASH = "qFsyl6wFWjQ="
RUNNING = {"status": {"conditions": [{"type": "Running", "status": "True"}]}}
SUCCEEDED = {"status": {"conditions": [{"type": "Succeeded", "status": "True"}]}}


class Migrations:
    """GET answers one object per poll (the last one repeated); DELETE is counted."""

    def __init__(self, answers, fake, progress_each_poll=True):
        self.answers = list(answers)
        self.fake = fake
        self.progress = progress_each_poll
        self.gets = 0
        self.deleted = []

    def get(self, _path):
        self.gets += 1
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if self.progress and answer is RUNNING:  # a running migration whose status changes: never stalled
            return {"status": dict(RUNNING["status"], progress=self.gets)}
        return answer

    def delete(self, path):
        self.deleted.append(path)
        return {}


def driver(client, fake, stall_timeout=300.0):
    choice = plan.BackendChoice(plan.INTREE, "storagemigration.k8s.io/v1beta1")
    return ClusterMigrator(client, choice, poll_interval=2.0, stall_timeout=stall_timeout, sleep=fake.sleep)


def test_the_deadline_of_ratelimit_is_the_api_layers():
    assert ratelimit.Deadline is Deadline and issubclass(ratelimit.DeadlineExceeded, MigrationError)


def test_poll_until_takes_a_deadline_and_never_sleeps_past_it():
    fake = FakeClock()
    values = iter([False, False, False, True])
    assert poll_until(lambda: next(values), bool, Deadline(100, fake.clock), 2.0, sleep=fake.sleep) is True
    assert fake.slept == [2.0, 2.0, 2.0]
    fake = FakeClock()
    with pytest.raises(Exception, match="after 3 poll"):
        poll_until(lambda: False, bool, Deadline(3, fake.clock), 2.0, sleep=fake.sleep)
    assert fake.slept == [2.0, 1.0]


def test_no_deadline_polls_until_the_condition_holds():
    fake = FakeClock()
    values = iter([False] * 50 + [True])
    assert poll_until(lambda: next(values), bool, Deadline(None, fake.clock), 5.0, sleep=fake.sleep) is True
    assert fake.now == 250.0


def test_the_cluster_side_wait_returns_on_success_calling_the_gate_between_polls():
    fake, gates = FakeClock(), []
    client = Migrations([RUNNING, RUNNING, SUCCEEDED], fake)
    status = driver(client, fake).wait("m-1", "widgets.example.com", Deadline(60, fake.clock), gate=lambda: gates.append(fake.now))
    assert status.phase == plan.SUCCEEDED and client.gets == 3
    assert gates == [0.0, 2.0] and fake.slept == [2.0, 2.0]  # the gate runs before each wait, never after success


def test_the_cluster_side_wait_times_out_leaving_the_migration_in_place():
    fake, gates = FakeClock(), []
    client = Migrations([RUNNING], fake)
    with pytest.raises(MigrationError, match=r"timed out: .* is still running\. It was left in place") as raised:
        driver(client, fake).wait("m-1", "widgets.example.com", Deadline(5, fake.clock), gate=lambda: gates.append(fake.now))
    assert raised.value.details["phase"] == plan.RUNNING and client.deleted == []
    assert fake.slept == [2.0, 2.0, 1.0] and gates == [0.0, 2.0, 4.0]  # no gate once the time is up


def test_a_broken_gate_deletes_the_cluster_side_migration():
    fake = FakeClock()
    client = Migrations([RUNNING], fake)

    def gate():
        raise DisagreementError("the apiservers stopped agreeing")

    with pytest.raises(DisagreementError):
        driver(client, fake).wait("m-1", "widgets.example.com", Deadline(60, fake.clock), gate=gate)
    assert len(client.deleted) == 1


def test_a_stalled_cluster_side_migration_is_deleted_before_the_timeout():
    fake = FakeClock()
    client = Migrations([RUNNING], fake, progress_each_poll=False)
    with pytest.raises(MigrationError, match="stalled"):
        driver(client, fake, stall_timeout=5).wait("m-1", "widgets.example.com", Deadline(60, fake.clock))
    assert len(client.deleted) == 1 and fake.now == 6.0


def _run(deadline, poll_interval=1.0):
    run = runner.Run(mod=None, params={"poll_interval": poll_interval}, deadline=deadline)
    run.current["widgets.example.com"] = HASH
    return run


B = ["https://b"]
RESTARTED_MID_DISCOVERY = {"incomplete": B, "missing": {"widgets.example.com": B}}


@pytest.mark.parametrize("answers, slept, raises", [
    # one apiserver restarting: the gate waits for it, then goes on once it answers with the same hash
    ([(False, {HASH}, {"unreachable": B}), (False, {HASH}, {"unreachable": B}), (True, {HASH}, {})], [1.0, 1.0], False),
    # it dropped the connection in the middle of its discovery, then does not list the CRD yet: waited for too
    ([(False, {HASH}, RESTARTED_MID_DISCOVERY), (False, {HASH}, {"missing": {"widgets.example.com": B}}),
      (True, {HASH}, {})], [1.0, 1.0], False),
    # it never comes back: the grace (30 s) ends the wait and the gate stops the migration
    ([(False, {HASH}, {"unreachable": B})], [1.0] * 30, True),
    ([(False, {HASH}, RESTARTED_MID_DISCOVERY)], [1.0] * 30, True),
    # another hash, or an apiserver contradicting itself: nothing to wait for
    ([(False, {HASH, "other"}, {})], [], True),
    ([(False, {HASH}, {"disagreeing": ["widgets.example.com"], "missing": {"widgets.example.com": B}})], [], True),
])
def test_the_gate_waits_for_a_restarting_apiserver_within_its_grace(monkeypatch, answers, slept, raises):
    fake = FakeClock()
    queue = list(answers)

    def check(_run, _resource):
        agreed, values, unseen = queue.pop(0) if len(queue) > 1 else queue[0]
        return Agreement(agreed=agreed, **unseen), values

    monkeypatch.setattr(runner, "_gate_check", check)
    gate = runner.gate_for(_run(Deadline(600, fake.clock)), "widgets.example.com", sleep=fake.sleep, clock=fake.clock)
    if raises:
        with pytest.raises(DisagreementError, match="stopped agreeing"):
            gate()
    else:
        gate()
    assert fake.slept == slept


def test_the_gate_never_waits_past_the_tasks_deadline(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(runner, "_gate_check", lambda _r, _n: (Agreement(agreed=False, unready=["https://b"]), {HASH}))
    with pytest.raises(DisagreementError):
        runner.gate_for(_run(Deadline(2.5, fake.clock)), "widgets.example.com", sleep=fake.sleep, clock=fake.clock)()
    assert fake.slept == [1.0, 1.0, 0.5]
