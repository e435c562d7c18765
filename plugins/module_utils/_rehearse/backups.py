# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which kube-apiserver manifest holds the target's flags. For an upgrade, the current static pod manifest: kubeadm
keeps the cluster's flags (its ``apiServer.extraArgs``) across ``kubeadm upgrade``. For a rollback, the current one is
the newer release's: flags that exist only there (a feature gate, a runtime-config group/version) are ignored by, or
stop, the older binary, and it is not how that release ran. ``kubeadm upgrade apply`` and ``kubeadm upgrade node``
keep the manifests they replace, in ``/etc/kubernetes/tmp/kubeadm-backup-manifests-<timestamp>/`` (kubeadm's
``phases/upgrade/staticpods.go``, the directory the rollback tasks restore from): the newest backup whose
kube-apiserver image is of the target release is how the target last ran here.

``choose`` is the decision, on plain data; ``find`` reads the backups on the host."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import List, Optional, Tuple

from ansible_collections.kubeupgrade.storage.plugins.module_utils._rehearse import binaries

BACKUP_PREFIX = "kubeadm-backup-manifests-"


@dataclass
class Backup:
    """One of kubeadm's backups of the kube-apiserver manifest."""

    path: str  # <backups>/kubeadm-backup-manifests-<timestamp>/kube-apiserver.yaml
    image: Optional[str]  # its kube-apiserver image, None when unreadable
    mtime: float = 0.0


def default_directory(manifest_path: str) -> str:
    """kubeadm's backups directory for a manifest at ``<dir>/manifests/kube-apiserver.yaml``: ``<dir>/tmp``."""
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(manifest_path))), "tmp")


def is_rollback(current_image: Optional[str], target_git_version: str) -> bool:
    """Whether the target (``v1.35.3``) is older than the release of the current manifest's image; False when the
    image names no version (a digest, a custom tag)."""
    current = binaries.image_version(current_image or "")
    target = binaries.image_version(f"kube-apiserver:{target_git_version}")
    return bool(current and target and target < current)


def choose(current_image: Optional[str], target_git_version: str, backups: List[Backup]) -> Tuple[Optional[Backup], str]:
    """The backup whose flags the target runs with (None: the current manifest's), and why, said for the report."""
    if not is_rollback(current_image, target_git_version):
        return None, ""
    target = binaries.image_version(f"kube-apiserver:{target_git_version}")
    release = f"{target[0]}.{target[1]}"
    fitting = [b for b in backups if (binaries.image_version(b.image or "") or ())[:2] == target[:2]]
    if not fitting:
        return None, (f"a rollback from {current_image}, and kubeadm kept no backup of a {release} kube-apiserver manifest "
                      "here: the current manifest's flags")
    newest = max(fitting, key=lambda b: (b.mtime, b.path))
    return newest, f"kubeadm's backup {newest.path} of the {release} manifest ({newest.image}), for a rollback from {current_image}"


def find(directory: str) -> List[Backup]:
    """kubeadm's backups of the kube-apiserver manifest under ``directory`` (none when it does not exist)."""
    found = []
    try:
        entries = os.listdir(directory)
    except OSError:
        return found
    for entry in entries:
        path = os.path.join(directory, entry, "kube-apiserver.yaml")
        if entry.startswith(BACKUP_PREFIX) and os.path.isfile(path):
            try:
                mtime = os.path.getmtime(os.path.join(directory, entry))
            except OSError:
                mtime = 0.0
            found.append(Backup(path=path, image=binaries.image_of_manifest(path), mtime=mtime))
    return found
