# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What blocks a pre-flight besides a resource: an apiserver, or a group/version whose discovery failed.

Each is reported once, with its own reason and next step, instead of doubting every resource.
A failed group/version served by an aggregated APIService is not a storage concern at all: its
objects live in the aggregated server's own storage, not in this etcd.
"""

from __future__ import annotations

from datetime import datetime
from typing import List, Optional

from ansible_collections.kubeupgrade.storage.plugins.module_utils._http import diagnosis
from ansible_collections.kubeupgrade.storage.plugins.module_utils._judge.model import SAFE, UNKNOWN, Finding

SCOPE_JUDGEMENT = "judgement"  # a finding about the whole check: never accepted by name


def endpoint_findings(observation, offline: bool = False) -> List[Finding]:
    """One blocking finding per apiserver that could not be observed: agreement cannot be established without it.
    Offline, no apiserver at all is what was asked for (the audit is judged instead)."""
    if not observation.endpoints and not offline:
        return [Finding(subject="(no apiserver)", scope="apiserver", verdict=UNKNOWN,
                        reason="no apiserver was observed, so nothing about the cluster's storage is known.",
                        next_step="give the apiservers to check (endpoints, or the connection's host), then re-run.")]
    found = []
    for ep in observation.endpoints:
        if ep.reachable:
            continue
        step = diagnosis.step(ep.problem or diagnosis.of_status(ep.status), "it") + ", then re-run."
        found.append(Finding(
            subject=ep.endpoint, scope="apiserver", verdict=UNKNOWN,
            reason=f"{ep.error or f'apiserver {ep.endpoint} could not be read'}: without it, agreement on storage "
                   "versions cannot be established (it may write a version no other apiserver reports).",
            next_step=step))
    return found


def nothing_judged(observation, audit, offline: bool) -> List[Finding]:
    """No apiserver answered and no audit was given: nothing was judged, and accepting the unreachable apiservers
    must not make that pass (accepting one means "judge without it")."""
    if offline or audit is not None or not observation.endpoints or any(ep.reachable for ep in observation.endpoints):
        return []
    return [Finding(
        subject="(nothing judged)", scope=SCOPE_JUDGEMENT, verdict=UNKNOWN,
        reason="no apiserver answered and no etcd audit was given, so no resource was judged: accepting an unreachable "
               "apiserver lets the check judge without it, it does not make a check of nothing pass.",
        next_step="make an apiserver reachable, or judge from an etcd audit (audit: the registered result of "
                  "kubeupgrade.storage.storage_version_audit; with offline: true no apiserver is contacted), then re-run.")]


def _empty_in_etcd(audit, group: str) -> bool:
    """Whether a complete audit (no resources filter) found no object of any resource of ``group``."""
    if not audit or not group or audit.get("filtered_out") or not isinstance(audit.get("resources"), dict):
        return False
    return not any((entry or {}).get("group") == group and (entry or {}).get("objects") for entry in audit["resources"].values())


def group_findings(observation, audit=None) -> List[Finding]:
    """One finding per failed group/version that is not an aggregated API: its resources cannot be judged, unless a
    complete audit found nothing of the group stored (then it is reported, safe: nothing stored can be undecodable)."""
    aggregated = observation.aggregated_group_versions()
    found = []
    for gv, endpoints in sorted(observation.failed_group_versions().items()):
        if gv in aggregated:
            continue
        group = gv.rsplit("/", 1)[0] if "/" in gv else ""
        if _empty_in_etcd(audit, group):
            found.append(Finding(
                subject=gv, scope="group_version", verdict=SAFE,
                reason=f"discovery of {gv} failed on {', '.join(endpoints)}, but the audit of etcd at {audit.get('measured_at')} "
                       f"found no object of group {group} stored: nothing of it can be undecodable.",
                next_step=f"none for the upgrade; the failing discovery (an APIService for {gv} without a backend?) is "
                          "worth fixing on its own."))
            continue
        unsure = "" if observation.api_services_read else (
            " (the APIServices could not be read, so whether an aggregated server serves it is not known)")
        found.append(Finding(
            subject=gv, scope="group_version", verdict=UNKNOWN,
            reason=f"discovery of {gv} failed on {', '.join(endpoints)}{unsure}: the storage versions of its resources "
                   "cannot be established.",
            next_step=f"make /apis/{gv} answer on every apiserver (kubectl get --raw /apis/{gv}), or, if none of its "
                      f"resources is stored in this etcd, accept it by name (accept: {{\"{gv}\": \"<reason>\"}}); then "
                      "re-run."))
    return found


def not_stored(observation) -> List[dict]:
    """Aggregated group/versions, healthy or not: reported, never judged, migrated or blocking."""
    failed = observation.failed_group_versions()
    items = []
    for gv, service in sorted(observation.api_services.items()):
        if not service.aggregated:
            continue
        state = f"discovery failed on {', '.join(failed[gv])}" if gv in failed else "discovery answered"
        if service.available is False:
            state += f"; APIService not available ({service.message or 'no reason given'})"
        items.append({"group_version": gv, "api_service": service.name, "service": service.service,
                      "reason": f"served by the aggregated APIService {service.name} (service {service.service}): its "
                                f"objects are stored by that server, not in this etcd; not judged ({state})."})
    return items


NOT_OBSERVED_STEP = ("give every apiserver's own URL in endpoints (kubeupgrade_apiserver_url per host, never the load "
                     "balancer's); if an apiserver no longer exists, its Lease expires within an hour of its last renewal "
                     "(or delete it: kubectl -n kube-system delete lease <name>), then re-run.")


def identity_findings(observation, now: Optional[datetime] = None) -> List[Finding]:
    """Every apiserver the cluster lists must have been observed (``Observation.identity_gap``). Releases or clusters
    without the identity Leases (APIServerIdentity off) list none, and nothing can be compared."""
    reason = observation.not_observed_message(now)
    if not reason:
        return []
    return [Finding(subject="(apiservers not observed)", scope="apiserver", verdict=UNKNOWN, reason=reason,
                    next_step=NOT_OBSERVED_STEP)]
