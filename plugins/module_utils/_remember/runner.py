# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What ``storage_state`` calls: check the options, observe the apiservers, then keep the records (``state:
present``, from the apiservers or an etcd audit) or remove them (``state: absent``)."""

from __future__ import annotations

from typing import Optional

from ansible_collections.kubeupgrade.storage.plugins.module_utils import resources as names
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http import paths
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe import apiserver_io
from ansible_collections.kubeupgrade.storage.plugins.module_utils._remember import records, storage_state_io
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ConfigurationError, KubeUpgradeError
from ansible_collections.kubeupgrade.storage.plugins.module_utils.profiles import load_profiles

EMPTY_RESULT = {"records": [], "crd_installed": False, "unreachable_endpoints": []}


def measurement(params: dict) -> Optional[records.Measurement]:
    """The ``audit`` option, checked before any request (None when not given)."""
    if params.get("audit") is None:
        return None
    if params["state"] == "absent":
        raise ConfigurationError("audit sets records (state=present); it cannot be used with state=absent.")
    return records.measurement_from_audit(params["audit"], option="audit")


def check_served(params: dict, observation, profiles) -> None:
    """``state: present`` keeps records of served resources: a name no apiserver serves (every one answered with
    complete discovery) is a typo or a resource gone, refused with the closest names before any write. The
    StorageState CRD's own resource, which this task installs, is not refused before it is installed."""
    wanted = [name for name in params["resources"] or []
              if not (params["install_crd"] and name == paths.STORAGE_STATE_CRD_NAME)]
    message = names.unserved_message("resources", wanted, observation, profiles)
    if message:
        raise ConfigurationError(message)


def remove(module, observation, cluster) -> dict:
    """state=absent: the named records, or every record nothing serves any more."""
    wanted = module.params["resources"]
    if not wanted:
        _require_complete(observation)
    existing = storage_state_io.read_records(cluster)
    wanted = wanted or sorted(name for name in existing if names.unserved(name, observation))
    changes = storage_state_io.remove_records(cluster, wanted, existing, module.check_mode)
    removed = [c for c in changes if c.action == storage_state_io.REMOVED]
    result = {
        "changed": bool(removed),
        "records": [c.to_dict() for c in changes],
        "crd_installed": False,
        "unreachable_endpoints": [e.endpoint for e in observation.endpoints if not e.reachable],
        "msg": _removed_message(removed, module.check_mode),
    }
    if module.diff_mode:
        result["diff"] = {"before": {c.name: c.before for c in removed}, "after": {c.name: None for c in removed}}
    return result


def _require_complete(observation) -> None:
    """The records no apiserver serves any more are told only from every apiserver fully observed."""
    incomplete = [e.endpoint for e in observation.endpoints if not e.complete]
    if incomplete:
        raise KubeUpgradeError("state=absent without resources removes the records of resources no apiserver serves, "
                               f"which cannot be told while {', '.join(incomplete)} is not fully observed: fix it, or "
                               "name the records in resources.")


def _removed_message(removed: list, check_mode: bool) -> str:
    names_said = f": {', '.join(c.name for c in removed)}" if removed else ""
    return ("would remove " if check_mode else "removed ") + f"{len(removed)} StorageState record(s){names_said}"


def run(module) -> dict:
    """Entry point of the module: ``module`` is the KubeUpgradeModule."""
    params = module.params
    if params["heartbeat_interval"] < 1:
        raise ConfigurationError(f"heartbeat_interval must be at least 1 second, got {params['heartbeat_interval']}.")
    measured = measurement(params)
    cluster = module.client()
    profiles = load_profiles()
    wanted = None if params["state"] == "absent" else params["resources"] or None

    def observe_now():
        return apiserver_io.observer_for(module, profiles).observe(wanted, include=("leases",) if params["state"] == "present" else ())

    observation = observe_now()
    if not any(e.reachable for e in observation.endpoints):
        raise KubeUpgradeError(
            "No apiserver could be observed, so no storage hash can be recorded: "
            + "; ".join(e.error or e.endpoint for e in observation.endpoints))
    if params["state"] == "absent":
        return remove(module, observation, cluster)
    unreachable = storage_state_io.unreachable_endpoints(observation)
    if unreachable:
        raise KubeUpgradeError(
            f"No StorageState record was written: {', '.join(unreachable)} did not answer, and a record set from part of "
            "the control plane could miss the storage versions the others write. Run again once every apiserver answers "
            "(or leave out the endpoints of apiservers that were removed from the control plane)",
            result={**EMPTY_RESULT, "unreachable_endpoints": unreachable})
    not_observed = observation.not_observed_message()
    if not_observed:
        raise KubeUpgradeError(f"No StorageState record was written: {not_observed} Give every apiserver's own URL in "
                               "endpoints, then run again", result=dict(EMPTY_RESULT))
    check_served(params, observation, profiles)
    request = storage_state_io.Refresh(params["resources"] or None, params["install_crd"], params["heartbeat_interval"],
                                       module.check_mode, measured)
    result, _observation = storage_state_io.refresh(cluster, observation, request, reobserve=observe_now, warn=module.warn)
    diff = result.pop("diff")
    if module.diff_mode:
        result["diff"] = diff
    return result
