# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The agreement gate refuses a name no apiserver serves by the one rule of ``resources.unserved`` (as
storage_version_info and storage_state do), with the same message; only when every apiserver answered with complete
discovery of the name's group, and never a name a CRD defines (its apiservers may not serve it yet)."""

from __future__ import annotations

import pytest

from ansible_collections.kubeupgrade.storage.plugins.module_utils import resources as names
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.model import (
    EndpointObservation,
    Observation,
    ObservedCrd,
    ObservedResource,
)
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.wait import _refuse_unknown_names
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ConfigurationError

URLS = ["https://10.0.0.11:6443", "https://10.0.0.12:6443"]


def _observation(reachable=(True, True), failed=(), crds=()):
    served = {"deployments.apps": ObservedResource("deployments.apps", "apps", "Deployment", True, "hash")}
    endpoints = [EndpointObservation(endpoint=url, reachable=up, resources=dict(served) if up else {},
                                     failed_groups=list(failed)) for url, up in zip(URLS, reachable)]
    return Observation(endpoints=endpoints, crds={name: ObservedCrd(name, name.split(".", 1)[1], "Widget", "widgets",
                                                                    "Namespaced") for name in crds})


def test_a_name_no_apiserver_serves_is_refused_with_the_message_every_module_gives():
    observation = _observation()
    with pytest.raises(ConfigurationError) as raised:
        _refuse_unknown_names(observation, ["deployments.apps", "deployment.apps"])
    assert str(raised.value) == names.describe_unserved("resources", {"deployment.apps": ["deployments.apps"]}, URLS)


@pytest.mark.parametrize("observation, requested", [
    (_observation(), ["deployments.apps"]),  # served
    (_observation(), []),  # nothing asked for
    (_observation(reachable=(True, False)), ["deployment.apps"]),  # an apiserver that did not answer may serve it
    (_observation(failed=("apps/v1",)), ["deployment.apps"]),  # a group whose discovery failed may hold it
    (_observation(crds=("widgets.example.com",)), ["widgets.example.com"]),  # a CRD defines it: served once established
])
def test_a_name_that_may_be_served_is_not_refused(observation, requested):
    _refuse_unknown_names(observation, requested)
