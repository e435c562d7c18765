# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""module_utils/rbac.py: the rules of the count and migrate uses, for built-ins and for a cluster's CRDs."""

from __future__ import annotations

import pytest

from ansible_collections.kubeupgrade.storage.plugins.module_utils import rbac


@pytest.mark.parametrize("use,names,expected", [
    ("migrate", ["secrets", "configmaps", "deployments.apps", "events.events.k8s.io"], [
        {"apiGroups": [""], "resources": ["configmaps", "secrets"], "verbs": ["list", "get", "update", "patch"]},
        {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["list", "get", "update", "patch"]},
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["list", "get", "update", "patch"]}]),
    ("count", ["secrets", "configmaps", "widgets.example.com"], [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]},
        {"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["list"]}]),
    ("count", ["secrets"], []),
    ("migrate", [], []),
], ids=["migrate-per-group", "count-leaves-secrets-out", "count-only-secrets", "nothing"])
def test_one_rule_per_group_with_the_verbs_of_the_use(use, names, expected):
    assert rbac.use_rules(use, names) == expected


@pytest.mark.parametrize("name", ["pods/exec", "*", "*.apps", "deployments.*"])
def test_a_subresource_or_a_wildcard_is_never_a_rule(name):
    with pytest.raises(ValueError, match="no subresource, no wildcard"):
        rbac.rules([name], ["list"])


@pytest.mark.parametrize("crds,expected", [
    ({"widgets.example.com": {"group": "example.com"}, "gadgets.example.com": {}}, ["gadgets.example.com", "widgets.example.com"]),
    (["widgets.example.com", " widgets.example.com "], ["widgets.example.com"]),
    ([{"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "x.y.io"},
       "spec": {"group": "stable.example.com", "names": {"plural": "crontabs"}}}], ["crontabs.stable.example.com"]),
    ([{"metadata": {"name": "widgets.example.com"}}], ["widgets.example.com"]),
    (None, []),
    ({}, []),
], ids=["info-result", "names", "crd-object", "metadata-name-only", "none", "empty"])
def test_custom_resource_names_from_any_form(crds, expected):
    assert rbac.custom_resource_names(crds) == expected


@pytest.mark.parametrize("crds,match", [
    ("widgets.example.com", "expects CRDs as a mapping by name"),
    (42, "expects CRDs as a mapping by name"),
    ([{"spec": {}}], "item 0 is neither a CRD name"),
    (["pods"], r"item 0 \('pods'\) is not a custom resource name"),
    (["widgets.example.com/status"], "is not a custom resource name"),
    (["*.example.com"], "is not a custom resource name"),
], ids=["string", "number", "no-names", "core-name", "subresource", "wildcard"])
def test_custom_resource_names_refuse_what_is_not_a_crd(crds, match):
    with pytest.raises(ValueError, match=match):
        rbac.custom_resource_names(crds)


def test_the_custom_resource_role_is_named_after_the_shipped_role_and_says_what_it_covers():
    role = rbac.custom_resource_role({"widgets.example.com": {}}, "count")
    assert role["metadata"]["name"] == "kubeupgrade-storage-count-objects-custom-resources"
    assert role["metadata"]["annotations"]["kubeupgrade.storage/resources"] == "widgets.example.com"
    assert role["rules"] == [{"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["list"]}]
    assert rbac.custom_resource_role([], name="mine")["metadata"]["name"] == "mine"
    # the collection's own records are in the shipped migrate role, not rendered again
    assert rbac.custom_resource_role(["storagestates.migration.k8s.io"])["rules"] == []
    with pytest.raises(ValueError, match="use must be one of count, migrate"):
        rbac.custom_resource_role([], "delete")


@pytest.mark.parametrize("name,custom,says", [
    ("secrets", False, "not counted: needs list on secrets, which kubeupgrade-storage-count-objects leaves out on purpose"),
    ("deployments.apps", False, 'not counted: needs list on deployments.apps (apiGroups: ["apps"], resources: '
                                '["deployments"], verbs: ["list"]; kubeupgrade-storage-count-objects grants it)'),
    ("widgets.example.com", True, "kubeupgrade-storage-count-objects-custom-resources (rendered by the "
                                  "custom_resource_role filter) grants it"),
])
def test_not_counted_names_the_grant(name, custom, says):
    assert says in rbac.not_counted(name, custom)
