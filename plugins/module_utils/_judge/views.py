# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the target and the running apiservers can read of one resource.

A binary reads objects stored in a version whose types it still has: for a release profile
``decodable ∪ served ∪ storage``; for a StorageVersion object its ``decodableVersions``; for a CRD
manifest its ``spec.versions``; for a target known only by live discovery just ``served ∪ storage``
(narrower than the truth, so such verdicts are marked conservative).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from ansible_collections.kubeupgrade.storage.plugins.module_utils._judge.model import REMOVED, UNKNOWN
from ansible_collections.kubeupgrade.storage.plugins.module_utils.resources import GroupResource


@dataclass
class TargetView:
    """One resource as the target sees it."""

    exists: bool
    source: str
    readable: set = field(default_factory=set)
    storage_version: Optional[str] = None
    conservative: bool = False
    absent_verdict: str = UNKNOWN
    absent_reason: str = ""
    release: Optional[str] = None  # the target release, when judged against release data


def storage_version_object_name(name: str) -> str:
    """``deployments.apps`` -> ``apps.deployments``; ``pods`` -> ``core.pods`` (StorageVersion naming)."""
    gr = GroupResource.parse(name)
    return f"{gr.group or 'core'}.{gr.resource}"


def _strip_group(group_version: str) -> str:
    return (group_version or "").rpartition("/")[2]


def custom_view(name, observation, target) -> TargetView:
    manifests = target.crd_manifests or {}
    if name in manifests:
        crd, source = manifests[name], "the target CRD manifest"
    elif name in observation.crds:
        crd, source = observation.crds[name], "the CRD in the cluster (the target binary does not change CRDs)"
    else:
        return TargetView(False, "", absent_reason=f"no CustomResourceDefinition {name} found to judge against")
    return TargetView(True, source, set(crd.version_names), crd.storage_version)


def _storage_version_view(sv) -> TargetView:
    readable = None
    for entry in sv.entries:
        versions = {_strip_group(v) for v in entry.decodable_versions} | {_strip_group(entry.encoding_version)}
        readable = versions if readable is None else readable & versions  # every target apiserver must read it
    encodings = {_strip_group(e.encoding_version) for e in sv.entries}
    storage = _strip_group(sv.common_encoding_version) if sv.common_encoding_version else (
        encodings.pop() if len(encodings) == 1 else None)
    return TargetView(True, f"StorageVersion {sv.name} decodableVersions", readable, storage)


def _release_view(name, release, profiles) -> TargetView:
    entry = release.get(name)
    source = f"the Kubernetes {release.release} release profile ({release.source})"
    if entry is not None:
        return TargetView(True, source, entry.readable_versions(), entry.storage_version, release=release.release)
    if name in release.removed or (profiles is not None and profiles.known(name)):
        # Upgrading past a removal and rolling back below an introduction are the same situation.
        having = [r for r in profiles.releases() if profiles.get(r).get(name) is not None] if profiles is not None else []
        where = f" (the release data has it in {_release_span(having)})" if having else ""
        return TargetView(False, source, absent_verdict=REMOVED, release=release.release,
                          absent_reason=f"Kubernetes {release.release} has no types for {name}{where}")
    return TargetView(False, source, absent_reason=f"the release data has no entry for {name} in any release")


def _release_span(releases) -> str:
    return releases[0] if len(releases) == 1 else f"{releases[0]} to {releases[-1]}"


def _live_view(name, live) -> TargetView:
    source = f"live discovery of {live.endpoint} (served and storage versions only)"
    group = GroupResource.parse(name).group
    if not live.covers(group):
        return TargetView(False, source, conservative=True,
                          absent_reason=f"the target apiserver {live.endpoint} could not be read completely "
                                        f"({live.error or 'discovery failed'})")
    observed = live.resources.get(name)
    if observed is None:
        return TargetView(False, source, conservative=True, absent_verdict=REMOVED,
                          absent_reason=f"the target apiserver {live.endpoint} does not serve {name}")
    readable = set(observed.served_versions) | ({observed.storage_version} if observed.storage_version else set())
    return TargetView(True, source, readable, observed.storage_version, conservative=True)


def builtin_view(name, target, profiles) -> TargetView:
    sv = (target.storage_versions or {}).get(storage_version_object_name(name))
    if sv is not None and sv.entries:
        return _storage_version_view(sv)
    if target.release is not None:
        return _release_view(name, target.release, profiles)
    if target.live is not None:
        return _live_view(name, target.live)
    return TargetView(False, "", absent_reason="no target was given (a release, a live apiserver, StorageVersion "
                                               "objects or CRD manifests)")


def running_readable(name, endpoint, profiles) -> Optional[set]:
    """What one running apiserver can read: its release profile, else what it serves and stores."""
    if profiles is not None and endpoint.release and endpoint.release in profiles:
        entry = profiles.get(endpoint.release).get(name)
        if entry is not None:
            return entry.readable_versions()
    observed = endpoint.resources.get(name)
    if observed is not None:
        return set(observed.served_versions) | ({observed.storage_version} if observed.storage_version else set())
    return None
