"""bench/cost: what each message costs on Google Cloud, per path and per store backend.

Run with ``make bench-cost`` (or ``python -m bench.cost``); it starts its own servers: the
Pub/Sub and Firestore emulators and redis-server (bench/common), and in this process the
project's Cloud Tasks emulator and the relay (Flask, on loopback). Nothing is counted by hand:
the real library code runs, and the wrappers of :mod:`bench.cost_counting` count what it sends
to each billed service - Pub/Sub publishes and deliveries (bytes, with the 1000-byte request
minimum), Firestore document reads/writes/deletes, Redis commands, Cloud Tasks operations and
function invocations. :mod:`bench.cost_prices` turns the counts into $ per million messages.

Paths, each run for both backends (``firestore``, ``redis``):

* ``immediate``: producer -> origin -> (push) ingress function -> final -> Consumer (dedup);
* ``duplicate``: the same message published and pushed a second time (ingress drops it): the
  cost of the extra copy;
* ``delayed``: ingress -> Cloud Tasks -> relay -> final -> Consumer;
* ``fifo_in_order``: Publisher (sequence counter) -> ingress -> final -> Consumer (FIFO gate),
  two numbers per group, delivered in order;
* ``fifo_parked``: the same, but number 2 reaches the consumer first and is parked until 1
  has run. Reported as what *a message that arrives early* costs: the in-order figure plus
  the measured difference between the two runs per early message (same messages otherwise);
* ``dead_lettered``: a message that breaks the contract -> ingress -> dead-letter topic.

Beside them, ``seeds_recipe`` (Firestore): the naive design of :mod:`bench.cost_baseline`
(check-then-set dedup + a transactional counter per FIFO message, early arrivals nacked),
counted by the same wrappers.

The consumer is :class:`~pubsub_toolkit.consumer.subscriber.Consumer` over unary pulls (the
emulator's streaming pull cannot be restarted; see pubsub_toolkit_cli.unary_pull); its sweeper is
set to an hour so no periodic sweep falls into a measurement (a sweep is a fixed cost per group and
interval, not per message). Counts come out per message, to ``bench/results/cost.json``.
The figures follow the library: re-run after a change to the stores or the gate.
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

from google.cloud import firestore, pubsub_v1, tasks_v2  # type: ignore[attr-defined]

from bench import cost_baseline
from bench.common import Servers, local_servers, write_result
from bench.cost_counting import CostCounter, wrap_entry
from bench.cost_prices import PRICES, dollars_per_million, memorystore_month
from pubsub_toolkit.config import ConsumerSettings, Settings
from pubsub_toolkit.consumer.processor import MessageProcessor
from pubsub_toolkit.consumer.subscriber import Consumer
from pubsub_toolkit.delay.auth import authenticator_from_settings
from pubsub_toolkit.delay.relay import Relay
from pubsub_toolkit.delay.scheduler import tasks_client
from pubsub_toolkit.ingress.pipeline import Ingress
from pubsub_toolkit.message import Message, OutboundMessage
from pubsub_toolkit.producer.publisher import Publisher
from pubsub_toolkit.producer.sink import PubSubSink
from pubsub_toolkit.stores.factory import counter_from_settings
from pubsub_toolkit_cli.unary_pull import UnaryPullSubscriber
from pubsub_toolkit_local.tasks_emulator import CloudTasksEmulator

__all__ = ["CostCounter", "Rig", "install", "measure", "run_paths", "run_seeds"]

BACKENDS = ("firestore", "redis")
PATHS = ("immediate", "duplicate", "delayed", "fifo_in_order", "fifo_parked", "dead_lettered")
SEEDS_PATHS = ("immediate", "duplicate", "fifo_in_order", "fifo_parked", "dead_lettered")
PAYLOAD = b"x" * 256
WAIT_SECONDS = 60.0
# Redis connection set-up and Pub/Sub's empty polls depend on timing, not on the protocol.
UNPRICED_PREFIXES = ("redis_setup.",)


class Outcomes:
    """What the consumer did, for waiting on conditions (never on the clock)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.handled: Counter[str] = Counter()
        self.outcomes: Counter[tuple[str, str]] = Counter()

    def handler(self, message: Message) -> None:
        with self._cond:
            self.handled[message.dedup_key] += 1
            self._cond.notify_all()

    def on_outcome(self, message: Message, outcome: str) -> None:
        with self._cond:
            self.outcomes[(message.dedup_key, outcome)] += 1
            self._cond.notify_all()

    def has_outcome(self, key: str, outcome: str) -> bool:
        return (key, outcome) in self.outcomes

    def all_handled(self, keys: Iterable[str]) -> bool:
        return all(self.handled[k] for k in keys)

    def all_processed(self, keys: Iterable[str]) -> bool:
        """Every key's delivery returned ``processed`` (the consumer acked it after)."""
        return all((k, "processed") in self.outcomes for k in keys)

    def wait(self, predicate: Callable[[], bool], what: str, timeout: float = WAIT_SECONDS) -> None:
        with self._cond:
            if not self._cond.wait_for(predicate, timeout):
                raise TimeoutError(f"gave up after {timeout:.0f} s waiting for {what}")


