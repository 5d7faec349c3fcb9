"""bench/compare_workloads: one variant's measurements for bench/compare, in its own interpreter.

``bench/compare`` starts this file as ``python -I bench/compare_workloads.py --tree T ...`` for
each variant (the baseline commit's worktree, the current tree) and asks it for one phase (one
metric) at a time over stdin/stdout, so the two variants' halves of a pair run seconds apart.
The same measuring code runs against both libraries, so it must load in both: while issue 26
moves the library's modules (a core package, the CLI out of the library), the old and the new
tree share only the public names. That is why this file does not reuse bench/dedup, bench/fifo
and bench/async_consumer (they import internals - stores, gates, the private ``_on_message`` -
by today's paths) but repeats their workloads through :data:`LIBRARY` only: every library name
used here is in that table, resolved once at start, and a missing one stops the worker with the
name (keep those names stable, or update the table for both trees).

The workloads (:func:`phases`):

* ``dedup``: claim + effect + complete of distinct keys through ``IdempotentProcessor.process``
  on memory, Redis and Firestore, 1 and 8 threads (bench/dedup's claims, through the public
  processor rather than the store, since the claim loop leaves the stores); ingress
  (``Ingress.handle``, publishing to the Pub/Sub emulator, 8 threads) per backend and a
  pass-through that publishes with the bare client (no library: the noise reference).
* ``fifo``: a ``Consumer`` (concurrency 16, handler 5 ms of I/O) draining a prepared emulator
  subscription, messages over 1, 4, 16, 64 FIFO groups and unordered (bench/fifo's groups).
* ``async_consumer``: ``Consumer`` with an ``async def`` and with a sync handler (5 ms of I/O
  each, concurrency 64) on Redis, messages over 1, 16 and 64 groups, fed by a stand-in
  subscriber client through the public ``subscriber=`` argument - bench/async_consumer's
  workload, whose figure is the consumer's, not the emulator's stream.

Machine-independent counts ride along: Redis commands and round trips and Firestore RPCs sent
by the process (sync clients, patched in here), and for the async consumer the Redis server's
own command count.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import hashlib
import importlib
import json
import sys
import threading
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

KINDS = ("dedup", "fifo", "async_consumer")

# Every library name the measuring code uses: short name -> "module:attribute". Calls on them:
# Settings.from_env(env), ConsumerSettings.from_env(env),
# MessageProcessor.from_settings(settings, consumer_settings, handler) (sync and async handler),
# Consumer(subscription, processor, concurrency=, subscriber=).start() / .stop(timeout),
# IdempotentProcessor(store, namespace=, lease=, ttl=).process(key, fingerprint, effect),
# dedup_store_from_settings(settings), Ingress.from_settings(settings).handle(message),
# Message(data, attributes, message_id=).
LIBRARY = {
    "Settings": "pubsub_toolkit:Settings",
    "ConsumerSettings": "pubsub_toolkit:ConsumerSettings",
    "MessageProcessor": "pubsub_toolkit:MessageProcessor",
    "Consumer": "pubsub_toolkit:Consumer",
    "IdempotentProcessor": "pubsub_toolkit:IdempotentProcessor",
    "Message": "pubsub_toolkit:Message",
    "dedup_store_from_settings": "pubsub_toolkit.stores.factory:dedup_store_from_settings",
    "Ingress": "pubsub_toolkit.ingress.pipeline:Ingress",
}

LEASE, TTL = timedelta(seconds=60), timedelta(hours=1)
HANDLER_IO_SECONDS = 0.005
DEDUP_THREADS = 8
FIFO_CONCURRENCY = 16
ASYNC_CONCURRENCY = 64
ASYNC_GROUPS = (1, 16, 64)
BACKENDS = ("memory", "redis", "firestore")
# Items per dedup phase = --claims x this: each phase then lasts about a second or more (memory
# does ~15k/s, Redis ~4k/s, the Firestore emulator 200-800/s), long enough to time.
DEDUP_SCALE = {"memory": 30, "redis": 6, "firestore": 1}


def consumer_messages(base: int, groups: int) -> int:
    """Messages for a consumer phase over ``groups`` groups: twice ``base`` from 16 groups on,
    where the run is fast and a short phase would be mostly noise."""
    return base if groups < 16 else 2 * base


WAIT_SECONDS = 300.0
# Connection set-up commands redis-py sends on every new connection: counted apart, since how
# many connections a pool opens depends on thread timing, not on the library's protocol.
REDIS_SETUP = frozenset({"CLIENT", "HELLO", "AUTH", "SELECT", "PING", "INFO"})
FIRESTORE_RPCS = (
    "get_document",
    "list_documents",
    "create_document",
    "update_document",
    "delete_document",
    "batch_get_documents",
    "begin_transaction",
    "commit",
    "rollback",
    "run_query",
    "run_aggregation_query",
    "batch_write",
)


def resolve_library() -> dict[str, Any]:
    """Every name of :data:`LIBRARY`, imported; SystemExit naming the first that is missing."""
    names: dict[str, Any] = {}
    for short, target in LIBRARY.items():
        module, _, attribute = target.partition(":")
        try:
            names[short] = getattr(importlib.import_module(module), attribute)
        except (ImportError, AttributeError) as exc:
            raise SystemExit(
                f"bench/compare needs {module}.{attribute} in both trees ({exc}); keep it "
                "importable there or update LIBRARY in bench/compare_workloads.py"
            ) from None
    return names


# --------------------------------------------------------------------------------------------
# Store traffic, counted in the clients (not the library): the same patch for both variants.
# --------------------------------------------------------------------------------------------


class StoreCounter:
    """Counts what this process sends to Redis and Firestore (patched into the client classes)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: Counter[str] = Counter()

    def add(self, **amounts: int) -> None:
        with self._lock:
            self.counts.update(amounts)

    def add_names(self, prefix: str, names: list[str]) -> None:
        with self._lock:
            for name in names:
                self.counts[f"{prefix}{name}"] += 1

    def snapshot(self) -> Counter[str]:
        with self._lock:
            return Counter(self.counts)

    def install(self) -> None:
        self._install_redis()
        self._install_firestore()

    def _install_redis(self) -> None:
        from redis import connection

        cls: Any = connection.AbstractConnection  # patched: typed as Any on purpose
        send_packed, send_command, pack_commands = (
            cls.send_packed_command,
            cls.send_command,
            cls.pack_commands,
        )

        def name_of(args: tuple[Any, ...]) -> str:
            first = args[0] if args else b"?"
            text = first.decode() if isinstance(first, bytes) else str(first)
            return text.split()[0].upper() if text.strip() else "?"

        def record(names: list[str]) -> None:
            setup = [n for n in names if n in REDIS_SETUP]
            real = [n for n in names if n not in REDIS_SETUP]
            self.add_names("redis_setup.", setup)
            self.add_names("redis_cmd.", real)
            self.add(redis_commands=len(real))

        def counted_send_command(conn: Any, *args: Any, **kwargs: Any) -> Any:
            name = name_of(args)
            record([name])
            if name not in REDIS_SETUP:
                self.add(redis_round_trips=1)
            conn._ptk_counted = True
            try:
                return send_command(conn, *args, **kwargs)
            finally:
                conn._ptk_counted = False

        def counted_pack_commands(conn: Any, commands: Any) -> Any:
            commands = list(commands)
            record([name_of(tuple(c)) for c in commands])
            return pack_commands(conn, commands)

        def counted_send_packed(conn: Any, command: Any, *args: Any, **kwargs: Any) -> Any:
            if not getattr(conn, "_ptk_counted", False):  # a pipeline's batch: one round trip
                self.add(redis_round_trips=1)
            return send_packed(conn, command, *args, **kwargs)

        cls.send_command = counted_send_command
        cls.pack_commands = counted_pack_commands
        cls.send_packed_command = counted_send_packed

    def _install_firestore(self) -> None:
        from google.cloud.firestore_v1.services.firestore.client import FirestoreClient

        for rpc in FIRESTORE_RPCS:
            original = getattr(FirestoreClient, rpc, None)
            if original is None:
                continue

            def counted(
                client: Any, *args: Any, _rpc: str = rpc, _orig: Any = original, **kwargs: Any
            ) -> Any:
                request = kwargs.get("request", args[0] if args else None)
                writes = request.get("writes") if isinstance(request, dict) else None
                if writes is None and request is not None and not isinstance(request, dict):
                    writes = getattr(request, "writes", None)
                self.add(**{"firestore_rpcs": 1, f"firestore_rpc.{_rpc}": 1})
                if writes:
                    self.add(firestore_writes=len(writes))
                return _orig(client, *args, **kwargs)

            setattr(FirestoreClient, rpc, counted)


