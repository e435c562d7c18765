# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The pre-flight verdict: can the target binaries read every version the cluster may have persisted?

Per resource, the persisted versions are what its StorageState remembers (``Unknown`` when there is
no trusted record), plus the version every apiserver writes now, plus, for a custom resource, the
CRD's ``status.storedVersions``. The target can read a version when it has its types: for a release
profile ``decodable ∪ served ∪ storage``; for a StorageVersion object its ``decodableVersions``; for
a target CRD manifest its ``spec.versions``; for a target known only by live discovery just
``served ∪ storage`` (narrower than the truth, so such verdicts are marked conservative).

Verdicts, from best to worst (``VERDICT_ORDER``):

- ``safe``: every persisted version is readable by the target;
- ``needs_migration``: an older persisted version is not readable but the current storage version
  is, so rewriting every object first makes it safe;
- ``unknown``: something we cannot vouch for (``Unknown`` persisted, a hash that maps to no version,
  an apiserver we could not read); migrating (with every apiserver readable) resolves it;
- ``removed``: the target has no such resource; its objects would stay in etcd, unreachable;
- ``unsafe``: the target cannot read even the current storage version: no migration helps.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Dict, List, Optional

from ansible_collections.kubeupgrade.storage.plugins.module_utils import discovery, hashing, records
from ansible_collections.kubeupgrade.storage.plugins.module_utils.hashing import UNKNOWN as UNKNOWN_HASH
from ansible_collections.kubeupgrade.storage.plugins.module_utils.observation import ObservedResource
from ansible_collections.kubeupgrade.storage.plugins.module_utils.resources import GroupResource

SAFE = "safe"
NEEDS_MIGRATION = "needs_migration"
UNKNOWN = "unknown"
REMOVED = "removed"
UNSAFE = "unsafe"
VERDICT_ORDER = (SAFE, NEEDS_MIGRATION, UNKNOWN, REMOVED, UNSAFE)  # worst last


@dataclass
class Target:
    """What the binaries after the swap can read; give any combination (most precise source wins per resource)."""

    release: Optional[object] = None  # profiles.ReleaseProfile
    live: Optional[object] = None  # observation.EndpointObservation of an already-upgraded apiserver
    storage_versions: Optional[Dict[str, object]] = None  # name ("apps.deployments") -> ObservedStorageVersion
    crd_manifests: Optional[Dict[str, object]] = None  # CRD name -> ObservedCrd


@dataclass
class ResourceVerdict:
    resource: str
    verdict: str
    reason: str
    next_step: str
    persisted_hashes: List[str] = field(default_factory=list)
    persisted_versions: List[str] = field(default_factory=list)  # the hashes and storedVersions that map to a version
    current_versions: Dict[str, Optional[str]] = field(default_factory=dict)  # endpoint -> version (None = unknown)
    target_storage_version: Optional[str] = None
    target_decodable_versions: List[str] = field(default_factory=list)
    conservative: bool = False
    running_can_read_target: Optional[bool] = None  # None = cannot tell
    unresolved_hashes: List[str] = field(default_factory=list)  # persisted hashes that map to no version (incl. Unknown)
    target_source: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Judgement:
    resources: List[ResourceVerdict] = field(default_factory=list)
    counts: Dict[str, int] = field(default_factory=dict)
    worst: str = SAFE

    def to_dict(self) -> dict:
        return {"resources": [r.to_dict() for r in self.resources], "counts": dict(self.counts), "worst": self.worst}


def worst_of(verdicts) -> str:
    return max(verdicts, key=VERDICT_ORDER.index, default=SAFE)


def storage_version_object_name(name: str) -> str:
    """``deployments.apps`` -> ``apps.deployments``; ``pods`` -> ``core.pods`` (StorageVersion naming)."""
    gr = GroupResource.parse(name)
    return f"{gr.group or 'core'}.{gr.resource}"


def _strip_group(group_version: str) -> str:
    return (group_version or "").rpartition("/")[2]


