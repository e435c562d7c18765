# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The agreement module's result is built in one place, agreed or not (it was rebuilt by hand for a failure)."""

from __future__ import annotations

from types import SimpleNamespace

from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.agreement import Agreement
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.wait import result_fields


class _Endpoint:
    def __init__(self, url):
        self.url = self.endpoint = url
        self.resources = {"pods": SimpleNamespace(storage_version="v1")}

    def summary(self):
        return {"endpoint": self.url, "reachable": True}


class _Observation:
    endpoints = [_Endpoint("https://a:6443"), _Endpoint("https://b:6443")]

    def failed_group_versions(self, ignore=()):
        return {"metrics.k8s.io/v1beta1": ["https://b:6443"]}


def test_a_wait_not_met_is_not_agreed_although_its_last_poll_agreed():
    last = Agreement(agreed=True, hashes={"pods": {"https://a:6443": "h", "https://b:6443": "h"}})
    failed = result_fields(last, _Observation(), polls=3, agreed=False)
    assert failed["agreed"] is False and failed["polls_observed"] == 3
    assert failed["failed_group_versions"] == {"metrics.k8s.io/v1beta1": ["https://b:6443"]}
    assert [e["endpoint"] for e in failed["endpoints"]] == ["https://a:6443", "https://b:6443"]


def test_the_same_fields_agreed_or_not():
    agreement = Agreement(agreed=False, hashes={"pods": {"https://a:6443": "h1", "https://b:6443": "h2"}}, disagreeing=["pods"])
    failed = result_fields(agreement, _Observation(), polls=2, agreed=False)
    met = result_fields(Agreement(agreed=True), _Observation(), polls=2, agreed=True)
    assert set(failed) == set(met)
    assert failed["disagreeing"] == [{"resource": "pods", "endpoints": {"https://a:6443": "h1", "https://b:6443": "h2"}}]
    assert met["failed_group_versions"] == {} and met["waiting_helps"] is True
