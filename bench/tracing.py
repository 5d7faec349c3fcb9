"""bench/tracing: what OpenTelemetry tracing costs Ingress.handle, on and off, in one run.

Why: issue 16 asks for "Ingress throughput with tracing on / off (same run) >= 0.95, and no
measurable cost with tracing off". Figures from different runs prove nothing on these shared
machines, so every variant is measured in the same run, round by round, the order rotating.

``make bench-tracing`` (``python -m bench.tracing``) runs two parts, ``--parts`` choosing
(a part not run keeps its section of ``bench/results/tracing.json``):

**deployed** (the headline): the ingress as deployed, as ``bench/dedup.py``'s ``bench_ingress`` -
``Ingress.handle`` on ``--threads`` (8) threads publishing through ``PubSubSink`` to the Pub/Sub
emulator, the dedup store on redis-server or the Firestore emulator (``bench.common
.local_servers`` starts and stops them). One process: one ``PubSubSink`` and one client per
backend for the run, a fresh ``Ingress`` (own key prefix / collection) per round and variant, and
one SDK ``TracerProvider`` (``BatchSpanProcessor`` + an exporter that drops spans) installed
once; ``tracing.enable(True/False)`` switches between rounds. Same process rather than one per
variant, so that only the tracing differs (same publisher client, channels, store connections,
warm caches); off is the same code path either way (every hook returns at its enabled check).
Variants ``off``, ``off_twin`` (A/A), ``on_batch`` and ``on_sampled`` (``ParentBased
(TraceIdRatioBased(0.1))``). The mix: see :func:`deployed_messages`. A warm-up round, then
``--deployed-rounds`` rounds, every backend and variant per round, the order rotating; the
timer stops after ``force_flush()``. ``--profile deployed_on|deployed_off`` profiles one Redis
round on one thread instead.

**in_process** (the lower bound, and "no cost when off" against the library before tracing):

* ``git worktree add --detach`` the commit before tracing existed (default ``1839f16``) at
  ``/tmp/pre-tracing`` (removed at the end), and starts one redis-server on a free loopback
  port (stopped by its process group at the end).
* Starts one long-lived worker process per variant (``python -I``, ``sys.path`` starting with
  that tree's ``shared/``; the worker checks every ``pubsub_toolkit`` module it loaded comes
  from there):

  - ``pre``: the library at the pre-tracing commit - no hooks at all;
  - ``off``: the current library, tracing off (the default; OpenTelemetry is never imported,
    which the worker checks and reports);
  - ``off_twin``: a second, identical ``off`` process - the A/A pair that shows how far two
    processes running the same code differ here (the noise floor for "no measurable cost");
  - ``on_batch``: tracing on, the SDK ``TracerProvider`` with a ``BatchSpanProcessor`` and an
    exporter that drops the spans (the production shape minus the network); the round's timer
    stops only after ``force_flush()``, so the export thread's work for every span is inside;
  - ``on_simple``: tracing on, ``SimpleSpanProcessor`` + ``InMemorySpanExporter`` (what the
    tests use; the spans are cleared between rounds, outside the timer);
  - ``on_sampled``: as ``on_batch`` with the SDK sampler ``ParentBased(TraceIdRatioBased(0.1))``
    (a setting of the user's provider, not of the toolkit): one message in ten recorded;
  - with ``--candidate TREE``, ``cand_off`` and ``cand_on_batch``: ``off`` and ``on_batch`` on
    another tree (a copy of ``shared/`` with a proposed ``tracing.py``), measured alongside.

* Two workloads, each a fresh ``Ingress`` per round (built outside the timer) with a recording
  sink and scheduler (our own protocols - no Pub/Sub emulator, whose noise would drown the
  difference): ``memory`` (``MemoryBackend``'s dedup store) and ``redis`` (``RedisDedupStore``
  on the local redis-server, a fresh key prefix per round; FLUSHDB between rounds). One thread,
  ``handle(message)`` in a loop over the same deterministic mix every round: per 100 messages,
  ~73 plain (320-byte payload), 10 FIFO (8 groups), 5 delayed (scheduled), 2 contract violations
  (dead-lettered), 10 redeliveries of an earlier message (duplicates). No message carries a
  ``googclient_traceparent`` from its producer: at dac777e ingress dead-letters such a message
  (``reserved_attribute``, the ``goog`` prefix), which would measure the dead-letter path, so
  every process span here is a root. Decision logs go through
  ``configure_logging`` (Cloud Logging JSON, as the entry points do) into /dev/null
  (``--logs none`` leaves logging unconfigured).
* A warm-up round (not counted), then ``--rounds`` rounds. Each worker reports messages/s (wall)
  and CPU microseconds per message (``time.process_time``: every thread of the process, so the
  export thread too), the outcome counts (the driver checks every variant did the same work)
  and the spans exported per message.

Reported per workload: each variant's median messages/s and CPU us/message, and per pair
(``on_batch/off``, ``on_simple/off``, ``off/pre``, ``off_twin/off``) the median of the
per-round throughput ratios with their min-max spread. JSON goes to
``bench/results/tracing.json``; a table is printed.

``--profile VARIANT`` (``off``, ``on_batch``, ``on_simple``) instead runs the memory workload
in this process under cProfile and prints the top functions by own time.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any

REPO = Path(__file__).resolve().parents[1]
PRE_TRACING = "1839f16"
WORKTREE = Path("/tmp/pre-tracing")
VARIANTS = ("pre", "off", "off_twin", "on_batch", "on_simple", "on_sampled")
# With --candidate TREE: the same variants run on another tree (a proposed tracing.py).
CANDIDATES = ("cand_off", "cand_on_batch")
SAMPLE_RATIO = 0.1
WORKLOADS = ("memory", "redis")
LEASE, TTL = timedelta(seconds=60), timedelta(hours=1)
FINAL, DEAD = "projects/bench/topics/final", "projects/bench/topics/dead-letter"
PUBLISHED_AT = datetime(2026, 1, 1, tzinfo=UTC)
# (numerator, denominator) pairs reported as per-round ratios.
PAIRS = (
    ("on_batch", "off"),
    ("on_simple", "off"),
    ("off", "pre"),
    ("off_twin", "off"),
    ("on_sampled", "off"),
    ("cand_on_batch", "off"),
    ("cand_on_batch", "on_batch"),
    ("cand_off", "off"),
)
TARGET = 0.95


# --------------------------------------------------------------------------------------------
# Worker: one variant, many rounds, in its own interpreter.
# --------------------------------------------------------------------------------------------


class RecordingSink:
    """Our MessageSink protocol: keeps what was published (cleared per round), ids counted."""

    def __init__(self) -> None:
        self.published: list[tuple[str, Any]] = []

    def publish(self, topic: str, message: Any) -> str:
        self.published.append((topic, message))
        return str(len(self.published))


class RecordingScheduler:
    """Our Scheduler protocol: a task name per delayed message, nothing sent anywhere."""

    queue = "projects/bench/locations/here/queues/delay"

    def __init__(self) -> None:
        self.tasks: list[Any] = []

    def schedule(self, message: Any, deliver_at: datetime, dedup_key: str) -> str:
        self.tasks.append(message)
        return f"{self.queue}/tasks/{dedup_key}-{len(self.tasks)}"


def workload_messages(count: int, tag: str) -> list[Any]:
    """The deterministic mix (see the module docstring); ``tag`` makes the keys unique."""
    from pubsub_toolkit.message import Message

    out: list[Any] = []
    seqs: Counter[str] = Counter()
    for i in range(count):
        if i % 10 == 9:  # a redelivery of a plain message three places back: a duplicate
            out.append(out[i - 3])
            continue
        attributes = {"dedup_key": f"{tag}-{i}", "source": "bench", "kind": f"k{i % 3}"}
        group = ""
        if i % 10 == 4:
            group = f"{tag}-g{(i // 10) % 8}"
            seqs[group] += 1
            attributes |= {"fifo_group": group, "fifo_seq": str(seqs[group])}
        elif i % 20 == 2:
            attributes["delay_seconds"] = "3600"
        elif i % 50 == 17:
            attributes["goog_internal"] = "x"  # reserved: dead-lettered
        data = (f"{i:08d}" * 40).encode()
        out.append(
            Message(
                data,
                attributes,
                message_id=f"{tag}-m{i}",
                publish_time=PUBLISHED_AT,
                ordering_key=group,
            )
        )
    return out


class DroppingExporter:
    """A SpanExporter that counts the spans and drops them (the network left out)."""

    def __init__(self) -> None:
        self.exported = 0

    def export(self, spans: Any) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        self.exported += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


class Tracing:
    """The variant's tracing set-up: span counting and flushing, nothing when off."""

    def __init__(self, variant: str) -> None:
        self.provider: Any = None
        self.memory: Any = None
        self.dropping: DroppingExporter | None = None
        variant = variant.removeprefix("cand_")
        if not variant.startswith("on_"):
            return
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        from pubsub_toolkit import tracing

        sampler = None
        if variant == "on_sampled":
            from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

            sampler = ParentBased(TraceIdRatioBased(SAMPLE_RATIO))
        self.provider = TracerProvider(sampler=sampler)
        if variant in ("on_batch", "on_sampled"):
            self.dropping = DroppingExporter()
            self.provider.add_span_processor(BatchSpanProcessor(self.dropping))  # type: ignore[arg-type]
        else:
            self.memory = InMemorySpanExporter()
            self.provider.add_span_processor(SimpleSpanProcessor(self.memory))
        trace.set_tracer_provider(self.provider)
        tracing.enable()

    def flush(self) -> None:
        if self.provider is not None:
            self.provider.force_flush()

    def spans(self) -> int:
        """Spans exported since the last call (and the in-memory exporter emptied)."""
        if self.dropping is not None:
            count, self.dropping.exported = self.dropping.exported, 0
            return count
        if self.memory is not None:
            count = len(self.memory.get_finished_spans())
            self.memory.clear()
            return count
        return 0


