# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the check decides for the play around it, besides the verdicts: the release it judges when none is named, and
which migration may run before a rolling upgrade. Pure: the roles only wire these results (``target_running_release``,
``migration``)."""

from __future__ import annotations

from typing import List, Optional

from ansible_collections.kubeupgrade.storage.plugins.module_utils._judge.model import SAFE
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ConfigurationError
from ansible_collections.kubeupgrade.storage.plugins.module_utils.profiles import release_sort_key

# What may be migrated before the roll (the ``migration`` result's booleans).
MIGRATE_RESOURCES = "resources"  # what the records and a check against the target select (the migrate role)
MIGRATE_OBJECTS_FROM_AUDIT = "objects_from_audit"  # only the objects the audit named (storage_migration objects_from_audit)


def running_release(endpoints) -> Optional[str]:
    """The release the apiservers run now, judged when no target is named: the first one an apiserver reports, in the
    order of the endpoints (after a migration, which waited for agreement, every apiserver runs it)."""
    return next((ep.release for ep in endpoints if ep.reachable and ep.release), None)


def require_running_release(endpoints) -> str:
    """``running_release``, or why there is none to judge against."""
    release = running_release(endpoints)
    if not release:
        raise ConfigurationError("target_running_release: no apiserver reported its release ("
                                 + ", ".join(ep.endpoint for ep in endpoints) + "), so there is nothing to judge "
                                 "against; give target_release, or bring an apiserver back.")
    return release


def way_back(endpoints, target_release: Optional[str]) -> Optional[str]:
    """The release a binary rollback from ``target_release`` returns to, as the apiservers run it now: the oldest
    release one serves as (its emulated release, else its binary's) that is older than the target; None when every
    apiserver already serves as the target (or none answered)."""
    if not target_release:
        return None
    key = release_sort_key
    older = [ep.emulated_release or ep.release for ep in endpoints if ep.reachable and ep.release]
    older = [release for release in older if key(release) < key(target_release)]
    return min(older, key=key) if older else None


def migration_before_roll(verdict: str, releases: List[str], audit_given: bool, target_crds_given: bool,
                          not_observed: str = "") -> dict:
    """``{resources, objects_from_audit, why}``: what a play may migrate before its rolling upgrade touches a host.

    Nothing when every verdict is safe. Nothing while the apiservers run different releases (a roll is under way and
    being resumed: the check before each host and the final gate take over), nor when no apiserver said its release.
    Nothing when the apiservers observed are fewer than those the cluster lists (``not_observed`` says so).
    Otherwise, with an audit, only the objects it found in a version the target cannot decode; without one - or with
    target CRD manifests, which only a check against them selects - what the records and that check select (the
    migrate role; with both, it runs first). ``why`` says why nothing is migrated while something is not safe, and
    is empty otherwise.
    """
    if verdict == SAFE:
        return {MIGRATE_RESOURCES: False, MIGRATE_OBJECTS_FROM_AUDIT: False, "why": ""}
    if not_observed:  # through a load balancer, say: a migration would go to whichever apiserver answers
        return {MIGRATE_RESOURCES: False, MIGRATE_OBJECTS_FROM_AUDIT: False,
                "why": f"Not migrating before the rolling upgrade: {not_observed}"}
    if len(releases) > 1:
        return {MIGRATE_RESOURCES: False, MIGRATE_OBJECTS_FROM_AUDIT: False,
                "why": ("Not migrating before the rolling upgrade: the apiservers run different releases ("
                        + ", ".join(releases) + "), so a roll is under way; the check before each host and the final gate "
                        "after the last one take over.")}
    if not releases:
        return {MIGRATE_RESOURCES: False, MIGRATE_OBJECTS_FROM_AUDIT: False,
                "why": "Not migrating before the rolling upgrade: no apiserver reported its release."}
    resources = not audit_given or target_crds_given
    return {MIGRATE_RESOURCES: resources, MIGRATE_OBJECTS_FROM_AUDIT: audit_given, "why": ""}
