"""``@idempotent`` on the two kinds of code users already have, against the real parts.

* a functions-framework CloudEvent function, served by functions-framework's test client, on a
  real redis-server: duplicate (not run again, stored result returned), in progress (503, a
  quiet redelivery), handler error (500, run again on redelivery), missing key;
* a google-cloud-pubsub streaming-pull callback on the Pub/Sub emulator: a FIFO group sent out
  of order with a duplicate arrives at the callback in order, once each, and ``nack()`` from
  the callback gets the message delivered again.
"""

from __future__ import annotations

import random
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import functions_framework
import pytest
from cloudevents.http import CloudEvent
from google.cloud import pubsub_v1

from pubsub_toolkit import Settings, idempotent
from pubsub_toolkit import attributes as attr
from pubsub_toolkit_local.topology import Topology, create_topology, drain

FUNCTION_SOURCE = """
import threading
import functions_framework
from pubsub_toolkit import idempotent

RUNS = []
HOLD = threading.Event()
HOLD.set()
RUNNING = threading.Event()
FAIL_NEXT = []

@idempotent(consumer="charges")
@functions_framework.cloud_event
def charge(cloud_event):
    RUNNING.set()
    HOLD.wait(30)
    if FAIL_NEXT:
        FAIL_NEXT.pop()
        raise RuntimeError("payment service unavailable")
    attributes = cloud_event.data["message"].get("attributes", {})
    RUNS.append(attributes.get("order"))
    return f"charged {attributes.get('order')}"
"""


def cloud_event(message_id: str, attributes: dict[str, str]) -> dict[str, Any]:
    return {
        "message": {"data": "aGk=", "attributes": attributes, "messageId": message_id},
        "subscription": "projects/p/subscriptions/s",
    }


def ce_headers(event_id: str) -> dict[str, str]:
    return {
        "ce-specversion": "1.0",
        "ce-type": "google.cloud.pubsub.topic.v1.messagePublished",
        "ce-source": "//pubsub.googleapis.com/projects/p/topics/origin",
        "ce-id": event_id,
        "Content-Type": "application/json",
    }


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
def function(env: dict[str, str], tmp_path: Path, project_id: str) -> Iterator[tuple[Any, Any]]:
    # A module name of its own per test: each test gets fresh RUNS and a fresh processor.
    name = f"charges_{project_id.replace('-', '_')}"
    source = tmp_path / f"{name}.py"
    source.write_text(FUNCTION_SOURCE)
    app = functions_framework.create_app(
        target="charge", source=str(source), signature_type="cloudevent"
    )
    yield app.test_client(), sys.modules[name]  # functions-framework names it by its file
    sys.modules.pop(name, None)


def post(client: Any, event_id: str, attributes: dict[str, str]) -> int:
    response = client.post(
        "/", json=cloud_event(event_id, attributes), headers=ce_headers(event_id)
    )
    return int(response.status_code)


def test_duplicate_is_acked_without_running_and_returns_the_stored_result(
    function: tuple[Any, Any],
) -> None:
    client, module = function
    assert post(client, "1", {"dedup_key": "order-1", "order": "1"}) == 200
    assert post(client, "2", {"dedup_key": "order-1", "order": "1"}) == 200  # a re-publish
    assert post(client, "1", {"dedup_key": "order-1", "order": "1"}) == 200  # a redelivery
    assert module.RUNS == ["1"]
    # Called directly, a duplicate returns what the first run returned.
    event = CloudEvent(
        {"type": "google.cloud.pubsub.topic.v1.messagePublished", "source": "//test"},
        cloud_event("3", {"dedup_key": "order-1", "order": "1"}),
    )
    assert module.charge(event) == "charged 1"
    assert module.RUNS == ["1"]


def test_in_progress_is_a_quiet_503_and_an_error_is_run_again(function: tuple[Any, Any]) -> None:
    client, module = function
    module.HOLD.clear()
    module.RUNNING.clear()
    first: dict[str, int] = {}
    worker = threading.Thread(
        target=lambda: first.setdefault(
            "status", post(client, "1", {"dedup_key": "k", "order": "a"})
        )
    )
    worker.start()
    assert module.RUNNING.wait(30), "the first delivery never started"
    assert post(client, "2", {"dedup_key": "k", "order": "a"}) == 503  # held elsewhere
    module.HOLD.set()
    worker.join(30)
    assert first == {"status": 200}
    assert module.RUNS == ["a"]

    module.FAIL_NEXT.append(True)
    assert post(client, "3", {"dedup_key": "k2", "order": "b"}) == 500  # redelivered
    assert post(client, "3", {"dedup_key": "k2", "order": "b"}) == 200  # runs again: released
    assert module.RUNS == ["a", "b"]


