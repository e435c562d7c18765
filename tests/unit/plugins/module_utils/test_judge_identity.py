# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every apiserver the cluster lists (its identity Leases) must be observed: a load balancer URL hides the others."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from ansible_collections.kubeupgrade.storage.plugins.module_utils._judge import findings
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.model import (
    EndpointObservation,
    IdentityLease,
    Observation,
)

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=timezone.utc)


def lease(host, age_seconds=5):
    renewed = (NOW - timedelta(seconds=age_seconds)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return IdentityLease(name=f"apiserver-{host}", hostname=host, renew_time=renewed)


def observation(endpoints, leases):
    return Observation(endpoints=[EndpointObservation(endpoint=url, reachable=True, release="1.32", ready=True)
                                  for url in endpoints], identity_leases=leases)


def test_one_url_for_three_listed_apiservers_is_a_blocking_finding_naming_them():
    found = findings.identity_findings(observation(["https://lb:6443"], [lease("cp1"), lease("cp2"), lease("cp3")]), NOW)
    assert len(found) == 1 and found[0].verdict == "unknown" and found[0].scope == "apiserver"
    assert "lists 3 apiservers" in found[0].reason and "cp1, cp2, cp3" in found[0].reason
    assert "1 were observed" in found[0].reason and "load balancer" in found[0].next_step


@pytest.mark.parametrize("leases", [[], [lease("cp1"), lease("cp2")]], ids=["no-leases", "as-many"])
def test_as_many_apiservers_observed_as_listed_or_no_leases_is_no_finding(leases):
    assert findings.identity_findings(observation(["https://cp1:6443", "https://cp2:6443"], leases), NOW) == []


def test_an_expired_lease_of_an_apiserver_that_is_gone_does_not_count():
    leases = [lease("cp1"), lease("cp2"), lease("old-cp", age_seconds=7200)]
    assert findings.identity_findings(observation(["https://cp1:6443", "https://cp2:6443"], leases), NOW) == []
