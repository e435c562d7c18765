# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parse legacy discovery documents into per-resource observations.

Only legacy per-group-version documents (``/api/v1``, ``/apis/G/V``) carry ``storageVersionHash``;
aggregated discovery (apidiscovery.k8s.io/v2, KEP-3352: ``APIResourceDiscovery`` in
staging/src/k8s.io/api/apidiscovery/v2/types.go has no such field) does not, so an aggregated answer where a legacy one was asked
for must be detected and refused, never read as "no hashes".
"""

from __future__ import annotations

import dataclasses
import re
from typing import Dict, List, Optional, Tuple

from ansible_collections.kubeupgrade.storage.plugins.module_utils import errors, hashing
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http import paths
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.model import ObservedResource
from ansible_collections.kubeupgrade.storage.plugins.module_utils.profiles import normalize_release
from ansible_collections.kubeupgrade.storage.plugins.module_utils.resources import GroupResource

AGGREGATED_KINDS = ("APIGroupDiscoveryList", "APIGroupDiscovery")


def is_aggregated(doc) -> bool:
    """True for an aggregated (v2/v2beta1) discovery document, which has no storage hashes."""
    if not isinstance(doc, dict):
        return False
    return doc.get("kind") in AGGREGATED_KINDS or str(doc.get("apiVersion", "")).startswith("apidiscovery.k8s.io/")


def _require_kind(doc, kind: str, where: str) -> dict:
    if is_aggregated(doc):
        raise errors.KubeUpgradeError(
            f"{where} returned aggregated discovery ({doc.get('kind')}), which has no storageVersionHash; "
            f"request it with 'Accept: application/json'")
    if not isinstance(doc, dict) or doc.get("kind") != kind:
        got = doc.get("kind") if isinstance(doc, dict) else type(doc).__name__
        raise errors.KubeUpgradeError(f"{where} did not return a {kind} discovery document (got {got!r})")
    return doc


def group_versions(api_doc, apis_doc) -> List[Tuple[str, str, str]]:
    """Every served group/version as ``(group, version, path)``: core from ``/api``, the rest from ``/apis``.

    All versions, not only the preferred one: served versions are part of what we report.
    """
    result = []
    for version in _require_kind(api_doc, "APIVersions", paths.CORE_DISCOVERY).get("versions") or []:
        result.append(("", version, paths.group_version("", version)))
    for group in _require_kind(apis_doc, "APIGroupList", paths.GROUP_DISCOVERY).get("groups") or []:
        name = group.get("name", "")
        for entry in group.get("versions") or []:
            version = entry.get("version") or entry.get("groupVersion", "").rpartition("/")[2]
            if version:
                result.append((name, version, paths.group_version(name, version)))
    return result


def _group_version_of(path: str, doc: dict) -> Tuple[str, str]:
    group_version = doc.get("groupVersion") or ""
    if not group_version:
        parts = path.strip("/").split("/")
        group_version = parts[1] if parts[0] == "api" else "/".join(parts[1:3])
    group, _unused, version = group_version.rpartition("/")
    return group, version


def endpoint_resources(resource_lists: Dict[str, dict]) -> Dict[str, ObservedResource]:
    """Merge one endpoint's APIResourceLists into one ObservedResource per persisted resource.

    Subresources and resources without a hash in any version (not persisted) are skipped. The hash
    is of the storage version, so it must be the same in every served version; when it is not, the
    resource gets ``storage_hash = ""`` and ``hash_mismatch`` so callers fail closed.
    """
    hashes_by_name: Dict[str, Dict[str, str]] = {}
    merged: Dict[str, ObservedResource] = {}
    for path in sorted(resource_lists):
        doc = _require_kind(resource_lists[path], "APIResourceList", path)
        group, version = _group_version_of(path, doc)
        for item in doc.get("resources") or []:
            resource = item.get("name", "")
            if not resource or "/" in resource:
                continue
            name = GroupResource(group=group, resource=resource).name
            hashes_by_name.setdefault(name, {})[version] = item.get("storageVersionHash") or ""
            observed = merged.get(name)
            if observed is None:
                merged[name] = ObservedResource(
                    name=name, group=group, kind=item.get("kind", ""), namespaced=bool(item.get("namespaced")),
                    storage_hash="", served_versions=[version], verbs=list(item.get("verbs") or []))
            elif version not in observed.served_versions:
                observed.served_versions.append(version)
    result = {}
    for name, observed in merged.items():
        by_version = hashes_by_name[name]
        distinct = set(by_version.values())
        if distinct == {""}:
            continue  # not persisted (tokenreviews, bindings) or an aggregated server without hashes
        if len(distinct) == 1:
            observed.storage_hash = distinct.pop()
        else:
            observed.hash_mismatch = dict(sorted(by_version.items()))
        observed.served_versions = sort_versions(observed.served_versions)
        result[name] = observed
    return result


def _hash_candidates(resource: ObservedResource, profiles, crds) -> List[Tuple[str, str, str]]:
    """(group, kind, version) triples whose hash this resource's storage hash may be."""
    crd = (crds or {}).get(resource.name)
    triples = []
    if crd is not None:
        for version in crd.version_names:
            triples.append((crd.group, crd.kind, version))
    if profiles is not None and profiles.known(resource.name):
        # A built-in is hashed in its storage group only: events.k8s.io Events are stored (and hashed) as core
        # v1 Event, so a hash of events.k8s.io/v1 Event is no storage version of theirs.
        group = profiles.storage_group_of(resource.name)
        kind = profiles.kind_of(resource.name) or resource.kind
        for version in sort_versions(profiles.candidate_versions(resource.name) | set(resource.served_versions)):
            triples.append((group, kind, version))
        return triples
    for version in resource.served_versions:
        triples.append((resource.group, resource.kind, version))
    return triples


