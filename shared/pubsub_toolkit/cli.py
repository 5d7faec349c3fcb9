"""The `pubsub-toolkit` command line.

Configuration comes from the environment, as for the deployed parts (see the README); against
the local stack, ``eval "$(pubsub-toolkit local env)"`` sets it. Every command has ``--help``;
errors are one line on stderr and a non-zero exit.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import sys
import threading
import time
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pubsub_toolkit.attributes import parse_time
from pubsub_toolkit.errors import ConfigurationError, ToolkitError
from pubsub_toolkit.text_table import format_table

if TYPE_CHECKING:
    from pubsub_toolkit.fifo.counter import SequenceCounter
    from pubsub_toolkit.fifo.gate import FifoGate
    from pubsub_toolkit.fifo.state import FifoStore

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}


def duration(text: str) -> timedelta:
    """Parse ``30s``, ``5m``, ``1.5h``, ``250ms`` or plain seconds."""
    match = _DURATION.match(text)
    if match is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 30s, 5m, 1h")
    return timedelta(seconds=float(match.group(1)) * _UNITS[match.group(2)])


def timestamp(text: str) -> datetime:
    try:
        return parse_time(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an RFC 3339 time with an offset, e.g. 2030-01-01T09:00:00Z"
        ) from exc


def attribute(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not key=value")
    return key, value


def _repo_root() -> Path:
    # The local stack serves functions/ and appengine/ from a source checkout.
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "functions" / "ingress" / "main.py").exists():
            return parent
    raise ToolkitError("this command runs from a source checkout (functions/ingress not found)")


def _require_emulator_if_local() -> None:
    """Fail fast, with the fix, when the environment points at a local stack that is down."""
    host = os.environ.get("PUBSUB_EMULATOR_HOST")
    if not host:
        return
    address, _, port = host.rpartition(":")
    try:
        with socket.create_connection((address or "127.0.0.1", int(port)), timeout=2):
            return
    except (OSError, ValueError):
        raise ToolkitError(
            f"nothing answers at PUBSUB_EMULATOR_HOST={host}: is the local stack running? "
            "Start it with `pubsub-toolkit local up`"
        ) from None


def _topic(name: str) -> str:
    from pubsub_toolkit.config import topic_path

    project = os.environ.get("GOOGLE_CLOUD_PROJECT", "").strip()
    if not project and not name.startswith("projects/"):
        raise ConfigurationError("environment variable GOOGLE_CLOUD_PROJECT is required")
    return topic_path(project, name)


def _subscription(name: str) -> str:
    if name.startswith("projects/"):
        return name
    project = os.environ.get("GOOGLE_CLOUD_PROJECT", "").strip()
    if not project:
        raise ConfigurationError("environment variable GOOGLE_CLOUD_PROJECT is required")
    return f"projects/{project}/subscriptions/{name}"


# --- commands ---------------------------------------------------------------------------------


def _cmd_demo(args: argparse.Namespace) -> int:
    from pubsub_toolkit.local.demo import run_demo

    return run_demo(_repo_root())


def _cmd_publish(args: argparse.Namespace) -> int:
    from pubsub_toolkit.config import Settings
    from pubsub_toolkit.publisher import Publisher
    from pubsub_toolkit.publishing import PubSubSink

    _require_emulator_if_local()
    counter = None
    if args.fifo_group:
        from pubsub_toolkit.fifo.factory import counter_from_settings

        counter = counter_from_settings(Settings.from_env())
    sink = PubSubSink()
    try:
        message_id = Publisher(sink, _topic(args.topic), counter).publish(
            args.data.encode(),
            dict(args.attr),
            fifo_group=args.fifo_group,
            dedup_key=args.dedup_key,
            delay=args.delay,
            deliver_at=args.deliver_at,
        )
    except ValueError as exc:
        raise ToolkitError(str(exc)) from exc
    finally:
        sink.close()
    print(message_id)
    return 0


def _cmd_subscribe(args: argparse.Namespace) -> int:
    from pubsub_toolkit.config import ConsumerSettings, Settings
    from pubsub_toolkit.consumer import Consumer
    from pubsub_toolkit.message import Message
    from pubsub_toolkit.processing import MessageProcessor

    _require_emulator_if_local()
    env = dict(os.environ)
    if args.consumer_id:
        env["CONSUMER_ID"] = args.consumer_id
    env.setdefault("CONSUMER_ID", "cli")
    handled = 0
    done = threading.Event()
    lock = threading.Lock()

    def show(message: Message) -> None:
        nonlocal handled
        with lock:
            handled += 1
            if args.json:
                record = {
                    "data": message.data.decode(errors="replace"),
                    "attributes": dict(message.attributes),
                    "message_id": message.message_id,
                }
                print(json.dumps(record), flush=True)
            else:
                attrs = " ".join(f"{k}={v}" for k, v in sorted(message.attributes.items()))
                print(f"{message.data.decode(errors='replace')}  [{attrs}]", flush=True)
            if args.max and handled >= args.max:
                done.set()

    processor = MessageProcessor.from_settings(
        Settings.from_env(env), ConsumerSettings.from_env(env), show
    )
    consumer = Consumer(_subscription(args.subscription), processor)
    consumer.start()
    started = time.monotonic()
    try:
        while not done.wait(1.0):
            failure = consumer.stream_error()
            if failure is not None:
                raise ToolkitError(f"cannot read {args.subscription}: {failure}")
            if args.timeout and time.monotonic() - started >= args.timeout.total_seconds():
                break
            if args.max and not args.json:
                print(f"... {handled}/{args.max} handled", file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        pass
    finally:
        consumer.stop()
    if not args.json:
        print(f"{handled} message(s) handled", file=sys.stderr)
    return 0


def _gate_and_counter(
    consumer_id: str | None,
) -> tuple[FifoGate, FifoStore, SequenceCounter]:
    from pubsub_toolkit.config import ConsumerSettings, Settings
    from pubsub_toolkit.fifo.factory import counter_from_settings, fifo_store_from_settings
    from pubsub_toolkit.fifo.gate import FifoGate

    env = dict(os.environ)
    if consumer_id:
        env["CONSUMER_ID"] = consumer_id
    env.setdefault("CONSUMER_ID", "cli")
    settings, consumer = Settings.from_env(env), ConsumerSettings.from_env(env)
    store = fifo_store_from_settings(settings)

    def refuse(_message: object) -> None:
        raise ToolkitError("operator commands do not run handlers")

    from pubsub_toolkit.processing import gate_policy

    gate = FifoGate(
        store, consumer=consumer.consumer_id, handler=refuse, policy=gate_policy(consumer)
    )
    return gate, store, counter_from_settings(settings)


def _cmd_status(args: argparse.Namespace) -> int:
    from pubsub_toolkit.clock import SYSTEM_CLOCK
    from pubsub_toolkit.fifo.status import group_statuses, render_table

    _require_emulator_if_local()
    gate, store, counter = _gate_and_counter(args.consumer_id)
    rows = group_statuses(store, gate.consumer, now=SYSTEM_CLOCK.now(), counter=counter)
    print(f"FIFO groups of consumer {gate.consumer!r}:")
    print(render_table(rows) if rows else "(none yet)")
    print(f"\ndead letters: {_dead_letter_summary(args.dead_letter_subscription)}")
    print(f"scheduled deliveries: {_scheduled_summary()}")
    return 0


def _dead_letter_summary(subscription: str) -> str:
    from collections import Counter

    from google.api_core import exceptions as gexc
    from google.cloud import pubsub_v1  # type: ignore[attr-defined]

    from pubsub_toolkit.dlq import list_dead_letters

    subscriber = pubsub_v1.SubscriberClient()
    try:
        letters = list_dead_letters(subscriber, _subscription(subscription))
    except gexc.NotFound:
        return f"(no subscription {subscription})"
    finally:
        subscriber.close()
    reasons = Counter(d.reason for d in letters)
    detail = ", ".join(f"{reason} {n}" for reason, n in sorted(reasons.items()))
    return f"{len(letters)}" + (f" ({detail})" if detail else "")


def _scheduled_summary() -> str:
    queue = os.environ.get("TASKS_QUEUE", "").strip()
    if not queue:
        return "(TASKS_QUEUE not set)"
    from pubsub_toolkit.config import queue_path
    from pubsub_toolkit.delay.scheduler import tasks_client

    project = os.environ.get("GOOGLE_CLOUD_PROJECT", "")
    path = queue_path(project, os.environ.get("TASKS_LOCATION", ""), queue)
    client = tasks_client(os.environ.get("CLOUD_TASKS_EMULATOR_HOST") or None)
    tasks = list(client.list_tasks(parent=path, timeout=10))
    return f"{len(tasks)} waiting in {path.rsplit('/', 1)[-1]}"


def _cmd_fifo_skip(args: argparse.Namespace) -> int:
    gate, _, _ = _gate_and_counter(args.consumer_id)
    try:
        state = gate.skip(args.group, args.seq, run=False)  # the consumer resumes the group
    except ValueError as exc:
        raise ToolkitError(str(exc)) from exc
    print(
        f"skipped {args.group}#{args.seq} (tombstone); last processed is now "
        f"{state.last_processed}; the consumer's sweeper resumes the group"
    )
    return 0


def _cmd_fifo_replay(args: argparse.Namespace) -> int:
    gate, _, _ = _gate_and_counter(args.consumer_id)
    result = gate.replay(args.group, run=False)  # the consumer's handler must run it
    print(
        f"unblocked {args.group}: #{result.seq} gets fresh attempts; "
        "the consumer's sweeper runs it next"
    )
    return 0


def _dead_letter_subscription(args: argparse.Namespace) -> str:
    return _subscription(args.subscription)


def _cmd_dlq_list(args: argparse.Namespace) -> int:
    from google.cloud import pubsub_v1  # type: ignore[attr-defined]

    from pubsub_toolkit.clock import SYSTEM_CLOCK
    from pubsub_toolkit.dlq import list_dead_letters

    _require_emulator_if_local()
    subscriber = pubsub_v1.SubscriberClient()
    try:
        letters = list_dead_letters(subscriber, _dead_letter_subscription(args), limit=args.limit)
    finally:
        subscriber.close()
    now = SYSTEM_CLOCK.now()
    rows = [("dead-letter id", "reason", "dedup_key", "group", "seq", "age", "detail")]
    for d in letters:
        age = (
            "-"
            if d.dead_lettered_at is None
            else f"{(now - d.dead_lettered_at).total_seconds():.0f}s"
        )
        rows.append(
            (
                d.dead_letter_id,
                d.reason,
                d.dedup_key or "-",
                d.group or "-",
                "-" if d.seq is None else str(d.seq),
                age,
                d.detail[:60],
            )
        )
    print("\n".join(format_table(rows)))
    print(f"{len(letters)} dead letter(s)", file=sys.stderr)
    return 0


def _cmd_dlq_replay(args: argparse.Namespace) -> int:
    from google.cloud import pubsub_v1  # type: ignore[attr-defined]

    from pubsub_toolkit.dlq import DeadLetter, replay
    from pubsub_toolkit.publishing import PubSubSink

    _require_emulator_if_local()

    def selected(letter: DeadLetter) -> bool:
        return (
            (not args.reason or letter.reason == args.reason)
            and (not args.group or letter.group == args.group)
            and (not args.id or letter.dead_letter_id in args.id)
        )

    if not (args.all or args.reason or args.group or args.id):
        raise ToolkitError("choose what to replay: --reason, --group, --id, or --all")
    subscriber, sink = pubsub_v1.SubscriberClient(), PubSubSink()
    try:
        replayed = replay(
            subscriber, _dead_letter_subscription(args), sink, _topic(args.topic), select=selected
        )
    finally:
        subscriber.close()
        sink.close()
    print(f"replayed {len(replayed)} message(s) to {args.topic}")
    return 0


def _cmd_local_up(args: argparse.Namespace) -> int:
    from pubsub_toolkit.local import control
    from pubsub_toolkit.local.stack import StackOptions

    ports = {name: getattr(args, name) for name in control.DEFAULT_PORTS}
    options = StackOptions(project=args.project, dedup_backend=args.dedup_backend, **ports)
    print("starting the local stack (emulators, Cloud Tasks emulator, ingress, relay)...")
    state = control.up(_repo_root(), options)
    print("\n".join(control.status_lines(state)))
    print('\nready. Point your code at it with:  eval "$(pubsub-toolkit local env)"')
    return 0


def _cmd_local_env(args: argparse.Namespace) -> int:
    from pubsub_toolkit.local import control

    print("\n".join(control.export_lines(control.require_running(_repo_root()))))
    return 0


def _cmd_local_status(args: argparse.Namespace) -> int:
    from pubsub_toolkit.local import control

    print("\n".join(control.status_lines(control.require_running(_repo_root()))))
    return 0


def _cmd_local_down(args: argparse.Namespace) -> int:
    from pubsub_toolkit.local import control

    stopped = control.down(_repo_root())
    print(f"stopped: {', '.join(stopped)}" if stopped else "the local stack was not running")
    return 0


# --- parser -----------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pubsub-toolkit",
        description="Deduplication, delayed delivery and FIFO per group for Google Cloud Pub/Sub.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = commands.add_parser("demo", help="run the whole pipeline locally, narrated, then stop")
    demo.set_defaults(func=_cmd_demo)

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
    publish.set_defaults(func=_cmd_publish)

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
    subscribe.set_defaults(func=_cmd_subscribe)

    status = commands.add_parser(
        "status", help="FIFO groups, dead-letter count, scheduled deliveries"
    )
    status.add_argument("--consumer-id", help="whose groups (default: $CONSUMER_ID or cli)")
    status.add_argument("--dead-letter-subscription", default="dead-letter-sub")
    status.set_defaults(func=_cmd_status)

    _add_fifo_commands(commands)
    _add_dlq_commands(commands)
    _add_local_commands(commands)
    return parser


def _add_fifo_commands(commands: Any) -> None:
    fifo = commands.add_parser("fifo", help="operator actions on FIFO groups")
    fifo_commands = fifo.add_subparsers(dest="fifo_command", required=True, metavar="ACTION")
    skip = fifo_commands.add_parser("skip", help="pass over GROUP's SEQ with a tombstone")
    skip.add_argument("group")
    skip.add_argument("seq", type=int)
    skip.add_argument("--consumer-id")
    skip.set_defaults(func=_cmd_fifo_skip)
    replay = fifo_commands.add_parser("replay", help="unblock GROUP and run its parked head again")
    replay.add_argument("group")
    replay.add_argument("--consumer-id")
    replay.set_defaults(func=_cmd_fifo_replay)


def _add_dlq_commands(commands: Any) -> None:
    dlq = commands.add_parser("dlq", help="inspect and replay the dead-letter topic")
    dlq_commands = dlq.add_subparsers(dest="dlq_command", required=True, metavar="ACTION")
    dlq_list = dlq_commands.add_parser("list", help="reason, key, group, seq and age of each")
    dlq_list.add_argument("--subscription", default="dead-letter-sub")
    dlq_list.add_argument("--limit", type=int, default=1000)
    dlq_list.set_defaults(func=_cmd_dlq_list)
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
    dlq_replay.set_defaults(func=_cmd_dlq_replay)


def _add_local_commands(commands: Any) -> None:
    local = commands.add_parser("local", help="run the pipeline locally in the background")
    local_commands = local.add_subparsers(dest="local_command", required=True, metavar="ACTION")
    up = local_commands.add_parser("up", help="start every part; ports and pids go to a state file")
    up.add_argument("--project", default="local-project")
    up.add_argument("--dedup-backend", choices=("firestore", "redis"), default="firestore")
    from pubsub_toolkit.local.control import DEFAULT_PORTS

    for name, port in DEFAULT_PORTS.items():
        flag = "--" + name.replace("_", "-")
        up.add_argument(flag, type=int, default=port, help=f"(default {port})")
    up.set_defaults(func=_cmd_local_up)
    local_commands.add_parser("env", help="print export lines for your shell").set_defaults(
        func=_cmd_local_env
    )
    local_commands.add_parser("status", help="show what runs").set_defaults(func=_cmd_local_status)
    local_commands.add_parser("down", help="stop everything `up` started").set_defaults(
        func=_cmd_local_down
    )


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