class RecordingSink:
    """A PubSubSink that remembers what it published: the producer's side of the push."""

    def __init__(self, sink: PubSubSink) -> None:
        self._sink = sink
        self.published: list[tuple[str, OutboundMessage]] = []

    def publish(self, topic: str, message: OutboundMessage) -> str:
        message_id = self._sink.publish(topic, message)
        self.published.append((message_id, message))
        return message_id


def push_body(message_id: str, message: OutboundMessage, subscription: str) -> bytes:
    """The body Pub/Sub's push subscription on the origin topic would send for one message."""
    return json.dumps(
        {
            "message": {
                "data": base64.b64encode(message.data).decode(),
                "attributes": dict(message.attributes),
                "messageId": message_id,
                "publishTime": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
                "orderingKey": message.ordering_key,
            },
            "subscription": subscription,
        }
    ).encode()


@dataclass
class Window:
    """Counts between two snapshots, per message."""

    messages: int
    totals: dict[str, float] = field(default_factory=dict)
    by_component: dict[str, dict[str, float]] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "messages": self.messages,
            "per_message": self.totals,
            "per_message_by_component": self.by_component,
        }


@contextmanager
def window(
    counter: CostCounter, messages: int, into: dict[str, Window], name: str
) -> Iterator[None]:
    """Count what happens inside the block as path ``name`` of ``messages`` messages."""
    before, before_c = counter.snapshot(), counter.snapshot_by_component()
    yield
    delta = counter.snapshot() - before
    delta_c = counter.snapshot_by_component() - before_c
    result = Window(messages)
    result.totals = {k: round(v / messages, 4) for k, v in sorted(delta.items())}
    for (component, metric), value in sorted(delta_c.items()):
        result.by_component.setdefault(component, {})[metric] = round(value / messages, 4)
    into[name] = result


def derive_parked(in_order: Window, parked_pairs: Window, groups: int) -> Window:
    """A message that arrives early: in-order cost + (parked run - in-order run) per early one."""
    names = set(in_order.totals) | set(parked_pairs.totals)
    out = Window(groups)
    for name in sorted(names):
        base = in_order.totals.get(name, 0.0)
        extra = (parked_pairs.totals.get(name, 0.0) - base) * parked_pairs.messages / groups
        out.totals[name] = round(base + extra, 4)
    return out


