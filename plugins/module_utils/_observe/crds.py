# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""CustomResourceDefinitions: read live objects and target manifests, check ``status.storedVersions``.

Target manifests are how an operator tells the pre-flight which versions a CRD will have after the
upgrade; a manifest dropping a version still in ``storedVersions`` is what the apiserver rejects with
``must appear in spec.versions``. The ``/status`` subresource does not validate ``storedVersions``
(real 1.32, fixtures crd/13-16), so ``stored_versions_errors`` must be checked before writing it.
"""

from __future__ import annotations

import json
from typing import Dict, List

from ansible_collections.kubeupgrade.storage.plugins.module_utils import errors
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.model import CrdVersion, ObservedCrd

CRD_KIND = "CustomResourceDefinition"
CRD_API_VERSIONS = ("apiextensions.k8s.io/v1", "apiextensions.k8s.io/v1beta1")


def _invalid(name: str, detail: str) -> str:
    """The apiserver's own wording: ``CustomResourceDefinition.apiextensions.k8s.io "<name>" is invalid: ...``."""
    return f'CustomResourceDefinition.apiextensions.k8s.io "{name}" is invalid: {detail}'


def crd_from_object(obj, where: str = "the CRD") -> ObservedCrd:
    """An ObservedCrd from a CRD object (live or manifest); ManifestError naming ``where`` when it is not one."""
    if not isinstance(obj, dict):
        raise errors.ManifestError(f"{where} is not a Kubernetes object (got {type(obj).__name__})")
    if obj.get("kind") != CRD_KIND or obj.get("apiVersion") not in CRD_API_VERSIONS:
        raise errors.ManifestError(
            f"{where} is not a CustomResourceDefinition (apiVersion {obj.get('apiVersion')!r}, kind {obj.get('kind')!r}); "
            f"expected apiVersion apiextensions.k8s.io/v1, kind {CRD_KIND}")
    metadata = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    names = spec.get("names") or {}
    name = metadata.get("name") or ""
    group = spec.get("group") or ""
    plural = names.get("plural") or ""
    for label, value in (("metadata.name", name), ("spec.group", group), ("spec.names.plural", plural), ("spec.names.kind", names.get("kind"))):
        if not value:
            raise errors.ManifestError(where + ": " + _invalid(name or "<no name>", label + ": Required value"))
    if name != f"{plural}.{group}":
        quoted = json.dumps(name)
        detail = f'metadata.name: Invalid value: {quoted}: must be spec.names.plural+"."+spec.group'
        raise errors.ManifestError(where + ": " + _invalid(name, detail))
    versions = _crd_versions(spec, name, where)
    status = obj.get("status") or {}
    return ObservedCrd(
        name=name, group=group, kind=names["kind"], plural=plural, scope=spec.get("scope") or "",
        versions=versions, stored_versions=list(status.get("storedVersions") or []),
        generation=metadata.get("generation"), resource_version=metadata.get("resourceVersion"))


def _crd_versions(spec: dict, name: str, where: str) -> list:
    """``spec.versions`` checked like the apiserver does: named, unique, exactly one storage version."""
    raw_versions = spec.get("versions")
    if not raw_versions and spec.get("version"):  # apiextensions.k8s.io/v1beta1 single-version form
        raw_versions = [{"name": spec["version"], "served": True, "storage": True}]
    if not raw_versions:
        raise errors.ManifestError(where + ": " + _invalid(name, "spec.versions: Required value"))
    if not isinstance(raw_versions, list):
        raise errors.ManifestError(where + ": " + _invalid(name, f"spec.versions: must be a list, got a {type(raw_versions).__name__}"))
    versions = []
    for index, entry in enumerate(raw_versions):
        if not isinstance(entry, dict) or not entry.get("name"):
            raise errors.ManifestError(where + ": " + _invalid(name, f"spec.versions[{index}].name: Required value"))
        versions.append(CrdVersion(name=entry["name"], served=bool(entry.get("served")), storage=bool(entry.get("storage"))))
    seen = set()
    for index, version in enumerate(versions):
        if version.name in seen:
            quoted = json.dumps(version.name)
            detail = f"spec.versions[{index}].name: Duplicate value: {quoted}"
            raise errors.ManifestError(where + ": " + _invalid(name, detail))
        seen.add(version.name)
    storage = [v.name for v in versions if v.storage]
    if len(storage) != 1:
        quoted = json.dumps([v.name for v in versions])
        detail = f"spec.versions: Invalid value: {quoted}: must have exactly one version marked as storage version"
        raise errors.ManifestError(where + ": " + _invalid(name, detail))
    return versions


