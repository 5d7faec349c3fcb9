"""``AsyncIdempotentProcessor.sibling`` takes what ``IdempotentProcessor.sibling`` takes: the
async twin had lost the ``ttl`` that ingress's release records need (issue 26)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.dedup.idempotent_async import AsyncIdempotentProcessor
from pubsub_toolkit.stores.dedup.memory import AsyncMemoryDedupStore


def test_an_async_sibling_keeps_its_records_as_long_as_it_is_told() -> None:
    clock = ManualClock(datetime(2030, 1, 1, tzinfo=UTC))
    processor = AsyncIdempotentProcessor(
        AsyncMemoryDedupStore(clock),
        namespace="orders",
        lease=timedelta(seconds=60),
        ttl=timedelta(days=8),
        clock=clock,
    )
    sibling = processor.sibling("orders-released", ttl=timedelta(days=30))
    assert sibling.namespace == "orders-released"
    assert sibling._ttl == timedelta(days=30)
    assert processor.sibling("orders-rejected")._ttl == timedelta(days=8)