class Rig:
    """One backend's deployment in miniature: topics, ingress, relay, Cloud Tasks, consumer."""

    def __init__(
        self, servers: Servers, counter: CostCounter, backend: str, *, quiet: bool = False
    ) -> None:
        self.counter = counter
        self.quiet = quiet
        self.backend = backend
        self.run = uuid.uuid4().hex[:8]
        self.project = f"cost-{backend}-{self.run}"
        self.outcomes = Outcomes()
        self._servers = servers
        self._stack = ExitStack()

    def topic(self, name: str) -> str:
        return f"projects/{self.project}/topics/{name}"

    def __enter__(self) -> Rig:
        try:
            self._start()
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stack.close()

    def _start(self) -> None:
        from werkzeug.serving import make_server

        admin = pubsub_v1.PublisherClient()
        subs = pubsub_v1.SubscriberClient()
        for name in ("origin", "final", "dead-letter", "seeds-final"):
            admin.create_topic(name=self.topic(name))
        self.final_sub, self.seeds_sub = (
            subs.create_subscription(
                name=f"projects/{self.project}/subscriptions/{topic}-sub",
                topic=self.topic(topic),
                ack_deadline_seconds=60,
            ).name
            for topic in ("final", "seeds-final")
        )
        subs.close()
        self.push_subscription = f"projects/{self.project}/subscriptions/origin-push"

        # The relay, served on loopback; Cloud Tasks (App Engine target) dispatches to it.
        relay_holder: dict[str, Any] = {}
        server = make_server("127.0.0.1", 0, _RelayApp(relay_holder, self.counter), threaded=True)
        threading.Thread(target=server.serve_forever, name="relay", daemon=True).start()
        self._stack.callback(server.shutdown)
        emulator = self._stack.enter_context(
            CloudTasksEmulator(app_engine_host=f"http://127.0.0.1:{server.server_port}")
        )
        location = f"projects/{self.project}/locations/local"
        queue = f"{location}/queues/delays"
        tasks_client(emulator.address).create_queue(
            parent=location, queue=tasks_v2.Queue(name=queue)
        )
        self.env = {
            "GOOGLE_CLOUD_PROJECT": self.project,
            "PUBSUB_TOOLKIT_FINAL_TOPIC": "final",
            "PUBSUB_TOOLKIT_DEAD_LETTER_TOPIC": "dead-letter",
            "PUBSUB_TOOLKIT_STORE_BACKEND": self.backend,
            "PUBSUB_TOOLKIT_REDIS_URL": self._servers.redis_url,
            "PUBSUB_TOOLKIT_STATS_FLUSH_SECONDS": "0",
            "PUBSUB_TOOLKIT_TASKS_QUEUE": queue,
            "PUBSUB_TOOLKIT_TASKS_TARGET": "appengine",
            "CLOUD_TASKS_EMULATOR_HOST": emulator.address,
            "PUBSUB_TOOLKIT_CONSUMER_ID": f"cost-{self.run}",
        }
        settings = Settings.from_env(self.env)
        assert settings.delay is not None
        self.ingress = Ingress.from_settings(settings)
        from appengine.relay.main import create_app

        relay_holder["app"] = create_app(
            relay=Relay.from_settings(settings),
            authenticator=authenticator_from_settings(settings.delay),
        )
        if self.quiet:  # the relay's create_app configured INFO logging of every decision
            logging.getLogger("pubsub_toolkit").setLevel(logging.ERROR)
        self.sink = RecordingSink(PubSubSink())
        self.publisher = Publisher(self.sink, self.topic("origin"), counter_from_settings(settings))
        processor = MessageProcessor.from_settings(
            settings, ConsumerSettings.from_env(self.env), self.outcomes.handler
        )
        consumer = Consumer(
            self.final_sub,
            processor,
            concurrency=8,
            sweep_interval=timedelta(hours=1),
            subscriber=UnaryPullSubscriber(),
            on_outcome=self.outcomes.on_outcome,
        )
        consumer.start()
        self._stack.callback(consumer.stop)

    def push_last(self, count: int = 1) -> None:
        """Deliver the last ``count`` published messages to the ingress function, as a push."""
        for message_id, message in self.sink.published[-count:]:
            self.ingress.handle_push_body(push_body(message_id, message, self.push_subscription))