@dataclass
class _TargetView:
    """One resource as the target sees it."""

    exists: bool
    source: str
    readable: set = field(default_factory=set)
    storage_version: Optional[str] = None
    conservative: bool = False
    absent_verdict: str = UNKNOWN
    absent_reason: str = ""


def _custom_view(name, observation, target) -> _TargetView:
    manifests = target.crd_manifests or {}
    if name in manifests:
        crd, source = manifests[name], "the target CRD manifest"
    elif name in observation.crds:
        crd, source = observation.crds[name], "the CRD in the cluster (the target binary does not change CRDs)"
    else:
        return _TargetView(False, "", absent_reason=f"no CustomResourceDefinition {name} found to judge against")
    return _TargetView(True, source, set(crd.version_names), crd.storage_version)


def _builtin_view(name, target, profiles) -> _TargetView:
    sv = (target.storage_versions or {}).get(storage_version_object_name(name))
    if sv is not None and sv.entries:
        readable = None
        for entry in sv.entries:
            versions = {_strip_group(v) for v in entry.decodable_versions} | {_strip_group(entry.encoding_version)}
            readable = versions if readable is None else readable & versions  # every target apiserver must read it
        encodings = {_strip_group(e.encoding_version) for e in sv.entries}
        storage = _strip_group(sv.common_encoding_version) if sv.common_encoding_version else (encodings.pop() if len(encodings) == 1 else None)
        return _TargetView(True, f"StorageVersion {sv.name} decodableVersions", readable, storage)
    if target.release is not None:
        release = target.release
        entry = release.get(name)
        source = f"the Kubernetes {release.release} release profile ({release.source})"
        if entry is not None:
            return _TargetView(True, source, entry.readable_versions(), entry.storage_version)
        if name in release.removed:
            return _TargetView(False, source, absent_verdict=REMOVED,
                               absent_reason=f"Kubernetes {release.release} no longer has {name}")
        if profiles is not None and profiles.known(name):
            having = [r for r in profiles.releases() if profiles.get(r).get(name) is not None]
            return _TargetView(False, source, absent_verdict=UNSAFE,
                               absent_reason=f"Kubernetes {release.release} has no types for {name} "
                                             f"(release data has it in {', '.join(having)}): it cannot read these objects")
        return _TargetView(False, source, absent_reason=f"the release data has no entry for {name} in any release")
    live = target.live
    if live is not None:
        source = f"live discovery of {live.endpoint} (served and storage versions only)"
        if not live.complete:
            return _TargetView(False, source, conservative=True,
                               absent_reason=f"the target apiserver {live.endpoint} could not be read completely ({live.error or 'discovery failed'})")
        observed = live.resources.get(name)
        if observed is None:
            return _TargetView(False, source, conservative=True, absent_verdict=REMOVED,
                               absent_reason=f"the target apiserver {live.endpoint} does not serve {name}")
        readable = set(observed.served_versions) | ({observed.storage_version} if observed.storage_version else set())
        return _TargetView(True, source, readable, observed.storage_version, conservative=True)
    return _TargetView(False, "", absent_reason="no target was given (a release, a live apiserver, StorageVersion objects or CRD manifests)")


def _running_readable(name, endpoint, observed, profiles) -> Optional[set]:
    """What one running apiserver can read: its release profile, else what it serves and stores."""
    if profiles is not None and endpoint.release and endpoint.release in profiles:
        entry = profiles.get(endpoint.release).get(name)
        if entry is not None:
            return entry.readable_versions()
    if observed is not None:
        return set(observed.served_versions) | ({observed.storage_version} if observed.storage_version else set())
    return None


def _running_can_read(name, is_custom, view, observation, profiles, readable_endpoints) -> Optional[bool]:
    """Rolling upgrades and rollbacks mix binaries: the old ones must read what the target writes."""
    if not view.exists or not view.storage_version:
        return None
    if is_custom:
        live = observation.crds.get(name)
        return None if live is None else view.storage_version in live.version_names
    answers = []
    for endpoint in readable_endpoints:
        readable = _running_readable(name, endpoint, endpoint.resources.get(name), profiles)
        if readable is None:
            return None
        answers.append(view.storage_version in readable)
    return all(answers) if answers else None


