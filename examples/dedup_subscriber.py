"""Deduplication added to an existing google-cloud-pubsub streaming-pull subscriber.

What it shows: a plain ``SubscriberClient.subscribe`` callback whose effect (here: booking an
order in a ledger) must not happen twice. Pub/Sub delivers at least once, so two things would
repeat it: a **redelivery** (the ack was lost; same message id) and a **producer's retry** (a
re-publish after a timeout; a new message id, the same ``dedup_key``). Wrapping the effect in
:class:`pubsub_toolkit.IdempotentProcessor` runs it once per key; nothing else in the
subscriber changes (the lines the toolkit adds are marked ``# + dedup``).

The run, against the Pub/Sub emulator: creates a topic and a fresh subscription, publishes
three orders and a producer retry of one of them, and withholds the first ack of another (as
if the process died before its ack reached Pub/Sub, so Pub/Sub delivers it again). It prints
every delivery and what the processor decided, and exits 0 only if each order was booked
exactly once and both repeats were recognised as duplicates (1 otherwise, 2 for a setup
error), within ``--timeout`` seconds.

Run it (pubsub-toolkit installed; the Redis store needs ``pip install 'pubsub-toolkit[redis]'``)::

    export PUBSUB_EMULATOR_HOST=127.0.0.1:8085           # a running Pub/Sub emulator
    export PUBSUB_TOOLKIT_REDIS_URL=redis://127.0.0.1:6379/0            # the Redis store ...
    python examples/dedup_subscriber.py
    export FIRESTORE_EMULATOR_HOST=127.0.0.1:8086        # ... or the Firestore store
    python examples/dedup_subscriber.py --store firestore

or inside the repository's local stack: ``pubsub-toolkit local up``, then ``eval "$(pubsub-toolkit
local env)"`` and ``python examples/dedup_subscriber.py``. ``GOOGLE_CLOUD_PROJECT`` defaults to
``local-project``; ``--store`` defaults to ``PUBSUB_TOOLKIT_STORE_BACKEND``, else redis when
``PUBSUB_TOOLKIT_REDIS_URL`` is set, else firestore.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from google.cloud import pubsub_v1  # type: ignore[attr-defined]

from pubsub_toolkit import IdempotentProcessor, TransientError  # + dedup
from pubsub_toolkit.attributes import content_fingerprint  # + dedup
from pubsub_toolkit.dedup.idempotent import Outcome  # + dedup
from pubsub_toolkit.stores.dedup.base import DedupStore

logger = logging.getLogger("dedup_subscriber")


@dataclass(frozen=True)
class Delivery:
    """One call of the callback, as printed at the end."""

    message_id: str
    dedup_key: str
    outcome: str
    acked: bool


class SetupError(Exception):
    """The environment cannot run the example; the message says what to set."""


def make_store(kind: str) -> DedupStore:
    """The dedup store: Redis (PUBSUB_TOOLKIT_REDIS_URL) or Firestore (FIRESTORE_EMULATOR_HOST)."""
    if kind == "redis":
        url = os.environ.get("PUBSUB_TOOLKIT_REDIS_URL", "").strip()
        if not url:
            raise SetupError(
                "--store redis needs PUBSUB_TOOLKIT_REDIS_URL, e.g. redis://127.0.0.1:6379/0"
            )
        # Imported here: the Redis backend needs the [redis] extra, Firestore does not.
        from pubsub_toolkit.stores.dedup.redis import RedisDedupStore

        return RedisDedupStore.from_url(url)
    if not os.environ.get("FIRESTORE_EMULATOR_HOST", "").strip():
        # The example writes records; keep it off a real database unless asked for explicitly.
        raise SetupError("--store firestore needs FIRESTORE_EMULATOR_HOST (a Firestore emulator)")
    from google.cloud import firestore

    from pubsub_toolkit.stores.dedup.firestore import FirestoreDedupStore

    return FirestoreDedupStore(firestore.Client(project=project_id()))


def default_store() -> str:
    """``--store``'s default: PUBSUB_TOOLKIT_STORE_BACKEND, else redis when
    PUBSUB_TOOLKIT_REDIS_URL is set, else firestore."""
    configured = os.environ.get("PUBSUB_TOOLKIT_STORE_BACKEND", "").strip().lower()
    if configured in ("redis", "firestore"):
        return configured
    return "redis" if os.environ.get("PUBSUB_TOOLKIT_REDIS_URL") else "firestore"


def project_id() -> str:
    """GOOGLE_CLOUD_PROJECT, or the local stack's ``local-project``."""
    return os.environ.get("GOOGLE_CLOUD_PROJECT", "").strip() or "local-project"


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line: ``--store`` and ``--timeout``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--store",
        choices=("redis", "firestore"),
        default=default_store(),
        help="where dedup records live (default: PUBSUB_TOOLKIT_STORE_BACKEND, else redis when "
        "PUBSUB_TOOLKIT_REDIS_URL is set, else firestore)",
    )
    parser.add_argument(
        "--timeout", type=float, default=60.0, help="give up after this many seconds (default 60)"
    )
    return parser.parse_args(argv)