def make_ingress(workload: str, redis_url: str, prefix: str) -> Any:
    from pubsub_toolkit.ingress.pipeline import Ingress

    if workload == "memory":
        from pubsub_toolkit.stores.backends.memory import MemoryBackend

        store: Any = MemoryBackend().dedup_store()
    else:
        from pubsub_toolkit.stores.dedup.redis import RedisDedupStore

        store = RedisDedupStore.from_url(redis_url, prefix=prefix)
    return Ingress(
        store=store,
        sink=RecordingSink(),
        final_topic=FINAL,
        dead_letter_topic=DEAD,
        lease=LEASE,
        ttl=TTL,
        scheduler=RecordingScheduler(),
    )


def measure(
    variant: str, tracer: Tracing, command: dict[str, Any], redis_url: str
) -> dict[str, Any]:
    tag = f"{variant}-{command['workload']}-r{command['round']}"
    ingress = make_ingress(command["workload"], redis_url, f"bench-tracing:{tag}:")
    messages = workload_messages(command["messages"], tag)
    tracer.spans()
    gc.collect()
    outcomes: Counter[str] = Counter()
    cpu, wall = time.process_time(), time.perf_counter()
    for message in messages:
        outcomes[ingress.handle(message).outcome.value] += 1
    tracer.flush()  # the export thread's work for this round's spans counts
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    count = len(messages)
    return {
        "msgs_per_s": round(count / wall, 1),
        "cpu_us_per_msg": round(cpu / count * 1e6, 2),
        "spans_per_msg": round(tracer.spans() / count, 3),
        "outcomes": dict(sorted(outcomes.items())),
    }


