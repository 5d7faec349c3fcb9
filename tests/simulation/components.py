"""The components, built from the real library, and the pools of instances that run them.

Each component instance is a :class:`~tests.simulation.process.Process` with fresh library
objects wired to *its* boundaries: its store views, its sink, its scheduler, its clock.

* **ingress** - ``Ingress`` (the origin subscription pushes to ``handle``);
* **relay** - ``Relay`` (Cloud Tasks calls ``release`` with the task's body);
* **consumer** - ``MessageProcessor`` with ``FifoGate`` and ``IdempotentProcessor``, built as
  ``MessageProcessor.from_settings`` builds them, with the gate's policy from
  ``ConsumerSettings`` through the library's own ``gate_policy``;
* **producer** - ``Publisher`` with the database's sequence counter (the application around it
  is :mod:`.producer`).

A :class:`Pool` keeps a fixed number of instance slots per kind; when one crashes, a new
instance (a new generation, fresh objects over the same database) starts 1-10 s later.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from pubsub_toolkit.config import ConsumerSettings
from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.consumer.processor import MessageProcessor, gate_policy
from pubsub_toolkit.dead_letters.send import DeadLetterer
from pubsub_toolkit.dedup.idempotent import IdempotentProcessor
from pubsub_toolkit.delay.relay import Relay
from pubsub_toolkit.ingress.pipeline import Ingress
from pubsub_toolkit.observability import DecisionLog
from pubsub_toolkit.producer.publisher import Publisher
from tests.simulation.clock import SimClock
from tests.simulation.faults import Kind
from tests.simulation.process import Process
from tests.simulation.tasks import MAX_TASK_ATTEMPTS

ORIGIN = "projects/sim/topics/origin"
FINAL = "projects/sim/topics/final"
DEAD_LETTERS = "projects/sim/topics/dead-letters"
CONSUMER_ID = "sim-consumer"
TTL = timedelta(days=8)


@dataclass
class Slot:
    """One instance slot: the process running in it now, and its library objects."""

    index: int
    process: Process
    app: Any
    generation: int = 0
    sweep_token: int = 0
    next_sweep: float = float("inf")


class Pool:
    """The instances of one component kind."""

    def __init__(self, world: Any, kind: str, size: int, build: Callable[[Process], Any]) -> None:
        self._world = world
        self.kind = kind
        self._build = build
        self.slots = [self._start(i, 0) for i in range(size)]
        self.on_start: Callable[[Slot], None] | None = None

    def _start(self, index: int, generation: int) -> Slot:
        world = self._world
        clock = SimClock(world.loop, world.faults.skew())
        process = Process(self.kind, index, generation, clock, self._crashed)
        return Slot(index, process, self._build(process), generation)

    def pick(self) -> Slot | None:
        """A running instance, at random; None while every one is down."""
        alive = [s for s in self.slots if s.process.alive]
        return self._world.rng.choice(alive) if alive else None

    def _crashed(self, process: Process, where: str) -> None:
        world = self._world
        world.trace.add(f"CRASH {process.name} {where}")
        world.ledger.crashed(process.name)
        slot = self.slots[process.slot]

        def restart() -> None:
            if slot.process is process:
                fresh = self._start(slot.index, slot.generation + 1)
                self.slots[slot.index] = fresh
                world.trace.add(f"{fresh.process.name} started")
                if self.on_start is not None:
                    self.on_start(fresh)

        world.loop.after(world.rng.uniform(1, 10), f"restart {process.name}", restart)


@dataclass(frozen=True)
class ConsumerApp:
    """A consumer instance: its processor, the gate its sweeper visits (``groups``, ``sweep``)
    and how one delivery reaches it (return = ack, raise = nack: :mod:`.shapes`)."""

    processor: Any  # MessageProcessor (AsyncMessageProcessor in the asyncio shape)
    gate: Any  # FifoGate, or one with its call shape
    deliver: Callable[[Any], object]
    # Consumer's convoy shape: queue a delivery (message, attempt, settle) and answer DEFERRED
    convoy: Callable[[Any, int, Any], Any] | None = None


def build_ingress(world: Any, process: Process) -> Ingress:
    b = world.boundaries
    return Ingress(
        store=b.store_view(process, "dedup"),
        sink=b.sink(process),
        final_topic=FINAL,
        dead_letter_topic=DEAD_LETTERS,
        lease=timedelta(seconds=world.config.dedup_lease),
        ttl=TTL,
        scheduler=b.scheduler(process, world.tasks),
        clock=process.clock,
    )


def build_relay(world: Any, process: Process) -> Relay:
    b = world.boundaries
    return Relay(
        store=b.store_view(process, "dedup"),
        sink=b.sink(process),
        final_topic=FINAL,
        dead_letter_topic=DEAD_LETTERS,
        lease=timedelta(seconds=world.config.dedup_lease),
        ttl=TTL,
        scheduler=b.scheduler(process, world.tasks),
        clock=process.clock,
        task_max_attempts=MAX_TASK_ATTEMPTS,  # the queue's, as TASKS_MAX_ATTEMPTS says it
    )


def consumer_settings(world: Any) -> ConsumerSettings:
    return ConsumerSettings(
        consumer_id=CONSUMER_ID,
        poison_policy=world.config.poison_policy,
        gap_policy=world.config.gap_policy,
        lease_hold=timedelta(seconds=world.config.lease_hold),
    )


def build_gate(world: Any, process: Process, handler: Callable[..., object]) -> FifoGate:
    b = world.boundaries
    log = DecisionLog(CONSUMER_ID)
    dead_letters = (
        DeadLetterer(b.sink(process), DEAD_LETTERS, log) if world.config.gate_dead_letters else None
    )
    return FifoGate(
        b.store_view(process, "fifo"),
        consumer=CONSUMER_ID,
        handler=handler,
        dead_letters=dead_letters,
        policy=gate_policy(consumer_settings(world)),
        clock=process.clock,
        log=log,
        batch=world.config.batch,
    )


def lease(world: Any) -> timedelta:
    return timedelta(seconds=world.config.dedup_lease)


def retry_scheduler(world: Any, process: Process) -> Any:
    """retry_later: a plain message's RetryLater goes through the delay path (Cloud Tasks)."""
    return (
        world.boundaries.scheduler(process, world.tasks)
        if world.plan.has(Kind.RETRY_LATER)
        else None
    )


def build_consumer(
    world: Any, process: Process, handler: Callable[..., object] | None = None
) -> ConsumerApp:
    """``MessageProcessor`` for ``process`` (``handler``: the user's, else the world's)."""
    b = world.boundaries
    handler = handler or world.handler_for(process)
    gate = build_gate(world, process, handler)
    dedup = IdempotentProcessor(
        b.store_view(process, "dedup"),
        namespace=CONSUMER_ID,
        lease=lease(world),
        ttl=TTL,
        log=gate.log,
        clock=process.clock,
    )
    dead_letters = (
        DeadLetterer(b.sink(process), DEAD_LETTERS, gate.log)
        if world.config.gate_dead_letters
        else None
    )
    processor = MessageProcessor(
        handler=handler,
        dedup=dedup,
        gate=gate,
        dead_letters=dead_letters,
        scheduler=retry_scheduler(world, process),
        clock=process.clock,  # a RetryLater's due time on the virtual clock
    )
    return ConsumerApp(processor, gate, processor.process)


def build_producer(world: Any, process: Process) -> Publisher:
    b = world.boundaries
    return Publisher(b.sink(process), ORIGIN, counter=b.store_view(process, "counter"))
