# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""apiserver_endpoints: one URL per host, by the one rule every role uses; two hosts with one URL are refused."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.kubeupgrade.storage.plugins.filter.apiserver_endpoints import apiserver_endpoints


def test_url_variable_else_ansible_host_else_the_name_with_a_trailing_slash_dropped():
    hostvars = {"cp1": {"kubeupgrade_apiserver_url": "https://10.0.0.11:6443/"}, "cp2": {"ansible_host": "10.0.0.12"},
                "cp3": {"ansible_host": ""}}
    assert apiserver_endpoints(["cp1", "cp2", "cp3"], hostvars) == [
        "https://10.0.0.11:6443", "https://10.0.0.12:6443", "https://cp3:6443"]


def test_one_host_gives_the_same_endpoint_as_in_the_whole_list():
    """The rolling upgrade finds its host's apiserver in the check's endpoints by this value."""
    hostvars = {"cp1": {"kubeupgrade_apiserver_url": "https://10.0.0.11:6443/"}, "cp2": {"ansible_host": ""}}
    for host in hostvars:
        assert apiserver_endpoints([host], hostvars)[0] in apiserver_endpoints(list(hostvars), hostvars)


def test_two_hosts_with_one_url_are_a_load_balancer_error_naming_them():
    hostvars = {name: {"kubeupgrade_apiserver_url": "https://lb.example:6443"} for name in ("cp1", "cp2", "cp3")}
    with pytest.raises(AnsibleFilterError, match=r"hosts cp1, cp2, cp3 share the apiserver URL https://lb.example:6443"):
        apiserver_endpoints(["cp1", "cp2", "cp3"], hostvars)
