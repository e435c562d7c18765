# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The verdicts on a resource, worst last: the words the check decides and the rehearsal reports in.

Shared by the capabilities that speak them (the judge decides them; the rehearsal names what a real binary read), so
neither imports the other. Plain data, no import of the collection.
"""

from __future__ import annotations

SAFE = "safe"
NEEDS_MIGRATION = "needs_migration"
UNKNOWN = "unknown"
REMOVED = "removed"
UNSAFE = "unsafe"
VERDICT_ORDER = (SAFE, NEEDS_MIGRATION, UNKNOWN, REMOVED, UNSAFE)  # worst last
# Every verdict that is not established safe blocks, unless the operator accepts it by name.
BLOCKING_BY_DEFAULT = (NEEDS_MIGRATION, UNKNOWN, REMOVED, UNSAFE)


def worst_of(verdicts) -> str:
    return max(verdicts, key=VERDICT_ORDER.index, default=SAFE)
