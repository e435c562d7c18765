# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The shipped RBAC roles (``rbac/``) grant each use exactly what it requests: no wildcard, no unused grant.

Each use (pre-flight, records, migration with every backend and the audit-driven migration) runs its
modules in-process against one simulated control plane. ``problems`` then names everything wrong with a
set of roles against what the uses requested:

- a request of a use that the roles its identity is bound to do not grant;
- a wildcard in a rule's verbs, API groups or resources;
- a hand-written grant (verb, group, resource) that no use bound to it requests;
- a rule of the generated roles (``kubeupgrade-storage-count-objects``, ``kubeupgrade-storage-migrate``) on
  built-in resources that is not what ``module_utils/rbac.py`` generates from the release data, or a verb of
  theirs that no use requests.

The shipped roles have no problem; the tests at the end change them (a wildcard, an unused grant, a missing
``get`` for the audit-driven migration, ...) and show that each change is named. Custom resources are granted
by the roles the ``custom_resource_role`` filter renders for the plane's CRDs, as an operator would.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
from collections import Counter

import pytest
import rbac_recorder
import real_cluster
from ansible.module_utils.testing import patch_module_args  # ansible-core 2.19+, the oldest supported
from apisim.seeds import load_manifest

from ansible_collections.kubeupgrade.storage.plugins.filter.custom_resource_role import custom_resource_role
from ansible_collections.kubeupgrade.storage.plugins.module_utils import rbac
from ansible_collections.kubeupgrade.storage.plugins.module_utils.profiles import load_profiles
from ansible_collections.kubeupgrade.storage.plugins.module_utils.resources import GroupResource
from ansible_collections.kubeupgrade.storage.plugins.modules import (
    storage_migration,
    storage_state,
    storage_version_agreement,
    storage_version_check,
    storage_version_info,
)

WIDGETS = "widgets.example.com"
COUNT_CUSTOM = rbac.COUNT_ROLE + rbac.CUSTOM_SUFFIX
MIGRATE_CUSTOM = rbac.MIGRATE_ROLE + rbac.CUSTOM_SUFFIX

# Which roles each use is bound to: rbac/bindings.example.yaml, plus the roles rendered for the custom resources.
USES = {
    "preflight": ("kubeupgrade-storage-observe", rbac.COUNT_ROLE, COUNT_CUSTOM),
    "records": ("kubeupgrade-storage-observe", "kubeupgrade-storage-records"),
    "migrate": ("kubeupgrade-storage-observe", "kubeupgrade-storage-records", rbac.MIGRATE_ROLE, MIGRATE_CUSTOM),
}
# The roles whose rules on objects are generated (from the release data, or for the plane's CRDs), and their use.
GENERATED = {f"ClusterRole {rbac.COUNT_ROLE}": "count", f"ClusterRole {rbac.MIGRATE_ROLE}": "migrate",
             f"ClusterRole {COUNT_CUSTOM}": "count", f"ClusterRole {MIGRATE_CUSTOM}": "migrate"}
USE_OF_VERBS = {"count": "preflight", "migrate": "migrate"}
# Requests a use makes that its roles refuse on purpose: the pre-flight's count of a resource whose objects are
# credentials. The 403 gives "not counted: needs list on secrets" (tests/unit/plugins/module_utils/test_count_rbac.py,
# and on real apiservers tests/integration/test_real_rbac.py).
REFUSED_ON_PURPOSE = {("preflight", ("list", GroupResource.parse(name).group, GroupResource.parse(name).resource, ""))
                      for name in rbac.NOT_COUNTED}


def module_run(plane, module, **args):
    """Run a module's real main() in-process; its JSON answer is what it printed."""
    params = {"kubeconfig": plane.kubeconfig, "endpoints": plane.endpoints}
    params.update(args)
    out = io.StringIO()
    with patch_module_args(params), contextlib.redirect_stdout(out):
        with pytest.raises(SystemExit):
            module.main()
    result = json.loads(out.getvalue().strip().splitlines()[-1])
    assert not result.get("failed"), result.get("msg")
    return result