def _library_check(shared: Path) -> list[str]:
    foreign = []
    for name, module in sorted(sys.modules.items()):
        if name == "pubsub_toolkit" or name.startswith("pubsub_toolkit."):
            file = getattr(module, "__file__", None)
            if file is not None and not Path(file).resolve().is_relative_to(shared):
                foreign.append(file)
    return foreign


def configure_logs(mode: str) -> None:
    if mode == "json":
        from pubsub_toolkit.observability import configure_logging

        configure_logging()  # Cloud Logging JSON on sys.stdout, which is /dev/null here


def worker(args: argparse.Namespace) -> None:
    shared = (Path(args.tree) / "shared").resolve()
    sys.path[:0] = [str(shared), str(REPO)]  # -I: neither PYTHONPATH nor the script's folder
    protocol = os.fdopen(os.dup(1), "w", buffering=1)  # results; stdout itself is /dev/null
    devnull = open(os.devnull, "w")  # noqa: SIM115 - for the life of the process
    os.dup2(devnull.fileno(), 1)
    sys.stdout = devnull
    import pubsub_toolkit

    configure_logs(args.logs)
    tracer = Tracing(args.worker)
    make_ingress("memory", args.redis_url, "")  # import what a round needs before the first
    workload_messages(10, "import")
    protocol.write(
        json.dumps(
            {
                "ready": True,
                "library": str(Path(pubsub_toolkit.__file__).resolve()),
                "opentelemetry_imported": "opentelemetry" in sys.modules,
            }
        )
        + "\n"
    )
    for line in sys.stdin:
        command = json.loads(line)
        if command.get("quit"):
            break
        result = measure(args.worker, tracer, command, args.redis_url)
        result["foreign_modules"] = _library_check(shared)
        result["opentelemetry_imported"] = "opentelemetry" in sys.modules
        protocol.write(json.dumps(result) + "\n")


