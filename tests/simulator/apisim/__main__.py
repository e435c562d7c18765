"""CLI: run a simulated control plane until SIGTERM/SIGINT; its addresses go to DIR/control-plane.json."""

import argparse
import os
import signal
import sys
import threading

from .server import ControlPlane


def _releases(values, count):
    """--release 1.32 sets every apiserver; --release 2=1.33 sets apiserver 2 (0-based) only."""
    releases = ["1.32"] * count
    for value in values or []:
        index, sep, release = value.partition("=")
        if sep:
            releases[int(index)] = release
        else:
            releases = [value] * count
    return releases


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m apisim", description=__doc__)
    parser.add_argument("--apiservers", type=int, default=3)
    parser.add_argument("--release", action="append", help="RELEASE for all, or INDEX=RELEASE (0-based)")
    parser.add_argument("--port-base", type=int, default=0, help="apiserver i listens on port-base+i; 0: ephemeral")
    parser.add_argument("--admin-port", type=int, default=0)
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--plain", action="store_true", help="serve HTTP instead of HTTPS")
    parser.add_argument("--seed", action="append", default=[], help="data set: demo or bulk:N")
    parser.add_argument("--compaction-window", type=float, default=300.0)
    parser.add_argument("--migrator-delay", type=float, default=0.2)
    parser.add_argument("--storage-version-api", action="store_true")
    parser.add_argument("--token", default=None)
    parser.add_argument("--etcd-endpoint", help="also write every object to this etcd (real key layout and envelope)")
    parser.add_argument("--etcd-prefix", default="/registry")
    parser.add_argument("--etcd-cacert")
    parser.add_argument("--etcd-cert")
    parser.add_argument("--etcd-key")
    args = parser.parse_args(argv)
    os.makedirs(args.state_dir, exist_ok=True)
    try:
        plane = ControlPlane(args.state_dir, args.apiservers, _releases(args.release, args.apiservers),
                             tls_enabled=not args.plain, storage_version_api=args.storage_version_api,
                             compaction_window=args.compaction_window, migrator_delay=args.migrator_delay,
                             port_base=args.port_base, admin_port=args.admin_port, token=args.token,
                             etcd=args.etcd_endpoint and {"endpoint": args.etcd_endpoint, "prefix": args.etcd_prefix,
                                                          "ca_file": args.etcd_cacert, "cert_file": args.etcd_cert,
                                                          "key_file": args.etcd_key})
    except (ValueError, IndexError) as exc:
        parser.error(str(exc))
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_unused: done.set())
    signal.signal(signal.SIGINT, lambda *_unused: done.set())
    plane.start(args.seed)
    print(os.path.join(os.path.abspath(args.state_dir), "control-plane.json"), flush=True)
    done.wait()
    plane.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
