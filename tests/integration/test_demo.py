# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The demo, run the way a new user runs it: from a fresh clone, with the README's command.

The repository is cloned into a temporary directory and the README's demo command runs there with
HOME set to a fresh directory and no ANSIBLE_* variables (the demo once failed only because HOME
differed from the account's home). The already-built virtualenv is reused through
KUBEUPGRADE_VENV, which scripts/setup.sh honours, so the test does not download the tools again.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import real_cluster

REPO = Path(__file__).resolve().parents[2]


def readme_block(heading: str) -> list[str]:
    """The commands of the first ```bash block under a README heading (comments and blank lines dropped)."""
    text = (REPO / "README.md").read_text()
    section = text.split(f"\n{heading}\n", 1)
    assert len(section) == 2, f"README.md has no section {heading!r}"
    block = re.search(r"```bash\n(.*?)```", section[1], re.S)
    assert block, f"README.md section {heading!r} has no bash block"
    commands = []
    for line in block.group(1).splitlines():
        command = line.split("#", 1)[0].strip()
        if command:
            commands.append(command)
    return commands


def user_environment(home: Path) -> dict:
    """The test's environment as a new user's shell would have it: fresh HOME, no ANSIBLE_*, no venv active."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ANSIBLE_", "PYTEST_", "K8S_AUTH_")) and k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["HOME"] = str(home)
    venv = Path(sys.executable).parent.parent
    env["KUBEUPGRADE_VENV"] = str(venv.resolve())
    return env


def fresh_clone(tmp_path: Path) -> Path:
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(REPO), str(clone)], check=True, timeout=120,
                   capture_output=True)
    return clone


@pytest.mark.slow
def test_demo_from_a_fresh_clone(tmp_path):
    if real_cluster.real_kubeconfig():
        pytest.skip("the demo runs its own simulated control plane; it does not use KUBEUPGRADE_TEST_KUBECONFIG")
    commands = [c for c in readme_block("## Two commands") if "demo" in c]
    assert commands == ["./scripts/demo.sh"], f"the README's demo command changed: {commands}"
    clone = fresh_clone(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    proc = subprocess.run(shlex.split(commands[0]), cwd=clone, env=user_environment(home), capture_output=True,
                          text=True, timeout=900, check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-8000:]
    assert "Traceback" not in output, output
    assert "Demo finished" in output

    # Every step shows its verdict; the rollback is judged like an upgrade and refused.
    assert re.search(r"1 pre-flight \(report only\)\s+1\.33\s+unknown\s", output), output[-4000:]
    assert re.search(r"2 pre-flight after migration\s+1\.33\s+safe\s", output), output[-4000:]
    assert re.search(r"4 pre-flight of the rollback\s+1\.32\s+unsafe\s", output), output[-4000:]
    assert re.search(r"5 final check\s+1\.33\s+safe\s", output), output[-4000:]
    assert "Rollback to 1.32 refused" in output
    assert "The gate refuses to migrate" in output
    # Readable at the default verbosity: no task result dumped as JSON.
    assert not re.search(r"^\s*\{\s*\"", output, re.M), "raw JSON in the demo output"

    reports = clone / "demo-output"
    final = json.loads((reports / "5-final-1.33.json").read_text())
    assert final["verdict"] == "safe"
    assert {v for v, n in final["counts"].items() if n} == {"safe"}
    assert all(r["verdict"] == "safe" for r in final["resources"])
    for name in ("1-preflight-1.33", "2-preflight-after-migration-1.33", "4-preflight-rollback-1.32", "5-final-1.33"):
        assert (reports / f"{name}.md").is_file(), name
        assert str(reports / f"{name}.md") in output, f"{name}.md path not shown"
