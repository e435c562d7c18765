# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A migration's rewrites against etcd's space: each keeps the old revision until the apiserver compacts, so etcd's
database grows by the bbolt pages the rewritten objects take again (with a margin). Past 95% of the quota (measured, else etcd's default) the
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


def test_the_rewrite_is_the_growth_of_the_versions_the_target_cannot_decode():
    planned = plan.objects_from_audit(audit(db_size=10 * MIB, quota=1024 * MIB))
    assert planned.objects == {"secrets": ["default/a", "default/b"]}
    assert planned.rewrite_bytes == plan.database_growth(2, 40 * MIB) and planned.space_warning == ""
    assert 40 * MIB * 1.25 <= planned.rewrite_bytes < 40 * MIB * 1.26  # large objects: their bytes, plus the margin


# etcd 3.5.30's database growth (dbSize, its status) when every object is put again, per object, by stored size:
# measured with 8 MiB of values put one per request by 8 clients, and (16 800) by kube-apiserver 1.36 rewriting 512
# custom resources of 16 KiB through storage_migration (tests/integration/test_real_migration_space.py).
MEASURED_GROWTH = {300: 458, 1000: 1390, 2000: 4144, 3000: 4103, 4000: 6272, 6000: 6115, 8000: 8114, 16800: 20528,
                   17000: 17680, 50000: 50452, 200000: 200704}


@pytest.mark.parametrize("size", sorted(MEASURED_GROWTH))
def test_the_growth_is_never_below_what_etcd_grew_by_nor_far_above(size):
    """The bytes alone said 2 KiB objects grow the database by half what they did, and the apiserver's 16 KiB ones by
    80%: a migration let through at 94% of the quota then raised NOSPACE."""
    estimated = plan.database_growth(100, 100 * size) / 100
    assert MEASURED_GROWTH[size] <= estimated <= 1.5 * MEASURED_GROWTH[size], (size, estimated)


def test_no_object_grows_nothing():
    assert plan.database_growth(0, 0) == 0 and plan.database_growth(3, 0) == 0


def test_past_95_percent_of_the_measured_quota_is_refused_with_the_recovery_first():
    with pytest.raises(plan.SpaceError) as refused:
        plan.objects_from_audit(audit(db_size=30 * MIB, quota=64 * MIB, in_use=20 * MIB))
    first, detail = str(refused.value).split("\n", 1)
    assert first == ("etcd would reach its space quota: compact and defragment etcd, or raise --quota-backend-bytes, then "
                     "re-run")
    assert "the rewrites grow etcd's database by about 50 MiB, from 30 MiB (20 MiB in use) of its quota, 64 MiB" in detail
    assert "NOSPACE" in detail and "etcdctl alarm disarm" in detail


def test_past_75_percent_warns_and_an_unread_quota_is_etcd_s_default_said_as_such():
    planned = plan.objects_from_audit(audit(db_size=1500 * MIB, quota=None))
    assert "of etcd's default quota (its metrics were not read), 2048 MiB: 76% of it after the migration" in planned.space_warning
    with pytest.raises(plan.SpaceError):
        plan.objects_from_audit(audit(db_size=1990 * MIB, quota=None))


def test_without_etcd_s_numbers_nothing_is_assumed_about_its_size():
    planned = plan.objects_from_audit(audit(db_size=None, quota=None))
    assert planned.rewrite_bytes == plan.database_growth(2, 40 * MIB) and planned.space_warning == ""
