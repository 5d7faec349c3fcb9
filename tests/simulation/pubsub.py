"""A model of Pub/Sub: topics, subscriptions, at-least-once delivery and its failure modes.

What a subscription does with each message it holds, as the real service does:

* delivers it after a random delay (mostly under 0.5 s, sometimes up to 15 s), so messages
  arrive **out of order** - no ordering is assumed, as the toolkit promises to work without;
* sometimes delivers a **duplicate** copy while the first is still out;
* the subscriber's answer: **ack** removes it; **nack** redelivers it after an exponential
  backoff; **no answer** (a crashed subscriber, a lost ack) redelivers it once the **ack
  deadline** expires;
* after ``max_delivery_attempts`` failed deliveries it **forwards** the message to the
  subscription's dead-letter topic (Pub/Sub's dead-letter policy; ``None`` = no policy).

A message delivered :data:`CRASH_LOOP` times without a dead-letter policy is a crash loop: the
model stops delivering it and reports it (the run would otherwise never end).

Messages get ids and true publish times from the broker, never from a component's clock.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Callable
from dataclasses import dataclass

from pubsub_toolkit.message import Message, OutboundMessage
from tests.simulation.clock import to_datetime
from tests.simulation.events import EventLoop
from tests.simulation.faults import Faults
from tests.simulation.tracing import Trace

DELIVERY_COUNT_ATTRIBUTE = "CloudPubSubDeadLetterSourceDeliveryCount"  # set by Pub/Sub
SOURCE_SUBSCRIPTION_ATTRIBUTE = "CloudPubSubDeadLetterSourceSubscription"  # and this
CRASH_LOOP = 100  # deliveries of one message; real dead-letter policies stop at 5-100


class Answer(enum.Enum):
    """What a subscriber did with one delivery."""

    ACK = "ack"
    NACK = "nack"
    NONE = "none"  # crashed, or the ack was lost: the ack deadline decides
    LATER = "later"  # no subscriber instance running: try again soon, no attempt counted
    DEFERRED = "deferred"  # queued (Consumer's convoy): answered later through ``settler()``


@dataclass(frozen=True)
class SubscriptionConfig:
    ack_deadline: float = 20.0
    min_backoff: float = 10.0
    max_backoff: float = 600.0
    max_delivery_attempts: int | None = 10


@dataclass
class _Held:
    """Bookkeeping for one unacked message (mutable: the broker's own state)."""

    message: Message
    attempts: int = 0
    generation: int = 0  # bumped at each redelivery; answers of older copies are stale
    due: float = 0.0  # when its next delivery is scheduled
    delivered: int = -1  # the generation last delivered
    pulled: int = -1  # the generation delivered early, as a batch companion


Subscriber = Callable[[Message, int], Answer]
BatchSubscriber = Callable[[list[tuple[Message, int]]], list[Answer]]
BATCH_WINDOW = 10.0  # a companion due within this many seconds joins a batch (flow control)
PublishListener = Callable[[str, Message], None]


class Subscription:
    """One subscription on a topic, pushing to (or pulled by) ``subscriber``."""

    def __init__(
        self,
        broker: PubSub,
        name: str,
        config: SubscriptionConfig,
        subscriber: Subscriber,
        dead_letter_topic: str | None,
    ) -> None:
        self._broker = broker
        self.name = name
        self.config = config
        self._subscriber = subscriber
        self._dead_letter_topic = dead_letter_topic
        self._delivering: tuple[str, _Held, int] = ("", _Held(Message(b"")), 0)
        self._held: dict[str, _Held] = {}
        # process_batch shape: a group's ready messages are handed over together
        self.batch_subscriber: BatchSubscriber | None = None
        self.batch = 1

    @property
    def backlog(self) -> int:
        return len(self._held)

    def enqueue(self, message: Message) -> None:
        self._held[message.message_id] = _Held(message)
        self._schedule(message.message_id, 0, self._broker.delivery_delay())

    def _schedule(self, message_id: str, generation: int, delay: float) -> None:
        loop, faults = self._broker.loop, self._broker.faults
        held = self._held.get(message_id)
        if held is not None:
            held.due = loop.now + delay
        loop.after(
            delay,
            f"deliver {self.name} {message_id}",
            lambda: self._deliver(message_id, generation),
        )
        if faults.duplicate_delivery():
            extra = delay + self._broker.rng.uniform(0, 5)
            loop.after(
                extra,
                f"deliver {self.name} {message_id} (duplicate)",
                lambda: self._deliver(message_id, generation),
            )

    def _deliver(self, message_id: str, generation: int) -> None:
        held = self._held.get(message_id)
        if held is None:
            return  # acked (or dead-lettered) meanwhile
        if held.pulled == generation:
            held.pulled = -1
            return  # already delivered in a batch, at this generation
        mates = self._companions(held)
        if mates:
            self._deliver_batch([(message_id, held), *mates])
            return
        self._out(message_id, held)
        self._delivering = (message_id, held, generation)
        answer = self._subscriber(held.message, held.attempts)
        self._settle(message_id, held, generation, answer)

    def settler(self) -> Callable[[Answer], None]:
        """Inside the subscriber's call: how to answer this delivery later (it answered
        ``DEFERRED``), as a streaming-pull client acks or nacks a message it queued."""
        message_id, held, generation = self._delivering
        return lambda answer: self._settle(message_id, held, generation, answer)

    def _out(self, message_id: str, held: _Held) -> None:
        held.attempts += 1
        held.delivered = held.generation
        if self._broker.deadline_at_delivery:
            generation = held.generation
            self._broker.loop.after(
                self.config.ack_deadline,
                f"ack deadline {self.name} {message_id}",
                lambda: self._expire(message_id, generation),
            )

    def _companions(self, held: _Held) -> list[tuple[str, _Held]]:
        """process_batch shape: other messages of ``held``'s group due within the window."""
        group = held.message.attributes.get("fifo_group")
        if self.batch_subscriber is None or not group:
            return []
        soon = self._broker.loop.now + BATCH_WINDOW
        return [
            (mid, h)
            for mid, h in self._held.items()
            if h is not held
            and h.message.attributes.get("fifo_group") == group
            and h.delivered != h.generation
            and h.due <= soon
        ][: self.batch - 1]

    def _deliver_batch(self, items: list[tuple[str, _Held]]) -> None:
        generations = [h.generation for _, h in items]
        for n, (mid, h) in enumerate(items):
            if n:
                h.pulled = h.generation
            self._out(mid, h)
        assert self.batch_subscriber is not None
        answers = self.batch_subscriber([(h.message, h.attempts) for _, h in items])
        for (mid, h), generation, answer in zip(items, generations, answers, strict=True):
            self._settle(mid, h, generation, answer)

    def _settle(self, message_id: str, held: _Held, generation: int, answer: Answer) -> None:
        """Apply a subscriber's answer to one delivery."""
        if held is not self._held.get(message_id) or answer is Answer.DEFERRED:
            return  # acked by another copy while this one ran; or answered later
        if answer is Answer.ACK:
            del self._held[message_id]
        elif answer is Answer.LATER:
            held.attempts -= 1
            self._broker.loop.after(
                1.0,
                f"retry {self.name} {message_id}",
                lambda: self._deliver(message_id, generation),
            )
        elif held.generation == generation:
            if answer is Answer.NACK:
                self._failed(message_id, held)
            else:
                deadline = self.config.ack_deadline
                self._broker.loop.after(
                    deadline,
                    f"ack deadline {self.name} {message_id}",
                    lambda: self._expire(message_id, generation),
                )

    def _expire(self, message_id: str, generation: int) -> None:
        held = self._held.get(message_id)
        if held is not None and held.generation == generation:
            self._failed(message_id, held)

    def _failed(self, message_id: str, held: _Held) -> None:
        """A nack or an expired deadline: redeliver after a backoff, or dead-letter."""
        limit = self.config.max_delivery_attempts
        if limit is not None and held.attempts >= limit and self._dead_letter_topic:
            del self._held[message_id]
            attrs = {
                **held.message.attributes,
                DELIVERY_COUNT_ATTRIBUTE: str(held.attempts),
                SOURCE_SUBSCRIPTION_ATTRIBUTE: self.name,
            }
            self._broker.trace.add(
                f"pubsub: {self.name} {message_id} forwarded to the dead-letter topic "
                f"after {held.attempts} attempts"
            )
            self._broker.publish(
                self._dead_letter_topic,
                OutboundMessage(held.message.data, attrs, held.message.ordering_key),
            )
            return
        if held.attempts >= CRASH_LOOP:
            del self._held[message_id]
            self._broker.crash_loops.append(f"{self.name} {message_id}")
            self._broker.trace.add(
                f"pubsub: {self.name} {message_id}: {held.attempts} deliveries, a crash loop"
            )
            return
        held.generation += 1
        backoff = min(
            self.config.max_backoff, self.config.min_backoff * 2 ** min(held.attempts - 1, 20)
        )
        delay = backoff * self._broker.rng.uniform(0.8, 1.2) + self._broker.delivery_delay()
        self._schedule(message_id, held.generation, delay)


class PubSub:
    """The broker: topics, their subscriptions, message ids, publish listeners."""

    def __init__(self, loop: EventLoop, rng: random.Random, faults: Faults, trace: Trace) -> None:
        self.loop = loop
        self.rng = rng
        self.faults = faults
        self.trace = trace
        self._subscriptions: dict[str, list[Subscription]] = {}
        self._ids = 0
        self.listeners: list[PublishListener] = []
        self.crash_loops: list[str] = []  # messages given up on after CRASH_LOOP deliveries
        self.deadline_at_delivery = False  # the ack deadline starts at delivery (slow handlers)

    def create_topic(self, topic: str) -> None:
        self._subscriptions.setdefault(topic, [])

    def subscribe(
        self,
        topic: str,
        name: str,
        subscriber: Subscriber,
        *,
        config: SubscriptionConfig,
        dead_letter_topic: str | None = None,
    ) -> Subscription:
        subscription = Subscription(self, name, config, subscriber, dead_letter_topic)
        self._subscriptions[topic].append(subscription)
        return subscription

    def subscriptions(self) -> list[Subscription]:
        return [s for subs in self._subscriptions.values() for s in subs]

    def publish(self, topic: str, outbound: OutboundMessage) -> str:
        """Accept ``outbound`` on ``topic``: give it an id and a true publish time, fan it out."""
        if topic not in self._subscriptions:
            raise KeyError(f"no topic {topic}")
        self._ids += 1
        message = Message(
            outbound.data,
            outbound.attributes,
            message_id=f"m{self._ids}",
            publish_time=to_datetime(self.loop.now),
            ordering_key=outbound.ordering_key,
        )
        for listener in self.listeners:
            listener(topic, message)
        for subscription in self._subscriptions[topic]:
            subscription.enqueue(message)
        return message.message_id

    def delivery_delay(self) -> float:
        if self.rng.random() < 0.1:
            return self.rng.uniform(0.5, 15.0)
        return self.rng.uniform(0.005, 0.5)
