# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Release profiles: what each Kubernetes release stores, serves and can decode, per resource.

The collection ships one profile per release (``_release_data.py``, generated from the upstream
table by ``scripts/generate_release_data.py``). A verdict needs, for the target release, every
version its binary can read from etcd: ``decodable`` (types registered in the scheme) ∪ ``served`` ∪
``storage``, because an apiserver reads objects stored in a version it no longer serves as long as
the types are compiled in.

User profiles
-------------
Users add a release the collection does not know yet, or correct one, with ``profiles_file`` (a
YAML or JSON file) and/or ``profiles`` (the same structure inline). Both are validated against
``PROFILE_SCHEMA``; the file is applied first, then the inline dict. Format::

    releases:
      "1.38":                      # quote it: YAML reads 1.30 as the number 1.3
        extends: "1.37"            # optional: start from a copy of another release
        replace: false             # optional: true = drop the existing/extended resources first
        resources:                 # kubectl-style names: "pods", "deployments.apps"
          flowschemas.flowcontrol.apiserver.k8s.io:
            kind: FlowSchema       # required for a resource the release does not have yet
            storage: v1            # required for a resource the release does not have yet
            served: [v1]           # default: [storage]
            decodable: [v1beta3, v1]   # default: []
            storage_group: ""      # optional: group the storage hash uses when it is not the
                                   # resource's own (events.events.k8s.io is stored as core v1)
        removed:                   # resources this release no longer has (replaces the list)
          - clustercidrs.networking.k8s.io

For a resource the release already has, the given fields override the existing ones (so
``decodable: [...]`` alone corrects one list). A release that neither exists nor ``extends`` another
starts empty. Errors name the file, the JSON path and what is wrong.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from ansible_collections.kubeupgrade.storage.plugins.module_utils import errors, hashing
from ansible_collections.kubeupgrade.storage.plugins.module_utils._release_data import RELEASE_DATA_JSON
from ansible_collections.kubeupgrade.storage.plugins.module_utils._validate import FLOAT_RELEASE_HINT, release_hint
from ansible_collections.kubeupgrade.storage.plugins.module_utils.resources import GroupResource

SHIPPED = "shipped"

_RELEASE_RE = re.compile(r"^v?(\d+)\.(\d+)(?:\.\d+)?(?:[-+][0-9A-Za-z.+-]*)?$")
_VERSION_PATTERN = r"^v[0-9]+((alpha|beta)[0-9]+)?$"
_RESOURCE_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"

_VERSION_LIST = {"type": "array", "items": {"type": "string", "pattern": _VERSION_PATTERN}, "uniqueItems": True}

PROFILE_SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "kubeupgrade.storage release profiles",
    "type": "object",
    "additionalProperties": False,
    "required": ["releases"],
    "properties": {
        "format": {"const": 1},
        "releases": {
            "type": "object",
            "propertyNames": {"pattern": r"^v?[0-9]+\.[0-9]+(\.[0-9]+)?$"},
            "additionalProperties": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "extends": {"type": "string", "pattern": r"^v?[0-9]+\.[0-9]+(\.[0-9]+)?$"},
                    "replace": {"type": "boolean"},
                    "resources": {
                        "type": "object",
                        "propertyNames": {"pattern": _RESOURCE_NAME_PATTERN},
                        "additionalProperties": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {
                                "kind": {"type": "string", "pattern": "^[A-Z][A-Za-z0-9]*$"},
                                "storage": {"type": "string", "pattern": _VERSION_PATTERN},
                                "served": _VERSION_LIST,
                                "decodable": _VERSION_LIST,
                                "storage_group": {"type": "string"},
                            },
                        },
                    },
                    "removed": {"type": "array", "items": {"type": "string", "pattern": _RESOURCE_NAME_PATTERN}},
                },
            },
        },
    },
}


def normalize_release(value) -> str:
    """``"v1.34.2"``, ``"1.34"``, ``"v1.34.0-beta.0"`` -> ``"1.34"``: profiles are per minor release."""
    if isinstance(value, float):
        raise errors.ProfileError(
            f"Kubernetes release {value!r} is a number, not a string: {FLOAT_RELEASE_HINT}")
    if not isinstance(value, str):
        raise errors.ProfileError(f"Kubernetes release must be a string like '1.34' or 'v1.34.2', got {value!r}")
    match = _RELEASE_RE.match(value.strip())
    if not match:
        raise errors.ProfileError(f"Kubernetes release {value!r} is not a version like '1.34' or 'v1.34.2'")
    return f"{int(match.group(1))}.{int(match.group(2))}"


def release_sort_key(release: str):
    """Numeric order: 1.9 < 1.10."""
    major, minor = release.split(".")
    return int(major), int(minor)


@dataclass
class ResourceProfile:
    """One persisted resource in one release."""

    name: str  # kubectl-style
    group: str
    kind: str
    storage_version: str
    storage_group: str  # group the storage hash uses ("" for events.events.k8s.io)
    served: List[str] = field(default_factory=list)
    decodable: List[str] = field(default_factory=list)

    def readable_versions(self) -> set:
        """Every version this release can decode from etcd: decodable ∪ served ∪ storage.

        The upstream table can lack a version (pre-release entries), so the union is taken.
        """
        return set(self.decodable) | set(self.served) | {self.storage_version}

    def storage_hash(self) -> str:
        return hashing.storage_version_hash(self.storage_group, self.storage_version, self.kind)


