# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the operator sees while a migration runs, and how a migration notices that nobody is watching.

A module cannot print while it runs. The ``storage_migration`` action plugin gives the module a
status file; the module rewrites it (atomically, at most every ``interval`` seconds and when a
resource finishes) with one line per finished resource and one line per running resource
(done/total, rate, ETA; once no object was written for ``STALLED_AFTER`` seconds, how long it has been stalled and
why, instead of a rate and ETA that no longer say anything). The action plugin prints new lines as they appear, and touches a heartbeat
file next to it; when the heartbeat stops (the playbook was killed) or the module's parent process is
gone, ``StopSignal`` tells the migration to stop between chunks, before any record is written.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from typing import Dict, List, Optional

HEARTBEAT_SUFFIX = ".alive"
HEARTBEAT_TIMEOUT = 10.0


def rate_line(resource: str, done: int, total: Optional[int], seconds: float) -> str:
    """Pure: ``configmaps: 1200/5000 objects, 400/s, ETA 10s``."""
    rate = done / seconds if seconds > 0 else 0.0
    text = f"{resource}: {done}/{total if total is not None else '?'} objects, {rate:.0f}/s"
    if total is not None and rate > 0 and total > done:
        text += f", ETA {(total - done) / rate:.0f}s"
    return text


# No object written for this long: the running line says the migration is stalled, and why, instead of a rate.
STALLED_AFTER = 10.0


def stalled_line(resource: str, done: int, total: Optional[int], seconds: float, why: str) -> str:
    """Pure: ``configmaps: 550/1501 objects, stalled for 12s: <why>``."""
    text = f"{resource}: {done}/{total if total is not None else '?'} objects, stalled for {seconds:.0f}s"
    return text + (f": {why}" if why else "")


class Pace:
    """The running line of one resource from its counters as they move: a rate while objects are written, the time
    since the last one and why once it stalls (``stalled_after``: longer when a low qps spaces the writes out).
    ``clock`` is the caller's (monotonic seconds). Shared by the chunk's callback and the ticker: locked."""

    def __init__(self, resource: str, clock=time.monotonic, stalled_after: float = STALLED_AFTER):
        self.resource = resource
        self.clock = clock
        self.stalled_after = stalled_after
        self.started = clock()
        self.moved = self.started
        self.done = 0
        self._lock = threading.Lock()

    def line(self, done: int, total: Optional[int], why: str = "") -> str:
        with self._lock:
            now = self.clock()
            if done != self.done:
                self.done, self.moved = done, now
            if now - self.moved >= self.stalled_after:
                return stalled_line(self.resource, done, total, now - self.moved, why)
            return rate_line(self.resource, done, total, now - self.started)


def finished_line(entry: dict) -> str:
    """Pure: the line of a finished resource (objects, rate, time) as the summary table shows it."""
    seconds = float(entry.get("seconds") or 0.0)
    objects = entry.get("objects_migrated")
    status = entry.get("status", "?")
    text = f"{entry.get('resource')}: {status} via {entry.get('backend', '?')}"
    if objects is not None:
        rate = objects / seconds if seconds > 0 else 0.0
        text += f", {objects} objects in {seconds:.1f}s ({rate:.0f}/s)"
    if entry.get("objects_failed"):
        text += f", {entry['objects_failed']} failed"
    return text


def worth_a_progress_line(entry: dict) -> bool:
    """Pure: a finished resource gets a progress line when it moved objects or failed; the empty ones of a first
    migration (most of a cluster's 60-odd resources) are in the summary table only."""
    objects = entry.get("objects_migrated")
    return objects is None or bool(objects or entry.get("objects_failed")) or entry.get("status") != "succeeded"


# A reason shared by more skipped resources than this is shown as a count: a first migration of a cluster
# skips most of its 60-odd resources for the same reason, and 60 rows would hide the few that moved.
SKIPPED_NAMED = 5


def summary_table(entries: List[dict], skipped: List[dict]) -> List[str]:
    """Pure: the table every migrate play ends with: a row per migrated resource, then the skipped ones, one
    line per reason (named when few; the result's ``skipped_resources`` names every one)."""
    lines = []
    if entries:
        rows = [("RESOURCE", "STATUS", "BACKEND", "OBJECTS", "FAILED", "SECONDS")]
        for entry in entries:
            objects = entry.get("objects_migrated")
            rows.append((str(entry.get("resource")), str(entry.get("status")), str(entry.get("backend")),
                         "-" if objects is None else str(objects), str(entry.get("objects_failed") or 0),
                         f"{float(entry.get('seconds') or 0):.1f}"))
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows]
    else:
        lines.append("nothing migrated")
    by_reason: Dict[str, List[str]] = {}
    for skip in skipped:
        by_reason.setdefault(str(skip.get("reason")), []).append(str(skip.get("resource")))
    for reason, names in by_reason.items():
        if len(names) <= SKIPPED_NAMED:
            lines.append(f"skipped {', '.join(names)}: {reason}")
        else:
            lines.append(f"skipped {len(names)} resources: {reason} (listed in skipped_resources)")
    return lines


class StatusFile:
    """The module side: keeps the lines and rewrites the file; a no-op without a path."""

    def __init__(self, path: Optional[str], interval: float = 5.0, clock=time.monotonic):
        self.path = path
        self.interval = interval
        self.clock = clock
        self.finished: List[str] = []
        self.running: Dict[str, str] = {}
        self._last = 0.0
        self._lock = threading.Lock()

    def running_line(self, resource: str, line: str) -> None:
        with self._lock:
            self.running[resource] = line
            due = self.clock() - self._last >= self.interval
        if due:
            self.flush()

    def finished_line(self, resource: str, line: Optional[str]) -> None:
        """``line`` None: the resource is done without a line of its own (the summary table counts it)."""
        with self._lock:
            self.running.pop(resource, None)
            if line is not None:
                self.finished.append(line)
        self.flush()

    def flush(self) -> None:
        if not self.path:
            return
        with self._lock:
            self._last = self.clock()
            data = {"finished": list(self.finished), "running": dict(self.running), "written_at": time.time()}
        directory = os.path.dirname(self.path) or "."
        try:
            fd, tmp = tempfile.mkstemp(dir=directory, prefix=".status-")
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(data, handle)
            os.replace(tmp, self.path)
        except OSError:
            pass  # progress display is a courtesy; the migration goes on


class StopSignal:
    """Why the whole task must stop (the parent process is gone, the playbook's heartbeat stopped), or None.

    A lost Lease stops its own resource only: the runner asks the resource's Lease as well (``Resource.stop_reason``).
    """

    def __init__(self, status_path: Optional[str], parent: Optional[int] = None, clock=time.time):
        self.parent = os.getppid() if parent is None else parent
        self.heartbeat = (status_path + HEARTBEAT_SUFFIX) if status_path else None
        self.watch_heartbeat = bool(self.heartbeat and os.path.exists(self.heartbeat))
        self.clock = clock

    def __call__(self) -> Optional[str]:
        if os.getppid() != self.parent:
            return "the process that started this module is gone (the playbook was stopped)"
        if self.watch_heartbeat:
            try:
                age = self.clock() - os.path.getmtime(self.heartbeat)
            except OSError:
                age = HEARTBEAT_TIMEOUT + 1
            if age > HEARTBEAT_TIMEOUT:
                return f"the playbook stopped watching this migration {age:.0f}s ago (it was killed)"
        return None
