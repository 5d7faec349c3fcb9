"""The operator commands' parsers (`status`, `fifo`, `dlq`) and the options every command has."""

from __future__ import annotations

import argparse
from typing import Any

from pubsub_toolkit_cli.cli.common import group_name, positive_int
from pubsub_toolkit_cli.cli.dead_letters import cmd_dlq_list
from pubsub_toolkit_cli.cli.operations import (
    cmd_dlq_replay,
    cmd_fifo_replay,
    cmd_fifo_skip,
    cmd_status,
)

PROJECT_HELP = "the Google Cloud project (default: $GOOGLE_CLOUD_PROJECT)"
# `local` parses its own arguments (`local up --project` names the stack's project).
_OWN_PARSERS = ("local",)


def project_id(text: str) -> str:
    """A ``--project``: a non-blank project id."""
    if not text.strip():
        raise argparse.ArgumentTypeError("the project id is empty")
    return text.strip()


def add_project_everywhere(parser: argparse.ArgumentParser) -> None:
    """``--project`` on ``parser`` and after every command below it, so both
    ``pubsub-toolkit --project P status`` and ``pubsub-toolkit status --project P`` work (a
    command's own default is SUPPRESS: it never overwrites the global one)."""
    parser.add_argument("--project", type=project_id, metavar="PROJECT", help=PROJECT_HELP)
    _add_below(parser)


def _add_below(parser: argparse.ArgumentParser) -> None:
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        for name, sub in action.choices.items():
            if name in _OWN_PARSERS:
                continue
            if not any(isinstance(a, argparse._SubParsersAction) for a in sub._actions):
                sub.add_argument(
                    "--project",
                    type=project_id,
                    default=argparse.SUPPRESS,
                    metavar="PROJECT",
                    help=PROJECT_HELP,
                )
            _add_below(sub)


def add_status_command(commands: Any) -> None:
    """`status`."""
    status = commands.add_parser(
        "status", help="FIFO groups, dead letters, scheduled deliveries, dedup hit rate"
    )
    status.add_argument(
        "--consumer-id", help="whose groups (default: $PUBSUB_TOOLKIT_CONSUMER_ID or cli)"
    )
    status.add_argument(
        "--group",
        action="append",
        type=group_name,
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
    status.add_argument(
        "--json", action="store_true", help="one JSON object (the status page's /status.json)"
    )
    status.set_defaults(func=cmd_status)


def add_fifo_commands(commands: Any) -> None:
    """`fifo skip|replay`."""
    fifo = commands.add_parser("fifo", help="operator actions on FIFO groups")
    fifo_commands = fifo.add_subparsers(dest="fifo_command", required=True, metavar="ACTION")
    consumer_help = "whose group (default: $PUBSUB_TOOLKIT_CONSUMER_ID or cli)"
    skip = fifo_commands.add_parser("skip", help="pass over GROUP's SEQ with a tombstone")
    skip.add_argument("group", type=group_name, help="the FIFO group")
    skip.add_argument("seq", type=positive_int, help="the number to pass over")
    skip.add_argument("--consumer-id", help=consumer_help)
    skip.set_defaults(func=cmd_fifo_skip)
    replay = fifo_commands.add_parser("replay", help="unblock GROUP and run its parked head again")
    replay.add_argument("group", type=group_name, help="the blocked FIFO group")
    replay.add_argument("--consumer-id", help=consumer_help)
    replay.set_defaults(func=cmd_fifo_replay)


def add_dlq_commands(commands: Any) -> None:
    """`dlq list|replay`."""
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
    dlq_list.add_argument("--json", action="store_true", help="one JSON object per dead letter")
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
        "(default: $PUBSUB_TOOLKIT_CONSUMER_ID or cli)",
    )
    dlq_replay.set_defaults(func=cmd_dlq_replay)