def per_item(before: Counter[str], after: Counter[str], items: int) -> dict[str, float]:
    """``after - before`` divided by ``items``, by counter name."""
    delta = after - before
    return {name: round(value / items, 4) for name, value in sorted(delta.items())}


# --------------------------------------------------------------------------------------------
# Shared pieces of the workloads.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Timed:
    """``items`` done in ``wall`` seconds, using ``cpu`` seconds of this process (every thread:
    the library's and its clients'). CPU per item hardly moves with other processes' load, so
    it is the figure to trust on a busy machine; wall-clock throughput is what issue 26 gates."""

    items: int
    wall: float
    cpu: float

    @property
    def per_second(self) -> float:
        return self.items / self.wall

    @property
    def per_cpu_second(self) -> float:
        return self.items / self.cpu if self.cpu > 0 else 0.0


class Stopwatch:
    """Wall clock and this process's CPU time from its creation."""

    def __init__(self) -> None:
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def read(self, items: int) -> Timed:
        return Timed(items, time.perf_counter() - self.wall, time.process_time() - self.cpu)


def rate(items: int, work: Callable[[int], object], *, threads: int) -> Timed:
    """``work(i)`` over ``items`` items on ``threads`` threads, timed."""
    watch = Stopwatch()
    if threads == 1:
        for i in range(items):
            work(i)
    else:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(work, range(items)))
    return watch.read(items)


