# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The pre-flight as a module runs it: validate, observe, judge, count what is not safe, judge again, report.

Counting is the only extra cost, and only for resources whose verdict asks for action: one
metadata-only LIST with ``limit=1`` each, so that a verdict about types becomes a verdict about
objects that exist.

Offline (``offline: true``, or no apiserver answered while an ``audit`` was given) nothing is
observed: the judgement rests on the audit, its CRDs and release data (``offline.py``), every count
is the audit's, and the result says so (``offline``, ``notes``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ansible_collections.kubeupgrade.storage.plugins.module_utils import emulation
from ansible_collections.kubeupgrade.storage.plugins.module_utils import resources as names
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http import diagnosis
from ansible_collections.kubeupgrade.storage.plugins.module_utils._judge import decisions, measured, offline, rehearsed, report, timeline
from ansible_collections.kubeupgrade.storage.plugins.module_utils._judge.engine import judge, needs_count
from ansible_collections.kubeupgrade.storage.plugins.module_utils._judge.model import (
    CHECK_MODE_REPORTED,
    NEEDS_MIGRATION,
    REMOVED,
    SAFE,
    UNKNOWN,
    UNSAFE,
    VERDICT_ORDER,
    JudgeOptions,
    Target,
)
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe import apiserver_io as observe_mod
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe import roll
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.model import Observation
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.target_crds import load_target_crds
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.wait import observation_agreement, resource_table
from ansible_collections.kubeupgrade.storage.plugins.module_utils._remember import storage_state_io
from ansible_collections.kubeupgrade.storage.plugins.module_utils._validate import check_accept
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ConfigurationError
from ansible_collections.kubeupgrade.storage.plugins.module_utils.profiles import load_profiles

VERDICT_CHOICES = [NEEDS_MIGRATION, UNSAFE, UNKNOWN, REMOVED, SAFE]  # as documented
DEFAULT_FAIL_ON = [v for v in VERDICT_CHOICES if v != SAFE]  # every verdict not established safe
# Check mode migrates nothing and writes no record, so a resource verdict those writes would settle is reported, not
# blocking: a dry run of a play whose gates follow its migration shows the whole run instead of stopping on what the
# migration fixes. Everything else (unsafe, removed, an apiserver or group/version not read) blocks as it would.
CLUSTER_READS = ("crds", "storage_states", "storage_versions", "leases")


def validate(params) -> None:
    """Every option checked before any request."""
    roll.check_options(params.get("upgrade_order") or [], params.get("upgrading"), params.get("target_release"))
    if not (params.get("target_release") or params.get("target_endpoint") or params.get("target_crds")
            or rehearsed.measured(params.get("rehearsal")) or params.get("target_running_release")):
        raise ConfigurationError("Nothing to check against: give target_release (for example \"1.34\", quoted), "
                                 "target_endpoint, target_crds and/or rehearsal.")
    rehearsed.validate(params.get("rehearsal"), params.get("target_release"))
    if params.get("upgrade_strategy") == "two_step" and params.get("offline"):
        raise ConfigurationError("upgrade_strategy two_step is decided from the apiservers (which step they are at); "
                                 "offline, give target_emulated_release instead.")
    if (params.get("target_emulated_release") or params.get("target_min_compatibility_release")) and not params.get("target_release"):
        raise ConfigurationError("target_emulated_release and target_min_compatibility_release describe how the binary of "
                                 "target_release runs: give target_release too (for example \"1.36\" emulating \"1.35\").")
    if params.get("record_max_age") is not None and params["record_max_age"] < 0:
        raise ConfigurationError(f"record_max_age must be 0 or more seconds, got {params['record_max_age']}.")
    measured.validate(params.get("audit"))
    timeline.check(params.get("timeline"))
    offline.validate(params)
    check_accept(params.get("accept"))


def _live_target(module, profiles, resources):
    """Observe the already-upgraded apiserver; it must answer, or there is no target to judge against."""
    client = module.client().for_endpoint(module.params["target_endpoint"], option="target_endpoint")
    observation = observe_mod.observe([client], profiles, resources=resources, include=(), cluster_client=module.client())
    live = observation.endpoints[0]
    if not live.reachable:
        raise ConfigurationError(f"target_endpoint: {live.error}. The live target must answer to be used; fix it, or "
                                 "judge against target_release instead.", details={"status": live.status})
    if live.failed_groups:
        module.warn(f"target_endpoint: {live.error}")
    return live


