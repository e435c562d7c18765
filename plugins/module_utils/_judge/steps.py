# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One resource's verdict, reason and next step, from its evidence and the target's view.

Every next step is one that clears the verdict when followed: migrate (then the record says
[current]), wait for agreement, delete the objects, or choose another target.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import List, Optional

from ansible_collections.kubeupgrade.storage.plugins.module_utils._judge import views
from ansible_collections.kubeupgrade.storage.plugins.module_utils._judge.evidence import (
    DOUBT_AGREEMENT,
    DOUBT_DISCOVERY,
    DOUBT_RECORD,
    Evidence,
)
from ansible_collections.kubeupgrade.storage.plugins.module_utils._judge.model import (
    NEEDS_MIGRATION,
    OBJECTS_UNDECODABLE,
    REMOVED,
    SAFE,
    UNKNOWN,
    UNSAFE,
)
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe import discovery
from ansible_collections.kubeupgrade.storage.plugins.module_utils.profiles import release_sort_key
from ansible_collections.kubeupgrade.storage.plugins.module_utils.resources import GroupResource


@dataclass
class Case:
    """Everything one decision reads."""

    name: str
    is_custom: bool
    view: views.TargetView
    ev: Evidence
    observation: object
    profiles: object
    # Set by ``behind_flags`` when it turned a safe verdict unknown (why the target may not serve the resource): the
    # engine names every stored object then, and a rehearsal that serves the resource settles it.
    behind_flags: Optional[str] = None


def migrate_step(name, is_custom, current, extra_versions=None) -> str:
    step = f"migrate {name} first (rewrite every object in its current storage version {current or '(current)'}, "
    step += "e.g. with kubeupgrade.storage.storage_migration) while every apiserver agrees on it"
    if is_custom:
        step += f", then set the CRD's status.storedVersions to [{current}]"
        if extra_versions:
            step += f" before applying a manifest without {', '.join(extra_versions)}"
    return step + "; then re-run this check."


def _delete_step(name, versions, readers: Optional[str] = None) -> str:
    step = (f"the objects of {name} stored as {', '.join(versions)} cannot be read through any running apiserver: delete "
            "their etcd keys (find them with kubeupgrade.storage.storage_version_audit, then etcdctl del /registry/...)")
    if readers:
        step += f", or roll back to {readers}, migrate {name} there, and upgrade again"
    return step + "; then re-run this check."


def _readers_of(name, versions, profiles) -> Optional[str]:
    """The releases that can read every one of ``versions`` of ``name`` (for a roll-back-and-migrate step)."""
    if profiles is None:
        return None
    able = [r for r in profiles.releases()
            if profiles.get(r).get(name) is not None and set(versions) <= profiles.get(r).get(name).readable_versions()]
    return f"Kubernetes {able[-1]} (the newest release that reads {', '.join(versions)})" if able else None


def _running_unreadable(case: Case, versions) -> List[str]:
    """Persisted versions that no running apiserver can read either: no migration through the API reaches them.

    Built-ins only: a CRD's spec.versions must list every storedVersion (the apiserver rejects any other
    update), so a custom resource's persisted versions are always readable by the running apiservers.
    """
    if case.is_custom:
        return []
    readers = [views.running_readable(case.name, ep, case.profiles)
               for ep in case.observation.endpoints if ep.reachable and ep.covers(case.ev.group)]
    readers = [r for r in readers if r is not None]
    if not readers:
        return []
    return [v for v in versions if not any(v in readable for readable in readers)]


def stored_versions_to_prune(case: Case) -> List[str]:
    """Versions in the live CRD's storedVersions that a target manifest drops (the apiserver would reject it)."""
    live = case.observation.crds.get(case.name)
    if not case.is_custom or live is None or not case.view.exists:
        return []
    return discovery.sort_versions(set(live.stored_versions) - case.view.readable)


def _absent(case: Case):
    view, name = case.view, case.name
    conservative = _conservative_note(view)
    if view.absent_verdict == REMOVED:
        return (REMOVED, f"{view.absent_reason}; objects of it would stay in etcd, unreadable through the API"
                f"{conservative}.",
                f"export the objects of {name} (kubectl get {name} -A -o yaml) and delete them before switching, "
                f"or choose a target that has {name}; then re-run this check.")
    return (UNKNOWN, f"cannot judge {name}: {view.absent_reason}.",
            "give a target that describes this resource (target_release with a profile for it, or target_crds for a "
            "custom resource), then re-run.")


