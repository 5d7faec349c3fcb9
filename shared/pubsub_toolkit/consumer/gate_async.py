"""The FIFO gate for asyncio: :class:`AsyncFifoGate`, over an ``AsyncFifoStore``, with an
``async def`` handler.

It is :class:`~pubsub_toolkit.consumer.gate.FifoGate` itself - every decision from
:mod:`.gate_rules`, every step of the orchestration (deliver, sweep, skip, replay, the run loop,
failures, the advance, a group's end, the repair of a store that lost writes) from :mod:`.gate`
- run on the event loop in a greenlet (:mod:`pubsub_toolkit._bridge`): each store call and the
handler are awaited there, waits are ``asyncio.sleep``. So the two gates cannot drift apart,
and a change to the sync gate is a change to this one.

Not (yet) async: the transactional mode (``commit_with``, sync Firestore only), and the
dead-letter publish, which goes through the ``DeadLetterer``'s sink as in the sync gate (a
rare path: one publish on the loop's thread per poison or refused message).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TYPE_CHECKING

from pubsub_toolkit._bridge import SyncFifoStore, awaiting, loop_clock, run_sync
from pubsub_toolkit.clock import SYSTEM_CLOCK, Clock
from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.consumer.gate_rules import GatePolicy, GateResult
from pubsub_toolkit.message import Message
from pubsub_toolkit.observability import DecisionLog
from pubsub_toolkit.stores.fifo_state.base import AsyncFifoStore, GroupState

if TYPE_CHECKING:
    from pubsub_toolkit.dead_letters.send import DeadLetterer

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
        #: The sync gate this one drives (its methods work only inside ``run_sync``).
        self.sync = FifoGate(
            SyncFifoStore(store),
            consumer=consumer,
            handler=awaiting(handler),
            dead_letters=dead_letters,
            policy=policy,
            clock=loop_clock(clock),
            log=log,
        )

    @property
    def consumer(self) -> str:
        return self.sync.consumer

    @property
    def policy(self) -> GatePolicy:
        return self.sync.policy

    @property
    def log(self) -> DecisionLog:
        return self.sync.log

    async def deliver(self, message: Message, group: str, seq: int) -> GateResult:
        """Handle one delivery. Returns when it may be acked; raises TransientError to nack."""
        return await run_sync(self.sync.deliver, message, group, seq)

    async def sweep(self, group: str) -> GateResult:
        """Periodic work for one group: run a parked head, act on an expired gap."""
        return await run_sync(self.sync.sweep, group)

    async def skip(self, group: str, seq: int, *, run: bool = True) -> GroupState:
        """An operator's skip of ``seq`` (see FifoGate.skip)."""
        return await run_sync(self.sync.skip, group, seq, run=run)

    async def replay(self, group: str, *, run: bool = True) -> GateResult:
        """An operator's replay of a blocked group (see FifoGate.replay)."""
        return await run_sync(self.sync.replay, group, run=run)

    async def groups(self) -> list[str]:
        """The groups a sweep visits (see FifoGate.groups)."""
        return await run_sync(self.sync.groups)

    def use_lease_hold(self, hold: timedelta) -> None:
        """See FifoGate.use_lease_hold (called before the consumer starts)."""
        self.sync.use_lease_hold(hold)

    async def release_held(self) -> None:
        """Give back the leases this process holds between deliveries (see FifoGate)."""
        await run_sync(self.sync.release_held)
