"""bench/fifo_sequencer: sequence numbers per second on ONE hot group, per counter design.

Run with ``python -m bench.fifo_sequencer``. It starts its own emulators and Redis.

Four publishers (threads, each with its own counter object and client, as separate publisher
processes would have) take numbers from the same group at once, for:

* ``firestore_increment``: :class:`FirestoreSequenceCounter`, one ``Increment(1)`` per message;
* ``firestore_block``: the same counter reserving blocks (default 50 numbers per round trip, as
  ``Publisher.publish_batch`` does);
* ``firestore_transaction``: the seeds' read-then-write transaction, the baseline;
* ``redis_incrby``: :class:`RedisSequenceCounter`, one ``INCRBY 1`` per message.

Each run stops at its number quota or its time budget, whichever comes first (the transaction
baseline always hits the budget on the emulator); a reservation in flight when the budget runs
out still finishes and counts, and the elapsed time includes it. Every run then checks that its
blocks cover ``1..N`` exactly once. Ratios are to the transaction baseline, in the same run.
"""

from __future__ import annotations

import argparse
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from google.cloud import firestore

from bench.common import Servers, local_servers, write_result
from pubsub_toolkit.stores.counters.base import SequenceBlock, SequenceCounter
from pubsub_toolkit.stores.counters.firestore import (
    FirestoreSequenceCounter,
    FirestoreTransactionCounter,
)
from pubsub_toolkit.stores.counters.redis import RedisSequenceCounter

PUBLISHERS = 4
BASELINE = "firestore_transaction"
TARGET_RATIO = 10.0


@dataclass(frozen=True)
class Variant:
    name: str
    make: Callable[[], SequenceCounter]  # one call per publisher: its own client
    block: int  # numbers per reservation
    max_numbers: int  # quota over all publishers
    budget_s: float


@dataclass(frozen=True)
class Run:
    numbers: int
    reservations: int
    elapsed_s: float

    @property
    def numbers_per_s(self) -> float:
        return self.numbers / self.elapsed_s


def run_variant(variant: Variant) -> Run:
    """PUBLISHERS threads reserve on one fresh group until the quota or the budget is reached."""
    counters = [variant.make() for _ in range(PUBLISHERS)]
    for counter in counters:
        counter.reserve(f"warmup-{uuid.uuid4().hex}")  # connect before the clock starts
    group = f"hot-{uuid.uuid4().hex[:8]}"
    quota = variant.max_numbers // PUBLISHERS
    barrier = threading.Barrier(PUBLISHERS + 1)

    def publisher(counter: SequenceCounter) -> list[SequenceBlock]:
        blocks: list[SequenceBlock] = []
        barrier.wait()  # all publishers start together: the group is hot from the first number
        deadline = time.perf_counter() + variant.budget_s
        taken = 0
        while taken < quota and time.perf_counter() < deadline:
            blocks.append(counter.reserve(group, min(variant.block, quota - taken)))
            taken += blocks[-1].size
        return blocks

    with ThreadPoolExecutor(PUBLISHERS) as pool:
        futures = [pool.submit(publisher, counter) for counter in counters]
        barrier.wait()
        start = time.perf_counter()
        blocks = [block for future in futures for block in future.result()]
        elapsed = time.perf_counter() - start
    numbers = sorted(n for block in blocks for n in block.numbers())
    if numbers != list(range(1, len(numbers) + 1)):
        raise AssertionError(f"{variant.name}: numbers shared or skipped")
    return Run(len(numbers), len(blocks), elapsed)


def variants(servers: Servers, *, block: int, budget_s: float) -> list[Variant]:
    project = f"bench-{uuid.uuid4().hex[:8]}"
    prefix = f"bench-{uuid.uuid4().hex[:8]}:"

    def increment() -> SequenceCounter:
        return FirestoreSequenceCounter(firestore.Client(project=project))

    def transaction() -> SequenceCounter:
        return FirestoreTransactionCounter(firestore.Client(project=project))

    def redis() -> SequenceCounter:
        return RedisSequenceCounter.from_url(servers.redis_url, prefix=prefix)

    return [
        Variant("firestore_increment", increment, 1, 4_000, budget_s),
        Variant("firestore_block", increment, block, 100_000, budget_s),
        Variant(BASELINE, transaction, 1, 4_000, budget_s),
        Variant("redis_incrby", redis, 1, 20_000, budget_s),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--block", type=int, default=50, help="numbers per block reservation")
    parser.add_argument("--budget", type=float, default=20.0, help="seconds per variant, at most")
    args = parser.parse_args()
    with local_servers() as servers:
        runs: dict[str, Run] = {}
        for variant in variants(servers, block=args.block, budget_s=args.budget):
            runs[variant.name] = run = run_variant(variant)
            print(
                f"{variant.name:<22} {run.numbers:>7} numbers in {run.reservations:>6} "
                f"reservations, {run.elapsed_s:5.1f} s: {run.numbers_per_s:>9.1f} numbers/s"
            )
    base = runs[BASELINE].numbers_per_s
    ratios = {name: round(run.numbers_per_s / base, 1) for name, run in runs.items()}
    path = write_result(
        "fifo_sequencer",
        {
            "publishers": PUBLISHERS,
            "groups": 1,
            "block_size": args.block,
            "budget_s_per_variant": args.budget,
            "runs": {
                name: {
                    "numbers": run.numbers,
                    "reservations": run.reservations,
                    "elapsed_s": round(run.elapsed_s, 2),
                    "numbers_per_s": round(run.numbers_per_s, 1),
                }
                for name, run in runs.items()
            },
            "ratio_to_transaction_baseline": ratios,
            "target": {"firestore_increment": TARGET_RATIO, "firestore_block": TARGET_RATIO},
            "every_run_covered_1_to_n_exactly_once": True,
        },
    )
    print(f"ratios to the transaction baseline: {ratios}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
