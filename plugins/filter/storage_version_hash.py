# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Jinja filters ``storage_version_hash`` and ``storage_version_lookup`` (docs in the .yml files beside this one)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.kubeupgrade.storage.plugins.module_utils import errors, hashing
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.discovery import sort_versions
from ansible_collections.kubeupgrade.storage.plugins.module_utils.profiles import load_profiles


def _split_gvk(value, version, kind):
    """Accept ``'apps' | f('v1', 'Deployment')``, ``'apps/v1/Deployment'``, ``'/v1/Pod'`` or a dict."""
    if isinstance(value, dict):
        return value.get("group") or "", value.get("version"), value.get("kind")
    if value is None:
        value = ""
    if not isinstance(value, str):
        raise AnsibleFilterError(f"storage_version_hash expects a group string, 'group/version/kind' or a dict, got {type(value).__name__}")
    if version is None and kind is None and value.count("/") >= 2:
        group, version, kind = value.rsplit("/", 2)
        return group, version, kind
    return value, version, kind


def storage_version_hash(value, version=None, kind=None):
    """The apiserver's storageVersionHash of group/version/kind."""
    group, version, kind = _split_gvk(value, version, kind)
    try:
        return hashing.storage_version_hash(group, version, kind)
    except ValueError as exc:
        raise AnsibleFilterError(f"storage_version_hash: {exc}") from None


def storage_version_lookup(hash_value, group=None, kind=None, candidates=None, resource=None, release=None):  # noqa: PLR0913 (documented filter keywords)
    """The version ``hash_value`` stands for among the candidates, or None (unknown)."""
    versions = set(candidates or [])
    if resource:
        try:
            profile_group, profile_kind, profile_versions = load_profiles().hash_candidates(resource, release)
        except errors.KubeUpgradeError as exc:
            raise AnsibleFilterError(f"storage_version_lookup: {exc}") from None
        group = profile_group if group is None else group
        kind = kind or profile_kind
        versions |= profile_versions
    if not kind:
        raise AnsibleFilterError("storage_version_lookup needs kind=... (or resource=... from the release data)")
    if not versions:
        raise AnsibleFilterError("storage_version_lookup needs candidates=[...] (or resource=... from the release data)")
    return hashing.reverse_lookup(hash_value, group or "", kind, sort_versions(versions))


class FilterModule:
    def filters(self):
        return {"storage_version_hash": storage_version_hash, "storage_version_lookup": storage_version_lookup}
