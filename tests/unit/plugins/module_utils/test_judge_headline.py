# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cause first: one short line naming what blocks, worst first, as many by name as fit, and the next step."""

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
    assert line == ("pre-flight blocks on c (unsafe), g (unsafe), b (removed), a (unknown), e (unknown) and 2 more: take "
                    "each next step in the report, or accept by name.")


def test_long_names_are_counted_not_listed_and_the_line_stays_short():
    blocking = [blocked("validatingadmissionpolicybindings.admissionregistration.k8s.io", "unsafe"),
                blocked("devicetaintrules.resource.k8s.io", "unknown"), blocked("(apiservers not observed)", "unknown")]
    line = headline(blocking, SimpleNamespace(worst="unsafe", resources=[], offline=True))
    assert line == ("pre-flight blocks on validatingadmissionpolicybindings.admissionregistration.k8s.io (unsafe) and 2 more: "
                    "take each next step in the report, or accept by name.")
    assert len(line) <= 160


def test_nothing_blocking_says_so():
    line = headline([], SimpleNamespace(worst="safe", resources=[1, 2]))
    assert line == "pre-flight passes: safe, nothing blocks (2 resource(s) judged)."