# --------------------------------------------------------------------------------------------
# Deployed shape: Ingress.handle publishing to the Pub/Sub emulator, on Redis and Firestore.
# --------------------------------------------------------------------------------------------

DEPLOYED_VARIANTS = ("off", "off_twin", "on_batch", "on_sampled")
DEPLOYED_BACKENDS = ("redis", "firestore")
DEPLOYED_PAIRS = (
    ("on_batch", "off"),
    ("on_sampled", "off"),
    ("off_twin", "off"),
)


def deployed_messages(count: int, tag: str) -> list[Any]:
    """Per 100: 78 plain (320-byte payload), 10 FIFO (8 groups, an ordering key each), 2
    contract violations (dead-lettered: a publish to the dead-letter topic) and 10 redeliveries
    of the message 50 places back (duplicates: long finished even on 8 threads). No delayed
    messages: ``local_servers`` has no Cloud Tasks, and a scheduled message is one more call."""
    from pubsub_toolkit.message import Message

    out: list[Any] = []
    seqs: Counter[str] = Counter()
    for i in range(count):
        if i % 10 == 9 and i >= 50:
            out.append(out[i - 50])
            continue
        attributes = {"dedup_key": f"{tag}-{i}", "source": "bench", "kind": f"k{i % 3}"}
        group = ""
        if i % 10 == 4:
            group = f"{tag}-g{(i // 10) % 8}"
            seqs[group] += 1
            attributes |= {"fifo_group": group, "fifo_seq": str(seqs[group])}
        elif i % 50 == 17:
            attributes["goog_internal"] = "x"  # reserved: dead-lettered
        out.append(
            Message(
                (f"{i:08d}" * 40).encode(),
                attributes,
                message_id=f"{tag}-m{i}",
                publish_time=PUBLISHED_AT,
                ordering_key=group,
            )
        )
    return out


class SwitchedTracing:
    """One SDK provider for the whole run (BatchSpanProcessor, dropping exporter), installed
    once; each round turns the toolkit's tracing on or off with ``tracing.enable``. The
    provider's sampler is a switch (this SDK caches one tracer per scope, with the sampler it
    had when first asked for): ``on_batch`` records every trace (``ParentBased(ALWAYS_ON)``, the
    SDK default), ``on_sampled`` one in ten (``ParentBased(TraceIdRatioBased(0.1))``)."""

    def __init__(self) -> None:
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.sampling import (
            ALWAYS_ON,
            ParentBased,
            Sampler,
            TraceIdRatioBased,
        )

        class Switch(Sampler):
            def __init__(self, inner: Sampler) -> None:
                self.inner = inner

            def should_sample(self, *args: Any, **kwargs: Any) -> Any:
                return self.inner.should_sample(*args, **kwargs)

            def get_description(self) -> str:
                return self.inner.get_description()

        self.full = ParentBased(ALWAYS_ON)
        self.sampled = ParentBased(TraceIdRatioBased(SAMPLE_RATIO))
        self.switch = Switch(self.full)
        self.exporter = DroppingExporter()
        self.provider = TracerProvider(sampler=self.switch)
        self.provider.add_span_processor(BatchSpanProcessor(self.exporter))  # type: ignore[arg-type]
        trace.set_tracer_provider(self.provider)

    def select(self, variant: str) -> None:
        from pubsub_toolkit import tracing

        if variant.startswith("off"):
            tracing.enable(False)
            return
        self.switch.inner = self.sampled if variant.endswith("_sampled") else self.full
        tracing.enable(True)

    def spans(self) -> int:
        count, self.exporter.exported = self.exporter.exported, 0
        return count


