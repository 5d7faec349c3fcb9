"""The `pubsub-toolkit` command line.

Configuration comes from the environment, as for the deployed parts (see the README); against
the local stack, ``eval "$(pubsub-toolkit local env)"`` sets it. Every command has ``--help``;
errors are one line on stderr and a non-zero exit.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from pubsub_toolkit.errors import ToolkitError
from pubsub_toolkit.operations.cli.common import attribute, duration, timestamp
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pubsub-toolkit",
        description="Deduplication, delayed delivery and FIFO per group for Google Cloud Pub/Sub.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    publish = commands.add_parser(
        "publish", help="publish one message with the contract's attributes"
    )
    publish.add_argument("data", help="the message payload (text)")
    publish.add_argument("--topic", default="origin", help="topic name or path (default: origin)")
    publish.add_argument("--attr", action="append", type=attribute, default=[], metavar="K=V")
    publish.add_argument("--dedup-key", help="stable idempotency key")
    when = publish.add_mutually_exclusive_group()
    when.add_argument("--delay", type=duration, help="deliver after this long, e.g. 30s, 5m")
    when.add_argument("--deliver-at", type=timestamp, metavar="TIME", help="RFC 3339 due time")
    publish.add_argument("--fifo-group", help="number the message within this FIFO group")
    publish.set_defaults(func=cmd_publish)

    subscribe = commands.add_parser(
        "subscribe", help="consume with dedup and the FIFO gate applied, printing each message"
    )
    subscribe.add_argument(
        "--subscription", default=os.environ.get("FINAL_SUBSCRIPTION", "final-sub")
    )
    subscribe.add_argument(
        "--consumer-id", help="dedup/FIFO namespace (default: $CONSUMER_ID or cli)"
    )
    subscribe.add_argument("--max", type=int, default=0, help="stop after N messages")
    subscribe.add_argument("--timeout", type=duration, help="stop after this long, e.g. 30s")
    subscribe.add_argument("--json", action="store_true", help="one JSON object per line")
    subscribe.set_defaults(func=cmd_subscribe)

    status = commands.add_parser(
        "status", help="FIFO groups, dead letters, scheduled deliveries, dedup hit rate"
    )
    status.add_argument("--consumer-id", help="whose groups (default: $CONSUMER_ID or cli)")
    status.add_argument("--dead-letter-subscription", default="dead-letter-sub")
    status.set_defaults(func=cmd_status)

    add_dashboard_command(commands)
    _add_fifo_commands(commands)
    _add_dlq_commands(commands)
    add_local_commands(commands)
    return parser


def _add_fifo_commands(commands: Any) -> None:
    fifo = commands.add_parser("fifo", help="operator actions on FIFO groups")
    fifo_commands = fifo.add_subparsers(dest="fifo_command", required=True, metavar="ACTION")
    skip = fifo_commands.add_parser("skip", help="pass over GROUP's SEQ with a tombstone")
    skip.add_argument("group")
    skip.add_argument("seq", type=int)
    skip.add_argument("--consumer-id")
    skip.set_defaults(func=cmd_fifo_skip)
    replay = fifo_commands.add_parser("replay", help="unblock GROUP and run its parked head again")
    replay.add_argument("group")
    replay.add_argument("--consumer-id")
    replay.set_defaults(func=cmd_fifo_replay)


def _add_dlq_commands(commands: Any) -> None:
    dlq = commands.add_parser("dlq", help="inspect and replay the dead-letter topic")
    dlq_commands = dlq.add_subparsers(dest="dlq_command", required=True, metavar="ACTION")
    dlq_list = dlq_commands.add_parser("list", help="reason, key, group, seq and age of each")
    dlq_list.add_argument("--subscription", default="dead-letter-sub")
    dlq_list.add_argument("--limit", type=int, default=1000)
    dlq_list.set_defaults(func=cmd_dlq_list)
    dlq_replay = dlq_commands.add_parser(
        "replay", help="re-publish selected dead letters to origin (FIFO order, same dedup keys)"
    )
    dlq_replay.add_argument("--subscription", default="dead-letter-sub")
    dlq_replay.add_argument(
        "--topic", default="origin", help="where to re-publish (default origin)"
    )
    dlq_replay.add_argument("--reason", help="only those dead-lettered for this reason")
    dlq_replay.add_argument("--group", help="only this FIFO group")
    dlq_replay.add_argument("--id", action="append", help="only these dead-letter message ids")
    dlq_replay.add_argument("--all", action="store_true", help="every dead letter")
    dlq_replay.add_argument(
        "--consumer-id",
        help="unblock this consumer's groups BLOCKED at a replayed fifo_poison message "
        "(default: $CONSUMER_ID or cli)",
    )
    dlq_replay.set_defaults(func=cmd_dlq_replay)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit code."""
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args, unknown = parser.parse_known_args(words)
    if getattr(args, "func", None) is cmd_local:
        # Everything after `local`, verbatim (also --help): the local package parses it.
        args.rest = words[words.index("local") + 1 :]
    elif unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        return int(args.func(args))
    except ToolkitError as exc:
        print(f"pubsub-toolkit: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
