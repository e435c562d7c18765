# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The upgrade's timeline: each step distilled from a registered result, then rendered in the final report."""

from __future__ import annotations

import datetime

import pytest

from ansible_collections.kubeupgrade.storage.plugins.module_utils._judge import timeline
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ConfigurationError

NOW = datetime.datetime(2026, 12, 2, 10, 0, tzinfo=datetime.timezone.utc)
CP1, CP2 = "https://10.0.0.11:6443", "https://10.0.0.12:6443"


def endpoint(url, version, emulated=None, ready=True):
    return {"endpoint": url, "reachable": True, "ready": ready, "git_version": version, "emulated_release": emulated}


def test_a_gate_an_agreement_and_a_migration_each_say_what_they_decided():
    gate = timeline.step({"endpoints": [endpoint(CP1, "v1.36.2", "1.35"), endpoint(CP2, "v1.35.3")], "agreed": False,
                          "disagreeing": [{"resource": "deployments.apps"}], "verdict": "unsafe",
                          "blocking": [{"subject": "devicetaintrules.resource.k8s.io"}]}, "gate before cp2", NOW)
    assert gate == {"step": "gate before cp2", "at": "2026-12-02T10:00:00Z", "agreed": False, "disagreeing": ["deployments.apps"],
                    "gate": "blocked", "verdict": "unsafe", "blocking": ["devicetaintrules.resource.k8s.io"],
                    "apiservers": [{"endpoint": CP1, "version": "v1.36.2", "emulated_release": "1.35", "up": True},
                                   {"endpoint": CP2, "version": "v1.35.3", "emulated_release": None, "up": True}]}
    migrated = timeline.step({"changed": True, "migrations": [{"resource": "gadgets.example.com", "objects_migrated": 4,
                                                               "status": "succeeded"}]}, "migration", NOW)
    assert migrated["migrated"] == [{"resource": "gadgets.example.com", "objects": 4, "status": "succeeded"}]
    assert "gate" not in migrated and "agreed" not in migrated
    skipped = timeline.step({"skipped": True, "changed": False}, "migration before the roll", NOW)
    lines = timeline.rows([gate, migrated, skipped])
    assert lines[0] == ("1. gate before cp2 (2026-12-02T10:00:00Z): 10.0.0.11:6443 v1.36.2 (emulating 1.35); 10.0.0.12:6443 "
                        "v1.35.3; storage hashes not agreed (deployments.apps); gate blocked on devicetaintrules.resource.k8s.io")
    assert lines[1].endswith("migrated gadgets.example.com (4 objects, succeeded)") and lines[2] == "3. migration before the roll: not run"


def test_an_apiserver_at_its_own_release_is_not_said_to_emulate_and_one_apiserver_does_not_agree_with_itself():
    steps = [timeline.step({"endpoints": [endpoint(CP1, "v1.36.2", "1.36")], "agreed": True}, "cp1 upgraded", NOW),
             timeline.step({"migrations": [{"resource": "pods", "objects_migrated": 1, "status": "succeeded"}]}, "m", NOW)]
    assert timeline.rows(steps) == ["1. cp1 upgraded (2026-12-02T10:00:00Z): 10.0.0.11:6443 v1.36.2",
                                    "2. m (2026-12-02T10:00:00Z): migrated pods (1 object, succeeded)"]


def test_the_report_section_is_a_table_with_one_row_per_step():
    steps = [timeline.step({"endpoints": [endpoint(CP1, "v1.35.3", ready=False)], "agreed": True, "verdict": "safe",
                            "blocking": []}, "pre-flight", NOW),
             timeline.step({"failed": True, "msg": "apiservers did not agree\ndetail", "agreed": False}, "agreement", NOW)]
    section = timeline.markdown(steps).splitlines()
    assert section[1] == "## Timeline" and len(section) == 7
    assert section[5] == ("| 1 | pre-flight | 2026-12-02T10:00:00Z | 10.0.0.11:6443 v1.35.3 (not ready) | - | passed (safe) | - |")
    assert section[6].endswith("| - | not agreed | -; failed: apiservers did not agree | - |")
    assert timeline.markdown([]) == ""


@pytest.mark.parametrize("steps", ["x", [{"at": "now"}], [1]])
def test_a_timeline_that_is_not_steps_is_refused_naming_the_filter(steps):
    with pytest.raises(ConfigurationError, match="timeline_step filter"):
        timeline.check(steps)


def test_a_step_needs_a_registered_result():
    with pytest.raises(ConfigurationError, match="'gate' needs a registered module result"):
        timeline.step("safe", "gate")
