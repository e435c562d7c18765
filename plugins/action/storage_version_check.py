# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run ``storage_version_check`` and write its reports on the controller.

With ``report_dir`` the JSON and Markdown reports are written on the controller, wherever the module
ran (``delegate_to`` a control-plane node included), once the check has judged - also when its
verdicts block, since that is when the report is read. Nothing is written in check mode. Writing here
instead of in ``file`` and ``copy`` tasks saves three module runs per pre-flight and keeps the report
document in Python, next to its Markdown rendering.
"""

from __future__ import annotations

import json
import os
import tempfile

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.kubeupgrade.storage.plugins.module_utils._judge.report import document


class ActionModule(ActionBase):
    _requires_connection = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        report_dir = args.get("report_dir")
        # Refuse a bad report_name before the module sends any request.
        name = args.get("report_name")
        paths = report_paths(report_dir, "storage-check" if name is None else str(name)) if report_dir else None
        result.update(self._execute_module(module_args=args, task_vars=task_vars))
        # A failure with nothing blocking is a failure before any judgement (bad input, no answer): no report to write.
        if paths is None or (result.get("failed") and not result.get("blocking")):
            return result
        if self._task.check_mode:
            result["report_files"] = []
            return result
        try:
            write_reports(paths, document(result, args.get("target_release")), result.get("report_markdown", ""))
        except OSError as exc:
            raise AnsibleActionFail(
                f"report_dir {report_dir}: cannot write the reports on the controller ({exc.strerror or exc}). "
                "Set report_dir to a directory this account can create and write.") from None
        result["report_files"] = list(paths)
        return result


def report_paths(report_dir: str, name: str):
    """(JSON path, Markdown path) on the controller; a relative ``report_dir`` is relative to the working directory."""
    if "/" in name or name in ("", ".", ".."):
        raise AnsibleActionFail(f"report_name {name!r} must be a file name without a directory (for example preflight-1.33)")
    base = os.path.join(os.path.abspath(os.path.expanduser(report_dir)), name)
    return base + ".json", base + ".md"


def write_reports(paths, doc: dict, markdown: str) -> None:
    """Write both files atomically (a reader never sees half a report), creating the directory."""
    os.makedirs(os.path.dirname(paths[0]), mode=0o755, exist_ok=True)
    for path, text in zip(paths, (json.dumps(doc, indent=2) + "\n", markdown)):
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".kubeupgrade-report-")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
