# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one wait loop: fetch, test, sleep until a deadline, with the clock and sleep passed in.

Tests drive it with a fake clock, so no wait in the collection needs a real sleep to be tested, and
every wait ends at its timeout with the last observation in hand for the error message.
"""

from __future__ import annotations

from typing import Any, Callable


class PollTimeout(Exception):
    """The predicate never held before the deadline; ``last`` is the last value fetched, ``polls`` the count.

    Not a ``KubeUpgradeError``: the caller knows what was awaited and raises the operator-facing error.
    """

    def __init__(self, last, polls: int):
        super().__init__(f"condition not met after {polls} poll(s)")
        self.last = last
        self.polls = polls


def poll_until(fetch: Callable[[], Any], predicate: Callable[[Any], bool], timeout: float, interval: float,  # noqa: PLR0913
               clock: Callable[[], float], sleep: Callable[[float], None]):  # (the clock and sleep are injected for tests)
    """Call ``fetch()`` until ``predicate(value)`` holds; return that value.

    The first fetch happens at once; later ones every ``interval`` seconds, never sleeping past the
    deadline. Raises ``PollTimeout`` (with the last value) once ``timeout`` seconds have passed.
    """
    deadline = clock() + float(timeout)
    polls = 0
    while True:
        value = fetch()
        polls += 1
        if predicate(value):
            return value
        remaining = deadline - clock()
        if remaining <= 0:
            raise PollTimeout(value, polls)
        sleep(min(float(interval), remaining))
