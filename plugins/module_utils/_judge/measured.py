# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Facts measured in etcd by ``storage_version_audit``, as the judge uses them.

Measured beats remembered: where an audit read a resource's keys, what is persisted is exactly the
versions found (no record and no ``Unknown`` needed), and whether objects exist is a count, not a
LIST through an apiserver.

The objects a verdict names are computed for the check's own target from the names the audit kept per
stored version, whatever target the audit itself was run for: a rollback check fed the upgrade's audit
names what the older release cannot decode. An audit without per-version names (before 0.3.0) is used
for names only when it judged the resource against exactly what this target reads; otherwise the
reason says the names are not known.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from ansible_collections.kubeupgrade.storage.plugins.module_utils import audit_result
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.model import ObjectCount
from ansible_collections.kubeupgrade.storage.plugins.module_utils.hashing import UNKNOWN


def validate(audit) -> None:
    """The registered result of ``storage_version_audit`` (``audit_result.parse``), or one error naming the option."""
    if audit is not None:
        audit_result.parse(audit, option="audit")


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


def garbage(audit, name) -> List[str]:
    """Values the audit found that are neither an envelope, JSON nor encrypted: no apiserver can decode them, and
    no migration can rewrite them (the first names; the count is in the audit)."""
    found = entry(audit, name) or {}
    return list(found.get("undecodable_names") or []) if found.get("undecodable") else []


def unreadable_text(audit, name) -> str:
    found = entry(audit, name) or {}
    reasons = "; ".join(f"{reason} ({count})" for reason, count in (found.get("unreadable_reasons") or {}).items())
    names = ", ".join(found.get("unreadable_names") or [])
    return (f"{found.get('unreadable')} stored value(s) of {name} could not be read in etcd"
            + (f" ({reasons})" if reasons else "") + (f": {names}" if names else ""))


def _strip(versions) -> set:
    return {audit_result.version_of(str(v)) for v in versions or []}


def object_names(audit, name, readable) -> Tuple[List[str], str]:
    """The objects the audit found stored in a version outside ``readable`` (what this check's target reads of
    ``name``; None: not known, nothing is named), and a sentence when that list is cut or cannot be made.

    Never names judged for another target: the audit's own ``not_readable_names`` when it judged ``name`` against
    exactly ``readable`` (complete with ``names_limit: -1``), else computed from its names per stored version."""
    found = entry(audit, name)
    if not found or readable is None:
        return [], ""
    limit = audit.get("names_limit")
    if found.get("judged") and _strip(found.get("readable_versions")) == _strip(readable):
        names, count = list(found.get("not_readable_names") or []), found.get("not_readable") or 0
        kept = f"{limit} name(s)" if isinstance(limit, int) and limit >= 0 else "fewer names"
    else:
        computed = audit_result.names_not_readable(found, readable)
        if computed is None:
            judged = (f"judged {name} for a target that reads {', '.join(sorted(_strip(found.get('readable_versions'))))}"
                      if found.get("judged") else f"did not judge {name}")
            return [], (f"Which objects this target cannot decode is not named: the audit {judged} and keeps no names "
                        "per stored version (an audit before kubeupgrade.storage 0.3.0); audit again to name them.")
        names, count = computed
        if isinstance(limit, int) and limit >= 0:
            names = names[:limit]
        per_version = audit.get("version_names_limit", limit)
        kept = f"{per_version} name(s) per stored version" if isinstance(per_version, int) and per_version >= 0 else "fewer names"
    if count > len(names):
        return names, (f"(the first {len(names)} of {count}: the audit kept {kept}; audit with names_limit: -1 for the "
                       "target judged to name every one)")
    return names, ""
