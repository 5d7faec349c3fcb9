"""Issue 24, defect 9: on Cloud Tasks' last attempt the relay dead-letters, it never answers 5xx
and lets the queue drop the task (the message then reached neither topic).

The relay runs on the project's own in-memory store, made unavailable by a switch (our
``DedupStore`` protocol), and a recording sink; the HTTP surface through ``create_app``'s test
client with the headers Cloud Tasks (and App Engine) send.
"""

from __future__ import annotations

import importlib.util
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.delay.attempts import (
    attempt_from_headers,
    is_last_attempt,
    max_attempts_from_env,
)
from pubsub_toolkit.delay.auth import AppEngineQueueAuthenticator
from pubsub_toolkit.delay.cancel import cancel
from pubsub_toolkit.delay.last_attempt import REASON_RETRIES_EXHAUSTED, REASON_STORE_UNAVAILABLE
from pubsub_toolkit.delay.payload import DelayedMessage
from pubsub_toolkit.delay.relay import Relay, RelayOutcome
from pubsub_toolkit.errors import ConfigurationError, StoreUnavailableError, TransientError
from pubsub_toolkit.message import OutboundMessage
from pubsub_toolkit.stores.dedup.base import Claim, DedupRecord
from pubsub_toolkit.stores.dedup.memory import MemoryDedupStore
from tests.conftest import repo_root
from tests.support.sinks import RecordingSink

FINAL, DLQ = "projects/p/topics/final", "projects/p/topics/dlq"
MAX_ATTEMPTS = 4


class SwitchableStore:
    """The memory store behind a switch: while ``down``, every call fails as an outage does.
    ``fail_complete`` fails only the ``done`` write (the publish went out, its record did not)."""

    def __init__(self, store: MemoryDedupStore) -> None:
        self._store = store
        self.down = False
        self.fail_complete = False

    def _check(self) -> None:
        if self.down:
            raise StoreUnavailableError("injected: the store is unreachable")

    def claim(self, namespace: str, key: str, fingerprint: str, **kw: Any) -> Claim:
        self._check()
        return self._store.claim(namespace, key, fingerprint, **kw)

    def complete(
        self, namespace: str, key: str, claim: Claim, result: str | None, **kw: Any
    ) -> None:
        self._check()
        if self.fail_complete:
            raise StoreUnavailableError("injected: the done write timed out")
        self._store.complete(namespace, key, claim, result, **kw)

    def release(self, namespace: str, key: str, claim: Claim) -> None:
        self._check()
        self._store.release(namespace, key, claim)

    def get(self, namespace: str, key: str) -> DedupRecord | None:
        self._check()
        return self._store.get(namespace, key)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(datetime.now(UTC))


@pytest.fixture
def memory(clock: ManualClock) -> MemoryDedupStore:
    return MemoryDedupStore(clock)


@pytest.fixture
def store(memory: MemoryDedupStore) -> SwitchableStore:
    return SwitchableStore(memory)


@pytest.fixture
def sink() -> RecordingSink:
    return RecordingSink()


@pytest.fixture
def relay(store: SwitchableStore, sink: RecordingSink, clock: ManualClock) -> Relay:
    return Relay(
        store=store,
        sink=sink,
        final_topic=FINAL,
        dead_letter_topic=DLQ,
        lease=timedelta(seconds=30),
        ttl=timedelta(days=8),
        clock=clock,
        task_max_attempts=MAX_ATTEMPTS,
    )


def body(key: str = "k", data: bytes = b"payload") -> bytes:
    message = OutboundMessage(data, {"dedup_key": key, "x": "y"})
    return DelayedMessage(message, key, datetime(2020, 1, 1, tzinfo=UTC)).to_json()


def relay_app(relay: Relay) -> Any:
    spec = importlib.util.spec_from_file_location(
        "relay_main", repo_root() / "appengine/relay/main.py"
    )
    assert spec is not None and spec.loader is not None
    module: Any = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.create_app(relay=relay, authenticator=AppEngineQueueAuthenticator("q"))