def audit_counts(plane) -> Counter:
    return Counter({(e["verb"], e["group"], e["resource"], e["subresource"]): e["count"]
                    for e in plane.admin._call("audit")})


class Steps:
    """Each module run's requests and the namespaces it asked in, per use."""

    def __init__(self, plane):
        self.plane = plane
        self.found = []  # (use, step, requests, namespaces)
        self.crds = {}

    def run(self, use, step, module, **args):
        before = audit_counts(self.plane)
        self.plane.admin.reset_stats()
        result = module_run(self.plane, module, **args)
        requests = set((audit_counts(self.plane) - before).keys())
        self.found.append((use, step, requests, rbac_recorder.namespaces_of(self.plane.admin.stats())))
        return result


def _use_preflight(steps, workdir):
    info = steps.run("preflight", "storage_version_info", storage_version_info,
                     include=["crds", "storage_states", "storage_versions", "leases"])
    steps.crds = info["crds"]  # what an operator renders the custom-resource roles from
    result = steps.run("preflight", "storage_version_check", storage_version_check, target_release="1.33", fail_on=[])
    assert result["counts"], result  # something was counted: the LIST with limit=1 is part of this use
    steps.run("preflight", "storage_version_agreement", storage_version_agreement, polls=1, interval=0.1, timeout=10)


def _use_records(steps, workdir):
    # A record written by someone else (no annotations of ours): updated in place, not re-created.
    steps.plane.admin.put_raw("storagestates.migration.k8s.io", None, "secrets", "migration.k8s.io/v1alpha1", {
        "metadata": {"name": "secrets"}, "spec": {"resource": {"group": "", "resource": "secrets"}}, "status": {}})
    steps.run("records", "storage_state", storage_state, resources=["configmaps", "secrets", WIDGETS], install_crd=True)
    steps.run("records", "storage_state absent", storage_state, resources=["configmaps"], state="absent")


AUDITED = "audited"


def audit_listing(namespace, name):
    """A storage_version_audit result naming one ConfigMap stored in a version the target cannot decode, among ten it
    counted (less than a quarter: the migration reads it with a GET, not by LISTs of every ConfigMap)."""
    return {"keys_scanned": 10, "endpoint": "https://127.0.0.1:2379", "measured_at": "2026-01-01T00:00:00Z", "not_readable": 1, "resources": {"configmaps": {
        "judged": True, "objects": 10, "not_readable": 1, "not_readable_names": [f"{namespace}/{name}"],
        "readable_versions": ["v1"], "versions": [{"api_version": "v0", "count": 1, "names": [f"{namespace}/{name}"]}]}}}


def _use_migrate(steps, workdir):
    common = {"poll_interval": 0.1, "checkpoint_dir": str(workdir / "checkpoints"), "timeout": 60, "stall_timeout": 30}
    steps.run("migrate", "client", storage_migration, resources=[WIDGETS], backend="client", **common)
    steps.run("migrate", "client apply", storage_migration, resources=["deployments.apps"], backend="client",
              write="apply", **common)
    steps.run("migrate", "intree", storage_migration, resources=["configmaps"], backend="intree", **common)
    _install_crd(steps.plane, "storage_migration_crd.json")
    steps.run("migrate", "sigs", storage_migration, resources=["secrets"], backend="sigs", **common)
    # The audit-driven migration (upgrade.yml with etcd settings): a GET and a write of each object the audit names.
    steps.plane.admin.put_raw("configmaps", "default", AUDITED, "v1", {"data": {"k": "v"}})
    result = steps.run("migrate", "objects_from_audit", storage_migration, objects_from_audit=audit_listing("default", AUDITED),
                       **common)
    assert [m["objects_migrated"] for m in result["migrations"]] == [1], result["migrations"]


