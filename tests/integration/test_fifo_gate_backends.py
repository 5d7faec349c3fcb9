"""The FIFO gate end to end on the real Redis and Firestore stores, with concurrent consumers.

Four threads play four consumer processes on one subscription: each has its own gate and its
own store object (its own Redis connection pool or Firestore client) over the same backing
data. They take deliveries from one shared queue (every message of five groups, locally
shuffled, with duplicates), the way Pub/Sub spreads a subscription over its subscribers. A
delivery that raises a TransientError is a nack and goes back into the queue. Afterwards the
groups are swept until idle (parked heads whose lease holder moved on are the sweeper's job).
Every group's handler must have seen 1..N exactly once, in order, never two at the same time.

A number must never run twice, two numbers of a group never at once, and no worker may be
fenced (StaleClaimError) for acting on a lease it no longer holds.
"""

from __future__ import annotations

import collections
import itertools
import queue
import random
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest

from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.core.fifo_policy import GateOutcome
from pubsub_toolkit.errors import StaleClaimError, TransientError
from pubsub_toolkit.message import Message
from tests.integration.test_fifo_store_contract import Backend, fifo_store_factory
from tests.support.waiting import wait_until

CONSUMER = "consumer-a"
GROUPS = ("orders", "payments/eu", "ünïcødé-群组", "a:b", "x" * 300)
MESSAGES = 30
WORKERS = 4
DUPLICATE_SHARE = 0.3
JITTER = 8.0  # how many places a delivery may move from publish order


@pytest.fixture(params=("redis", "firestore"))
def backend(request: pytest.FixtureRequest) -> Backend:
    return fifo_store_factory(request, request.param)


@dataclass(frozen=True)
class Run:
    """One call of the handler."""

    id: int
    group: str
    seq: int


class Recorder:
    """A thread-safe handler: every run, which ones overlapped, and each thread's latest run."""

    def __init__(self, work: Callable[[], object]) -> None:
        self._work = work
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._running: dict[str, set[Run]] = collections.defaultdict(set)
        self._latest = threading.local()
        self.runs: list[Run] = []
        self.overlaps: list[tuple[Run, Run]] = []  # (a run in progress, a run of its group)

    def __call__(self, message: Message) -> None:
        group, seq = message.attributes["fifo_group"], int(message.attributes["fifo_seq"])
        with self._lock:
            run = Run(next(self._ids), group, seq)
            self.overlaps += [(other, run) for other in self._running[group]]
            self._running[group].add(run)
            self.runs.append(run)
        self._latest.run = run
        self._work()  # a handler's I/O: the window in which a second run would overlap
        with self._lock:
            self._running[group].discard(run)

    def take_latest(self) -> Run | None:
        """This thread's latest run since the last call (None if it ran nothing)."""
        run: Run | None = getattr(self._latest, "run", None)
        self._latest.run = None
        return run

    def distinct(self, group: str) -> int:
        with self._lock:
            return len({r.seq for r in self.runs if r.group == group})


def fifo_message(group: str, seq: int) -> Message:
    return Message(
        f"{group}#{seq}".encode(),
        {"fifo_group": group, "fifo_seq": str(seq)},
        message_id=f"{group}#{seq}",
        ordering_key=group,
    )


def shuffled_deliveries(rng: random.Random) -> list[tuple[str, int]]:
    """Every (group, seq) once and a share of them twice, groups interleaved, each shuffled.

    Like Pub/Sub under redelivery: roughly in publish order but displaced by up to ``JITTER``
    places, so the four subscribers often hold neighbouring numbers of one group at once (a
    head racing its successors, a duplicate racing its original). A full shuffle would make
    nearly every delivery an early arrival and leave the heads uncontended.
    """
    deliveries = [(group, seq) for group in GROUPS for seq in range(1, MESSAGES + 1)]
    deliveries += rng.sample(deliveries, int(len(deliveries) * DUPLICATE_SHARE))
    return sorted(deliveries, key=lambda d: d[1] + rng.uniform(0, JITTER))


class Subscription:
    """The shared queue of deliveries: nack = put it back; outcomes and fenced runs tallied."""

    def __init__(self, deliveries: list[tuple[str, int]], recorder: Recorder) -> None:
        self._queue: queue.Queue[tuple[str, int]] = queue.Queue()
        for delivery in deliveries:
            self._queue.put(delivery)
        self._recorder = recorder
        self._lock = threading.Lock()
        self.outcomes: collections.Counter[str] = collections.Counter()
        self.fenced_runs: set[int] = set()  # last run of a delivery that ended StaleClaimError

    def serve(self, gate: FifoGate) -> None:
        """Deliver until the queue is empty (as one subscriber process would)."""
        while True:
            try:
                group, seq = self._queue.get_nowait()
            except queue.Empty:
                return
            self._recorder.take_latest()
            try:
                result = gate.deliver(fifo_message(group, seq), group, seq)
            except TransientError as exc:
                self._queue.put((group, seq))  # a nack: Pub/Sub delivers it again later
                fenced = self._recorder.take_latest() if isinstance(exc, StaleClaimError) else None
                with self._lock:
                    self.outcomes[f"nack:{type(exc).__name__}"] += 1
                    if fenced is not None:
                        self.fenced_runs.add(fenced.id)
            else:
                with self._lock:
                    self.outcomes[result.outcome.value] += 1

    def empty(self) -> bool:
        return self._queue.empty()


def test_groups_stay_in_order_and_exactly_once_across_consumer_processes(
    backend: Backend,
) -> None:
    io_store = backend.make()
    recorder = Recorder(lambda: io_store.load("handler-io", "g"))
    gates = [FifoGate(backend.make(), consumer=CONSUMER, handler=recorder) for _ in range(WORKERS)]
    subscription = Subscription(shuffled_deliveries(random.Random(20300101)), recorder)
    start = threading.Barrier(WORKERS)

    def subscriber(gate: FifoGate) -> None:
        start.wait()
        subscription.serve(gate)

    with ThreadPoolExecutor(WORKERS) as pool:
        for future in [pool.submit(subscriber, gate) for gate in gates]:
            future.result()  # anything but a nack is a failure of the gate or the store

    def settled() -> bool:
        # Nacks put back after a worker left the queue, then the sweeper's pass over each group.
        subscription.serve(gates[0])
        sweeps = [gates[i % WORKERS].sweep(group) for i, group in enumerate(GROUPS)]
        done = all(recorder.distinct(group) == MESSAGES for group in GROUPS)
        return done and subscription.empty() and all(s.outcome is GateOutcome.IDLE for s in sweeps)

    wait_until(settled, timeout=20, what=f"every group processed; outcomes {subscription.outcomes}")

    for group in GROUPS:
        seqs = [r.seq for r in recorder.runs if r.group == group]
        assert seqs == list(range(1, MESSAGES + 1)), (group, seqs)  # in order, each once
    assert recorder.overlaps == []
    assert subscription.outcomes["nack:StaleClaimError"] == 0, dict(subscription.outcomes)
    # Every group idle: the store lists none for the sweeper; a gate that saw one parked
    # visits it once more, and its read shows the work done.
    for group in gates[0].groups():
        assert gates[0].sweep(group).outcome is GateOutcome.IDLE
    assert gates[0].groups() == []
    store = backend.make()
    for group in GROUPS:
        state = store.load(CONSUMER, group)
        assert state.last_processed == MESSAGES, group
        assert state.parked == () and state.lease_until is None, (group, state)
