# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether the apiservers observed are as a play waits for them to be (ready, at a release): the one rule a wait after
upgrading or rolling back a host repeats on (``until``), and fails on, instead of templating it."""

from __future__ import annotations

from typing import List, Optional, Tuple


def _state(ep) -> str:
    if not ep.reachable:
        return f"unreachable ({ep.error or 'no answer'})"
    return f"{'ready' if ep.ready else 'NOT ready'}, release {ep.release or '?'}{ep.emulating}"


def expected(endpoints: List, ready: bool = False, release: Optional[str] = None, emulated: Optional[str] = None) -> Tuple[bool, str]:
    """``(as_expected, msg)``: every endpoint reachable, ready when ``ready``, at ``release`` when given (the minor
    release, as ``/version`` reports it: ``1.33``; a binary of that release emulating an older one is not at it yet).
    No endpoint observed is never as expected."""
    at = f"release {release}" + (f" emulating {emulated}" if emulated and emulated != release else "")
    wanted = ", ".join((["ready"] if ready else []) + ([at] if release else [])) or "reachable"
    met = bool(endpoints) and all(ep.reachable and (ep.ready or not ready) and (not release or ep.at(release, emulated))
                                  for ep in endpoints)
    seen = "; ".join(f"{ep.endpoint}: {_state(ep)}" for ep in endpoints) or "no apiserver observed"
    return met, f"{seen} ({'as expected' if met else 'expected'}: {wanted})"
