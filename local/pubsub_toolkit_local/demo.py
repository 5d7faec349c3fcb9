"""`make run`: a narrated demo of all three guarantees on the local stack.

It starts everything (:class:`~pubsub_toolkit_local.stack.LocalStack`) and publishes the way real
producers do: each order twice (a retry after a timeout), one key reused for different content, two
messages that break the contract, two delayed reminders, a FIFO group whose steps are sent out of
order, and one message the consumer's handler can never process. A Consumer (dedup + FIFO gate, on
unary pull) reads the final topic. It prints what happened and stops everything. Every part traces
(PUBSUB_TOOLKIT_TRACING=on, one PUBSUB_TOOLKIT_TRACE_FILE): one delayed reminder is published
through the toolkit's Publisher in a FIFO group, and its trace - producer, ingress, the Cloud Tasks
task, the relay, the consumer - is printed last, as ``pubsub-toolkit trace`` prints it.
"""

from __future__ import annotations

import logging
import tempfile
import threading
import time
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.message import Message
from pubsub_toolkit.observability import LOGGER_NAME, CloudLoggingFormatter
from pubsub_toolkit_local.stack import LocalStack, StackOptions
from pubsub_toolkit_local.topology import drain

ORDERS = 10
DELAYS = (3, 5)
FIFO_STEPS = ("created", "paid", "packed", "shipped", "delivered")
SEND_ORDER = (4, 1, 5, 3, 2)  # the FIFO group's numbers, in the order they are published
# The reminder published through pubsub_toolkit's Publisher, delayed and in a FIFO group: the
# one whose trace the demo prints.
TRACED_DELAY = DELAYS[-1]
TRACED_KEY = f"reminder-{TRACED_DELAY}s"
TRACED_GROUP = "reminders"


def _say(text: str) -> None:
    print(f"==> {text}", flush=True)


def _table(rows: list[tuple[str, object]]) -> None:
    width = max(len(label) for label, _ in rows)
    print(f"\n{'what':<{width}}  result\n{'-' * width}  ------")
    for label, value in rows:
        print(f"{label:<{width}}  {value}")
    print()


