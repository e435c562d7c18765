# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one wait loop and the one deadline: fetch, test, sleep until a ``Deadline``, with the clock and sleep passed in.

Tests drive it with a fake clock, so no wait in the collection needs a real sleep to be tested, and
every wait ends at its timeout with the last observation in hand for the error message. A ``Deadline``
is also what bounds a retry (``retries.RetryClock``) and the migration's rate limiter: one notion of
"the task's time is up" for every wait.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional, Union

from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import MigrationError


class DeadlineExceeded(MigrationError):
    """The task's ``timeout`` ran out while waiting (rate limit, retry, lock, poll)."""


class Deadline:
    """An absolute point on ``clock``; ``None`` means no deadline."""

    def __init__(self, at: Optional[float] = None, clock=time.monotonic):
        self.at = at
        self.clock = clock

    @classmethod
    def after(cls, seconds: Optional[float], clock=time.monotonic) -> Deadline:
        return cls(None if seconds is None else clock() + float(seconds), clock)

    def remaining(self) -> Optional[float]:
        return None if self.at is None else self.at - self.clock()

    def expired(self) -> bool:
        return self.at is not None and self.clock() >= self.at

    def allows(self, wait: float) -> bool:
        """Whether a wait of ``wait`` seconds starting now ends by the deadline."""
        return self.at is None or self.clock() + wait <= self.at

    def earlier(self, other: Optional[Deadline]) -> Deadline:
        """The one of the two that comes first (``None`` and ``Deadline(None)`` never come)."""
        if other is None or other.at is None:
            return self
        if self.at is None:
            return other
        if self.clock is other.clock:
            return self if self.at <= other.at else other
        return self if self.remaining() <= other.remaining() else other

    def check(self, what: str) -> None:
        if self.expired():
            raise DeadlineExceeded(f"{what}: the task's timeout ran out.")


class PollTimeout(Exception):
    """The predicate never held before the deadline; ``last`` is the last value fetched, ``polls`` the count.

    Not a ``KubeUpgradeError``: the caller knows what was awaited and raises the operator-facing error.
    """

    def __init__(self, last, polls: int):
        super().__init__(f"condition not met after {polls} poll(s)")
        self.last = last
        self.polls = polls


def poll_until(fetch: Callable[[], Any], predicate: Callable[[Any], bool], timeout: Union[float, Deadline],  # noqa: PLR0913
               interval: float, clock: Optional[Callable[[], float]] = None, sleep: Callable[[float], None] = time.sleep):
    """Call ``fetch()`` until ``predicate(value)`` holds; return that value.

    ``timeout``: seconds from now on ``clock``, or a ``Deadline`` (on its own clock; ``Deadline(None)`` waits
    for as long as it takes). The first fetch happens at once; later ones every ``interval`` seconds, never
    sleeping past the deadline. Raises ``PollTimeout`` (with the last value) once the deadline has passed.
    """
    deadline = timeout if isinstance(timeout, Deadline) else Deadline.after(timeout, clock or time.monotonic)
    polls = 0
    while True:
        value = fetch()
        polls += 1
        if predicate(value):
            return value
        remaining = deadline.remaining()
        if remaining is not None and remaining <= 0:
            raise PollTimeout(value, polls)
        sleep(float(interval) if remaining is None else min(float(interval), remaining))


def poll_past(fetch: Callable[[], Any], pending, timeout: Union[float, Deadline], interval: float,  # noqa: PLR0913
              clock: Optional[Callable[[], float]] = None, sleep: Callable[[float], None] = time.sleep):
    """Poll until ``fetch()`` returns anything but ``pending`` (a process that answers, or exits) and return it;
    ``pending`` when the deadline passes first."""
    deadline = timeout if isinstance(timeout, Deadline) else Deadline.after(timeout, clock or time.monotonic)
    try:
        return poll_until(fetch, lambda state: state != pending, deadline, interval, sleep=sleep)
    except PollTimeout:
        return pending
