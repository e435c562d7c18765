# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The shipped release profiles against the real kube-apiserver of each release at hand (tests/realcp).

Every verdict of the collection rests on ``_release_data.py``: which resources a release persists, the
storage version hash it reports for each, and the versions it serves. That table was assembled from
Kubernetes sources (test/integration/etcd/data.go, release notes); here each real binary, with its alpha and
beta APIs on, says what it does through legacy discovery (``/api/v1``, ``/apis/<group>/<version>``: a
resource with a ``storageVersionHash`` is persisted), and the shipped profile of its release must say the same.
"""

from __future__ import annotations

import pytest

from ansible_collections.kubeupgrade.storage.plugins.module_utils import profiles
from ansible_collections.kubeupgrade.storage.plugins.module_utils.resources import GroupResource

pytestmark = pytest.mark.slow

# What the fixture's per-release defaults (tests/realcp/plane.py RELEASE_FLAGS) lack to serve every persisted
# resource of these releases: api/all (every compiled-in group version; 1.28's and 1.32's lists name some, and
# 1.33 uses 1.32's list, so resource.k8s.io/v1beta2 of 1.33 is off) and the gates of three resources that are
# alpha or off-by-default beta there: ClusterTrustBundle (certificates.k8s.io clustertrustbundles, alpha since
# 1.27, beta in 1.33), CoordinatedLeaderElection (coordination.k8s.io leasecandidates, alpha in 1.31, beta in
# 1.33) and VolumeAttributesClass (storage.k8s.io volumeattributesclasses, beta in 1.31, GA in 1.34). The
# 1.28 binary is upstream and exits on a gate it does not know, so it gets only ClusterTrustBundle.
_GATES_1_32 = {"ClusterTrustBundle": "true", "CoordinatedLeaderElection": "true", "VolumeAttributesClass": "true"}
RELEASES = [
    # release, etcd_version (None: the etcd 3.4 on PATH), feature gates, runtime-config
    ("1.28", None, {"ClusterTrustBundle": "true"}, {"api/all": "true"}),
    ("1.32", None, _GATES_1_32, {"api/all": "true"}),
    ("1.33", None, _GATES_1_32, {"api/all": "true"}),
    ("1.35", "3.5", {}, {}),  # the defaults already turn on api/all and the gates of every persisted resource
    ("1.36", "3.5", {}, {}),
]

# {release: {resource (kubectl-style, as the collection names it): reason}}: differences between a binary
# and the shipped profile that are understood. Each entry must still differ, or the test fails (stale).
KNOWN_DIFFERENCES: dict = {}


def _get(plane, path):
    status, body = plane.request("GET", path)
    assert status == 200, f"GET {path}: {status} {body}"
    return body


def discovered(plane) -> dict:
    """``{name: {"kind": set, "hash": set, "served": set}}`` of every persisted resource the apiserver lists,
    collected over every group version that serves it (events.events.k8s.io and events both report core
    v1 Event's hash, each under its own name)."""
    group_versions = ["v1"] + [version["groupVersion"] for group in _get(plane, "/apis")["groups"]
                               for version in group["versions"]]
    found = {}
    for group_version in group_versions:
        group, _sep, version = group_version.rpartition("/")
        listing = _get(plane, "/api/v1" if group_version == "v1" else f"/apis/{group_version}")
        for resource in listing["resources"]:
            if "/" in resource["name"] or "storageVersionHash" not in resource:
                continue  # a subresource, or not persisted (reviews, bindings)
            entry = found.setdefault(GroupResource(group=group, resource=resource["name"]).name,
                                     {"kind": set(), "hash": set(), "served": set()})
            entry["kind"].add(resource["kind"])
            entry["hash"].add(resource["storageVersionHash"])
            entry["served"].add(version)
    return found


def differences(shipped: profiles.ReleaseProfile, seen: dict) -> dict:
    """``{name: what differs}`` between the shipped profile and what the binary lists; empty when they agree."""
    found = {}
    for name in sorted(set(shipped.resources) | set(seen)):
        profile, binary = shipped.get(name), seen.get(name)
        if binary is None:
            found[name] = f"shipped profile persists it (storage {profile.storage_version}), binary lists it nowhere"
            continue
        if profile is None:
            found[name] = f"binary persists it (served {sorted(binary['served'])}), shipped profile has no entry"
            continue
        problems = []
        if binary["kind"] != {profile.kind}:
            problems.append(f"kind: shipped profile says {profile.kind}, binary says {sorted(binary['kind'])}")
        if binary["hash"] != {profile.storage_hash()}:
            problems.append(f"storage version hash: shipped profile says {profile.storage_hash()} "
                            f"({profile.storage_group}/{profile.storage_version}/{profile.kind}), "
                            f"binary says {sorted(binary['hash'])}")
        if binary["served"] != set(profile.served):
            problems.append(f"served: shipped profile says {sorted(profile.served)}, binary says {sorted(binary['served'])}")
        if problems:
            found[name] = "; ".join(problems)
    return found


@pytest.mark.parametrize(("release", "etcd_version", "feature_gates", "runtime_config"), RELEASES,
                         ids=[row[0] for row in RELEASES])
def test_shipped_profile_equals_what_the_real_apiserver_persists_hashes_and_serves(
        real_plane_factory, release, etcd_version, feature_gates, runtime_config):
    plane = real_plane_factory([release], etcd_version=etcd_version, feature_gates=feature_gates,
                               runtime_config=runtime_config)
    shipped = profiles.load_profiles().get(release)
    seen = discovered(plane)
    found = differences(shipped, seen)
    known = KNOWN_DIFFERENCES.get(release, {})
    compared = set(shipped.resources) | set(seen)
    print(f"\n{plane.version_of(0)}: {len(compared) - len(found)}/{len(compared)} persisted resources equal the "
          f"shipped profile")
    unexpected = {name: what for name, what in found.items() if name not in known}
    assert unexpected == {}, f"{plane.version_of(0)} differs from the shipped {release} profile: {unexpected}"
    stale = sorted(set(known) - set(found))
    assert stale == [], f"KNOWN_DIFFERENCES[{release!r}] lists resources that no longer differ: {stale}"