def _check_names(params, observation, profiles, manifests) -> None:
    known = names.known_names(observation, manifests)
    missing = names.unknown(params.get("resources") or [], known, profiles)
    if missing:
        raise ConfigurationError(names.describe_unknown("resources", missing))


def _unjudged_accepts(accept, judgement) -> Optional[str]:
    """A warning for accepted subjects this check did not judge. Not an error: one run's accepts are given to
    every gate in it, and a subject one gate judges (a group/version seen only mid-roll) may be absent from
    another; an accept that matches nothing lets nothing through, so the gate stays closed."""
    judged = {r.resource for r in judgement.resources} | {f.subject for f in judgement.findings}
    judged |= {s["resource"] for s in judgement.skipped} | {n["group_version"] for n in judgement.not_stored}
    missing = {subject: names.closest(subject, judged) for subject in accept if subject not in judged}
    if not missing:
        return None
    shown = ", ".join(f"{s!r}" + (f" (did you mean {' or '.join(c)}?)" if c else "") for s, c in missing.items())
    return f"accept names {shown}, which this check did not judge: nothing was accepted for them."


def _observe(module, options: JudgeOptions, profiles):
    return observe_mod.observer_for(module, profiles).observe(options.resources, CLUSTER_READS)


def judge_observed(module, observation, judging: tuple, count: bool = True):
    """Judge ``observation`` (``judging``: options, target, profiles); count the objects of what is not safe,
    and judge again with the counts."""
    options, target, profiles = judging
    first = judge(observation, target, profiles, options)
    pending = [r.resource for r in first.resources if needs_count(r)]
    if not count or not pending:
        return first
    options.counts = measured.counts(options.audit, pending) if options.audit is not None else {}
    uncounted = [name for name in pending if name not in options.counts]
    if uncounted and not options.offline:
        options.counts.update(observe_mod.count_objects(module.endpoint_clients(), observation, uncounted))
    return judge(observation, target, profiles, options)


@dataclass
class _Inputs:
    """What the check judges against, read from the options before any request."""

    profiles: object
    options: JudgeOptions
    release: object  # the target's profile (None: no target_release and no rehearsal)
    release_name: Optional[str]
    manifests: Optional[dict]
    running: object
    live: object


def _inputs(module) -> _Inputs:
    params = module.params
    profiles = load_profiles(profiles_file=params["profiles_file"], profiles=params["profiles"])
    # A rehearsal says which release it is: its release data judges what the rehearsal does not read.
    rehearsal = rehearsed.measured(params.get("rehearsal"))
    release_name = params["target_release"] or rehearsed.release_of(rehearsal)
    release = profiles.get(release_name) if release_name else None  # an unknown release is named before any request
    if release is not None:
        release = emulation.profile_at(profiles, release.release, params.get("target_emulated_release"),
                                       params.get("target_min_compatibility_release"))
    resources = params["resources"] or None
    options = JudgeOptions(resources=resources, record_max_age=params["record_max_age"],
                           accept=dict(params.get("accept") or {}), fail_on=tuple(params["fail_on"]),
                           audit=params.get("audit"), judged_before=params.get("judged_before"),
                           rehearsal=rehearsal, notes=rehearsed.notes(params.get("rehearsal")) or None)
    return _Inputs(profiles, options, release, release_name,
                   manifests=load_target_crds(params["target_crds"]) if params["target_crds"] else None,
                   running=offline.running_releases(params.get("running_releases"), profiles),
                   live=_live_target(module, profiles, resources) if params["target_endpoint"] else None)


def _observations(module, inputs: _Inputs) -> tuple:
    """(what the apiservers said, None offline; what is judged). Accepting an unreachable apiserver with an audit means
    "judge without it": from the audit, never "pass"."""
    options = inputs.options
    if module.params.get("offline"):
        return None, _offline(options, inputs.profiles, inputs.running)
    observation = _observe(module, options, inputs.profiles)
    if options.audit is not None and observation.endpoints and not any(ep.reachable for ep in observation.endpoints):
        return observation, _offline(options, inputs.profiles, inputs.running, unreachable=observation.endpoints)
    return observation, observation


