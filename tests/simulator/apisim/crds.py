"""CustomResourceDefinitions: defaulting, the storedVersions rules as the real 1.32 apiserver applies them, and
the registry of custom resource types the CRDs define."""

import copy

from . import errors
from .profiles import storage_version_hash, version_priority

CRD_BUCKET = ("apiextensions.k8s.io", "customresourcedefinitions")
CRD_KIND = "CustomResourceDefinition"
CRD_GROUP = "apiextensions.k8s.io"


def storage_version(crd):
    versions = [v["name"] for v in crd.get("spec", {}).get("versions", []) if v.get("storage")]
    return versions[0] if len(versions) == 1 else None


def _invalid(name, causes):
    return errors.invalid(CRD_GROUP, CRD_KIND, name, causes)


def _validate_spec(crd):
    name = crd["metadata"]["name"]
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    causes = []
    if not spec.get("group"):
        causes.append(("spec.group", "FieldValueRequired", "Required value"))
    if not names.get("plural"):
        causes.append(("spec.names.plural", "FieldValueRequired", "Required value"))
    if not names.get("kind"):
        causes.append(("spec.names.kind", "FieldValueRequired", "Required value"))
    if not causes and name != f"{names['plural']}.{spec['group']}":
        causes.append(("metadata.name", "FieldValueInvalid",
                       f'Invalid value: "{name}": must be spec.names.plural+"."+spec.group'))
    if storage_version(crd) is None:
        causes.append(("spec.versions", "FieldValueInvalid",
                       "Invalid value: []apiextensions.CustomResourceDefinitionVersion{...}: "
                       "must have exactly one version marked as storage version"))
    if causes:
        raise _invalid(name, causes)


def _validate_stored_versions(crd):
    """The main endpoint's check of status.storedVersions (the /status endpoint skips it, as recorded)."""
    stored = crd.get("status", {}).get("storedVersions") or []
    spec_versions = {v["name"] for v in crd["spec"]["versions"]}
    causes = []
    if not stored:
        causes.append(("status.storedVersions", "FieldValueInvalid",
                       "Invalid value: []string{}: must have at least one stored version"))
    for index, version in enumerate(stored):
        if version not in spec_versions:
            causes.append((f"status.storedVersions[{index}]", "FieldValueInvalid",
                           f'Invalid value: "{version}": must appear in spec.versions'))
    storage = storage_version(crd)
    if stored and storage not in stored:
        causes.append(("status.storedVersions", "FieldValueInvalid",
                       f'Invalid value: []string{{{", ".join(chr(34) + v + chr(34) for v in stored)}}}: '
                       f"must have the storage version {storage}"))
    if causes:
        raise _invalid(crd["metadata"]["name"], causes)


def _default_names(spec):
    names = spec.setdefault("names", {})
    names.setdefault("singular", names.get("kind", "").lower())
    names.setdefault("listKind", names.get("kind", "") + "List")
    return names


def _condition(kind, reason, message, now):
    return {"type": kind, "status": "True", "lastTransitionTime": now, "reason": reason, "message": message}


def prepare_create(crd, now):
    _validate_spec(crd)
    spec = crd["spec"]
    names = _default_names(spec)
    spec.setdefault("scope", "Namespaced")
    spec.setdefault("conversion", {"strategy": "None"})
    crd["status"] = {
        "conditions": [_condition("NamesAccepted", "NoConflicts", "no conflicts found", now),
                       _condition("Established", "InitialNamesAccepted", "the initial names have been accepted", now)],
        "acceptedNames": copy.deepcopy(names),
        "storedVersions": [storage_version(crd)],
    }
    return crd


def prepare_update(old, new):
    """Main endpoint: status comes from the stored object; a new storage version is recorded; then validate."""
    _validate_spec(new)
    _default_names(new["spec"])
    new["status"] = copy.deepcopy(old.get("status", {}))
    stored = new["status"].setdefault("storedVersions", [])
    storage = storage_version(new)
    if storage not in stored:
        stored.append(storage)
    _validate_stored_versions(new)
    return new


def prepare_status_update(old, new):
    """/status: spec and metadata from the stored object; storedVersions taken as sent, [] becomes [storage]."""
    result = copy.deepcopy(old)
    result["status"] = copy.deepcopy(new.get("status") or {})
    if not result["status"].get("storedVersions"):
        result["status"]["storedVersions"] = [storage_version(old)]
    return result


class CustomType:
    """What the apiservers need to serve one CRD."""

    def __init__(self, crd):
        spec = crd["spec"]
        self.crd_name = crd["metadata"]["name"]
        self.group = spec["group"]
        self.plural = spec["names"]["plural"]
        self.singular = spec["names"].get("singular", spec["names"]["kind"].lower())
        self.kind = spec["names"]["kind"]
        self.list_kind = spec["names"].get("listKind", self.kind + "List")
        self.short_names = spec["names"].get("shortNames", [])
        self.namespaced = spec.get("scope", "Namespaced") == "Namespaced"
        self.versions = [v["name"] for v in spec["versions"]]
        self.served = sorted((v["name"] for v in spec["versions"] if v.get("served")), key=version_priority)
        self.storage = storage_version(crd)
        self.has_status = {v["name"]: "status" in (v.get("subresources") or {}) for v in spec["versions"]}
        self.hash = storage_version_hash(self.group, self.storage, self.kind)


def registry(store):
    """{(group, plural): CustomType}, rebuilt only when a CRD changed."""
    bucket = store.buckets[CRD_BUCKET]
    cached = getattr(store, "_crd_registry", None)
    if cached and cached[0] == bucket.generation:
        return cached[1]
    with store.lock:
        types = {}
        for entry in store.entries(CRD_BUCKET):
            if storage_version(entry.obj):
                custom = CustomType(entry.obj)
                types[(custom.group, custom.plural)] = custom
        store._crd_registry = (bucket.generation, types)
    return types
