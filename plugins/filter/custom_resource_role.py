# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Jinja filter ``custom_resource_role``: the RBAC ClusterRole for the custom resources of one cluster (docs in the
.yml beside this one). The rules are ``module_utils/rbac.py``'s, the same that ``scripts/generate_rbac.py`` writes
into ``rbac/`` for the built-in resources."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.kubeupgrade.storage.plugins.module_utils import rbac


def custom_resource_role(crds, use="migrate", name=None):
    """``info.crds | custom_resource_role('migrate')`` -> a ClusterRole granting list, get, update and patch on each."""
    try:
        return rbac.custom_resource_role(crds, use=use, name=name)
    except ValueError as error:
        raise AnsibleFilterError(f"custom_resource_role: {error}") from None


class FilterModule:
    def filters(self):
        return {"custom_resource_role": custom_resource_role}
