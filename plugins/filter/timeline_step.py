# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Jinja filter ``timeline_step``: one step of an upgrade's timeline from a registered module result (docs in the .yml
beside this one); what a step holds is decided in ``_judge/timeline.py``, which the final check renders."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.kubeupgrade.storage.plugins.module_utils._judge import timeline
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ConfigurationError


def timeline_step(result, name):
    """``preflight_check | kubeupgrade.storage.timeline_step('pre-flight')`` -> ``{step, at, apiservers, ...}``."""
    try:
        return timeline.step(result, name)
    except ConfigurationError as error:
        raise AnsibleFilterError(str(error)) from None


class FilterModule:
    def filters(self):
        return {"timeline_step": timeline_step}
