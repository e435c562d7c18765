# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The etcd release a binary reports, and the command line and restore tool each release takes.

etcd 3.6 renamed the graduated ``--experimental-*`` flags, made others feature gates, removed the v2 and proxy
flags, deprecated ``--snapshot-count`` and removed ``etcdctl snapshot restore``: the scratch etcd of 3.4, 3.5 and 3.6
each gets a command line its release takes. The 3.4 and 3.5 outputs are the real binaries'; 3.6's follows its
``server/etcdmain/config.go`` (no 3.6 binary is at hand)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd import versions
from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd.versions import EtcdVersion

FIXTURES = Path(__file__).resolve().parents[4] / "fixtures" / "etcd-version"
ETCD_36 = "etcd Version: 3.6.5\nGit SHA: Not provided (use ./build instead of go build)\nGo Version: go1.24.6\nGo OS/Arch: linux/amd64\n"


@pytest.mark.parametrize("text, expected", [
    ((FIXTURES / "etcd-3.4.23.txt").read_text(encoding="utf-8"), (3, 4, 23)),
    ((FIXTURES / "etcd-3.5.30.txt").read_text(encoding="utf-8"), (3, 5, 30)),
    (ETCD_36, (3, 6, 5)),
    ("etcd Version: 3.6.0-rc.5\nGit SHA: x\n", (3, 6, 0)),  # a pre-release is its release
    ("{\"level\":\"warn\"}\netcd Version: 3.5.9\n", (3, 5, 9)),  # a log line first
    ("Kubernetes v1.33.5\n", None),  # not etcd
    ("etcdctl version: 3.4.23\nAPI version: 3.4\n", None),  # etcdctl, not etcd
    ("etcd Version: unknown\n", None),
    ("", None),
])
def test_the_version_is_read_from_etcd_version_line(text, expected):
    assert versions.parse(text) == expected


def test_a_version_compares_with_plain_tuples_and_prints_as_etcd_does():
    version = EtcdVersion(3, 5, 30)
    assert (3, 5) <= version < (3, 6) and version >= versions.OLDEST and str(version) == "3.5.30"
    assert EtcdVersion(3, 6, 0) >= (3, 6) and EtcdVersion(3, 3, 27) < versions.OLDEST


TUNING = ["--max-txn-ops=1000", "--max-request-bytes=9437184", "--quota-backend-bytes=8589934592"]


@pytest.mark.parametrize("version, expected", [
    ((3, 4, 23), TUNING + ["--snapshot-count=1000000", "--log-level=warn"]),
    ((3, 5, 30), TUNING + ["--snapshot-count=1000000", "--log-level=warn"]),
    # 3.6 deprecates --snapshot-count (a warning at every start, gone in 3.7): its default stays
    ((3, 6, 0), TUNING + ["--log-level=warn"]),
    ((3, 7, 1), TUNING + ["--log-level=warn"]),  # a newer release is built like the newest known
])
def test_the_scratch_etcd_flags_per_release(version, expected):
    args = versions.command_args(version, versions.scratch_flags(version, 1000, 9 << 20, 8 << 30))
    assert args == expected
    names = {arg[2:].split("=")[0] for arg in args}
    assert not names & set(versions.REMOVED_IN_3_6), names
    assert not any(name.startswith("experimental-") for name in names), names
    if version >= (3, 6):
        assert not names & set(versions.DEPRECATED_IN_3_6), names


@pytest.mark.parametrize("name, before_36, from_36", [
    ("watch-progress-notify-interval", "experimental-watch-progress-notify-interval", "watch-progress-notify-interval"),
    ("experimental-watch-progress-notify-interval", "experimental-watch-progress-notify-interval",
     "watch-progress-notify-interval"),
    ("experimental-snapshot-catchup-entries", "experimental-snapshot-catchup-entries", "snapshot-catchup-entries"),
    ("compact-hash-check-time", "experimental-compact-hash-check-time", "compact-hash-check-time"),
    ("experimental-corrupt-check-time", "experimental-corrupt-check-time", "corrupt-check-time"),
    ("experimental-compaction-batch-limit", "experimental-compaction-batch-limit", "compaction-batch-limit"),
    ("experimental-memory-mlock", "experimental-memory-mlock", "memory-mlock"),
    ("experimental-warning-apply-duration", "experimental-warning-apply-duration", "warning-apply-duration"),
    ("experimental-bootstrap-defrag-threshold-megabytes", "experimental-bootstrap-defrag-threshold-megabytes",
     "bootstrap-defrag-threshold-megabytes"),
    ("experimental-enable-distributed-tracing", "experimental-enable-distributed-tracing", "enable-distributed-tracing"),
    ("max-txn-ops", "max-txn-ops", "max-txn-ops"),  # never renamed
    ("snapshot-count", "snapshot-count", "snapshot-count"),  # deprecated in 3.6, not renamed
])
def test_a_renamed_flag_takes_each_release_s_name_given_either(name, before_36, from_36):
    assert versions.flag_name((3, 4, 23), name) == before_36
    assert versions.flag_name((3, 5, 30), name) == before_36
    assert versions.flag_name((3, 6, 0), name) == from_36


def test_flags_that_became_feature_gates_pass_as_one_feature_gates_flag_from_36():
    flags = {"experimental-initial-corrupt-check": "true", "experimental-watch-progress-notify-interval": "5s",
             "experimental-compact-hash-check-enabled": "true"}
    assert versions.command_args((3, 5, 30), flags) == [
        "--experimental-initial-corrupt-check=true", "--experimental-watch-progress-notify-interval=5s",
        "--experimental-compact-hash-check-enabled=true"]
    assert versions.command_args((3, 6, 0), flags) == [
        "--watch-progress-notify-interval=5s", "--feature-gates=InitialCorruptCheck=true,CompactHashCheck=true"]
    with pytest.raises(ValueError, match="feature gate InitialCorruptCheck"):
        versions.flag_name((3, 6, 0), "experimental-initial-corrupt-check")


@pytest.mark.parametrize("name", ["enable-v2", "experimental-enable-v2v3", "proxy"])
def test_a_flag_36_removed_is_refused_there_only(name):
    assert versions.flag_name((3, 5, 30), name) == name
    with pytest.raises(ValueError, match=f"etcd 3.6 removed --{name}"):
        versions.command_args((3, 6, 0), {name: "true"})


@pytest.mark.parametrize("version, tools, etcdctl_refused", [
    ((3, 4, 23), ("etcdctl",), False),  # 3.4 has no etcdutl
    ((3, 5, 30), ("etcdutl",), False),  # etcdutl from 3.5; etcdctl's restore still works there (deprecated)
    ((3, 6, 0), ("etcdutl",), True),  # etcdctl snapshot restore was removed in 3.6
    ((3, 7, 0), ("etcdutl",), True),
])
def test_the_restore_tool_per_release(version, tools, etcdctl_refused):
    assert versions.restore_tools(version) == tools
    assert bool(versions.restore_refusal(version, "/usr/bin/etcdctl")) is etcdctl_refused
    assert versions.restore_refusal(version, "/opt/etcd/etcdutl") == ""
    if etcdctl_refused:
        assert "etcdctl" in versions.restore_refusal(version, "/usr/bin/etcdctl")
        assert f"etcdutl of etcd {version[0]}.{version[1]}" in versions.restore_refusal(version, "/usr/bin/etcdctl")
