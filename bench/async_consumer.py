"""Async vs threaded consumption: AsyncConsumer (one event loop) vs Consumer (a thread pool).

The same workload for both: N messages spread over 1, 16 and 64 FIFO groups (each group's
numbers in order), deduplicated and sequenced on the Redis backend (a real redis-server), and a
handler doing 5 ms of I/O - ``await asyncio.sleep(0.005)`` in the async variant,
``time.sleep(0.005)`` on a convoy thread in the threaded one. Both consumers run at concurrency
64 and are fed through their own delivery callbacks (``_on_message``) with stand-ins for the
client's received messages, so the figure is the consumer's - not the Pub/Sub emulator's (one
stream there delivers about 2k msg/s). Variants alternate round by round; the result is the
median of the per-round ratios async / threaded (>1: async consumes faster), plus a
machine-independent count: Redis commands per message for each variant.

    python -m bench.async_consumer [--messages 640] [--rounds 3] [--output DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import redis

from bench.common import median, write_result
from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.consumer.gate_async import AsyncFifoGate
from pubsub_toolkit.consumer.processor import MessageProcessor
from pubsub_toolkit.consumer.processor_async import AsyncMessageProcessor
from pubsub_toolkit.consumer.subscriber import Consumer
from pubsub_toolkit.consumer.subscriber_async import AsyncConsumer
from pubsub_toolkit.dedup.idempotent import IdempotentProcessor
from pubsub_toolkit.dedup.idempotent_async import AsyncIdempotentProcessor
from pubsub_toolkit.message import Message
from pubsub_toolkit.stores.dedup.redis import RedisDedupStore
from pubsub_toolkit.stores.dedup.redis_async import AsyncRedisDedupStore, connect_async
from pubsub_toolkit.stores.fifo_state.redis import RedisFifoStore
from pubsub_toolkit.stores.fifo_state.redis_async import AsyncRedisFifoStore
from pubsub_toolkit_local import emulators
from pubsub_toolkit_local.processes import ServiceGroup, free_port

GROUPS = (1, 16, 64)
CONCURRENCY = 64
IO_SECONDS = 0.005
LEASE, TTL = timedelta(seconds=60), timedelta(hours=1)


class Received:
    """A stand-in for google-cloud-pubsub's received message: ack/nack count to ``done``."""

    def __init__(self, i: int, group: str, seq: int, done: Any) -> None:
        self.data = f"{group}:{seq}".encode()
        self.attributes = {"fifo_group": group, "fifo_seq": str(seq), "dedup_key": f"{i}"}
        self.message_id, self.publish_time, self.ordering_key = str(i), None, ""
        self._done = done

    def ack(self) -> None:
        self._done("ack")

    def nack(self) -> None:
        self._done("nack")


