# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A token bucket shared by every request of a migration, that never sleeps past the task's deadline.

``qps: 0.001`` means one request every 1000 s: a limiter that simply sleeps would hold the task far
beyond its ``timeout``. Here a wait that would end after the deadline sleeps only until the deadline
and raises ``DeadlineExceeded``, so the caller stops with its own timeout message.
"""

from __future__ import annotations

import threading
import time
from typing import Optional

from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import MigrationError


class DeadlineExceeded(MigrationError):
    """The task's ``timeout`` ran out while waiting (rate limit, retry, lock, poll)."""


class Deadline:
    """An absolute point on ``clock``; ``None`` means no deadline."""

    def __init__(self, at: Optional[float], clock=time.monotonic):
        self.at = at
        self.clock = clock

    @classmethod
    def after(cls, seconds: Optional[float], clock=time.monotonic) -> Deadline:
        return cls(None if seconds is None else clock() + float(seconds), clock)

    def remaining(self) -> Optional[float]:
        return None if self.at is None else self.at - self.clock()

    def expired(self) -> bool:
        return self.at is not None and self.clock() >= self.at

    def check(self, what: str) -> None:
        if self.expired():
            raise DeadlineExceeded(f"{what}: the task's timeout ran out.")


class RateLimiter:
    """Token bucket shared by all worker threads; ``qps <= 0`` disables it."""

    def __init__(self, qps: float, deadline: Optional[Deadline] = None, burst: Optional[int] = None,
                 sleep=time.sleep):
        self.qps = float(qps or 0)
        self.deadline = deadline or Deadline(None)
        self.clock = self.deadline.clock
        self.capacity = float(burst or max(1.0, self.qps))
        self.tokens = self.capacity
        self.sleep = sleep
        self.stamp = self.clock()
        self.lock = threading.Lock()

    def acquire(self) -> None:
        """Take one token, sleeping for it if needed; raise ``DeadlineExceeded`` rather than sleep past the deadline."""
        if self.qps <= 0:
            return
        with self.lock:
            now = self.clock()
            self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.qps)
            self.stamp = now
            wait = (1.0 - self.tokens) / self.qps if self.tokens < 1.0 else 0.0
            remaining = self.deadline.remaining()
            if remaining is not None and wait > remaining:
                self.sleep(max(0.0, remaining))
                raise DeadlineExceeded(
                    f"the request rate limit (qps {self.qps:g}) allows the next request in {wait:.0f}s, after the "
                    "task's timeout; raise 'qps' or 'timeout'.")
            self.tokens -= 1.0
        if wait > 0:
            self.sleep(wait)
