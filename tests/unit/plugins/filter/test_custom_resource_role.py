# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""custom_resource_role: the ClusterRole for a cluster's custom resources; bad input is a filter error."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.kubeupgrade.storage.plugins.filter.custom_resource_role import FilterModule, custom_resource_role


def test_the_crds_of_storage_version_info_give_list_get_patch_per_group():
    crds = {"widgets.example.com": {"group": "example.com"}, "gadgets.example.com": {"group": "example.com"},
            "crontabs.stable.example.org": {"group": "stable.example.org"}}
    role = custom_resource_role(crds)
    assert role["kind"] == "ClusterRole" and role["metadata"]["name"] == "kubeupgrade-storage-migrate-custom-resources"
    assert role["rules"] == [
        {"apiGroups": ["example.com"], "resources": ["gadgets", "widgets"], "verbs": ["list", "get", "update", "patch"]},
        {"apiGroups": ["stable.example.org"], "resources": ["crontabs"], "verbs": ["list", "get", "update", "patch"]}]


@pytest.mark.parametrize("crds,use,match", [
    ("widgets.example.com", "migrate", "custom_resource_role: expects CRDs"),
    (["pods"], "migrate", "is not a custom resource name"),
    ([], "delete", "use must be one of count, migrate"),
])
def test_bad_input_is_a_filter_error(crds, use, match):
    with pytest.raises(AnsibleFilterError, match=match):
        custom_resource_role(crds, use)


def test_registered():
    assert FilterModule().filters()["custom_resource_role"] is custom_resource_role
