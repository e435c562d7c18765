# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What ``storage_rehearsal`` measured, as the judge uses it: the target binary's own reads beat release data.

- A target that did not start on the copy is a finding that blocks everything.
- Objects the target could not decode, or that belong to a resource it does not serve, make the resource
  ``unsafe``/``removed`` where release data said ``safe`` or ``unknown`` (the binary knows the flags,
  the providers and the patches release data cannot); a prediction that already asks for action keeps
  its verdict and next step (a migration is still the fix) and gains the rehearsal's names.
- A rehearsal that read everything never clears a prediction: it read what was stored at its copy,
  while a prediction may be about the versions the running apiservers still write. The difference is
  said in the reason. The one exception is the question only the target binary with the cluster's flags can answer:
  whether it serves a resource its release has only in alpha or beta versions (``served_behind_flags``).
"""

from __future__ import annotations

from typing import List, Optional

from ansible_collections.kubeupgrade.storage.plugins.module_utils._judge.model import (
    SAFE,
    UNKNOWN,
    UNSAFE,
    Finding,
    ResourceVerdict,
)
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ConfigurationError


def validate(rehearsal, target_release: Optional[str]) -> None:
    """The registered result of ``storage_rehearsal`` for the release judged, or one clear error."""
    if rehearsal is None or skipped(rehearsal):
        return
    if not isinstance(rehearsal, dict) or not isinstance(rehearsal.get("resources"), dict) or "rehearsed_at" not in rehearsal:
        if isinstance(rehearsal, dict) and rehearsal.get("failed"):
            raise ConfigurationError("rehearsal: the storage_rehearsal task failed before it measured anything "
                                     f"({str(rehearsal.get('msg', ''))[:300]}); fix that and rehearse again, or judge without it.")
        raise ConfigurationError("rehearsal must be the registered result of kubeupgrade.storage.storage_rehearsal (a dictionary "
                                 "with 'resources' and 'rehearsed_at').")
    rehearsed = str(rehearsal.get("target_release") or "")
    if target_release and rehearsed and rehearsed != str(target_release).lstrip("v"):
        raise ConfigurationError(f"rehearsal: it rehearsed {rehearsal.get('target_git_version') or rehearsed}, but this check "
                                 f"judges target_release {target_release}: rehearse with the binary of {target_release}.")


def skipped(rehearsal) -> bool:
    """A rehearsal this host could not run (``if_unavailable: skip``): no measurement, and said in the report."""
    return isinstance(rehearsal, dict) and rehearsal.get("rehearsed") is False and not rehearsal.get("failed")


def measured(rehearsal):
    """The rehearsal's result when it measured something, else None (release data judges alone)."""
    return None if rehearsal is None or skipped(rehearsal) else rehearsal


def notes(rehearsal) -> List[str]:
    """What the report says of the rehearsal: what the target binary read and where it came from, or that it did not
    run and why (the target binary's reading is then missing)."""
    if measured(rehearsal) is not None and rehearsal.get("headline"):
        images = ", ".join(entry.get("image", "") for entry in rehearsal.get("images") or [])
        return [f"Rehearsed: {rehearsal['headline']}" + (f" (from the image{'s' if ',' in images else ''} {images})" if images else "")
                + (f"; the cluster's flags from {rehearsal['flags_from']}" if rehearsal.get("flags_from") else "")]
    if not skipped(rehearsal):
        return []
    return [f"Not rehearsed (judged from release data, which cannot know this cluster's flags): {rehearsal.get('not_rehearsed')}"]


def release_of(rehearsal) -> Optional[str]:
    return str(rehearsal.get("target_release")) if rehearsal and rehearsal.get("target_release") else None


def _where(rehearsal) -> str:
    source = rehearsal.get("source") or {}
    return (f"the rehearsal with {rehearsal.get('target_git_version') or 'the target binary'} on a copy of etcd "
            f"(revision {source.get('revision')}, {rehearsal.get('rehearsed_at')})")


def findings(rehearsal) -> List[Finding]:
    failure = (rehearsal or {}).get("start_failure")
    if not failure:
        return []
    lines = "; ".join((rehearsal.get("fatal_log") or [])[-3:])
    return [Finding(subject=f"rehearsal: {rehearsal.get('target_git_version') or 'target'} start", scope="rehearsal",
                    verdict=UNSAFE, reason=f"{failure['reason']} (measured by {_where(rehearsal)})" + (f": {lines}" if lines else ""),
                    next_step=failure["next_step"])]


def apply(results: List[ResourceVerdict], rehearsal, resources=None) -> None:
    """Fold the rehearsal's measured verdicts into ``results`` (in place); new entries for what the check did not judge."""
    if not rehearsal:
        return
    by_name = {r.resource: r for r in results}
    where = _where(rehearsal)
    for name, entry in sorted((rehearsal.get("resources") or {}).items()):
        if resources and name not in resources:
            continue
        found = by_name.get(name)
        if entry.get("verdict") == SAFE:
            if found is not None and found.verdict == UNKNOWN and found.served_behind_flags and entry.get("served"):
                found.reason = (f"Measured by {where}: the target served {name} with the cluster's flags and read all "
                                f"{entry.get('objects_read')} stored object(s). Release data alone said unknown: {found.reason}")
                found.verdict, found.next_step = SAFE, "none: nothing to do for this resource."
                found.served_behind_flags, found.target_source, found.objects_named = False, "rehearsal", []
                continue
            if found is not None and found.verdict != SAFE:
                found.reason += (f" {where[:1].upper() + where[1:]} read all {entry.get('objects_read')} stored object(s); the verdict "
                                 "stands for what the running apiservers may still write.")
            continue
        names = list(entry.get("undecodable_names") or entry.get("removed_names") or [])
        measured = f"Measured by {where}: {entry.get('reason')}."
        if found is None:
            results.append(ResourceVerdict(resource=name, verdict=entry["verdict"], reason=measured,
                                           next_step=entry.get("next_step", ""), objects_named=names, target_source="rehearsal"))
        elif found.verdict in (SAFE, UNKNOWN):
            found.reason = f"{measured} Release data and records said {found.verdict}: {found.reason}"
            found.verdict, found.next_step, found.objects_named = entry["verdict"], entry.get("next_step", ""), names
            found.target_source = "rehearsal"
        else:
            found.reason += f" {measured}"
            found.objects_named = found.objects_named or names