class _RelayApp:
    """WSGI: the relay's Flask app, each request counted as a Cloud Tasks dispatch attempt."""

    def __init__(self, holder: dict[str, Any], counter: CostCounter) -> None:
        self._holder = holder
        self._counter = counter

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        if environ.get("PATH_INFO", "").startswith("/release"):
            self._counter.add(**{"tasks.dispatch_attempts": 1})
        return self._holder["app"](environ, start_response)


def run_paths(
    rig: Rig, messages: int, groups: int, only: tuple[str, ...] = PATHS
) -> dict[str, Window]:
    """The library's paths (``only``) on ``rig``'s backend; returns the windows by path.
    ``duplicate`` runs after ``immediate``, ``fifo_parked`` after ``fifo_in_order``."""
    out: dict[str, Window] = {}
    run = f"{rig.run}-{uuid.uuid4().hex[:4]}"
    keys = [f"{run}-imm-{i}" for i in range(messages)]
    if "immediate" in only or "duplicate" in only:
        _immediate(rig, keys, out)
    if "duplicate" in only:
        _duplicate(rig, keys, out)
    if "delayed" in only:
        _delayed(rig, run, messages, out)
    if "fifo_in_order" in only or "fifo_parked" in only:
        _fifo(rig, run, groups, out, "fifo_in_order", reorder=False)
    if "fifo_parked" in only:
        _fifo(rig, run, groups, out, "fifo_parked_pairs", reorder=True)
        out["fifo_parked"] = derive_parked(out["fifo_in_order"], out["fifo_parked_pairs"], groups)
    if "dead_lettered" in only:
        _dead_lettered(rig, run, messages, out)
    return out


def _immediate(rig: Rig, keys: list[str], out: dict[str, Window]) -> None:
    seen = rig.outcomes
    with window(rig.counter, len(keys), out, "immediate"):
        for key in keys:
            rig.publisher.publish(PAYLOAD, dedup_key=key)
            rig.push_last()
        seen.wait(partial(seen.all_processed, keys), "immediate")


def _duplicate(rig: Rig, keys: list[str], out: dict[str, Window]) -> None:
    with window(rig.counter, len(keys), out, "duplicate"):
        for key in keys:  # the producer's retry: the same key and content, a new message id
            rig.publisher.publish(PAYLOAD, dedup_key=key)
            rig.push_last()


def _delayed(rig: Rig, run: str, messages: int, out: dict[str, Window]) -> None:
    seen = rig.outcomes
    delayed = [f"{run}-late-{i}" for i in range(messages)]
    with window(rig.counter, messages, out, "delayed"):
        for key in delayed:
            rig.publisher.publish(PAYLOAD, dedup_key=key, delay=timedelta(seconds=1))
            rig.push_last()
        seen.wait(partial(seen.all_processed, delayed), "delayed messages")


def _fifo(
    rig: Rig, run: str, groups: int, out: dict[str, Window], name: str, *, reorder: bool
) -> None:
    seen = rig.outcomes
    with window(rig.counter, 2 * groups, out, name):
        for g in range(groups):
            group = f"{run}-{name}-{g}"
            rig.publisher.publish(PAYLOAD, fifo_group=group, dedup_key=f"{group}-1")
            rig.publisher.publish(PAYLOAD, fifo_group=group, dedup_key=f"{group}-2")
            if not reorder:
                rig.push_last(2)
            else:  # number 2 overtakes number 1 on the way: parked until 1 has run
                one, two = rig.sink.published[-2:]
                rig.sink.published.append(two)
                rig.push_last()
                seen.wait(partial(seen.has_outcome, f"{group}-2", "parked"), "park")
                rig.sink.published.append(one)
                rig.push_last()
            # Processed (and acked) in order; for a parked 2, number 1's delivery runs it too.
            keys = (f"{group}-1",) if reorder else (f"{group}-1", f"{group}-2")
            seen.wait(partial(seen.all_processed, keys), f"group {group}")


