# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A CRD's ``status.storedVersions`` after its objects were rewritten: the value to write, or why not (pure).

After a verified rewrite every object of the CRD is stored in its storage version, so ``storedVersions`` may say
that version alone; the guard is cmctl's (the CRD unchanged since the rewrite started).
"""

from __future__ import annotations

from typing import List, Optional, Tuple

from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.crds import stored_versions_errors
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.model import ObservedCrd


def stored_versions_value(crd_at_start: ObservedCrd, crd_now: ObservedCrd) -> Tuple[Optional[List[str]], Optional[str]]:
    """The ``status.storedVersions`` to write after a successful migration, or why not to write it.

    cmctl's guard: only when the CRD's storage version and generation are what they were when the
    migration started; a CRD changed meanwhile may have objects stored in another version. The value
    is checked with the apiserver's own rules because the real ``/status`` endpoint does not check it.
    """
    name = crd_now.name
    start_version, now_version = crd_at_start.storage_version, crd_now.storage_version
    if not now_version:
        return None, f"CRD {name} has no single storage version; storedVersions left unchanged"
    if start_version != now_version:
        return None, (f"CRD {name} changed its storage version from {start_version} to {now_version} during the "
                      "migration; objects may be stored in both. Run the migration again.")
    if crd_at_start.generation != crd_now.generation:
        return None, (f"CRD {name} changed (generation {crd_at_start.generation} -> {crd_now.generation}) "
                      "during the migration; storedVersions left unchanged. Run the migration again.")
    value = [now_version]
    problems = stored_versions_errors(crd_now, value)
    if problems:
        return None, f"CRD {name}: refusing to write storedVersions {value}: {'; '.join(problems)}"
    return value, None


def pruned_meanwhile(crd_at_start: ObservedCrd, crd_now: ObservedCrd) -> bool:
    """storedVersions is now exactly what ``stored_versions_value`` would write, and was not at the start: someone
    else (the in-tree controller) pruned it, on an unchanged CRD, and writing it again would only repeat that."""
    value, why = stored_versions_value(crd_at_start, crd_now)
    return why is None and list(crd_now.stored_versions) == value and list(crd_at_start.stored_versions) != value
