# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Facts measured in etcd by ``storage_version_audit``, as the judge uses them.

Measured beats remembered: where an audit read a resource's keys, what is persisted is exactly the
versions found (no record and no ``Unknown`` needed), and whether objects exist is a count, not a
LIST through an apiserver.
"""

from __future__ import annotations

from typing import Dict, List, Optional

from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.model import ObjectCount
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ConfigurationError
from ansible_collections.kubeupgrade.storage.plugins.module_utils.hashing import UNKNOWN


def validate(audit) -> None:
    """The registered result of ``storage_version_audit``, or one clear error naming the option."""
    if audit is None:
        return
    if not isinstance(audit, dict) or not isinstance(audit.get("resources"), dict) or "measured_at" not in audit:
        raise ConfigurationError("audit must be the registered result of kubeupgrade.storage.storage_version_audit "
                                 "(a dictionary with 'resources' and 'measured_at'); got "
                                 f"{type(audit).__name__}{' without those keys' if isinstance(audit, dict) else ''}.")
    if audit.get("failed"):
        raise ConfigurationError("audit: the storage_version_audit task failed; fix it (its message names the cause) "
                                 "or judge without the audit.")


def _complete(audit) -> bool:
    """Whether a resource missing from the audit means "nothing stored" (no resources filter was applied)."""
    return not audit.get("filtered_out")


def entry(audit, name) -> Optional[dict]:
    return (audit or {}).get("resources", {}).get(name)


def persisted_hashes(audit, name) -> Optional[List[str]]:
    """What is stored, measured (None: this audit did not measure ``name``). ``Unknown`` marks unreadable values."""
    if audit is None:
        return None
    found = entry(audit, name)
    if found is None:
        return [] if _complete(audit) else None
    hashes = list(found.get("hashes") or [])
    if found.get("unreadable"):
        hashes.append(UNKNOWN)
    return hashes


def counts(audit, names) -> Dict[str, ObjectCount]:
    """Object counts from the audit for every name it measured."""
    result = {}
    where = f"measured in etcd at {audit.get('measured_at')}"
    for name in names:
        found = entry(audit, name)
        if found is None and not _complete(audit):
            continue
        objects = (found or {}).get("objects") or 0
        result[name] = ObjectCount(name, present=objects > 0, endpoint=None, detail=where)
    return result


def unreadable_text(audit, name) -> str:
    found = entry(audit, name) or {}
    reasons = "; ".join(f"{reason} ({count})" for reason, count in (found.get("unreadable_reasons") or {}).items())
    names = ", ".join(found.get("unreadable_names") or [])
    return (f"{found.get('unreadable')} stored value(s) of {name} could not be read in etcd"
            + (f" ({reasons})" if reasons else "") + (f": {names}" if names else ""))


def object_names(audit, name) -> List[str]:
    """The objects the audit found in a version its target cannot read (first ``names_limit``)."""
    return list((entry(audit, name) or {}).get("not_readable_names") or [])
