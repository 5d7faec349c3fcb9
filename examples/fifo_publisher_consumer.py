"""FIFO per group: a Publisher numbering messages from a counter, the Consumer running each
group in that order.

What it shows: two groups (two orders) published interleaved; the :class:`pubsub_toolkit.
Publisher` numbers each message from the group's sequence counter (``fifo_group`` +
``fifo_seq``), and the :class:`pubsub_toolkit.Consumer` with a
:class:`pubsub_toolkit.MessageProcessor` runs every group strictly in number order, each message
once, different groups in parallel. Two things try to break that:

* the handler fails once on ``paid`` of order A ("payment service busy": a ``TransientError``).
  Pub/Sub would redeliver it behind ``shipped``; the gate parks ``shipped`` (and ``delivered``)
  until ``paid`` has run, then runs them in order;
* the producer publishes ``cancelled`` of order B twice (its retry after a timeout, same key and
  content): the Publisher gives the retry the number it gave the first attempt, so it is one
  message at one number and the handler runs it once.

The subscription has no message ordering: the order comes from the toolkit's counters. The run
prints every delivery's outcome and each group's handled order, and exits 0 only if every
group ran in publish order with each message handled exactly once (1 otherwise, 2 for a setup
error), within ``--timeout`` seconds.

Run it (pubsub-toolkit installed; the Redis store needs ``pip install 'pubsub-toolkit[redis]'``)::

    export PUBSUB_EMULATOR_HOST=127.0.0.1:8085           # a running Pub/Sub emulator export
    PUBSUB_TOOLKIT_REDIS_URL=redis://127.0.0.1:6379/0            # counters and group state in Redis
    ... python examples/fifo_publisher_consumer.py export FIRESTORE_EMULATOR_HOST=127.0.0.1:8086
    # ... or in Firestore python examples/fifo_publisher_consumer.py --store firestore

or inside the local stack (``pubsub-toolkit local up``; ``eval "$(pubsub-toolkit local env)"``).
``GOOGLE_CLOUD_PROJECT`` defaults to ``local-project``; ``--store`` defaults to
``PUBSUB_TOOLKIT_STORE_BACKEND``, else redis when ``PUBSUB_TOOLKIT_REDIS_URL`` is set, else
firestore.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from datetime import timedelta

from google.cloud import pubsub_v1  # type: ignore[attr-defined]

from pubsub_toolkit import (
    Consumer,
    ConsumerSettings,
    Message,
    MessageProcessor,
    Publisher,
    PubSubSink,
    Settings,
    TransientError,
)
from pubsub_toolkit.errors import ToolkitError
from pubsub_toolkit.stores.factory import counter_from_settings

logger = logging.getLogger("fifo_publisher_consumer")

# (group label, step, dedup key suffix) in the order the producer publishes them.
SENDS = [
    ("A", "created", "a1"),
    ("B", "created", "b1"),
    ("A", "paid", "a2"),
    ("B", "cancelled", "b2"),
    ("A", "shipped", "a3"),
    ("B", "cancelled", "b2"),  # the producer's retry: same dedup key and content, same number
    ("A", "delivered", "a4"),
    ("B", "refunded", "b3"),
]
FAIL_ONCE = ("A", "paid")  # the step whose first attempt fails transiently


class SetupError(Exception):
    """The environment cannot run the example; the message says what to set."""


def default_store() -> str:
    """``--store``'s default: PUBSUB_TOOLKIT_STORE_BACKEND, else redis when
    PUBSUB_TOOLKIT_REDIS_URL is set, else firestore."""
    configured = os.environ.get("PUBSUB_TOOLKIT_STORE_BACKEND", "").strip().lower()
    if configured in ("redis", "firestore"):
        return configured
    return "redis" if os.environ.get("PUBSUB_TOOLKIT_REDIS_URL") else "firestore"


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line: ``--store`` and ``--timeout``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--store",
        choices=("redis", "firestore"),
        default=default_store(),
        help="where counters and group state live (default: PUBSUB_TOOLKIT_STORE_BACKEND, else "
        "redis when PUBSUB_TOOLKIT_REDIS_URL is set, else firestore)",
    )
    parser.add_argument(
        "--timeout", type=float, default=90.0, help="give up after this many seconds (default 90)"
    )
    return parser.parse_args(argv)


def check_environment(store: str) -> None:
    """Refuse to run anywhere but on emulators (it creates topics and writes records)."""
    if not os.environ.get("PUBSUB_EMULATOR_HOST", "").strip():
        raise SetupError("set PUBSUB_EMULATOR_HOST to a running Pub/Sub emulator")
    if store == "redis" and not os.environ.get("PUBSUB_TOOLKIT_REDIS_URL", "").strip():
        raise SetupError(
            "--store redis needs PUBSUB_TOOLKIT_REDIS_URL, e.g. redis://127.0.0.1:6379/0"
        )
    if store == "firestore" and not os.environ.get("FIRESTORE_EMULATOR_HOST", "").strip():
        raise SetupError("--store firestore needs FIRESTORE_EMULATOR_HOST (a Firestore emulator)")


class Run:
    """What the run saw: each handler call, each delivery's outcome, which ids were acked."""

    def __init__(self, groups: dict[str, str]) -> None:
        self.lock = threading.Lock()
        self.label_of = {name: label for label, name in groups.items()}
        self.events: list[str] = []  # handler calls and delivery outcomes, in order
        self.handled: list[tuple[str, str]] = []  # (group label, step) as handled
        self.failed_once = False
        self.acked: set[str] = set()
        self.published: set[str] = set()
        self.all_published = False
        self.done = threading.Event()

    def handle(self, message: Message) -> str:
        """The user's handler: runs once per message, each group in order."""
        label = self.label_of[message.attributes["fifo_group"]]
        step, seq = message.data.decode(), message.attributes["fifo_seq"]
        with self.lock:
            if (label, step) == FAIL_ONCE and not self.failed_once:
                self.failed_once = True
                self.events.append(f"  handler: {label}#{seq} {step} fails (service busy)")
                raise TransientError("payment service busy, try later")
            self.handled.append((label, step))
            self.events.append(f"  handler: {label}#{seq} {step}")
            self._check()
        return f"{step} done"

    def on_outcome(self, message: Message, outcome: str) -> None:
        """What the Consumer did with a delivery (it acks every outcome but retry/error)."""
        label = self.label_of[message.attributes["fifo_group"]]
        step, seq = message.data.decode(), message.attributes["fifo_seq"]
        with self.lock:
            self.events.append(f"delivery of {label}#{seq} {step:<9} -> {outcome}")
            if outcome not in ("retry", "error"):
                self.acked.add(message.message_id)
            self._check()

    def published_one(self, message_id: str) -> None:
        """Pub/Sub accepted ``message_id``: its delivery is now awaited."""
        with self.lock:
            self.published.add(message_id)

    def publishing_done(self) -> None:
        """Every message is published: from now on, "done" can be decided."""
        with self.lock:
            self.all_published = True
            self._check()

    def _check(self) -> None:  # with the lock held
        expected = {(label, step) for label, step, _ in SENDS}
        if self.all_published and self.acked >= self.published and set(self.handled) >= expected:
            self.done.set()


