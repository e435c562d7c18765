"""Legacy and aggregated (v2) discovery documents, built per release once and merged with the CRDs' groups."""

import functools
import json
from dataclasses import dataclass

from . import crds, errors
from .profiles import SHORT_NAMES, STATUS_VERBS, VERBS, builtin_resources, version_priority

AGGREGATED_V2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"


def is_discovery_path(path):
    parts = path.strip("/").split("/")
    return (parts[0] == "api" and len(parts) <= 2) or (parts[0] == "apis" and len(parts) <= 3)


@dataclass(frozen=True)
class _Res:
    """A resource as discovery lists it for one group version."""

    name: str
    singular: str
    namespaced: bool
    kind: str
    short_names: list
    hash: str
    has_status: bool


@functools.cache
def _builtin_groups(release):
    """{group: {version: [_Res]}} of a release's built-in resources."""
    groups = {}
    for (group, resource), info in builtin_resources(release).items():
        for version in info.served:
            groups.setdefault(group, {}).setdefault(version, []).append(_Res(
                resource, info.kind.lower(), info.namespaced, info.kind, SHORT_NAMES.get(resource, []), info.hash,
                info.has_status))
    return groups


def _groups(api):
    groups = {g: dict(versions) for g, versions in _builtin_groups(api.server.release).items()}
    for custom in crds.registry(api.store).values():
        for version in custom.served:
            groups.setdefault(custom.group, {}).setdefault(version, []).append(_Res(
                custom.plural, custom.singular, custom.namespaced, custom.kind, custom.short_names, custom.hash,
                custom.has_status.get(version, False)))
    return groups


def _preferred(group, versions):
    ordered = sorted(versions, key=version_priority)
    return ordered, ordered[0]


def _resource_list(group_version, resources, with_api_version=True):
    items = []
    for res in sorted(resources, key=lambda r: r.name):
        entry = {"name": res.name, "singularName": res.singular, "namespaced": res.namespaced, "kind": res.kind,
                 "verbs": VERBS}
        if res.short_names:
            entry["shortNames"] = res.short_names
        entry["storageVersionHash"] = res.hash
        items.append(entry)
        if res.has_status:
            items.append({"name": f"{res.name}/status", "singularName": "", "namespaced": res.namespaced,
                          "kind": res.kind, "verbs": STATUS_VERBS})
    doc = {"kind": "APIResourceList"}
    if with_api_version:
        doc["apiVersion"] = "v1"
    doc.update({"groupVersion": group_version, "resources": items})
    return doc


def _api_group(name, versions):
    ordered, preferred = _preferred(name, versions)
    gv = [{"groupVersion": f"{name}/{v}", "version": v} for v in ordered]
    return {"name": name, "versions": gv, "preferredVersion": {"groupVersion": f"{name}/{preferred}",
                                                               "version": preferred}}


def _aggregated(groups, names):
    items = []
    for name in names:
        versions = []
        for version in sorted(groups[name], key=version_priority):
            resources = []
            for res in sorted(groups[name][version], key=lambda r: r.name):
                kind = {"group": "", "version": "", "kind": res.kind}
                entry = {"resource": res.name, "responseKind": kind,
                         "scope": "Namespaced" if res.namespaced else "Cluster", "singularResource": res.singular,
                         "verbs": VERBS}
                if res.short_names:
                    entry["shortNames"] = res.short_names
                if res.has_status:
                    entry["subresources"] = [{"subresource": "status", "responseKind": kind, "verbs": STATUS_VERBS}]
                resources.append(entry)
            versions.append({"version": version, "resources": resources, "freshness": "Current"})
        items.append({"metadata": {"name": name, "creationTimestamp": None}, "versions": versions})
    return {"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": items}


def _json(doc, content_type="application/json"):
    return 200, content_type, json.dumps(doc, separators=(",", ":")).encode(), {}


def _unavailable():
    """What kube-aggregator answers for an APIService whose backend is down (handler_proxy.go): a plain 503."""
    return errors.ApiError(503, b"service unavailable\n")


def serve(api, path, accept):
    """Answer a discovery GET; unknown groups and versions get the real text/plain 404.

    Aggregated APIServices registered through the admin interface are listed in ``/apis``; their group
    and group/version documents come from their backend, which is down: 503, as the aggregator answers.
    """
    parts = path.strip("/").split("/")
    groups = _groups(api)
    aggregated_down = getattr(api.server.plane, "aggregated", {})
    if len(parts) >= 2 and parts[0] == "apis" and parts[1] in aggregated_down and parts[1] not in groups:
        raise _unavailable()
    aggregated = "as=APIGroupDiscoveryList" in accept and "v=v2" in accept
    if parts == ["api"]:
        if aggregated:
            return _json(_aggregated(groups, [""]), AGGREGATED_V2)
        return _json({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": api.server.address}]})
    if parts == ["api", "v1"]:
        return _json(_resource_list("v1", groups[""]["v1"], with_api_version=False))
    named = sorted((g for g in groups if g), key=lambda g: (g.count(".") > 0 and "k8s.io" not in g, g))
    if parts == ["apis"]:
        if aggregated:
            return _json(_aggregated(groups, named), AGGREGATED_V2)
        listed = [_api_group(g, groups[g]) for g in named]
        listed += [_api_group(g, {v: [] for v in versions}) for g, versions in sorted(aggregated_down.items()) if g not in groups]
        return _json({"kind": "APIGroupList", "apiVersion": "v1", "groups": listed})
    group = parts[1]
    if not group or group not in groups:
        raise errors.page_not_found()
    if len(parts) == 2:
        return _json({"kind": "APIGroup", "apiVersion": "v1", **_api_group(group, groups[group])})
    version = parts[2]
    if version not in groups[group]:
        raise errors.page_not_found()
    return _json(_resource_list(f"{group}/{version}", groups[group][version]))
