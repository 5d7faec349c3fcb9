"""``Consumer.result()`` / ``await AsyncConsumer.result()`` on the Pub/Sub emulator: a consumer
on a missing subscription raises NotFound (and logs it at ERROR) instead of idling for ever; a
stopped one returns; the README's consumer pattern ends on both, and on SIGTERM.

Each test has its own project, so its subscription is fresh (a stopped streaming pull leaves the
emulator's subscription stuck)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import threading
from datetime import timedelta
from typing import Any

import pytest
from google.api_core.exceptions import NotFound
from google.cloud import pubsub_v1

from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.consumer.gate_async import AsyncFifoGate
from pubsub_toolkit.consumer.processor import MessageProcessor
from pubsub_toolkit.consumer.processor_async import AsyncMessageProcessor
from pubsub_toolkit.consumer.subscriber import Consumer
from pubsub_toolkit.consumer.subscriber_async import AsyncConsumer
from pubsub_toolkit.dedup.idempotent import IdempotentProcessor
from pubsub_toolkit.dedup.idempotent_async import AsyncIdempotentProcessor
from pubsub_toolkit.message import Message
from pubsub_toolkit.stores.dedup.memory import AsyncMemoryDedupStore, MemoryDedupStore
from pubsub_toolkit.stores.fifo_state.memory import AsyncMemoryFifoStore, MemoryFifoStore
from tests.conftest import repo_root
from tests.docs.test_readme_snippets import snippet
from tests.support.waiting import wait_until

TTL = timedelta(hours=1)


def _processor() -> MessageProcessor:
    dedup = IdempotentProcessor(MemoryDedupStore(), namespace="c", lease=TTL, ttl=TTL)
    gate = FifoGate(MemoryFifoStore(), consumer="c", handler=print)
    return MessageProcessor(handler=print, dedup=dedup, gate=gate)


def _fatal(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_consumer_on_a_missing_subscription_raises_not_found_from_result(
    pubsub_emulator: str, project_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    missing = f"projects/{project_id}/subscriptions/missing"
    caplog.set_level(logging.ERROR)
    with pytest.raises(NotFound), Consumer(missing, _processor()) as consumer:
        consumer.result(timeout=60)
    assert consumer.stream_error() is not None
    assert any("NotFound" in line and missing in line for line in _fatal(caplog))


def test_result_returns_once_the_consumer_is_stopped(pubsub_emulator: str, project_id: str) -> None:
    publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    topic = publisher.create_topic(name=f"projects/{project_id}/topics/final").name
    name = f"projects/{project_id}/subscriptions/final-sub"
    subscriber.create_subscription(request={"name": name, "topic": topic})
    subscriber.close()
    consumer = Consumer(name, _processor())
    with pytest.raises(RuntimeError):
        consumer.result(timeout=1)  # not started: nothing to wait for
    consumer.start()
    with pytest.raises(TimeoutError):
        consumer.result(timeout=0.5)  # running
    stopper = threading.Thread(target=consumer.stop)
    stopper.start()
    consumer.result(timeout=60)  # returns: stopped cleanly
    stopper.join(timeout=60)
    assert consumer.stop() is True  # a second stop (leaving `with`) answers the first's answer
    assert consumer.stream_error() is None


def _readme_consumer(project: str, subscription: str, redis_url: str) -> str:
    return (
        snippet("fifo-consumer")
        .replace('project="P"', f'project="{project}"')
        .replace("projects/P/subscriptions/final-sub", subscription)
        .replace("redis://10.0.0.3:6379/0", redis_url)
    )


def test_the_readme_consumer_pattern_ends_on_a_missing_subscription(
    pubsub_emulator: str, project_id: str, redis_url: str
) -> None:
    code = _readme_consumer(project_id, f"projects/{project_id}/subscriptions/missing", redis_url)
    before = signal.getsignal(signal.SIGTERM)
    namespace: dict[str, Any] = {"handle": print}
    try:
        with pytest.raises(NotFound):
            exec(compile(code, "README.md", "exec"), namespace)
    finally:
        signal.signal(signal.SIGTERM, before)


def test_the_readme_consumer_pattern_stops_gracefully_on_sigterm(
    pubsub_emulator: str, project_id: str, redis_url: str
) -> None:
    publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    topic = publisher.create_topic(name=f"projects/{project_id}/topics/final").name
    name = f"projects/{project_id}/subscriptions/final-sub"
    subscriber.create_subscription(request={"name": name, "topic": topic})
    subscriber.close()
    publisher.publish(topic, b"one", dedup_key=f"{project_id}-1").result(timeout=30)
    code = "def handle(message):\n    print('handled', message.data.decode(), flush=True)\n\n"
    code += _readme_consumer(project_id, name, redis_url)
    code += "\nprint('ended', flush=True)\n"
    root = repo_root()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root / "shared"), str(root / "local"), str(root)]),
    }
    with subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env, cwd=root
    ) as worker:
        assert worker.stdout is not None
        try:
            assert worker.stdout.readline().strip() == "handled one"
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(timeout=60) == 0
        finally:
            if worker.poll() is None:
                worker.kill()
        assert worker.stdout.read().strip() == "ended"


def test_the_async_consumer_raises_not_found_from_its_awaited_result(
    pubsub_emulator: str, project_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    missing = f"projects/{project_id}/subscriptions/missing"
    caplog.set_level(logging.ERROR)

    async def handler(message: Message) -> None:
        print(message)

    async def main() -> BaseException | None:
        dedup = AsyncIdempotentProcessor(AsyncMemoryDedupStore(), namespace="c", lease=TTL, ttl=TTL)
        gate = AsyncFifoGate(AsyncMemoryFifoStore(), consumer="c", handler=handler)
        consumer = AsyncConsumer(
            missing, AsyncMessageProcessor(handler=handler, dedup=dedup, gate=gate)
        )
        async with consumer:
            with pytest.raises(NotFound):
                await consumer.result(timeout=60)
        return consumer.stream_error()

    assert isinstance(asyncio.run(main()), NotFound)
    assert any("NotFound" in line and missing in line for line in _fatal(caplog))


def test_consumer_with_an_async_handler_raises_not_found_from_result(
    pubsub_emulator: str, project_id: str
) -> None:
    """The ordinary Consumer running an async processor on its own loop: the same result()."""
    missing = f"projects/{project_id}/subscriptions/missing"

    async def handler(message: Message) -> None:
        print(message)

    dedup = AsyncIdempotentProcessor(AsyncMemoryDedupStore(), namespace="c", lease=TTL, ttl=TTL)
    gate = AsyncFifoGate(AsyncMemoryFifoStore(), consumer="c", handler=handler)
    processor = AsyncMessageProcessor(handler=handler, dedup=dedup, gate=gate)
    with pytest.raises(NotFound), Consumer(missing, processor) as consumer:
        wait_until(lambda: consumer.stream_error() is not None, timeout=60, what="the 404")
        consumer.result(timeout=60)
