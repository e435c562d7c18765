# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Judging with no live apiserver: what an etcd audit and release data stand in for.

Offline (``offline: true``, or no apiserver answered while an audit was given) the engine judges an
observation made of:

- the CustomResourceDefinitions the audit read in etcd (``audit["crds"]``), as the cluster's CRDs;
- per release in ``running_releases``, one apiserver as the release data describes it (``release 1.32
  (release data)``): the built-ins it serves, the storage version it writes and what it reads, and for
  each audited CRD its storage version; none without ``running_releases``;
- the apiservers that did not answer, which stay findings of their own (accepting one means "judged
  without it", never "passed").

What is persisted is the audit's measurement and whether objects exist is its count; the resources
judged are those the audit found (and ``resources``). What that leaves out is said in ``notes``, which
every report shows. Pure: plain data in, plain data out.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Dict, List, Optional

from ansible_collections.kubeupgrade.storage.plugins.module_utils import hashing
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.model import (
    CrdVersion,
    EndpointObservation,
    Observation,
    ObservedCrd,
    ObservedResource,
)
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ConfigurationError, ProfileError

# Options that need a live apiserver: refused with offline: true (which contacts none).
LIVE_ONLY = {
    "target_endpoint": "an apiserver that already runs the target must answer",
    "upgrading": "the roll guard establishes from the apiservers where a roll stands",
    "refresh_records": "StorageState records are written through an apiserver",
    "target_running_release": "the release the apiservers run is read from them",
}


CRDS_LABEL = "the CustomResourceDefinitions in the audit"


def endpoint_label(release: str) -> str:
    """How an apiserver that release data stands in for is named in verdicts (``current_versions``) and reports."""
    return f"release {release} (release data)"


def validate(params) -> None:
    """``offline`` and ``running_releases`` checked before anything is read; one error naming the option."""
    running = params.get("running_releases")
    if running is not None and (not isinstance(running, list) or not all(isinstance(r, str) and r.strip() for r in running)):
        raise ConfigurationError("running_releases must be a list of Kubernetes releases such as [\"1.28\", \"1.32\"] "
                                 "(quoted): the releases of the apiservers that wrote the audited etcd.")
    if not params.get("offline"):
        return
    if params.get("audit") is None:
        raise ConfigurationError("offline: true judges from an etcd audit and contacts no apiserver: give audit (the "
                                 "registered result of kubeupgrade.storage.storage_version_audit, for example of a "
                                 "snapshot restored into an etcd on the controller).")
    for option, why in LIVE_ONLY.items():
        if params.get(option):
            raise ConfigurationError(f"{option} needs a live apiserver ({why}), and offline: true contacts none: leave "
                                     f"{option} out, or judge online (offline: false).")


def running_releases(given, profiles) -> List[str]:
    """The releases of ``running_releases`` as their profiles name them (``v1.32.6`` -> ``1.32``), each once."""
    found = []
    for value in given or []:
        try:
            release = profiles.get(value).release
        except ProfileError as error:
            raise ConfigurationError(f"running_releases: {error}", details=error.details) from None
        if release not in found:
            found.append(release)
    return found


def crds(audit) -> Dict[str, ObservedCrd]:
    """The CRDs the audit read in etcd, as the observation holds CRDs (empty for an audit before 0.3.0)."""
    found = {}
    for name, entry in sorted(((audit or {}).get("crds") or {}).items()):
        if not isinstance(entry, dict):
            continue
        versions = [CrdVersion(name=str(v.get("name")), served=bool(v.get("served")), storage=bool(v.get("storage")))
                    for v in entry.get("versions") or [] if isinstance(v, dict) and v.get("name")]
        found[name] = ObservedCrd(name=name, group=str(entry.get("group") or ""), kind=str(entry.get("kind") or ""),
                                  plural=str(entry.get("plural") or ""), scope=str(entry.get("scope") or ""),
                                  versions=versions, stored_versions=list(entry.get("stored_versions") or []))
    return found


def _release_endpoint(release, definitions: Dict[str, ObservedCrd]) -> EndpointObservation:
    """One apiserver of ``release`` as its release data describes it: what it serves, writes and reads."""
    resources = {}
    for name, entry in release.resources.items():
        resources[name] = ObservedResource(name=name, group=entry.group, kind=entry.kind, namespaced=False,
                                           storage_hash=entry.storage_hash(), served_versions=list(entry.served),
                                           storage_version=entry.storage_version)
    for name, crd in definitions.items():
        if crd.storage_version and crd.kind:
            resources[name] = ObservedResource(
                name=name, group=crd.group, kind=crd.kind, namespaced=crd.scope == "Namespaced",
                storage_hash=hashing.storage_version_hash(crd.group, crd.storage_version, crd.kind),
                served_versions=crd.served_versions, storage_version=crd.storage_version)
    return EndpointObservation(endpoint=endpoint_label(release.release) if release.release else CRDS_LABEL, reachable=True,
                               release=release.release, ready=True, resources=resources)


def _crds_endpoint(definitions: Dict[str, ObservedCrd]) -> EndpointObservation:
    """Without running releases: a custom resource's storage version is its CRD's, whatever the release, so the
    apiservers are known to write that much; nothing is known of built-ins."""
    return _release_endpoint(SimpleNamespace(release=None, resources={}), definitions)


def build_observation(audit, profiles, releases: List[str], unreachable=()) -> Observation:
    """What the engine judges offline: the audit's CRDs, one apiserver per running release from release data (or,
    without them, only what the CRDs say every apiserver writes), and the apiservers that did not answer (each a
    finding of its own)."""
    definitions = crds(audit)
    standing_in = [_release_endpoint(profiles.get(r), definitions) for r in releases]
    if not releases and definitions:
        standing_in = [_crds_endpoint(definitions)]
    return Observation(endpoints=list(unreachable) + standing_in, crds=definitions)


def names(audit, observation) -> List[str]:
    """The resources an offline check judges: every one the audit found stored, and every CRD it read."""
    return sorted(set((audit or {}).get("resources") or {}) | set(observation.crds))


def notes(audit, releases: List[str], unanswered: Optional[List[str]] = None) -> List[str]:
    """What an offline judgement rests on and what it leaves out, in the words every report shows."""
    audit = audit or {}
    source = f"etcd {audit.get('endpoint')}" if audit.get("endpoint") else "etcd"
    revision = f", revision {audit['revision']}" if audit.get("revision") else ""
    why = (f"no apiserver answered ({', '.join(unanswered)})" if unanswered
           else "offline: true")
    found = [f"Judged offline ({why}) from the etcd audit of {source}{revision} measured at {audit.get('measured_at')}: "
             "no apiserver was read. Left out: whether the apiservers agree on storage versions, the versions they "
             "serve (live discovery), their StorageState records, and objects written after the audit."]
    if releases:
        found.append(f"What the running apiservers write and read is taken from the release data of "
                     f"{', '.join(releases)} (running_releases), not from the apiservers: storage flags and feature "
                     "gates that change it are not seen.")
    else:
        found.append("What the running apiservers write now and can read is left out (give running_releases): a "
                     "verdict cannot say whether a migration through them helps, only which stored objects the target "
                     "cannot decode.")
    if "crds" not in audit:
        found.append("The audit carries no CustomResourceDefinitions (taken before kubeupgrade.storage 0.3.0): custom "
                     "resources are judged only against target_crds, and without them are unknown. Audit again to "
                     "judge them.")
    for item in audit.get("crds_unread") or []:
        found.append(f"CustomResourceDefinition {item.get('name')} could not be read from etcd ({item.get('reason')}): "
                     "its custom resources are judged only against target_crds.")
    if audit.get("filtered_out"):
        found.append(f"The audit read only some resources ({audit['filtered_out']} stored object(s) filtered out by its "
                     "resources option): the others are not judged.")
    return found
