"""How the services reach the components, and the consumer's handler and sweeper.

* the origin subscription pushes to an ingress instance (``Ingress.handle``: return = ack,
  raise = nack); the final subscription feeds a consumer instance through its shape's entry
  point (``ConsumerApp.deliver``: ``MessageProcessor.process``, ``@idempotent``, the async
  processor - :mod:`.shapes`; return = ack, any exception = nack), or queues it on the
  instance's convoy (``consumer_convoy``: answered when its turn ran, :mod:`.convoy`);
* Cloud Tasks runs a task on a relay instance (``Relay.release``: return = 2xx, raise = 5xx);
* each consumer instance sweeps every group periodically, like ``Consumer._sweep_loop``
  (every second while there is work; the interval doubles while sweeps find nothing, so a
  40-day wait costs a few dozen sweeps, and a delivery brings it back to one second);
* the user's handler records each effect in the ledger, with crash points before and after
  the effect, and fails as the workload says (poison, a transient failure for T seconds) or
  while the handler's dependency is down.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pubsub_toolkit.core.fifo_policy import GateOutcome
from pubsub_toolkit.errors import PermanentError, RetryLater, TransientError
from pubsub_toolkit.message import Message
from tests.simulation.components import Slot
from tests.simulation.dimensions import REFUSED
from tests.simulation.faults import Kind
from tests.simulation.process import HandlerExit, Process, ProcessCrashed
from tests.simulation.pubsub import Answer
from tests.simulation.shapes import Shape

SWEEP_INTERVAL = 1.0
MAX_IDLE_SWEEP_INTERVAL = 30.0  # while faults are active; unbounded doubling afterwards
# Due events a slow handler's call lets run meanwhile (a plain sleep: 4): enough for the
# deliveries that matter - the same message again once its ack deadline passed, another
# process taking over the lease the call outlived - to happen while it still runs.
SLOW_EVENTS = 64


class DependencyDown(ConnectionError):
    """The handler's dependency is unreachable (a plain exception, not the toolkit's)."""


class PoisonError(ValueError):
    """The handler can never process this message."""


class Drivers:
    """The callbacks the brokers and the loop call, bound to one world."""

    def __init__(self, world: Any) -> None:
        self._w = world
        self._first_call: dict[str, float] = {}
        self._retries: dict[str, int] = {}  # lid -> RetryLater raised so far
        # handler_exit: whether the innermost running call is a convoy task (True) or a sweep
        # (whose thread a BaseException would end: not modelled, so never raised there)
        self.in_convoy_task: list[bool] = []

    # --- the user's handler ---------------------------------------------------------------

    def handler_for(self, process: Process) -> Any:
        w = self._w

        def handle(message: Message) -> None:
            w.boundaries.step(process, "before effect")
            lid = w.ledger.lid_of(message)
            task = self.in_convoy_task and self.in_convoy_task[-1]
            if task and w.consumer_shape is Shape.CONVOY and w.faults.handler_exit():
                w.trace.add(f"{process.name}: handler raises HandlerExit for {lid}")
                raise HandlerExit(f"the handler of {lid} exits")
            self._slow(process)
            now = w.loop.now
            failure = self._failure(lid, now)
            if failure is not None:
                w.ledger.failures.setdefault(str(lid), []).append(now)
                w.trace.add(f"{process.name}: handler fails for {lid}: {failure}")
                raise failure
            effect = w.ledger.effect(message, now, process.name)
            w.trace.add(
                f"EFFECT {process.name} {lid} key={effect.dedup_key} "
                f"group={effect.group} seq={effect.seq}{' FILLER' if effect.filler else ''}"
            )
            w.boundaries.step(process, "after effect")

        if w.config.batch == 1:
            return handle

        def handle_batch(messages: list[Message]) -> None:
            # A batch handler as the gate asks for one: all or nothing (one transaction) -
            # every message's failure is known before any effect, and the effects land at once.
            w.boundaries.step(process, "before effect")
            self._slow(process)
            now = w.loop.now
            for message in messages:
                lid = w.ledger.lid_of(message)
                failure = self._failure(lid, now)
                if failure is not None:
                    w.ledger.failures.setdefault(str(lid), []).append(now)
                    w.trace.add(f"{process.name}: batch fails for {lid}: {failure}")
                    raise failure
            for message in messages:
                effect = w.ledger.effect(message, now, process.name)
                w.trace.add(
                    f"EFFECT {process.name} {effect.lid} key={effect.dedup_key} group="
                    f"{effect.group} seq={effect.seq} (batch of {len(messages)})"
                )
            w.boundaries.step(process, "after effect")

        return handle_batch

    def _slow(self, process: Process) -> None:
        """slow_handler: some calls take longer than the dedup lease and the ack deadline."""
        w = self._w
        if w.plan.has(Kind.SLOW_HANDLER) and w.faults.active and w.rng.random() < 0.3:
            longest = max(w.config.dedup_lease, w.config.final.ack_deadline)
            seconds = w.rng.uniform(0.5, 2.5) * longest
            w.faults.count("slow_handler_call")
            w.trace.add(f"{process.name}: handler busy for {seconds:.0f}s")
            w.loop.sleep(seconds, events=SLOW_EVENTS)
            process.check()

    def _failure(self, lid: str | None, now: float) -> Exception | None:
        """The exception the handler raises for ``lid`` now, if it fails."""
        w = self._w
        spec = w.spec(lid)
        if spec is not None and spec.poison:
            if spec.permanent:
                return PermanentError(REFUSED, f"{lid} can never succeed")
            return PoisonError(f"{lid} is poison")
        if spec is not None and self._retries.get(str(lid), 0) < spec.retry_later:
            self._retries[str(lid)] = self._retries.get(str(lid), 0) + 1
            w.faults.count("retry_later_raised")
            return RetryLater(timedelta(seconds=spec.retry_delay), "the simulation asks")
        if w.faults.dependency_down():
            if w.transient_is_toolkit_error:
                return TransientError("the handler's dependency is down")
            return DependencyDown("the handler's dependency is down")
        if spec is not None and spec.transient:
            first = self._first_call.setdefault(str(lid), now)
            if now < first + spec.transient:
                return DependencyDown(f"{lid} fails for {spec.transient:.0f}s after its first try")
        return None

    # --- deliveries -----------------------------------------------------------------------

    def _run(self, slot: Slot | None, label: str, work: Any) -> Answer:
        """Run one delivery on ``slot``; the answer the broker gets."""
        w = self._w
        if slot is None:
            return Answer.LATER
        process = slot.process
        action = w.ledger.begin(label)
        w.ledger.acting.append(process.name)
        try:
            outcome = work(slot.app)
        except ProcessCrashed:
            w.ledger.end(action, done=False)
            return Answer.NONE
        except HandlerExit:
            # Not an Exception: it goes on up, through the library, to the convoy's runner.
            w.trace.add(f"{process.name}: {label} -> raised HandlerExit")
            w.ledger.end(action, done=False, error=True, process=process.name)
            raise
        except Exception as exc:
            w.trace.add(f"{process.name}: {label} -> raised {type(exc).__name__}: {exc}")
            w.ledger.end(action, done=False, error=process.alive, process=process.name)
            return Answer.NACK if process.alive else Answer.NONE
        finally:
            w.ledger.acting.pop()
        w.ledger.end(action, done=True)
        w.trace.add(f"{process.name}: {label} -> {_outcome(outcome)}")
        return Answer.ACK if w.boundaries.ack(process) else Answer.NONE

    def on_origin(self, message: Message, attempt: int) -> Answer:
        slot = self._w.ingresses.pick()
        label = f"ingress {message.message_id} (attempt {attempt})"
        return self._run(slot, label, lambda app: app.handle(message))

    def on_final(self, message: Message, attempt: int) -> Answer:
        slot = self._w.consumers.pick()
        if slot is not None:
            self.poke(slot)
        if slot is not None and slot.app.convoy is not None:
            # Consumer's shape: queued on the instance's convoy, answered when its turn ran
            return slot.app.convoy(message, attempt, self._w.final.settler())
        return self.consume(slot, message, attempt)

    def consume(self, slot: Slot | None, message: Message, attempt: int) -> Answer:
        """One delivery through ``slot``'s consumer, now; the answer."""
        label = f"consume {message.message_id} (attempt {attempt})"
        # When the call that ended in an ack BEGAN: the gate may write the message's parked
        # copy before a store loss that lands while the call is still running (and acks).
        started = self._w.loop.now
        answer = self._run(slot, label, lambda app: app.deliver(message))
        lid = self._w.ledger.lid_of(message)
        if answer is Answer.ACK and lid is not None:
            self._w.ledger.reached_gate.setdefault(lid, started)
        return answer

    def on_final_batch(self, items: list[tuple[Message, int]]) -> list[Answer]:
        """process_batch shape: a group's deliveries handed over together, as ``Consumer``
        hands a group's consecutive messages to ``MessageProcessor.process_batch``."""
        w = self._w
        slot = w.consumers.pick()
        if slot is None:
            return [Answer.LATER for _ in items]
        self.poke(slot)
        process, started = slot.process, w.loop.now
        messages = [m for m, _ in items]
        ids = ",".join(m.message_id for m in messages)
        action = w.ledger.begin(f"consume batch {ids}")
        since = len(w.ledger.decisions)
        w.ledger.acting.append(process.name)
        try:
            results = slot.app.processor.process_batch(messages)
        except ProcessCrashed:
            w.ledger.end(action, done=False)
            return [Answer.NONE for _ in items]
        except Exception as exc:
            # A transient error before anything was settled: Consumer logs it and nacks every
            # delivery of the batch, and the group goes on (issue 24, defect 5). A raise after
            # part of the batch had an effect or a dead letter breaks invariant 13: that part
            # is nacked too, and runs or is dead-lettered again unless the store remembers.
            what = f"{type(exc).__name__}: {exc}"
            w.trace.add(f"{process.name}: batch {ids} -> raised {what}: every delivery nacked")
            w.faults.count("process_batch_raised")
            if action.outputs:
                done = ", ".join(f"{kind} {lid}" for kind, lid in action.outputs)
                w.ledger.batch_raised.append(f"batch {ids} on {process.name}: {what} after {done}")
            w.ledger.end(action, done=False, error=process.alive, process=process.name)
            return [Answer.NACK if process.alive else Answer.NONE for _ in items]
        finally:
            w.ledger.acting.pop()
        done = all(isinstance(r, str) for r in results)
        if done:
            w.ledger.outlived(action, process.name, since)
        w.ledger.end(action, done=done, error=True, process=process.name)
        w.trace.add(f"{process.name}: batch {ids} -> {[_outcome(r) for r in results]}")
        answers = []
        for message, result in zip(messages, results, strict=True):
            if isinstance(result, Exception):
                answers.append(Answer.NACK if process.alive else Answer.NONE)
                continue
            acked = w.boundaries.ack(process)
            answers.append(Answer.ACK if acked else Answer.NONE)
            lid = w.ledger.lid_of(message)
            if acked and lid is not None:
                w.ledger.reached_gate.setdefault(lid, started)
        return answers

    def execute_task(self, body: bytes, name: str, attempt: int) -> bool:
        slot = self._w.relays.pick()
        label = f"release {name[-8:]} (attempt {attempt})"
        return self._run(slot, label, lambda app: app.release(body, attempt=attempt)) is Answer.ACK

    # --- the sweeper ----------------------------------------------------------------------

    def poke(self, slot: Slot) -> None:
        """Bring ``slot``'s next sweep to within a second (work just arrived)."""
        w = self._w
        if slot.next_sweep > w.loop.now + SWEEP_INTERVAL:
            self._schedule_sweep(slot, SWEEP_INTERVAL)

    def _schedule_sweep(self, slot: Slot, delay: float) -> None:
        slot.sweep_token += 1
        token = slot.sweep_token
        slot.next_sweep = self._w.loop.now + delay
        self._w.loop.after(delay, "sweep", lambda: self._sweep(slot, token, delay), background=True)

    def _sweep(self, slot: Slot, token: int, interval: float) -> None:
        w = self._w
        process = slot.process
        if (
            token != slot.sweep_token
            or not process.alive
            or w.consumers.slots[slot.index] is not slot
        ):
            return
        action = w.ledger.begin(f"{process.name} sweep")
        busy = False
        self.in_convoy_task.append(False)
        w.ledger.acting.append(process.name)
        try:
            for group in slot.app.gate.groups():
                result = slot.app.gate.sweep(group)
                if result.outcome is not GateOutcome.IDLE:
                    busy = True
                    w.trace.add(f"{process.name}: sweep {group} -> {_outcome(result)}")
        except ProcessCrashed:
            w.ledger.end(action, done=False)
            return
        except Exception as exc:
            busy = True
            w.trace.add(f"{process.name}: sweep failed ({type(exc).__name__}: {exc})")
            w.ledger.end(action, done=False, error=process.alive, process=process.name)
        else:
            w.ledger.end(action, done=True)
        finally:
            self.in_convoy_task.pop()
            w.ledger.acting.pop()
        if busy:
            w.activity()
            delay = SWEEP_INTERVAL
        elif w.faults.active:
            delay = min(interval * 2, MAX_IDLE_SWEEP_INTERVAL)
        else:
            delay = interval * 2
        self._schedule_sweep(slot, delay)

    def start_sweeps(self, slot: Slot) -> None:
        self._schedule_sweep(slot, SWEEP_INTERVAL)


def _outcome(result: object) -> str:
    outcome = getattr(result, "outcome", result)
    return str(getattr(outcome, "value", outcome))
