"""The sync and the asyncio consumer, run on the same scripted schedules, do the same things.

Each seed is run twice, with everything drawn from it the same - fault plan, workload,
deployment, the interleavings and every per-boundary fault draw - and only the consumer's
shape forced (:mod:`.shapes`): ``process`` (``MessageProcessor.process``, ``FifoGate``,
``IdempotentProcessor`` over the memory stores) and ``asyncio`` (``AsyncMessageProcessor``,
``AsyncFifoGate``, ``AsyncIdempotentProcessor`` with an ``async def`` handler over the async
memory stores wrapping the same store views). ``Options.one_at_a_time`` keeps ``process`` to
one message per call (no ``process_batch``, no batch handler), which the asyncio shape cannot
take; the shape is drawn from a stream of its own and neither build draws from the schedule's
stream (checked: the stream's state after building the world is the same in both runs).

Both runs must then produce the same **effect trace**, event by event:

* the schedule's whole trace (every delivery and its outcome or error, each ``EFFECT`` with
  its logical message, process, group and number, at its virtual time, each dead letter with
  its reason, crashes, lost acks, sweeps that did something, the operator's actions);
* the answer each delivery of the final subscription got (ack, nack, none), and when;
* the ledger: effects, dead letters, final-topic publishes, ``cancel()`` answers, operator
  actions;
* every decision the library logged (not only the ALERTs the checker keeps), with its fields;
* every call to the database's stores (dedup, FIFO, counter: method, arguments, reply, at
  true time) and the stores' contents at the end (a FIFO record's version is an opaque token
  equal only to itself, left out of a state's equality: what it decides, a compare-and-set
  landing or not, is in the replies);
* the checker's verdict, the faults injected and the number of events run.

The yield points need no alignment: both drivers perform the same protocols (the processor's
path, :mod:`pubsub_toolkit.core.process`; the gate's and the idempotent processor's), the
asyncio one awaiting each store call and the handler at the very effect the sync one calls
them; the async memory stores never suspend, and the handler's
``asyncio.sleep(0)`` resumes at once (``shapes.drive``). So the comparison is exact, at the
granularity of single store calls: any decision the asyncio path takes differently - a
different bound, a policy, a skipped rejection record, an error mapped otherwise - shows as
the first differing event, printed with its seed.

The one input that is not drawn from the seed, the memory counter's epoch (wall-clock
microseconds, so a counter made again is newer), is pinned to a count for both runs.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from pubsub_toolkit.observability import LOGGER_NAME
from pubsub_toolkit.stores.counters import memory as counters
from tests.simulation.faults import Kind
from tests.simulation.mutations import Mutation, SourceEdit, applied
from tests.simulation.pubsub import Answer
from tests.simulation.shapes import Shape
from tests.simulation.world import Options, World

# (name, the opt-in kinds drawn, seeds): the default mix, and slow handlers (a call that
# outlives its lease and ack deadline while up to 64 due events run inside it).
MIXES: tuple[tuple[str, tuple[Kind, ...], range], ...] = (
    ("default", (), range(200)),
    ("slow_handler", (Kind.SLOW_HANDLER,), range(1000, 1100)),
)
EPOCH_BASE = 1_767_225_600_000_000  # 2026-01-01 in microseconds: a realistic counter epoch
STORES = ("dedup", "fifo", "counter")


@dataclasses.dataclass(frozen=True)
class Observed:
    """Everything one run did that both drivers must do alike (field by field)."""

    draws_after_build: str
    trace: tuple[str, ...]
    answers: tuple[str, ...]
    effects: tuple[Any, ...]
    dead_letters: tuple[Any, ...]
    finals: tuple[Any, ...]
    cancels: tuple[Any, ...]
    operator: tuple[Any, ...]
    decisions: tuple[tuple[float, str, dict[str, Any]], ...]
    store_calls: tuple[tuple[Any, ...], ...]  # (true time, store.method, args, kwargs, reply)
    stores_at_end: tuple[tuple[str, str, dict[Any, Any]], ...]
    verdict: tuple[str, ...]
    faults: tuple[tuple[str, int], ...]
    events: int


class _Decisions(logging.Handler):
    """Every decision record the library logs, in order, at true time."""

    def __init__(self, now: Callable[[], float]) -> None:
        super().__init__(level=logging.DEBUG)
        self.now = now
        self.records: list[tuple[float, str, dict[str, Any]]] = []

    def emit(self, record: logging.LogRecord) -> None:
        payload = getattr(record, "decision", None)
        if isinstance(payload, dict):
            self.records.append((self.now(), record.getMessage(), dict(payload)))


@contextmanager
def _pinned_epochs() -> Iterator[None]:
    issued = itertools.count(EPOCH_BASE)
    real = counters._new_epoch
    counters._new_epoch = lambda: next(issued)
    try:
        yield
    finally:
        counters._new_epoch = real


def _record_store_calls(world: World, calls: list[tuple[Any, ...]]) -> None:
    """Each public method of the database's stores records its call and reply (a store view
    looks its method up on the store at each call; a rollback restores only dicts)."""
    for name in STORES:
        store = world.db.target(name)
        for method in dir(type(store)):
            real = getattr(store, method)
            if method.startswith("_") or not callable(real):
                continue

            def recording(
                *args: Any, _m: str = f"{name}.{method}", _f: Any = real, **kw: Any
            ) -> Any:
                reply = _f(*args, **kw)
                calls.append((world.loop.now, _m, args, kw, reply))
                return reply

            setattr(store, method, recording)


def _record_answers(world: World, answers: list[str]) -> None:
    drivers = world.drivers
    consume = drivers.consume

    def recording(slot: Any, message: Any, attempt: int) -> Answer:
        process = slot.process.name if slot is not None else "-"
        answer = consume(slot, message, attempt)
        answers.append(
            f"{world.loop.now:.6f} {message.message_id} ({world.ledger.lid_of(message)}) "
            f"attempt {attempt} on {process}: {answer.value}"
        )
        return answer

    drivers.consume = recording  # type: ignore[method-assign]


def observe(seed: int, shape: Shape, enable: tuple[Kind, ...] = ()) -> Observed:
    """Run ``seed`` with the consumer forced to ``shape``; what it did."""
    with _pinned_epochs():
        world = World(
            seed,
            Options(trace_limit=None, enable=enable, shapes=(shape.value,), one_at_a_time=True),
        )
        assert world.consumer_shape is shape
        draws = f"{hash(world.rng.getstate()):x}"
        calls: list[tuple[Any, ...]] = []
        answers: list[str] = []
        _record_store_calls(world, calls)
        _record_answers(world, answers)
        decisions = _Decisions(lambda: world.loop.now)
        logger = logging.getLogger(f"{LOGGER_NAME}.decisions")
        logger.addHandler(decisions)
        try:
            result = world.run()
        finally:
            logger.removeHandler(decisions)
    db = world.db
    ledger = world.ledger
    return Observed(
        draws_after_build=draws,
        trace=tuple(world.trace.lines()),
        answers=tuple(answers),
        effects=tuple(ledger.effects),
        dead_letters=tuple(ledger.dead_letters),
        finals=tuple(ledger.finals),
        cancels=tuple(ledger.cancels),
        operator=tuple(ledger.operator),
        decisions=tuple(decisions.records),
        store_calls=tuple(calls),
        stores_at_end=tuple(
            (name, attribute, value)
            for name in STORES
            for attribute, value in sorted(vars(db.target(name)).items())
            if isinstance(value, dict)
        ),
        verdict=tuple(str(v) for v in result.violations),
        faults=result.faults,
        events=result.events,
    )


def first_difference(sync: Observed, async_: Observed) -> str | None:
    """The first field in which the runs differ, and its first differing entry; None if none."""
    for f in dataclasses.fields(Observed):
        a, b = getattr(sync, f.name), getattr(async_, f.name)
        if a == b:
            continue
        if not isinstance(a, tuple):
            return f"{f.name}: sync {a!r} / asyncio {b!r}"
        at = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
        if at is None:
            at = min(len(a), len(b))
        before = a[at - 1] if at else "(start)"
        return (
            f"{f.name}[{at}] (sync {len(a)}, asyncio {len(b)} entries), after {before!s}:\n"
            f"  sync:    {a[at] if at < len(a) else '(nothing)'!s}\n"
            f"  asyncio: {b[at] if at < len(b) else '(nothing)'!s}"
        )
    return None


def differing(seeds: range, enable: tuple[Kind, ...], *, first: bool = False) -> list[str]:
    """Each seed whose two runs differ, with its first difference (``first``: stop there)."""
    out = []
    for seed in seeds:
        sync, async_ = observe(seed, Shape.PROCESS, enable), observe(seed, Shape.ASYNCIO, enable)
        diff = first_difference(sync, async_)
        if diff is not None:
            out.append(f"seed {seed} ({','.join(k.value for k in enable) or 'default'}): {diff}")
            if first:
                break
    return out


@pytest.mark.parametrize(("mix", "enable", "seeds"), MIXES, ids=[m[0] for m in MIXES])
def test_sync_and_asyncio_drivers_leave_the_same_effect_trace(
    mix: str, enable: tuple[Kind, ...], seeds: range
) -> None:
    found = differing(seeds, enable)
    assert not found, f"{len(found)} of {len(seeds)} {mix} schedules differ; first:\n{found[0]}"


# A decision the asyncio path alone takes differently: its processor bounds RetryLater's
# attempts at 1, not at the configured 5 (the drift a hand-written twin invites).
ASYNC_DRIFT = Mutation(
    "async-retry-bound",
    "the asyncio processor dead-letters a RetryLater at its first attempt",
    (
        SourceEdit(
            "pubsub_toolkit.consumer.processor_async",
            "AsyncMessageProcessor.__init__",
            "max_attempts=max_attempts,",
            "max_attempts=1,",
        ),
    ),
)


def test_a_decision_only_the_asyncio_path_takes_differently_is_found() -> None:
    with applied(ASYNC_DRIFT):
        found = differing(MIXES[0][2], (), first=True)
    assert found, f"{ASYNC_DRIFT.what}: no schedule differs"
