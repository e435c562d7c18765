# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The shipped release data must be exactly what the generator renders from the upstream table."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import repo_scripts

ROOT = Path(__file__).resolve().parents[2]


def _generator():
    return repo_scripts.load("generate_release_data")


def test_shipped_release_data_is_current():
    source = json.loads((ROOT / "tests" / "fixtures" / "k8s-storage-profiles.json").read_text(encoding="utf-8"))
    rendered = _generator().render(source)
    shipped = (ROOT / "plugins" / "module_utils" / "_release_data.py").read_text(encoding="utf-8")
    assert rendered == shipped, "plugins/module_utils/_release_data.py is stale: run scripts/generate_release_data.py"


def test_copy_of_upstream_table_matches_the_reference_table_when_given():
    """CI points KUBEUPGRADE_RELEASE_TABLE at the reference table it is given; elsewhere there is nothing to compare."""
    reference = os.environ.get("KUBEUPGRADE_RELEASE_TABLE")
    if not reference:
        pytest.skip("KUBEUPGRADE_RELEASE_TABLE (a reference k8s-storage-profiles.json) is not set")
    copy = ROOT / "tests" / "fixtures" / "k8s-storage-profiles.json"
    assert json.loads(copy.read_text(encoding="utf-8")) == json.loads(Path(reference).read_text(encoding="utf-8"))