def test_a_message_without_any_key_is_dead_lettered_not_run(
    function: tuple[Any, Any], topology: Topology
) -> None:
    client, module = function
    # No dedup_key and no message id (a hand-made event): never run unguarded.
    response = client.post(
        "/",
        json={"message": {"data": "aGk=", "attributes": {"order": "x"}}, "subscription": "s"},
        headers=ce_headers("no-id"),
    )
    assert response.status_code == 200
    assert module.RUNS == []
    [dead] = drain(topology.dead_letter_sub, expected=1, quiet=1)
    assert dead.attributes["error_reason"] == attr.REASON_INVALID_DEDUP_KEY


@pytest.mark.parametrize("blank", ["", "   "])
def test_a_blank_dedup_key_is_dead_lettered_as_at_ingress_not_run(
    function: tuple[Any, Any], topology: Topology, blank: str
) -> None:
    """Present but blank is a contract violation (ingress refuses it too), not "no key": it is
    neither run under the blank key nor quietly keyed by the message id."""
    client, module = function
    for event_id in ("1", "2"):  # two different messages with the same blank key
        assert post(client, event_id, {"dedup_key": blank, "order": event_id}) == 200
    assert module.RUNS == []
    dead = drain(topology.dead_letter_sub, expected=2, quiet=1)
    assert [d.attributes["error_reason"] for d in dead] == [attr.REASON_INVALID_DEDUP_KEY] * 2


def test_with_on_missing_key_run_a_blank_key_counts_as_missing(
    env: dict[str, str], tmp_path: Path, project_id: str
) -> None:
    """The lenient choice: no key means the message id, and a blank key is no key."""
    name = f"lenient_{project_id.replace('-', '_')}"
    source = tmp_path / f"{name}.py"
    source.write_text(
        FUNCTION_SOURCE.replace(
            '@idempotent(consumer="charges")',
            f'@idempotent(consumer="lenient-{project_id}", on_missing_key="run")',
        )
    )
    app = functions_framework.create_app(
        target="charge", source=str(source), signature_type="cloudevent"
    )
    try:
        client, module = app.test_client(), sys.modules[name]
        for event_id in ("1", "1", "2"):  # a redelivery of "1", then another message
            assert post(client, event_id, {"dedup_key": "  ", "order": event_id}) == 200
        assert module.RUNS == ["1", "2"]  # keyed by the message id: once each
    finally:
        sys.modules.pop(name, None)


def test_subscriber_callback_gets_a_fifo_group_in_order_once_and_can_nack(
    env: dict[str, str], topology: Topology, project_id: str
) -> None:
    seen: list[tuple[str, str]] = []
    nacked: list[str] = []
    done = threading.Event()

    def callback(message: Any) -> None:  # the user's existing callback, unchanged
        if message.attributes.get("nack_once") and message.dedup_key not in nacked:
            nacked.append(message.dedup_key)
            message.nack()
        seen.append((message.attributes.get("fifo_seq", "-"), message.data.decode()))
        message.ack()
        if len(seen) >= 4:
            done.set()

    settings = Settings.from_env(env)
    guarded = idempotent(consumer=f"cb-{project_id}", settings=settings)(callback)
    publisher = pubsub_v1.PublisherClient()
    subscriber = pubsub_v1.SubscriberClient()
    subscription = f"projects/{project_id}/subscriptions/callback-sub"
    subscriber.create_subscription(name=subscription, topic=topology.final)
    # A group numbered by its producer, arriving 3, 1, 2, with 2 sent twice; a plain message
    # that the callback nacks once.
    for seq, text in ((3, "shipped"), (1, "created"), (2, "paid"), (2, "paid")):
        publisher.publish(
            topology.final, text.encode(), fifo_group="order-7", fifo_seq=str(seq),
            dedup_key=f"order-7-{seq}",
        ).result(timeout=10)  # fmt: skip
    publisher.publish(topology.final, b"hello", dedup_key="plain-1", nack_once="1").result(10)
    future = subscriber.subscribe(subscription, callback=guarded)
    try:
        assert done.wait(60), f"only {seen} arrived"
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline and len(seen) < 5:
            time.sleep(0.1)  # a quiet period: an extra (duplicate) delivery would show up here
    finally:
        future.cancel()
        future.result(timeout=30)
        guarded.close()
        subscriber.close()
    group = [step for seq, step in seen if seq != "-"]
    assert group == ["created", "paid", "shipped"]
    assert [step for seq, step in seen if seq == "-"] == ["hello"]
    assert nacked == ["plain-1"]


