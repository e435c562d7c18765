# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What ``storage_version_hash`` calls: a storage version hash computed, or one mapped back to its version, with
group, kind and candidate versions taken from the release data when a resource is named. No cluster is contacted."""

from __future__ import annotations

from typing import Optional

from ansible_collections.kubeupgrade.storage.plugins.module_utils import errors, hashing
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.discovery import sort_versions
from ansible_collections.kubeupgrade.storage.plugins.module_utils.profiles import load_profiles

EMPTY_RESULT = {"hash": "", "version": "", "api_version": "", "group": "", "kind": ""}


def api_version(group: str, version: Optional[str]) -> Optional[str]:
    """``apps/v1``, or ``v1`` for the core group; None for no version."""
    if not version:
        return None
    return f"{group}/{version}" if group else version


def run(module) -> dict:
    """Entry point of the module: ``module`` is the KubeUpgradeModule (``connection=False``)."""
    params = module.params
    version, hash_value = params["version"], params["hash"]
    group, kind, profile_versions, storage_version = _named(params)
    if hash_value is None:
        version = version or storage_version
        if not version:
            raise errors.ConfigurationError(
                "give version to compute a hash (e.g. version: v1), or hash to look one up, or resource and release")
        computed = hashing.storage_version_hash(group, version, kind)
        return dict(changed=False, hash=computed, version=version, api_version=api_version(group, version), group=group, kind=kind,
                    msg=f"{group}/{version}/{kind} hashes to {computed}")
    return _reverse_lookup(params, (group, kind, version), profile_versions)


def _named(params: dict) -> tuple:
    """(group, kind, the resource's versions in the release data, its storage version in ``release``): the options,
    completed from the release data when ``resource`` is given."""
    group, kind, resource, release = params["group"], params["kind"], params["resource"], params["release"]
    profile_versions, storage_version = set(), None
    if resource:
        profiles = load_profiles(params["profiles_file"], params["profiles"])
        profile_group, profile_kind, profile_versions = profiles.hash_candidates(resource, release)
        group = profile_group if group is None else group
        kind = kind or profile_kind
        if release:
            storage_version = profiles.get(release).get(resource).storage_version
    elif release:
        raise errors.ConfigurationError("release is only used with resource: give resource too (e.g. resource: deployments.apps)")
    if not kind:
        raise errors.ConfigurationError("kind is required (e.g. kind: Deployment) unless resource names a resource in the release data")
    return group or "", kind, profile_versions, storage_version


def _reverse_lookup(params: dict, named: tuple, profile_versions) -> dict:
    """Which candidate version ``hash`` is the hash of."""
    (group, kind, version), hash_value = named, params["hash"]
    candidates = sort_versions(set(params["candidates"] or []) | set(profile_versions) | ({version} if version else set()))
    if not candidates:
        raise errors.ConfigurationError("a reverse lookup needs candidates (e.g. candidates: [v1beta1, v1]) or a resource from the release data")
    found = hashing.reverse_lookup(hash_value, group, kind, candidates)
    if found:
        msg = f"{hash_value} is {api_version(group, found)} {kind}"
    else:
        msg = f"{hash_value} matches none of {', '.join(candidates)} for {group or 'core'} {kind}: treat it as unknown"
    return dict(changed=False, hash=hash_value, version=found, api_version=api_version(group, found), group=group, kind=kind,
                candidates=candidates, msg=msg)
