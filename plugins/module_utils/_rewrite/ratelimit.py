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

# The task's deadline is the API layer's one Deadline; these names stay importable from here.
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.poll import Deadline, DeadlineExceeded

__all__ = ["Deadline", "DeadlineExceeded", "RateLimiter"]


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
