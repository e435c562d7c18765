# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How the collection names a resource: kubectl-style ``<resource>[.<group>]``.

The same string is the name of the resource's StorageState object, so it is what operators see in
reports and what they type in ``resources:`` options. Names an operator typed that nothing knows are
answered here too, with the closest known names ("did you mean"), for every capability that takes them.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Dict, Iterable, List

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


# --- names an operator typed that nothing knows -----------------------------------------------------------


def known_names(observation, manifests=None) -> set:
    """Every name the check could judge: served, recorded, or defined by a CRD or a target manifest."""
    names = set(observation.crds) | set(observation.storage_states) | set(manifests or {})
    for endpoint in observation.endpoints:
        names |= set(endpoint.resources)
    return names


def closest(name: str, candidates: Iterable[str], limit: int = 3) -> List[str]:
    """``deployments`` -> ``deployments.apps`` first (a missing group is the usual slip), then spelling matches."""
    pool = sorted(set(candidates))
    grouped = [c for c in pool if c.startswith(f"{name}.")]
    similar = difflib.get_close_matches(name, pool, n=limit, cutoff=0.6)
    return list(dict.fromkeys(grouped + similar))[:limit]


def unknown(requested: Iterable[str], known: set, profiles=None) -> Dict[str, List[str]]:
    """Requested names that nothing knows, each with its closest known names (empty dict: all known)."""
    found = {}
    for name in requested:
        if name in known or (profiles is not None and profiles.known(name)):
            continue
        found[name] = closest(name, known)
    return found


def describe_unknown(option: str, missing: Dict[str, List[str]]) -> str:
    parts = []
    for name, suggestions in missing.items():
        hint = f" (did you mean {' or '.join(suggestions)}?)" if suggestions else ""
        parts.append(f"{name!r}{hint}")
    return (f"{option}: no apiserver serves, no StorageState records and no release data knows {', '.join(parts)}. "
            "Use kubectl-style names: <resource>.<group>, or just <resource> for the core group (pods, "
            "deployments.apps, widgets.example.com).")


def unserved(name: str, observation) -> bool:
    """True when no running apiserver serves ``name`` and no CRD defines it: a typo, or a record left from an earlier
    release.

    Only when every apiserver answered and its discovery of the resource's group is complete: a group
    we could not read may serve it. Aggregated APIs keep their objects elsewhere, so they do not count.
    """
    if not observation.endpoints or name in observation.crds:
        return False
    group = GroupResource.parse(name).group
    ignore = observation.aggregated_group_versions()
    return all(ep.covers(group, ignore) and name not in ep.resources for ep in observation.endpoints)


def unserved_names(requested: Iterable[str], observation, profiles=None) -> Dict[str, List[str]]:
    """Requested names that no apiserver serves (``unserved``), each with the closest names they serve or (an
    observation limited to the requested names sees no others) the release data of the releases they run has."""
    pool = {name for ep in observation.endpoints for name in ep.resources}
    for release in {ep.release for ep in observation.endpoints if ep.release}:
        if profiles is not None and release in profiles:
            pool |= set(profiles.get(release).resources)
    return {name: closest(name, pool) for name in requested if unserved(name, observation)}


def describe_unserved(option: str, missing: Dict[str, List[str]], endpoints: Iterable[str]) -> str:
    """The error for ``unserved_names``: the option, each name with "did you mean", the apiservers asked."""
    parts = [f"{name!r}" + (f" (did you mean {' or '.join(suggestions)}?)" if suggestions else "")
             for name, suggestions in missing.items()]
    return (f"{option}: no apiserver serves {', '.join(parts)} (asked {', '.join(endpoints)}, each with complete "
            "discovery). Use kubectl-style names: <resource>.<group>, or just <resource> for the core group (pods, "
            "deployments.apps, widgets.example.com).")


def unserved_message(option: str, requested: Iterable[str], observation, profiles=None) -> str:
    """The one error for names in ``requested`` that no apiserver serves (``describe_unserved`` of ``unserved_names``,
    naming every apiserver asked); '' when each is served."""
    missing = unserved_names(requested, observation, profiles)
    return describe_unserved(option, missing, [ep.endpoint for ep in observation.endpoints]) if missing else ""