def test_concurrent_callbacks_of_one_group_raise_no_false_store_rollback(
    env: dict[str, str],
    topology: Topology,
    project_id: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Ten groups of ten, shuffled, on the client's callback threads over a healthy
    redis-server: in order, once each, and not one "the store lost writes" ALERT - two
    callbacks of one group used to read the state while the other wrote it (1-6 false ALERTs
    per run of this workload before the fix)."""
    groups, per_group = 10, 10
    seen: dict[str, list[int]] = {}
    lock = threading.Lock()
    done = threading.Event()

    def callback(message: Any) -> None:
        time.sleep(0.01)  # some work, so callbacks of one group overlap
        with lock:
            group = message.attributes["fifo_group"]
            seen.setdefault(group, []).append(int(message.attributes["fifo_seq"]))
            if sum(map(len, seen.values())) == groups * per_group:
                done.set()

    guarded = idempotent(consumer=f"race-{project_id}", settings=Settings.from_env(env))(callback)
    publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    subscription = f"projects/{project_id}/subscriptions/race-sub"
    subscriber.create_subscription(name=subscription, topic=topology.final)
    numbers = [(f"g{g}", seq) for g in range(groups) for seq in range(1, per_group + 1)]
    random.Random(7).shuffle(numbers)
    for future in [
        publisher.publish(
            topology.final, f"{group}#{seq}".encode(), fifo_group=group, fifo_seq=str(seq),
            dedup_key=f"{group}-{seq}",
        )
        for group, seq in numbers
    ]:  # fmt: skip
        future.result(timeout=30)
    stream = subscriber.subscribe(subscription, callback=guarded)
    try:
        assert done.wait(90), f"only {sum(map(len, seen.values()))} handled"
    finally:
        stream.cancel()
        stream.result(timeout=30)
        guarded.close()
        subscriber.close()
    assert seen == {f"g{g}": list(range(1, per_group + 1)) for g in range(groups)}
    rollbacks = [r for r in caplog.records if "store_rollback" in str(getattr(r, "decision", ""))]
    assert rollbacks == []


def test_a_missing_setting_is_said_once_and_the_message_comes_back_later_not_in_a_loop(
    env: dict[str, str],
    topology: Topology,
    project_id: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """PUBSUB_TOOLKIT_FINAL_TOPIC unset: no delivery can be handled until the process restarts with
    it. The error names the variable once, and the message is held back a minute - a nack would
    bring it back at once, in a loop (a new user's first run wrote 1.8 million log lines a
    minute)."""
    monkeypatch.delenv("PUBSUB_TOOLKIT_FINAL_TOPIC")
    deliveries: list[str] = []
    first, again = threading.Event(), threading.Event()
    guarded = idempotent(consumer=f"unset-{project_id}")(lambda message: None)

    def counted(message: Any) -> None:
        deliveries.append(message.message_id)
        (again if first.is_set() else first).set()
        guarded(message)

    publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    subscription = f"projects/{project_id}/subscriptions/unset-sub"
    subscriber.create_subscription(name=subscription, topic=topology.final)
    publisher.publish(topology.final, b"x", dedup_key="k").result(timeout=30)
    stream = subscriber.subscribe(subscription, callback=counted)
    try:
        assert first.wait(30), "never delivered"
        # The measurement: within 2 s of the first delivery, does the message come back?
        # (Nacked, the emulator redelivers it within milliseconds, dozens of times.)
        assert not again.wait(2), f"delivered again: {len(deliveries)} deliveries"
    finally:
        stream.cancel()
        stream.result(timeout=30)
        guarded.close()
        subscriber.close()
    assert len(deliveries) == 1
    said = [r.getMessage() for r in caplog.records if "cannot handle messages" in r.getMessage()]
    assert len(said) == 1 and "PUBSUB_TOOLKIT_FINAL_TOPIC" in said[0]
