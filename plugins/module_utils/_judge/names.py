# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Resource names an operator typed that the cluster does not know, with the closest known names."""

from __future__ import annotations

import difflib
from typing import Dict, Iterable, List


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