def _install_crd(plane, manifest):
    crd = load_manifest(manifest)
    plane.admin.put_raw("customresourcedefinitions.apiextensions.k8s.io", None, crd["metadata"]["name"],
                        "apiextensions.k8s.io/v1beta1", crd)


class Found:
    """What the uses requested on one plane, and the roles rendered for its custom resources."""

    def __init__(self, steps, crds, rendered):
        self.steps = steps  # [(use, step, requests, namespaces)]
        self.crds = crds  # the CRDs storage_version_info returned
        self.rendered = rendered  # [Rule] of the custom-resource roles rendered from them


@pytest.fixture(scope="module")
def found(tmp_path_factory):
    """Every use run in order against one plane with the demo data (records before migration, as operators do)."""
    from apisim.harness import ControlPlane

    if real_cluster.real_kubeconfig():
        pytest.skip(real_cluster.NEEDS_ADMIN)
    workdir = tmp_path_factory.mktemp("rbac")
    plane = ControlPlane(workdir / "plane", apiservers=2, releases="1.32", tls=True, seed="demo",
                         migrator_delay=0.1).start()
    try:
        steps = Steps(plane)
        for action in (_use_preflight, _use_records, _use_migrate):
            action(steps, workdir)
        rendered = [rule for use in ("count", "migrate")
                    for rule in rbac_recorder.rules_of(custom_resource_role(steps.crds, use), "(rendered)")]
        rbac_recorder.check_plane(plane, rendered)  # every request of the plane, whatever the use
        yield Found(steps.found, steps.crds, rendered)
    finally:
        plane.stop()


# -- what is wrong with a set of roles ------------------------------------------------------------------------------


def _role_name(rule) -> str:
    return rule.role.split(" ", 1)[1]


def _atoms(rule):
    """A rule as (verb, group, resource-or-url) grants, one per combination."""
    if rule.non_resource_urls:
        return [(verb, "", rbac_recorder.NONRESOURCE + url) for verb in rule.verbs for url in rule.non_resource_urls]
    return [(verb, group, resource) for verb in rule.verbs for group in rule.api_groups for resource in rule.resources]


def _narrowed(rule, atom):
    verb, group, resource = atom
    if rule.non_resource_urls:
        return dataclasses.replace(rule, verbs=(verb,), non_resource_urls=(resource[len(rbac_recorder.NONRESOURCE):],))
    return dataclasses.replace(rule, verbs=(verb,), api_groups=(group,), resources=(resource,))


def _requests_of_roles(rule, steps):
    """(request, namespaces) of every step whose use is bound to the rule's role."""
    for use, _step, requests, namespaces in steps:
        if _role_name(rule) in USES[use]:
            for request in requests:
                yield request, namespaces


def _used(rule, steps) -> bool:
    return any(rbac_recorder.granting(request, [rule], namespaces) for request, namespaces in _requests_of_roles(rule, steps))


def expected_generated(rendered_crds):
    """{role: [rule dicts]} the generated roles must hold on objects: the release data's built-ins, the plane's CRDs."""
    builtin = rbac.builtin_resources(load_profiles())
    return {f"ClusterRole {rbac.COUNT_ROLE}": rbac.use_rules("count", builtin),
            f"ClusterRole {rbac.MIGRATE_ROLE}": rbac.use_rules("migrate", builtin) + rbac.use_rules("migrate", rbac.OWN_RESOURCES),
            f"ClusterRole {COUNT_CUSTOM}": rbac.use_rules("count", rbac.custom_resource_names(rendered_crds)),
            f"ClusterRole {MIGRATE_CUSTOM}": rbac.use_rules("migrate", rbac.custom_resource_names(rendered_crds))}


def _as_dict(rule) -> dict:
    return {"apiGroups": list(rule.api_groups), "resources": list(rule.resources), "verbs": list(rule.verbs)}


