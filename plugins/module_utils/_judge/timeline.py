# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The timeline of an upgrade, as the KEP's case walkthrough tells one: per step, each apiserver's binary and emulated
release, whether the storage hashes agreed, the gate passed or blocked, and what was migrated.

Pure: each step is distilled from a registered module result (a check, an agreement, a migration, an observation) as
plain data, so a play collects them as it goes and the final check renders them in its report.
"""

from __future__ import annotations

import datetime
from typing import List, Optional

from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ConfigurationError

SHOWN_NAMES = 3  # blocking resources and migrated resources named per step; the rest counted


def _apiservers(result: dict) -> List[dict]:
    found = []
    for endpoint in result.get("endpoints") or []:
        if isinstance(endpoint, dict) and endpoint.get("endpoint"):
            found.append({"endpoint": endpoint["endpoint"], "version": endpoint.get("git_version"),
                          "emulated_release": endpoint.get("emulated_release"),
                          "up": bool(endpoint.get("reachable")) and endpoint.get("ready") is not False})
    return found


def _name(item) -> str:
    return str(item.get("resource") or item.get("subject") or item) if isinstance(item, dict) else str(item)


def step(result, name: str, now: Optional[datetime.datetime] = None) -> dict:
    """One step of the timeline from a registered result; a skipped task is a step that did not run."""
    if not isinstance(result, dict):
        raise ConfigurationError(f"timeline_step: {name!r} needs a registered module result (a dict), got {type(result).__name__}")
    at = (now or datetime.datetime.now(datetime.timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
    entry = {"step": str(name), "at": at, "apiservers": _apiservers(result)}
    if result.get("skipped"):
        entry["skipped"] = True
        return entry
    if "agreed" in result:
        entry["agreed"] = bool(result["agreed"])
        entry["disagreeing"] = sorted(_name(d) for d in result.get("disagreeing") or [])
    if "blocking" in result and "verdict" in result:
        entry["gate"] = "blocked" if result["blocking"] else "passed"
        entry["verdict"] = result["verdict"]
        entry["blocking"] = [_name(b) for b in result["blocking"]]
    if "migrations" in result:
        entry["migrated"] = [{"resource": m.get("resource"), "objects": m.get("objects_migrated"), "status": m.get("status")}
                             for m in result["migrations"] if isinstance(m, dict)]
    if result.get("failed"):
        entry["failed"] = str(result.get("msg") or "failed").split("\n", 1)[0]
    return entry


def check(steps) -> List[dict]:
    """The ``timeline`` option: steps as ``timeline_step`` makes them."""
    if steps is None:
        return []
    if not isinstance(steps, list) or not all(isinstance(s, dict) and s.get("step") for s in steps):
        raise ConfigurationError("timeline must be a list of steps made by the kubeupgrade.storage.timeline_step filter")
    return list(steps)


def _host(url: str) -> str:
    """``https://10.0.0.11:6443`` -> ``10.0.0.11:6443``."""
    return url.split("://", 1)[-1].split("/", 1)[0] or url


def _apiserver_cell(entry: dict) -> str:
    cells = []
    for api in entry.get("apiservers") or []:
        text = f"{_host(api['endpoint'])} {api.get('version') or '?'}"
        if api.get("emulated_release") and not (api.get("version") or "").lstrip("v").startswith(api["emulated_release"] + "."):
            text += f" (emulating {api['emulated_release']})"
        if not api.get("up"):
            text += " (not ready)"
        cells.append(text)
    return "; ".join(cells) or "-"


def _named(names: List[str]) -> str:
    shown = ", ".join(names[:SHOWN_NAMES])
    return shown + (f" and {len(names) - SHOWN_NAMES} more" if len(names) > SHOWN_NAMES else "")


def _agreed_cell(entry: dict) -> str:
    if "agreed" not in entry or len(entry.get("apiservers") or []) == 1:  # one apiserver agrees with itself
        return "-"
    if entry["agreed"]:
        return "agreed"
    return f"not agreed ({_named(entry['disagreeing'])})" if entry.get("disagreeing") else "not agreed"


def _gate_cell(entry: dict) -> str:
    if "gate" not in entry:
        return "-"
    if entry["gate"] == "passed":
        return f"passed ({entry.get('verdict')})"
    return f"blocked on {_named(entry.get('blocking') or [])}"


def _migrated_cell(entry: dict) -> str:
    if "migrated" not in entry:
        return "-"
    done = [m for m in entry["migrated"] if m.get("resource")]
    if not done:
        return "nothing"
    return _named([f"{m['resource']} ({_objects(m.get('objects'))}, {m.get('status')})" for m in done])


def _objects(count) -> str:
    return "? objects" if count is None else f"{count} object" + ("" if count == 1 else "s")


def rows(steps: List[dict]) -> List[str]:
    """One line per step, for the play's output."""
    lines = []
    for number, entry in enumerate(steps, 1):
        if entry.get("skipped"):
            lines.append(f"{number}. {entry['step']}: not run")
            continue
        parts = [_apiserver_cell(entry)] if entry.get("apiservers") else []
        parts += [f"{label} {cell}" for label, cell in (("storage hashes", _agreed_cell(entry)), ("gate", _gate_cell(entry)),
                                                        ("migrated", _migrated_cell(entry))) if cell != "-"]
        if entry.get("failed"):
            parts.append(f"failed: {entry['failed']}")
        lines.append(f"{number}. {entry['step']} ({entry['at']}): " + ("; ".join(parts) or "done"))
    return lines


def markdown(steps: List[dict]) -> str:
    """The report's timeline section (empty without steps)."""
    if not steps:
        return ""
    lines = ["", "## Timeline", "",
             "| # | step | at | apiservers (binary, emulated release) | storage hashes | gate | migrated |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for number, entry in enumerate(steps, 1):
        if entry.get("skipped"):
            cells = (str(number), entry["step"], entry["at"], "not run", "-", "-", "-")
        else:
            gate = _gate_cell(entry) + (f"; failed: {entry['failed']}" if entry.get("failed") else "")
            cells = (str(number), entry["step"], entry["at"], _apiserver_cell(entry), _agreed_cell(entry), gate,
                     _migrated_cell(entry))
        lines.append("| " + " | ".join(cell.replace("|", "\\|").replace("\n", " ") for cell in cells) + " |")
    return "\n".join(lines) + "\n"
