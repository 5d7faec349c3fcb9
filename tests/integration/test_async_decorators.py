"""``@idempotent`` above an ``async def``, against the real parts:

* an async CloudEvent function served by functions-framework's ASGI app
  (``functions_framework.aio``) on a real redis-server through the async Redis store: a
  duplicate is not run again and gets the stored result, a key held elsewhere is a 503 without
  an ERROR traceback, a handler error is a 500 and runs again on the redelivery;
* an async google-cloud-pubsub callback on the Pub/Sub emulator: a FIFO group sent out of
  order with a duplicate reaches the callback in order, once each, on one event loop thread
  owned by the decorated callback (stopped by ``close()``).
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import functions_framework.aio
import pytest
from cloudevents.http import CloudEvent
from functions_framework import _function_registry
from google.cloud import pubsub_v1

from pubsub_toolkit import Settings, idempotent
from pubsub_toolkit_local.topology import Topology, create_topology
from tests.integration.test_decorators import ce_headers, cloud_event
from tests.support.asgi import post_json
from tests.support.waiting import wait_until

FUNCTION_SOURCE = """
import asyncio
import functions_framework.aio
from pubsub_toolkit import idempotent

RUNS = []
STATE = {}  # "hold", "running": asyncio.Events the test makes on its loop; "fail_next"

@idempotent(consumer=CONSUMER)
@functions_framework.aio.cloud_event
async def charge_async(cloud_event):
    if "running" in STATE:
        STATE["running"].set()
    if "hold" in STATE:
        await STATE["hold"].wait()
    if STATE.pop("fail_next", False):
        raise RuntimeError("payment service unavailable")
    await asyncio.sleep(0)  # awaited I/O
    order = cloud_event.data["message"].get("attributes", {}).get("order")
    RUNS.append(order)
    return f"charged {order}"
