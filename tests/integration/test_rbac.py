# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The shipped RBAC roles (``rbac/``) grant each use exactly what it requests, and their docs say so.

Each use (pre-flight, records, migration with every backend) runs its modules in-process against
one simulated control plane; the simulator's audit of that use must be granted by the roles the
binding example gives it, and every rule of every role must be used by some use (wildcards are on
an explicit allow-list below, with the reason). ``rbac_recorder.check_plane`` checks the same for
every plane of the integration suite.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections import Counter
from pathlib import Path

import pytest
import rbac_recorder
import real_cluster
from ansible.module_utils.testing import patch_module_args  # ansible-core 2.19+, the oldest supported
from apisim.seeds import load_manifest

from ansible_collections.kubeupgrade.storage.plugins.modules import (
    storage_migration,
    storage_state,
    storage_version_agreement,
    storage_version_check,
    storage_version_info,
)

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "docsite" / "rst" / "rbac.rst"
WIDGETS = "widgets.example.com"

# Which roles each use is bound to in rbac/bindings.example.yaml.
USES = {
    "preflight": ("kubeupgrade-storage-observe", "kubeupgrade-storage-count-objects"),
    "records": ("kubeupgrade-storage-observe", "kubeupgrade-storage-records"),
    "migrate": ("kubeupgrade-storage-observe", "kubeupgrade-storage-records", "kubeupgrade-storage-migrate"),
}

# Wildcard rules, used by every test but never fully enumerable by one (they grant on resources the
# collection only learns from discovery). Each one is a deliberate grant, with its reason.
WILDCARD_ALLOWED = {
    # Pre-flight object counts: one metadata-only LIST (limit=1) of each resource whose verdict asks for
    # action, which can be any persisted resource, built-in or custom. RBAC has no metadata-only list, so
    # this lets the holder read every object (Secrets included): it is a role of its own, and without it
    # counts are "unknown" (fail closed) rather than an error.
    ("ClusterRole kubeupgrade-storage-count-objects", "list", "*", "*"),
    # Client-side migration: LIST (metadata only) and an identity-only PATCH of every object of each
    # migrated resource; which resources is decided at run time (select: from_check / from_records).
    # Narrow it to the resources you migrate if you can name them.
    ("ClusterRole kubeupgrade-storage-migrate", "list", "*", "*"),
    ("ClusterRole kubeupgrade-storage-migrate", "patch", "*", "*"),
}


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

    def run(self, use, step, module, **args):
        before = audit_counts(self.plane)
        self.plane.admin.reset_stats()
        result = module_run(self.plane, module, **args)
        requests = set((audit_counts(self.plane) - before).keys())
        self.found.append((use, step, requests, rbac_recorder.namespaces_of(self.plane.admin.stats())))
        return result


def _use_preflight(steps, workdir):
    steps.run("preflight", "storage_version_info", storage_version_info,
              include=["crds", "storage_states", "storage_versions", "leases"])
    result = steps.run("preflight", "storage_version_check", storage_version_check, target_release="1.33", fail_on=[])
    assert result["counts"], result  # something was counted: the LIST with limit=1 is part of this use
    steps.run("preflight", "storage_version_agreement", storage_version_agreement, polls=1, interval=0.1, timeout=10)


def _use_records(steps, workdir):
    # A record written by someone else (no annotations of ours): updated in place, not re-created.
    steps.plane.admin.put_raw("storagestates.migration.k8s.io", None, "secrets", "migration.k8s.io/v1alpha1", {
        "metadata": {"name": "secrets"}, "spec": {"resource": {"group": "", "resource": "secrets"}}, "status": {}})
    steps.run("records", "storage_state", storage_state, resources=["configmaps", "secrets", WIDGETS], install_crd=True)
    steps.run("records", "storage_state absent", storage_state, resources=["configmaps"], state="absent")


def _use_migrate(steps, workdir):
    common = {"poll_interval": 0.1, "checkpoint_dir": str(workdir / "checkpoints"), "timeout": 60, "stall_timeout": 30}
    steps.run("migrate", "client", storage_migration, resources=[WIDGETS], backend="client", **common)
    steps.run("migrate", "intree", storage_migration, resources=["configmaps"], backend="intree", **common)
    _install_crd(steps.plane, "storage_migration_crd.json")
    steps.run("migrate", "sigs", storage_migration, resources=["secrets"], backend="sigs", **common)


def _install_crd(plane, manifest):
    crd = load_manifest(manifest)
    plane.admin.put_raw("customresourcedefinitions.apiextensions.k8s.io", None, crd["metadata"]["name"],
                        "apiextensions.k8s.io/v1beta1", crd)


