"""Operator commands: `status`, `fifo skip|replay`, `dlq list|replay`."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from pubsub_toolkit.cli.common import full_subscription, full_topic, require_emulator_if_local
from pubsub_toolkit.errors import ToolkitError
from pubsub_toolkit.text_table import format_table

if TYPE_CHECKING:
    from pubsub_toolkit.fifo.counter import SequenceCounter
    from pubsub_toolkit.fifo.gate import FifoGate
    from pubsub_toolkit.fifo.state import FifoStore


def gate_and_counter(
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


def cmd_status(args: argparse.Namespace) -> int:
    from pubsub_toolkit.clock import SYSTEM_CLOCK
    from pubsub_toolkit.fifo.status import group_statuses, render_table

    require_emulator_if_local()
    gate, store, counter = gate_and_counter(args.consumer_id)
    rows = group_statuses(store, gate.consumer, now=SYSTEM_CLOCK.now(), counter=counter)
    print(f"FIFO groups of consumer {gate.consumer!r}:")
    print(render_table(rows) if rows else "(none yet)")
    print(f"\ndead letters: {dead_letter_summary(args.dead_letter_subscription)}")
    print(f"scheduled deliveries: {scheduled_summary()}")
    return 0


def dead_letter_summary(subscription: str) -> str:
    from collections import Counter

    from google.api_core import exceptions as gexc
    from google.cloud import pubsub_v1  # type: ignore[attr-defined]

    from pubsub_toolkit.dlq import list_dead_letters

    subscriber = pubsub_v1.SubscriberClient()
    try:
        letters = list_dead_letters(subscriber, full_subscription(subscription))
    except gexc.NotFound:
        return f"(no subscription {subscription})"
    finally:
        subscriber.close()
    reasons = Counter(d.reason for d in letters)
    detail = ", ".join(f"{reason} {n}" for reason, n in sorted(reasons.items()))
    return f"{len(letters)}" + (f" ({detail})" if detail else "")


def scheduled_summary() -> str:
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


def cmd_fifo_skip(args: argparse.Namespace) -> int:
    gate, _, _ = gate_and_counter(args.consumer_id)
    try:
        state = gate.skip(args.group, args.seq, run=False)  # the consumer resumes the group
    except ValueError as exc:
        raise ToolkitError(str(exc)) from exc
    print(
        f"skipped {args.group}#{args.seq} (tombstone); last processed is now "
        f"{state.last_processed}; the consumer's sweeper resumes the group"
    )
    return 0


def cmd_fifo_replay(args: argparse.Namespace) -> int:
    gate, _, _ = gate_and_counter(args.consumer_id)
    result = gate.replay(args.group, run=False)  # the consumer's handler must run it
    print(
        f"unblocked {args.group}: #{result.seq} gets fresh attempts; "
        "the consumer's sweeper runs it next"
    )
    return 0


def dead_letter_subscription(args: argparse.Namespace) -> str:
    return full_subscription(args.subscription)


def cmd_dlq_list(args: argparse.Namespace) -> int:
    from google.cloud import pubsub_v1  # type: ignore[attr-defined]

    from pubsub_toolkit.clock import SYSTEM_CLOCK
    from pubsub_toolkit.dlq import list_dead_letters

    require_emulator_if_local()
    subscriber = pubsub_v1.SubscriberClient()
    try:
        letters = list_dead_letters(subscriber, dead_letter_subscription(args), limit=args.limit)
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


def cmd_dlq_replay(args: argparse.Namespace) -> int:
    from google.cloud import pubsub_v1  # type: ignore[attr-defined]

    from pubsub_toolkit.dlq import DeadLetter, replay
    from pubsub_toolkit.publishing import PubSubSink

    require_emulator_if_local()

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
            subscriber,
            dead_letter_subscription(args),
            sink,
            full_topic(args.topic),
            select=selected,
        )
    finally:
        subscriber.close()
        sink.close()
    print(f"replayed {len(replayed)} message(s) to {args.topic}")
    return 0