def deployed_round(
    ingress: Any, messages: list[Any], threads: int, tracer: SwitchedTracing
) -> dict[str, Any]:
    from pubsub_toolkit.errors import TransientError

    def one(message: Any) -> str:
        try:
            return str(ingress.handle(message).outcome.value)
        except TransientError:  # a redelivery that found its original still in progress
            return "transient"

    tracer.spans()
    gc.collect()
    cpu, wall = time.process_time(), time.perf_counter()
    if threads == 0:  # in this thread (for --profile)
        outcomes = Counter(map(one, messages))
    else:
        with ThreadPoolExecutor(threads) as pool:
            outcomes = Counter(pool.map(one, messages))
    tracer.provider.force_flush()  # the export thread's work for this round's spans counts
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    count = len(messages)
    return {
        "msgs_per_s": round(count / wall, 1),
        "cpu_us_per_msg": round(cpu / count * 1e6, 1),
        "spans_per_msg": round(tracer.spans() / count, 3),
        "outcomes": dict(sorted(outcomes.items())),
    }


@contextlib.contextmanager
def deployed_setup(
    args: argparse.Namespace,
) -> Iterator[tuple[Callable[[str, str], Any], SwitchedTracing]]:
    """The local servers, topics, one PubSubSink, one client per backend and the provider;
    yields ``make(backend, tag)`` (a fresh Ingress with a store namespace of its own) and the
    tracing switch. Everything is stopped on exit."""
    from bench.common import local_servers

    configure_logs(args.logs)
    with contextlib.ExitStack() as stack:
        servers = stack.enter_context(local_servers())
        stack.callback(os.environ.pop, "PUBSUB_EMULATOR_HOST", None)
        stack.callback(os.environ.pop, "FIRESTORE_EMULATOR_HOST", None)
        import redis
        from google.cloud import firestore, pubsub_v1  # type: ignore[attr-defined]

        from pubsub_toolkit.ingress.pipeline import Ingress
        from pubsub_toolkit.producer.sink import PubSubSink
        from pubsub_toolkit.stores.dedup.firestore import FirestoreDedupStore
        from pubsub_toolkit.stores.dedup.redis import RedisDedupStore

        project = f"bench-tracing-{os.getpid()}"
        final, dead = f"projects/{project}/topics/final", f"projects/{project}/topics/dead-letter"
        admin = pubsub_v1.PublisherClient()
        admin.create_topic(name=final)
        admin.create_topic(name=dead)
        sink = PubSubSink()  # one publisher client for every variant, as one function instance
        stack.callback(sink.close)
        # One client per backend for the run (as an instance keeps its connections); each
        # round gets a namespace of its own (Redis key prefix, Firestore collection).
        redis_client = redis.Redis.from_url(servers.redis_url)
        stack.callback(redis_client.close)
        firestore_client = firestore.Client(project=project)
        tracer = SwitchedTracing()

        def make(backend: str, tag: str) -> Any:
            if backend == "redis":
                store: Any = RedisDedupStore(redis_client, prefix=f"bench-tracing:{tag}:")
            else:
                store = FirestoreDedupStore(firestore_client, collection=f"dedup-{tag}")
            return Ingress(
                store=store,
                sink=sink,
                final_topic=final,
                dead_letter_topic=dead,
                lease=LEASE,
                ttl=TTL,
            )

        yield make, tracer


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """The decision logs (JSON on ``sys.stdout``) into /dev/null while the block runs."""
    real = sys.stdout
    with open(os.devnull, "w") as devnull:
        sys.stdout = devnull
        try:
            yield
        finally:
            sys.stdout = real


def bench_deployed(args: argparse.Namespace) -> dict[str, Any]:
    """Every round: each backend, each variant (order rotating), a fresh Ingress and store
    namespace, ``--deployed-messages`` messages on ``--threads`` threads."""
    variants = list(args.deployed_variants)
    rounds: list[dict[str, Any]] = []
    with deployed_setup(args) as (make, tracer):
        started = time.perf_counter()
        for round_no in range(-args.warmup_rounds, args.deployed_rounds):
            shift = round_no % len(variants)
            order = variants[shift:] + variants[:shift]
            for backend in args.backends:
                row: dict[str, Any] = {"round": round_no, "workload": backend, "order": order}
                for variant in order:
                    tag = f"{variant}-{backend}-r{round_no}"
                    ingress = make(backend, tag)
                    messages = deployed_messages(args.deployed_messages, tag)
                    tracer.select(variant)
                    try:
                        with quiet():
                            row[variant] = deployed_round(ingress, messages, args.threads, tracer)
                    finally:
                        tracer.select("off")
                if round_no >= 0:
                    rounds.append(row)
                label = (
                    "warm-up" if round_no < 0 else f"round {round_no + 1}/{args.deployed_rounds}"
                )
                print(
                    f"deployed {label} {backend}: "
                    + ", ".join(f"{v} {row[v]['msgs_per_s']:.0f}/s" for v in order)
                    + f" ({time.perf_counter() - started:.0f} s)",
                    flush=True,
                )
    summary = summarise(rounds, variants, DEPLOYED_PAIRS)
    return {
        "method": (
            f"Ingress.handle on {args.threads} threads publishing through PubSubSink to the"
            " Pub/Sub emulator, dedup store on redis-server / the Firestore emulator; one"
            " process, one TracerProvider (BatchSpanProcessor + dropping exporter) installed"
            " once, tracing.enable(True/False) per variant; variants rotate order every round;"
            " ratios are medians of per-round ratios (min-max)"
        ),
        "threads": args.threads,
        "rounds": args.deployed_rounds,
        "warmup_rounds": args.warmup_rounds,
        "messages_per_round": args.deployed_messages,
        "sample_ratio": SAMPLE_RATIO,
        "summary": summary,
        "rounds_detail": rounds,
    }


