# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How the collection names a resource: kubectl-style ``<resource>[.<group>]``.

The same string is the name of the resource's StorageState object, so it is what operators see in
reports and what they type in ``resources:`` options.
"""

from __future__ import annotations

from dataclasses import dataclass

from ansible_collections.kubeupgrade.storage.plugins.module_utils._http import paths


@dataclass(frozen=True, order=True)
class GroupResource:
    group: str
    resource: str

    @property
    def name(self) -> str:
        """``pods`` for the core group, ``deployments.apps`` otherwise."""
        return f"{self.resource}.{self.group}" if self.group else self.resource

    @classmethod
    def parse(cls, name: str) -> GroupResource:
        """Inverse of ``name``: resource names never contain a dot, so split at the first one."""
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"resource name must be a non-empty string like 'deployments.apps', got {name!r}")
        resource, _sep, group = name.strip().partition(".")
        return cls(group=group, resource=resource)

    def api_prefix(self, version: str) -> str:
        """URL prefix of this resource's group/version: ``/api/v1`` or ``/apis/<group>/<version>``."""
        return paths.group_version(self.group, version)

    def group_version(self, version: str) -> str:
        """``apiVersion`` string: ``v1`` for core, ``apps/v1`` otherwise."""
        return f"{self.group}/{version}" if self.group else version
