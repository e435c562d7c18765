# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Counting without the grant: a LIST the identity may not make (403) is "not counted", naming the grant, and the
verdict stays as strict as without counting. The other counts of the same check are made."""

from __future__ import annotations

import pytest
from kube_fakes import FakeApiClient

from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe import apiserver_io
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.model import (
    EndpointObservation,
    Observation,
    ObservedResource,
)

EP = "https://10.0.0.11:6443"
SA = "system:serviceaccount:kube-system:kubeupgrade-storage-preflight"


def _forbidden(resource, group=""):
    """The Status body a real kube-apiserver answers for a LIST RBAC does not grant."""
    return (403, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "Forbidden",
                  "message": f'{resource} is forbidden: User "{SA}" cannot list resource "{resource}" in API group "{group}" '
                             "at the cluster scope", "details": {"kind": resource}, "code": 403})


def _observed(name, group, kind, version):
    return ObservedResource(name=name, group=group, kind=kind, namespaced=True, storage_hash="x",
                            served_versions=[version], storage_version=version)


OBSERVATION = Observation(endpoints=[EndpointObservation(endpoint=EP, reachable=True, release="1.32", resources={
    "secrets": _observed("secrets", "", "Secret", "v1"),
    "configmaps": _observed("configmaps", "", "ConfigMap", "v1"),
    "widgets.example.com": _observed("widgets.example.com", "example.com", "Widget", "v1")})],
    crds={"widgets.example.com": object()})
NO_RETRY = apiserver_io.Tuning(sleep=lambda _s: None)  # the default policy, without its sleeps


@pytest.mark.parametrize("name,path,answer,present,detail", [
    ("secrets", "/api/v1/secrets", _forbidden("secrets"), None,
     "not counted: needs list on secrets, which kubeupgrade-storage-count-objects leaves out on purpose"),
    ("widgets.example.com", "/apis/example.com/v1/widgets", _forbidden("widgets", "example.com"), None,
     "not counted: needs list on widgets.example.com (apiGroups: [\"example.com\"], resources: [\"widgets\"], verbs: "
     "[\"list\"]; kubeupgrade-storage-count-objects-custom-resources (rendered by the custom_resource_role filter)"),
    ("configmaps", "/api/v1/configmaps", (200, {"kind": "PartialObjectMetadataList", "items": [{"metadata": {"name": "a"}}]}),
     True, ""),
], ids=["secret-refused-on-purpose", "custom-resource-without-its-role", "granted"])
def test_a_refused_count_is_not_counted_and_names_the_grant(name, path, answer, present, detail):
    client = FakeApiClient(EP, {path: answer})
    counts = apiserver_io.count_objects([client], OBSERVATION, [name], tuning=NO_RETRY)
    assert counts[name].present is present and counts[name].endpoint == EP
    assert detail in counts[name].detail and "HTTP" not in counts[name].detail
    assert client.requests_to("GET") == [("GET", path)]  # one LIST, never retried: a 403 does not heal


def test_one_refused_count_does_not_stop_the_others():
    client = FakeApiClient(EP, {"/api/v1/secrets": _forbidden("secrets"),
                                "/api/v1/configmaps": (200, {"kind": "PartialObjectMetadataList", "items": []})})
    counts = apiserver_io.count_objects([client], OBSERVATION, ["secrets", "configmaps"], tuning=NO_RETRY)
    assert counts["secrets"].present is None and counts["configmaps"].present is False
