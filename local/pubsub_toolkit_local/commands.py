"""`pubsub-toolkit local up | env | status | restart | heal | down`: the stack in the background.

The runtime package's CLI finds :func:`run`, :func:`demo` and :func:`trace_file` by name, as the
entry points this distribution declares (``local/pyproject.toml``; the library never imports
this package), and hands :func:`run` every word after ``local``, so this distribution owns its
own flags and ``--help``.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from pubsub_toolkit.environment import check_environment
from pubsub_toolkit.errors import ToolkitError
from pubsub_toolkit_cli.cli.common import port_number


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


_PORT_HELP = {
    "pubsub_port": "the Pub/Sub emulator's port",
    "firestore_port": "the Firestore emulator's port",
    "redis_port": "redis-server's port (with --store-backend redis)",
    "tasks_port": "the Cloud Tasks emulator's port",
    "oidc_port": "port of the Cloud Tasks emulator's OIDC certificates",
    "ingress_port": "the ingress function's port",
    "relay_port": "the relay's port",
}


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors, as the runtime CLI (its default prints the usage first)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The ``local`` command's own parser (``prog`` reads as the user typed it)."""
    from pubsub_toolkit_local.control import DEFAULT_PORTS
    from pubsub_toolkit_local.stack import PARTS

    parser = _Parser(
        prog="pubsub-toolkit local", description="Run the pipeline locally in the background."
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    up = actions.add_parser(
        "up",
        help="start every part; ports and pids go to a state file",
        description="Start the emulators, the Cloud Tasks emulator, ingress and the relay in "
        "the background, then self-test the Pub/Sub emulator.",
    )
    up.add_argument("--project", default="local-project", help="project id (default %(default)s)")
    up.add_argument(
        "--store-backend",
        "--dedup-backend",  # its older name
        dest="store_backend",
        choices=("firestore", "redis"),
        default="firestore",
        help="store for dedup records, FIFO state and counters (default %(default)s)",
    )
    up.add_argument(
        "--persist",
        type=Path,
        metavar="DIR",
        help="keep Firestore's (and Redis's) data in DIR across `local down`/`up` and "
        "restarts; the Pub/Sub and Cloud Tasks emulators cannot keep theirs",
    )
    up.add_argument(
        "--no-tracing",
        dest="tracing",
        action="store_false",
        help="start the parts with PUBSUB_TOOLKIT_TRACING=off (by default every part writes its "
        "spans to one PUBSUB_TOOLKIT_TRACE_FILE in the stack's work directory, read by "
        "`pubsub-toolkit trace KEY`)",
    )
    for name, port in DEFAULT_PORTS.items():
        flag = "--" + name.replace("_", "-")
        up.add_argument(
            flag,
            type=port_number,
            # None: not given, so the default applies - and a --redis-port given without the
            # redis backend is refused (nothing would listen on it) instead of ignored.
            default=None,
            metavar="PORT",
            help=f"{_PORT_HELP[name]} (default {port})",
        )
    up.set_defaults(func=cmd_local_up)
    actions.add_parser("env", help="print export lines for your shell").set_defaults(
        func=cmd_local_env
    )
    status = actions.add_parser("status", help="show what runs, and self-test the Pub/Sub emulator")
    status.add_argument(
        "--no-self-test", action="store_true", help="skip the Pub/Sub self-test (about 2 s)"
    )
    status.add_argument(
        "--json",
        action="store_true",
        help="one JSON object: each service's name, pid, port, state and log, and the self-test",
    )
    status.set_defaults(func=cmd_local_status)
    restart = actions.add_parser(
        "restart",
        help="restart one part on its port (says what that loses)",
        description="Stop one part and start it again on the same port. An emptied emulator "
        "gets its topology (Pub/Sub) or queue (Cloud Tasks) again.",
    )
    restart.add_argument("part", choices=tuple(PARTS), help="which part")
    restart.set_defaults(func=cmd_local_restart)
    heal = actions.add_parser(
        "heal",
        help="un-stick subscriptions a stopped streaming subscriber left stuck",
        description="Drain, recreate (same settings) and refill subscriptions that the Pub/Sub "
        "emulator's dead-stream defect left stuck, without restarting the emulator.",
    )
    heal.add_argument("subscriptions", nargs="+", metavar="SUBSCRIPTION", help="name or path")
    heal.set_defaults(func=cmd_local_heal)
    actions.add_parser(
        "down", help="stop everything `up` started, saying what that discards (or keeps)"
    ).set_defaults(func=cmd_local_down)
    return parser


def run(argv: Sequence[str]) -> int:
    """Parse ``argv`` (what followed ``local``) and run it; errors are ToolkitError."""
    args = parse_args(argv)
    # A misspelt PUBSUB_TOOLKIT_STATE_DIR or _SDK_ROOT stops here rather than being ignored.
    check_environment(os.environ)
    return int(args.func(args))


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """``argv`` parsed, or one line and exit 2 (also for options that do not go together)."""
    parser = build_parser()
    args = parser.parse_args(list(argv))
    if args.action == "up" and args.redis_port is not None and args.store_backend != "redis":
        parser.error(
            f"--redis-port is for --store-backend redis (the stack runs no redis-server with "
            f"{args.store_backend})"
        )
    return args


def cmd_local_up(args: argparse.Namespace) -> int:
    """`local up`."""
    from pubsub_toolkit_local import control
    from pubsub_toolkit_local.stack import StackOptions

    ports: dict[str, Any] = {
        name: default if getattr(args, name) is None else int(getattr(args, name))
        for name, default in control.DEFAULT_PORTS.items()
    }
    persist = None if args.persist is None else str(args.persist.resolve())
    options = StackOptions(
        project=args.project,
        store_backend=args.store_backend,
        persist_dir=persist,
        tracing=args.tracing,
        **ports,
    )
    print("starting the local stack (emulators, Cloud Tasks emulator, ingress, relay)...")
    state = control.up(repo_root(), options)
    print("\n".join(control.status_lines(state)))
    for line in control.persistence_lines(state):
        print(line)
    print(control.self_test_line(state))
    print('\nready. Point your code at it with:  eval "$(pubsub-toolkit local env)"')
    return 0


def cmd_local_env(args: argparse.Namespace) -> int:
    """`local env`."""
    from pubsub_toolkit_local import control

    print("\n".join(control.export_lines(control.require_running(repo_root()))))
    return 0


def trace_file() -> str | None:
    """The running local stack's PUBSUB_TOOLKIT_TRACE_FILE (None: no stack is running, or it traces
    nothing);
    the default of ``pubsub-toolkit trace``."""
    from pubsub_toolkit_local import control

    state = control.StackState.load(control.state_path(repo_root()))
    return None if state is None else state.env.get("PUBSUB_TOOLKIT_TRACE_FILE") or None


def cmd_local_status(args: argparse.Namespace) -> int:
    """`local status`."""
    from pubsub_toolkit_local import control

    state = control.require_running(repo_root())
    self_test = None if args.no_self_test else control.self_test_line(state)
    if args.json:
        print(json.dumps({"services": control.service_states(state), "self_test": self_test}))
        return 0
    print("\n".join(control.status_lines(state)))
    if self_test is not None:
        print(self_test)
    return 0


def cmd_local_restart(args: argparse.Namespace) -> int:
    """`local restart PART`."""
    from pubsub_toolkit_local import control

    for line in control.restart(repo_root(), args.part):
        print(line)
    return 0


def cmd_local_heal(args: argparse.Namespace) -> int:
    """`local heal SUBSCRIPTION...`."""
    from pubsub_toolkit_local import control

    for line in control.heal(repo_root(), args.subscriptions):
        print(line)
    return 0


def cmd_local_down(args: argparse.Namespace) -> int:
    """`local down`."""
    from pubsub_toolkit_local import control

    stopped, report = control.down(repo_root())
    for line in report:
        print(line)
    print(f"stopped: {', '.join(stopped)}" if stopped else "the local stack was not running")
    return 0


def demo(argv: Sequence[str] = ()) -> int:
    """``pubsub-toolkit demo``: the narrated end-to-end run (see :mod:`.demo`); it takes no
    arguments (``argv``: what followed ``demo``, empty: the CLI's parser refuses any)."""
    from pubsub_toolkit_local.demo import run_demo

    if argv:
        raise ToolkitError(f"demo takes no arguments (got {' '.join(argv)})")

    return run_demo(repo_root())
