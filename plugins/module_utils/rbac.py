# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The RBAC grants the collection's uses need on objects, per resource: plain data in, PolicyRules out.

Two uses touch objects of arbitrary resources, so their rules are generated rather than written by hand:

- **count** (the pre-flight): one metadata-only LIST with ``limit=1`` of a resource whose verdict asks for
  action, to tell "objects are stored" from "nothing is stored". RBAC has no metadata-only list: ``list``
  lets the holder read every object, so resources whose objects are credentials (``NOT_COUNTED``) are left
  out; their counts say so (``not_counted``) and their verdicts stay as strict as without counting.
- **migrate**: ``list`` the objects of a migrated resource, ``get`` each object an audit names
  (``objects_from_audit``), and write each one back: ``update`` (``write: put``, the default: the object PUT back
  as read) or ``patch`` (``write: apply``: an identity-only apply, also what ``put`` falls back to when ``update``
  is refused).

``scripts/generate_rbac.py`` writes the rules for every persisted built-in resource of the shipped releases
into ``rbac/``; the ``custom_resource_role`` filter renders them for the custom resources of one cluster.
No rule has a wildcard and none names a subresource.
"""

from __future__ import annotations

from typing import Dict, Iterable, List, Mapping

from ansible_collections.kubeupgrade.storage.plugins.module_utils.resources import GroupResource

LABELS = {"app.kubernetes.io/name": "kubeupgrade-storage"}
COUNT_ROLE = "kubeupgrade-storage-count-objects"
MIGRATE_ROLE = "kubeupgrade-storage-migrate"
CUSTOM_SUFFIX = "-custom-resources"

# What each use does with the objects of a resource (the order is the one the rules are written in).
VERBS = {"count": ("list",), "migrate": ("list", "get", "update", "patch")}
ROLES = {"count": COUNT_ROLE, "migrate": MIGRATE_ROLE}

# The collection's own custom resource, its StorageState records (the CRD storage_state installs): migrated like any
# other resource when its record says so, so the shipped migrate role names it; the filter leaves it out.
OWN_RESOURCES = ("storagestates.migration.k8s.io",)

# Resources whose objects are credentials: the count role never lists them, whatever a verdict asks. The same
# choice as Kubernetes' own aggregated "view" role, which leaves Secrets out because reading them gives the
# ServiceAccount tokens (and every other credential) they hold.
NOT_COUNTED = {"secrets": "a LIST returns every Secret's data, credentials included"}


def builtin_resources(profiles) -> List[str]:
    """Every resource any release of ``profiles`` (a ``profiles.ProfileSet``) persists, kubectl-style, sorted."""
    names = set()
    for release in profiles.releases():
        names.update(profiles.get(release).resources)
    return sorted(names, key=_order)


def _order(name: str):
    gr = GroupResource.parse(name)
    return gr.group, gr.resource


def resources_for(use: str, names: Iterable[str]) -> List[str]:
    """The resources of ``names`` a use is granted: every one to migrate, all but ``NOT_COUNTED`` to count."""
    _check_use(use)
    return sorted({n for n in names if use != "count" or n not in NOT_COUNTED}, key=_order)


def rules(names: Iterable[str], verbs: Iterable[str]) -> List[dict]:
    """One PolicyRule per API group (core first, then by name), its resources sorted: ``verbs`` on each."""
    by_group: Dict[str, set] = {}
    for name in names:
        gr = GroupResource.parse(name)
        if "/" in gr.resource or "*" in gr.resource or "*" in gr.group:
            raise ValueError(f"{name!r} is not a resource name (no subresource, no wildcard)")
        by_group.setdefault(gr.group, set()).add(gr.resource)
    return [{"apiGroups": [group], "resources": sorted(by_group[group]), "verbs": list(verbs)}
            for group in sorted(by_group)]


def use_rules(use: str, names: Iterable[str]) -> List[dict]:
    """The rules of ``use`` (``count`` or ``migrate``) on the resources ``names``."""
    _check_use(use)
    return rules(resources_for(use, names), VERBS[use])


def custom_resource_names(crds) -> List[str]:
    """The resources (``<plural>.<group>``) of custom resource definitions given as any of: the ``crds`` result of
    ``storage_version_info`` or an audit (a mapping keyed by CRD name), a list of CRD names, or a list of
    CustomResourceDefinition objects (``spec.group`` and ``spec.names.plural``, else ``metadata.name``)."""
    if crds is None:
        return []
    if isinstance(crds, Mapping):
        crds = list(crds)
    if isinstance(crds, (str, bytes)) or not isinstance(crds, Iterable):
        raise ValueError(f"expects CRDs as a mapping by name, a list of names or a list of CRD objects, got "
                         f"{type(crds).__name__}")
    names = set()
    for index, crd in enumerate(crds):
        name = _crd_resource(crd)
        if not name:
            raise ValueError(f"item {index} is neither a CRD name nor a CustomResourceDefinition with spec.group and "
                             "spec.names.plural")
        gr = GroupResource.parse(name)
        if not gr.group or "/" in name or "*" in name:
            raise ValueError(f"item {index} ({name!r}) is not a custom resource name like 'widgets.example.com'")
        names.add(gr.name)
    return sorted(names, key=_order)


def _crd_resource(crd) -> str:
    if isinstance(crd, str):
        return crd.strip()
    if not isinstance(crd, Mapping):
        return ""
    spec = crd.get("spec") if isinstance(crd.get("spec"), Mapping) else {}
    plural = (spec.get("names") or {}).get("plural") if isinstance(spec.get("names"), Mapping) else None
    if isinstance(spec.get("group"), str) and isinstance(plural, str) and spec["group"] and plural:
        return f"{plural}.{spec['group']}"
    name = (crd.get("metadata") or {}).get("name") if isinstance(crd.get("metadata"), Mapping) else None
    return name.strip() if isinstance(name, str) else ""


def cluster_role(name: str, rule_list: List[dict], annotations: Mapping = None) -> dict:
    """A ClusterRole object with the collection's label."""
    metadata = {"name": name, "labels": dict(LABELS)}
    if annotations:
        metadata["annotations"] = dict(annotations)
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": metadata,
            "rules": rule_list}


