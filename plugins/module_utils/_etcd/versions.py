# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""etcd releases and the command lines they take, as plain data.

The collection starts etcd of whatever release the host has (the rehearsal's scratch copy, the snapshot's restore
proof), so it reads the version the binary reports and builds that release's command line. etcd 3.6 renamed the
graduated ``--experimental-*`` flags and turned others into feature gates (the old names still work, with a warning,
until 3.7 removes them), removed the v2 and proxy flags, deprecated ``--snapshot-count`` and lowered its default, and
removed ``etcdctl snapshot restore`` (``etcdutl snapshot restore`` does it since 3.5). Sources, from etcd itself:

- CHANGELOG-3.6 (https://github.com/etcd-io/etcd/blob/main/CHANGELOG/CHANGELOG-3.6.md): "Flags Removed",
  "Removed etcdctl snapshot restore" (etcd-io/etcd#13809), "Decreased --snapshot-count default value from 100,000 to
  10,000" (etcd-io/etcd#15408);
- "Downgrade etcd from v3.6 to v3.5", "Difference in flags" (https://etcd.io/docs/v3.6/downgrades/downgrade_3_6/):
  the renamed flags and the feature gates' equivalent flags;
- etcd 3.6's ``server/etcdmain/config.go`` (``deprecatedFlags``: ``--snapshot-count``, ``--max-snapshots`` and every
  renamed ``--experimental-*`` flag warn, "decommissioned in 3.7") and ``server/features/etcd_features.go``
  (``ExperimentalFlagToFeatureMap``).
"""

from __future__ import annotations

import re
from typing import Dict, List, NamedTuple, Optional, Tuple


class EtcdVersion(NamedTuple):
    """A release as ``etcd --version`` reports it; compares with plain tuples (``version >= (3, 6)``)."""

    major: int
    minor: int
    patch: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"


OLDEST = EtcdVersion(3, 4, 0)  # the oldest the scratch etcd runs: --log-level came in 3.4
_VERSION_LINE = re.compile(r"^\s*etcd Version:\s*v?(\d+)\.(\d+)\.(\d+)", re.MULTILINE)


def parse(text: str) -> Optional[EtcdVersion]:
    """The version of ``etcd --version``'s output (its ``etcd Version: 3.5.30`` line; ``Git SHA``, ``Go Version`` and
    a pre-release suffix are ignored); None when there is no such line."""
    match = _VERSION_LINE.search(text or "")
    return EtcdVersion(*(int(part) for part in match.groups())) if match else None


# etcd 3.6's name -> the name 3.4 and 3.5 take (the downgrade guide's "same flag with different names"). The name
# says what a release calls the flag, not that the release has it: several came in 3.5 patch releases, and etcd
# 3.5.30 has neither --experimental-max-learners nor --experimental-warning-unary-request-duration.
RENAMED_IN_3_6: Dict[str, str] = {name: "experimental-" + name for name in (
    "bootstrap-defrag-threshold-megabytes", "compaction-batch-limit", "compact-hash-check-time",
    "compaction-sleep-interval", "corrupt-check-time", "enable-distributed-tracing", "distributed-tracing-address",
    "distributed-tracing-instance-id", "distributed-tracing-sampling-rate", "distributed-tracing-service-name",
    "downgrade-check-time", "max-learners", "memory-mlock", "peer-skip-client-san-verification",
    "snapshot-catchup-entries", "warning-apply-duration", "warning-unary-request-duration",
    "watch-progress-notify-interval")}
# Flags of 3.4 and 3.5 that are feature gates from 3.6 (``--feature-gates=Gate=true``), from ExperimentalFlagToFeatureMap.
GATES_IN_3_6: Dict[str, str] = {
    "experimental-initial-corrupt-check": "InitialCorruptCheck",
    "experimental-compact-hash-check-enabled": "CompactHashCheck",
    "experimental-enable-lease-checkpoint": "LeaseCheckpoint",
    "experimental-enable-lease-checkpoint-persist": "LeaseCheckpointPersist",
    "experimental-stop-grpc-service-on-defrag": "StopGRPCServiceOnDefrag",
    "experimental-txn-mode-write-with-shared-buffer": "TxnModeWriteWithSharedBuffer",
}
REMOVED_IN_3_6 = ("enable-v2", "experimental-enable-v2v3", "proxy", "proxy-failure-wait", "proxy-refresh-interval",
                  "proxy-dial-timeout", "proxy-write-timeout", "proxy-read-timeout")
# Still taken by 3.6, with a warning; 3.7 decommissions the first two (etcdmain's deprecatedFlags).
DEPRECATED_IN_3_6 = ("snapshot-count", "max-snapshots", "v2-deprecation")
_RENAMED_FROM = {old: new for new, old in RENAMED_IN_3_6.items()}


def flag_name(version: Tuple[int, ...], name: str) -> str:
    """The name ``version`` takes for a flag given by either of its names (``watch-progress-notify-interval`` or
    ``experimental-watch-progress-notify-interval``). A ValueError for a flag that release no longer has, or that is
    a feature gate there (``command_args`` passes those)."""
    new = _RENAMED_FROM.get(name, name)
    if new in RENAMED_IN_3_6:
        return new if version >= (3, 6) else RENAMED_IN_3_6[new]
    if version >= (3, 6) and name in REMOVED_IN_3_6:
        raise ValueError(f"etcd 3.6 removed --{name}")
    if version >= (3, 6) and name in GATES_IN_3_6:
        raise ValueError(f"--{name} is the feature gate {GATES_IN_3_6[name]} from etcd 3.6 (--feature-gates)")
    return name


def command_args(version: Tuple[int, ...], flags: Dict[str, str]) -> List[str]:
    """``--name=value`` for each flag as ``version`` takes it; from 3.6 the flags that became feature gates are passed
    as one ``--feature-gates`` (their values must be true or false)."""
    args, gates = [], []
    for name, value in flags.items():
        if version >= (3, 6) and name in GATES_IN_3_6:
            gates.append(f"{GATES_IN_3_6[name]}={value}")
        else:
            args.append(f"--{flag_name(version, name)}={value}")
    return args + ([f"--feature-gates={','.join(gates)}"] if gates else [])


SNAPSHOT_COUNT = 1000000  # raft entries between two etcd snapshots on 3.4 and 3.5: none during a copy


def scratch_flags(version: Tuple[int, ...], txn_ops: int, request_bytes: int, quota_bytes: int) -> Dict[str, str]:
    """What the scratch etcd tunes beyond its name, directories and URLs (the same on every release 3.4 to 3.6): the
    transaction size of the bulk copy, room for the whole copy, and only warnings in its log.

    ``--snapshot-count`` only before 3.6: 3.6 deprecates it (a warning at every start; 3.7 decommissions it) and
    lowered its default to 10,000, the scratch etcd keeps that default there. No ``--experimental-*`` flag is needed:
    one member on loopback, written once and read, has no follower to catch up, no corruption to check across
    members and no watch cache to feed (its apiserver runs with --watch-cache=false)."""
    flags = {"max-txn-ops": str(txn_ops), "max-request-bytes": str(request_bytes), "quota-backend-bytes": str(quota_bytes)}
    if version < (3, 6):
        flags["snapshot-count"] = str(SNAPSHOT_COUNT)
    flags["log-level"] = "warn"
    return flags


def restore_tools(version: Tuple[int, ...]) -> Tuple[str, ...]:
    """The tool that restores a snapshot for ``version``'s data directory: etcdutl from 3.5 (etcdctl's restore is
    deprecated there and gone in 3.6), etcdctl on 3.4 (which has no etcdutl)."""
    return ("etcdutl",) if version >= (3, 5) else ("etcdctl",)


def restore_refusal(version: Tuple[int, ...], tool: str) -> str:
    """Why ``tool`` cannot restore for ``version`` ("" when it can): etcdctl has no ``snapshot restore`` from 3.6."""
    if version >= (3, 6) and tool.rsplit("/", 1)[-1].startswith("etcdctl"):
        return (f"{tool} is etcdctl, which has no `snapshot restore` from etcd 3.6 (etcd's CHANGELOG-3.6); give the "
                f"etcdutl of etcd {version[0]}.{version[1]}'s release")
    return ""