def _dead_lettered(rig: Rig, run: str, messages: int, out: dict[str, Window]) -> None:
    with window(rig.counter, messages, out, "dead_lettered"):
        for i in range(messages):  # a number without a group: the Publisher would refuse it
            rig.sink.publish(
                rig.topic("origin"),
                OutboundMessage(PAYLOAD, {"dedup_key": f"{run}-bad-{i}", "fifo_seq": "1"}),
            )
            rig.push_last()


def run_seeds(rig: Rig, messages: int, groups: int) -> dict[str, Window]:
    """The seeds' recipe (bench/cost_baseline) on Firestore, counted by the same wrappers."""
    client = firestore.Client(project=rig.project)
    sink = RecordingSink(PubSubSink())
    ingress = cost_baseline.SeedsIngress(
        client, sink, rig.topic("seeds-final"), rig.topic("dead-letter")
    )
    seen = Outcomes()
    consumer = cost_baseline.SeedsConsumer(client, f"seeds-{rig.run}", seen.handler)
    subscriber = pubsub_v1.SubscriberClient()
    origin = rig.topic("origin")
    out: dict[str, Window] = {}
    run = f"{rig.run}-{uuid.uuid4().hex[:4]}"

    def publish_and_push(message: OutboundMessage) -> None:
        message_id = sink.publish(origin, message)
        ingress.handle_push_body(push_body(message_id, message, rig.push_subscription))

    def drain(predicate: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + WAIT_SECONDS
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError(f"seeds recipe: gave up waiting for {what}")
            cost_baseline.pull_and_process(subscriber, rig.seeds_sub, consumer, seen.on_outcome)

    keys = [f"seeds-{run}-imm-{i}" for i in range(messages)]
    with window(rig.counter, messages, out, "immediate"):
        for key in keys:
            publish_and_push(OutboundMessage(PAYLOAD, {"dedup_key": key}))
        drain(lambda: all(seen.handled[k] for k in keys), "immediate")
    with window(rig.counter, messages, out, "duplicate"):
        for key in keys:
            publish_and_push(OutboundMessage(PAYLOAD, {"dedup_key": key}))

    def fifo(name: str, reorder: bool) -> None:
        with window(rig.counter, 2 * groups, out, name):
            for g in range(groups):
                group = f"seeds-{run}-{name}-{g}"
                one, two = (
                    OutboundMessage(
                        PAYLOAD,
                        {"dedup_key": f"{group}-{s}", "fifo_group": group, "fifo_seq": str(s)},
                        group,
                    )
                    for s in (1, 2)
                )
                if reorder:  # 2 first: nacked (at least once) until 1 has run
                    publish_and_push(two)
                    drain(partial(seen.has_outcome, f"{group}-2", "early"), "nack")
                    publish_and_push(one)
                else:
                    publish_and_push(one)
                    publish_and_push(two)
                keys = (f"{group}-1", f"{group}-2")
                drain(partial(seen.all_handled, keys), f"group {group}")

    fifo("fifo_in_order", reorder=False)
    fifo("fifo_parked_pairs", reorder=True)
    out["fifo_parked"] = derive_parked(out["fifo_in_order"], out["fifo_parked_pairs"], groups)
    with window(rig.counter, messages, out, "dead_lettered"):
        for i in range(messages):
            publish_and_push(
                OutboundMessage(PAYLOAD, {"dedup_key": f"bad-{run}-{i}", "fifo_seq": "1"})
            )
    subscriber.close()
    return out


def install(counter: CostCounter) -> Callable[[], None]:
    """Install the counting wrappers and the entry-point wrappers; returns the undo."""
    from bench.cost_baseline import SeedsConsumer, SeedsIngress

    counter.install()
    undo = [
        wrap_entry(counter, Ingress, "handle_push_body", "ingress", push=True),
        wrap_entry(counter, Relay, "release", "relay"),
        wrap_entry(counter, MessageProcessor, "process", "consumer"),
        wrap_entry(counter, Publisher, "publish", "producer"),
        wrap_entry(counter, SeedsIngress, "handle_push_body", "ingress", push=True),
        wrap_entry(counter, SeedsConsumer, "process", "consumer"),
    ]

    def uninstall() -> None:
        for step in reversed(undo):
            step()
        counter.uninstall()

    return uninstall


def priced(windows: dict[str, Window]) -> dict[str, Any]:
    """Raw counts and $ per million for each path (the helper run ``fifo_parked_pairs`` too)."""
    return {
        path: w.as_json() | {"usd_per_million": dollars_per_million(w.totals)}
        for path, w in windows.items()
    }


def measure(
    servers: Servers,
    *,
    messages: int,
    groups: int,
    backends: tuple[str, ...] = BACKENDS,
    seeds: bool = True,
    quiet: bool = False,
) -> dict[str, Any]:
    """Run every path for ``backends`` (and the seeds' recipe) and return the JSON payload."""
    counter = CostCounter()
    uninstall = install(counter)
    results: dict[str, Any] = {}
    try:
        for backend in backends:
            with Rig(servers, counter, backend, quiet=quiet) as rig:
                # A first, unmeasured round: script loads and connection set-up are per
                # process, not per message.
                run_paths(rig, 1, 1)
                results[backend] = priced(run_paths(rig, messages, groups))
                if seeds and backend == "firestore":
                    run_seeds(rig, 1, 1)
                    results["seeds_recipe"] = priced(run_seeds(rig, messages, groups))
            print(f"{backend}: done", flush=True)
    finally:
        uninstall()
    return {
        "settings": {"messages_per_path": messages, "fifo_groups": groups, "payload_bytes": 256},
        "paths": results,
        "prices": PRICES.table(),
        "memorystore_fixed_usd_per_month": {"1_gb_basic": memorystore_month(1.0)},
    }


SUMMARY = (
    ("pubsub msgs", ("pubsub.published.final", "pubsub.published.dead-letter")),
    ("deliveries", ("pubsub.push_deliveries", "pubsub.pulled")),
    ("fs reads", ("firestore.reads",)),
    ("fs writes", ("firestore.writes",)),
    ("fs deletes", ("firestore.deletes",)),
    ("redis cmds", ("redis_commands",)),
    ("tasks ops", ("tasks.billable_operations", "tasks.dispatch_attempts")),
    ("invocations", ("invocations.ingress", "invocations.relay", "invocations.consumer")),
)


def print_table(payload: dict[str, Any]) -> None:
    head = f"{'backend':<13} {'path':<15}" + "".join(f"{h:>12}" for h, _ in SUMMARY)
    print(head + f"{'$/M':>10}")
    for backend, paths in payload["paths"].items():
        for path, figures in paths.items():
            if path == "fifo_parked_pairs":
                continue
            per = figures["per_message"]
            cells = "".join(f"{sum(per.get(n, 0.0) for n in names):>12.2f}" for _, names in SUMMARY)
            usd = figures["usd_per_million"]["total"]
            print(f"{backend:<13} {path:<15}{cells}{usd:>10.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=40, help="messages per path")
    parser.add_argument("--groups", type=int, default=20, help="FIFO groups (2 messages each)")
    args = parser.parse_args()
    # Every decision the library logs, and every relay request, would bury the table.
    for name in ("pubsub_toolkit", "werkzeug"):
        logging.getLogger(name).setLevel(logging.ERROR)
    with local_servers() as servers:
        payload = measure(servers, messages=args.messages, groups=args.groups, quiet=True)
    path = write_result("cost", payload)
    print_table(payload)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
