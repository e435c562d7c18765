# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A migration's rewrites against etcd's space: each keeps the old revision until the apiserver compacts, so etcd's
database grows by about the rewritten objects' stored bytes. Past 95% of the quota (measured, else etcd's default) the
migration is refused before its first write - at the quota the NOSPACE alarm makes the cluster read-only - and past
75% it warns."""

from __future__ import annotations

import pytest

from ansible_collections.kubeupgrade.storage.plugins.module_utils._migrate import plan

MIB = plan.MIB


def audit(db_size, quota=None, old_bytes=40 * MIB, in_use=None):
    return {
        "measured_at": "2026-12-02T20:00:00Z", "not_readable": 2, "keys_scanned": 3, "endpoint": "https://127.0.0.1:2379",
        "prefix": "/registry",
        "etcd_space": {"db_size": db_size, "db_size_in_use": in_use, "quota": quota},
        "resources": {"secrets": {
            "group": "", "resource": "secrets", "objects": 3, "bytes": old_bytes + 1000, "judged": True,
            "readable_versions": ["v1"], "not_readable": 2, "not_readable_names": ["default/a", "default/b"], "unreadable": 0,
            "versions": [{"api_version": "v1", "kind": "Secret", "count": 1, "bytes": 1000, "hash": "h1", "names": ["default/c"]},
                         {"api_version": "v1beta9", "kind": "Secret", "count": 2, "bytes": old_bytes, "hash": "h0",
                          "names": ["default/a", "default/b"]}]}}}


def test_the_rewrite_is_the_bytes_of_the_versions_the_target_cannot_decode():
    planned = plan.objects_from_audit(audit(db_size=10 * MIB, quota=1024 * MIB))
    assert planned.objects == {"secrets": ["default/a", "default/b"]}
    assert planned.rewrite_bytes == 40 * MIB and planned.space_warning == ""


def test_past_95_percent_of_the_measured_quota_is_refused_with_the_recovery_first():
    with pytest.raises(plan.SpaceError) as refused:
        plan.objects_from_audit(audit(db_size=30 * MIB, quota=64 * MIB, in_use=20 * MIB))
    first, detail = str(refused.value).split("\n", 1)
    assert first == ("etcd would reach its space quota: compact and defragment etcd, or raise --quota-backend-bytes, then "
                     "re-run")
    assert "about 40 MiB into etcd again, whose database is 30 MiB (20 MiB in use) of its quota, 64 MiB" in detail
    assert "NOSPACE" in detail and "etcdctl alarm disarm" in detail


def test_past_75_percent_warns_and_an_unread_quota_is_etcd_s_default_said_as_such():
    planned = plan.objects_from_audit(audit(db_size=1500 * MIB, quota=None))
    assert "of etcd's default quota (its metrics were not read), 2048 MiB: 75% of it after the migration" in planned.space_warning
    with pytest.raises(plan.SpaceError):
        plan.objects_from_audit(audit(db_size=1990 * MIB, quota=None))


def test_without_etcd_s_numbers_nothing_is_assumed_about_its_size():
    planned = plan.objects_from_audit(audit(db_size=None, quota=None))
    assert planned.rewrite_bytes == 40 * MIB and planned.space_warning == ""