@pytest.mark.parametrize("header", ["X-CloudTasks-TaskRetryCount", "X-AppEngine-TaskRetryCount"])
def test_a_store_outage_through_every_attempt_ends_on_the_dead_letter_topic(
    relay: Relay, store: SwitchableStore, sink: RecordingSink, header: str
) -> None:
    client = relay_app(relay).test_client()
    store.down = True
    answers = []
    for retries in range(MAX_ATTEMPTS):
        response = client.post(
            "/release",
            data=body(),
            headers={"X-AppEngine-QueueName": "q", header: str(retries)},
        )
        answers.append((response.status_code, (response.json or {}).get("outcome")))
    # Cloud Tasks retries the 503s; after the last answer it deletes the task whatever it was.
    assert answers == [(503, None)] * (MAX_ATTEMPTS - 1) + [(200, "dead_lettered")]
    [dead] = sink.on(DLQ)
    assert dead.attributes["error_reason"] == REASON_STORE_UNAVAILABLE
    assert "last attempt (4 of 4)" in dead.attributes["error_detail"]
    assert (dead.data, dead.attributes["dedup_key"], dead.attributes["x"]) == (b"payload", "k", "y")
    assert sink.on(FINAL) == []


def test_the_last_attempts_alert_names_a_fifo_messages_group_and_number(
    relay: Relay, store: SwitchableStore, sink: RecordingSink, caplog: pytest.LogCaptureFixture
) -> None:
    # The ALERT must say which group and number the dead letter holds (the group passes over
    # it through the relay's filler: test_relay_fifo_give_up).
    message = OutboundMessage(b"p", {"dedup_key": "k", "fifo_group": "g", "fifo_seq": "7"})
    delayed = DelayedMessage(message, "k", datetime(2020, 1, 1, tzinfo=UTC)).to_json()
    store.down = True
    caplog.set_level("INFO")
    result = relay.release(delayed, attempt=MAX_ATTEMPTS)
    assert result.outcome is RelayOutcome.DEAD_LETTERED
    [alert] = [r.decision for r in caplog.records if "alert" in getattr(r, "decision", {})]
    assert (alert["alert"], alert["fifo_group"], alert["fifo_seq"]) == ("relay_gave_up", "g", "7")
    assert [m.attributes["fifo_seq"] for m in sink.on(DLQ)] == ["7"]


def test_without_an_attempt_number_a_failure_is_still_retried(
    relay: Relay, store: SwitchableStore, sink: RecordingSink
) -> None:
    store.down = True
    with pytest.raises(StoreUnavailableError):
        relay.release(body())
    with pytest.raises(StoreUnavailableError):
        relay.release(body(), attempt=MAX_ATTEMPTS - 1)
    assert sink.published == {}


def test_a_relay_without_max_attempts_never_gives_up(
    store: SwitchableStore, sink: RecordingSink, clock: ManualClock
) -> None:
    relay = Relay(
        store=store,
        sink=sink,
        final_topic=FINAL,
        dead_letter_topic=DLQ,
        lease=timedelta(seconds=30),
        ttl=timedelta(days=8),
        clock=clock,
    )
    store.down = True
    with pytest.raises(StoreUnavailableError):
        relay.release(body(), attempt=1000)
    assert sink.published == {}


def test_published_here_but_unrecorded_is_answered_2xx_not_dead_lettered_too(
    relay: Relay, store: SwitchableStore, sink: RecordingSink
) -> None:
    """Never both: the publish went out, its record did not; the last attempt knows it."""
    store.fail_complete = True
    with pytest.raises(StoreUnavailableError):
        relay.release(body(), attempt=1)
    assert len(sink.on(FINAL)) == 1
    store.down = True
    result = relay.release(body(), attempt=MAX_ATTEMPTS)
    assert result.outcome is RelayOutcome.PUBLISHED
    assert len(sink.on(FINAL)) == 1 and sink.on(DLQ) == []


