"""AsyncIdempotentProcessor on the async stores (redis.asyncio on redis-server, Firestore's
AsyncClient on the emulator, memory): the sync processor's semantics with ``async def``
effects - duplicate, mismatch, in progress, release after failure, witness, and concurrency on
one loop."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.dedup.idempotent import Outcome
from pubsub_toolkit.dedup.idempotent_async import AsyncIdempotentProcessor
from pubsub_toolkit.errors import ClaimInProgressError
from tests.support.async_stores import ASYNC_BACKENDS, async_dedup_factory, loop

__all__ = ["loop"]

LEASE = timedelta(seconds=30)
TTL = timedelta(hours=1)


@pytest.fixture(params=ASYNC_BACKENDS)
def make_processor(request: pytest.FixtureRequest) -> Any:
    make = async_dedup_factory(request, request.param)

    def processor(clock: Any = None, namespace: str = "ns") -> AsyncIdempotentProcessor:
        clock = clock or ManualClock()
        return AsyncIdempotentProcessor(
            make(clock=clock), namespace=namespace, lease=LEASE, ttl=TTL, clock=clock
        )

    return processor


def test_duplicate_returns_the_stored_result_without_running(
    make_processor: Any, loop: asyncio.AbstractEventLoop
) -> None:
    processor = make_processor()
    runs: list[str] = []

    async def effect() -> str:
        await asyncio.sleep(0)  # a real suspension inside the effect
        runs.append("ran")
        return "charged-42"

    first = loop.run_until_complete(processor.process("k", "fp", effect))
    again = loop.run_until_complete(processor.process("k", "fp", effect))
    assert (first.outcome, first.result) == (Outcome.PROCESSED, "charged-42")
    assert (again.outcome, again.result, runs) == (Outcome.DUPLICATE, "charged-42", ["ran"])
    # A second worker (its own processor, no witness) finds it done in the store.
    other = loop.run_until_complete(make_processor().process("k", "fp", effect))
    assert (other.outcome, other.result, runs) == (Outcome.DUPLICATE, "charged-42", ["ran"])


def test_same_key_other_content_is_a_mismatch(
    make_processor: Any, loop: asyncio.AbstractEventLoop
) -> None:
    processor = make_processor()

    async def effect() -> None:
        return None

    loop.run_until_complete(processor.process("k", "fp-1", effect))
    mismatch = loop.run_until_complete(processor.process("k", "fp-2", effect))
    assert mismatch.outcome is Outcome.MISMATCH


def test_a_live_claim_elsewhere_is_in_progress(
    make_processor: Any, loop: asyncio.AbstractEventLoop
) -> None:
    clock = ManualClock()
    first, second = make_processor(clock), make_processor(clock)
    started, finish = asyncio.Event(), asyncio.Event()

    async def slow() -> str:
        started.set()
        await finish.wait()
        return "done"

    async def scenario() -> tuple[Any, BaseException | None, Any]:
        running = asyncio.ensure_future(first.process("k", "fp", slow))
        await started.wait()
        try:
            await second.process("k", "fp", slow)
            error = None
        except ClaimInProgressError as exc:
            error = exc
        finish.set()
        done = await running
        return done, error, await second.process("k", "fp", slow)

    done, error, after = loop.run_until_complete(scenario())
    assert done.outcome is Outcome.PROCESSED
    assert isinstance(error, ClaimInProgressError)
    assert (after.outcome, after.result) == (Outcome.DUPLICATE, "done")


def test_a_failing_effect_releases_the_claim_for_the_redelivery(
    make_processor: Any, loop: asyncio.AbstractEventLoop
) -> None:
    processor = make_processor()
    attempts: list[int] = []

    async def flaky() -> str:
        attempts.append(1)
        await asyncio.sleep(0)
        if len(attempts) == 1:
            raise RuntimeError("downstream 500")
        return "ok"

    with pytest.raises(RuntimeError, match="downstream 500"):
        loop.run_until_complete(processor.process("k", "fp", flaky))
    # Released: a second worker runs it at once (no lease to wait out).
    retried = loop.run_until_complete(make_processor().process("k", "fp", flaky))
    assert (retried.outcome, retried.result, len(attempts)) == (Outcome.PROCESSED, "ok", 2)


def test_many_keys_run_concurrently_on_one_loop(
    make_processor: Any, loop: asyncio.AbstractEventLoop
) -> None:
    processor = make_processor()
    running = 0
    peak = 0
    gate = asyncio.Event()

    async def effect() -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        if running == 8:
            gate.set()
        await gate.wait()  # only returns once all 8 are inside their effects at once
        running -= 1

    async def scenario() -> list[Any]:
        work = [processor.process(f"k{i}", "fp", effect) for i in range(8)]
        return await asyncio.wait_for(asyncio.gather(*work), timeout=20)

    results = loop.run_until_complete(scenario())
    assert peak == 8
    assert {r.outcome for r in results} == {Outcome.PROCESSED}


def test_a_done_record_the_store_lost_is_not_run_again(loop: asyncio.AbstractEventLoop) -> None:
    from pubsub_toolkit.stores.dedup.memory import AsyncMemoryDedupStore

    clock = ManualClock()
    store = AsyncMemoryDedupStore(clock)
    processor = AsyncIdempotentProcessor(store, namespace="c", lease=LEASE, ttl=TTL, clock=clock)
    runs: list[str] = []

    async def effect() -> str:
        runs.append("x")
        return "r"

    loop.run_until_complete(processor.process("k", "fp", effect))
    store.sync._records.clear()  # the data loss
    again = loop.run_until_complete(processor.process("k", "fp", effect))
    assert (again.outcome, again.result, runs) == (Outcome.DUPLICATE, "r", ["x"])
