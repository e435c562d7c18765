# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Retries are bounded, jittered, honour Retry-After, and never repeat a permanent failure."""

from __future__ import annotations

import random

import pytest
from kube_fakes import FakeClock

from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.poll import Deadline
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ApiError, EndpointUnreachable
from ansible_collections.kubeupgrade.storage.plugins.module_utils.retries import (
    RetriedClient,
    RetryClock,
    RetryPolicy,
    call_with_retries,
)


def api_error(status, message="", retry_after=None):
    return ApiError("x", status=status, api_message=message, retry_after=retry_after)


@pytest.mark.parametrize(
    "error, retried",
    [
        (api_error(429), True),
        (api_error(500, "etcdserver: leader changed"), True),
        (api_error(503), True),
        (EndpointUnreachable("x"), True),
        (api_error(500, 'no kind "ConfigMap" is registered for version "v9" in scheme "x"'), False),
        (api_error(500, "request to convert CR from an invalid group/version: example.com/v9"), False),
        (api_error(500, "etcdserver: mvcc: database space exceeded"), False),  # etcd's space alarm: read-only
        (api_error(500, "rpc error: code = ResourceExhausted desc = etcdserver: NOSPACE"), False),
        (api_error(401, "Unauthorized"), False),
        (api_error(403), False),
        (api_error(409), False),
        (api_error(422), False),
        (api_error(405), False),
    ],
)
def test_only_transient_failures_are_retried(error, retried):
    assert RetryPolicy().should_retry(error) is retried


def test_delay_is_capped_jittered_and_never_below_retry_after():
    policy = RetryPolicy(base_delay=1.0, max_delay=4.0)
    rng = random.Random(7)
    delays = [policy.delay(attempt, rng=rng) for attempt in range(1, 20)]
    assert all(0 <= d <= 4.0 for d in delays)
    assert len(set(delays)) > 5
    assert 9 <= policy.delay(1, retry_after=9, rng=rng) <= 9.95  # never earlier than asked, a little jitter


def test_attempts_are_bounded_and_retry_after_is_slept():
    calls, sleeps = [], []

    def always_throttled():
        calls.append(1)
        raise api_error(429, retry_after=2)

    with pytest.raises(ApiError):
        call_with_retries(always_throttled, RetryPolicy(attempts=4), sleep=sleeps.append)
    assert len(calls) == 4
    assert len(sleeps) == 3 and all(s >= 2 for s in sleeps)


def test_permanent_failure_is_not_retried():
    calls = []

    def denied():
        calls.append(1)
        raise api_error(403)

    with pytest.raises(ApiError):
        call_with_retries(denied, RetryPolicy(attempts=5), sleep=lambda s: None)
    assert calls == [1]


def test_success_after_transient_failures():
    outcomes = [api_error(503), EndpointUnreachable("x"), "ok"]

    def flaky():
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    assert call_with_retries(flaky, RetryPolicy(attempts=5), sleep=lambda s: None) == "ok"


@pytest.mark.parametrize("policy, deadline, tries", [
    (RetryPolicy(attempts=50, budget=None), None, (50, 50)),  # only the attempts bound it
    (RetryPolicy(attempts=50, budget=10.5), None, (9, 11)),  # waits of 1-1.15 s within 10.5 s
    (RetryPolicy(attempts=50, budget=None), 105.5, (4, 6)),  # the caller's deadline: no wait ends past it
    (RetryPolicy(attempts=3, budget=100), None, (3, 3)),
])
def test_retry_storm_is_bounded_by_attempts_budget_and_deadline(policy, deadline, tries):
    fake, calls = FakeClock(100.0), []

    def throttled():
        calls.append(fake.now)
        raise api_error(429, retry_after=1)

    with pytest.raises(ApiError):
        call_with_retries(throttled, policy, timing=RetryClock(sleep=fake.sleep, deadline=Deadline(deadline, fake.clock)))
    assert tries[0] <= len(calls) <= tries[1]
    if policy.budget is not None:
        assert fake.now - 100.0 <= policy.budget
    if deadline is not None:
        assert fake.now <= deadline


def test_a_storm_of_twenty_retry_after_answers_is_ridden_out():
    fake, answers = FakeClock(100.0), [api_error(429, retry_after=1)] * 20 + ["ok"]

    def storm():
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    policy = RetryPolicy(attempts=40, budget=60)
    assert call_with_retries(storm, policy, timing=RetryClock(sleep=fake.sleep, deadline=Deadline(None, fake.clock))) == "ok"
    assert len(fake.slept) == 20 and all(s >= 1 for s in fake.slept)


def test_a_request_refused_by_etcds_space_alarm_is_not_retried_and_says_how_to_recover():
    """The migration's bookkeeping (its Lease, the StorageState record and CRD) names why a request was given up."""
    fake, calls = FakeClock(), []

    class Full:
        def request(self, *args, **kwargs):
            calls.append(args)
            raise api_error(500, "etcdserver: mvcc: database space exceeded")

    client = RetriedClient(Full(), RetryPolicy(attempts=40, budget=90), RetryClock(sleep=fake.sleep))
    with pytest.raises(ApiError) as info:
        client.post("/apis/example.com/v1/things", {})
    why = client.explain(info.value)
    assert len(calls) == 1 and fake.now == 0
    assert "space alarm" in why and "read-only" in why and "etcdctl alarm disarm" in why and "etcdctl defrag" in why
