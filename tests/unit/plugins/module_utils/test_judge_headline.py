# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cause first: one line naming what blocks, worst first, the first five by name."""

from __future__ import annotations

from types import SimpleNamespace

from ansible_collections.kubeupgrade.storage.plugins.module_utils._judge.runner import headline


def blocked(subject, verdict):
    return {"subject": subject, "verdict": verdict}


def test_worst_first_five_named_the_rest_counted_on_one_line():
    blocking = [blocked("a", "unknown"), blocked("b", "removed"), blocked("c", "unsafe"), blocked("d", "needs_migration"),
                blocked("e", "unknown"), blocked("f", "unknown"), blocked("g", "unsafe")]
    line = headline(blocking, SimpleNamespace(worst="unsafe", resources=[]))
    assert "\n" not in line
    assert line.startswith("pre-flight blocks on 7 verdict(s) not established safe: c (unsafe), g (unsafe), b (removed), "
                           "a (unknown), e (unknown) and 2 more.")


def test_nothing_blocking_says_so():
    line = headline([], SimpleNamespace(worst="safe", resources=[1, 2]))
    assert line == "pre-flight passes: safe, nothing blocks (2 resource(s) judged)."
