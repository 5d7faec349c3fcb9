"""`local ...` and `demo`: handed to the local stack's own distribution, when it is installed.

The local stack (emulators, the Cloud Tasks emulator, the demo) is ``pubsub-toolkit-local``, a
separate distribution in the repository's ``local/`` folder that never ships in a bundle. It is
imported here only when one of these commands runs, so every other command works without it.
"""

from __future__ import annotations

import argparse
import importlib
from types import ModuleType
from typing import Any

from pubsub_toolkit.errors import MissingDependencyError

MISSING_HINT = "the local stack is not installed: pip install -e ./local from a checkout"


def _local_commands() -> ModuleType:
    try:
        return importlib.import_module("pubsub_toolkit_local.commands")
    except ModuleNotFoundError as exc:
        # Only the package itself being absent gets the hint; a dependency missing inside it
        # is a real error and keeps its own message.
        if (exc.name or "").split(".")[0] != "pubsub_toolkit_local":
            raise
        raise MissingDependencyError(MISSING_HINT) from None  # setup: exit 2


def add_local_commands(commands: Any) -> None:
    """``local`` (its flags belong to the local package) and ``demo``."""
    demo = commands.add_parser("demo", help="run the whole pipeline locally, narrated, then stop")
    demo.set_defaults(func=cmd_demo)
    local = commands.add_parser(
        "local",
        help="run the pipeline locally in the background (up, env, status, restart, heal, down)",
        add_help=False,  # `local --help` is answered by the local package's own parser
    )
    local.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    local.set_defaults(func=cmd_local)


def cmd_local(args: argparse.Namespace) -> int:
    """Run ``local ACTION ...`` in the local package."""
    return int(_local_commands().run(args.rest))


def cmd_demo(args: argparse.Namespace) -> int:
    """Run the narrated demo in the local package."""
    return int(_local_commands().demo())