@pytest.fixture(scope="module")
def steps(tmp_path_factory):
    """Every use run in order against one plane with the demo data (records before migration, as operators do)."""
    from apisim.harness import ControlPlane

    if real_cluster.real_kubeconfig():
        pytest.skip(real_cluster.NEEDS_ADMIN)
    workdir = tmp_path_factory.mktemp("rbac")
    plane = ControlPlane(workdir / "plane", apiservers=2, releases="1.32", tls=True, seed="demo",
                         migrator_delay=0.1).start()
    try:
        found = Steps(plane)
        for action in (_use_preflight, _use_records, _use_migrate):
            action(found, workdir)
        rbac_recorder.check_plane(plane)  # the call every plane of the integration suite gets at teardown
        yield found.found
    finally:
        plane.stop()


def _roles(names):
    return [r for r in rbac_recorder.load_rules() if r.role.split(" ", 1)[1] in names]


@pytest.mark.parametrize("use", sorted(USES))
def test_each_use_is_granted_by_the_roles_it_is_bound_to(steps, use):
    rules = _roles(USES[use])
    missing = {step: [rbac_recorder.describe(r) for r in rbac_recorder.uncovered(requests, rules, namespaces)]
               for u, step, requests, namespaces in steps if u == use}
    assert not any(missing.values()), missing


def _atoms(rule):
    """A rule as (verb, group, resource-or-url) grants, one per combination."""
    if rule.non_resource_urls:
        return [(verb, "", rbac_recorder.NONRESOURCE + url) for verb in rule.verbs for url in rule.non_resource_urls]
    return [(verb, group, resource) for verb in rule.verbs for group in rule.api_groups for resource in rule.resources]


def _atom_used(rule, atom, steps) -> bool:
    verb, group, resource = atom
    narrowed = rbac_recorder.Rule(role=rule.role, file=rule.file, namespace=rule.namespace, verbs=(verb,),
                                  api_groups=(group,), resources=() if rule.non_resource_urls else (resource,),
                                  non_resource_urls=(resource[len(rbac_recorder.NONRESOURCE):],)
                                  if rule.non_resource_urls else ())
    for use, _step, requests, namespaces in steps:
        if rule.role.split(" ", 1)[1] not in USES[use]:
            continue
        if any(rbac_recorder.granting(r, [narrowed], namespaces) for r in requests):
            return True
    return False


def test_every_grant_of_every_role_is_used(steps):
    unused, unlisted = [], []
    for rule in rbac_recorder.load_rules():
        for atom in _atoms(rule):
            if "*" in atom[1:] and (rule.role, *atom) not in WILDCARD_ALLOWED:
                unlisted.append((rule.file, rule.role, *atom))
            if not _atom_used(rule, atom, steps):
                unused.append((rule.file, rule.role, *atom))
    assert not unlisted, f"wildcard grants not on the allow-list: {unlisted}"
    assert not unused, f"granted but no use requests it: {unused}"


def test_the_example_bindings_give_each_identity_the_roles_of_its_use():
    bound = {}
    for doc in rbac_recorder.manifests(rbac_recorder.RBAC_DIR / "bindings.example.yaml"):
        for subject in doc["subjects"]:
            bound.setdefault(subject["name"], set()).add((doc["roleRef"]["kind"], doc["roleRef"]["name"]))
    roles = {tuple(r.role.split(" ", 1)) for r in rbac_recorder.load_rules()}
    for subject, refs in bound.items():
        assert refs <= roles, f"{subject} is bound to roles rbac/ does not ship: {refs - roles}"
    assert {name for _kind, name in bound["kubeupgrade-storage-preflight"]} == set(USES["preflight"])
    assert {name for _kind, name in bound["kubeupgrade-storage-migrate"]} == set(USES["migrate"])
    # each namespaced Role is bound in its namespace, next to its ClusterRole of the same name
    assert {("Role", n) for _k, n in bound["kubeupgrade-storage-migrate"]} & roles <= bound["kubeupgrade-storage-migrate"]


def test_the_rbac_page_is_generated_from_the_roles():
    assert DOC.read_text(encoding="utf-8") == rbac_recorder.render_doc(), (
        "docs/docsite/rst/rbac.rst is out of date: run python tests/integration/rbac_recorder.py --write-doc")


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
    ([("update", "apiextensions.k8s.io", "customresourcedefinitions", "")], [], "update customresourcedefinitions"),
    ([("get", "", "nonresource:/metrics", "")], [], "get /metrics"),
    ([("create", "coordination.k8s.io", "leases", "")],
     ["/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"], None),
    ([("create", "coordination.k8s.io", "leases", "")],
     ["/apis/coordination.k8s.io/v1/namespaces/default/leases"], "create leases.coordination.k8s.io"),
], ids=["granted", "delete-secrets", "update-crd", "metrics", "lease-kube-system", "lease-elsewhere"])
def test_check_plane_names_each_request_no_role_grants(audit, paths, missing, tmp_path, monkeypatch):
    monkeypatch.setattr(rbac_recorder, "RECORD_DIR", tmp_path)
    plane = _FakePlane(audit, paths)
    if missing is None:
        assert rbac_recorder.check_plane(plane) == set(audit)
    else:
        with pytest.raises(AssertionError, match=missing):
            rbac_recorder.check_plane(plane)
    assert rbac_recorder.recorded() == set(audit)  # recorded for the session either way
