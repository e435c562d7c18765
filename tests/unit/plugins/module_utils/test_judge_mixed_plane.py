# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A rollback judged on measured data in a mixed plane: what is stored, plus what the apiservers that stay write.

1.28 and 1.32 apiservers; target 1.28. The 1.32 one writes flowschemas as v1 (1.28 cannot read v1), but the audit
found only v1beta3 objects: 1.28 reads every stored one, and the 1.32 apiserver is the one the roll replaces.
"""

from __future__ import annotations

from ansible_collections.kubeupgrade.storage.plugins.module_utils import hashing
from ansible_collections.kubeupgrade.storage.plugins.module_utils._judge import evidence
from ansible_collections.kubeupgrade.storage.plugins.module_utils._judge.engine import judge
from ansible_collections.kubeupgrade.storage.plugins.module_utils._judge.model import JudgeOptions, Target
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.model import (
    EndpointObservation,
    Observation,
    ObservedResource,
)
from ansible_collections.kubeupgrade.storage.plugins.module_utils.profiles import load_profiles

PROFILES = load_profiles()
NAME = "flowschemas.flowcontrol.apiserver.k8s.io"
GROUP = "flowcontrol.apiserver.k8s.io"


def flowschemas(version):
    return ObservedResource(name=NAME, group=GROUP, kind="FlowSchema", namespaced=False, served_versions=[version],
                            storage_hash=hashing.storage_version_hash(GROUP, version, "FlowSchema"), storage_version=version)


def mixed_plane():
    return Observation(endpoints=[
        EndpointObservation(endpoint="https://cp1:6443", reachable=True, release="1.28", ready=True,
                            resources={NAME: flowschemas("v1beta3")}),
        EndpointObservation(endpoint="https://cp2:6443", reachable=True, release="1.32", ready=True,
                            resources={NAME: flowschemas("v1")})])


AUDIT = {"measured_at": "2026-11-25T10:00:00Z", "resources": {NAME: {
    "hashes": [hashing.storage_version_hash(GROUP, "v1beta3", "FlowSchema")], "count": 3}}}


def test_measured_rollback_counts_what_is_stored_and_what_the_staying_apiservers_write():
    ev = evidence.gather(NAME, mixed_plane(), Target(release=PROFILES.get("1.28")), PROFILES, JudgeOptions(audit=AUDIT))
    assert ev.persisted_versions == {"v1beta3"}
    assert ev.writers_set == {"v1beta3"}, "the staying 1.28 apiserver writes v1beta3"
    verdict = judge(mixed_plane(), Target(release=PROFILES.get("1.28")), PROFILES, JudgeOptions(audit=AUDIT, fail_on=()))
    assert [(r.resource, r.verdict) for r in verdict.resources] == [(NAME, "safe")]


def test_without_an_audit_what_the_departing_apiserver_writes_still_counts():
    verdict = judge(mixed_plane(), Target(release=PROFILES.get("1.28")), PROFILES, JudgeOptions(fail_on=()))
    assert [(r.resource, r.verdict) for r in verdict.resources] == [(NAME, "unsafe")]


def test_a_rollback_past_what_the_newer_release_writes_points_at_the_pre_upgrade_snapshot():
    """Every apiserver on 1.32 (it writes and maintains the bootstrap FlowSchemas as v1): back to 1.28 there is no
    release to go through and deleting them does not help; the way back is the snapshot taken before the upgrade."""
    rolled = Observation(endpoints=[
        EndpointObservation(endpoint=f"https://cp{i}:6443", reachable=True, release="1.32", ready=True,
                            resources={NAME: flowschemas("v1")}) for i in (1, 2)])
    [item] = judge(rolled, Target(release=PROFILES.get("1.28")), PROFILES, JudgeOptions(fail_on=())).resources
    assert item.verdict == "unsafe"
    assert "etcd snapshot taken before the upgrade" in item.next_step and "re-creates" in item.next_step, item.next_step
    # An upgrade with the same kind of gap gets no snapshot advice: there it is not the way forward.
    [forward] = judge(mixed_plane(), Target(release=PROFILES.get("1.32")), PROFILES, JudgeOptions(fail_on=())).resources
    assert "snapshot" not in forward.next_step
