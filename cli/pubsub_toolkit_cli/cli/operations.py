"""Operator commands: `status`, `fifo skip|replay`, `dlq replay` (`dlq list`: .dead_letters)."""

from __future__ import annotations

import argparse
import json
import os
import shlex
from typing import TYPE_CHECKING

from pubsub_toolkit.errors import ToolkitError
from pubsub_toolkit_cli.cli.common import (
    full_subscription,
    full_topic,
    require_emulator_if_local,
)
from pubsub_toolkit_cli.cli.exits import UsageError

if TYPE_CHECKING:
    from pubsub_toolkit.consumer.gate import FifoGate
    from pubsub_toolkit.stores.counters.base import SequenceCounter
    from pubsub_toolkit.stores.dedup.base import DedupStore
    from pubsub_toolkit.stores.fifo_state.base import FifoStore, GroupState
    from pubsub_toolkit_cli.dashboard.snapshot import StatusSnapshot
    from pubsub_toolkit_cli.dead_letters.listing import DeadLetter


def gate_and_counter(
    consumer_id: str | None,
) -> tuple[FifoGate, FifoStore, SequenceCounter]:
    from pubsub_toolkit.config import ConsumerSettings, Settings
    from pubsub_toolkit.consumer.gate import FifoGate
    from pubsub_toolkit.stores.factory import backend_from_settings

    env = dict(os.environ)
    if consumer_id:
        env["PUBSUB_TOOLKIT_CONSUMER_ID"] = consumer_id
    env.setdefault("PUBSUB_TOOLKIT_CONSUMER_ID", "cli")
    settings, consumer = Settings.from_env(env), ConsumerSettings.from_env(env)
    backend = backend_from_settings(settings)  # one client for the gate store and the counter
    store = backend.fifo_store()

    def refuse(_message: object) -> None:
        raise ToolkitError("operator commands do not run handlers")

    from pubsub_toolkit.consumer.processor import gate_policy

    # The same tombstone retention as the consumer's: skipping a group's end completes it.
    policy = gate_policy(consumer, completed_retention=settings.dedup_ttl)
    gate = FifoGate(store, consumer=consumer.consumer_id, handler=refuse, policy=policy)
    return gate, store, backend.counter()


def cmd_status(args: argparse.Namespace) -> int:
    from pubsub_toolkit.clock import SYSTEM_CLOCK
    from pubsub_toolkit_cli.dashboard.snapshot import gather
    from pubsub_toolkit_cli.dashboard.sources import LiveStatusSource

    require_emulator_if_local()
    source = LiveStatusSource.from_env(
        consumer=args.consumer_id,
        dead_letter_subscription=args.dead_letter_subscription,
        groups=args.group,
    )
    try:
        snapshot = gather(source, now=SYSTEM_CLOCK.now())
    finally:
        source.close()
    if args.json:
        print(json.dumps(snapshot.to_json()))
        return 0
    print("\n".join(status_lines(snapshot, dead_letter_name=args.dead_letter_subscription)))
    return 0


