"""Runs the mixed workload through a running local stack and accounts for it.

``tests/e2e/test_mixed_workload.py`` runs it small (2,000 publishes) on every ``make test``;
``bench/soak.py`` runs it at 50,000 and more. Both publish to the origin topic with the official
client and watch only public surfaces: a :class:`~pubsub_toolkit.consumer.subscriber.Consumer`
on the final topic, a pull on the dead-letter topic, and ingress's structured decision log.

The mix is :mod:`bench.mix`; the accounting is :mod:`bench.ledger`.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from google.cloud import pubsub_v1  # type: ignore[attr-defined]

from bench.ledger import Ledger, Observer, check_ledger, expected_fates
from bench.mix import Mix, Publish, build_waves
from pubsub_toolkit import attributes as attr
from pubsub_toolkit.config import ConsumerSettings, Settings
from pubsub_toolkit.consumer.processor import MessageProcessor
from pubsub_toolkit.consumer.subscriber import Consumer
from pubsub_toolkit.stores.counters.base import SequenceCounter
from pubsub_toolkit_local.topology import Topology


@dataclass(frozen=True)
class RunResult:
    """What one run of the workload measured, and its ledger."""

    ledger: Ledger
    published: int
    wall_s: float  # first publish -> every key at its final fate (or the deadline)
    complete: bool  # every key reached its fate before the deadline


Progress = Callable[[str], None]


def wait_for(
    condition: Callable[[], bool],
    deadline: float,
    *,
    interval: float = 0.25,
    report: Callable[[], str] | None = None,
    progress: Progress | None = None,
    every: float = 10.0,
) -> bool:
    """Poll ``condition`` until true (True) or ``deadline`` (monotonic) passes (False)."""
    next_report = time.monotonic() + every
    while True:
        if condition():
            return True
        now = time.monotonic()
        if now >= deadline:
            return False
        if progress is not None and report is not None and now >= next_report:
            progress(report())
            next_report = now + every
        time.sleep(min(interval, max(0.0, deadline - now)))


def run_workload(
    *,
    topology: Topology,
    env: dict[str, str],
    mix: Mix,
    counter: SequenceCounter,
    ingress_log: Path,
    deadline: float,
    backlog: int = 4000,
    quiet: float = 2.0,
    progress: Progress | None = None,
) -> RunResult:
    """Publish ``mix`` to origin, consume the final topic, and account for every copy.

    A wave is published only while fewer than ``backlog`` copies wait for ingress, so a long run
    keeps a bounded backlog (and FIFO gaps bounded in time) instead of queueing everything in the
    emulator at once. ``env`` configures the Consumer (it needs ``PUBSUB_TOOLKIT_CONSUMER_ID``).
    """
    waves = build_waves(mix, counter)
    seen = Observer(ingress_log)
    processor = MessageProcessor.from_settings(
        Settings.from_env(env), ConsumerSettings.from_env(env), seen.handler
    )
    sent: dict[str, Publish] = {}
    want = Counter[str]()
    for wave in waves:
        for p in wave:
            want[p.key] = expected_fates(p.kind)
    fates_needed = sum(want.values())

    def fates_reached() -> int:
        with seen.lock:
            reached = Counter(m.attributes.get(attr.DEDUP_KEY, "") for _, _, m in seen.delivered)
            dead = [i for i, _ in seen.dead_letters]
        for message_id in dead:
            if message_id in sent:
                reached[sent[message_id].key] += 1
        return sum(min(n, reached[key]) for key, n in want.items())

    def report() -> str:
        return (
            f"{time.monotonic() - started:.0f}s: published {len(sent)}/{mix.total}, "
            f"ingress decided {seen.ingress_terminal}, fates {fates_reached()}/{fates_needed}"
        )

    def ingress_caught_up(limit: int) -> Callable[[], bool]:
        def check() -> bool:
            seen.read_ingress_log()
            return len(sent) - seen.ingress_terminal <= limit

        return check

    subscriber = pubsub_v1.SubscriberClient()
    dead_letter_stream = subscriber.subscribe(topology.dead_letter_sub, seen.on_dead_letter)
    publisher = pubsub_v1.PublisherClient()
    complete = False
    started = time.monotonic()
    wall = 0.0
    try:
        with Consumer(topology.final_sub, processor, concurrency=16, on_outcome=seen.on_outcome):
            for wave in waves:
                if not wait_for(
                    ingress_caught_up(backlog), deadline, report=report, progress=progress
                ):
                    break
                futures = [
                    (p, publisher.publish(topology.origin, p.data, dedup_key=p.key, **p.attributes))
                    for p in wave
                ]
                for p, future in futures:
                    sent[future.result(timeout=max(1.0, deadline - time.monotonic()))] = p
            else:
                complete = wait_for(
                    lambda: ingress_caught_up(0)() and fates_reached() >= fates_needed,
                    deadline,
                    report=report,
                    progress=progress,
                )
            wall = time.monotonic() - started
            if complete:
                # A quiet spell after the last fate: a late duplicate would show up in it.
                wait_for(
                    lambda: time.monotonic() - seen.last_event >= quiet,
                    min(deadline, time.monotonic() + 60),
                )
    finally:
        dead_letter_stream.cancel()
        subscriber.close()
        publisher.stop()
    seen.read_ingress_log()
    return RunResult(check_ledger(sent, seen), len(sent), wall, complete)