def profile_deployed(args: argparse.Namespace) -> None:
    """``--profile deployed_on|deployed_off``: one Redis round of the deployed shape on one
    thread (this one: cProfile sees only its own thread) under cProfile, after a warm-up."""
    import cProfile
    import pstats

    variant = "on_batch" if args.profile == "deployed_on" else "off"
    backend = args.backends[0]
    with deployed_setup(args) as (make, tracer):
        tracer.select(variant)
        with quiet():
            deployed_round(make(backend, "warm"), deployed_messages(300, "warm"), 0, tracer)
            ingress = make(backend, "profiled")
            messages = deployed_messages(args.deployed_messages, "profiled")
            profiler = cProfile.Profile()
            profiler.enable()
            result = deployed_round(ingress, messages, 0, tracer)
            profiler.disable()
        tracer.select("off")
    print(json.dumps(result))
    pstats.Stats(profiler).sort_stats("tottime").print_stats(args.profile_top)
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(args.profile_top)


# --------------------------------------------------------------------------------------------
# Driver: worktree, redis-server, workers, alternating rounds, ratios.
# --------------------------------------------------------------------------------------------


class Worker:
    """One variant's long-lived worker process (its own process group)."""

    def __init__(self, variant: str, tree: Path, args: argparse.Namespace, log: IO[bytes]):
        self.variant = variant
        argv = [
            sys.executable,
            "-I",
            str(Path(__file__).resolve()),
            "--worker",
            variant,
            "--tree",
            str(tree),
            "--redis-url",
            args.redis_url,
            "--logs",
            args.logs,
        ]
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        self.process = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env=env,
            cwd=tempfile.gettempdir(),
            start_new_session=True,
        )
        self.info = self._read()

    def _read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"worker {self.variant} died; see its log")
        return dict(json.loads(line))

    def run(self, command: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()
        return self._read()

    def close(self) -> None:
        from bench.compare import stop_group

        with contextlib.suppress(OSError, ValueError):
            assert self.process.stdin is not None
            self.process.stdin.write(json.dumps({"quit": True}) + "\n")
            self.process.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)
        stop_group(self.process)  # type: ignore[arg-type]


@contextlib.contextmanager
def redis_server(work: Path) -> Iterator[str]:
    """A throwaway redis-server on a free loopback port, stopped (process group) on exit."""
    from pubsub_toolkit_local import emulators
    from pubsub_toolkit_local.processes import ServiceGroup, free_port

    port = free_port()
    with ServiceGroup(work) as group:
        group.start(emulators.redis_server(port))
        yield f"redis://127.0.0.1:{port}/0"


def spread(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
    }