def custom_resource_role(crds, use: str = "migrate", name: str = None) -> dict:
    """The ClusterRole granting ``use`` on the custom resources of ``crds`` (see ``custom_resource_names``) but the
    collection's own (``OWN_RESOURCES``, in the shipped role); its name defaults to the shipped role's name plus
    ``-custom-resources``. Bind it next to the shipped role."""
    _check_use(use)
    role_name = name or ROLES[use] + CUSTOM_SUFFIX
    names = [n for n in custom_resource_names(crds) if n not in OWN_RESOURCES]
    return cluster_role(role_name, use_rules(use, names), annotations={
        "kubeupgrade.storage/use": use,
        "kubeupgrade.storage/resources": ", ".join(names) if names else "(none)"})


def not_counted(name: str, custom: bool = False) -> str:
    """Why the objects of ``name`` were not counted when its LIST was refused (HTTP 403), and which grant would count
    them; ``custom``: ``name`` is a custom resource (a CRD of the cluster), whose rule the filter renders."""
    gr = GroupResource.parse(name)
    if name in NOT_COUNTED:
        return (f"not counted: needs list on {name}, which {COUNT_ROLE} leaves out on purpose ({NOT_COUNTED[name]}); "
                f"grant it (apiGroups: [\"{gr.group}\"], resources: [\"{gr.resource}\"], verbs: [\"list\"]) only to an "
                "identity that may read them, or measure with storage_version_audit")
    where = f"{COUNT_ROLE}{CUSTOM_SUFFIX} (rendered by the custom_resource_role filter)" if custom else COUNT_ROLE
    return (f"not counted: needs list on {name} (apiGroups: [\"{gr.group}\"], resources: [\"{gr.resource}\"], "
            f"verbs: [\"list\"]; {where} grants it)")


def _check_use(use: str) -> None:
    if use not in VERBS:
        raise ValueError(f"use must be one of {', '.join(sorted(VERBS))}, got {use!r}")