def settings_env(backend: str, redis_url: str, project: str | None = None) -> dict[str, str]:
    """The environment a deployment sets, for ``backend``, in a project of its own."""
    return {
        "GOOGLE_CLOUD_PROJECT": project or f"cmp-{uuid.uuid4().hex[:8]}",
        "PUBSUB_TOOLKIT_FINAL_TOPIC": "final",
        "PUBSUB_TOOLKIT_DEAD_LETTER_TOPIC": "dead-letter",
        "PUBSUB_TOOLKIT_STORE_BACKEND": backend,
        "PUBSUB_TOOLKIT_REDIS_URL": redis_url,
        "PUBSUB_TOOLKIT_CONSUMER_ID": f"cmp-{uuid.uuid4().hex[:6]}",
    }


class Measurement:
    """What one worker collects: gated metrics, derived ratios and store traffic per item."""

    def __init__(self, counter: StoreCounter) -> None:
        self.counter = counter
        self.metrics: dict[str, float] = {}
        self.derived: dict[str, float] = {}
        self.phases: dict[str, dict[str, Any]] = {}
        self.cpu: dict[str, float] = {}  # items per CPU second of this process, by phase

    def timed(
        self, phase: str, items: int, run: Callable[..., Timed], *args: Any, **kw: Any
    ) -> Timed:
        """``run(*args, **kw)``, recording its store traffic per item."""
        before = self.counter.snapshot()
        timed = run(*args, **kw)
        self.phases[phase] = {
            "items": items,
            "counts": per_item(before, self.counter.snapshot(), items),
        }
        return timed

    def record(self, phase: str, timed: Timed) -> None:
        """``timed``'s throughput as the metric (or the reference) ``phase``, and its CPU."""
        section = self.derived if phase in REFERENCE else self.metrics
        section[phase] = round(timed.per_second, 1)
        self.cpu[phase] = round(timed.per_cpu_second, 1)
        print(f"{phase}: {timed.per_second:.1f}/s, {timed.per_cpu_second:.1f}/CPU s", flush=True)

    def result(self) -> dict[str, Any]:
        return {
            "metrics": self.metrics,
            "derived": self.derived,
            "cpu": self.cpu,
            "phases": self.phases,
        }


# --------------------------------------------------------------------------------------------
# dedup
# --------------------------------------------------------------------------------------------


def dedup_process(
    lib: dict[str, Any], args: argparse.Namespace, backend: str, threads: int
) -> Timed:
    """Calls per second of ``IdempotentProcessor.process`` on distinct keys (claim, the
    effect, complete) on ``backend``, from ``threads`` threads."""
    settings = lib["Settings"].from_env(settings_env(backend, args.redis_url))
    processor = lib["IdempotentProcessor"](
        lib["dedup_store_from_settings"](settings),
        namespace=f"cmp-{uuid.uuid4().hex[:8]}",
        lease=LEASE,
        ttl=TTL,
    )

    def one(i: int) -> None:
        processor.process(f"k{i}", "fp", lambda: "ok")

    return rate(args.claims * DEDUP_SCALE[backend], one, threads=threads)


