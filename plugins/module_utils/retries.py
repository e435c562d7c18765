# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Bounded, jittered retries that honour ``Retry-After``, declared at the call site.

Only transient failures are retried: 429, 500 (but never a decode failure), 503, 504, timeouts and
dropped connections. Everything else is returned to the caller at once, so no loop can spin on a
denial or a bad request.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

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
        never shorter than the server asked for."""
        backoff = rng.uniform(0, min(self.max_delay, self.base_delay * (2 ** (attempt - 1))))
        if retry_after is not None:
            return max(float(retry_after), backoff)
        return backoff


NO_RETRY = RetryPolicy(attempts=1)


def call_with_retries(fn, policy: RetryPolicy, sleep=time.sleep, on_retry=None):
    """Call ``fn()`` until it succeeds, fails permanently, or the policy's attempts run out."""
    attempt = 1
    while True:
        try:
            return fn()
        except (ApiError, EndpointUnreachable) as error:
            if attempt >= policy.attempts or not policy.should_retry(error):
                raise
            wait = policy.delay(attempt, getattr(error, "retry_after", None))
            if on_retry is not None:
                on_retry(error, attempt, wait)
            sleep(wait)
            attempt += 1
