# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The pre-flight verdict: can the target binaries read every version the cluster has persisted?

Verdicts, from best to worst (``VERDICT_ORDER``):

- ``safe``: every persisted version is readable by the target, or nothing is stored at all;
- ``needs_migration``: an older persisted version is not readable by the target, the current storage
  version is, so rewriting every object first makes it safe;
- ``unknown``: something we cannot vouch for (``Unknown`` persisted, a hash that maps to no version,
  a group whose discovery failed); never safe;
- ``removed``: the target has no types for the resource (an upgrade past its removal, or a rollback
  below its introduction) while objects of it are stored;
- ``unsafe``: stored objects no migration through the apiserver can fix: the target cannot read the
  current storage version, or neither the target nor the running apiservers can read a persisted one.

Failures stay confined to what they concern: a failed discovery of one group/version doubts that
group's resources only; an aggregated APIService's objects are not in this etcd at all; an
unreachable apiserver is one finding of its own. Verdicts that ask the operator to act are about
objects that exist: with nothing stored there is nothing to fix.
"""

from __future__ import annotations

from typing import List

from ansible_collections.kubeupgrade.storage.plugins.module_utils._judge import evidence as ev_mod
from ansible_collections.kubeupgrade.storage.plugins.module_utils._judge import findings as findings_mod
from ansible_collections.kubeupgrade.storage.plugins.module_utils._judge import measured, offline, rehearsed, steps, views
from ansible_collections.kubeupgrade.storage.plugins.module_utils._judge.model import (
    NEEDS_MIGRATION,
    OBJECTS_NONE,
    OBJECTS_PRESENT,
    OBJECTS_UNCOUNTED,
    REMOVED,
    SAFE,
    UNKNOWN,
    UNSAFE,
    VERDICT_ORDER,
    Judgement,
    JudgeOptions,
    ResourceVerdict,
    Target,
    worst_of,
)
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe import discovery
from ansible_collections.kubeupgrade.storage.plugins.module_utils._remember import records


def resource_verdicts(observation, release, crd_manifests, profiles) -> List[dict]:
    """Each resource's verdict (``resource``, ``verdict``) against a target release and CRD manifests: what
    ``storage_migration`` with ``select: from_check`` migrates, given to it as data by its module."""
    judgement = judge(observation, Target(release=release, crd_manifests=crd_manifests), profiles)
    return [{"resource": v.resource, "verdict": v.verdict} for v in judgement.resources]


def judge(observation, target: Target, profiles, options: JudgeOptions = None) -> Judgement:
    """Judge every persisted resource (or ``options.resources``) of ``observation`` against ``target``."""
    options = options or JudgeOptions()
    results, skipped = [], []
    names = offline.names(options.audit, observation) if options.offline and not options.resources else None
    for name in names if names is not None else _names(observation, options.resources):
        result = _judge_one(name, observation, target, profiles, options)
        if isinstance(result, dict):
            skipped.append(result)
        else:
            results.append(result)
    findings = (findings_mod.endpoint_findings(observation, offline=options.offline)
                + findings_mod.group_findings(observation, options.audit)
                + findings_mod.identity_findings(observation, options.now) + rehearsed.findings(options.rehearsal)
                + findings_mod.nothing_judged(observation, options.audit, options.offline))
    rehearsed.apply(results, options.rehearsal, options.resources)
    _apply_accept(results, findings, options)
    held = _hold_in_check_mode(results, options)
    counts = {verdict: 0 for verdict in VERDICT_ORDER}
    for result in results:
        counts[result.verdict] += 1
    worst = worst_of([r.verdict for r in results] + [f.verdict for f in findings])
    return Judgement(resources=results, counts=counts, worst=worst, findings=findings,
                     not_stored=findings_mod.not_stored(observation), skipped=skipped,
                     notes=list(options.notes or []) + _held_note(held), offline=options.offline,
                     held=[{"subject": r.resource, "scope": "resource", "verdict": r.verdict, "reason": r.reason,
                            "next_step": r.next_step} for r in held])


def _names(observation, resources) -> List[str]:
    if resources:
        return list(dict.fromkeys(resources))
    names = set(observation.crds) | set(observation.storage_states)
    for endpoint in observation.endpoints:
        if endpoint.reachable:
            names |= set(endpoint.resources)
    return sorted(names)


def _is_custom(name, observation, target) -> bool:
    return name in observation.crds or name in (target.crd_manifests or {})


def _stale(name, view, observation) -> bool:
    """A record of a resource that no running apiserver serves and the target does not have either."""
    return not view.exists and name in observation.storage_states and records.unserved(name, observation)


def _judge_one(name, observation, target, profiles, options):
    ev = ev_mod.gather(name, observation, target, profiles, options)
    is_custom = _is_custom(name, observation, target)
    view = views.custom_view(name, observation, target) if is_custom else views.builtin_view(name, target, profiles)
    if _stale(name, view, observation):
        return {"resource": name, "reason": f"no running apiserver serves {name} and the target has no such resource: "
                                            "its StorageState record is left from an earlier release",
                "next_step": f"remove the record (kubeupgrade.storage.storage_state with state=absent and resources: "
                             f"[{name}]); if objects of it may remain in etcd, kubeupgrade.storage.storage_version_audit "
                             "lists them"}
    case = steps.Case(name, is_custom, view, ev, observation, profiles)
    decision = steps.decide(case)
    count = (options.counts or {}).get(name)
    if options.counts is not None:
        decision = _with_count(decision, count, case)
    verdict, reason, next_step, objects = decision
    running = steps.running_can_read(name, is_custom, view, observation, profiles)
    if running is False and verdict in (SAFE, NEEDS_MIGRATION) and objects != OBJECTS_NONE:
        next_step += (f" Note: the apiservers running now cannot read {view.storage_version}, which the target writes: "
                      f"once the target has written objects, rolling back needs a migration back first.")
    # a resource the target may not serve at all: every stored object is at stake, whatever its version
    behind_flags = verdict == UNKNOWN and case.behind_flags is not None  # not an unknown of another cause
    readable = set() if behind_flags else _readable(view)
    named, named_note = measured.object_names(options.audit, name, readable) if verdict != SAFE else ([], "")
    if named:
        reason += f" In etcd: {', '.join(named)}" + (f" {named_note}." if named_note else ".")
    elif named_note:
        reason += f" {named_note}"
    return ResourceVerdict(
        resource=name, verdict=verdict, reason=reason, next_step=next_step, objects_named=named,
        measured=options.audit.get("measured_at") if measured.persisted_hashes(options.audit, name) is not None else None,
        persisted_hashes=ev.persisted_hashes, persisted_versions=discovery.sort_versions(ev.persisted_versions),
        current_versions=ev.current_versions, target_storage_version=view.storage_version,
        target_decodable_versions=discovery.sort_versions(view.readable), conservative=view.conservative,
        running_can_read_target=running, unresolved_hashes=ev.unresolved, target_source=view.source, objects=objects,
        served_behind_flags=behind_flags)


def _readable(view):
    """What the target reads of a resource, for naming objects: nothing when it has no types for it; None (name
    nothing) when the target does not describe the resource at all."""
    if view.exists:
        return view.readable
    return set() if view.absent_verdict == REMOVED else None


def _with_count(decision, count, case):
    """Judge objects, not types: what a count of stored objects changes about a verdict."""
    verdict, reason, next_step, _objects = decision
    if count is None or count.present is None:
        if verdict == SAFE or count is None:
            return verdict, reason, next_step, None if count is None else OBJECTS_UNCOUNTED
        why = count.detail or "the count failed"
        return (verdict, f"{reason} Whether any object is stored could not be established: {why}.",
                f"{next_step} To establish whether objects exist, read etcd with kubeupgrade.storage.storage_version_audit.",
                OBJECTS_UNCOUNTED)
    if count.undecodable:
        return steps.undecodable(case, count)
    if count.present:
        return verdict, reason, next_step, OBJECTS_PRESENT
    if verdict == SAFE:
        return verdict, reason, next_step, OBJECTS_NONE
    prune = steps.stored_versions_to_prune(case)
    if prune:
        return (NEEDS_MIGRATION, f"no object of {case.name} is stored, but the CRD's status.storedVersions still lists "
                f"{', '.join(prune)}, which {case.view.source} drops: the apiserver rejects that manifest until "
                "storedVersions is pruned.", steps.migrate_step(case.name, True, next(iter(case.ev.current_set), None), prune),
                OBJECTS_NONE)
    where = f" (counted through apiserver {count.endpoint})" if count.endpoint else ""
    return (SAFE, f"nothing stored: no object of {case.name} exists{where}, so nothing can be undecodable "
            f"(with objects it would be {verdict}: {reason})", "none: nothing to do for this resource.", OBJECTS_NONE)


def needs_count(verdict: ResourceVerdict) -> bool:
    """Verdicts that ask the operator to act, and unknown ones: a count of stored objects may settle them."""
    return verdict.verdict in (NEEDS_MIGRATION, UNKNOWN, REMOVED, UNSAFE)


def _hold_in_check_mode(results, options) -> List[ResourceVerdict]:
    """Unblock the verdicts ``options.held_in_check_mode`` names (check mode after the play's skipped changes): the
    last word on what blocks, after ``accept``; returns them."""
    held = [r for r in results if r.blocking and r.verdict in options.held_in_check_mode]
    for verdict in held:
        verdict.blocking = False
    return held


def _held_note(held) -> List[str]:
    if not held:
        return []
    shown = ", ".join(f"{r.resource} ({r.verdict})" for r in held[:5]) + (f" and {len(held) - 5} more" if len(held) > 5 else "")
    return [f"Check mode: {len(held)} verdict(s) that would block are reported, not blocking, since check mode skips "
            f"the migration and record writes that would settle them: {shown}."]


def _apply_accept(results, findings, options) -> None:
    accept = options.accept or {}
    fail_on = set(options.fail_on)
    for item in list(results) + list(findings):
        subject = item.resource if isinstance(item, ResourceVerdict) else item.subject
        if item.verdict == SAFE:
            continue
        if not isinstance(item, ResourceVerdict) and item.scope == findings_mod.SCOPE_JUDGEMENT:
            item.blocking = item.verdict in fail_on  # nothing was judged: no accept lets that through
            continue
        if subject in accept:
            item.accepted = accept[subject]
        item.blocking = item.verdict in fail_on and not item.accepted
