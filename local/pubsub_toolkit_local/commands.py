"""`pubsub-toolkit local up | env | status | down`: the local stack in the background.

The runtime package's CLI hands every ``local`` argument to :func:`run` (imported only when a
user types ``local``), so this distribution owns its own flags and ``--help``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from pubsub_toolkit.errors import ToolkitError


def repo_root() -> Path:
    """The source checkout this package was installed from (it serves functions/, appengine/)."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "functions" / "ingress" / "main.py").exists():
            return parent
    raise ToolkitError(
        "the local stack runs from a source checkout (functions/ingress not found above "
        f"{here.parent}); install it with pip install -e ./local from a checkout"
    )


def build_parser() -> argparse.ArgumentParser:
    """The ``local`` command's own parser (``prog`` reads as the user typed it)."""
    from pubsub_toolkit_local.control import DEFAULT_PORTS

    parser = argparse.ArgumentParser(
        prog="pubsub-toolkit local", description="Run the pipeline locally in the background."
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    up = actions.add_parser("up", help="start every part; ports and pids go to a state file")
    up.add_argument("--project", default="local-project", help="project id (default %(default)s)")
    up.add_argument(
        "--store-backend",
        "--dedup-backend",  # its older name
        dest="store_backend",
        choices=("firestore", "redis"),
        default="firestore",
        help="store for dedup records, FIFO state and counters (default %(default)s)",
    )
    for name, port in DEFAULT_PORTS.items():
        flag = "--" + name.replace("_", "-")
        up.add_argument(flag, type=int, default=port, help=f"(default {port})")
    up.set_defaults(func=cmd_local_up)
    actions.add_parser("env", help="print export lines for your shell").set_defaults(
        func=cmd_local_env
    )
    actions.add_parser("status", help="show what runs").set_defaults(func=cmd_local_status)
    actions.add_parser("down", help="stop everything `up` started").set_defaults(
        func=cmd_local_down
    )
    return parser


def run(argv: Sequence[str]) -> int:
    """Parse ``argv`` (what followed ``local``) and run it; errors are ToolkitError."""
    args = build_parser().parse_args(list(argv))
    return int(args.func(args))


def cmd_local_up(args: argparse.Namespace) -> int:
    """``local up``: start the stack and print where everything runs."""
    from pubsub_toolkit_local import control
    from pubsub_toolkit_local.stack import StackOptions

    ports = {name: getattr(args, name) for name in control.DEFAULT_PORTS}
    options = StackOptions(project=args.project, store_backend=args.store_backend, **ports)
    print("starting the local stack (emulators, Cloud Tasks emulator, ingress, relay)...")
    state = control.up(repo_root(), options)
    print("\n".join(control.status_lines(state)))
    print('\nready. Point your code at it with:  eval "$(pubsub-toolkit local env)"')
    return 0


def cmd_local_env(args: argparse.Namespace) -> int:
    """``local env``: the export lines for a shell."""
    from pubsub_toolkit_local import control

    print("\n".join(control.export_lines(control.require_running(repo_root()))))
    return 0


def cmd_local_status(args: argparse.Namespace) -> int:
    """``local status``: one line per service."""
    from pubsub_toolkit_local import control

    print("\n".join(control.status_lines(control.require_running(repo_root()))))
    return 0


def cmd_local_down(args: argparse.Namespace) -> int:
    """``local down``: stop every process group ``up`` recorded."""
    from pubsub_toolkit_local import control

    stopped = control.down(repo_root())
    print(f"stopped: {', '.join(stopped)}" if stopped else "the local stack was not running")
    return 0


def demo() -> int:
    """``pubsub-toolkit demo``: the narrated end-to-end run (see :mod:`.demo`)."""
    from pubsub_toolkit_local.demo import run_demo

    return run_demo(repo_root())