def toolkit_settings(project: str, topic: str, dead_letter_topic: str, store: str) -> Settings:
    """The toolkit's settings, read as the deployed parts read them, from the environment."""
    env = dict(os.environ)
    env.update(
        GOOGLE_CLOUD_PROJECT=project,
        PUBSUB_TOOLKIT_FINAL_TOPIC=topic,
        PUBSUB_TOOLKIT_DEAD_LETTER_TOPIC=dead_letter_topic,
        PUBSUB_TOOLKIT_STORE_BACKEND=store,
    )
    return Settings.from_env(env)


def run(store: str, timeout: float) -> bool:
    """Publish two groups, consume them, check the order; True when the guarantees held."""
    run_id = uuid.uuid4().hex[:8]  # keeps this run's groups and records apart from others'
    project = os.environ.get("GOOGLE_CLOUD_PROJECT", "").strip() or "local-project"
    topic = f"projects/{project}/topics/fifo-example-{run_id}"
    dead_letter_topic = f"{topic}-dead-letter"
    # A fresh subscription per run: the emulator never forgets a stopped streaming-pull client.
    subscription = f"projects/{project}/subscriptions/fifo-example-{run_id}"
    settings = toolkit_settings(project, topic, dead_letter_topic, store)
    consumer_settings = ConsumerSettings(
        consumer_id=f"shipping-{run_id}",
        # Retry a failed head after 0.2 s (default 5 s, doubling) so the example is quick.
        retry_backoff=timedelta(seconds=0.2),
    )
    groups = {label: f"order-{label}-{run_id}" for label in ("A", "B")}
    state = Run(groups)

    admin = pubsub_v1.PublisherClient()
    subscriber = pubsub_v1.SubscriberClient()
    for name in (topic, dead_letter_topic):
        admin.create_topic(name=name, timeout=10)
    subscriber.create_subscription(  # no message ordering: the gate orders
        name=subscription, topic=topic, ack_deadline_seconds=30, timeout=10
    )
    processor = MessageProcessor.from_settings(settings, consumer_settings, state.handle)
    sink = PubSubSink()
    publisher = Publisher(sink, topic, counter_from_settings(settings))
    consumer = Consumer(subscription, processor, concurrency=4, on_outcome=state.on_outcome)
    consumer.start()
    try:
        for label, step, key in SENDS:
            state.published_one(
                publisher.publish(
                    step.encode(), fifo_group=groups[label], dedup_key=f"{key}-{run_id}"
                ).result()
            )
        state.publishing_done()
        print(f"published {len(SENDS)} messages in groups {', '.join(groups.values())}")
        finished = state.done.wait(timeout)
    finally:
        stopped = consumer.stop(timeout=30)
        sink.close()
        subscriber.delete_subscription(subscription=subscription, timeout=10)
        subscriber.close()
        for name in (topic, dead_letter_topic):
            admin.delete_topic(topic=name, timeout=10)
    with state.lock:
        return report(state.handled, state.events, finished=finished and stopped, timeout=timeout)