"""


@pytest.fixture
def topology(pubsub_emulator: str, project_id: str) -> Topology:
    return create_topology(project_id)


@pytest.fixture
def env(topology: Topology, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    values = {
        "GOOGLE_CLOUD_PROJECT": topology.project,
        "PUBSUB_TOOLKIT_FINAL_TOPIC": "final",
        "PUBSUB_TOOLKIT_DEAD_LETTER_TOPIC": "dead-letter",
        "PUBSUB_TOOLKIT_STORE_BACKEND": "redis",
        "PUBSUB_TOOLKIT_REDIS_URL": redis_url,
        "PUBSUB_TOOLKIT_DEDUP_LEASE_SECONDS": "60",
    }
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    return values


@pytest.fixture
def asgi_function(
    env: dict[str, str], tmp_path: Path, project_id: str
) -> Iterator[tuple[Any, Any]]:
    name = f"async_charges_{project_id.replace('-', '_')}"
    source = tmp_path / f"{name}.py"
    source.write_text(FUNCTION_SOURCE.replace("CONSUMER", repr(f"charges-{project_id}")))
    app = functions_framework.aio.create_asgi_app(
        target="charge_async", source=str(source), signature_type="cloudevent"
    )
    yield app, sys.modules[name]
    sys.modules.pop(name, None)
    # functions-framework's registry is global: an ASGI name left there makes a later
    # create_app() of a Flask function with that name build an ASGI app.
    _function_registry.ASGI_FUNCTIONS.discard("charge_async")
    _function_registry.REGISTRY_MAP.pop("charge_async", None)


def test_async_cloud_event_duplicate_in_progress_and_error(
    asgi_function: tuple[Any, Any], caplog: pytest.LogCaptureFixture
) -> None:
    app, module = asgi_function

    async def post(event_id: str, key: str, order: str) -> int:
        attributes = {"dedup_key": key, "order": order}
        status, _ = await post_json(app, cloud_event(event_id, attributes), ce_headers(event_id))
        return status

    async def scenario() -> None:
        # A duplicate: acked without running, and the stored result for a direct call.
        assert await post("1", "order-1", "1") == 200
        assert await post("2", "order-1", "1") == 200
        assert module.RUNS == ["1"]
        event = CloudEvent(
            {"type": "google.cloud.pubsub.topic.v1.messagePublished", "source": "//test"},
            cloud_event("3", {"dedup_key": "order-1", "order": "1"}),
        )
        assert await module.charge_async(event) == "charged 1"
        assert module.RUNS == ["1"]

        # In progress elsewhere: a 503, without an ERROR traceback.
        module.STATE["hold"], module.STATE["running"] = asyncio.Event(), asyncio.Event()
        first = asyncio.create_task(post("4", "k", "a"))
        await asyncio.wait_for(module.STATE["running"].wait(), 30)  # it holds the key now
        with caplog.at_level(logging.INFO):
            assert await post("5", "k", "a") == 503
        assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
        module.STATE["hold"].set()
        assert await asyncio.wait_for(first, 30) == 200
        del module.STATE["hold"], module.STATE["running"]
        assert module.RUNS == ["1", "a"]

        # A handler error: 500 (redelivered), and the redelivery runs it.
        module.STATE["fail_next"] = True
        assert await post("6", "k2", "b") == 500
        assert await post("6", "k2", "b") == 200
        assert module.RUNS == ["1", "a", "b"]
        await module.charge_async.aclose()  # the async Redis client, on this loop

    asyncio.run(scenario())


class Recorded:
    """A received message whose ack/nack are also recorded (the delivery's answer)."""

    def __init__(self, received: Any, answers: list[str]) -> None:
        self._received, self._answers = received, answers

    def __getattr__(self, name: str) -> Any:
        return getattr(self._received, name)

    def ack(self) -> None:
        self._answers.append("ack")
        self._received.ack()

    def nack(self) -> None:
        self._answers.append("nack")
        self._received.nack()


def test_async_subscriber_callback_gets_a_fifo_group_in_order_once(
    env: dict[str, str], topology: Topology, project_id: str
) -> None:
    seen: list[tuple[str, str]] = []
    threads: set[int] = set()
    answers: list[str] = []

    async def callback(message: Any) -> None:  # an async callback
        threads.add(threading.get_ident())
        await asyncio.sleep(0.001)
        seen.append((message.attributes.get("fifo_seq", "-"), message.data.decode()))
        message.ack()

    guarded = idempotent(consumer=f"acb-{project_id}", settings=Settings.from_env(env))(callback)
    assert not asyncio.iscoroutinefunction(guarded)  # the client calls it on its threads
    publisher = pubsub_v1.PublisherClient()
    subscriber = pubsub_v1.SubscriberClient()
    subscription = f"projects/{project_id}/subscriptions/async-callback-sub"
    subscriber.create_subscription(name=subscription, topic=topology.final)
    for seq, text in ((3, "shipped"), (1, "created"), (2, "paid"), (2, "paid")):
        publisher.publish(
            topology.final, text.encode(), fifo_group="order-7", fifo_seq=str(seq),
            dedup_key=f"order-7-{seq}",
        ).result(timeout=10)  # fmt: skip
    publisher.publish(topology.final, b"hello", dedup_key="plain-1").result(10)
    future = subscriber.subscribe(subscription, callback=lambda m: guarded(Recorded(m, answers)))
    try:
        wait_until(
            lambda: answers.count("ack") >= 5 and len(seen) >= 4,
            timeout=60,
            what=f"five deliveries acked and four runs (seen {seen}, answers {answers})",
        )
    finally:
        future.cancel()
        future.result(timeout=30)
        guarded.close()
        subscriber.close()
    assert [step for seq, step in seen if seq != "-"] == ["created", "paid", "shipped"]
    assert [step for seq, step in seen if seq == "-"] == ["hello"]
    assert len(threads) == 1 and threading.get_ident() not in threads  # the guard's own loop
