"""16 threads deliver the same message at once, for 100 keys, on every backend: one effect each."""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest

from pubsub_toolkit.dedup.idempotent import IdempotentProcessor, Outcome
from pubsub_toolkit.errors import ClaimInProgressError
from tests.support.stores import BACKENDS, store_factory
from tests.support.waiting import wait_until

THREADS = 16
KEYS = 100


@pytest.mark.parametrize("shared_store", [False, True], ids=["store-per-worker", "shared-store"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_sixteen_concurrent_deliveries_run_each_effect_once(
    request: pytest.FixtureRequest, backend: str, shared_store: bool
) -> None:
    """Per worker: 16 instances. Shared: 16 threads of one instance, whose store coalesces
    their round trips - same-key operations must still never share a batch."""
    make = store_factory(request, backend)
    one_store = make()
    effects: Counter[str] = Counter()
    outcomes: Counter[Outcome] = Counter()
    lock = threading.Lock()
    barrier = threading.Barrier(THREADS)
    # Each worker has its own store object (its own connection), as separate instances would.
    processors = [
        IdempotentProcessor(
            one_store if shared_store else make(),
            namespace="consumer",
            lease=timedelta(seconds=30),
            ttl=timedelta(hours=1),
        )
        for _ in range(THREADS)
    ]

    def effect(key: str) -> str:
        with lock:
            effects[key] += 1
        return f"done:{key}"

    def deliver(processor: IdempotentProcessor, key: str) -> Outcome:
        def attempt() -> Outcome | None:
            try:
                result = processor.process(key, "fp", lambda: effect(key))
            except ClaimInProgressError:
                return None  # Pub/Sub would redeliver: try again
            assert result.result == f"done:{key}"
            return result.outcome

        return wait_until(attempt, timeout=30, interval=0.01, what=f"{key} to settle")

    def worker(index: int) -> None:
        for k in range(KEYS):
            barrier.wait(timeout=60)  # all 16 deliver key k at the same instant
            outcome = deliver(processors[index], f"key-{k}")
            with lock:
                outcomes[outcome] += 1

    with ThreadPoolExecutor(THREADS) as pool:
        for future in [pool.submit(worker, i) for i in range(THREADS)]:
            future.result()

    assert len(effects) == KEYS
    assert set(effects.values()) == {1}, {k: v for k, v in effects.items() if v != 1}
    assert outcomes[Outcome.PROCESSED] == KEYS
    assert outcomes[Outcome.DUPLICATE] == KEYS * (THREADS - 1)