def report(
    handled: list[tuple[str, str]], events: list[str], *, finished: bool, timeout: float
) -> bool:
    """Print what happened; True when every group ran in order, each message once."""
    for line in events:
        print(line)
    order: dict[str, list[str]] = defaultdict(list)
    for label, step in handled:
        order[label].append(step)
    for label in sorted(order):
        print(f"group {label} handled in order: {' -> '.join(order[label])}")
    want: dict[str, list[str]] = defaultdict(list)
    for label, step, _ in SENDS:
        if step not in want[label]:  # the producer's retry is one message, not two
            want[label].append(step)
    failures = []
    if not finished:
        failures.append(f"not every message was handled and acked within {timeout:g}s")
    for label, steps in sorted(want.items()):
        if order.get(label) != steps:
            failures.append(f"group {label}: expected {steps}, handled {order.get(label)}")
    repeats = [f"{g} {s}" for (g, s), n in Counter(handled).items() if n > 1]
    if repeats:
        failures.append(f"handled more than once: {', '.join(repeats)}")
    if failures:
        print("FAILED: " + "; ".join(failures))
        return False
    print(
        "OK: each group ran in publish order, each message once, despite a failed attempt "
        "and a producer retry"
    )
    return True


def main(argv: list[str] | None = None) -> int:
    """Run the example; 0 when the guarantee held, 1 when it did not, 2 for a setup error."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = parse_args(sys.argv[1:] if argv is None else argv)
    started = time.monotonic()
    try:
        check_environment(args.store)
    except SetupError as exc:
        print(f"fifo_publisher_consumer: {exc}", file=sys.stderr)
        return 2
    print(f"store for counters and group state: {args.store}")
    try:
        ok = run(args.store, args.timeout)
    except ToolkitError as exc:  # a configuration the library refuses, said in one line
        print(f"fifo_publisher_consumer: {exc}", file=sys.stderr)
        return 2
    print(f"took {time.monotonic() - started:.1f}s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
