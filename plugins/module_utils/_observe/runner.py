# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What ``storage_version_info`` calls: observe every apiserver once and report it, with the agreement between them;
a resource name no apiserver serves is an error, never an empty report."""

from __future__ import annotations

from typing import Optional

from ansible_collections.kubeupgrade.storage.plugins.module_utils import resources as names
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe import apiserver_io, expectation, roll
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.apiserver_io import INCLUDE_CHOICES
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.wait import observation_agreement, resource_table
from ansible_collections.kubeupgrade.storage.plugins.module_utils._validate import release_hint
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ConfigurationError, KubeUpgradeError, ProfileError
from ansible_collections.kubeupgrade.storage.plugins.module_utils.profiles import load_profiles, normalize_release

__all__ = ["EMPTY_RESULT", "INCLUDE_CHOICES", "endpoint_result", "info_result", "run"]

EMPTY_RESULT = {"endpoints": [], "resources": {}, "agreed": False, "unreachable_endpoints": [], "unready": [], "crds": {},
                "storage_states": {}, "storage_state_crd_installed": False, "storage_versions": {},
                "storage_version_api_served": False, "identity_leases": [], "as_expected": False, "expectation_msg": ""}


def endpoint_result(ep) -> dict:
    return {
        "endpoint": ep.endpoint, "reachable": ep.reachable, "error": ep.error, "status": ep.status,
        "git_version": ep.git_version, "release": ep.release, "emulated_release": ep.emulated_release,
        "min_compatibility_release": ep.min_compatibility_release, "ready": ep.ready, "failed_groups": list(ep.failed_groups),
        "resources": {name: {"hash": r.storage_hash, "storage_version": r.storage_version,
                             "served_versions": list(r.served_versions), **({"hash_mismatch": r.hash_mismatch} if r.hash_mismatch else {})}
                      for name, r in sorted(ep.resources.items())},
    }


def info_result(observation, resources, include) -> dict:
    """The module result from an Observation (the module's format, not the observation's)."""
    data = observation.to_dict()
    agreement = observation_agreement(observation, resources)
    unreachable = [e.endpoint for e in observation.endpoints if not e.reachable] + list(agreement.incomplete)
    return {
        "changed": False,
        "endpoints": [endpoint_result(ep) for ep in observation.endpoints],
        "resources": resource_table(observation, resources or None),
        "agreed": bool(agreement.agreed) and not unreachable,
        "unreachable_endpoints": unreachable,
        "unready": [e.endpoint for e in observation.endpoints if e.reachable and not e.ready],
        "crds": data["crds"] if "crds" in include else {},
        "storage_states": data["storage_states"],
        "storage_state_crd_installed": observation.storage_state_crd_installed,
        "storage_versions": data["storage_versions"],
        "storage_version_api_served": observation.storage_version_api_served,
        "identity_leases": data["identity_leases"],
    }


def expected_release(value, profiles, option="expect_release") -> Optional[str]:
    """``expect_release`` as a minor release (``v1.33.2`` -> ``1.33``), checked before any request: a release no
    profile knows (an unquoted 1.30 that YAML read as 1.3) would never match and make a wait run all its retries."""
    if not value:
        return None
    try:
        release = normalize_release(value)
    except ProfileError as error:
        raise ConfigurationError(f"{option}: {error}") from None
    hint = release_hint(value)
    if hint and release not in profiles.releases():
        raise ConfigurationError(f"{option}: {value!r} is no Kubernetes release the collection knows (known: "
                                 f"{', '.join(profiles.releases())}). {hint}")
    return release


def run(module) -> dict:
    """Entry point of the module: ``module`` is the KubeUpgradeModule."""
    params = module.params
    profiles = load_profiles()
    release, emulated, two_step_to = _releases(params, profiles)
    discover = _discovery(params)
    observation = apiserver_io.observer_for(module, profiles).observe(params["resources"] or None, params["include"], discover)
    result = info_result(observation, params["resources"], params["include"]) if discover else _identity_result(observation)
    result["as_expected"], result["expectation_msg"] = expectation.expected(
        observation.endpoints, ready=params.get("expect_ready", False), release=release, emulated=emulated)
    if two_step_to and any(e.reachable for e in observation.endpoints):
        result["two_step"] = roll.two_step(observation.endpoints, two_step_to)
    if not any(e.reachable for e in observation.endpoints):
        raise KubeUpgradeError("no apiserver could be observed: " + "; ".join(e.error or e.endpoint for e in observation.endpoints)
                               + ". Fix the connection (the errors above name the cause) and run again.",
                               result=result)
    message = names.unserved_message("resources", params["resources"] or [], observation, profiles)
    if message:
        # A failed task is never as expected: a play's failed_when on the negation must not turn it into a success.
        result["as_expected"], result["expectation_msg"] = False, message
        raise ConfigurationError(message, result=result)
    result["msg"] = _said(module, observation, result, discovered=discover)
    return result


def _discovery(params: dict) -> bool:
    """The ``discovery`` option, checked before any request: naming resources needs discovery."""
    if params.get("discovery", True):
        return True
    if params["resources"]:
        raise ConfigurationError("resources: naming resources needs discovery; with discovery false only each apiserver's "
                                 "identity and readiness are observed. Remove resources, or set discovery to true.")
    return False


def _identity_result(observation) -> dict:
    """The result of an observation without discovery: the endpoints, nothing compared (never "they agree")."""
    return {**info_result(observation, (), ()), "agreed": False}


def _releases(params: dict, profiles) -> tuple:
    """(expect_release, expect_emulated_release, two_step_to), each checked against the release data."""
    release = expected_release(params.get("expect_release"), profiles)
    emulated = expected_release(params.get("expect_emulated_release"), profiles, "expect_emulated_release")
    two_step_to = expected_release(params.get("two_step_to"), profiles, "two_step_to")
    if emulated and not release:
        raise ConfigurationError("expect_emulated_release: give expect_release too - the binary's release, which runs "
                                 "at the emulated one")
    return release, emulated, two_step_to


def _said(module, observation, result: dict, discovered: bool = True) -> str:
    """The task's message; each apiserver not fully observed, and each observation warning, as a warning."""
    bad = [e for e in observation.endpoints if not e.complete]
    for ep in bad:
        module.warn(ep.error or f"apiserver {ep.endpoint} was not fully observed")
    for warning in observation.warnings:
        module.warn(warning)
    reachable = len(observation.endpoints) - len(bad)
    if not discovered:
        return (f"{reachable}/{len(observation.endpoints)} apiserver(s) reached; identity and readiness only "
                "(discovery false: no storage version observed or compared)")
    return (f"{reachable}/{len(observation.endpoints)} apiserver(s) observed, {len(result['resources'])} resource(s); "
            + ("all agree" if result["agreed"] else "they do NOT all agree"))
