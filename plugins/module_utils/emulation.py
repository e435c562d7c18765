# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a kube-apiserver binary stores when it emulates an older release (compatibility versions, KEP-4330).

Step 1 of the two-step upgrade runs the new binary with ``--emulated-version=<the current release>``. Its storage
versions are neither the binary's nor, always, the emulated release's: ``k8s.io/apiserver``
(``pkg/server/storage/resource_encoding_config.go``, ``emulatedStorageVersion``) walks the versions of the resource's
kind in the binary's priority order and takes

- the first non-alpha version introduced at or before the minimum compatibility version, else
- the first version introduced at or before the emulated version, else
- the binary's own storage version (no version of the kind existed then: nothing older can hold its objects);

where an alpha version that has a successor (``+k8s:prerelease-lifecycle-gen:replacement``, taken here as: the kind
has a beta or GA version in the binary) is never taken;

except for the resources ``pkg/kubeapiserver/default_storage_factory_builder.go`` pins to a version, which bypass
emulation. The rule was checked against real binaries (kube-apiserver 1.36.2 at emulation 1.33, 1.34 and 1.35, and
1.33.5 at 1.31 and 1.32: the predicted storage version hash equals the one discovery reports for every resource they
serve, tests/integration/test_real_emulation.py).

A version's release of introduction is the first release profile that has it (served or registered); the shipped
profiles go back to 1.25, older than any release a supported binary can emulate. Pins come from two places: the
table below (the pins of the builder file, per release) and every resource whose own storage version differs from
what the rule gives at the release's defaults (a pin by definition).
"""

from __future__ import annotations

import copy
import re
from typing import Dict, Optional, Tuple

from ansible_collections.kubeupgrade.storage.plugins.module_utils import errors
from ansible_collections.kubeupgrade.storage.plugins.module_utils.profiles import (
    ProfileSet,
    ReleaseProfile,
    ResourceProfile,
    normalize_release,
    release_sort_key,
)

# Storage pins of pkg/kubeapiserver/default_storage_factory_builder.go that the rule at the release's defaults would
# also give (so the profiles alone cannot show them), per binary release; kubectl-style name -> pinned version.
# 1.33: seen on kube-apiserver 1.33.5 at --emulated-version=1.32 (LeaseCandidates, ClusterTrustBundles stored v1beta1).
# 1.36: the builder file of release-1.36, and seen on 1.36.2 at emulation 1.33 (MutatingAdmissionPolicies v1beta1).
_PINNED_1_33 = {"leasecandidates.coordination.k8s.io": "v1beta1", "clustertrustbundles.certificates.k8s.io": "v1beta1"}
STORAGE_PINS: Dict[str, Dict[str, str]] = {
    "1.33": dict(_PINNED_1_33),
    "1.34": dict(_PINNED_1_33),
    "1.35": dict(_PINNED_1_33),
    "1.36": {
        **_PINNED_1_33,
        "mutatingadmissionpolicies.admissionregistration.k8s.io": "v1beta1",
        "mutatingadmissionpolicybindings.admissionregistration.k8s.io": "v1beta1",
        "podcertificaterequests.certificates.k8s.io": "v1beta1",
        "devicetaintrules.resource.k8s.io": "v1alpha3",
        "resourcepoolstatusrequests.resource.k8s.io": "v1alpha3",
        "workloads.scheduling.k8s.io": "v1alpha2",
        "podgroups.scheduling.k8s.io": "v1alpha2",
    },
}

# The oldest release any binary emulates (component-base: minimumKubeEmulationVersion), and how far back a binary
# reaches (kubeEffectiveVersionFloors: binary - 3 from 1.33; 1.32 reaches one release back).
_OLDEST_EMULATED = (1, 31)
_VERSION_RE = re.compile(r"^v(\d+)(?:(alpha|beta)(\d+))?$")
_STABILITY = {"alpha": 0, "beta": 1, None: 2}


def version_priority(version: str) -> Tuple[int, int, int]:
    """Kube-aware order (GA > beta > alpha, then the higher number): the order the scheme prefers versions in."""
    match = _VERSION_RE.match(version)
    if not match:
        return (-1, 0, 0)
    return (_STABILITY[match.group(2)], int(match.group(1)), int(match.group(3) or 0))


def _minor(release: str) -> Tuple[int, int]:
    return release_sort_key(release)


def _release(key: Tuple[int, int]) -> str:
    return f"{key[0]}.{key[1]}"


def emulation_range(binary: str) -> Tuple[str, str]:
    """The releases ``binary`` can emulate, oldest and newest (KEP-4330; 1.31 emulates only itself)."""
    key = _minor(binary)
    reach = 1 if key == (1, 32) else 3
    oldest = max((key[0], key[1] - reach), _OLDEST_EMULATED) if key >= (1, 32) else key
    return _release(oldest), binary


def min_compatibility(binary: str, emulated: str, given: Optional[str] = None) -> str:
    """The minimum compatibility release: ``given``, else emulated - 1 (1.33+) or binary - 1 (1.32), never below the
    oldest release the binary can emulate (component-base compatibility ``SetEmulationVersion``)."""
    if given:
        return normalize_release(given)
    oldest = _minor(emulation_range(binary)[0])
    key = _minor(binary)
    wanted = (key[0], key[1] - 1) if key < (1, 33) else (_minor(emulated)[0], _minor(emulated)[1] - 1)
    return _release(max(wanted, oldest))


def introduced(profiles: ProfileSet, name: str, version: str) -> Optional[str]:
    """The first release whose profile has ``version`` of ``name`` (served or registered); None when none has it."""
    for release in profiles.releases():
        entry = profiles.get(release).get(name)
        if entry is not None and (version in entry.served or version in entry.decodable):
            return release
    return None


def _chosen(profiles: ProfileSet, entry: ResourceProfile, emulated: str, min_compat: str) -> Optional[str]:
    """The rule of ``emulatedStorageVersion`` for one resource of the binary; None: no version qualifies."""
    compat = best = None
    versions = sorted(entry.readable_versions(), key=version_priority, reverse=True)
    replaced = any("alpha" not in version for version in versions)
    for version in versions:
        if replaced and "alpha" in version:
            continue  # an alpha version with a beta or GA successor carries a lifecycle replacement: never chosen
        since = introduced(profiles, entry.name, version)
        if compat is None and "alpha" not in version and (since is None or _minor(since) <= _minor(min_compat)):
            compat = version
        if best is None and (since is None or _minor(since) <= _minor(emulated)):
            best = version
    return compat or best


def pinned(profiles: ProfileSet, binary: str, entry: ResourceProfile) -> Optional[str]:
    """The version ``binary`` pins ``entry`` to regardless of emulation; None when the rule decides."""
    table = STORAGE_PINS.get(binary, {})
    if entry.name in table:
        return table[entry.name]
    if entry.storage_group != entry.group or entry.group == "apiextensions.k8s.io":
        return entry.storage_version  # stored through another group's codec, or by the apiextensions server
    at_defaults = _chosen(profiles, entry, binary, min_compatibility(binary, binary))
    return entry.storage_version if at_defaults not in (None, entry.storage_version) else None


def storage_version(profiles: ProfileSet, binary: str, entry: ResourceProfile, emulated: str, min_compat: str) -> str:
    """What ``binary`` writes for ``entry`` at ``emulated`` / ``min_compat``."""
    return pinned(profiles, binary, entry) or _chosen(profiles, entry, emulated, min_compat) or entry.storage_version


def profile_at(profiles: ProfileSet, binary, emulated=None, min_compat=None) -> ReleaseProfile:
    """The profile of ``binary`` run at ``--emulated-version=emulated`` (and ``--min-compatibility-version``): its
    storage versions predicted, its served versions those introduced by the emulated release; what it can decode
    stays the binary's. ``emulated`` empty or equal to the binary: the binary's own profile."""
    own = profiles.get(binary)
    if not emulated or normalize_release(emulated) == own.release:
        if min_compat and normalize_release(min_compat) != min_compatibility(own.release, own.release):
            emulated = own.release
        else:
            return own
    emulated = normalize_release(emulated)
    oldest, newest = emulation_range(own.release)
    if not _minor(oldest) <= _minor(emulated) <= _minor(newest):
        raise errors.ConfigurationError(
            f"kube-apiserver {own.release} cannot emulate {emulated}: --emulated-version takes {oldest} to {newest} "
            "for that binary (KEP-4330); give an emulated release in that range.")
    compat = min_compatibility(own.release, emulated, min_compat)
    if not _minor(oldest) <= _minor(compat) <= _minor(emulated):
        raise errors.ConfigurationError(
            f"kube-apiserver {own.release} emulating {emulated} cannot keep compatibility with {compat}: "
            f"--min-compatibility-version takes {oldest} to {emulated} there.")
    resources = {}
    for name, entry in own.resources.items():
        predicted = copy.copy(entry)
        predicted.storage_version = storage_version(profiles, own.release, entry, emulated, compat)
        since = {version: introduced(profiles, name, version) for version in entry.served}
        predicted.served = [v for v in entry.served if since[v] is None or _minor(since[v]) <= _minor(emulated)]
        predicted.decodable = list(entry.decodable)
        resources[name] = predicted
    return ReleaseProfile(release=own.release, resources=resources, removed=list(own.removed), source=own.source,
                          emulated=emulated, min_compatibility=compat)