def run(module) -> dict:
    params = module.params
    validate(params)
    inputs = _inputs(module)
    options, profiles = inputs.options, inputs.profiles
    observed, observation = _observations(module, inputs)
    release, plan = _release_judged(params, profiles, inputs.release, observed)
    refreshed = None
    if params.get("refresh_records") and not options.offline:  # from the audit's measurement when one is given
        refreshed, observation = storage_state_io.refresh_before_use(
            module, observation, options.resources, reobserve=lambda: _observe(module, options, profiles),
            audit=options.audit)
    target = Target(release=release, live=inputs.live, crd_manifests=inputs.manifests)
    held = module.check_mode and params.get("check_mode_after_changes")
    options.held_in_check_mode = CHECK_MODE_REPORTED if held else ()
    judgement = judge_observed(module, observation, (options, target, profiles), count=params.get("count_objects", True))
    # In check mode only after earlier changes of the play: this task's own record refresh settles nothing a real run
    # would not block on (a new record says Unknown), so a dry run of a gate fails when the gate would.
    would_block = judgement.held if held else None
    if options.resources:
        _check_names(params, observation, profiles, inputs.manifests)
    seen = observed if options.offline else observation  # what the apiservers said (None: none was asked)
    _warn(module, judgement, seen)
    result = _result(module, judgement, seen, inputs, (release, plan))
    if would_block is not None:
        result["would_block"] = would_block
    if refreshed is not None:
        result["records_refreshed"] = refreshed
        result["changed"] = refreshed["changed"]
    return result


def _result(module, judgement, seen, inputs: _Inputs, judged: tuple) -> dict:
    """The module's result: the judgement, then what it says about the migration, the releases and the roll."""
    params, options = module.params, inputs.options
    release, plan = judged
    result = result_of(judgement, seen, title=_title(params, release.label if release else inputs.release_name),
                       resources=options.resources)
    if plan is not None:
        result["two_step"] = plan
    if release is not None and release.emulated:
        result["target_emulation"] = {"release": release.release, "emulated_release": release.emulated,
                                      "min_compatibility_release": release.min_compatibility}
    result["migration"] = decisions.migration_before_roll(
        result["verdict"], result["releases"], options.audit is not None, bool(params["target_crds"]),
        not_observed=seen.not_observed_message(options.now) if seen is not None else "")
    result.update(_releases_around(options, inputs.running, seen, release))
    if params.get("upgrading"):
        result["roll"] = roll.position(seen.endpoints, params.get("upgrade_order") or [], params["upgrading"], release,
                                       check_mode=module.check_mode)
    steps = timeline.check(params.get("timeline"))
    if steps:
        result["timeline"] = steps + [timeline.step(result, _title(params, release.label if release else inputs.release_name))]
        result["timeline_lines"] = timeline.rows(result["timeline"])
        result["report_markdown"] += timeline.markdown(result["timeline"])
    return result


def _release_judged(params, profiles, release, observed):
    """The target's profile once the apiservers were observed, and the two-step plan (None without
    upgrade_strategy two_step): the running release where target_running_release asks for it; with two_step, the
    target binary at the step this run makes (step 1: emulating the release the apiservers run now)."""
    endpoints = observed.endpoints if observed else []
    if release is None and params.get("target_running_release"):
        release = profiles.get(decisions.require_running_release(endpoints))
    if params.get("upgrade_strategy") != "two_step" or release is None or params.get("target_emulated_release"):
        return release, None
    plan = roll.two_step(endpoints, release.release)
    return emulation.profile_at(profiles, release.release, plan["emulated_release"],
                                params.get("target_min_compatibility_release")), plan


def _releases_around(options, running, seen, release) -> dict:
    """Offline, the releases the audit was judged as running; live, the release a rollback from the target returns to."""
    if options.offline:
        return {"running_releases": running}
    if release is None:
        return {}
    return {"way_back_release": decisions.way_back(seen.endpoints if seen else [], release.release)}


def _warn(module, judgement, seen) -> None:
    """The warnings of a judgement: accepts it did not judge, each failed discovery, audit keys outside the layout."""
    params = module.params
    unjudged = _unjudged_accepts(dict(params.get("accept") or {}), judgement)
    if unjudged:
        module.warn(unjudged)
    for warning in (seen.warnings if seen else []):  # each failed discovery, named with its apiserver
        module.warn(warning)
    outside = (params.get("audit") or {}).get("outside_layout")
    if outside:  # the audit said it; a check judged from it says it again, where the operator looks
        shown = ", ".join((params["audit"].get("outside_layout_keys") or [])[:3])
        module.warn(f"the audit found {outside} key(s) outside the apiserver's key layout, judged for no resource"
                    + (f" (first: {shown})" if shown else "") + ": look at them with etcdctl get before the upgrade")