def _conservative_note(view) -> str:
    if not view.conservative:
        return ""
    return (" (judged from live discovery only, which lists served versions, not every decodable one: the real target "
            "may read more)")


def _bridge(name, versions, target_readable, profiles) -> Optional[str]:
    """A release that reads ``versions`` and writes a version the target reads: upgrading through it, migrating there,
    carries the objects over. None when no release does (an alpha version dropped without a successor it could read)."""
    if profiles is None:
        return None
    for release in profiles.releases():
        entry = profiles.get(release).get(name)
        if entry is not None and set(versions) <= entry.readable_versions() and entry.storage_version in target_readable:
            return release
    return None


def is_rollback(case: Case) -> bool:
    """Whether the target release is older than a release an apiserver runs: going back past what it wrote."""
    target = case.view.release
    running = [ep.release for ep in getattr(case.observation, "endpoints", []) if getattr(ep, "release", None)]
    return bool(target and running) and release_sort_key(target) < max(release_sort_key(r) for r in running)


_SNAPSHOT_STEP = ("for a rollback past objects the newer release wrote, the way back is the etcd snapshot taken before the "
                  "upgrade (kubeupgrade.storage.storage_snapshot, which upgrade.yml takes, returns its restore_steps)")


def _through_or_recreate(case: Case, unreadable_current) -> str:
    """A next step that can be followed: through a bridging release when one exists, else re-create the objects; for a
    rollback (the newer release's own objects among them, which it re-creates while it runs), the pre-upgrade snapshot."""
    name, shown = case.name, ", ".join(unreadable_current)
    if is_rollback(case):
        return (f"{_SNAPSHOT_STEP}; or keep the release that writes {shown}. Deleting the objects does not help while an "
                "apiserver of that release runs: it re-creates the ones it maintains (the bootstrap FlowSchemas, for example).")
    bridge = _bridge(name, unreadable_current, case.view.readable, case.profiles)
    if bridge:
        return (f"do not swap to this target yet: upgrade through Kubernetes {bridge} first (it reads {shown} and writes "
                f"{case.profiles.get(bridge).get(name).storage_version}, which the target reads), migrate {name} there, "
                "then upgrade to this target; or choose another target.")
    return (f"no release reads {shown} and writes a version the target reads, so no migration carries the objects over: "
            f"while the running apiservers still read them, export the objects of {name} (kubectl get {name} -A -o yaml), "
            f"delete them through the API (kubectl delete {name} --all -A), upgrade, then re-create them in a version the "
            "target serves; or choose another target. Then re-run this check.")


def _unsafe_current(case: Case, unreadable_current):
    view, name = case.view, case.name
    what = "the target CRD manifest" if case.is_custom and "manifest" in view.source else f"the target ({view.source})"
    if case.is_custom:
        step = (f"keep version {', '.join(unreadable_current)} in the target CRD manifest (it is the storage version every "
                f"apiserver writes now); drop it only after migrating to another storage version.")
    else:
        step = _through_or_recreate(case, unreadable_current)
    return (UNSAFE, f"{what} cannot decode {', '.join(unreadable_current)}, the current storage version of {name}"
            f"{_conservative_note(view)}.", step)


def _specific(case: Case):
    """The finding about versions (worst first), or None: unsafe current, unreadable by anyone, needs migration."""
    readable = case.view.readable
    unreadable_current = sorted(case.ev.writers_set - readable)
    if unreadable_current:
        return _unsafe_current(case, unreadable_current)
    unreadable = sorted(case.ev.persisted_versions - readable, key=discovery.version_sort_key)
    if not unreadable:
        return None
    lost = _running_unreadable(case, unreadable)
    if lost:
        running = sorted({ep.release or ep.endpoint for ep in case.observation.endpoints if ep.reachable})
        return (UNSAFE, f"objects of {case.name} may be stored as {', '.join(lost)}, which neither {case.view.source} nor "
                f"the running apiservers ({', '.join(running)}) can decode: no migration through the apiserver can "
                "rewrite them.", _delete_step(case.name, lost, _readers_of(case.name, lost, case.profiles)))
    migrating_to = sorted(case.ev.current_set - readable)
    if migrating_to:  # a migration through the running apiservers rewrites into a version the target cannot read
        return _unsafe_current(case, migrating_to)
    if _writers_unknown(case):
        return _stored_unreadable_offline(case, unreadable)
    current = next(iter(case.ev.current_set)) if len(case.ev.current_set) == 1 else None
    return (NEEDS_MIGRATION,
            f"objects of {case.name} may still be stored as {', '.join(unreadable)}, which {case.view.source} cannot "
            f"decode; the current storage version {current or ''} is readable by it{_conservative_note(case.view)}.",
            migrate_step(case.name, case.is_custom, current, unreadable if case.is_custom else None))


