"""The `pubsub-toolkit` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from pubsub_toolkit.errors import ToolkitError


def _repo_root() -> Path:
    # The demo serves functions/ from a source checkout.
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "functions" / "ingress" / "main.py").exists():
            return parent
    raise ToolkitError("the demo runs from a source checkout (functions/ingress not found)")


def _cmd_demo(args: argparse.Namespace) -> int:
    from pubsub_toolkit.local.demo import run_demo

    return run_demo(_repo_root())


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pubsub-toolkit",
        description="Deduplication, delayed delivery and FIFO per group for Google Cloud Pub/Sub.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = commands.add_parser(
        "demo", help="run the pipeline on the local emulators and show deduplication at work"
    )
    demo.set_defaults(func=_cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit code."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except ToolkitError as exc:
        print(f"pubsub-toolkit: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