def status_lines(snapshot: StatusSnapshot, *, dead_letter_name: str) -> list[str]:
    """The `status` command's text for ``snapshot``."""
    from pubsub_toolkit_cli.group_status import render_table

    lines = [f"FIFO groups of consumer {snapshot.consumer!r} with work, and any named:"]
    lines.append(render_table(snapshot.groups) if snapshot.groups else "(none)")
    lines.append("(idle groups are not listed; `status --group NAME` shows one)")
    dead = snapshot.dead_letters
    if not dead.exists:
        dead_text = f"(no subscription {dead_letter_name})"
    else:
        detail = ", ".join(f"{reason} {n}" for reason, n in dead.by_reason)
        dead_text = dead.total_text + (f" ({detail})" if detail else "")
    lines.append(f"\ndead letters: {dead_text}")
    scheduled = snapshot.scheduled
    lines.append(
        "scheduled deliveries: "
        + (
            "(PUBSUB_TOOLKIT_TASKS_QUEUE not set)"
            if scheduled.queue is None
            else f"{scheduled.waiting_text} waiting in {scheduled.queue.rsplit('/', 1)[-1]}"
        )
    )
    rate = snapshot.dedup.hit_rate
    lines.append(
        f"ingress deliveries: {snapshot.dedup.deliveries}, duplicates: "
        f"{snapshot.dedup.duplicates}" + ("" if rate is None else f" (dedup hit rate {rate:.1%})")
    )
    # A part that could not be read says so instead of showing zeros (the page's cards do too).
    shown = [p for p in snapshot.problems if not p[0].startswith(("backlog", "consumers"))]
    return lines + [f"unavailable: {part}: {why}" for part, why in shown]


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
    gate, store, _ = gate_and_counter(args.consumer_id)
    if store.load(gate.consumer, args.group).blocked_at is None:
        # Nothing to unblock: most often a misspelt group or another consumer's. Replaying
        # anyway would write a record for that name and report the real group "unblocked".
        raise ToolkitError(
            f"group {args.group!r} is not blocked for consumer {gate.consumer!r}: nothing to "
            "replay (check the name and --consumer-id; `pubsub-toolkit status --consumer-id "
            f"{shlex.quote(gate.consumer)} --group {shlex.quote(args.group)}` shows it)"
        )
    result = gate.replay(args.group, run=False)  # the consumer's handler must run it
    print(
        f"unblocked {args.group}: #{result.seq} gets fresh attempts; "
        "the consumer's sweeper runs it next"
    )
    return 0


def dead_letter_subscription(args: argparse.Namespace) -> str:
    return full_subscription(args.subscription)


def cmd_dlq_replay(args: argparse.Namespace) -> int:
    from pubsub_toolkit.producer.sink import PubSubSink
    from pubsub_toolkit_cli.dead_letters.replay import replay
    from pubsub_toolkit_cli.emulator import subscriber_client

    require_emulator_if_local()

    seen: set[str] = set()  # every letter's id the listing went past, for --id's check

    def selected(letter: DeadLetter) -> bool:
        seen.add(letter.dead_letter_id)
        return (
            (not args.reason or letter.reason == args.reason)
            and (not args.group or letter.group == args.group)
            and (not args.id or letter.dead_letter_id in args.id)
        )

    if not (args.all or args.reason or args.group or args.id):
        raise UsageError("choose what to replay: --reason, --group, --id, or --all")
    store = replay_store()
    passed = PassedNumbers(args.consumer_id)
    subscriber, sink = subscriber_client(), PubSubSink()
    kept: list[str] = []
    try:
        replayed = replay(
            subscriber,
            dead_letter_subscription(args),
            sink,
            full_topic(args.topic),
            store=store,
            select=lambda letter: selected(letter) and not passed.check(letter),
            on_kept=lambda letter, why: kept.append(f"kept {letter.dead_letter_id}: {why}"),
        )
    finally:
        subscriber.close()
        sink.close()
    print(f"replayed {len(replayed)} message(s) to {args.topic}")
    for line in kept + passed.notes:
        print(line)
    for line in unblock_replayed_poison(replayed, args.consumer_id):
        print(line)
    missing = [i for i in dict.fromkeys(args.id or ()) if i not in seen]
    if missing:  # a mistyped id: say so (exit 1) rather than "replayed 0"
        raise ToolkitError(
            f"no dead letter with id {', '.join(missing)} on {dead_letter_subscription(args)} "
            "(`pubsub-toolkit dlq list` shows the ids)"
        )
    return 0