def lookup_storage_version(hash_value: str, resource: ObservedResource, profiles=None, crds=None) -> Optional[str]:
    """The version a storage hash stands for among this resource's candidates, or None (unknown)."""
    if not hash_value or hash_value == hashing.UNKNOWN:
        return None
    for group, kind, version in _hash_candidates(resource, profiles, crds):
        if hashing.storage_version_hash(group, version, kind) == hash_value:
            return version
    return None


def map_storage_versions(resources: Dict[str, ObservedResource], profiles=None, crds=None) -> Dict[str, ObservedResource]:
    """Copies of ``resources`` with ``storage_version`` filled by reverse hash lookup.

    Candidates are the served versions, every version any release profile has for the resource
    (hashed with its storage group: events.k8s.io events hash as ``/v1/Event``) and, for a custom
    resource, its CRD's ``spec.versions``. No match leaves ``storage_version`` None: unknown.
    """
    return {
        name: dataclasses.replace(resource, storage_version=lookup_storage_version(resource.storage_hash, resource, profiles, crds))
        for name, resource in resources.items()
    }


def release_from_version(version_doc) -> Optional[str]:
    """``/version`` -> ``"1.32"`` (from gitVersion, else major/minor such as ``"27+"``); None if neither."""
    if not isinstance(version_doc, dict):
        return None
    git_version = version_doc.get("gitVersion")
    if git_version:
        try:
            return normalize_release(git_version)
        except errors.ProfileError:
            pass
    major = str(version_doc.get("major", "")).rstrip("+")
    minor = str(version_doc.get("minor", "")).rstrip("+")
    if major.isdigit() and minor.isdigit():
        return f"{int(major)}.{int(minor)}"
    return None


def _minor_release(version_doc: dict, major_key: str, minor_key: str) -> Optional[str]:
    major = str(version_doc.get(major_key, "")).rstrip("+")
    minor = str(version_doc.get(minor_key, "")).rstrip("+")
    return f"{int(major)}.{int(minor)}" if major.isdigit() and minor.isdigit() else None


def emulation_from_version(version_doc) -> Tuple[Optional[str], Optional[str]]:
    """``/version`` -> (emulated release, minimum compatibility release), e.g. ``("1.35", "1.34")`` for a 1.36 binary
    started with ``--emulated-version=1.35`` (compatibility versions, KEP-4330); (None, None) where the apiserver
    reports neither (releases before 1.31)."""
    if not isinstance(version_doc, dict):
        return None, None
    return (_minor_release(version_doc, "emulationMajor", "emulationMinor"),
            _minor_release(version_doc, "minCompatibilityMajor", "minCompatibilityMinor"))


def version_sort_key(version: str):
    """Kubernetes version priority, oldest first: v1alpha1 < v1beta1 < v1 < v2alpha1 < v2."""

    match = re.match(r"^v(\d+)(?:(alpha|beta)(\d+))?$", version or "")
    if not match:
        return (-1, -1, 0, version or "")
    stage = {"alpha": 0, "beta": 1, None: 2}[match.group(2)]
    return (int(match.group(1)), stage, int(match.group(3) or 0), version)


def sort_versions(versions) -> List[str]:
    return sorted(set(versions), key=version_sort_key)