def _resource_stub(name, observation, profiles, target) -> ObservedResource:
    """An ObservedResource to hash candidates for, when no endpoint reports the resource."""
    gr = GroupResource.parse(name)
    crd = observation.crds.get(name) or (target.crd_manifests or {}).get(name)
    kind = crd.kind if crd else (profiles.kind_of(name) if profiles is not None else None) or ""
    return ObservedResource(name=name, group=gr.group, kind=kind, namespaced=False, storage_hash="")


def _lookup(hash_value, resource, profiles, observation, target) -> Optional[str]:
    if hash_value == resource.storage_hash and resource.storage_version:
        return resource.storage_version
    if not resource.kind:
        return None
    found = discovery.lookup_storage_version(hash_value, resource, profiles, observation.crds)
    if found is None and target.crd_manifests:
        found = discovery.lookup_storage_version(hash_value, resource, profiles, target.crd_manifests)
    live_crd = observation.crds.get(resource.name)
    if found is None and live_crd is not None:  # a version already dropped from spec.versions but still stored
        found = hashing.reverse_lookup(hash_value, live_crd.group, live_crd.kind, live_crd.stored_versions)
    return found


def _names(observation, resources) -> List[str]:
    if resources:
        return list(dict.fromkeys(resources))
    names = set(observation.crds) | set(observation.storage_states)
    for endpoint in observation.endpoints:
        if endpoint.reachable:
            names |= set(endpoint.resources)
    return sorted(names)


def judge(observation, target: Target, profiles, resources=None, record_max_age=None, now: Optional[datetime] = None) -> Judgement:
    """Judge every persisted resource (or ``resources``) of ``observation`` against ``target``."""
    now = now or datetime.now(timezone.utc)
    results = [_judge_one(name, observation, target, profiles, record_max_age, now) for name in _names(observation, resources)]
    counts = {verdict: 0 for verdict in VERDICT_ORDER}
    for result in results:
        counts[result.verdict] += 1
    worst = worst_of(r.verdict for r in results)
    if not observation.endpoints or not all(ep.complete for ep in observation.endpoints):
        worst = worst_of([worst, UNKNOWN])  # an apiserver we could not read may hold resources we never saw
    return Judgement(resources=results, counts=counts, worst=worst)