@dataclass
class ReleaseProfile:
    release: str
    resources: Dict[str, ResourceProfile] = field(default_factory=dict)
    removed: List[str] = field(default_factory=list)
    source: str = SHIPPED  # "shipped", or the user file / "inline profiles" that last changed it
    # A binary run at an older release's APIs (KEP-4330): emulation.profile_at predicts what it stores there.
    emulated: Optional[str] = None
    min_compatibility: Optional[str] = None

    def get(self, name: str) -> Optional[ResourceProfile]:
        return self.resources.get(name)

    @property
    def label(self) -> str:
        """``1.36``, or ``1.36 emulating 1.35`` for a binary at an older release's APIs: for messages and reports."""
        return f"{self.release} emulating {self.emulated}" if self.emulated and self.emulated != self.release else self.release


class ProfileSet:
    """All known release profiles, with lookups across releases for reverse hash mapping."""

    def __init__(self, releases: Dict[str, ReleaseProfile]):
        self._releases = dict(releases)

    def releases(self) -> List[str]:
        return sorted(self._releases, key=release_sort_key)

    def get(self, release) -> ReleaseProfile:
        key = normalize_release(release)
        profile = self._releases.get(key)
        if profile is None:
            known = self.releases()
            example_base = known[-1] if known else "1.37"
            hint = release_hint(release)
            span = f"from {known[0]} to {known[-1]}" if known else "this collection knows"
            raise errors.ProfileError(
                (f"{hint}. " if hint else "") +
                f"no release profile for Kubernetes {key}: give a release {span} (quoted, such as \"{example_base}\"), "
                f"or add its profile with the profiles_file or profiles option\nKnown releases: {', '.join(known) or 'none'}. "
                f"A profile, for example: releases: {{\"{key}\": {{extends: \"{example_base}\", resources: {{...}}}}}} "
                "(format: plugins/module_utils/profiles.py docstring)",
                details={"release": key, "known_releases": known})
        return profile

    def __contains__(self, release) -> bool:
        try:
            return normalize_release(release) in self._releases
        except errors.ProfileError:
            return False

    def _entries(self, name: str) -> List[ResourceProfile]:
        """The resource's profile in every release that has it, newest first."""
        found = []
        for release in reversed(self.releases()):
            entry = self._releases[release].get(name)
            if entry is not None:
                found.append(entry)
        return found

    def candidate_versions(self, name: str) -> set:
        """Every version of the resource in any release: the candidates a hash is mapped back among."""
        versions = set()
        for entry in self._entries(name):
            versions |= entry.readable_versions()
        return versions

    def kind_of(self, name: str) -> Optional[str]:
        entries = self._entries(name)
        return entries[0].kind if entries else None

    def storage_group_of(self, name: str) -> Optional[str]:
        """The group the storage hash is computed with (newest release wins); None when unknown."""
        entries = self._entries(name)
        return entries[0].storage_group if entries else None

    def hash_candidates(self, name: str, release=None):
        """``(storage_group, kind, versions)`` to reverse-look-up a hash of ``name``: the versions of one
        release, or of every release; ProfileError when the resource (or release) is unknown."""
        if release is not None:
            profile = self.get(release)
            entry = profile.get(name)
            if entry is None:
                raise errors.ProfileError(
                    f"the Kubernetes {profile.release} profile has no resource {name!r}; use kubectl-style names like "
                    f"'deployments.apps' or 'pods', or add it with profiles_file")
            return entry.storage_group, entry.kind, entry.readable_versions()
        entries = self._entries(name)
        if not entries:
            raise errors.ProfileError(
                f"no release profile has a resource {name!r}; use kubectl-style names like 'deployments.apps' or "
                f"'pods', or give candidates")
        return entries[0].storage_group, entries[0].kind, self.candidate_versions(name)

    def known(self, name: str) -> bool:
        """True when some release profile has the resource (i.e. it is a built-in we have data for)."""
        return bool(self._entries(name))

    def served_group_versions(self, release) -> set:
        """``(group, version)`` pairs of the named groups the release can serve (enabled by default or not);
        empty for a release without a profile."""
        if release not in self:
            return set()
        return {(entry.group, version) for entry in self.get(release).resources.values() if entry.group
                for version in entry.served}


def _name_from_key(key: str) -> str:
    """``apps/deployments`` -> ``deployments.apps``; ``/pods`` -> ``pods``."""
    group, _unused, resource = key.partition("/")
    return GroupResource(group=group, resource=resource).name


def _resource_from_entry(name: str, entry: dict) -> ResourceProfile:
    group = GroupResource.parse(name).group
    storage = entry["storage"]
    return ResourceProfile(
        name=name,
        group=group,
        kind=entry["kind"],
        storage_version=storage,
        storage_group=entry.get("storage_group", group),
        served=list(entry.get("served", [storage])),
        decodable=list(entry.get("decodable", [])),
    )


