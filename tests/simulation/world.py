"""One schedule: the whole pipeline wired from a seed, run to quiescence, and checked.

``run_schedule(seed)`` draws the fault plan, the workload and the deployment from the seed
(three independent streams, so a shrunk plan keeps the same messages), builds the services
(:mod:`.pubsub`, :mod:`.tasks`, :mod:`.database`) and the component pools
(:mod:`.components`), runs the faulty phase until ``heal_at``, then keeps running - deliveries,
redeliveries, tasks, sweeps - until nothing is left to do for a long virtual time, lets the
operator act (:mod:`.operators`), and repeats until the operator has nothing more to do. Then
:mod:`.invariants` checks the ledger.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.message import Message
from tests.simulation import components as c
from tests.simulation import shapes
from tests.simulation.alerts import capture
from tests.simulation.boundaries import Boundaries
from tests.simulation.clock import CallerClock, SimClock
from tests.simulation.database import Database
from tests.simulation.dimensions import reshape, unpermanent_without_policy
from tests.simulation.drivers import Drivers
from tests.simulation.events import Event, EventLoop
from tests.simulation.faults import FaultPlan, Faults, Kind
from tests.simulation.invariants import Final, Violation, check
from tests.simulation.ledger import FinalPublish, Ledger, OriginPublish
from tests.simulation.operators import MAX_ACTIONS, Operator
from tests.simulation.producer import ProducerApp
from tests.simulation.pubsub import DELIVERY_COUNT_ATTRIBUTE, PubSub
from tests.simulation.tasks import CloudTasks
from tests.simulation.tracing import Trace
from tests.simulation.weaker_guarantees import Relaxation
from tests.simulation.workload import LogicalMessage, draw

SETTLE_SECONDS = 15 * 60.0  # quiet for this long (past the gap timeout and backoffs) = done
# One round acts at most once per group (a skip waits for the sweep to show what runs next), so
# the rounds must outlast the operator's own budget: 60 rounds stopped a store wiped of a long
# group's position after 60 skips, short of the numbers still parked behind (seed 50196).
MAX_OPERATOR_ROUNDS = MAX_ACTIONS + 1


@dataclass(frozen=True)
class Options:
    trace_limit: int | None = 400  # None: keep the whole trace (replaying one seed)
    only: tuple[Kind, ...] | None = None  # force the enabled fault kinds (shrinking)
    enable: tuple[Kind, ...] = ()  # opt-in kinds (faults.EXTRA_KINDS) this run may draw
    strict: bool = False  # a store loss excuses only messages an ALERT named (issue 24)
    shapes: tuple[str, ...] = ()  # force the consumer's shape to one of these (shapes.Shape)
    # every shape takes one message at a time: no process_batch, no batch handler (so that
    # `process` runs the very schedule `asyncio` runs: test_sync_async_same_effects.py)
    one_at_a_time: bool = False
    max_events: int = 150_000


@dataclass(frozen=True)
class Result:
    seed: int
    violations: tuple[Violation, ...]
    faults: tuple[tuple[str, int], ...]
    enabled: tuple[str, ...]
    events: int
    messages: int
    overlap: int = 1  # the most operations (events) in flight at once, nested in one another
    shape: str = "process"  # how the consumer was driven (shapes.py; process_batch; +batch)
    trace: str = field(default="", repr=False)


class World:
    """Everything one schedule runs on (the components reach each other through it)."""

    def __init__(self, seed: int, options: Options) -> None:
        self.seed = seed
        self.options = options
        self.rng = random.Random(f"run:{seed}")
        self.plan = FaultPlan.draw(
            random.Random(f"faults:{seed}"),
            only=options.only,
            enable=options.enable,
            extra=random.Random(f"extra:{seed}"),
        )
        forced_single = options.shapes and shapes.Shape.PROCESS.value not in options.shapes
        if forced_single or options.one_at_a_time:
            # a forced one-at-a-time shape: no process_batch (its own shape) in the plan
            self.plan = self.plan.without((Kind.PROCESS_BATCH,))
        self.workload = reshape(
            draw(random.Random(f"workload:{seed}"), self.plan),
            self.plan,
            random.Random(f"reshape:{seed}"),
        )
        self.consumer_shape = shapes.draw(seed, self.plan, options.shapes)
        if self.consumer_shape is not shapes.Shape.PROCESS or options.one_at_a_time:
            # @idempotent and the async processor take one message at a time (the batch is
            # drawn all the same: the workload's stream stays the same)
            self.workload = replace(self.workload, config=replace(self.workload.config, batch=1))
        if shapes.nacks_every_failure(seed, self.consumer_shape):
            # A callback that nack()s every failure redelivers a PermanentError too, its own
            # choice: only a subscription's dead-letter policy can end that message.
            self.workload = unpermanent_without_policy(self.workload)
        self.config = self.workload.config
        self._specs = {m.lid: m for m in self.workload.messages}
        interleave = self.plan.interleave_rate if self.plan.has(Kind.INTERLEAVE) else 0.0
        self.loop = EventLoop(self.rng, interleave_rate=interleave)
        if self.plan.has(Kind.DEEP_INTERLEAVE):
            self.loop.max_depth = 3
        self.trace = Trace(lambda: self.loop.now, options.trace_limit)
        self.faults = Faults(self.plan, self.rng, lambda: self.loop.now)
        self.ledger = Ledger(
            keys={
                m.dedup_key: m.lid
                for m in reversed(self.workload.messages)
                if m.dedup_key and not m.hostile
            }
        )
        self.transient_is_toolkit_error = self.rng.random() < 0.5
        rollback = self.plan.has(Kind.STORE_ROLLBACK)
        self.db = Database(CallerClock(SimClock(self.loop)), keep_history=rollback)
        self.broker = PubSub(self.loop, self.rng, self.faults, self.trace)
        # slow_handler: the ack deadline runs from the delivery, also under a running handler
        self.broker.deadline_at_delivery = self.plan.has(Kind.SLOW_HANDLER)
        self.boundaries = Boundaries(
            self.loop, self.faults, self.db, self.broker, self.trace, self.ledger
        )
        self.drivers = Drivers(self)
        self.tasks = CloudTasks(
            self.loop,
            self.rng,
            self.faults,
            self.trace,
            skew=self.faults.skew(),
            execute=self.drivers.execute_task,
        )
        self._wire_topics()
        self.handler_for = self.drivers.handler_for
        self.ingresses = c.Pool(
            self, "ingress", self.config.ingresses, lambda p: c.build_ingress(self, p)
        )
        self.relays = c.Pool(self, "relay", self.config.relays, lambda p: c.build_relay(self, p))
        self.consumers = c.Pool(
            self,
            "consumer",
            self.config.consumers,
            lambda p: shapes.build(self, p, self.consumer_shape),
        )
        self.consumers.on_start = self.drivers.start_sweeps
        self.producers = c.Pool(self, "producer", 1, lambda p: c.build_producer(self, p))
        self.last_activity = 0.0
        self.loop.on_event = self._on_event
        # The dead-letter topic as the operator's `dlq list` reads it: each letter, and when it
        # was published there.
        self.dead_letter_topic: list[tuple[Message, float]] = []

    def _wire_topics(self) -> None:
        broker, config = self.broker, self.config
        for topic in (c.ORIGIN, c.FINAL, c.DEAD_LETTERS):
            broker.create_topic(topic)
        broker.subscribe(
            c.ORIGIN,
            "origin-push",
            self.drivers.on_origin,
            config=config.origin,
            dead_letter_topic=c.DEAD_LETTERS,
        )
        self.final = final = broker.subscribe(
            c.FINAL,
            "final",
            self.drivers.on_final,
            config=config.final,
            dead_letter_topic=c.DEAD_LETTERS,
        )
        if self.plan.has(Kind.PROCESS_BATCH):
            final.batch_subscriber = self.drivers.on_final_batch
            final.batch = 1 + self.seed % 9  # 2-10 deliveries at once
        broker.listeners.append(self._on_publish)

    # --- what components ask the world ----------------------------------------------------

    def spec(self, lid: str | None) -> LogicalMessage | None:
        return self._specs.get(lid) if lid else None

    @property
    def relax_operator(self) -> bool:
        """The operator may skip on an ALERT alone once the store has lost writes."""
        return bool(self.ledger.rollbacks)

    def activity(self) -> None:
        self.last_activity = self.loop.now

    def targets(self) -> dict[str, int]:
        """Each group's last number published to origin by the real Publisher."""
        out: dict[str, int] = {}
        for o in self.ledger.origins:
            if o.group is not None and o.seq is not None and not o.hostile:
                out[o.group] = max(out.get(o.group, 0), int(o.seq))
        return out

    def _on_event(self, event: Event) -> None:
        if not event.background:
            self.last_activity = self.loop.now
            self.trace.add(event.label)

    def _on_publish(self, topic: str, message: Message) -> None:
        a, ledger, now = message.attributes, self.ledger, self.loop.now
        lid = ledger.lid_of(message)
        if topic == c.ORIGIN:
            spec = self.spec(lid)
            hostile = spec is not None and spec.hostile is not None
            ledger.origins.append(
                OriginPublish(
                    lid,
                    now,
                    message.message_id,
                    a.get(attr.FIFO_GROUP),
                    a.get(attr.FIFO_SEQ),
                    hostile,
                    a.get(attr.FIFO_EPOCH),
                )
            )
        elif topic == c.FINAL:
            publisher = self.boundaries.publishing
            ahead = max(0.0, publisher.clock.skew) if publisher is not None else 0.0
            final = FinalPublish(
                lid, now, message.message_id, a.get(attr.DELIVER_AT), "fifo_filler" in a, ahead
            )
            ledger.finals.append(final)
            ledger.final_publish(lid)
        elif DELIVERY_COUNT_ATTRIBUTE in a:
            self.dead_letter_topic.append((message, now))
            ledger.dead_letter(message, now, "max_delivery_attempts", "pubsub")
        else:
            self.dead_letter_topic.append((message, now))
            letter = ledger.dead_letter(
                message, now, a.get(attr.ERROR_REASON, "unknown"), "toolkit"
            )
            self.trace.add(
                f"DEAD LETTER {lid} reason={letter.reason} {a.get(attr.ERROR_DETAIL, '')[:120]}"
            )

    # --- running --------------------------------------------------------------------------

    def _schedule_faults(self) -> None:
        if self.plan.has(Kind.STORE_ROLLBACK):
            for r in self.plan.rollbacks:
                self.loop.at(
                    r.at,
                    f"ROLLBACK the store by {r.writes} writes",
                    lambda r=r: self._rollback(r.writes),
                )
        if self.plan.has(Kind.RESTART_EMPTY):
            self.loop.at(self.plan.restart_at, "STORE RESTARTED EMPTY", self._restart)
        if self.plan.has(Kind.RELAY_OUTAGE):
            w = self.plan.relay_outage
            self.loop.at(w.start, f"RELAY STORE OUTAGE for {(w.end - w.start) / 3600:.0f}h", _nop)
        if self.plan.has(Kind.STORE_OUTAGE):
            for w in self.plan.outages:
                self.loop.at(w.start, f"STORE OUTAGE for {w.end - w.start:.1f}s", lambda: None)
        if self.plan.has(Kind.HANDLER_TRANSIENT):
            for w in self.plan.dependency_outages:
                self.loop.at(
                    w.start, f"HANDLER DEPENDENCY DOWN for {w.end - w.start:.1f}s", lambda: None
                )

    def _rollback(self, writes: int) -> None:
        lost = self.db.rollback(writes)
        if lost:  # a rollback that lost nothing switches no check off
            self.ledger.rollbacks.append(self.loop.now)
        self.faults.count("store_rollback_writes_lost", lost)
        self.trace.add(f"... {lost} writes lost")

    def _restart(self) -> None:
        lost = self.db.wipe()
        if lost:  # a restart that lost nothing switches no check off
            self.ledger.rollbacks.append(self.loop.now)
        self.faults.count("store_restart_records_lost", lost)
        self.trace.add(f"... {lost} records lost")

    def _drive(self) -> bool:
        """Run to quiescence, with operator rounds; False if the event budget or the operator's
        rounds ran out (invariant 11, not a false "lost silently")."""
        loop, operator = self.loop, Operator(self)
        for _ in range(MAX_OPERATOR_ROUNDS):
            while True:
                if loop.executed >= self.options.max_events:
                    return False
                quiet = not loop.busy and loop.now - self.last_activity >= SETTLE_SECONDS
                if (quiet and loop.now >= self.plan.heal_at) or not loop.run_next():
                    break
            if not operator.act():
                return True
            self.activity()
        return False  # the operator still acting when its rounds ran out: not quiescent

    def run(self) -> Result:
        with capture(self.ledger, lambda: self.loop.now):
            ProducerApp(self).start()
            self._schedule_faults()
            for slot in self.consumers.slots:
                self.drivers.start_sweeps(slot)
            quiescent = self._drive()
            states = {g: self.db.fifo_position(c.CONSUMER_ID, g) for g in self._groups()}
        relax = Relaxation.for_schedule(self.ledger, strict=self.options.strict)
        final = Final(
            self.ledger, self.workload.messages, states, relax, tuple(self.tasks.failed())
        )
        violations = check(final)
        if not quiescent:
            violations.append(
                Violation("11 quiescence", None, f"not quiet after {self.loop.executed} events")
            )
        for looping in self.broker.crash_loops:
            violations.append(
                Violation("11 quiescence", None, f"{looping} redelivered forever (a crash loop)")
            )
        return Result(
            seed=self.seed,
            violations=tuple(violations),
            faults=tuple(sorted(self.faults.counts.items())),
            enabled=tuple(k.value for k in self.plan.enabled),
            events=self.loop.executed,
            messages=len(self.workload.messages),
            overlap=self.loop.peak_depth,
            shape=self.shape,
            trace=self.trace.render() if violations or self.options.trace_limit is None else "",
        )

    @property
    def shape(self) -> str:
        """The consumer's shape: which processor call, and a batch handler or not."""
        if self.consumer_shape is not shapes.Shape.PROCESS:
            return self.consumer_shape.value
        call = "process_batch" if self.plan.has(Kind.PROCESS_BATCH) else "process"
        return call + ("+batch_handler" if self.config.batch > 1 else "")

    def _groups(self) -> list[str]:
        return sorted({g for g in (m.group for m in self.workload.messages) if g})


def _nop() -> None:
    return None


def run_schedule(seed: int, options: Options | None = None) -> Result:
    """Run and check one schedule."""
    return World(seed, options or Options()).run()
