# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Bounded, jittered retries that honour ``Retry-After``, declared at the call site.

Only transient failures are retried: 429, 500 (but never a decode failure), 502, 503, 504, timeouts
and dropped connections. Everything else is returned to the caller at once, so no loop can spin on a
denial or a bad request. A retry is bounded three ways: a number of attempts, a time ``budget`` for
the whole call (client-go gives a 429 ten tries; an apiserver restart behind a load balancer answers
503 for several seconds), and the caller's ``deadline``: no wait ever ends past it.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Optional

from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import (
    ApiError,
    EndpointUnreachable,
    is_decode_failure,
)

TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})


@dataclass
class RetryPolicy:
    attempts: int = 6  # total tries, including the first
    base_delay: float = 0.2
    max_delay: float = 15.0
    retry_statuses: frozenset = field(default_factory=lambda: TRANSIENT_STATUSES)
    retry_unreachable: bool = True
    budget: Optional[float] = None  # seconds from the first try after which no retry starts

    def should_retry(self, error: Exception) -> bool:
        if isinstance(error, EndpointUnreachable):
            return self.retry_unreachable
        if isinstance(error, ApiError):
            if is_decode_failure(error.status, error.api_message):
                return False
            return error.status in self.retry_statuses
        return False

    def delay(self, attempt: int, retry_after=None, rng=random) -> float:
        """Seconds to wait before try ``attempt + 1`` (attempt counts from 1): full jitter, capped,
        never shorter than the server asked for (plus up to 10 % jitter, so throttled clients spread)."""
        backoff = rng.uniform(0, min(self.max_delay, self.base_delay * (2 ** (attempt - 1))))
        if retry_after is not None:
            asked = max(0.0, float(retry_after))
            return asked + rng.uniform(0, 0.1 * asked + 0.05)
        return backoff


NO_RETRY = RetryPolicy(attempts=1)


@dataclass
class RetryClock:
    """Where ``call_with_retries`` reads time and sleeps, and the caller's absolute deadline (clock time)."""

    sleep: object = time.sleep
    clock: object = time.monotonic
    deadline: Optional[float] = None
    deadline_hit: bool = False  # set when a retry was given up because its wait would pass the deadline


def _may_wait(policy: RetryPolicy, timing: RetryClock, started: float, wait: float) -> bool:
    now = timing.clock()
    if policy.budget is not None and now + wait - started > policy.budget:
        return False
    if timing.deadline is not None and now + wait > timing.deadline:
        timing.deadline_hit = True
        return False
    return True


def call_with_retries(fn, policy: RetryPolicy, sleep=time.sleep, on_retry=None, timing: Optional[RetryClock] = None):
    """Call ``fn()`` until it succeeds, fails permanently, or the attempts, budget or deadline run out.

    When giving up, the last error is raised unchanged: the caller names the object and the cause.
    """
    timing = timing or RetryClock(sleep=sleep)
    started = timing.clock()
    attempt = 1
    while True:
        try:
            return fn()
        except (ApiError, EndpointUnreachable) as error:
            if attempt >= policy.attempts or not policy.should_retry(error):
                raise
            wait = policy.delay(attempt, getattr(error, "retry_after", None))
            if not _may_wait(policy, timing, started, wait):
                raise
            if on_retry is not None:
                on_retry(error, attempt, wait)
            timing.sleep(wait)
            attempt += 1