def _shipped_releases() -> Dict[str, ReleaseProfile]:
    data = json.loads(RELEASE_DATA_JSON)
    releases = {}
    for release, body in data["releases"].items():
        resources = {}
        for key, entry in body["resources"].items():
            name = _name_from_key(key)
            resources[name] = _resource_from_entry(name, entry)
        releases[release] = ReleaseProfile(
            release=release, resources=resources, removed=[_name_from_key(k) for k in body.get("removed", [])])
    return releases


def _json_path(path) -> str:
    out = "$"
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", str(part)) else f"[{json.dumps(part)}]"
    return out


def validate_profiles(data, source: str) -> None:
    """Raise one ProfileError naming ``source``, the JSON path and the problem."""
    # Imported here: only user-supplied profiles are validated, and jsonschema costs ~75 ms to import
    # in every module run.
    try:
        import jsonschema  # pylint: disable=import-outside-toplevel
    except ImportError as exc:  # pragma: no cover - depends on the controller's Python
        raise errors.ProfileError(
            f"checking the release profiles in {source} needs the Python library 'jsonschema' on the controller "
            f"({exc}); install it with pip install jsonschema") from None
    validator = jsonschema.Draft7Validator(PROFILE_SCHEMA)
    # Shallowest problem first, and a missing required key before anything else at the same place.
    problems = sorted(validator.iter_errors(data),
                      key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path)), e.validator != "required"))
    if problems:
        first = problems[0]
        more = f" ({len(problems) - 1} more problem(s) after this one)" if len(problems) > 1 else ""
        raise errors.ProfileError(
            f"invalid release profiles in {source} at {_json_path(first.absolute_path)}: {first.message}{more}",
            details={"source": source, "path": _json_path(first.absolute_path)})


def _apply(releases: Dict[str, ReleaseProfile], data: dict, source: str) -> None:
    """Merge one validated user document into ``releases`` (in place: the caller owns the copy)."""
    for raw_release, body in data["releases"].items():
        try:
            release = normalize_release(raw_release)
        except errors.ProfileError as exc:
            raise errors.ProfileError(f"invalid release profiles in {source} at $.releases: {exc}") from None
        where = f"{source} at $.releases[{json.dumps(raw_release)}]"
        if "extends" in body:
            base_name = normalize_release(body["extends"])
            if base_name not in releases:
                raise errors.ProfileError(
                    f"invalid release profiles in {where}.extends: release {base_name} is not known "
                    f"(known: {', '.join(sorted(releases, key=release_sort_key))})")
            base = copy.deepcopy(releases[base_name])
            profile = ReleaseProfile(release=release, resources=base.resources, removed=base.removed, source=source)
        elif release in releases:
            profile = copy.deepcopy(releases[release])
            profile.source = source
        else:
            profile = ReleaseProfile(release=release, source=source)
        if body.get("replace"):
            profile.resources = {}
        for name, entry in body.get("resources", {}).items():
            existing = profile.resources.get(name)
            if existing is None:
                missing = [k for k in ("kind", "storage") if k not in entry]
                if missing:
                    raise errors.ProfileError(
                        f"invalid release profiles in {where}.resources[{json.dumps(name)}]: release {release} has no "
                        f"resource {name} to override, so it needs {' and '.join(missing)}")
                profile.resources[name] = _resource_from_entry(name, entry)
            else:
                merged = {"kind": existing.kind, "storage": existing.storage_version, "served": existing.served,
                          "decodable": existing.decodable, "storage_group": existing.storage_group}
                merged.update(entry)
                profile.resources[name] = _resource_from_entry(name, merged)
        if "removed" in body:
            profile.removed = list(body["removed"])
        releases[release] = profile


def _read_profiles_file(path: str):
    """The only I/O in the pure layer: a user file the operator pointed at."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise errors.ProfileError(f"cannot read the release profiles file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise errors.ProfileError(f"the release profiles file {path} is not a text file (not UTF-8); "
                                  "profiles_file must be a YAML or JSON file") from None
    try:
        import yaml  # YAML is a superset of JSON; ansible-core always brings PyYAML
    except ImportError:  # pragma: no cover
        yaml = None
    try:
        data = yaml.safe_load(text) if yaml is not None else json.loads(text)
    except Exception as exc:  # yaml.YAMLError / ValueError: report the parser's position
        raise errors.ProfileError(f"the release profiles file {path} is not valid YAML or JSON: {exc}") from None
    if data is None:
        raise errors.ProfileError(f"the release profiles file {path} is empty; it needs a top-level 'releases' mapping")
    return data


def load_profiles(profiles_file: Optional[str] = None, profiles: Optional[dict] = None) -> ProfileSet:
    """Shipped profiles, then the user's file, then inline ``profiles`` (each adds or overrides)."""
    releases = _shipped_releases()
    if profiles_file:
        data = _read_profiles_file(profiles_file)
        validate_profiles(data, profiles_file)
        _apply(releases, data, profiles_file)
    if profiles:
        validate_profiles(profiles, "the profiles option")
        _apply(releases, profiles, "the profiles option")
    return ProfileSet(releases)
