# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Stop, start or restart one apiserver of a running plane from its state file alone.

For processes other than the test's (ansible-playbook tasks doing a rolling upgrade step)::

    PYTHONPATH=tests python -m realcp restart --state WORKDIR/control-plane.json --index 1 --release 1.33

``restart``/``start`` wait until the apiserver is ready and exit 1 with its log's tail when it is not.
``--broken`` starts it with a command-line flag no release knows, so it exits at once: an apiserver that does
not come back (with ``--no-wait`` the command still succeeds and the apiserver stays down).
``reap --root DIR`` stops what planes under DIR left running after their test process died.
"""

import argparse
import sys

from realcp import plane


def _parser():
    parser = argparse.ArgumentParser(prog="python -m realcp", description=__doc__.split("\n\n", maxsplit=1)[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("restart", "start", "stop"):
        command = commands.add_parser(name)
        command.add_argument("--state", required=True, help="the plane's control-plane.json")
        command.add_argument("--index", required=True, type=int, help="which apiserver (0-based)")
        if name != "stop":
            command.add_argument("--release", help="e.g. 1.33 or 1.33.5 (default: the one it ran)")
            command.add_argument("--broken", action="store_true", help="start it so that it exits at once")
            command.add_argument("--no-wait", dest="wait", action="store_false", help="do not wait until it is ready")
            command.add_argument("--emulated-version", help="run at this release's APIs (kept for later starts; '' clears it)")
            command.add_argument("--timeout", type=float, default=plane.READY_TIMEOUT, help="seconds to wait (default %(default)s)")
    reap = commands.add_parser("reap")
    reap.add_argument("--root", required=True, help="a directory holding planes' work directories")
    return parser


def main(argv=None):
    args = _parser().parse_args(argv)
    try:
        if args.command == "reap":
            print(f"stopped {plane.reap_leftovers(args.root)} leftover processes")
        elif args.command == "stop":
            plane.stop_apiserver(args.state, args.index)
        else:
            action = plane.restart_apiserver if args.command == "restart" else plane.start_apiserver
            action(args.state, args.index, args.release, args.broken, args.wait, args.timeout, args.emulated_version)
            server = plane.load_state(args.state)["apiservers"][args.index]
            print(f"apiserver-{args.index}: {server['version']} pid {server['pid']} {server['endpoint']}")
    except (plane.PlaneError, OSError, IndexError) as error:
        print(f"realcp {args.command}: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