def _judge_one(name, observation, target, profiles, record_max_age, now) -> ResourceVerdict:
    is_custom = name in observation.crds or name in (target.crd_manifests or {})
    doubts = []  # reasons the answer can be at best unknown
    readable_endpoints = [ep for ep in observation.endpoints if ep.complete]
    for ep in observation.endpoints:
        if not ep.reachable:
            doubts.append(f"apiserver {ep.endpoint} could not be read ({ep.error or 'unreachable'})")
        elif not ep.complete:
            doubts.append(f"discovery of apiserver {ep.endpoint} failed for {', '.join(ep.failed_groups)}")
    if not observation.endpoints:
        doubts.append("no apiserver was observed")

    current_versions: Dict[str, Optional[str]] = {}
    current_hashes = []
    reporting = None
    for ep in observation.endpoints:
        observed = ep.resources.get(name) if ep.complete else None
        current_versions[ep.endpoint] = None
        if observed is None:
            if ep.complete and any(name in other.resources for other in readable_endpoints):
                doubts.append(f"apiserver {ep.endpoint} does not serve {name} while others do")
            continue
        reporting = reporting or observed
        if observed.hash_mismatch:
            doubts.append(f"apiserver {ep.endpoint} reports different storage hashes per served version "
                          f"({', '.join(f'{v}: {h}' for v, h in observed.hash_mismatch.items())})")
            continue
        if not observed.storage_hash:
            continue
        current_hashes.append(observed.storage_hash)
        current_versions[ep.endpoint] = _lookup(observed.storage_hash, observed, profiles, observation, target)
    if readable_endpoints and not current_hashes:
        doubts.append(f"no apiserver reports a storage hash for {name}")
    resource = reporting or _resource_stub(name, observation, profiles, target)

    record = observation.storage_states.get(name)
    if record is None:
        persisted_hashes = [UNKNOWN_HASH]
        doubts.append(f"no StorageState record for {name}: objects written before it was recorded may be in any version")
    elif record_max_age is not None and records.is_stale(record, now, record_max_age):
        persisted_hashes = [UNKNOWN_HASH]
        doubts.append(f"the StorageState record for {name} was last refreshed {record.last_heartbeat or 'never'}, "
                      f"more than {record_max_age}s ago: versions may have come and gone unseen")
    else:
        persisted_hashes = list(record.persisted_hashes) or [UNKNOWN_HASH]
        if UNKNOWN_HASH in persisted_hashes:
            doubts.append(f"the StorageState record for {name} lists Unknown: objects may be in any version")
    for value in current_hashes:
        if value not in persisted_hashes:
            persisted_hashes.append(value)

    persisted_versions = set()
    unresolved = []
    for value in persisted_hashes:
        version = None if value == UNKNOWN_HASH else _lookup(value, resource, profiles, observation, target)
        if version is None:
            unresolved.append(value)
            if value != UNKNOWN_HASH:
                doubts.append(f"storage hash {value} maps to no known version of {name}")
        else:
            persisted_versions.add(version)
    live_crd = observation.crds.get(name)
    if live_crd is not None:
        persisted_versions |= set(live_crd.stored_versions)
    current_set = {v for v in current_versions.values() if v}

    view = _custom_view(name, observation, target) if is_custom else _builtin_view(name, target, profiles)
    verdict, reason, next_step = _decide(name, is_custom, view, persisted_versions, current_set, doubts, live_crd)
    running = _running_can_read(name, is_custom, view, observation, profiles, readable_endpoints)
    if running is False and verdict in (SAFE, NEEDS_MIGRATION):
        next_step += (f" Note: the apiservers running now cannot read {view.storage_version}, which the target writes: "
                      f"once the target has written objects, rolling back needs a migration back first.")
    return ResourceVerdict(
        resource=name, verdict=verdict, reason=reason, next_step=next_step,
        persisted_hashes=persisted_hashes, persisted_versions=discovery.sort_versions(persisted_versions),
        current_versions=current_versions, target_storage_version=view.storage_version,
        target_decodable_versions=discovery.sort_versions(view.readable), conservative=view.conservative,
        running_can_read_target=running, unresolved_hashes=unresolved, target_source=view.source)


def _migrate_step(name, is_custom, current, extra_versions=None) -> str:
    step = f"migrate {name} first (rewrite every object in its current storage version {current or '(current)'}, "
    step += "e.g. with kubeupgrade.storage.storage_migration) while every apiserver agrees on it"
    if is_custom:
        step += f", then set the CRD's status.storedVersions to [{current}]"
        if extra_versions:
            step += f" before applying a manifest without {', '.join(extra_versions)}"
    return step + "; then re-run this check."