def _writers_unknown(case: Case) -> bool:
    """Judged offline without running releases: no apiserver, live or from release data, says what is written now."""
    return not case.ev.current_set and not any(ep.reachable and ep.release for ep in case.observation.endpoints)


def _stored_unreadable_offline(case: Case, unreadable):
    """Unknown, not needs_migration: without the releases that write now, no verdict may promise that a migration
    fixes what the target cannot read (in a real mixed 1.28/1.32 store no running apiserver could rewrite them)."""
    shown = ", ".join(unreadable)
    return (UNKNOWN,
            f"objects of {case.name} are stored as {shown}, which {case.view.source} cannot decode; judged offline "
            "without running_releases, what the running apiservers read and write is not known, so whether a migration "
            "through them rewrites these objects into a version the target reads is not established.",
            f"judge again with running_releases (the releases the apiservers run) or online to learn whether a migration "
            f"helps; then migrate {case.name} through apiservers that read {shown} and write a version the target reads "
            "(kubeupgrade.storage.storage_migration), audit again and re-run this check.")


def _doubt_step(case: Case) -> str:
    doubts = case.ev.doubts
    if case.ev.garbage:
        return _garbage_step(case)
    if doubts.get(DOUBT_DISCOVERY):
        return (f"make the discovery of {GroupResource.parse(case.name).group or 'the core group'} answer on every "
                "apiserver (the failure is named above), then re-run this check.")
    if doubts.get(DOUBT_AGREEMENT):
        return ("wait until every apiserver reports the same storage version "
                "(kubeupgrade.storage.storage_version_agreement), then re-run.")
    current = next(iter(case.ev.current_set)) if len(case.ev.current_set) == 1 else None
    return migrate_step(case.name, case.is_custom, current)


def _doubt_text(case: Case) -> str:
    texts = [t for kind in (DOUBT_DISCOVERY, DOUBT_AGREEMENT, DOUBT_RECORD) for t in case.ev.doubts.get(kind, [])]
    return "; ".join(texts)


_PRERELEASE = re.compile(r"^v\d+(alpha|beta)\d+$")


def served_behind_flags(case: Case) -> Optional[str]:
    """Why the target release may not serve ``case.name`` at all, else None: its release data lists only alpha or beta
    versions for it, which a kube-apiserver serves only when --runtime-config and --feature-gates enable them (alpha
    always off by default, new beta APIs off since Kubernetes 1.24, KEP-3136), and no running apiserver serves any of
    them now, so the cluster's flags, carried over to the target, cannot be assumed to enable them. Objects of a
    resource the target does not serve are unreachable after the switch (404 on every version)."""
    release = case.view.release
    if case.is_custom or release is None or not case.view.exists or case.profiles is None:
        return None
    entry = case.profiles.get(release).get(case.name) if release in case.profiles else None
    served = list(entry.served) if entry is not None else []
    reachable = [ep for ep in case.observation.endpoints if ep.reachable] if case.observation is not None else []
    if not served or not reachable or not all(_PRERELEASE.match(version) for version in served):
        return None  # a GA version is served at defaults; offline (no apiserver answered) the flags cannot be compared
    now = {version for ep in reachable if ep.resources.get(case.name) is not None
           for version in ep.resources[case.name].served_versions}
    if now & set(served):
        return None
    running = ", ".join(discovery.sort_versions(now)) if now else "none of its versions"
    return (f"Kubernetes {release} serves {case.name} only in {', '.join(discovery.sort_versions(served))} (alpha or beta: "
            f"served only when the apiserver's --runtime-config and --feature-gates enable it), and the apiservers "
            f"running now serve {running}, so nothing shows this cluster's flags enable it on the target; if they do not, "
            "its objects are unreachable after the switch (404 on every version)")


