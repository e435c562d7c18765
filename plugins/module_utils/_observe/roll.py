# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where a rolling upgrade stands, established from the apiservers themselves, before a host is touched.

Ansible's batch semantics cannot be trusted to stop a roll: with ``serial: 1`` an unreachable host is
dropped and the next batch still runs, and ``rescue`` does not run for it (ansible/ansible#56265). So
before each host the cluster is asked: every apiserver earlier in the order must run the target and be
ready, and this host's apiserver tells whether it is done already (a resumed roll skips it, never
upgrades it twice). Every apiserver must also be reachable and ready before any host is touched; ``stop`` says
whether the roll stops here, ``msg`` why (the roles fail on it, nothing else).
"""

from __future__ import annotations

from typing import List, Optional

from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ConfigurationError
from ansible_collections.kubeupgrade.storage.plugins.module_utils.profiles import release_sort_key


def _done(endpoint, target_release: str, emulated: Optional[str] = None) -> bool:
    """At the target binary and, where the apiserver emulates a release (KEP-4330), at the target emulation too."""
    return bool(endpoint and endpoint.reachable and endpoint.ready and endpoint.at(target_release, emulated))


def _state(endpoint) -> str:
    if endpoint is None:
        return "not observed"
    if not endpoint.reachable:
        return "unreachable"
    return f"release {endpoint.release or '?'}{endpoint.emulating}, {'ready' if endpoint.ready else 'NOT ready'}"


def check_options(order: List[str], upgrading: Optional[str], target_release: Optional[str]) -> None:
    """The roll options, before any request: the host about to be touched is one of the roll, against a release."""
    if not upgrading:
        return
    if not target_release:
        raise ConfigurationError("upgrading needs target_release: a roll is judged against the release it upgrades to")
    order = [url.rstrip("/") for url in order or []]
    if upgrading.rstrip("/") not in order:
        raise ConfigurationError(f"upgrading: {upgrading} is not in upgrade_order ({', '.join(order) or 'empty'}): give "
                                 "the endpoints of every host of the roll, in the order they are upgraded")


def position(endpoints, order: List[str], upgrading: str, target, check_mode: bool = False) -> dict:
    """``{endpoint, release, emulated_release, ready, done, pending_before, unready, stop, msg}`` for the apiserver ``upgrading`` in
    ``order``, ``endpoints`` being every apiserver observed. The roll stops (``stop``) when an apiserver is unreachable or
    not ready (``unready``), or a host before this one is not on the target and ready (``pending_before``) - except
    in check mode, which upgrades no host, so the hosts before this one cannot be on the target there. ``target``: the
    release, or the target's release profile, whose ``emulated`` release (step 1 of a two-step upgrade) a host must
    run at too."""
    target_release, emulated, goal = ((target.release, target.emulated, target.label) if hasattr(target, "emulated")
                                      else (target, None, target))
    check_options(order, upgrading, target_release)
    order = [url.rstrip("/") for url in order or []]
    upgrading = upgrading.rstrip("/")
    by_url = {ep.endpoint.rstrip("/"): ep for ep in endpoints}
    missing = [url for url in order if url not in by_url]
    if missing:
        raise ConfigurationError(f"upgrade_order names {', '.join(missing)}, which are not among the endpoints observed: "
                                 "give every apiserver of the roll in endpoints too")
    before = order[:order.index(upgrading)]
    pending = [url for url in before if not _done(by_url[url], target_release, emulated)]
    unready = [ep.endpoint for ep in endpoints if not (ep.reachable and ep.ready)]
    this = by_url[upgrading]
    done = _done(this, target_release, emulated)
    if unready:
        msg = (f"not touching {upgrading}: not every apiserver is reachable and ready ("
               + "; ".join(f"{ep.endpoint}: {_state(ep)}" for ep in endpoints if ep.endpoint in unready)
               + "). Fix the control plane first.")
    elif pending and check_mode:
        msg = (f"{upgrading} ({_state(this)}): {len(pending)} host(s) before it are not on {goal}, as expected in "
               "check mode, which upgrades no host: the roll goes on.")
    elif pending:
        msg = (f"not touching {upgrading}: the hosts before it in the roll are not all on {goal} and ready ("
               + "; ".join(f"{url}: {_state(by_url[url])}" for url in pending)
               + "). A host was skipped (unreachable, or its upgrade failed): fix it and run the playbook again; hosts "
               f"already on {goal} are skipped.")
    elif done:
        msg = f"{upgrading} already runs {goal} and is ready: not upgraded again."
    else:
        msg = f"{upgrading} ({_state(this)}) is next: every host before it runs {goal}."
    # Only an older release it emulates: a binary at its own release reports that release as emulated too (1.35+).
    emulating = this.emulated_release if this.emulated_release != this.release else None
    return {"endpoint": upgrading, "release": this.release, "emulated_release": emulating, "ready": this.ready, "done": done,
            "pending_before": pending, "unready": unready, "stop": bool(unready) or (bool(pending) and not check_mode),
            "msg": msg}


def two_step(endpoints, target_release: str) -> dict:
    """Which step of a two-step upgrade to ``target_release`` (compatibility versions, KEP-4330) this run makes, from
    the apiservers that answered: ``{step, emulated_release, current_release, msg}``.

    Step 1 swaps the binaries at the current release's APIs (``emulated_release``: the release the apiservers not on
    the target binary run, or that those on it emulate); step 2 moves the emulation to the target, once every
    apiserver runs the target binary; step 0: every apiserver runs the target at its own release, nothing to do. A
    plane that mixes the target at its own APIs with older apiservers is a one-step roll in progress: refused."""
    answered = [ep for ep in endpoints if ep.reachable and ep.release]
    if not answered:
        raise ConfigurationError("upgrade_strategy two_step: no apiserver answered, so which step to make cannot be "
                                 "established; fix the connection and run again")
    serving = sorted({ep.emulated_release or ep.release for ep in answered}, key=release_sort_key)
    states = "; ".join(f"{ep.endpoint}: release {ep.release}{ep.emulating}" for ep in answered)
    if all(ep.at(target_release) for ep in answered):
        return {"step": 0, "emulated_release": None, "current_release": target_release,
                "msg": f"every apiserver runs {target_release} at its own release: the two-step upgrade is done ({states})."}
    older = [release for release in serving if release != target_release]
    if len(older) > 1:
        raise ConfigurationError(f"upgrade_strategy two_step: the apiservers serve different releases ({states}); bring "
                                 "them to one release first")
    current = older[0]
    if all(ep.release == target_release for ep in answered):
        return {"step": 2, "emulated_release": None, "current_release": current,
                "msg": f"step 2 of 2: every apiserver runs the {target_release} binary (emulating {current} until its host "
                       f"is done); each host moves to {target_release}'s own APIs and storage versions, then the "
                       "migrations run."}
    if target_release in serving:
        raise ConfigurationError(
            f"upgrade_strategy two_step: some apiservers already run {target_release} at its own release and others not "
            f"its binary yet ({states}): this is a one-step roll in progress. Finish it with upgrade_strategy one_step, "
            f"or bring those apiservers back to emulating {current}.")
    return {"step": 1, "emulated_release": current, "current_release": current,
            "msg": f"step 1 of 2: each host gets the {target_release} binary at --emulated-version={current}, which "
                   f"keeps {current}'s APIs and storage versions (the binary rollback stays open); run again for step 2."}
