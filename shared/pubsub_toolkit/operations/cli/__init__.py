"""The `pubsub-toolkit` command line.

Configuration comes from the environment, as for the deployed parts (see the README); against
the local stack, ``eval "$(pubsub-toolkit local env)"`` sets it. Every command and option has
``--help``; every error - a bad argument, a refused value, a failed call - is one line on stderr
and a non-zero exit (2).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from pubsub_toolkit.errors import ToolkitError
from pubsub_toolkit.operations.cli.common import (
    NO_CREDENTIALS,
    attribute,
    delay,
    due_time,
    duration,
    fifo_group,
    non_negative_int,
    positive_int,
)
from pubsub_toolkit.operations.cli.dashboard import add_dashboard_command
from pubsub_toolkit.operations.cli.local import add_local_commands, cmd_local
from pubsub_toolkit.operations.cli.messaging import cmd_publish, cmd_subscribe
from pubsub_toolkit.operations.cli.operations import (
    cmd_dlq_list,
    cmd_dlq_replay,
    cmd_fifo_replay,
    cmd_fifo_skip,
    cmd_status,
)
from pubsub_toolkit.operations.cli.trace import add_trace_command

# Options whose value may start with "-" (a negative duration): argparse would take "-5s" for
# an option and answer "expected one argument", so `--delay -5s` is read as `--delay=-5s` and
# the value's own check explains what is wrong with it.
_DASH_VALUE_OPTIONS = ("--delay", "--timeout")
# Commands that send or handle messages: with TRACING=on (as `local env` exports) their spans
# join each message's trace, as the deployed parts' do.
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

    status = commands.add_parser(
        "status", help="FIFO groups, dead letters, scheduled deliveries, dedup hit rate"
    )
    status.add_argument("--consumer-id", help="whose groups (default: $CONSUMER_ID or cli)")
    status.add_argument(
        "--group",
        action="append",
        default=[],
        metavar="NAME",
        help="also show this group, idle or not (repeatable; the list shows groups with work)",
    )
    status.add_argument(
        "--dead-letter-subscription",
        default="dead-letter-sub",
        metavar="NAME",
        help="where dead letters are counted (default: dead-letter-sub)",
    )
    status.set_defaults(func=cmd_status)

    add_dashboard_command(commands)
    add_trace_command(commands)
    _add_fifo_commands(commands)
    _add_dlq_commands(commands)
    add_local_commands(commands)
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
        default=os.environ.get("FINAL_SUBSCRIPTION", "final-sub"),
        metavar="NAME",
        help="subscription name or path (default: $FINAL_SUBSCRIPTION or final-sub)",
    )
    subscribe.add_argument(
        "--consumer-id", help="dedup/FIFO namespace (default: $CONSUMER_ID or cli)"
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


def _add_fifo_commands(commands: Any) -> None:
    fifo = commands.add_parser("fifo", help="operator actions on FIFO groups")
    fifo_commands = fifo.add_subparsers(dest="fifo_command", required=True, metavar="ACTION")
    consumer_help = "whose group (default: $CONSUMER_ID or cli)"
    skip = fifo_commands.add_parser("skip", help="pass over GROUP's SEQ with a tombstone")
    skip.add_argument("group", help="the FIFO group")
    skip.add_argument("seq", type=positive_int, help="the number to pass over")
    skip.add_argument("--consumer-id", help=consumer_help)
    skip.set_defaults(func=cmd_fifo_skip)
    replay = fifo_commands.add_parser("replay", help="unblock GROUP and run its parked head again")
    replay.add_argument("group", help="the blocked FIFO group")
    replay.add_argument("--consumer-id", help=consumer_help)
    replay.set_defaults(func=cmd_fifo_replay)


def _add_dlq_commands(commands: Any) -> None:
    dlq = commands.add_parser("dlq", help="inspect and replay the dead-letter topic")
    dlq_commands = dlq.add_subparsers(dest="dlq_command", required=True, metavar="ACTION")
    subscription_help = "the dead-letter subscription (default: dead-letter-sub)"
    dlq_list = dlq_commands.add_parser(
        "list", help="reason, key, group, seq and age of each (consumes nothing)"
    )
    dlq_list.add_argument(
        "--subscription", default="dead-letter-sub", metavar="NAME", help=subscription_help
    )
    dlq_list.add_argument(
        "--limit",
        type=positive_int,
        default=1000,
        metavar="N",
        help="list at most N (default 1000)",
    )
    dlq_list.set_defaults(func=cmd_dlq_list)
    dlq_replay = dlq_commands.add_parser(
        "replay", help="re-publish selected dead letters to origin (FIFO order, same dedup keys)"
    )
    dlq_replay.add_argument(
        "--subscription", default="dead-letter-sub", metavar="NAME", help=subscription_help
    )
    dlq_replay.add_argument(
        "--topic", default="origin", help="where to re-publish (default: origin)"
    )
    dlq_replay.add_argument("--reason", help="only those dead-lettered for this reason")
    dlq_replay.add_argument("--group", help="only this FIFO group")
    dlq_replay.add_argument(
        "--id", action="append", metavar="ID", help="only this dead-letter message id; repeat"
    )
    dlq_replay.add_argument("--all", action="store_true", help="every dead letter")
    dlq_replay.add_argument(
        "--consumer-id",
        help="unblock this consumer's groups BLOCKED at a replayed fifo_poison message "
        "(default: $CONSUMER_ID or cli)",
    )
    dlq_replay.set_defaults(func=cmd_dlq_replay)


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
    """Entry point of the console script; returns the exit code."""
    from google.api_core.exceptions import GoogleAPICallError, RetryError
    from google.auth.exceptions import DefaultCredentialsError

    words = attach_dash_values(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args, unknown = parser.parse_known_args(words)
    if getattr(args, "func", None) is cmd_local:
        # Everything after `local`, verbatim (also --help): the local package parses it.
        args.rest = words[words.index("local") + 1 :]
    elif unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        if args.command in _TRACED_COMMANDS:
            from pubsub_toolkit.tracing_setup import configure_entry_point

            configure_entry_point(os.environ, service="pubsub-toolkit")
        return int(args.func(args))
    except ToolkitError as exc:
        print(f"pubsub-toolkit: error: {exc}", file=sys.stderr)
        return 2
    except (GoogleAPICallError, RetryError, DefaultCredentialsError) as exc:
        # A refused or failed call (missing topic, emulator gone), or no credentials: say so,
        # without a traceback (google-auth's own words last: they name a missing or bad file).
        message = " ".join(str(exc).split())
        if isinstance(exc, DefaultCredentialsError):
            message = f"{NO_CREDENTIALS} ({message})"
        print(f"pubsub-toolkit: error: {args.command}: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