def _decide(name, is_custom, view, persisted_versions, current_set, doubts, live_crd):
    conservative_note = " (judged from live discovery only, which lists served versions, not every decodable one: " \
                        "the real target may read more)" if view.conservative else ""
    if not view.exists:
        if view.absent_verdict == REMOVED:
            return (REMOVED, f"{view.absent_reason}; its objects would stay in etcd but be unreachable through the API"
                    f"{conservative_note}.",
                    f"export the objects of {name} (kubectl get {name} -A -o yaml) and delete them before the upgrade, "
                    f"or choose a target that still has {name}.")
        if view.absent_verdict == UNSAFE:
            return (UNSAFE, f"{view.absent_reason}.",
                    f"do not switch to this target while {name} objects exist: delete or export them first, or choose a target that has {name}.")
        return (UNKNOWN, f"cannot judge {name}: {view.absent_reason}.",
                "give a target that describes this resource (target_release with a profile for it, or target_crds for a custom resource), then re-run.")
    readable = view.readable
    unreadable_current = sorted(current_set - readable)
    if unreadable_current:
        what = "the target CRD manifest" if is_custom and "manifest" in view.source else f"the target ({view.source})"
        if is_custom:
            step = (f"keep version {', '.join(unreadable_current)} in the target CRD manifest (it is the storage version every "
                    f"apiserver writes now); drop it only after migrating to another storage version.")
        else:
            step = (f"do not swap to this target: no migration helps, because {', '.join(unreadable_current)} is what the running "
                    f"apiservers write. Go through a release that reads both versions, or choose another target.")
        return (UNSAFE, f"{what} cannot decode {', '.join(unreadable_current)}, the current storage version of {name}"
                f"{conservative_note}.", step)
    if doubts:
        reason = f"{name} cannot be vouched for: " + "; ".join(dict.fromkeys(doubts)) + "."
        if any("could not be read" in d or "failed for" in d or "no apiserver was observed" in d for d in doubts):
            step = "make every apiserver endpoint reachable and readable (check the error above), then re-run this check."
        elif any("does not serve" in d or "different storage hashes" in d for d in doubts):
            step = "wait until every apiserver reports the same storage version (kubeupgrade.storage.storage_version_agreement), then re-run."
        else:
            current = next(iter(current_set)) if len(current_set) == 1 else None
            step = _migrate_step(name, is_custom, current)
        return UNKNOWN, reason, step
    unreadable = sorted(persisted_versions - readable, key=discovery.version_sort_key)
    if unreadable:
        current = next(iter(current_set)) if len(current_set) == 1 else None
        return (NEEDS_MIGRATION,
                f"objects of {name} may still be stored as {', '.join(unreadable)}, which {view.source} cannot decode; "
                f"the current storage version {current or ''} is readable by it{conservative_note}.",
                _migrate_step(name, is_custom, current, unreadable if is_custom else None))
    return (SAFE, f"every persisted version of {name} ({', '.join(discovery.sort_versions(persisted_versions))}) is readable by {view.source}.",
            "none: nothing to do for this resource.")


def _cell(value) -> str:
    if value is None:
        return "?"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict):
        distinct = sorted({v or "?" for v in value.values()})
        return ", ".join(distinct) if distinct else "-"
    if isinstance(value, (list, tuple, set)):
        return ", ".join(value) if value else "-"
    return str(value).replace("|", "\\|").replace("\n", " ")


def render_markdown(judgement: Judgement) -> str:
    """A table an operator can read in a ticket or a PR comment, worst verdicts first."""
    lines = [
        f"**Storage pre-flight: {judgement.worst}** ("
        + ", ".join(f"{v}: {judgement.counts.get(v, 0)}" for v in VERDICT_ORDER) + ")",
        "",
        "| resource | verdict | persisted | current | target storage | target reads | running reads target | reason | next step |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for item in _worst_first(judgement.resources):
        persisted = list(item.persisted_versions) + [h if h == UNKNOWN_HASH else f"{h} (unmapped)" for h in item.unresolved_hashes]
        verdict = item.verdict + (" (conservative)" if item.conservative else "")
        lines.append("| " + " | ".join(_cell(v) for v in (
            item.resource, verdict, persisted, item.current_versions, item.target_storage_version,
            item.target_decodable_versions, item.running_can_read_target, item.reason, item.next_step)) + " |")
    return "\n".join(lines) + "\n"


def _worst_first(items):
    return sorted(items, key=lambda r: (-VERDICT_ORDER.index(r.verdict), r.resource))


def render_text(judgement: Judgement) -> str:
    """A short summary for a module's ``msg``: counts, then one line per resource that is not safe."""
    summary = ", ".join(f"{judgement.counts.get(v, 0)} {v}" for v in VERDICT_ORDER if judgement.counts.get(v))
    lines = [f"storage pre-flight: {judgement.worst} ({summary or 'no resources'})"]
    for item in _worst_first(judgement.resources):
        if item.verdict != SAFE:
            lines.append(f"- {item.resource}: {item.verdict}: {item.reason} Next: {item.next_step}")
    return "\n".join(lines)
