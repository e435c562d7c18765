# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Target CRD manifests as operators give them: files, directories, dictionaries or YAML text.

The check, the audit, the rehearsal and the migration's ``select: from_check`` read the same option the same way,
so it lives here, next to the pure parsing in ``crds.py``; this file only adds the reading of paths.
"""

from __future__ import annotations

import os

from ansible.module_utils.common.validation import check_type_path

from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe import crds
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ManifestError

_MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


def _looks_inline(text: str) -> bool:
    return "\n" in text or text.lstrip().startswith(("{", "apiVersion", "kind", "---"))


def read_items(items) -> list:
    """Paths (files or directories) and inline manifests -> [(label, manifest text or object)]; one clear error per bad item."""
    loaded = []
    for index, item in enumerate(items or []):
        if isinstance(item, str) and not _looks_inline(item):
            path = check_type_path(item)  # the same ~ and $VAR expansion as an option of type path
            if os.path.isdir(path):
                files = sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(_MANIFEST_SUFFIXES))
                if not files:
                    raise ManifestError(f"target_crds #{index + 1}: directory {item} has no .yaml, .yml or .json files")
            elif os.path.isfile(path):
                files = [path]
            else:
                where = "" if os.path.isabs(path) else f" (a relative path is read from {os.getcwd()})"
                raise ManifestError(f"target_crds #{index + 1}: file {item} does not exist{where}; give an existing path, "
                                    "a CRD as a dictionary, or the manifest text")
            for file_path in files:
                try:
                    with open(file_path, encoding="utf-8") as handle:
                        loaded.append((f"target CRD manifest {file_path}", handle.read()))
                except OSError as exc:
                    raise ManifestError(f"cannot read target CRD manifest {file_path}: {exc.strerror or exc}") from None
                except UnicodeDecodeError:
                    raise ManifestError(f"target_crds #{index + 1}: {file_path} is not a text file (not UTF-8); "
                                        "give CRD manifests as YAML or JSON files") from None
        else:
            loaded.append((f"target_crds #{index + 1}", item))
    return loaded


def _load(items, parse) -> dict:
    result = {}
    for label, item in read_items(items):
        for name, crd in parse([item], label=label).items():
            if name in result:
                raise ManifestError(f"{label}: CRD {name} is given more than once in target_crds")
            result[name] = crd
    return result


def load_target_crds(items) -> dict:
    """Paths (files or directories) and inline manifests -> {name: ObservedCrd}; one clear error per bad item."""
    return _load(items, crds.parse_manifests)


def load_target_crd_objects(items) -> dict:
    """The same manifests as the objects given, {name: dict}, for applying them (to a rehearsal's copy only)."""
    return _load(items, crds.manifest_objects)
