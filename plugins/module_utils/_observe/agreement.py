# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Do all apiservers report the same storage hashes? A migration is only safe once they do.

While apiservers disagree (mid rolling upgrade, or after a rollback of one of them), some still
write the old storage version, so a migration would be undone behind its back. Anything we could not
see (an unreachable, unready or incompletely discovered apiserver) counts as disagreement.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional

from ansible_collections.kubeupgrade.storage.plugins.module_utils.resources import GroupResource


@dataclass
class Agreement:
    agreed: bool
    hashes: Dict[str, Dict[str, str]] = field(default_factory=dict)  # resource -> endpoint -> hash
    disagreeing: List[str] = field(default_factory=list)  # resources whose endpoints report different hashes
    unreachable: List[str] = field(default_factory=list)
    unready: List[str] = field(default_factory=list)
    missing: Dict[str, List[str]] = field(default_factory=dict)  # resource -> endpoints that do not report it
    incomplete: List[str] = field(default_factory=list)  # reachable endpoints whose discovery failed in part

    def to_dict(self) -> dict:
        return asdict(self)


def _concerned(ep, names, ignore) -> bool:
    """Whether a failed discovery on ``ep`` concerns these resources (all of them when no names are given)."""
    if names is None:
        return bool([gv for gv in ep.failed_groups if gv not in ignore])
    return any(ep.failed_for(GroupResource.parse(name).group, ignore) for name in names)


def compare(endpoints, resources: Optional[List[str]] = None, require_ready: bool = True, ignore=()) -> Agreement:
    """Compare the storage hash of every resource across endpoints; fail closed on anything unseen.

    A failed discovery concerns only its own group's resources, and none at all when the group/version is
    in ``ignore`` (aggregated APIs: their objects are not in this etcd).
    """
    unreachable = [ep.endpoint for ep in endpoints if not ep.reachable]
    reachable = [ep for ep in endpoints if ep.reachable]
    unready = [ep.endpoint for ep in reachable if not ep.ready]
    incomplete = [ep.endpoint for ep in reachable if _concerned(ep, resources or None, ignore)]
    if resources:
        names = list(dict.fromkeys(resources))
    else:
        names = sorted({name for ep in reachable for name in ep.resources})
    hashes: Dict[str, Dict[str, str]] = {}
    missing: Dict[str, List[str]] = {}
    disagreeing = []
    for name in names:
        per_endpoint = {}
        for ep in reachable:
            observed = ep.resources.get(name)
            if observed is None or not observed.storage_hash:
                missing.setdefault(name, []).append(ep.endpoint)
                if observed is not None and observed.hash_mismatch and name not in disagreeing:
                    disagreeing.append(name)  # the endpoint contradicts itself across served versions
                continue
            per_endpoint[ep.endpoint] = observed.storage_hash
        hashes[name] = per_endpoint
        if len(set(per_endpoint.values())) > 1 and name not in disagreeing:
            disagreeing.append(name)
    agreed = bool(reachable) and not (unreachable or incomplete or disagreeing or missing or (require_ready and unready))
    return Agreement(agreed=agreed, hashes=hashes, disagreeing=disagreeing, unreachable=unreachable,
                     unready=unready, missing=missing, incomplete=incomplete)


def storage_versions(agreement: Agreement, endpoints) -> Dict[str, str]:
    """The version each agreed resource is stored in, where every endpoint reports the same hash and maps it to the
    same version: what an audit must find every object stored in (its ``readable_versions``) for the resource to be
    current. A hash that maps to no known version leaves the resource out: unknown, never guessed."""
    result = {}
    for name, per_endpoint in agreement.hashes.items():
        if len(set(per_endpoint.values())) != 1 or name in agreement.disagreeing or name in agreement.missing:
            continue
        versions = {ep.resources[name].storage_version for ep in endpoints if ep.endpoint in per_endpoint}
        if len(versions) == 1 and None not in versions:
            result[name] = versions.pop()
    return dict(sorted(result.items()))


class AgreementTracker:
    """Agreement must hold, with the same hashes, for ``required_polls`` consecutive polls.

    One agreeing poll can be a moment between two apiservers restarting; requiring the same answer
    several times in a row rides that out. Any change of hashes or any failed poll restarts the count.
    """

    def __init__(self, required_polls: int = 2):
        if int(required_polls) < 1:
            raise ValueError(f"required_polls must be at least 1, got {required_polls!r}")
        self.required_polls = int(required_polls)
        self.consecutive = 0
        self.polls = 0
        self._last_hashes = None

    def update(self, agreement: Agreement) -> bool:
        self.polls += 1
        if not agreement.agreed:
            self.consecutive = 0
            self._last_hashes = None
        elif agreement.hashes == self._last_hashes:
            self.consecutive += 1
        else:
            self.consecutive = 1
            self._last_hashes = agreement.hashes
        return self.consecutive >= self.required_polls

    @property
    def satisfied(self) -> bool:
        return self.consecutive >= self.required_polls