def dedup_ingress(lib: dict[str, Any], args: argparse.Namespace, variant: str) -> Timed:
    """Messages per second through ``Ingress.handle`` on ``variant``'s backend, publishing to
    the Pub/Sub emulator from 8 threads; ``passthrough``: the bare client's publish alone (no
    library at all - the same code in both trees, so its ratio shows the noise)."""
    from google.cloud import pubsub_v1  # type: ignore[attr-defined]

    project = f"cmp-{uuid.uuid4().hex[:8]}"
    publisher = pubsub_v1.PublisherClient()
    final = publisher.create_topic(name=f"projects/{project}/topics/final").name
    publisher.create_topic(name=f"projects/{project}/topics/dead-letter")
    work: Callable[[int], object]
    if variant == "passthrough":

        def work(i: int) -> None:
            publisher.publish(final, b"x" * 256, n=str(i)).result(timeout=60)

    else:
        settings = lib["Settings"].from_env(settings_env(variant, args.redis_url, project))
        ingress = lib["Ingress"].from_settings(settings)
        message, tag = lib["Message"], uuid.uuid4().hex[:8]

        def work(i: int) -> None:
            ingress.handle(message(b"x" * 256, {"n": str(i)}, message_id=f"{tag}-{i}"))

    try:
        return rate(args.messages, work, threads=DEDUP_THREADS)
    finally:
        publisher.stop()


# --------------------------------------------------------------------------------------------
# fifo
# --------------------------------------------------------------------------------------------


def _prepare_subscription(messages: int, groups: int, *, fifo: bool) -> tuple[str, str]:
    """A new project's topics and a subscription holding ``messages`` over ``groups`` groups."""
    from google.cloud import pubsub_v1  # type: ignore[attr-defined]

    project = f"cmp-{uuid.uuid4().hex[:8]}"
    publisher = pubsub_v1.PublisherClient()
    subscriber = pubsub_v1.SubscriberClient()
    topic = publisher.create_topic(name=f"projects/{project}/topics/final").name
    publisher.create_topic(name=f"projects/{project}/topics/dead-letter")
    sub = subscriber.create_subscription(
        name=f"projects/{project}/subscriptions/final-sub", topic=topic, ack_deadline_seconds=60
    ).name
    subscriber.close()
    futures = []
    for i in range(messages):
        group, seq = f"g{i % groups}", i // groups + 1
        attrs = {"dedup_key": f"{group}-{seq}"}
        if fifo:
            attrs |= {"fifo_group": group, "fifo_seq": str(seq)}
        futures.append(publisher.publish(topic, b"x" * 128, **attrs))
    for future in futures:
        future.result(timeout=60)
    publisher.stop()
    return project, sub


def consume_subscription(
    lib: dict[str, Any], redis_url: str, messages: int, groups: int, *, fifo: bool
) -> Timed:
    """Messages per second for one Consumer (Redis stores) draining a prepared subscription."""
    project, sub = _prepare_subscription(messages, groups, fifo=fifo)
    handled = 0
    lock = threading.Lock()
    done = threading.Event()

    def handler(message: Any) -> None:
        nonlocal handled
        time.sleep(HANDLER_IO_SECONDS)  # the handler's I/O (one database call)
        with lock:
            handled += 1
            if handled >= messages:
                done.set()

    env = settings_env("redis", redis_url, project)
    settings, consumer_settings = (
        lib["Settings"].from_env(env),
        lib["ConsumerSettings"].from_env(env),
    )
    processor = lib["MessageProcessor"].from_settings(settings, consumer_settings, handler)
    consumer = lib["Consumer"](sub, processor, concurrency=FIFO_CONCURRENCY)
    watch = Stopwatch()
    consumer.start()
    try:
        finished = done.wait(timeout=WAIT_SECONDS)
        timed = watch.read(messages)
    finally:
        consumer.stop()
    if not finished:
        raise RuntimeError(f"only {handled}/{messages} handled in {WAIT_SECONDS:.0f} s")
    return timed


# --------------------------------------------------------------------------------------------
# async_consumer
# --------------------------------------------------------------------------------------------