def summarise(
    rounds: list[dict[str, Any]],
    variants: list[str],
    pairs: tuple[tuple[str, str], ...] = PAIRS,
) -> dict[str, Any]:
    """Per workload: medians per variant, per-round ratios per pair, and the outcome check."""
    summary: dict[str, Any] = {}
    for workload in sorted({r["workload"] for r in rounds}):
        mine = [r for r in rounds if r["workload"] == workload]
        per_variant = {
            v: {
                "msgs_per_s_median": round(statistics.median(r[v]["msgs_per_s"] for r in mine), 1),
                "cpu_us_per_msg_median": round(
                    statistics.median(r[v]["cpu_us_per_msg"] for r in mine), 2
                ),
                "spans_per_msg": mine[-1][v]["spans_per_msg"],
            }
            for v in variants
        }
        ratios: dict[str, Any] = {}
        for top, bottom in pairs:
            if top in variants and bottom in variants:
                per_round = [r[top]["msgs_per_s"] / r[bottom]["msgs_per_s"] for r in mine]
                cpu = [r[bottom]["cpu_us_per_msg"] / r[top]["cpu_us_per_msg"] for r in mine]
                ratios[f"{top}/{bottom}"] = {
                    "throughput": spread(per_round),
                    "per_round": [round(x, 3) for x in per_round],
                    "cpu_per_msg_inverse": spread(cpu),
                }
        outcomes = {json.dumps(r[v]["outcomes"], sort_keys=True) for r in mine for v in variants}
        summary[workload] = {
            "variants": per_variant,
            "ratios": ratios,
            "same_outcomes_everywhere": len(outcomes) == 1,
            "outcomes_per_round": json.loads(next(iter(outcomes))),
        }
    return summary


def print_table(summary: dict[str, Any]) -> None:
    for workload, figures in summary.items():
        print(
            f"\n{workload}: "
            + ", ".join(f"{k} {v}" for k, v in figures["outcomes_per_round"].items())
        )
        for variant, row in figures["variants"].items():
            print(
                f"  {variant:10} {row['msgs_per_s_median']:>9.0f} msg/s"
                f"  {row['cpu_us_per_msg_median']:>7.1f} us CPU/msg"
                f"  {row['spans_per_msg']} spans/msg"
            )
        for pair, ratio in figures["ratios"].items():
            t = ratio["throughput"]
            print(f"  {pair:18} {t['median']:.3f} ({t['min']:.3f}-{t['max']:.3f})")


def bench_in_process(args: argparse.Namespace) -> dict[str, Any]:
    from bench.compare import baseline_worktree

    variants = list(args.variants) + (list(CANDIDATES) if args.candidate else [])
    work = Path(tempfile.mkdtemp(prefix="pubsub-toolkit-bench-tracing-"))
    with contextlib.ExitStack() as stack:
        pre_tree = stack.enter_context(baseline_worktree(args.worktree, args.pre_commit))
        args.redis_url = stack.enter_context(redis_server(work))
        import redis

        flusher = redis.Redis.from_url(args.redis_url)
        log = stack.enter_context((work / "workers.log").open("wb"))
        workers: dict[str, Worker] = {}
        for variant in variants:
            tree = {"pre": pre_tree, "cand_off": args.candidate}.get(variant, REPO)
            tree = args.candidate if variant == "cand_on_batch" else tree
            workers[variant] = Worker(variant, tree, args, log)
            stack.callback(workers[variant].close)
            print(f"{variant}: {workers[variant].info}", flush=True)
        rounds: list[dict[str, Any]] = []
        warmups: list[dict[str, Any]] = []
        for round_no in range(-args.warmup_rounds, args.rounds):
            shift = round_no % len(variants)
            order = variants[shift:] + variants[:shift]
            for workload in args.workloads:
                count = args.messages if workload == "memory" else args.redis_messages
                row: dict[str, Any] = {"round": round_no, "workload": workload, "order": order}
                for variant in order:
                    result = workers[variant].run(
                        {"workload": workload, "round": round_no, "messages": count}
                    )
                    if result["foreign_modules"]:
                        raise SystemExit(f"{variant} loaded {result['foreign_modules']}")
                    row[variant] = result
                if workload == "redis":
                    flusher.flushdb()
                (warmups if round_no < 0 else rounds).append(row)
                label = "warm-up" if round_no < 0 else f"round {round_no + 1}/{args.rounds}"
                print(
                    f"{label} {workload}: "
                    + ", ".join(f"{v} {row[v]['msgs_per_s']:.0f}/s" for v in order),
                    flush=True,
                )
        infos = {v: w.info for v, w in workers.items()}
    summary = summarise(rounds, variants)
    print_table(summary)
    return {
        "method": (
            "Ingress.handle in a loop on 1 thread, in-process; one long-lived worker process"
            " per variant; variants rotate order every round; recording sink and scheduler;"
            " ratios are medians of per-round ratios (min-max)"
        ),
        "pre_tracing_commit": args.pre_commit,
        "candidate_tree": str(args.candidate) if args.candidate else None,
        "rounds": args.rounds,
        "warmup_rounds": args.warmup_rounds,
        "messages_per_round": {"memory": args.messages, "redis": args.redis_messages},
        "logs": args.logs,
        "workers": infos,
        "summary": summary,
        "rounds_detail": rounds,
        "warmup_detail": warmups,
    }