def behind_flags(case: Case, decision):
    """A verdict the release data would give as safe for a resource the target may not serve at all
    (``served_behind_flags``) is unknown instead - settled by a rehearsal with the target binary and the cluster's
    flags that serves it and reads every object, or by a count of nothing stored. (A verdict that already asks for a
    migration blocks as it is; once migrated, it is judged here.)"""
    verdict, reason, step, objects = decision
    why = served_behind_flags(case) if verdict == SAFE else None
    if why is None:
        return decision
    case.behind_flags = why
    return (UNKNOWN, f"{why}. The release data alone would say: {reason}",
            f"rehearse with the target binary and the cluster's flags (kubeupgrade_rehearsal; storage_rehearsal) to measure "
            f"whether it serves {case.name}; or, if the target's flags do not enable it, export the objects (kubectl get "
            f"{case.name} -A -o yaml) and delete them before the switch; then re-run this check.", objects)


def decide(case: Case):
    """``(verdict, reason, next_step, objects)`` before any count of stored objects; values no apiserver decodes
    (measured) are said in the step, whatever else the step asks for: a migration never rewrites them."""
    verdict, reason, step, objects = behind_flags(case, _decide(case))
    if case.ev.garbage and "no apiserver can decode" not in step:
        step = f"{step} Also: {_garbage_step(case)}"
    return verdict, reason, step, objects


def _garbage_step(case: Case) -> str:
    return (f"no apiserver can decode {', '.join(case.ev.garbage)} of {case.name} and a migration cannot rewrite them: look "
            "at each key (etcdctl get <key>); if it is garbage, take an etcd snapshot (kubeupgrade.storage."
            "storage_snapshot) and delete the key through etcd, then audit again and re-run this check.")


def _decide(case: Case):
    if not case.view.exists:
        return (*_absent(case), None)
    specific = _specific(case)
    doubts = _doubt_text(case)
    if specific is None:
        if doubts:
            return UNKNOWN, f"{case.name} cannot be vouched for: {doubts}.", _doubt_step(case), None
        versions = ", ".join(discovery.sort_versions(case.ev.persisted_versions))
        return SAFE, f"every persisted version of {case.name} ({versions}) is readable by {case.view.source}.", \
            "none: nothing to do for this resource.", None
    verdict, reason, step = specific
    if not doubts:
        return verdict, reason, step, None
    only_records = not (case.ev.doubts.get(DOUBT_DISCOVERY) or case.ev.doubts.get(DOUBT_AGREEMENT))
    if verdict == NEEDS_MIGRATION and not only_records:
        return UNKNOWN, f"{reason} Also: {doubts}.", _doubt_step(case), None
    # The specific finding stays visible even when the record holds Unknown: migrating resolves both.
    return verdict, f"{reason} Also: {doubts}.", step, None


def undecodable(case: Case, count):
    """A LIST answered 500 "no kind is registered": objects are stored that the running apiserver cannot read."""
    unreadable = sorted(case.ev.persisted_versions - case.view.readable, key=discovery.version_sort_key) or ["an old version"]
    return (UNSAFE, f"objects of {case.name} are stored in a version that apiserver {count.endpoint} cannot decode "
            f"(its LIST answered: {count.detail}): they cannot be read, rewritten or deleted through the API.",
            _delete_step(case.name, unreadable, _readers_of(case.name, unreadable, case.profiles)), OBJECTS_UNDECODABLE)


def running_can_read(name, is_custom, view, observation, profiles) -> Optional[bool]:
    """Rolling upgrades and rollbacks mix binaries: the old ones must read what the target writes."""
    if not view.exists or not view.storage_version:
        return None
    if is_custom:
        live = observation.crds.get(name)
        return None if live is None else view.storage_version in live.version_names
    group = GroupResource.parse(name).group
    answers = []
    for endpoint in observation.endpoints:
        if not endpoint.reachable or not endpoint.covers(group):
            continue
        readable = views.running_readable(name, endpoint, profiles)
        if readable is None:
            return None
        answers.append(view.storage_version in readable)
    return all(answers) if answers else None
