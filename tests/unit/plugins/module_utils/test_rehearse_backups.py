# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""For a rollback, the target's flags come from kubeadm's backup of a manifest of the target release."""

from __future__ import annotations

import os

import pytest

from ansible_collections.kubeupgrade.storage.plugins.module_utils._rehearse import backups
from ansible_collections.kubeupgrade.storage.plugins.module_utils._rehearse.backups import Backup

NOW = "registry.k8s.io/kube-apiserver:v1.36.2"
B135 = Backup("/etc/kubernetes/tmp/kubeadm-backup-manifests-2026-03-01-10-00-00/kube-apiserver.yaml",
              "registry.k8s.io/kube-apiserver:v1.35.3", 100.0)
B135_OLDER = Backup("/etc/kubernetes/tmp/kubeadm-backup-manifests-2026-01-01-10-00-00/kube-apiserver.yaml",
                    "registry.k8s.io/kube-apiserver:v1.35.1", 50.0)
B134 = Backup("/etc/kubernetes/tmp/kubeadm-backup-manifests-2025-10-01-10-00-00/kube-apiserver.yaml",
              "mirror.example.com/kube-apiserver:v1.34.4", 10.0)
UNREADABLE = Backup("/etc/kubernetes/tmp/kubeadm-backup-manifests-2026-04-01-10-00-00/kube-apiserver.yaml", None, 200.0)


@pytest.mark.parametrize("current, target, found, expected, why", [
    # an upgrade, or the same release: the current manifest, nothing said
    (NOW, "v1.37.0", [B135], None, ""),
    (NOW, "v1.36.2", [B135], None, ""),
    # a rollback: the newest backup of the target release, whatever the patch and registry
    (NOW, "v1.35.3", [B134, B135_OLDER, B135, UNREADABLE], B135, "kubeadm's backup " + B135.path),
    (NOW, "v1.35.0", [B135_OLDER], B135_OLDER, "v1.35.1), for a rollback from " + NOW),
    (NOW, "v1.34.4", [B135, B134], B134, "of the 1.34 manifest"),
    # a patch rollback is a rollback too
    ("registry.k8s.io/kube-apiserver:v1.35.5", "v1.35.3", [B135], B135, "kubeadm's backup"),
    # no backup of the target release: the current manifest, and why
    (NOW, "v1.33.5", [B135, B134, UNREADABLE], None, "kubeadm kept no backup of a 1.33 kube-apiserver manifest"),
    # no version in the current image (a digest): not known to be a rollback
    ("registry.k8s.io/kube-apiserver@sha256:0123abcd", "v1.35.3", [B135], None, ""),
    (None, "v1.35.3", [B135], None, ""),
])
def test_a_rollback_takes_the_newest_backup_of_the_target_release(current, target, found, expected, why):
    chosen, reason = backups.choose(current, target, found)
    assert chosen == expected
    assert (why in reason) if why else reason == ""


def test_the_backups_are_kubeadms_directories_with_a_kube_apiserver_manifest(tmp_path):
    for name, manifest in (("kubeadm-backup-manifests-2026-03-01-10-00-00", True), ("kubeadm-backup-etcd-2026-03-01", True),
                           ("kubeadm-backup-manifests-2026-02-01-10-00-00", False)):
        (tmp_path / name).mkdir()
        if manifest:
            (tmp_path / name / "kube-apiserver.yaml").write_text(
                "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: kube-apiserver\n"
                "    image: registry.k8s.io/kube-apiserver:v1.35.3\n")
    found = backups.find(str(tmp_path))
    assert [(os.path.basename(os.path.dirname(b.path)), b.image) for b in found] == [
        ("kubeadm-backup-manifests-2026-03-01-10-00-00", "registry.k8s.io/kube-apiserver:v1.35.3")]
    assert backups.find(str(tmp_path / "absent")) == []
    assert backups.default_directory("/etc/kubernetes/manifests/kube-apiserver.yaml") == "/etc/kubernetes/tmp"
