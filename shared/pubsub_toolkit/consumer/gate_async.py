"""The FIFO gate for asyncio: :class:`AsyncFifoGate`, over an ``AsyncFifoStore``, with an
``async def`` handler.

It drives the very generators the sync :class:`~pubsub_toolkit.consumer.gate.FifoGate` drives -
:class:`~pubsub_toolkit.core.fifo_gate.FifoCore`'s operations, every decision and every step of
the orchestration (deliver, sweep, skip, replay, the run loop, failures, the advance, a group's
end, the repair of a store that lost writes) - and performs their effects
(:mod:`pubsub_toolkit.core.fifo_effects`) natively: each store call and the handler awaited,
waits ``asyncio.sleep``, the dead-letter publish (a blocking client) run off the loop in a
thread. So the two gates cannot drift apart, and nothing here blocks the event loop.

The asyncio message processor (:mod:`.processor_async`) calls this gate's :meth:`deliver` and
gives it its rejection records (:attr:`AsyncFifoGate.rejections`, async ones), so a dead letter
the gate sends for a copy is sent once, as the sync gate's.

Not async: the transactional mode (``commit_with``, sync Firestore only).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar, assert_never

from pubsub_toolkit.clock import SYSTEM_CLOCK, Clock, SystemClock
from pubsub_toolkit.consumer.gate import span_effect
from pubsub_toolkit.core import fifo_effects as fx
from pubsub_toolkit.core.fifo_gate import FifoCore
from pubsub_toolkit.core.fifo_policy import GatePolicy, GateResult
from pubsub_toolkit.message import Message
from pubsub_toolkit.observability import HANDLER_DURATION, DecisionLog
from pubsub_toolkit.stores.fifo_state.base import AsyncFifoStore, GroupState

if TYPE_CHECKING:
    from pubsub_toolkit.dead_letters.send import DeadLetterer
    from pubsub_toolkit.dedup.idempotent_async import AsyncIdempotentProcessor

T = TypeVar("T")
AsyncHandler = Callable[[Message], Awaitable[object]]


class AsyncFifoGate:
    """Awaits ``handler`` for each group's messages in sequence order, exactly once."""

    def __init__(
        self,
        store: AsyncFifoStore,
        *,
        consumer: str,
        handler: AsyncHandler,
        dead_letters: DeadLetterer | None = None,
        policy: GatePolicy | None = None,
        clock: Clock = SYSTEM_CLOCK,
        log: DecisionLog | None = None,
    ) -> None:
        self.store = store
        self._handler = handler
        self._dead_letters = dead_letters
        self._clock = clock
        self.log = log or DecisionLog(consumer)
        #: Makes a dead-lettering happen once per copy (the asyncio processor sets it).
        self.rejections: AsyncIdempotentProcessor | None = None
        self.core = FifoCore(
            consumer=consumer,
            decide=self.log.group_decision,
            policy=policy,
            clock=clock,
            dead_letters=dead_letters is not None,
        )
        # The frequent effects by type, each one bound coroutine method: a dict lookup per
        # effect instead of a class pattern per case in turn (issue 26, as FifoGate's).
        self._fast: dict[type, Callable[[Any], Awaitable[Any]]] = {
            fx.Load: self._load,
            fx.Save: self._save,
            fx.Handle: self._handle,
            fx.ParkedMessage: self._parked_message,
            fx.Park: self._park,
            fx.Unpark: self._unpark,
        }

    @property
    def consumer(self) -> str:
        return self.core.consumer

    @property
    def policy(self) -> GatePolicy:
        return self.core.policy

    async def deliver(self, message: Message, group: str, seq: int) -> GateResult:
        """Handle one delivery. Returns when it may be acked; raises TransientError to nack."""
        return await self._perform(self.core.deliver(message, group, seq))

    async def sweep(self, group: str) -> GateResult:
        """Periodic work for one group: run a parked head, act on an expired gap."""
        return await self._perform(self.core.sweep(group))

    async def skip(self, group: str, seq: int, *, run: bool = True) -> GroupState:
        """An operator's skip of ``seq`` (see FifoGate.skip)."""
        return await self._perform(self.core.skip(group, seq, run=run))

    async def replay(self, group: str, *, run: bool = True) -> GateResult:
        """An operator's replay of a blocked group (see FifoGate.replay)."""
        return await self._perform(self.core.replay(group, run=run))

    async def groups(self) -> list[str]:
        """The groups a sweep visits (see FifoGate.groups)."""
        return await self._perform(self.core.groups())

    def use_lease_hold(self, hold: timedelta) -> None:
        """See FifoGate.use_lease_hold (called before the consumer starts)."""
        self.core.use_lease_hold(hold)

    async def release_held(self) -> None:
        """Give back the leases this process holds between deliveries (see FifoGate)."""
        await self._perform(self.core.release_held())

    # --- the driver ----------------------------------------------------------------------

    async def _perform(self, op: fx.Op[T]) -> T:
        """Run one operation of the core on the loop: each effect awaited here, in order."""
        spans: list[AbstractContextManager[object]] = []
        fast = self._fast

        async def perform(effect: fx.Effect) -> Any:
            do = fast.get(type(effect))
            if do is not None:
                return await do(effect)
            return await self._effect(effect, spans)

        return await fx.run_async(op, perform)

    async def _load(self, effect: fx.Load) -> GroupState:
        return await self.store.load(effect.consumer, effect.group)

    async def _save(self, effect: fx.Save) -> GroupState | None:
        return await self.store.save(effect.consumer, effect.group, effect.state, effect.expected)

    async def _handle(self, effect: fx.Handle) -> None:
        started = time.perf_counter()
        await handler_call(self._handler(effect.taken))
        self.log.metrics.observe(HANDLER_DURATION, time.perf_counter() - started)

    async def _parked_message(self, effect: fx.ParkedMessage) -> Message | None:
        return await self.store.parked_message(effect.consumer, effect.group, effect.seq)

    async def _park(self, effect: fx.Park) -> None:
        await self.store.park(effect.consumer, effect.group, effect.seq, effect.message)

    async def _unpark(self, effect: fx.Unpark) -> None:
        await self.store.unpark(effect.consumer, effect.group, effect.seq)

    async def _effect(self, effect: fx.Effect, spans: list[AbstractContextManager[object]]) -> Any:
        store = self.store
        # The spans first (one pair per number run); the fast ones come here only by a caller
        # other than _perform's dispatch.
        match effect:
            case fx.SpanStart() | fx.SpanEnd():
                return span_effect(effect, spans, self.consumer)
            case fx.Groups(consumer):
                return await store.groups(consumer)
            case fx.DeadLetter():
                return await self._dead_letter(effect)
            case fx.Sleep(seconds):
                if isinstance(self._clock, SystemClock):
                    return await asyncio.sleep(seconds)
                return self._clock.sleep(seconds)  # a test's clock: it just moves
            case fx.CommitWith():
                raise TypeError("the asyncio gate has no transactional mode")
            case fx.Load() | fx.Save() | fx.Handle() | fx.ParkedMessage() | fx.Park() | fx.Unpark():
                return await self._fast[type(effect)](effect)
            case _:
                assert_never(effect)

    async def _dead_letter(self, effect: fx.DeadLetter) -> None:
        """Publish to the dead-letter topic off the loop - once per ``effect.once`` with the
        rejection records the asyncio processor gave the gate."""
        dead_letters = self._dead_letters
        assert dead_letters is not None  # the core asks only with a dead-letter topic

        def send() -> str:
            return dead_letters.send(
                effect.message, effect.reason, effect.detail, dedup_key=effect.dedup_key
            )

        if effect.once is None or self.rejections is None:
            await off_loop(send)
            return
        await self.rejections.process(effect.once, effect.digest, lambda: off_loop(send))


async def handler_call(call: Awaitable[T]) -> T:
    """Await the user's handler call; a ``CancelledError`` it raises while its task was *not*
    cancelled becomes a ``RuntimeError`` - a handler failure, counted and retried like any other.

    Why: such an error comes out of the handler itself (it awaited a task or future that
    something else cancelled). Taken for this task going away, it left the delivery neither
    acked nor nacked - the streaming client kept it leased for up to an hour - and the FIFO
    group waited behind it. A real cancellation of the task (the consumer stopping, the loop
    closing) still goes through as it is."""
    try:
        return await call
    except asyncio.CancelledError as exc:
        task = asyncio.current_task()
        if task is None or task.cancelling():
            raise
        raise RuntimeError(
            "the handler raised CancelledError although its task was not cancelled (did it "
            "await a task or future that was cancelled?)"
        ) from exc


async def off_loop(call: Callable[[], T]) -> T:
    """``call()`` in a worker thread, so a blocking publish never stalls the event loop - or
    right here when no loop runs (a caller driving the coroutine by hand, as the simulation
    does: there is no loop to stall)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return call()
    return await asyncio.to_thread(call)