class Received:
    """A stand-in for google-cloud-pubsub's received message: ack/nack report to ``done``."""

    def __init__(self, i: int, group: str, seq: int, done: Callable[[str], None]) -> None:
        self.data = f"{group}:{seq}".encode()
        self.attributes = {"fifo_group": group, "fifo_seq": str(seq), "dedup_key": f"{i}"}
        self.message_id, self.publish_time, self.ordering_key = str(i), None, ""
        self._done = done

    def ack(self) -> None:
        self._done("ack")

    def nack(self) -> None:
        self._done("nack")


class StandInSubscriber:
    """A stand-in for ``pubsub_v1.SubscriberClient``: ``subscribe`` keeps the callback and
    returns a future for the stream; the benchmark delivers by calling the callback, as the
    client's threads do. So the figure is the consumer's, not the emulator's stream."""

    def __init__(self) -> None:
        self.callback: Callable[[Any], None] | None = None
        self.stream: concurrent.futures.Future[None] = concurrent.futures.Future()

    def subscribe(self, subscription: str, callback: Any, **kwargs: Any) -> Any:
        self.callback = callback
        return self.stream

    def close(self) -> None:
        pass


def server_commands(client: Any) -> int:
    """The Redis server's own count of commands processed (counts the async client too)."""
    return int(client.info("stats")["total_commands_processed"])


async def _async_handler(message: Any) -> None:
    await asyncio.sleep(HANDLER_IO_SECONDS)  # 5 ms of awaited I/O


def _sync_handler(message: Any) -> None:
    time.sleep(HANDLER_IO_SECONDS)  # 5 ms of blocking I/O (a convoy thread waits)


