# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""storage_version_hash: compute, reverse lookup, argument errors, check mode; no cluster involved."""

from __future__ import annotations

import pytest

from ansible_collections.kubeupgrade.storage.plugins.module_utils.hashing import storage_version_hash
from ansible_collections.kubeupgrade.storage.plugins.module_utils.profiles import load_profiles
from ansible_collections.kubeupgrade.storage.plugins.modules import storage_version_hash as module

PROFILES = load_profiles()


@pytest.mark.parametrize("args,expected_hash,api_version", [
    ({"version": "v1", "kind": "Pod"}, "xPOwRZ+Yhw8=", "v1"),
    ({"group": "apps", "version": "v1", "kind": "Deployment"}, "8aSe+NMegvE=", "apps/v1"),
    ({"group": "flowcontrol.apiserver.k8s.io", "version": "v1beta3", "kind": "FlowSchema"}, "9NnFrw7ZEmA=", "flowcontrol.apiserver.k8s.io/v1beta3"),
    ({"resource": "events.events.k8s.io", "release": "1.32"}, "r2yiGXH7wu8=", "v1"),  # stored as core v1 Event
    ({"resource": "deployments.apps", "release": "v1.32.4"}, "8aSe+NMegvE=", "apps/v1"),
    ({"resource": "flowschemas.flowcontrol.apiserver.k8s.io", "version": "v1"}, "GJVAJZSZBIw=", "flowcontrol.apiserver.k8s.io/v1"),
])
def test_compute(run_module, args, expected_hash, api_version):
    failed, result = run_module(module, args)
    assert not failed, result
    assert result["hash"] == expected_hash and result["api_version"] == api_version and result["changed"] is False
    assert result["hash"] == storage_version_hash(result["group"], result["version"], result["kind"])


@pytest.mark.parametrize("args,version", [
    ({"hash": "9NnFrw7ZEmA=", "resource": "flowschemas.flowcontrol.apiserver.k8s.io"}, "v1beta3"),
    ({"hash": "9NnFrw7ZEmA=", "resource": "flowschemas.flowcontrol.apiserver.k8s.io", "release": "1.29"}, "v1beta3"),
    ({"hash": "9NnFrw7ZEmA=", "resource": "flowschemas.flowcontrol.apiserver.k8s.io", "release": "1.25"}, None),  # 1.25 has no v1beta3
    ({"hash": "gIwvi5rymmg=", "group": "example.com", "kind": "Widget", "candidates": ["v1alpha1", "v1", "v2"]}, "v1"),
    ({"hash": "aXSEt3iQTdQ=", "group": "example.com", "kind": "Widget", "candidates": ["v1alpha1", "v1"]}, "v1alpha1"),
    ({"hash": "r2yiGXH7wu8=", "resource": "events.events.k8s.io"}, "v1"),
    ({"hash": "Unknown", "resource": "pods"}, None),
    ({"hash": "AAAAAAAAAAA=", "kind": "Pod", "candidates": ["v1"]}, None),
])
def test_reverse_lookup(run_module, args, version):
    failed, result = run_module(module, args)
    assert not failed, result
    assert result["version"] == version
    if version is None:
        assert result["api_version"] is None and "unknown" in result["msg"]
    else:
        assert storage_version_hash(result["group"], version, result["kind"]) == args["hash"]
    if "resource" in args and "release" not in args:
        assert set(result["candidates"]) >= PROFILES.candidate_versions(args["resource"])


def test_check_mode_gives_the_same_answer(run_module):
    assert run_module(module, {"version": "v1", "kind": "Pod"}, check_mode=True) == run_module(module, {"version": "v1", "kind": "Pod"})


@pytest.mark.parametrize("args,fragment", [
    ({"version": "v1"}, "kind is required"),
    ({"kind": "Pod"}, "give version to compute a hash"),
    ({"hash": "xPOwRZ+Yhw8=", "kind": "Pod"}, "needs candidates"),
    ({"resource": "pods", "release": "1.99"}, "no release profile for Kubernetes 1.99"),
    ({"resource": "deployments", "release": "1.32"}, "has no resource 'deployments'"),
    ({"resource": "gizmos.example.org", "hash": "xPOwRZ+Yhw8="}, "no release profile has a resource 'gizmos.example.org'"),
    ({"release": "1.32", "version": "v1", "kind": "Pod"}, "release is only used with resource"),
    ({"resource": "pods", "release": "1.32", "profiles": {"releases": {"1.32": {"resources": {"pods": {"storage": 3}}}}}}, "the profiles option"),
    ({"version": "v1", "kind": "Pod", "host": "https://x"}, "Unsupported parameters"),
])
def test_errors(run_module, args, fragment):
    failed, result = run_module(module, args)
    assert failed and fragment in result["msg"]


def test_profiles_file_adds_a_release(run_module, tmp_path):
    path = tmp_path / "p.yml"
    path.write_text('releases:\n  "1.40":\n    extends: "1.37"\n    resources:\n      pods: {storage: v2, served: [v2]}\n', encoding="utf-8")
    failed, result = run_module(module, {"resource": "pods", "release": "1.40", "profiles_file": str(path)})
    assert not failed and result["version"] == "v2" and result["hash"] == storage_version_hash("", "v2", "Pod")
