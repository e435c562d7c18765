# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Compatibility names for the judge capability, which lives in ``_judge/``."""

from __future__ import annotations

from ansible_collections.kubeupgrade.storage.plugins.module_utils._judge.engine import judge, needs_count  # noqa: F401
from ansible_collections.kubeupgrade.storage.plugins.module_utils._judge.model import (  # noqa: F401
    BLOCKING_BY_DEFAULT,
    NEEDS_MIGRATION,
    REMOVED,
    SAFE,
    UNKNOWN,
    UNSAFE,
    VERDICT_ORDER,
    Judgement,
    JudgeOptions,
    ResourceVerdict,
    Target,
    worst_of,
)
from ansible_collections.kubeupgrade.storage.plugins.module_utils._judge.report import (  # noqa: F401
    render_markdown,
    render_table,
    render_text,
)
from ansible_collections.kubeupgrade.storage.plugins.module_utils._judge.views import storage_version_object_name  # noqa: F401