def drive(args: argparse.Namespace) -> None:
    """Both parts (or the ``--parts`` asked for), one after the other; a part not run keeps its
    section of the existing JSON."""
    from bench.common import RESULTS, write_result

    previous: dict[str, Any] = {}
    existing = RESULTS / f"{args.output}.json"
    if existing.exists():
        previous = json.loads(existing.read_text())
    sections: dict[str, Any] = {}
    if "deployed" in args.parts:
        sections["deployed"] = bench_deployed(args)
    if "in_process" in args.parts:
        sections["in_process"] = bench_in_process(args)
    if "deployed" in sections:
        print("\ndeployed shape (headline):")
        print_table(sections["deployed"]["summary"])
    for part in ("deployed", "in_process"):
        if part not in sections and part in previous:
            sections[part] = previous[part]
    path = write_result(
        args.output,
        {"current_commit": _head(), "target_on_over_off": TARGET, **sections},
    )
    print(f"\nwrote {path}")


def _head() -> str:
    argv = ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"]
    done = subprocess.run(argv, check=False, capture_output=True, text=True)
    return done.stdout.strip()


def profile(args: argparse.Namespace) -> None:
    """The memory workload under cProfile in this process (``--profile VARIANT``)."""
    import cProfile
    import pstats

    configure_logs(args.logs)
    sys.stdout, real = open(os.devnull, "w"), sys.stdout  # noqa: SIM115 - the decision logs
    tracer = Tracing(args.profile)
    measure(args.profile, tracer, {"workload": "memory", "round": -1, "messages": 1000}, "")
    profiler = cProfile.Profile()
    profiler.enable()
    result = measure(
        args.profile, tracer, {"workload": "memory", "round": 0, "messages": args.messages}, ""
    )
    profiler.disable()
    sys.stdout = real
    print(json.dumps(result))
    pstats.Stats(profiler).sort_stats("tottime").print_stats(args.profile_top)
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(args.profile_top)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--warmup-rounds", type=int, default=1)
    parser.add_argument("--messages", type=int, default=5000, help="per memory round")
    parser.add_argument("--redis-messages", type=int, default=2000, help="per Redis round")
    parser.add_argument("--workloads", type=lambda s: s.split(","), default=list(WORKLOADS))
    parser.add_argument("--variants", type=lambda s: s.split(","), default=list(VARIANTS))
    parser.add_argument("--logs", choices=("json", "none"), default="json")
    parser.add_argument("--pre-commit", default=PRE_TRACING)
    parser.add_argument("--worktree", type=Path, default=WORKTREE)
    parser.add_argument("--output", default="tracing", help="bench/results/<output>.json")
    parser.add_argument("--parts", type=lambda s: s.split(","), default=["deployed", "in_process"])
    parser.add_argument("--deployed-rounds", type=int, default=30)
    parser.add_argument("--deployed-messages", type=int, default=600, help="per deployed round")
    parser.add_argument("--threads", type=int, default=8, help="deployed: Ingress.handle threads")
    parser.add_argument(
        "--deployed-variants",
        type=lambda s: s.split(","),
        default=list(DEPLOYED_VARIANTS),
        help="of off, off_twin, on_batch, on_sampled",
    )
    parser.add_argument("--backends", type=lambda s: s.split(","), default=list(DEPLOYED_BACKENDS))
    parser.add_argument(
        "--profile", choices=("off", "on_batch", "on_simple", "deployed_on", "deployed_off")
    )
    parser.add_argument("--profile-top", type=int, default=30)
    # Worker mode (internal).
    parser.add_argument("--candidate", type=Path, help="a tree whose shared/ to run as cand_*")
    parser.add_argument("--worker", choices=VARIANTS + CANDIDATES, help=argparse.SUPPRESS)
    parser.add_argument("--tree", help=argparse.SUPPRESS)
    parser.add_argument("--redis-url", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
    elif args.profile and args.profile.startswith("deployed"):
        profile_deployed(args)
    elif args.profile:
        profile(args)
    else:
        drive(args)


if __name__ == "__main__":
    main()
