# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The etcd settings become the etcd action group's options in one place: kubeadm's certificates over https when none
is given, a task's own options first, and a key no module knows is an error naming it."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.kubeupgrade.storage.plugins.filter.etcd_connection import KUBEADM_CERTS, etcd_connection


def test_https_without_certificates_takes_kubeadm_s():
    assert etcd_connection({"endpoints": ["https://127.0.0.1:2379"], "prefix": "/registry"}) == {
        "etcd_endpoints": ["https://127.0.0.1:2379"], **KUBEADM_CERTS}


def test_given_certificates_and_plain_http_are_kept_as_they_are():
    given = {"endpoints": "https://10.0.0.1:2379, https://10.0.0.2:2379", "ca_cert": "/pki/ca.crt", "request_timeout": 5}
    assert etcd_connection(given) == {"etcd_endpoints": ["https://10.0.0.1:2379", "https://10.0.0.2:2379"],
                                      "etcd_ca_cert": "/pki/ca.crt", "etcd_request_timeout": 5,
                                      "etcd_client_cert": KUBEADM_CERTS["etcd_client_cert"],
                                      "etcd_client_key": KUBEADM_CERTS["etcd_client_key"]}
    assert etcd_connection({"endpoints": ["http://127.0.0.1:2379"]}) == {"etcd_endpoints": ["http://127.0.0.1:2379"]}


def test_nothing_given_is_no_option_and_a_task_s_own_options_win():
    assert etcd_connection({}) == {} and etcd_connection(None) == {}
    assert etcd_connection({"endpoints": ["http://127.0.0.1:2379"]},
                           {"etcd_endpoints": ["http://127.0.0.1:3379"], "snapshot": "/x.db", "etcd_ca_cert": None}) == {
        "etcd_endpoints": ["http://127.0.0.1:3379"]}


@pytest.mark.parametrize("settings, needle", [
    ({"endpoint": ["https://127.0.0.1:2379"]}, "unknown key(s) endpoint"),
    (["https://127.0.0.1:2379"], "must be a dictionary, got list"),
])
def test_a_setting_no_module_knows_is_one_error_naming_it(settings, needle):
    with pytest.raises(AnsibleFilterError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        etcd_connection(settings)
