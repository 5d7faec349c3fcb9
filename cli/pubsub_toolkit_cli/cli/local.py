"""`local ...` and `demo`: commands another distribution serves, found by name.

The local stack (emulators, the Cloud Tasks emulator, the demo) is ``pubsub-toolkit-local``, a
separate distribution in the repository's ``local/`` folder that never ships in a bundle. It
depends on the library and on this CLI, never the other way round: neither imports it. It declares
what it serves as entry points (``importlib.metadata``), looked up only when one of these commands
runs, so every other command works without it:

* group :data:`COMMANDS` - ``local`` and ``demo``: called with the words after the command, they
  return the exit code (``local`` parses its own flags and answers its own ``--help``);
* group :data:`TRACE_FILES` - the running stack's trace file, the default of ``trace``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from pubsub_toolkit.errors import MissingDependencyError

COMMANDS = "pubsub_toolkit.commands"
TRACE_FILES = "pubsub_toolkit.trace_files"
MISSING_HINT = "the local stack is not installed: pip install -e ./local from a checkout"


def _loaded(group: str, name: str | None = None) -> Iterator[Any]:
    """Each entry point of ``group`` (named ``name``, if given), loaded; one whose own package is
    not importable is passed over, as if not installed. A dependency missing inside a plugin is
    a real error and keeps its own message."""
    found = entry_points(group=group) if name is None else entry_points(group=group, name=name)
    for point in found:
        try:
            yield point.load()
        except ModuleNotFoundError as exc:
            if (exc.name or "").split(".")[0] != _package(point):
                raise


def _package(point: EntryPoint) -> str:
    return point.module.split(".")[0]


def plugin_command(name: str) -> Callable[[list[str]], int]:
    """The callable an installed distribution serves the command ``name`` with; the install
    hint (MissingDependencyError: setup, exit 2) when none does."""
    for command in _loaded(COMMANDS, name):
        return command  # type: ignore[no-any-return]
    raise MissingDependencyError(MISSING_HINT)


def plugin_trace_file() -> str | None:
    """The first trace file an installed distribution names (a running local stack's), or None."""
    for trace_file in _loaded(TRACE_FILES):
        path = trace_file()
        if path:
            return str(path)
    return None


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
    """Run ``local ACTION ...`` in the distribution that serves it."""
    return int(plugin_command("local")(list(args.rest)))


def cmd_demo(args: argparse.Namespace) -> int:
    """Run the narrated demo in the distribution that serves it."""
    return int(plugin_command("demo")([]))