def workload(messages: int, groups: int, done: Any) -> list[Received]:
    """``messages`` deliveries, round-robin over ``groups`` groups, each group in order."""
    return [Received(i, f"g{i % groups}", i // groups + 1, done) for i in range(messages)]


def commands(client: redis.Redis) -> int:
    return int(client.info("stats")["total_commands_processed"])


def run_threaded(url: str, messages: int, groups: int) -> tuple[float, int]:
    prefix = f"bench-{uuid.uuid4().hex[:8]}:"
    client = redis.Redis.from_url(url)
    handler = lambda message: time.sleep(IO_SECONDS)  # noqa: E731 - 5 ms of blocking I/O
    gate = FifoGate(RedisFifoStore(client, prefix=prefix + "f:"), consumer="c", handler=handler)
    dedup = IdempotentProcessor(
        RedisDedupStore(client, prefix=prefix + "d:"), namespace="c", lease=LEASE, ttl=TTL
    )
    processor = MessageProcessor(handler=handler, dedup=dedup, gate=gate)
    consumer = Consumer("bench", processor, concurrency=CONCURRENCY)
    answered: list[str] = []
    finished = threading.Event()
    lock = threading.Lock()

    def done(outcome: str) -> None:
        with lock:
            answered.append(outcome)
            if len(answered) == messages:
                finished.set()

    batch = workload(messages, groups, done)
    before = commands(client)
    start = time.perf_counter()
    for received in batch:
        consumer._on_message(received)
    finished.wait(timeout=600)
    elapsed = time.perf_counter() - start
    used = commands(client) - before
    consumer._dispatcher.close(timeout=10)
    assert answered.count("ack") == messages, answered[:5]
    client.close()
    return messages / elapsed, used


def run_async(url: str, messages: int, groups: int) -> tuple[float, int]:
    prefix = f"bench-{uuid.uuid4().hex[:8]}:"
    sync_client = redis.Redis.from_url(url)

    async def main() -> tuple[float, int]:
        client = connect_async(url, needed_by="the benchmark")

        async def handler(message: Message) -> None:
            await asyncio.sleep(IO_SECONDS)  # 5 ms of awaited I/O

        gate = AsyncFifoGate(
            AsyncRedisFifoStore(client, prefix=prefix + "f:"), consumer="c", handler=handler
        )
        dedup = AsyncIdempotentProcessor(
            AsyncRedisDedupStore(client, prefix=prefix + "d:"), namespace="c", lease=LEASE, ttl=TTL
        )
        processor = AsyncMessageProcessor(handler=handler, dedup=dedup, gate=gate)
        consumer = AsyncConsumer("bench", processor, concurrency=CONCURRENCY)
        consumer._loop = asyncio.get_running_loop()  # fed directly: no stream to open
        consumer._slots = asyncio.Semaphore(CONCURRENCY)
        answered: list[str] = []
        finished = asyncio.Event()

        def done(outcome: str) -> None:
            answered.append(outcome)
            if len(answered) == messages:
                finished.set()

        batch = workload(messages, groups, done)
        before = commands(sync_client)
        start = time.perf_counter()
        for received in batch:
            consumer._accept(received)  # what _on_message schedules on the loop
        await asyncio.wait_for(finished.wait(), timeout=600)
        elapsed = time.perf_counter() - start
        used = commands(sync_client) - before
        assert answered.count("ack") == messages, answered[:5]
        await client.aclose()
        return messages / elapsed, used

    try:
        return asyncio.run(main())
    finally:
        sync_client.close()


def bench(url: str, messages: int, rounds: int) -> dict[str, object]:
    results: dict[str, object] = {}
    for groups in GROUPS:
        ratios: list[float] = []
        rates: dict[str, list[float]] = {"async": [], "threaded": []}
        per_message: dict[str, list[float]] = {"async": [], "threaded": []}
        for round_ in range(rounds):
            order = ("async", "threaded") if round_ % 2 == 0 else ("threaded", "async")
            this: dict[str, float] = {}
            for variant in order:
                run = run_async if variant == "async" else run_threaded
                rate, used = run(url, messages, groups)
                this[variant] = rate
                rates[variant].append(rate)
                per_message[variant].append(used / messages)
            ratios.append(this["async"] / this["threaded"])
        results[str(groups)] = {
            "async_over_threaded": round(median(ratios), 3),
            "round_ratios": [round(r, 3) for r in ratios],
            "msgs_per_s": {v: round(median(r), 1) for v, r in rates.items()},
            "redis_commands_per_message": {v: round(median(c), 2) for v, c in per_message.items()},
        }
        print(f"{groups:>2} groups: async/threaded = {median(ratios):.2f} {results[str(groups)]}")
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=640)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-write", action="store_true", help="print only (smoke runs)")
    parser.add_argument("--redis-url", help="use this redis-server instead of starting one")
    parser.add_argument("--output", type=Path, help="write the JSON here (default bench/results)")
    args = parser.parse_args(argv)
    if args.redis_url:
        results = bench(args.redis_url, args.messages, args.rounds)
    else:
        with ServiceGroup(Path(tempfile.mkdtemp(prefix="bench-async-"))) as group:
            port = free_port()
            group.start(emulators.redis_server(port))
            results = bench(f"redis://127.0.0.1:{port}/0", args.messages, args.rounds)
    payload = {
        "workload": {
            "messages": args.messages,
            "groups": list(GROUPS),
            "concurrency": CONCURRENCY,
            "handler_io_ms": IO_SECONDS * 1000,
            "backend": "redis",
        },
        "results": results,
    }
    if not args.no_write:
        print(f"wrote {write_result('async_consumer', payload, args.output)}")


if __name__ == "__main__":
    main()