def _offline(options: JudgeOptions, profiles, running, unreachable=()):
    """Judge from the audit, its CRDs and release data; ``unreachable``: the apiservers that did not answer."""
    options.offline = True
    options.notes = offline.notes(options.audit, running, [ep.endpoint for ep in unreachable]) + list(options.notes or [])
    return offline.build_observation(options.audit, profiles, running, unreachable=unreachable)


def _title(params, release_name: Optional[str] = None) -> str:
    target = release_name or params.get("target_endpoint") or "the target CRD manifests"
    return f"Storage pre-flight for {target}"


def result_of(judgement, observation, title: Optional[str] = None, resources=None) -> dict:
    """The module's result. Offline, ``observation`` is what was observed live (None: nothing, with offline: true):
    no agreement, release or disagreement is reported that no apiserver said."""
    ordered = sorted(judgement.resources, key=lambda r: (-VERDICT_ORDER.index(r.verdict), r.resource))
    live = observation if observation is not None else Observation()
    blocking = judgement.blocking
    text = report.render_text(judgement)
    if blocking:
        text = headline(blocking, judgement) + "\n" + text  # the cause and the step first, where a failed task shows msg
    return {
        "changed": False,
        "resources": [r.to_dict() for r in ordered],
        "counts": dict(judgement.counts),
        "verdict": judgement.worst,
        "blocking": blocking,
        "accepted": judgement.accepted,
        "findings": [f.to_dict() for f in judgement.findings],
        "not_stored": list(judgement.not_stored),
        "skipped_resources": list(judgement.skipped),
        "report_markdown": report.render_markdown(judgement, title=title or ""),
        "report_text": report.render_table(judgement),
        "endpoints": [ep.summary() for ep in live.endpoints],
        "agreed": bool(live.endpoints) and not judgement.offline and bool(observation_agreement(live, resources).agreed),
        "releases": live.releases(),
        "unreachable_endpoints": [ep.endpoint for ep in live.endpoints if not ep.reachable],
        "unreachable_msg": unreachable_msg(live.endpoints),
        # Where the apiservers stand apart (expected mid-upgrade), decided as the agreement gate decides it.
        "disagreeing": [{"resource": name, "storage_versions": row["storage_versions"]}
                        for name, row in resource_table(live).items() if not row["agreed"]],
        "offline": judgement.offline,
        "notes": list(judgement.notes),
        "headline": headline(blocking, judgement),
        "msg": text,
    }


def unreachable_msg(endpoints) -> str:
    """Why apiservers could not be observed and each fix, the cause and the first fix on the first line; "" when
    every one was."""
    failed = [ep for ep in endpoints if not ep.reachable]
    if not failed:
        return ""
    problems = {ep.endpoint: ep.problem or diagnosis.of_status(ep.status, ep.error or "") for ep in failed}
    more = f" and {len(failed) - 1} more" if len(failed) > 1 else ""
    fixes = diagnosis.steps(problems)
    return (f"cannot observe {failed[0].endpoint}{more}: {diagnosis.first_step(problems)}, then run again\n"
            f"A pre-flight is only meaningful when every apiserver answers. {fixes[:1].upper() + fixes[1:]}.\n"
            + "\n".join(f"{ep.endpoint}: {ep.error or 'no answer'}" for ep in failed))


HEADLINE_NAMES = 64  # characters of names in the headline: with ansible-core's prefix, the error line stays under 200


def headline(blocking, judgement) -> str:
    """The cause first, on one short line: what blocks (the worst by name, and how many more) and what to do; the
    table follows (and the notes, such as a judgement offline)."""
    offline_ = "; judged offline from the etcd audit (see notes)" if getattr(judgement, "offline", False) else ""
    if not blocking:
        return f"pre-flight passes: {judgement.worst}, nothing blocks ({len(judgement.resources)} resource(s) judged){offline_}."
    worst_first = sorted(blocking, key=lambda b: -VERDICT_ORDER.index(b["verdict"]) if b["verdict"] in VERDICT_ORDER else 0)
    names = [f"{b['subject']} ({b['verdict']})" for b in worst_first]
    shown = names[:1]
    for name in names[1:5]:  # the worst by name while the line stays short
        if len(", ".join(shown + [name])) > HEADLINE_NAMES:
            break
        shown.append(name)
    more = f" and {len(names) - len(shown)} more" if len(names) > len(shown) else ""
    return f"pre-flight blocks on {', '.join(shown)}{more}: take each next step in the report, or accept by name."
