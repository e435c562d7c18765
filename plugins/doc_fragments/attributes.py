# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Module attributes shared by several modules, documented once."""

from __future__ import annotations


class ModuleDocFragment:

    DOCUMENTATION = r"""
options: {}
"""

    READ_ONLY = r"""
options: {}
attributes:
  check_mode:
    description: The module never changes anything, so it runs normally in check mode.
    support: full
  diff_mode:
    description: Nothing changes, so there is no diff.
    support: none
"""

    ACTION_GROUP = r"""
options: {}
attributes:
  action_group:
    description: Use C(group/kubeupgrade.storage.storage) in C(module_defaults) to set the connection options once.
    support: full
    membership: [kubeupgrade.storage.storage]
"""