def _documents(item, where: str) -> list:
    """The objects in one item: a dict, or a YAML/JSON string with one or more documents."""
    if isinstance(item, dict):
        return [item]
    if isinstance(item, str):
        try:
            import yaml
            docs = list(yaml.safe_load_all(item))
        except ImportError:  # pragma: no cover - ansible-core brings PyYAML
            docs = [json.loads(item)]
        except Exception as exc:
            raise errors.ManifestError(f"{where} is not valid YAML or JSON: {exc}") from None
        docs = [d for d in docs if d is not None]
        if not docs:
            raise errors.ManifestError(f"{where} is empty")
        return docs
    raise errors.ManifestError(f"{where} must be a CRD object or a YAML/JSON string, got {type(item).__name__}")


def _flatten(obj, where: str) -> list:
    """``kind: List`` / ``CustomResourceDefinitionList`` -> their items; anything else as is."""
    if isinstance(obj, dict) and str(obj.get("kind", "")).endswith("List") and isinstance(obj.get("items"), list):
        flat = []
        for index, inner in enumerate(obj["items"]):
            flat.extend((f"{where} items[{index}]", o) for _unused, o in _flatten(inner, f"{where} items[{index}]"))
        return flat
    return [(where, obj)]


def manifest_objects(items, label: str = "target CRD manifest") -> Dict[str, dict]:
    """Target CRD manifests as the objects given, by name, each checked as ``parse_manifests`` checks it."""
    return {name: obj for name, (_crd, obj) in _parsed(items, label).items()}


def parse_manifests(items, label: str = "target CRD manifest") -> Dict[str, ObservedCrd]:
    """Target CRD manifests by name; one ManifestError naming the item (and document) that is wrong."""
    return {name: crd for name, (crd, _obj) in _parsed(items, label).items()}


def _parsed(items, label: str) -> Dict[str, tuple]:
    if isinstance(items, (dict, str)):
        items = [items]
    result: Dict[str, tuple] = {}
    for index, item in enumerate(items or []):
        where = f"{label} #{index + 1}"
        docs = _documents(item, where)
        for doc_index, doc in enumerate(docs):
            doc_where = where if len(docs) == 1 else f"{where} (document {doc_index + 1})"
            for obj_where, obj in _flatten(doc, doc_where):
                crd = crd_from_object(obj, obj_where)
                if crd.name in result:
                    raise errors.ManifestError(f"{obj_where}: CRD {crd.name} is given more than once")
                result[crd.name] = (crd, obj)
    return result


def stored_versions_errors(crd: ObservedCrd, stored_versions) -> List[str]:
    """What the apiserver's main CRD endpoint would say about ``stored_versions`` (empty list = valid).

    Mirrors ValidateCustomResourceDefinitionStoredVersions, plus duplicates, which the real ``/status``
    accepts (crd/13) and which then make no sense to anyone reading them.
    """
    field = "status.storedVersions"
    stored = list(stored_versions or [])
    if not stored:
        return [_invalid(crd.name, f"{field}: Invalid value: []: must have at least one stored version")]
    problems = []
    spec_names = crd.version_names
    storage = crd.storage_version
    if storage and storage not in stored:
        problems.append(_invalid(crd.name, f"{field}: Invalid value: {json.dumps(stored)}: must have the storage version {storage}"))
    seen = set()
    for index, version in enumerate(stored):
        if version in seen:
            problems.append(_invalid(crd.name, f"{field}[{index}]: Duplicate value: {json.dumps(version)}"))
            continue
        seen.add(version)
        if version not in spec_names:
            problems.append(_invalid(crd.name, f"{field}[{index}]: Invalid value: {json.dumps(version)}: must appear in spec.versions"))
    return problems