def test_the_same_failure_on_the_last_attempt_is_told_apart_from_other_failures(
    store: SwitchableStore, clock: ManualClock
) -> None:
    class FinalTopicDown(RecordingSink):
        def publish(self, topic: str, message: OutboundMessage) -> str:
            if topic == FINAL:
                raise TransientError("injected: Pub/Sub unavailable")
            return super().publish(topic, message)

    sink = FinalTopicDown()
    relay = Relay(
        store=store,
        sink=sink,
        final_topic=FINAL,
        dead_letter_topic=DLQ,
        lease=timedelta(seconds=30),
        ttl=timedelta(days=8),
        clock=clock,
        task_max_attempts=2,
    )
    with pytest.raises(TransientError):
        relay.release(body(), attempt=1)
    result = relay.release(body(), attempt=2)
    assert (result.outcome, result.detail) == (RelayOutcome.DEAD_LETTERED, REASON_RETRIES_EXHAUSTED)
    [dead] = sink.on(DLQ)
    assert dead.attributes["error_reason"] == REASON_RETRIES_EXHAUSTED


def test_a_cancelled_message_is_never_published_on_the_last_attempt(
    relay: Relay, store: SwitchableStore, memory: MemoryDedupStore, sink: RecordingSink
) -> None:
    class NoTasks:
        def delete(self, dedup_key: str, hop: int = 0) -> bool:
            return False

    assert cancel("k", store=memory, scheduler=NoTasks()).cancelled
    store.down = True  # the tombstone cannot be read
    assert relay.release(body(), attempt=MAX_ATTEMPTS).outcome is RelayOutcome.DEAD_LETTERED
    assert sink.on(FINAL) == []


def test_a_malformed_body_is_dead_lettered_on_the_last_attempt_even_without_the_store(
    relay: Relay, store: SwitchableStore, sink: RecordingSink
) -> None:
    store.down = True
    with pytest.raises(StoreUnavailableError):
        relay.release(b"{broken", attempt=1)
    result = relay.release(b"{broken", attempt=MAX_ATTEMPTS)
    assert (result.outcome, result.detail) == (RelayOutcome.DEAD_LETTERED, "malformed_task")
    [dead] = sink.on(DLQ)
    assert dead.data == b"{broken" and dead.attributes["error_reason"] == "malformed_task"


def test_when_the_dead_letter_publish_fails_too_the_failure_is_raised(
    store: SwitchableStore, clock: ManualClock
) -> None:
    class NothingPublishes(RecordingSink):
        def publish(self, topic: str, message: OutboundMessage) -> str:
            raise TransientError("injected: Pub/Sub unavailable")

    relay = Relay(
        store=store,
        sink=NothingPublishes(),
        final_topic=FINAL,
        dead_letter_topic=DLQ,
        lease=timedelta(seconds=30),
        ttl=timedelta(days=8),
        clock=clock,
        task_max_attempts=1,
    )
    store.down = True
    with pytest.raises(TransientError, match="Pub/Sub unavailable"):
        relay.release(body(), attempt=1)


# --- the attempt number and the queue's budget ------------------------------------------------


def test_attempt_numbers_from_the_task_headers() -> None:
    assert attempt_from_headers({}) is None
    assert attempt_from_headers({"X-CloudTasks-TaskRetryCount": "0"}) == 1
    assert attempt_from_headers({"X-AppEngine-TaskRetryCount": "99"}) == 100
    assert attempt_from_headers({"X-CloudTasks-TaskRetryCount": "many"}) is None
    assert attempt_from_headers({"X-CloudTasks-TaskRetryCount": "-3"}) is None


def test_max_attempts_setting() -> None:
    assert max_attempts_from_env({}) == 100  # the queue's max_attempts in both deploys
    assert max_attempts_from_env({"PUBSUB_TOOLKIT_TASKS_MAX_ATTEMPTS": " 20 "}) == 20
    assert max_attempts_from_env({"PUBSUB_TOOLKIT_TASKS_MAX_ATTEMPTS": "-1"}) is None  # unlimited
    for bad in ("0", "-2", "ten", "1.5"):
        with pytest.raises(ConfigurationError, match="PUBSUB_TOOLKIT_TASKS_MAX_ATTEMPTS"):
            max_attempts_from_env({"PUBSUB_TOOLKIT_TASKS_MAX_ATTEMPTS": bad})
    assert is_last_attempt(100, 100) and is_last_attempt(101, 100)
    assert not is_last_attempt(99, 100)
    assert not is_last_attempt(None, 100) and not is_last_attempt(5, None)