def problems(rules, steps, crds) -> list:
    """Everything wrong with ``rules`` (shipped and rendered) against what the uses requested; empty when right."""
    return _wildcards(rules) + _not_granted(rules, steps) + _not_generated_or_unused(rules, steps, crds) \
        + _unused_generated_verbs(steps)


def _wildcards(rules) -> list:
    found = []
    for rule in rules:
        wild = [field for field, values in (("verbs", rule.verbs), ("apiGroups", rule.api_groups),
                                            ("resources", rule.resources)) if any("*" in v for v in values)]
        if wild:
            found.append(f"wildcard in {'/'.join(wild)} of {rule.role} ({rule.file}): {_as_dict(rule)}")
    return found


def _not_granted(rules, steps) -> list:
    """Every request of every use must be granted by the roles of that use, but those refused on purpose."""
    found = []
    for use, step, requests, namespaces in steps:
        bound = [r for r in rules if _role_name(r) in USES[use]]
        missing = set(rbac_recorder.uncovered(requests, bound, namespaces))
        for request in sorted(requests):
            refused = (use, request) in REFUSED_ON_PURPOSE
            if request in missing and not refused:
                found.append(f"not granted: {rbac_recorder.describe(request)} ({use} use, step {step})")
            elif refused and request not in missing:
                found.append(f"granted: {rbac_recorder.describe(request)} to the {use} use, which must not read "
                             f"these objects ({', '.join(r.role for r in rbac_recorder.granting(request, bound, namespaces))})")
    return found


def _not_generated_or_unused(rules, steps, crds) -> list:
    """Generated rules are exactly the generator's; every other grant is used by a use bound to it."""
    found = []
    expected = expected_generated(crds)
    for role, wanted in expected.items():
        have = [_as_dict(r) for r in rules if r.role == role]
        found += [f"{role}: the generated rule {rule} is missing" for rule in wanted if rule not in have]
    for rule in rules:
        if rule.role in expected and _as_dict(rule) in expected[rule.role]:
            continue
        for atom in _atoms(rule):
            if not _used(_narrowed(rule, atom), steps):
                found.append(f"unused: {rule.role} ({rule.file}) grants {atom[0]} {atom[2]}"
                             + (f" in {atom[1]}" if atom[1] else "") + ", which no use bound to it requests")
    return found


def _unused_generated_verbs(steps) -> list:
    """Every verb of a generated role is requested by its use."""
    found = []
    for use, verbs in rbac.VERBS.items():
        requested = {request[0] for u, _s, requests, _n in steps if u == USE_OF_VERBS[use] for request in requests
                     if not request[2].startswith(rbac_recorder.NONRESOURCE)}
        found += [f"unused: the generated {use} rules grant {verb}, which the {USE_OF_VERBS[use]} use never requests"
                  for verb in verbs if verb not in requested]
    return found


def _all_rules(found):
    return rbac_recorder.load_rules() + found.rendered


def test_the_shipped_roles_grant_each_use_exactly_what_it_requests(found):
    assert problems(_all_rules(found), found.steps, _crds(found)) == []


def _crds(found):
    return found.crds


@pytest.mark.parametrize("use", sorted(USES))
def test_each_use_requested_something_and_the_audit_driven_migration_gets_each_object(found, use):
    steps = {step: requests for u, step, requests, _n in found.steps if u == use}
    assert steps and all(steps.values()), steps
    if use == "migrate":
        assert ("get", "", "configmaps", "") in steps["objects_from_audit"], steps["objects_from_audit"]
        assert ("update", "", "configmaps", "") in steps["objects_from_audit"]  # write: put, the default
        assert ("patch", "apps", "deployments", "") in steps["client apply"]


def _with(rules, role, new_rule=None, change=None):
    """``rules`` with ``new_rule`` (a dict) added to ``role``, or each rule of ``role`` passed through ``change``."""
    changed = []
    for rule in rules:
        if rule.role == role and change is not None:
            rule = change(rule)
            if rule is None:
                continue
        changed.append(rule)
    if new_rule is not None:
        template = next(r for r in rules if r.role == role)
        changed.append(dataclasses.replace(template, verbs=tuple(new_rule["verbs"]), api_groups=tuple(new_rule["apiGroups"]),
                                           resources=tuple(new_rule["resources"]), non_resource_urls=()))
    return changed


