# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rehearsal's pure parts: flags from a static pod, what the apiserver's log says, verdicts, and how the
check folds a rehearsal into its verdicts."""

from __future__ import annotations

import pytest

from ansible_collections.kubeupgrade.storage.plugins.module_utils._judge import rehearsed
from ansible_collections.kubeupgrade.storage.plugins.module_utils._judge.model import ResourceVerdict
from ansible_collections.kubeupgrade.storage.plugins.module_utils._rehearse import model
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ConfigurationError

KUBEADM_POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "kube-apiserver"}, "spec": {"containers": [
    {"name": "kube-apiserver", "command": ["kube-apiserver", "--advertise-address=10.0.0.11", "--etcd-servers=https://127.0.0.1:2379",
                                           "--encryption-provider-config=/etc/kubernetes/enc.yaml", "--feature-gates=A=true,B=false",
                                           "--service-cluster-ip-range=10.96.0.0/12"], "args": ["--runtime-config", "x/v1=true"]}]}}


def test_flags_from_a_kubeadm_static_pod():
    flags = model.flags_from_manifest(KUBEADM_POD)
    assert flags["encryption-provider-config"] == "/etc/kubernetes/enc.yaml"
    assert flags["feature-gates"] == "A=true,B=false" and flags["runtime-config"] == "x/v1=true"
    assert flags["etcd-servers"] == "https://127.0.0.1:2379"


@pytest.mark.parametrize("doc, message", [
    ({"kind": "Deployment"}, "not a Pod manifest"),
    ({"kind": "Pod", "spec": {"containers": [{"name": "etcd", "command": ["etcd"]}]}}, "no container named kube-apiserver"),
    ("text", "not a Pod manifest"),
])
def test_a_manifest_that_is_not_the_apiserver_pod_is_refused(doc, message):
    with pytest.raises(ValueError, match=message):
        model.flags_from_manifest(doc)


LOG = """I1125 12:00:00.000000 1 server.go:1] starting
E1125 12:00:01.000000 1 status.go:71] apiserver received an error: no kind "FlowSchema" is registered for version "flowcontrol.apiserver.k8s.io/v1" in scheme
E1125 12:00:02.000000 1 status.go:71] apiserver received an error: no kind "FlowSchema" is registered for version "flowcontrol.apiserver.k8s.io/v1" in scheme
W1125 12:00:03.000000 1 feature_gate.go:328] unrecognized feature gate: Gone
F1125 12:00:04.000000 1 hooks.go:203] PostStartHook "x" failed
"""


def test_the_log_gives_each_error_once_the_kinds_it_cannot_decode_and_ignored_gates():
    lines = model.problem_lines(LOG)
    assert len(lines) == 2 and lines[-1].startswith("F1125")
    assert model.decode_errors_in(lines) == ["FlowSchema (flowcontrol.apiserver.k8s.io/v1)"]
    assert model.ignored_gates(LOG) == ["Gone"]


@pytest.mark.parametrize("lines, step", [
    (["Error: unrecognized feature gate: Gone"], "does not know the feature gate Gone"),
    (["Error: unknown flag: --old-flag"], "does not accept --old-flag"),
    (['E1 x] no kind "FlowSchema" is registered for version "flowcontrol.apiserver.k8s.io/v1"'], "restore the etcd snapshot"),
    (["E1 x] something else"], "read the apiserver's log lines"),
])
def test_a_start_failure_blocks_with_a_next_step_that_fits_its_cause(lines, step):
    failure = model.start_failure(lines, 1, 3.0, {"feature-gates": "feature_gates"})
    assert failure["verdict"] == "unsafe" and step in failure["next_step"]
    assert "exited with code 1" in failure["reason"]


@pytest.mark.parametrize("quote", ['\\"', '"'], ids=["klog-escaped", "plain"])
def test_a_start_failure_names_every_kind_its_log_names_not_only_those_of_the_lines_kept(quote):
    kinds = [("ResourceClaim", "resource.k8s.io/v1alpha2"), ("ResourceClaimTemplate", "resource.k8s.io/v1alpha2"),
             ("ResourceClass", "resource.k8s.io/v1alpha2"), ("PodSchedulingContext", "resource.k8s.io/v1alpha2"),
             ("ClusterCIDR", "networking.k8s.io/v1alpha1"), ("IPAddress", "networking.k8s.io/v1alpha1")]
    other = [f"E1128 10:01:{i:02d}.000000 1 reflector.go:1] other failure {i}" for i in range(20)]
    decode = [f'E1128 10:00:{i:02d}.000000 1 cacher.go:1] "Failed" err="no kind {quote}{k}{quote} is registered for '
              f'version {quote}{v}{quote} in scheme {quote}pkg/api/legacyscheme/scheme.go:30{quote}"'
              for i, (k, v) in enumerate(kinds)]
    log = "\n".join(other[:10] + decode + other[10:])
    lines = model.problem_lines(log)
    assert model.decode_errors_in(lines) == []  # the dozen lines kept hold none of them
    failure = model.start_failure(lines, None, 60.0, {}, log)
    for kind, version in kinds:
        assert f"{kind} ({version})" in failure["reason"], failure["reason"]


def test_verdicts_from_reads_and_what_blocks():
    reads = [model.ResourceRead("pods", keys=3, served=True, objects_read=3),
             model.ResourceRead("widgets.example.com", keys=2, served=True, undecodable=1, undecodable_names=["ns/w1"]),
             model.ResourceRead("clustercidrs.networking.k8s.io", keys=1, removed_names=["pods"]),
             model.ResourceRead("things.example.com", keys=1, served=True, error="403")]
    summary = model.summarize(reads, None, ["unsafe", "removed"])
    verdicts = {name: entry["verdict"] for name, entry in summary["resources"].items()}
    assert verdicts == {"pods": "safe", "widgets.example.com": "unsafe", "clustercidrs.networking.k8s.io": "removed",
                        "things.example.com": "unknown"}
    assert [b["subject"] for b in summary["blocking"]] == ["clustercidrs.networking.k8s.io", "widgets.example.com"]
    assert summary["verdict"] == "unsafe"


def rehearsal(**resources):
    return {"rehearsed_at": "2026-11-25T12:00:00Z", "target_release": "1.33", "target_git_version": "v1.33.5",
            "source": {"revision": 7}, "resources": resources, "start_failure": None}


def verdict(name, value):
    return ResourceVerdict(resource=name, verdict=value, reason="predicted", next_step="predicted step")


def test_measured_failures_beat_release_data_and_a_migration_keeps_its_next_step():
    results = [verdict("pods", "safe"), verdict("secrets", "needs_migration"), verdict("configmaps", "unsafe")]
    found = rehearsal(
        pods={"verdict": "unsafe", "reason": "could not decode 1", "next_step": "rewrite", "undecodable_names": ["a/p"]},
        secrets={"verdict": "unsafe", "reason": "could not decode 2", "next_step": "rewrite", "undecodable_names": ["a/s"]},
        configmaps={"verdict": "safe", "objects_read": 4},
        leases={"verdict": "removed", "reason": "not served", "next_step": "delete", "removed_names": ["l"]})
    rehearsed.apply(results, found)
    by_name = {r.resource: r for r in results}
    assert by_name["pods"].verdict == "unsafe" and by_name["pods"].objects_named == ["a/p"] and by_name["pods"].next_step == "rewrite"
    assert by_name["secrets"].verdict == "needs_migration" and by_name["secrets"].next_step == "predicted step"
    assert by_name["secrets"].objects_named == ["a/s"]
    assert by_name["configmaps"].verdict == "unsafe" and "read all 4" in by_name["configmaps"].reason
    assert by_name["leases"].verdict == "removed" and by_name["leases"].target_source == "rehearsal"


def test_a_target_that_did_not_start_is_a_blocking_finding_and_another_release_is_refused():
    found = dict(rehearsal(), start_failure={"reason": "exited", "next_step": "fix"}, fatal_log=["F1 x] boom"])
    [finding] = rehearsed.findings(found)
    assert finding.verdict == "unsafe" and "boom" in finding.reason and finding.scope == "rehearsal"
    with pytest.raises(ConfigurationError, match="rehearsed v1.33.5, but this check judges target_release 1.32"):
        rehearsed.validate(rehearsal(), "1.32")
    with pytest.raises(ConfigurationError, match="registered result of kubeupgrade.storage.storage_rehearsal"):
        rehearsed.validate({"changed": False}, "1.33")
    rehearsed.validate(rehearsal(), "1.33")


def test_no_free_port_on_loopback_is_one_clear_error(monkeypatch):
    from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd import scratch

    class Exhausted:
        def __init__(self, *_args):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *_args):
            return False

        def bind(self, _address):
            raise OSError(99, "Cannot assign requested address")

    monkeypatch.setattr(scratch.socket, "socket", Exhausted)
    with pytest.raises(scratch.ScratchError, match="no free port on 127.0.0.1 .*Cannot assign requested address"):
        scratch.free_port()


def test_the_compatibility_version_flags_come_from_the_manifest_and_the_options():
    from ansible_collections.kubeupgrade.storage.plugins.module_utils._rehearse import runner

    manifest = {"emulated-version": "1.35", "min-compatibility-version": "1.34", "runtime-config": "api/all=true"}
    flags = runner.storage_flags({"emulation_forward_compatible": "true"}, manifest)
    assert flags == {"emulated-version": "1.35", "min-compatibility-version": "1.34", "runtime-config": "api/all=true",
                     "emulation-forward-compatible": "true"}
    flags = runner.storage_flags({"emulated_version": "", "min_compatibility_version": ""}, manifest)  # step 2: dropped
    assert flags == {"runtime-config": "api/all=true"}


@pytest.mark.parametrize("options, needle", [
    ({"emulated_version": "1.35.2"}, "emulated_version: '1.35.2' is not a minor release"),
    ({"emulated_version": "latest"}, "emulated_version: 'latest' is not a minor release"),
    ({"min_compatibility_version": "35"}, "min_compatibility_version: '35' is not a minor release"),
    ({"emulation_forward_compatible": "yes please"}, "emulation_forward_compatible: 'yes please' is not true or false"),
])
def test_a_bad_compatibility_version_flag_is_one_clear_error_before_anything_starts(options, needle):
    from ansible_collections.kubeupgrade.storage.plugins.module_utils._rehearse import runner
    from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match=needle):
        runner.storage_flags(options, {})
    assert runner.storage_flags({"emulated_version": "kube=1.35", "emulation_forward_compatible": "True"}, {})
