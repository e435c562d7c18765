# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run ``storage_migration`` and show its progress while it runs.

A module cannot print while it runs. When the module runs on the controller (``delegate_to:
localhost``, the way the roles run it), this action plugin gives it a status file in a private
temporary directory, runs the module in a thread, and prints the lines the module writes there: one
per finished resource and, every 10 seconds, one per running resource (done/total, rate, ETA). It
does not use ``async``/``async_status``, so it does not depend on where ``$HOME`` points. While it
runs it touches a heartbeat file next to the status file; if this worker's parent (ansible-playbook)
is gone, the heartbeat stops and the module stops between chunks without writing a record.
On other connections the module runs as usual and its ``summary`` is printed at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

display = Display()

RUNNING_EVERY = 10.0
POLL = 1.0


class ActionModule(ActionBase):
    _requires_connection = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        local = getattr(self._connection, "transport", "") == "local" or self._play_context.connection == "local"
        if not local or self._task.check_mode or args.get("progress_file"):
            result.update(self._execute_module(module_args=args, task_vars=task_vars))
            return result
        workdir = tempfile.mkdtemp(prefix="kubeupgrade-migration-")
        try:
            args["progress_file"] = os.path.join(workdir, "status.json")
            result.update(self._run_watched(args, task_vars))
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        return result

    def _run_watched(self, args, task_vars):
        status = args["progress_file"]
        heartbeat = status + ".alive"
        _touch(heartbeat)
        box = {}
        worker = threading.Thread(target=self._execute, args=(args, task_vars, box), daemon=True)
        worker.start()
        watcher = _Watcher(self._task.get_name())
        parent = os.getppid()
        while worker.is_alive():
            worker.join(POLL)
            if os.getppid() == parent:
                _touch(heartbeat)  # stops when ansible-playbook is gone: the module then stops on its own
            watcher.show(status)
        watcher.show(status, final=True)
        if "error" in box:
            raise box["error"]
        return box.get("result", {})

    def _execute(self, args, task_vars, box):
        try:
            box["result"] = self._execute_module(module_args=args, task_vars=task_vars)
        except Exception as error:  # re-raised in the task's thread, where Ansible reports it
            box["error"] = error


class _Watcher:
    """Prints new finished lines at once and running lines every ``RUNNING_EVERY`` seconds."""

    def __init__(self, task_name):
        self.task_name = task_name
        self.shown = 0
        self.last_running = time.monotonic()

    def show(self, path, final=False):
        try:
            with open(path, encoding="utf-8") as handle:
                data = json.load(handle)
        except (OSError, ValueError):
            return
        finished = data.get("finished") or []
        for line in finished[self.shown:]:
            display.display(f"storage_migration: {line}")
        self.shown = len(finished)
        if not final and time.monotonic() - self.last_running >= RUNNING_EVERY:
            self.last_running = time.monotonic()
            for line in (data.get("running") or {}).values():
                display.display(f"storage_migration: {line}")


def _touch(path):
    try:
        with open(path, "a", encoding="utf-8"):
            pass
        os.utime(path, None)
    except OSError:
        pass
