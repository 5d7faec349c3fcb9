"""`local up | env | status | down`: the local stack in the background."""

from __future__ import annotations

import argparse

from pubsub_toolkit.cli.common import repo_root


def cmd_local_up(args: argparse.Namespace) -> int:
    from pubsub_toolkit.local import control
    from pubsub_toolkit.local.stack import StackOptions

    ports = {name: getattr(args, name) for name in control.DEFAULT_PORTS}
    options = StackOptions(project=args.project, dedup_backend=args.dedup_backend, **ports)
    print("starting the local stack (emulators, Cloud Tasks emulator, ingress, relay)...")
    state = control.up(repo_root(), options)
    print("\n".join(control.status_lines(state)))
    print('\nready. Point your code at it with:  eval "$(pubsub-toolkit local env)"')
    return 0


def cmd_local_env(args: argparse.Namespace) -> int:
    from pubsub_toolkit.local import control

    print("\n".join(control.export_lines(control.require_running(repo_root()))))
    return 0


def cmd_local_status(args: argparse.Namespace) -> int:
    from pubsub_toolkit.local import control

    print("\n".join(control.status_lines(control.require_running(repo_root()))))
    return 0


def cmd_local_down(args: argparse.Namespace) -> int:
    from pubsub_toolkit.local import control

    stopped = control.down(repo_root())
    print(f"stopped: {', '.join(stopped)}" if stopped else "the local stack was not running")
    return 0