class _Recorder:
    """The demo consumer's handler: records everything, refuses the poison message."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: dict[str, list[Message]] = defaultdict(list)
        self.fifo: list[str] = []

    def __call__(self, message: Message) -> None:
        if message.data == b"poison":
            raise ValueError("this message can never be processed")
        with self.lock:
            self.seen[message.attributes["dedup_key"]].append(message)
            if message.attributes.get(attr.FIFO_GROUP) == "order-42":
                self.fifo.append(message.data.decode())

    def count(self) -> int:
        with self.lock:
            return len(self.seen)


def _publish(
    publisher: Any, traced: Any, origin: str, numbers: dict[str, int], poison_seq: int
) -> None:
    """Publish the demo's workload the way real producers do (``traced``: the toolkit's
    Publisher, for the reminder whose trace is shown)."""
    for n in range(1, ORDERS + 1):
        for _attempt in range(2):  # a producer that retries after a timeout sends twice
            publisher.publish(origin, f"order {n}".encode(), dedup_key=f"order-{n}")
    for delay in DELAYS:
        if delay == TRACED_DELAY:
            traced.publish(
                b"reminder",
                dedup_key=TRACED_KEY,
                delay=timedelta(seconds=delay),
                fifo_group=TRACED_GROUP,
            ).result(timeout=30)
            continue
        publisher.publish(
            origin,
            b"reminder",
            dedup_key=f"reminder-{delay}s",
            delay_seconds=str(delay),
        )
    for seq in SEND_ORDER:
        step = FIFO_STEPS[seq - 1]
        publisher.publish(
            origin,
            step.encode(),
            dedup_key=f"order-42-{step}",
            fifo_group="order-42",
            fifo_seq=str(numbers[step]),
        )
    publisher.publish(
        origin,
        b"poison",
        dedup_key="poison",
        fifo_group="order-99",
        fifo_seq=str(poison_seq),
    )
    publisher.publish(origin, b"bad", fifo_seq="1")
    publisher.publish(origin, b"bad", delay_seconds="-3").result(timeout=10)
    time.sleep(0.5)  # demo pacing only: the first copy of order-1 lands before the change
    publisher.publish(origin, b"order 1, changed", dedup_key="order-1").result(timeout=10)


def _report(recorder: _Recorder, dead: list[Message], started: datetime) -> bool:
    """Print what happened; True when every guarantee held."""
    seen = recorder.seen
    orders = [k for k in seen if k.startswith("order-") and not k.startswith("order-42")]
    reminders = [seen[k][0] for k in sorted(seen) if k.startswith("reminder-")]
    reasons = Counter(m.attributes["error_reason"] for m in dead)
    rows: list[tuple[str, object]] = [
        ("orders published (each twice)", 2 * ORDERS),
        ("orders handled by the consumer", sum(len(seen[k]) for k in orders)),
        ("distinct orders handled", len(orders)),
    ]
    on_time = True
    for m in reminders:
        due = attr.parse_time(m.attributes["deliver_at"])
        assert m.publish_time is not None
        late_ms = (m.publish_time - due).total_seconds() * 1000
        on_time &= late_ms >= 0
        rows.append(
            (
                f"{m.attributes['dedup_key']} released",
                f"{(m.publish_time - started).total_seconds():.2f}s after start, "
                f"{late_ms:.0f} ms after its due time",
            )
        )
    rows.append(("FIFO order-42 sent as", " ".join(FIFO_STEPS[s - 1] for s in SEND_ORDER)))
    rows.append(("FIFO order-42 handled as", " ".join(recorder.fifo)))
    rows += [(f"dead-lettered: {reason}", count) for reason, count in sorted(reasons.items())]
    _table(rows)
    ok = (
        sum(len(seen[k]) for k in orders) == ORDERS
        and len(orders) == ORDERS
        and len(reminders) == len(DELAYS)
        and on_time
        and recorder.fifo == list(FIFO_STEPS)
        and reasons
        == Counter(
            {
                "fingerprint_mismatch": 1,
                "fifo_seq_without_group": 1,
                "invalid_delay_seconds": 1,
                "fifo_poison": 1,
            }
        )
    )
    _say(
        "duplicates filtered, reminders on time (never early), the FIFO group in order, "
        "the poison message dead-lettered"
        if ok
        else "UNEXPECTED RESULT (see above)"
    )
    return ok


def run_demo(repo: Path) -> int:
    """Run the demo end to end; returns a process exit code (0 when every check holds)."""
    from google.cloud import firestore, pubsub_v1  # type: ignore[attr-defined]

    from pubsub_toolkit.config import ConsumerSettings, Settings
    from pubsub_toolkit.consumer.processor import MessageProcessor
    from pubsub_toolkit.consumer.subscriber import Consumer
    from pubsub_toolkit.producer.publisher import Publisher
    from pubsub_toolkit.producer.sink import PubSubSink
    from pubsub_toolkit.stores.counters.firestore import FirestoreSequenceCounter
    from pubsub_toolkit.tracing_setup import configure_entry_point
    from pubsub_toolkit_cli.cli.trace import print_trace
    from pubsub_toolkit_cli.unary_pull import UnaryPullSubscriber

    work = Path(tempfile.mkdtemp(prefix="pubsub-toolkit-demo-"))
    # The consumer's decision log (retries, the poison) goes to a file; the table tells the story.
    decisions = logging.FileHandler(work / "decisions.log")
    decisions.setFormatter(CloudLoggingFormatter())
    toolkit_logger = logging.getLogger(LOGGER_NAME)
    toolkit_logger.addHandler(decisions)
    toolkit_logger.propagate = False
    _say("starting the local stack: Pub/Sub + Firestore emulators, Cloud Tasks emulator,")
    _say("  ingress (functions-framework), relay (gunicorn)")
    with LocalStack(StackOptions(project="demo-project", tracing=True), work, repo) as stack:
        topo = stack.topology
        assert topo is not None
        _say(f"ready: {topo.origin} -> ingress -> {topo.final}")
        env = {
            **stack.env,
            "PUBSUB_TOOLKIT_CONSUMER_ID": "demo-consumer",
            "PUBSUB_TOOLKIT_FIFO_MAX_ATTEMPTS": "2",
            "PUBSUB_TOOLKIT_FIFO_RETRY_BACKOFF_SECONDS": "0.5",
        }
        # This process is the producer and the consumer: its spans go to the stack's
        # PUBSUB_TOOLKIT_TRACE_FILE.
        configure_entry_point(env, service="demo")
        recorder = _Recorder()
        processor = MessageProcessor.from_settings(
            Settings.from_env(env), ConsumerSettings.from_env(env), recorder
        )
        counter = FirestoreSequenceCounter(firestore.Client(project=env["GOOGLE_CLOUD_PROJECT"]))
        numbers = {step: counter.reserve("order-42").first for step in FIFO_STEPS}
        poison_seq = counter.reserve("order-99").first
        publisher = pubsub_v1.PublisherClient()
        sink = PubSubSink()
        traced = Publisher(sink, topo.origin, counter)
        started = datetime.now(UTC)
        # Unary pull: the emulator leaves a stopped streaming subscriber's subscription stuck.
        subscriber = UnaryPullSubscriber()
        with Consumer(topo.final_sub, processor, concurrency=8, subscriber=subscriber):
            _publish(publisher, traced, topo.origin, numbers, poison_seq)
            _say(
                f"published {2 * ORDERS} order copies, {len(DELAYS)} delayed reminders, a FIFO "
                f"group sent as {SEND_ORDER}, a poison message, 2 invalid messages, 1 reused key"
            )
            _say("consuming the final topic (the reminders arrive when they are due)...")
            expected = ORDERS + len(DELAYS) + len(FIFO_STEPS)
            deadline = time.monotonic() + 60
            while recorder.count() < expected and time.monotonic() < deadline:
                time.sleep(0.2)  # polling a counter for the narration; bounded by the deadline
            dead = drain(topo.dead_letter_sub, expected=4, timeout=30, quiet=1)
        sink.close()

    ok = _report(recorder, dead, started)
    _say(
        f"the trace of {TRACED_KEY} (delayed {TRACED_DELAY}s, FIFO group {TRACED_GROUP!r}), "
        f"as `pubsub-toolkit trace {TRACED_KEY} --file {stack.trace_file}` prints it:"
    )
    print_trace(TRACED_KEY, str(stack.trace_file))
    _say(f"stopped everything (logs in {work})")
    return 0 if ok else 1
