"""The Pub/Sub emulator's dead-stream defect: a self-test that shows it, and a heal.

The installed emulator (0.8.20) never unregisters a streaming-pull stream whose client stopped
(its jar throws ``NoSuchMethodError ... InternalStatus.asRuntimeException`` on the cancel, logged
as a gRPC warning in ``pubsub-emulator.log``). The dead stream keeps taking every later message
of that subscription - new ones, and expired ones soon after they return - so the next
subscriber receives nothing until the emulator restarts. The toolkit's own local consumers
(``pubsub-toolkit subscribe``, the demo) use unary pull
(:mod:`pubsub_toolkit_cli.unary_pull`) and never open a stream; a user's own streaming
subscriber still leaves its subscription stuck.

* :func:`self_test` does on a scratch topic what a user does: a streaming subscriber receives a
  probe and stops; a second probe is then pulled. It returns one line saying which way the
  emulator behaves.
* :func:`heal` gets a stuck subscription going again without restarting the emulator. Measured
  on 0.8.20: seeking the subscription to a past time makes its unacked messages pullable again,
  and a subscription deleted and created again with the same settings is healthy - provided the
  emulator had a moment to drop the old one. So: drain, delete, recreate with the same
  settings, and re-publish the drained messages to the topic when this subscription is its
  only one (else they would reach the others twice: they are written to a file instead).
  The drain is several rounds of seek + pull: after a seek the dead stream races the pull for
  each message and, on a busy machine, sometimes wins (with both cores busy, 2 of 8 one-round
  heals lost the waiting message; 0 of 20 with rounds), but it wins a given message again only
  by chance; and each round waits longer for the emulator's redelivery after its seek. So a
  message is missed only if the pull loses it, or it comes back too late, in every round (at
  least three in a row, the last ones quiet for 2 s). Snapshots do not
  help: the emulator's seek to a snapshot brings back nothing, on this subscription or a fresh
  one. Lost: only messages the drain could not see; re-published copies get new message ids and
  publish times and start again at delivery attempt 1.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pubsub_toolkit_cli.emulator import publisher_client, subscriber_client

logger = logging.getLogger(__name__)

PROBE_WAIT = 10.0  # seconds a healthy streaming pull needs at most for the first probe
OBSERVE = 3.0  # seconds the second probe may take to arrive on a healthy subscription
# The emulator hands waiting messages to its streams about every 50 ms. A pull sent at the very
# moment of the publish can beat a dead stream to the probe and hide the defect, so the first
# pull waits this long: nothing to wait *for* here, the absence of the probe is the measurement.
RACE_MARGIN = 0.5
# After deleting a subscription the emulator needs a moment before a new one of the same name
# is free of the old one's dead streams (measured: recreated at once it stayed stuck; after
# 0.1 s it was healthy). There is no signal to wait on, so heal pauses this long.
RELEASE_PAUSE = 1.0


@dataclass(frozen=True)
class SelfTest:
    """What the self-test saw; ``line`` is the one line to show the user."""

    stuck: bool
    line: str


def self_test(project: str, *, log: str | None = None) -> SelfTest:
    """Run the probe on a scratch topic and subscription of ``project`` (both deleted after)."""
    from google.cloud import pubsub_v1  # type: ignore[attr-defined]

    name = f"pubsub-toolkit-selftest-{uuid.uuid4().hex[:8]}"
    topic = f"projects/{project}/topics/{name}"
    subscription = f"projects/{project}/subscriptions/{name}"
    # The plain clients, as a user's own streaming subscriber would use them.
    publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    try:
        publisher.create_topic(name=topic, timeout=10, retry=None)
        subscriber.create_subscription(
            name=subscription, topic=topic, ack_deadline_seconds=10, timeout=10, retry=None
        )
        received = threading.Event()

        def on_probe(message: Any) -> None:
            message.ack()
            received.set()

        stream = subscriber.subscribe(subscription, on_probe)
        publisher.publish(topic, b"probe-1").result(timeout=10)
        first = received.wait(PROBE_WAIT)
        stream.cancel()
        try:
            stream.result(timeout=10)
        except Exception:  # a cancelled stream ends with an error by design
            logger.debug("self-test stream closed", exc_info=True)
        if not first:
            return SelfTest(
                True,
                "pubsub emulator self-test: FAILED - a streaming pull received no probe in "
                f"{PROBE_WAIT:.0f}s",
            )
        publisher.publish(topic, b"probe-2").result(timeout=10)
        second = _pull_probe(subscriber, subscription)
    finally:
        _delete_quietly(subscriber, publisher, subscription, topic)
        subscriber.close()
        publisher.stop()
    if second:
        return SelfTest(
            False,
            "pubsub emulator self-test: ok (a stopped streaming-pull subscriber releases its "
            "subscription)",
        )
    where = f" ({log})" if log else ""
    return SelfTest(
        True,
        "pubsub emulator: STUCK STREAMS - after a streaming-pull subscriber stops, its "
        "subscription gets nothing more until the emulator restarts (0.8.20 defect: "
        f"NoSuchMethodError in its log{where}); `pubsub-toolkit subscribe` and the demo use "
        "unary pull and are not affected; after your own streaming subscriber stopped, run "
        "`pubsub-toolkit local heal SUBSCRIPTION`",
    )


def _pull_probe(subscriber: Any, subscription: str) -> bool:
    time.sleep(RACE_MARGIN)  # see RACE_MARGIN: the measurement itself, not a synchronisation
    deadline = time.monotonic() + OBSERVE
    while time.monotonic() < deadline:
        response = subscriber.pull(
            subscription=subscription, max_messages=10, return_immediately=True, timeout=10
        )
        if response.received_messages:
            return True
        time.sleep(0.1)  # poll interval of an empty pull, bounded by the deadline
    return False


def _delete_quietly(subscriber: Any, publisher: Any, subscription: str, topic: str) -> None:
    from google.api_core import exceptions as gexc

    with contextlib.suppress(gexc.NotFound):  # never created: nothing to clean up
        subscriber.delete_subscription(subscription=subscription, timeout=10, retry=None)
    with contextlib.suppress(gexc.NotFound):
        publisher.delete_topic(topic=topic, timeout=10, retry=None)


@dataclass(frozen=True)
class Healed:
    """What :func:`heal` did to one subscription."""

    subscription: str
    drained: int
    republished: bool
    saved_to: Path | None

    def line(self) -> str:
        short = self.subscription.rsplit("/", 1)[-1]
        if self.drained == 0:
            moved = "no waiting messages to carry over"
        elif self.republished:
            moved = (
                f"{self.drained} waiting message(s) re-published to its topic "
                "(new message ids, delivery attempts from 1)"
            )
        else:
            moved = (
                f"{self.drained} waiting message(s) NOT re-published (the topic has other "
                f"subscriptions, which would get them twice); saved to {self.saved_to}"
            )
        return f"healed {short}: recreated with the same settings; {moved}"


def heal(subscription: str, *, save_dir: Path) -> Healed:
    """Drain, recreate and refill ``subscription`` (a full path); see the module docstring."""
    subscriber = subscriber_client()
    try:
        config = subscriber.get_subscription(subscription=subscription, timeout=10, retry=None)
        drained = _drain(subscriber, subscription)
        siblings = _topic_subscriptions(config.topic)
        subscriber.delete_subscription(subscription=subscription, timeout=10, retry=None)
        time.sleep(RELEASE_PAUSE)  # see RELEASE_PAUSE: no signal exists to wait on
        subscriber.create_subscription(request=_creatable(config), timeout=10, retry=None)
    finally:
        subscriber.close()
    alone = siblings == [subscription]
    saved: Path | None = None
    if drained and alone:
        _republish(config.topic, drained)
    elif drained:
        save_dir.mkdir(parents=True, exist_ok=True)
        saved = save_dir / f"healed-{subscription.rsplit('/', 1)[-1]}-{int(time.time())}.json"
        saved.write_text(json.dumps([_as_json(m) for m in drained], indent=1) + "\n")
    return Healed(subscription, len(drained), bool(drained) and alone, saved)


# A drain round pulls until quiet this long (and three empty pulls): after a seek the emulator
# redelivers with a delay that grows with the machine's load (three empty pulls 0.1 s apart
# once missed one), so the quiet doubles each round up to the 2 s a busy machine needed.
FIRST_ROUND_QUIET_SECONDS, ROUND_QUIET_SECONDS = 0.5, 2.0
# The drain ends after this many rounds in a row found no message it had not seen (or after
# MAX_DRAIN_ROUNDS): each round is a fresh chance to win what the dead stream took in the last.
SETTLED_ROUNDS = 3
MAX_DRAIN_ROUNDS = 10


def _drain(subscriber: Any, subscription: str) -> list[Any]:
    """Every unacked message of ``subscription``, by rounds of seek to the past + pull."""
    from google.protobuf import timestamp_pb2

    messages: dict[str, Any] = {}
    settled = 0
    for round_no in range(MAX_DRAIN_ROUNDS):
        past = timestamp_pb2.Timestamp()
        past.FromDatetime(datetime.now(UTC) - timedelta(days=31))  # before anything retained
        subscriber.seek(request={"subscription": subscription, "time": past}, timeout=10)
        seen = len(messages)
        quiet = min(ROUND_QUIET_SECONDS, FIRST_ROUND_QUIET_SECONDS * 2**round_no)
        for message in _pull_round(subscriber, subscription, quiet):
            messages.setdefault(message.message_id, message)
        settled = settled + 1 if len(messages) == seen else 0
        if settled == SETTLED_ROUNDS:
            break
    return list(messages.values())


def _pull_round(subscriber: Any, subscription: str, quiet: float) -> list[Any]:
    """Pull until ``quiet`` seconds pass without a message, holding every lease (600 s)."""
    pulled: list[Any] = []
    empty = 0
    quiet_since = time.monotonic()
    while empty < 3 or time.monotonic() - quiet_since < quiet:
        response = subscriber.pull(
            subscription=subscription, max_messages=1000, return_immediately=True, timeout=30
        )
        if not response.received_messages:
            empty += 1
            time.sleep(0.1)  # poll interval of an empty pull
            continue
        empty = 0
        quiet_since = time.monotonic()
        subscriber.modify_ack_deadline(
            subscription=subscription,
            ack_ids=[item.ack_id for item in response.received_messages],
            ack_deadline_seconds=600,
            timeout=30,
        )
        pulled.extend(item.message for item in response.received_messages)
    return pulled


def _topic_subscriptions(topic: str) -> list[str]:
    publisher = publisher_client()
    try:
        return list(publisher.list_topic_subscriptions(topic=topic, timeout=10))
    finally:
        publisher.stop()


_OUTPUT_ONLY = ("state", "topic_message_retention_duration", "analytics_hub_subscription_info")


def _creatable(config: Any) -> Any:
    """The subscription's settings without its output-only fields."""
    raw = type(config).pb(config)
    request = type(raw)()
    request.CopyFrom(raw)
    for name in _OUTPUT_ONLY:
        if name in request.DESCRIPTOR.fields_by_name:
            request.ClearField(name)
    return request


def _republish(topic: str, messages: list[Any]) -> None:
    from google.cloud import pubsub_v1  # type: ignore[attr-defined]

    publisher = publisher_client(
        publisher_options=pubsub_v1.types.PublisherOptions(enable_message_ordering=True)
    )
    try:
        futures = [
            publisher.publish(topic, m.data, ordering_key=m.ordering_key, **dict(m.attributes))
            for m in sorted(messages, key=lambda m: m.publish_time)
        ]
        for future in futures:
            future.result(timeout=60)
    finally:
        publisher.stop()


def _as_json(message: Any) -> dict[str, Any]:
    return {
        "message_id": message.message_id,
        "publish_time": message.publish_time.isoformat(),
        "ordering_key": message.ordering_key,
        "attributes": dict(message.attributes),
        "data_base64": base64.b64encode(message.data).decode(),
    }
