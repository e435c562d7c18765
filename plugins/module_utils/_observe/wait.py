# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Wait until every apiserver reports the same storage hashes (the I/O half of "agree").

A migration run while apiservers disagree is undone by the ones still writing the old version (the
HA section of the sig-api-machinery enhancement proposal "Automated Storage Version Migration with
Storage Version Hash", 2019), so the gate polls every endpoint until ``polls`` consecutive observations
agree, and otherwise fails naming, per disagreeing resource, what each endpoint reports.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Dict, List, Tuple

from ansible_collections.kubeupgrade.storage.plugins.module_utils import resources as names
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http import diagnosis
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.poll import PollTimeout, poll_until
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.agreement import Agreement, AgreementTracker, compare, storage_versions
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ConfigurationError, DisagreementError


def compare_endpoints(endpoints, resources=None, require_ready=True, ignore=()) -> Agreement:
    return compare(endpoints, resources=resources, require_ready=require_ready, ignore=ignore)


def observation_agreement(observation, resources=None) -> Agreement:
    """Whether one observation agrees (readiness aside), as ``storage_version_info`` and the check report it:
    aggregated group/versions are not stored here and do not count."""
    return compare_endpoints(observation.endpoints, resources=resources or None, require_ready=False,
                             ignore=observation.aggregated_group_versions())


def disagreeing_names(agreement) -> List[str]:
    """Resource names from ``agreement.disagreeing`` whatever its shape (names, dicts or a mapping)."""
    value = agreement.disagreeing
    if isinstance(value, dict):
        return sorted(value)
    names = []
    for item in value or []:
        names.append(item.get("resource") if isinstance(item, dict) else getattr(item, "resource", item))
    return names


def resource_table(observation, resources=None) -> Dict[str, dict]:
    """Per resource: the hash and decoded version each reachable endpoint reports, and whether they agree."""
    reachable = [e for e in observation.endpoints if e.reachable]
    names = set(resources) if resources else {n for e in reachable for n in e.resources}
    table = {}
    for name in sorted(names):
        hashes = {e.endpoint: e.resources[name].storage_hash for e in reachable if name in e.resources}
        versions = {e.endpoint: e.resources[name].storage_version for e in reachable if name in e.resources}
        complete = len(hashes) == len(observation.endpoints)
        table[name] = {"hashes": hashes, "storage_versions": versions,
                       "agreed": complete and len(set(hashes.values())) == 1 and "" not in hashes.values()}
    return table


def describe(agreement, observation=None) -> str:
    """Operator words: each disagreeing resource as ``endpoint: version (hash)``, then unready/unreachable."""
    versions = {}
    if observation is not None:
        for ep in observation.endpoints:
            for name, res in ep.resources.items():
                versions[(name, ep.endpoint)] = res.storage_version
    parts = []
    for name in disagreeing_names(agreement):
        per = (agreement.hashes or {}).get(name, {})
        shown = ", ".join(f"{endpoint}: {versions.get((name, endpoint)) or 'unknown version'} ({value or 'no hash'})"
                          for endpoint, value in sorted(per.items()))
        missing = (getattr(agreement, "missing", None) or {}).get(name)
        if missing:
            shown += ("; " if shown else "") + f"not served by {', '.join(missing)}"
        parts.append(f"{name}: {{{shown}}}")
    if agreement.unreachable:
        errors = {ep.endpoint: ep.error for ep in observation.endpoints} if observation is not None else {}
        parts.append("cannot establish agreement without " + "; ".join(
            errors.get(url) or f"apiserver {url} (unreachable)" for url in agreement.unreachable))
    if getattr(agreement, "incomplete", None):
        parts.append(f"discovery incomplete on: {', '.join(agreement.incomplete)}")
    if agreement.unready:
        parts.append(f"not ready: {', '.join(agreement.unready)}")
    return "; ".join(parts) or "all endpoints agree"


@dataclass
class AgreementWait:
    """How long agreement must hold (consecutive polls), how often to look, how long to wait, and whether
    every apiserver must also be ready."""

    polls: int = 2
    interval: float = 5.0
    timeout: float = 300.0
    require_ready: bool = True
    # Group/versions whose failed discovery the operator accepted (they store nothing in this etcd): ignored like
    # aggregated ones.
    accepted: tuple = ()


def wait_for_agreement(observer, resources, wait: AgreementWait, clock=time.monotonic, on_poll=None):
    """Poll every endpoint (an ``Observer``) until ``wait.polls`` consecutive observations agree; return
    ``(agreement, polls_observed)``. Raises DisagreementError at ``wait.timeout`` with the last disagreement
    in operator words, or ConfigurationError at once for names no apiserver serves."""
    tracker = AgreementTracker(wait.polls)
    seen = []

    def fetch():
        # The first poll also reads the identity Leases: agreement among fewer apiservers than the cluster lists (one
        # URL for two, a load balancer) says nothing about the ones not observed.
        observation = observer.observe(resources, include=() if seen else ("leases",))
        if not seen:
            _refuse_unknown_names(observation, resources, getattr(observer, "profiles", None))
            _refuse_partial(observation, wait)
        agreement = compare_endpoints(observation.endpoints, resources=resources, require_ready=wait.require_ready,
                                      ignore=observation.aggregated_group_versions() | set(wait.accepted))
        seen.append(agreement)
        if on_poll is not None:
            on_poll(len(seen), agreement, observation)
        return agreement, observation

    try:
        agreement, _observation = poll_until(fetch, lambda value: tracker.update(value[0]), wait.timeout, wait.interval,
                                             clock, observer.tuning.sleep)
    except PollTimeout as timeout:
        agreement, observation = timeout.last
        ignore = observation.aggregated_group_versions() | set(wait.accepted)
        raise DisagreementError(
            f"{_first_line(agreement, observation, ignore, wait.timeout)}\n"
            f"{headline(agreement)} within {wait.timeout:g}s ({timeout.polls} poll(s), {wait.polls} consecutive agreeing "
            f"poll(s) required): {describe(agreement, observation)}. {next_step(agreement, observation, ignore)}",
            details={"polls_observed": timeout.polls, "hashes": agreement.hashes,
                     "disagreeing": disagreeing_names(agreement), "unready": list(agreement.unready),
                     "unreachable": list(agreement.unreachable), "failed_group_versions": observation.failed_group_versions(ignore),
                     "waiting_helps": waiting_helps(agreement)},
            result=result_fields(agreement, observation, timeout.polls, agreed=False, ignore=ignore)) from None
    return agreement, len(seen)


def _refuse_partial(observation, wait: AgreementWait) -> None:
    """Fewer apiservers observed than the cluster lists: not agreed, and waiting does not help (a DisagreementError at
    once, with the result fields of a wait not met)."""
    reason = observation.not_observed_message()
    if not reason:
        return
    agreement = compare_endpoints(observation.endpoints, require_ready=wait.require_ready,
                                  ignore=observation.aggregated_group_versions() | set(wait.accepted))
    fields = result_fields(agreement, observation, 1, agreed=False)
    fields["waiting_helps"] = False
    raise DisagreementError(
        f"not every apiserver was observed ({observation.not_observed_summary()}): give every apiserver's own URL in "
        f"endpoints, never the load balancer's, then run again\nNot every apiserver was observed: {reason}",
        details={"polls_observed": 1, "waiting_helps": False, "not_observed": True}, result=fields)


def result_fields(agreement, observation, polls: int, agreed: bool, ignore=frozenset()) -> dict:
    """The agreement module's result after the last poll, the wait met (``agreed``) or not: the one place its fields
    are built. The last poll alone may agree while the wait was not met (too few consecutive agreeing polls)."""
    fields = last_agreement_fields(agreement)
    fields.update(agreed=agreed, polls_observed=polls, storage_versions=storage_versions(agreement, observation.endpoints),
                  endpoints=[ep.summary() for ep in observation.endpoints],
                  failed_group_versions={} if agreed else observation.failed_group_versions(ignore),
                  waiting_helps=True if agreed else waiting_helps(agreement))
    return fields


def waiting_helps(agreement) -> bool:
    """Whether waiting longer may bring agreement: apiservers that restart, roll or disagree can settle; a group/version
    whose discovery kept failing for a whole wait (an APIService without a backend) does not heal by itself."""
    return bool(agreement.disagreeing or agreement.missing or agreement.unready or agreement.unreachable
                or not agreement.incomplete)


def headline(agreement) -> str:
    """Say what failed: an apiserver or a discovery that cannot be read is not a disagreement about storage versions."""
    if (agreement.unreachable or agreement.incomplete) and not (agreement.disagreeing or agreement.missing):
        return "agreement could not be established"
    return "apiservers did not agree"


def _unreachable_step(agreement, observation) -> str:
    """An apiserver that refused the credentials is not one to make reachable: the fix each one needs (one place)."""
    problems = {ep.endpoint: ep.problem or diagnosis.of_status(ep.status) for ep in observation.endpoints}
    text = diagnosis.steps({url: problems.get(url) for url in agreement.unreachable})
    return text[:1].upper() + text[1:]


def _steps(agreement, observation, ignore) -> List[Tuple[str, str]]:
    """(in a few words, in full) for each step that clears what was seen: a failed discovery is not an upgrade to finish."""
    steps = []
    failed = observation.failed_group_versions(ignore)
    if failed:
        shown = ", ".join(sorted(failed))
        steps.append((f"make {sorted(failed)[0]} discoverable on every apiserver or accept it by name",
                      f"Make the discovery of {shown} answer on every apiserver (kubectl get --raw /apis/<group/version>), "
                      f"or, if it stores nothing in this etcd (an APIService without a backend), accept it by name "
                      f"(accept: {{\"{sorted(failed)[0]}\": \"<reason>\"}}; kubeupgrade_accept in the playbooks)"))
    if agreement.unreachable:
        steps.append(("make every apiserver answer (the fix for each is below)", _unreachable_step(agreement, observation)))
    if agreement.disagreeing or agreement.missing:
        releases = observation.releases()
        steps.append(("finish or roll back the disagreeing apiservers' upgrade",
                      "Finish or roll back the upgrade of the disagreeing apiservers") if len(releases) > 1 else
                     ("give the apiservers the same flags",
                      f"The apiservers all run {releases[0] if releases else 'one release'} yet disagree: give them the same "
                      "--runtime-config, --feature-gates and --storage-media-type"))
    elif agreement.unready:
        steps.append(("wait until every apiserver is ready", "Wait until every apiserver is ready (its /readyz lists the failing checks)"))
    return steps


def next_step(agreement, observation, ignore) -> str:
    """The steps in full."""
    steps = _steps(agreement, observation, ignore)
    return "; ".join(full for _short, full in steps) + ", then run again." if steps else "Run again."


def _first_line(agreement, observation, ignore, timeout: float) -> str:
    """What failed and what to do, in a few words: the first line of the failure (the detail follows it)."""
    names = disagreeing_names(agreement)
    subject = (f" on {names[0]}" + (f" and {len(names) - 1} more" if len(names) > 1 else "")) if names else ""
    steps = _steps(agreement, observation, ignore)
    return (f"{headline(agreement)} within {timeout:g}s{subject}: "
            + ("; ".join(short for short, _full in steps) + ", then run again" if steps else "run again"))


def _refuse_unknown_names(observation, resources, profiles=None) -> None:
    """A name no apiserver serves is a typo (or a record left from an earlier release), not a disagreement: the one
    rule and message of ``resources.unserved_names``, as storage_version_info and storage_state say it."""
    message = names.unserved_message("resources", resources or [], observation, profiles)
    if message:
        raise ConfigurationError(message)


def last_agreement_fields(agreement) -> dict:
    """The module-result fields of an Agreement."""
    return {
        "agreed": bool(agreement.agreed),
        "hashes": agreement.hashes,
        "disagreeing": [{"resource": n, "endpoints": (agreement.hashes or {}).get(n, {})} for n in disagreeing_names(agreement)],
        "unready": list(agreement.unready),
        "unreachable_endpoints": list(agreement.unreachable),
    }
