# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Rehearse the plan: migrate the copy through the current binary first, as the upgrade would, then read it with
the target. The proof that the migration makes everything readable, and a measured duration for the real one.

Every stored resource the current binary serves is rewritten with the collection's own client-side migrator
(the same code ``storage_migration`` runs), and each CRD's ``status.storedVersions`` is pruned to its storage
version afterwards, as ``storage_migration`` does. All of it happens on the copy only.
"""

from __future__ import annotations

import time
from typing import Dict

from ansible_collections.kubeupgrade.storage.plugins.module_utils._http import paths
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.poll import Deadline
from ansible_collections.kubeupgrade.storage.plugins.module_utils._rehearse import reader
from ansible_collections.kubeupgrade.storage.plugins.module_utils._rewrite import stored_versions_io
from ansible_collections.kubeupgrade.storage.plugins.module_utils._rewrite.migrator import ClientMigrator, ClientOptions, ResourceTarget
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ApiError, MigrationError
from ansible_collections.kubeupgrade.storage.plugins.module_utils.resources import GroupResource


def migrate_all(client, stored: reader.StoredKeys, served: reader.Served, timeout: float) -> Dict[str, dict]:
    """Rewrite every stored resource the current binary serves; per resource: objects migrated, failures, seconds."""
    deadline = Deadline.after(timeout)
    outcome = {}
    for name in sorted(stored.counts):
        where = served.resources.get(name)
        if where is None:
            outcome[name] = {"migrated": 0, "failed": 0, "error": "the current binary does not serve it", "seconds": 0.0}
            continue
        group, version, namespaced = where
        crd = client.get_or_none(paths.crd(name)) if "." in name else None
        started = time.monotonic()
        target = ResourceTarget(GroupResource(group, name.split(".", 1)[0]), version, namespaced, kind=served.kinds.get(name, ""))
        try:
            progress = ClientMigrator(client, target, ClientOptions()).configure(deadline=deadline).run()
            pruned = stored_versions_io.prune_stored_versions(client, crd) if crd is not None and progress.failed == 0 else None
            outcome[name] = {"migrated": progress.objects_migrated, "failed": progress.failed, "error": None,
                             "pruned_stored_versions": pruned, "seconds": round(time.monotonic() - started, 2)}
        except (MigrationError, ApiError) as error:
            outcome[name] = {"migrated": 0, "failed": stored.counts[name], "error": str(error)[:400],
                             "seconds": round(time.monotonic() - started, 2)}
    return outcome