def _drop_verb(verb):
    def change(rule):
        verbs = tuple(v for v in rule.verbs if v != verb)
        return dataclasses.replace(rule, verbs=verbs) if verbs else None
    return change


def _add_verb(verb, group):
    def change(rule):
        return dataclasses.replace(rule, verbs=(*rule.verbs, verb)) if rule.api_groups == (group,) else rule
    return change


MIGRATE = f"ClusterRole {rbac.MIGRATE_ROLE}"
COUNT = f"ClusterRole {rbac.COUNT_ROLE}"


@pytest.mark.parametrize("role,new_rule,change,named", [
    (COUNT, {"apiGroups": ["*"], "resources": ["*"], "verbs": ["list"]}, None, "wildcard in apiGroups/resources"),
    (MIGRATE, {"apiGroups": ["apps"], "resources": ["*"], "verbs": ["patch"]}, None, "wildcard in resources"),
    (MIGRATE, {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"]}, None, "wildcard in verbs"),
    (MIGRATE, {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]}, None,
     "unused: ClusterRole kubeupgrade-storage-migrate (migrate.yaml) grants create pods/exec"),
    (MIGRATE, None, _add_verb("delete", ""), "unused: ClusterRole kubeupgrade-storage-migrate (migrate.yaml) grants delete"),
    (COUNT, {"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}, None,
     "granted: list secrets to the preflight use, which must not read these objects"),
    ("ClusterRole kubeupgrade-storage-records", {"apiGroups": ["migration.k8s.io"], "resources": ["storagestates"],
                                                 "verbs": ["patch"]}, None, "grants patch storagestates in migration.k8s.io"),
    (MIGRATE, None, _drop_verb("get"), "not granted: get configmaps (migrate use, step objects_from_audit)"),
    (MIGRATE, None, _drop_verb("update"), "not granted: update configmaps (migrate use, step objects_from_audit)"),
    (MIGRATE, None, _drop_verb("patch"), "not granted: patch deployments.apps (migrate use, step client apply)"),
    (MIGRATE, None, lambda r: None if r.resources == ("storageversionmigrations",) and "create" in r.verbs else r,
     "not granted: create storageversionmigrations.storagemigration.k8s.io (migrate use, step intree)"),
    ("Role kubeupgrade-storage-migrate", None, lambda r: None, "not granted: create leases.coordination.k8s.io"),
    ("ClusterRole kubeupgrade-storage-observe", None, lambda r: None if r.non_resource_urls else r,
     "not granted: get /version (preflight use, step storage_version_info)"),
], ids=["wildcard-count", "wildcard-resources", "wildcard-verbs", "unused-subresource", "unused-verb-on-generated",
        "count-secrets", "unused-records-verb", "missing-get-audit-migration", "missing-update", "missing-patch",
        "missing-svm-create",
        "missing-lease-role", "missing-discovery"])
def test_a_changed_role_is_named(found, role, new_rule, change, named):
    """Each change to the shipped roles makes the RBAC check fail, naming what changed."""
    rules = _with(_all_rules(found), role, new_rule, change)
    assert any(named in problem for problem in problems(rules, found.steps, _crds(found))), \
        problems(rules, found.steps, _crds(found))


def test_a_custom_resource_without_its_rendered_role_is_not_granted(found):
    rules = [r for r in _all_rules(found) if _role_name(r) != MIGRATE_CUSTOM]
    assert any(p.startswith("not granted: list widgets.example.com (migrate use, step client)")
               for p in problems(rules, found.steps, _crds(found))), problems(rules, found.steps, _crds(found))


def test_the_example_bindings_give_each_identity_the_roles_of_its_use():
    bound = {}
    for doc in rbac_recorder.manifests(rbac_recorder.RBAC_DIR / "bindings.example.yaml"):
        for subject in doc["subjects"]:
            bound.setdefault(subject["name"], set()).add((doc["roleRef"]["kind"], doc["roleRef"]["name"]))
    rendered = {("ClusterRole", COUNT_CUSTOM), ("ClusterRole", MIGRATE_CUSTOM)}  # by the custom_resource_role filter
    roles = {tuple(r.role.split(" ", 1)) for r in rbac_recorder.load_rules()} | rendered
    for subject, refs in bound.items():
        assert refs <= roles, f"{subject} is bound to roles rbac/ does not ship and the filter does not render: {refs - roles}"
    assert {name for _kind, name in bound["kubeupgrade-storage-preflight"]} == set(USES["preflight"])
    assert {name for _kind, name in bound["kubeupgrade-storage-migrate"]} == set(USES["migrate"])
    # each namespaced Role is bound in its namespace, next to its ClusterRole of the same name
    assert {("Role", n) for _k, n in bound["kubeupgrade-storage-migrate"]} & roles <= bound["kubeupgrade-storage-migrate"]


class _FakeAdmin:
    def __init__(self, audit, paths):
        self.audit, self.paths = audit, paths

    def _call(self, operation):
        assert operation == "audit"
        return [{"verb": v, "group": g, "resource": r, "subresource": s, "count": 1} for v, g, r, s in self.audit]

    def stats(self):
        return {"apiservers": [{"index": 0, "by_path": dict.fromkeys(self.paths, 1)}]}


class _FakePlane:
    def __init__(self, audit, paths=()):
        self.admin = _FakeAdmin(audit, paths)


@pytest.mark.parametrize("audit,paths,missing", [
    ([("get", "", "nonresource:/version", ""), ("list", "", "configmaps", "")], [], None),
    ([("delete", "", "secrets", "")], [], "delete secrets"),
    ([("list", "example.com", "widgets", "")], [], "list widgets.example.com"),
    ([("delete", "apiextensions.k8s.io", "customresourcedefinitions", "")], [], "delete customresourcedefinitions"),
    ([("get", "", "nonresource:/metrics", "")], [], "get /metrics"),
    ([("create", "coordination.k8s.io", "leases", "")],
     ["/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"], None),
    ([("create", "coordination.k8s.io", "leases", "")],
     ["/apis/coordination.k8s.io/v1/namespaces/default/leases"], "create leases.coordination.k8s.io"),
], ids=["granted", "delete-secrets", "custom-resource", "delete-crd", "metrics", "lease-kube-system", "lease-elsewhere"])
def test_check_plane_names_each_request_no_role_grants(audit, paths, missing, tmp_path, monkeypatch):
    monkeypatch.setattr(rbac_recorder, "RECORD_DIR", tmp_path)
    plane = _FakePlane(audit, paths)
    if missing is None:
        assert rbac_recorder.check_plane(plane) == set(audit)
    else:
        with pytest.raises(AssertionError, match=missing):
            rbac_recorder.check_plane(plane)
    assert rbac_recorder.recorded() == set(audit)  # recorded for the session either way


def test_check_plane_grants_a_custom_resource_through_its_rendered_role(tmp_path, monkeypatch):
    monkeypatch.setattr(rbac_recorder, "RECORD_DIR", tmp_path)
    rendered = rbac_recorder.rules_of(custom_resource_role({"widgets.example.com": {}}), "(rendered)")
    plane = _FakePlane([("list", "example.com", "widgets", ""), ("patch", "example.com", "widgets", "")])
    assert rbac_recorder.check_plane(plane, rendered)
    with pytest.raises(AssertionError, match="delete widgets.example.com"):
        rbac_recorder.check_plane(_FakePlane([("delete", "example.com", "widgets", "")]), rendered)