def consume_fed(
    lib: dict[str, Any], redis_url: str, messages: int, groups: int, *, aio: bool
) -> tuple[Timed, float]:
    """(messages per second, Redis commands per message) for a Consumer fed directly."""
    import redis

    answered: list[str] = []
    lock = threading.Lock()
    finished = threading.Event()

    def done(outcome: str) -> None:
        with lock:
            answered.append(outcome)
            if len(answered) == messages:
                finished.set()

    handler: Callable[[Any], Any] = _async_handler if aio else _sync_handler
    env = settings_env("redis", redis_url)
    settings, consumer_settings = (
        lib["Settings"].from_env(env),
        lib["ConsumerSettings"].from_env(env),
    )
    processor = lib["MessageProcessor"].from_settings(settings, consumer_settings, handler)
    subscriber = StandInSubscriber()
    consumer = lib["Consumer"](
        "projects/cmp/subscriptions/fed",
        processor,
        concurrency=ASYNC_CONCURRENCY,
        subscriber=subscriber,
    )
    batch = [Received(i, f"g{i % groups}", i // groups + 1, done) for i in range(messages)]
    counter = redis.Redis.from_url(redis_url)
    try:
        consumer.start()
        if subscriber.callback is None:
            raise RuntimeError("Consumer.start() did not subscribe through `subscriber`")
        before = server_commands(counter)
        watch = Stopwatch()
        for received in batch:
            subscriber.callback(received)
        if not finished.wait(timeout=WAIT_SECONDS):
            raise RuntimeError(f"only {len(answered)}/{messages} answered in {WAIT_SECONDS} s")
        timed = watch.read(messages)
        used = server_commands(counter) - before - 1  # less our own INFO
    finally:
        consumer.stop()
        counter.close()
    if answered.count("ack") != messages:
        raise RuntimeError(f"not every message acked: {Counter(answered)}")
    return timed, used / messages


# --------------------------------------------------------------------------------------------
# Phases: one measurement each, named as its metric; the driver asks for them one by one.
# --------------------------------------------------------------------------------------------


def phases(kind: str, groups: list[int]) -> list[str]:
    """The metrics of ``kind``, in the order the driver asks for them (one phase each)."""
    if kind == "dedup":
        return [
            f"dedup.process_per_s.{backend}.{threads}t"
            for backend in BACKENDS
            for threads in (1, DEDUP_THREADS)
        ] + [f"dedup.ingress_msgs_per_s.{v}" for v in ("passthrough", *BACKENDS)]
    if kind == "fifo":
        return [f"fifo.msgs_per_s.groups_{g}" for g in groups] + ["fifo.msgs_per_s.unordered_16"]
    return [
        f"async_consumer.msgs_per_s.{variant}.groups_{g}"
        for g in ASYNC_GROUPS
        for variant in ("async", "threaded")
    ]


# Not gated (see bench/compare): the same code in both trees, a gauge of the noise.
REFERENCE = frozenset({"dedup.ingress_msgs_per_s.passthrough"})


def run_phase(lib: dict[str, Any], args: argparse.Namespace, name: str, out: Measurement) -> None:
    """Measure the metric ``name`` into ``out`` (its value, CPU and store traffic per item)."""
    parts = name.split(".")
    if name.startswith("dedup.process_per_s."):
        backend, threads = parts[2], int(parts[3].removesuffix("t"))
        items = args.claims * DEDUP_SCALE[backend]
        timed = out.timed(name, items, dedup_process, lib, args, backend, threads)
    elif name.startswith("dedup.ingress_msgs_per_s."):
        timed = out.timed(name, args.messages, dedup_ingress, lib, args, parts[2])
    elif name.startswith("fifo.msgs_per_s."):
        fifo = parts[2].startswith("groups_")
        groups = int(parts[2].rsplit("_", 1)[1])
        n = consumer_messages(args.fifo_messages, groups)
        timed = out.timed(name, n, consume_subscription, lib, args.redis_url, n, groups, fifo=fifo)
    elif name.startswith("async_consumer.msgs_per_s."):
        groups = int(parts[3].removeprefix("groups_"))
        n = consumer_messages(args.async_messages, groups)
        timed, per_message = consume_fed(lib, args.redis_url, n, groups, aio=parts[2] == "async")
        out.phases[name] = {"items": n, "counts": {"redis_server_commands": round(per_message, 4)}}
    else:
        raise ValueError(f"no phase {name!r}")
    out.record(name, timed)


# --------------------------------------------------------------------------------------------
# Entry point (run by bench/compare, never by hand).
# --------------------------------------------------------------------------------------------


def loaded_library(shared: Path) -> dict[str, Any]:
    """Loaded pubsub_toolkit modules from outside ``shared``, and a digest of its sources."""
    foreign = []
    for name in sorted(sys.modules):
        if name == "pubsub_toolkit" or name.startswith("pubsub_toolkit."):
            file = getattr(sys.modules[name], "__file__", None)
            if file is not None and not Path(file).resolve().is_relative_to(shared):
                foreign.append(str(file))
    digest = hashlib.sha256()
    for path in sorted((shared / "pubsub_toolkit").rglob("*.py")):
        digest.update(str(path.relative_to(shared)).encode() + b"\0" + path.read_bytes())
    library = Path(sys.modules["pubsub_toolkit"].__file__ or "?").resolve()
    return {
        "foreign_modules": foreign,
        "library_sha256": digest.hexdigest(),
        # Relative to the tree it ran from: no machine path in the results.
        "pubsub_toolkit_file": str(library.relative_to(shared.parent)),
    }


def serve(lib: dict[str, Any], args: argparse.Namespace, replies: Any, shared: Path) -> None:
    """Answer the driver's requests, one JSON line each way: ``{"phase": name}`` -> that
    phase's ``metrics``/``derived``/``phases`` (or ``error``); ``{"quit": true}`` -> the
    check that every loaded library module came from ``shared``, then exit."""
    counter = StoreCounter()
    counter.install()

    def reply(payload: dict[str, Any]) -> None:
        replies.write(json.dumps(payload) + "\n")
        replies.flush()

    reply({"ready": True})
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("quit"):
            reply(loaded_library(shared))
            return
        out = Measurement(counter)
        started = time.perf_counter()
        try:
            run_phase(lib, args, request["phase"], out)
        except Exception:  # reported to the driver, which records the variant's run as failed
            reply({"error": traceback.format_exc(limit=8)})
            continue
        reply(out.result() | {"seconds": round(time.perf_counter() - started, 2)})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, required=True)
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--claims", type=int, required=True)
    parser.add_argument("--messages", type=int, required=True)
    parser.add_argument("--fifo-messages", type=int, required=True)
    parser.add_argument("--async-messages", type=int, required=True)
    args = parser.parse_args(argv)
    # The protocol owns stdout; every print (ours, the library's) goes to the log on stderr.
    replies, sys.stdout = sys.stdout, sys.stderr
    shared = (args.tree / "shared").resolve()
    sys.path.insert(0, str(shared))  # -I: neither PYTHONPATH nor the script's folder
    import pubsub_toolkit

    library = Path(pubsub_toolkit.__file__).resolve()
    if not library.is_relative_to(shared):
        raise SystemExit(f"pubsub_toolkit imported from {library}, not from {shared}")
    serve(resolve_library(), args, replies, shared)


if __name__ == "__main__":
    main()
