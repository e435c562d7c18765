# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The registered result of ``storage_version_audit``, as every capability that takes one reads it: as data.

The judge (``storage_version_check`` ``audit``), the records (``storage_state`` ``audit``) and the object-level
migration (``storage_migration`` ``objects_from_audit``) read the same result: one rule decides whether a value is
one (``parse``), and one message names the option, the field and the next step. What a caller then needs of the audit
(a target it was judged for, complete name lists) is that caller's own check. The readers below
(``records_from_audit``, ``objects_from_audit``, ``names_not_readable``, ``crds_from_audit``, ``truncated_from_audit``)
are what they take from it, so none of them imports the audit's package.

Pure: a value in, an ``AuditResult``, plain data or a ``ConfigurationError`` out. A shared file: over ``errors``,
``hashing`` and the etcd layer's key layout.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Dict, FrozenSet, Iterable, List, Optional, Tuple

from ansible_collections.kubeupgrade.storage.plugins.module_utils import hashing
from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd import keys
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ConfigurationError

NEXT_STEP = "pass the result of kubeupgrade.storage.storage_version_audit (register: audit, then {option}: \"{{{{ audit }}}}\")"


def parse_time(value) -> Optional[datetime]:
    """RFC 3339 (``Z`` or offset, optional fraction; no offset is UTC), as Kubernetes and the audit write times ->
    aware datetime; None when absent or unreadable."""
    if not value or not isinstance(value, str):
        return None
    text = value.strip()
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    main, dot, rest = text.partition(".")
    if dot:  # Python 3.9's fromisoformat only takes 3 or 6 fraction digits: drop the fraction
        text = main + rest.lstrip("0123456789")
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


@dataclass(frozen=True)
class AuditResult:
    """A checked audit result. ``document`` is the result as given (its other keys are read where they are used);
    ``audited`` the ``resources`` filter the audit ran with, from the registered result's ``invocation`` (None: none
    given, or not known)."""

    document: dict
    resources: Dict[str, dict]
    keys_scanned: int
    endpoint: str
    prefix: str
    measured_at: datetime
    audited: Optional[FrozenSet[str]] = None

    @property
    def source(self) -> str:
        """Where it was measured: the etcd endpoint and the key prefix it read."""
        return f"{self.endpoint}{self.prefix}"


def _type(value) -> str:
    return type(value).__name__


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _refuse(option: str, problem: str) -> ConfigurationError:
    return ConfigurationError(f"{option} {problem}; {NEXT_STEP.format(option=option)}.", details={"option": option})


def _check_entry(option: str, name: str, entry) -> None:
    where = f"is not a storage_version_audit result: resources[{name}]"
    if not isinstance(entry, dict):
        raise _refuse(option, f"{where} is not an audit entry (a dict with objects, hashes, versions), got {_type(entry)}")
    if not _whole(entry.get("objects")):
        raise _refuse(option, f"{where}.objects must be a whole number, got {entry.get('objects')!r}")
    hashes = entry.get("hashes", [])
    if not isinstance(hashes, list) or not all(isinstance(h, str) for h in hashes):
        raise _refuse(option, f"{where}.hashes must be a list of storage version hashes, got {hashes!r}")
    versions = entry.get("versions", [])
    if not isinstance(versions, list) or not all(isinstance(v, dict) for v in versions):
        raise _refuse(option, f"{where}.versions must be a list of dicts (api_version, kind, count, hash), got {versions!r}")


def _audited(document: dict) -> Optional[FrozenSet[str]]:
    args = (document.get("invocation") or {}).get("module_args") if isinstance(document.get("invocation"), dict) else None
    names = args.get("resources") if isinstance(args, dict) else None
    return frozenset(str(n) for n in names) if isinstance(names, list) and names else None


