"""The `pubsub-toolkit` command line.

Configuration comes from the environment, as for the deployed parts (see the README); against
the local stack, ``eval "$(pubsub-toolkit local env)"`` sets it. Every command and option has
``--help``; every error is one line on stderr: exit 2 when the command cannot run as given (an
option, a setting, credentials or an extra), exit 1 when the operation ran and failed (see
:mod:`.exits`). ``--project`` (before or after the command) overrides ``GOOGLE_CLOUD_PROJECT``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from pubsub_toolkit.errors import ToolkitError
from pubsub_toolkit_cli.cli import exits
from pubsub_toolkit_cli.cli.common import (
    NO_CREDENTIALS,
    attribute,
    delay,
    due_time,
    duration,
    fifo_group,
    non_negative_int,
)
from pubsub_toolkit_cli.cli.dashboard import add_dashboard_command
from pubsub_toolkit_cli.cli.local import add_local_commands, cmd_local
from pubsub_toolkit_cli.cli.messaging import cmd_publish, cmd_subscribe
from pubsub_toolkit_cli.cli.operator_parsers import (
    add_dlq_commands,
    add_fifo_commands,
    add_project_everywhere,
    add_status_command,
)
from pubsub_toolkit_cli.cli.trace import add_trace_command

# Options whose value may start with "-" (a negative duration): argparse would take "-5s" for
# an option and answer "expected one argument", so `--delay -5s` is read as `--delay=-5s` and
# the value's own check explains what is wrong with it.
_DASH_VALUE_OPTIONS = ("--delay", "--timeout")
# Commands that send or handle messages: with PUBSUB_TOOLKIT_TRACING=on (as `local env` exports)
# their spans join each message's trace, as the deployed parts' do.
_TRACED_COMMANDS = ("publish", "subscribe")


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (its default prints the whole usage first)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The whole command tree (also walked by the tests: every option must have help)."""
    parser = _Parser(
        prog="pubsub-toolkit",
        description="Deduplication, delayed delivery and FIFO per group for Google Cloud Pub/Sub.",
        epilog='Against the local stack: pubsub-toolkit local up; eval "$(pubsub-toolkit local '
        'env)". Each command has its own --help.',
    )
    from pubsub_toolkit import __version__

    version = f"pubsub-toolkit {__version__}"
    parser.add_argument(
        "--version", action="version", version=version, help="print the version and exit"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    _add_publish_command(commands)
    _add_subscribe_command(commands)

    add_status_command(commands)
    add_dashboard_command(commands)
    add_trace_command(commands)
    add_fifo_commands(commands)
    add_dlq_commands(commands)
    add_local_commands(commands)
    add_project_everywhere(parser)
    return parser


def _add_publish_command(commands: Any) -> None:
    publish = commands.add_parser(
        "publish",
        help="publish one message with the contract's attributes",
        description="Publish one message to a topic with the toolkit's attributes stamped. "
        "Everything is checked before anything is published (or a FIFO number reserved).",
    )
    publish.add_argument(
        "data",
        help="the message payload as text; '-' reads it from standard input, as bytes (for "
        "binary or large payloads: one command-line argument holds at most 128 KiB)",
    )
    publish.add_argument("--topic", default="origin", help="topic name or path (default: origin)")
    publish.add_argument(
        "--attr",
        action="append",
        type=attribute,
        default=[],
        metavar="K=V",
        help="an attribute of your own; repeat for more",
    )
    publish.add_argument("--dedup-key", metavar="KEY", help="stable idempotency key")
    when = publish.add_mutually_exclusive_group()
    when.add_argument(
        "--delay",
        type=delay,
        metavar="DURATION",
        help="deliver after this long, e.g. 30s, 5m, 2h, 3d (at most 365 days)",
    )
    when.add_argument(
        "--deliver-at",
        type=due_time,
        metavar="TIME",
        help="deliver at this RFC 3339 time with an offset, e.g. 2030-01-01T09:00:00Z (at most "
        "365 days ahead)",
    )
    publish.add_argument(
        "--fifo-group",
        type=fifo_group,
        metavar="GROUP",
        help="number the message within this FIFO group (from the configured counter)",
    )
    publish.add_argument(
        "--end-of-group",
        action="store_true",
        help="mark it as the FIFO group's last message (with --fifo-group): the consumer then "
        "records the group as complete and dead-letters any later number (fifo_after_end)",
    )
    publish.add_argument(
        "--json", action="store_true", help='print {"message_id": ..., "topic": ...}'
    )
    publish.set_defaults(func=cmd_publish)


def _add_subscribe_command(commands: Any) -> None:
    subscribe = commands.add_parser(
        "subscribe",
        help="consume with dedup and the FIFO gate applied, printing each message",
        description="Consume a subscription with dedup and the FIFO gate applied and print "
        "each message handled. Against the Pub/Sub emulator it pulls with unary calls, so it "
        "can be stopped and started again freely (the emulator mishandles a stopped stream).",
    )
    subscribe.add_argument(
        "--subscription",
        default=os.environ.get("PUBSUB_TOOLKIT_FINAL_SUBSCRIPTION", "final-sub"),
        metavar="NAME",
        help="subscription name or path (default: $PUBSUB_TOOLKIT_FINAL_SUBSCRIPTION or final-sub)",
    )
    subscribe.add_argument(
        "--consumer-id", help="dedup/FIFO namespace (default: $PUBSUB_TOOLKIT_CONSUMER_ID or cli)"
    )
    subscribe.add_argument(
        "--max",
        type=non_negative_int,
        default=0,
        metavar="N",
        help="handle exactly N messages, then stop; any others it had pulled are released at "
        "once for the next consumer (default 0: no limit)",
    )
    subscribe.add_argument(
        "--timeout",
        type=duration,
        metavar="DURATION",
        help="stop after this long, e.g. 30s (default: run until Ctrl-C or --max)",
    )
    subscribe.add_argument(
        "--pull",
        choices=("auto", "unary", "streaming"),
        default="auto",
        help="how to receive: unary pull calls, or a streaming pull (auto, the default: unary "
        "against the emulator, streaming against Google Cloud)",
    )
    subscribe.add_argument("--json", action="store_true", help="one JSON object per line")
    subscribe.set_defaults(func=cmd_subscribe)


def attach_dash_values(argv: Sequence[str]) -> list[str]:
    """``--delay -5s`` -> ``--delay=-5s`` (see :data:`_DASH_VALUE_OPTIONS`)."""
    out: list[str] = []
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        following = args[i + 1] if i + 1 < len(args) else ""
        if arg in _DASH_VALUE_OPTIONS and following[1:2].isdigit() and following[:1] == "-":
            out.append(f"{arg}={following}")
            i += 2
            continue
        out.append(arg)
        i += 1
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit code (see :mod:`.exits`)."""
    words = attach_dash_values(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args, unknown = parser.parse_known_args(words)
    if getattr(args, "func", None) is cmd_local:
        # Everything after `local`, verbatim (also --help): the local package parses it.
        args.rest = words[words.index("local") + 1 :]
        if args.project is not None:
            parser.error("--project is not for `local`: `local up --project P` names its project")
    elif unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    saved = os.environ.get("GOOGLE_CLOUD_PROJECT")
    if args.project is not None:
        os.environ["GOOGLE_CLOUD_PROJECT"] = args.project  # every part reads it from there
    try:
        return _run(args)
    finally:
        if args.project is not None:  # main() may be called in-process (tests, scripts)
            _restore("GOOGLE_CLOUD_PROJECT", saved)


def _restore(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def _run(args: argparse.Namespace) -> int:
    from google.api_core.exceptions import GoogleAPICallError, RetryError
    from google.auth.exceptions import DefaultCredentialsError

    try:
        if args.command in _TRACED_COMMANDS:
            from pubsub_toolkit.tracing_setup import configure_entry_point

            configure_entry_point(os.environ, service="pubsub-toolkit")
        return int(args.func(args))
    except ToolkitError as exc:
        return exits.toolkit_error(exc)
    except ModuleNotFoundError as exc:  # an extra's module (named with its pip line), or a bug
        return exits.missing_extra(args.command, exc)
    except (GoogleAPICallError, RetryError) as exc:
        # A refused or failed call (missing topic, emulator gone): say so, without a traceback.
        return exits.fail(f"{args.command}: {exc}", exits.EXIT_FAILED)
    except DefaultCredentialsError as exc:
        # Setup, not a failed call: google-auth's own words last (a missing or bad file).
        return exits.fail(f"{args.command}: {NO_CREDENTIALS} ({exc})", exits.EXIT_USAGE)
    except KeyboardInterrupt:
        return 130
