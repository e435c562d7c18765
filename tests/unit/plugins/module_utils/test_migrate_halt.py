# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What no retry and no other object gets past stops the whole migration at once: etcd's space alarm (the cluster is
read-only until an operator reclaims the space) and rejected credentials (401: the credentials diagnosis, not a list
of objects "refused by admission or RBAC"). Measured on real binaries in tests/integration/test_real_migration_stop.py.
"""

import pytest
from kube_fakes import FakeClock
from test_migrate_migrator import ENDPOINT, MODE, FakeApiserver, W, api_error, migrator

from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.poll import Deadline
from ansible_collections.kubeupgrade.storage.plugins.module_utils._migrate import plan, runner
from ansible_collections.kubeupgrade.storage.plugins.module_utils._migrate.progress import StatusFile
from ansible_collections.kubeupgrade.storage.plugins.module_utils._rewrite import migrator as mig
from ansible_collections.kubeupgrade.storage.plugins.module_utils.retries import RetryPolicy

NOSPACE = "etcdserver: mvcc: database space exceeded"
# The migration's own policy: under the old classification a NOSPACE write was retried for 90 s per object.
SLOW = RetryPolicy(attempts=40, base_delay=0.25, max_delay=8.0, budget=90.0)


@pytest.fixture(autouse=True, params=list(mig.WRITES))
def write_mode(request):
    """Every test with put and with apply (the fake apiserver answers as the write asks)."""
    MODE["write"] = request.param
    yield request.param
    MODE["write"] = mig.WRITE_PUT


def _writes(server, method):
    return [c for c in server.calls if c[0] == method]


@pytest.mark.parametrize("concurrency", [1, 4])
def test_the_space_alarm_stops_every_worker_at_once_with_the_recovery_steps(concurrency):
    server = FakeApiserver(count=12)
    method = W()
    server.fault(method, lambda: api_error(500, NOSPACE, "InternalError", method=method), count=1000,
                 match=lambda p, q: not p.endswith(("cm-000", "cm-001")))
    fake = FakeClock()
    run = migrator(server, deadline=Deadline.after(1800, clock=fake.clock), policy=SLOW, concurrency=concurrency,
                   chunk_size=3)
    run.sleep = fake.sleep
    with pytest.raises(mig.Halted) as info:
        run.run()
    message = str(info.value)
    assert "database space exceeded" in message and "read-only" in message and "Nothing was lost" in message
    for command in ("etcdctl endpoint status", "etcdctl alarm list", "etcdctl compact", "etcdctl defrag",
                    "etcdctl alarm disarm"):
        assert command in message
    assert fake.now == 0  # no retry, no wait
    assert run.progress.retries == 0 and run.progress.failed == 0 and run.progress.failures == []
    assert len(_writes(server, method)) <= 3  # the chunk's writes in flight; no further chunk is listed
    assert len([c for c in server.calls if c[0] == "GET"]) <= 2
    assert info.value.details["cause"] == "etcd_space_exceeded"


def test_a_revoked_credential_stops_at_once_with_the_credentials_diagnosis():
    server = FakeApiserver(count=12)
    method = W()
    server.fault(method, lambda: api_error(401, "Unauthorized", "Unauthorized", method=method), count=1000,
                 match=lambda p, q: not p.endswith("cm-000"))
    with pytest.raises(mig.Halted) as info:
        migrator(server, concurrency=4).run()
    message = str(info.value)
    assert "HTTP 401" in message and f"fix the credentials used for {ENDPOINT}" in message
    assert "admission" not in message and "RBAC" not in message
    assert info.value.details["cause"] == "credentials_rejected"


def test_a_revoked_credential_on_a_list_gives_the_credentials_diagnosis():
    server = FakeApiserver(count=12)
    server.fault("GET", lambda: api_error(401, "Unauthorized", "Unauthorized"), count=1000,
                 match=lambda p, q: "continue" in q)
    with pytest.raises(mig.Halted, match="fix the credentials"):
        migrator(server).run()


@pytest.mark.parametrize("status,message", [
    (500, "etcdserver: leader changed"),  # transient: retried
    (403, 'configmaps "x" is forbidden: User "alice" cannot patch resource "configmaps"'),
    (422, "denied"), (409, "the object has been modified"), (404, "not found"),
])
def test_other_answers_do_not_halt(status, message):
    assert mig.halt(api_error(status, message), "configmaps", 0) is None


def test_a_put_pass_estimates_what_it_adds_to_etcd_from_its_first_chunk():
    server = FakeApiserver(count=12)
    progress = migrator(server, chunk_size=3).run()
    if W() == "PUT":  # whole objects listed: the first chunk's bytes per object times every object listed
        assert progress.bytes_to_rewrite and progress.bytes_to_rewrite > 12 * 50
    else:  # metadata only: the objects' size is not known
        assert progress.bytes_to_rewrite is None


class _NoRequests:
    endpoint = ENDPOINT

    def request(self, *args, **kwargs):
        raise AssertionError(f"no request expected, got {args}")


def test_once_one_resource_halted_the_others_stop_and_none_starts():
    run = runner.Run(mod=None, params={"lock": True}, deadline=Deadline(None), cluster=_NoRequests(),
                     current={"secrets": "abc"}, status=StatusFile(None))
    run.halted = "the migration of configmaps stopped at once (see its error)"
    assert runner.Resource("secrets", None).stop_reason(run) == run.halted  # a running resource stops between chunks
    entry = runner.migrate_resource(run, "secrets", plan.BackendChoice(plan.CLIENT, None, ""))
    assert entry["status"] == runner.FAILED and entry["error"].startswith("Migration of secrets not started: ")