def replay_store() -> DedupStore:
    """The dedup store ingress reads, where `dlq replay` mints its replay ids.

    Ingress dead-letters a replay whose id it finds no mint for (``forged_replay_id``), so the mint
    must land in ingress's own store: built from the same settings (PUBSUB_TOOLKIT_STORE_BACKEND,
    PUBSUB_TOOLKIT_DEDUP_COLLECTION, PUBSUB_TOOLKIT_REDIS_URL, ...). The memory backend lives inside
    one process, so a CLI run could never mint for a running ingress: refused rather than replaying
    into forgeries.
    """
    from pubsub_toolkit.config import Settings
    from pubsub_toolkit.stores.factory import dedup_store_from_settings

    settings = Settings.from_env()
    if settings.store_backend == "memory":
        raise ToolkitError(
            "dlq replay mints replay ids in ingress's dedup store; "
            "PUBSUB_TOOLKIT_STORE_BACKEND=memory is "
            "private to one process (use firestore or redis)"
        )
    return dedup_store_from_settings(settings)


class PassedNumbers:
    """Keeps FIFO dead letters whose group has already moved past them out of a replay.

    With the ``skip`` policies the group goes on without a poison (or gap-skipped) number; a
    replayed copy could no longer run in order and would only be dead-lettered again as
    ``fifo_late_after_skip``. Such letters stay on the dead-letter subscription, and the
    operator is told to handle them out of band.
    """

    def __init__(self, consumer_id: str | None) -> None:
        self._consumer_id = consumer_id
        self._gate: tuple[FifoGate, FifoStore] | None = None  # connected on first FIFO letter
        self._states: dict[str, GroupState] = {}
        self.notes: list[str] = []

    def check(self, letter: DeadLetter) -> bool:
        """True when ``letter``'s group already passed its number (it is then not replayed)."""
        if letter.group is None or letter.seq is None or letter.seq < 1:
            return False  # not a valid FIFO number (e.g. an invalid_fifo_seq letter): replay it
        if self._gate is None:
            gate, store, _ = gate_and_counter(self._consumer_id)
            self._gate = (gate, store)
        gate, store = self._gate
        if letter.group not in self._states:
            self._states[letter.group] = store.load(gate.consumer, letter.group)
        state = self._states[letter.group]
        if letter.seq > state.last_processed or state.blocked_at == letter.seq:
            return False
        self.notes.append(
            f"kept {letter.group} #{letter.seq} on the dead-letter topic: consumer "
            f"{gate.consumer!r} has already moved past it (last processed "
            f"#{state.last_processed}), so it cannot run in order; handle it out of band"
        )
        return True


def unblock_replayed_poison(replayed: list[DeadLetter], consumer_id: str | None) -> list[str]:
    """Unblock each group that is BLOCKED at a poison message just replayed; say what was done.

    With the ``block`` poison policy the gate keeps the poison message parked and the group
    stopped. The replayed copy would only be parked behind that block, so replaying it means
    "try it again": the group is unblocked (as `fifo replay` does) and the consumer's sweeper
    runs the message - the parked original or the replayed copy, whichever comes first; the
    other is then a duplicate of a processed number.
    """
    from pubsub_toolkit.core.fifo_policy import REASON_POISON

    poison = [d for d in replayed if d.reason == REASON_POISON and d.group and d.seq is not None]
    if not poison:
        return []
    gate, store, _ = gate_and_counter(consumer_id)
    lines = []
    for letter in poison:
        assert letter.group is not None  # filtered above
        state = store.load(gate.consumer, letter.group)
        if state.blocked_at == letter.seq:
            gate.replay(letter.group, run=False)  # the consumer's handler runs it, not the CLI
            lines.append(
                f"unblocked {letter.group} at #{letter.seq} for consumer {gate.consumer!r}; "
                "its sweeper runs the message next"
            )
        elif state.blocked_at is not None:
            lines.append(
                f"{letter.group} stays blocked at #{state.blocked_at} (not #{letter.seq}) for "
                f"consumer {gate.consumer!r}"
            )
        else:
            lines.append(
                f"{letter.group} is not blocked for consumer {gate.consumer!r} "
                "(another consumer? pass --consumer-id)"
            )
    return lines