def parse(value, option: str = "audit") -> AuditResult:
    """``value`` checked as the registered result of ``storage_version_audit``; ``option`` is the module option it
    came from, named by every error (before any request)."""
    if not isinstance(value, dict):
        raise _refuse(option, f"must be a dict, got {_type(value)}")
    if value.get("failed") or value.get("skipped"):
        raise ConfigurationError(f"{option} is a failed or skipped audit: nothing was measured; fix the "
                                 "storage_version_audit task (its msg names the cause), run it again and pass its result.",
                                 details={"option": option})
    not_one = "is not a storage_version_audit result:"
    resources = value.get("resources")
    if not isinstance(resources, dict):
        raise _refuse(option, f"{not_one} resources must be a dict of audit entries, got {_type(resources)}")
    if not _whole(value.get("keys_scanned")):
        raise _refuse(option, f"{not_one} keys_scanned must be a whole number, got {value.get('keys_scanned')!r}")
    endpoint = value.get("endpoint")
    if not endpoint or not isinstance(endpoint, str):
        raise _refuse(option, f"{not_one} endpoint (the etcd it read) must be a URL, got {endpoint!r}")
    prefix = value.get("prefix") or ""
    if not isinstance(prefix, str):
        raise _refuse(option, f"{not_one} prefix must be a string, got {prefix!r}")
    measured_at = parse_time(value.get("measured_at"))
    if measured_at is None:
        raise _refuse(option, f"{not_one} measured_at must be an RFC 3339 time, got {value.get('measured_at')!r}")
    for name, entry in resources.items():
        _check_entry(option, name, entry)
    if not isinstance(value.get("crds", {}), dict):
        raise _refuse(option, f"{not_one} crds must be a dict of CustomResourceDefinitions, got {_type(value.get('crds'))}")
    if not isinstance(value.get("crds_unread", []), list):
        raise _refuse(option, f"{not_one} crds_unread must be a list, got {_type(value.get('crds_unread'))}")
    return AuditResult(value, resources, value["keys_scanned"], endpoint, prefix, measured_at, _audited(value))


def version_of(api_version: str) -> str:
    """``apps/v1`` -> ``v1``; ``v1`` -> ``v1``."""
    return api_version.rpartition("/")[2]


def group_of(api_version: str) -> str:
    return api_version.rpartition("/")[0]


def _audit_entry(audit_result: dict, resource: str) -> Optional[dict]:
    found = (audit_result.get("resources") or {})
    return found.get(resource) or found.get(keys.SHARED_STORAGE.get(resource, ""))


def records_from_audit(audit_result: dict, current_hashes: Dict[str, str]) -> Dict[str, List[str]]:
    """Persisted storage version hashes per resource, measured: exactly the hashes found in etcd.

    ``[current]`` when nothing is stored or only the current version is; ``Unknown`` is added when a
    stored value could not be read (fail closed: its version is not established).
    """
    records = {}
    for resource, current in current_hashes.items():
        entry = _audit_entry(audit_result, resource)
        if not entry or not entry.get("objects"):
            records[resource] = [current]
            continue
        found = set(entry.get("hashes") or [])
        if entry.get("unreadable"):
            found.add(hashing.UNKNOWN)
        others = sorted(found - {current})
        records[resource] = others + [current] if current in found else others
        if not records[resource]:
            records[resource] = [current]
    return records


def objects_from_audit(audit_result: dict) -> Dict[str, List[str]]:
    """Names (``namespace/name`` or ``name``) of the objects each resource stores in a version the audit's
    target cannot decode: what an object-level migration rewrites. Complete only when the audit ran with
    ``names_limit: -1``; ``truncated_from_audit`` tells."""
    return {name: list(entry.get("not_readable_names") or [])
            for name, entry in (audit_result.get("resources") or {}).items()
            if entry.get("not_readable")}


def names_not_readable(entry: dict, readable: Iterable[str]) -> Optional[Tuple[List[str], int]]:
    """The objects of one audited resource (``audit["resources"][name]``) stored in a version outside ``readable``
    (versions such as ``v1``, or ``apps/v1``): ``(names, count)``, the names the audit kept per stored version (at
    most ``version_names_limit`` each; ``len(names) < count`` when cut). Computed for any target from the per-version names;
    None for an audit without them (before 0.3.0), whose ``not_readable_names`` are for its own target only."""
    readable = {version_of(v) for v in readable}
    versions = (entry or {}).get("versions") or []
    if any("names" not in v for v in versions) or (not versions and (entry or {}).get("objects")):
        return None
    names, count = [], 0
    for stored in versions:
        if version_of(stored["api_version"]) not in readable:
            names.extend(stored["names"])
            count += stored["count"]
    return names, count


def crds_from_audit(audit_result: dict) -> Dict[str, dict]:
    """The CustomResourceDefinitions the audit read (``crd_definition``), by name; empty for an audit before 0.3.0."""
    return dict(audit_result.get("crds") or {})


def truncated_from_audit(audit_result: dict) -> List[str]:
    """Resources whose name lists were cut at ``names_limit`` (object-level work must not trust them)."""
    return sorted(name for name, entry in (audit_result.get("resources") or {}).items()
                  if (entry.get("not_readable") or 0) > len(entry.get("not_readable_names") or [])
                  or (entry.get("unreadable") or 0) > len(entry.get("unreadable_names") or []))