class Run:
    """What the run saw: the ledger (the effect), every delivery, and which messages were acked."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ledger: Counter[str] = Counter()  # how often each order was booked
        self.deliveries: list[Delivery] = []
        self.acked: set[str] = set()
        self.published: set[str] = set()
        self.all_acked = threading.Event()
        self.lose_first_ack = {"order-2"}  # withhold this order's first ack, once

    def book(self, order: str) -> str:
        """The effect the subscriber must not repeat."""
        with self.lock:
            self.ledger[order] += 1
        return f"booked {order}"

    def delivered(self, message_id: str, key: str, outcome: Outcome) -> bool:
        """Record a delivery; False when its ack is to be withheld (the simulated lost ack)."""
        with self.lock:
            lose = outcome is Outcome.PROCESSED and key in self.lose_first_ack
            self.lose_first_ack.discard(key)
            self.deliveries.append(Delivery(message_id, key, outcome.value, acked=not lose))
            if not lose:
                self.acked.add(message_id)
            self._check()
        return not lose

    def publishing_done(self, message_ids: list[str]) -> None:
        """Every message is published: from now on, "all acked" can be decided."""
        with self.lock:
            self.published.update(message_ids)
            self._check()

    def _check(self) -> None:  # with the lock held
        if self.published and self.acked >= self.published:
            self.all_acked.set()


def make_callback(processor: IdempotentProcessor, state: Run) -> Callable[[Any], None]:
    """The subscriber's existing callback, with the dedup lines added."""

    def callback(message: Any) -> None:
        """Book the order once, however often Pub/Sub delivers it; ack or nack."""
        attrs = message.attributes
        key = attrs.get("dedup_key") or message.message_id  # + dedup
        fingerprint = attrs.get("content_sha256") or content_fingerprint(message.data, attrs)
        try:
            result = processor.process(key, fingerprint, lambda: state.book(key))  # + dedup
        except TransientError as exc:  # + dedup: another worker holds the key, or store down
            logger.info("redelivering %s: %s", message.message_id, exc)
            message.nack()
            return
        except Exception:
            logger.exception("booking %s failed; Pub/Sub will deliver it again", key)
            message.nack()
            return
        if result.outcome is Outcome.MISMATCH:  # + dedup: same key, other content: keep it
            logger.error("dedup_key %s reused for different content: not dropped", key)
            message.nack()
            return
        if state.delivered(message.message_id, key, result.outcome):
            message.ack()  # processed and duplicates alike
        else:
            message.nack()  # the lost ack: Pub/Sub delivers the same message id again

    return callback


