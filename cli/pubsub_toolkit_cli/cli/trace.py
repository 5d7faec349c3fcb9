"""`trace DEDUP_KEY`: one message's spans, from every hop, as indented trees."""

from __future__ import annotations

import argparse
import os
from typing import Any

from pubsub_toolkit_cli.cli.local import plugin_trace_file
from pubsub_toolkit_cli.trace_tree import TraceFileError, load_spans, render


def add_trace_command(commands: Any) -> None:
    trace = commands.add_parser(
        "trace",
        help="show every hop of one message (by dedup key) as a tree of spans",
        description="Find every trace with a span for DEDUP_KEY in a trace file (the JSON "
        "lines PUBSUB_TOOLKIT_TRACE_FILE collects: the local stack sets PUBSUB_TOOLKIT_TRACING=on "
        "and one PUBSUB_TOOLKIT_TRACE_FILE for all "
        "its parts) and print each as an indented tree in causal order: per span its hop, "
        "operation, kind, duration and start, then its attributes, decisions and links.",
    )
    trace.add_argument("dedup_key", metavar="DEDUP_KEY", help="the message's dedup key")
    trace.add_argument(
        "--file",
        metavar="PATH",
        help="the trace file (default: $PUBSUB_TOOLKIT_TRACE_FILE, else the running local stack's)",
    )
    trace.set_defaults(func=cmd_trace)


def default_trace_file() -> str:
    """$PUBSUB_TOOLKIT_TRACE_FILE, else the running local stack's; TraceFileError naming both if
    neither."""
    configured = os.environ.get("PUBSUB_TOOLKIT_TRACE_FILE", "").strip()
    if configured:
        return configured
    path = plugin_trace_file()  # the local stack's, when it is installed and running
    if path is None:
        raise TraceFileError(
            "no trace file: PUBSUB_TOOLKIT_TRACE_FILE is not set and no local stack is running "
            "(start one with "
            "`pubsub-toolkit local up`, or pass --file PATH)"
        )
    return str(path)


def print_trace(key: str, path: str) -> None:
    """Print the trees for ``key`` from ``path`` (also the demo's last step)."""
    for line in render(load_spans(path), key, source=path):
        print(line)


def cmd_trace(args: argparse.Namespace) -> int:
    """`trace DEDUP_KEY [--file PATH]`."""
    print_trace(args.dedup_key, args.file or default_trace_file())
    return 0