def run(store: DedupStore, timeout: float) -> bool:
    """Publish, subscribe, deduplicate; True when every guarantee held."""
    run_id = uuid.uuid4().hex[:8]
    project = project_id()
    topic = f"projects/{project}/topics/dedup-example-{run_id}"
    # A fresh subscription per run: the emulator never forgets a stopped streaming-pull client,
    # so a reused subscription could hand this run's messages to a previous run's dead stream.
    subscription = f"projects/{project}/subscriptions/dedup-example-{run_id}"
    publisher = pubsub_v1.PublisherClient()
    subscriber = pubsub_v1.SubscriberClient()
    publisher.create_topic(name=topic, timeout=10)
    subscriber.create_subscription(
        name=subscription, topic=topic, ack_deadline_seconds=30, timeout=10
    )
    processor = IdempotentProcessor(  # + dedup
        store,
        # One namespace per consumer; the run id keeps runs apart, because the emulator's
        # message ids restart at "1" and a store that outlives it would see false duplicates.
        namespace=f"billing-{run_id}",
        lease=timedelta(seconds=30),  # longer than the effect's longest run
        ttl=timedelta(days=8),  # longer than Pub/Sub's 7-day retention
    )
    state = Run()
    stream = subscriber.subscribe(subscription, make_callback(processor, state))
    try:
        sends = [
            ("order-1", b"1 coffee"),
            ("order-2", b"2 teas"),
            ("order-3", b"3 cakes"),
            ("order-3", b"3 cakes"),  # the producer's retry after a timeout: a new message id
        ]
        ids = [publisher.publish(topic, data, dedup_key=key).result(10) for key, data in sends]
        state.publishing_done(ids)
        print(f"published {len(ids)} messages to {topic}: ids {', '.join(ids)}")
        finished = state.all_acked.wait(timeout)
    finally:
        stream.cancel()
        try:
            stream.result(timeout=10)
        except Exception:  # a cancelled stream ends with CancelledError by design
            logger.debug("stream closed", exc_info=True)
        subscriber.delete_subscription(subscription=subscription, timeout=10)
        subscriber.close()
        publisher.delete_topic(topic=topic, timeout=10)
    return report(state.deliveries, state.ledger, finished=finished, timeout=timeout)


def report(
    deliveries: list[Delivery], ledger: Counter[str], *, finished: bool, timeout: float
) -> bool:
    """Print what happened; True when the guarantees held."""
    for d in deliveries:
        ack = "acked" if d.acked else "ack withheld (simulated lost ack)"
        print(f"delivery of message {d.message_id:>4} {d.dedup_key}: {d.outcome:<9} {ack}")
    print("ledger: " + ", ".join(f"{order} booked {n}x" for order, n in sorted(ledger.items())))
    failures = []
    if not finished:
        failures.append(f"not every message was acked within {timeout:g}s")
    if dict(ledger) != {"order-1": 1, "order-2": 1, "order-3": 1}:
        failures.append(f"each order must be booked exactly once, got {dict(ledger)}")
    duplicates = Counter(d.dedup_key for d in deliveries if d.outcome == "duplicate")
    if duplicates != Counter({"order-2": 1, "order-3": 1}):
        failures.append(
            "expected one duplicate of order-2 (redelivery) and of order-3 (producer retry), "
            f"got {dict(duplicates)}"
        )
    if failures:
        print("FAILED: " + "; ".join(failures))
        return False
    print("OK: a redelivery and a producer retry arrived, and neither booked an order twice")
    return True


def main(argv: list[str] | None = None) -> int:
    """Run the example; 0 when the guarantee held, 1 when it did not, 2 for a setup error."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = parse_args(sys.argv[1:] if argv is None else argv)
    started = time.monotonic()
    try:
        if not os.environ.get("PUBSUB_EMULATOR_HOST", "").strip():
            # It creates and deletes a topic: keep it off a real project.
            raise SetupError("set PUBSUB_EMULATOR_HOST to a running Pub/Sub emulator")
        store = make_store(args.store)
    except SetupError as exc:
        print(f"dedup_subscriber: {exc}", file=sys.stderr)
        return 2
    print(f"dedup store: {args.store}")
    ok = run(store, args.timeout)
    print(f"took {time.monotonic() - started:.1f}s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
