"""The FIFO gate's core: :class:`FifoCore`, every operation of the gate as a generator over
effects - a delivery (one or a batch, :mod:`.fifo_deliver`), the sweep of a group (a parked
head, an expired gap, copies past a group's end), the operator's skip and replay, and the leases
held between deliveries given back (a consumer stopping).

Each groups' messages run strictly in ``fifo_seq`` order, once: every state change is a
compare-and-set on the group's record, under a fencing lease. The policies and outcomes are
:mod:`.fifo_policy`, the state transitions :mod:`.fifo_rules`, the store as this process saw it
:mod:`.fifo_seen`, a group's end :mod:`.fifo_end`, a counter's epochs :mod:`.fifo_epochs`, the
held leases :mod:`.fifo_held`. The drivers - :class:`~pubsub_toolkit.consumer.gate.FifoGate`
(sync) and :class:`~pubsub_toolkit.consumer.gate_async.AsyncFifoGate` (asyncio) - perform the
effects each operation yields (:mod:`.fifo_effects`) and decide nothing.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import timedelta

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.core import fifo_rules as rules
from pubsub_toolkit.core.fifo_deliver import FifoDeliver
from pubsub_toolkit.core.fifo_effects import Op, ParkedMessage, Unpark
from pubsub_toolkit.core.fifo_held import Claim, HeldLeases
from pubsub_toolkit.core.fifo_policy import GateOutcome, GateResult, message_key
from pubsub_toolkit.stores.fifo_state.base import GroupState, key_digest


class FifoCore(FifoDeliver):
    """One gate's operations (each a generator of effects) and its memory of the store."""

    def sweep(self, group: str) -> Op[GateResult]:
        """Periodic work for one group: run a parked head, act on an expired gap."""
        state = yield from self._seen.load(group)
        now = self._clock.now()
        held = self._held.holds(group) and state.blocked_at is None and not state.complete
        if held and state.head in state.parked:
            # Another process's copy of the head waits for the lease this process holds.
            return (yield from self._run_parked_head(group, state))
        if held and state.parked:
            # A gap opened behind the lease this process holds: give it back (one write), so
            # an operator can skip the missing number and any process can run it.
            if self._held.claim(group, state, now) is not Claim.NONE:
                yield from self._release(group, state.lease_token)
            state = yield from self._seen.load(group)
        if state.complete:
            # Nothing runs in a complete group; copies parked past its end (a crash between
            # the end and their dead-lettering) are settled here.
            yield from self._end.settle(group, state)
            return GateResult(GateOutcome.IDLE, group, state.head)
        busy = self._busy(group, state, now)
        if state.blocked_at is not None or busy or not state.parked:
            return GateResult(GateOutcome.IDLE, group, state.head)
        if state.head not in state.parked:
            state = yield from self._on_gap(group, state, now)
            if state.head not in state.parked:
                return GateResult(GateOutcome.IDLE, group, state.head)
        return (yield from self._run_parked_head(group, state))

    def _run_parked_head(self, group: str, state: GroupState) -> Op[GateResult]:
        """Run the group's parked head, under the lease this process holds or one taken now;
        a head listed but not stored is repaired or forgotten first."""
        now = self._clock.now()
        # The listed message's copy (re-parked from this process's own if the store lost it).
        message = yield from self._seen.parked(group, state, state.head)
        if message is None:
            # Listed as parked but not stored (a crash between the two writes): forget it, so
            # the gap logic - not a lease held for nothing - decides what happens next.
            head = state.head
            yield from self._seen.save(group, rules.without_lost_parked(state, head), state)
            self._decide(
                "parked_lost",
                group,
                head,
                "ALERT: listed as parked but not stored (lost by the store, or a crash between "
                "the two writes); seek the subscription back or skip it",
                level=logging.ERROR,
                alert="parked_lost",
            )
            return GateResult(GateOutcome.IDLE, group, head)
        digest = key_digest(message_key(message))
        leased = (
            (yield from self._held_lease(group, state, now, digest))
            if self._held.holds(group)
            else None
        )
        if leased is None:
            leased = yield from self._take_lease(group, state, now, digest)
        if leased is None:
            return GateResult(GateOutcome.IDLE, group, state.head)
        return (yield from self._run(group, [(state.head, message)], leased, from_park=True))

    def skip(self, group: str, seq: int, *, run: bool = True) -> Op[GroupState]:
        """Pass over ``seq`` (a poison or lost message) with a tombstone; then, with ``run``,
        resume the group here (an operator's CLI leaves that to the consumer's sweeper)."""
        # Skipping the marked end ends the group all the same (the number's copy says so).
        parked = yield ParkedMessage(self.consumer, group, seq)
        end = parked is not None and attr.is_end_of_group(parked)
        while True:
            state = yield from self._seen.load(group)
            if state.complete:
                raise ValueError(f"group {group!r} is complete (ended at {state.end_seq})")
            if seq != state.head:
                raise ValueError(f"group {group!r} waits for {state.head}; cannot skip {seq}")
            if state.blocked_at is None and state.lease_live(self._clock.now()):
                raise ValueError(f"{group!r} #{seq} is being processed right now; not skipped")
            # A new lease token fences any worker that still thinks it runs this number.
            new = rules.operator_skipped(
                state,
                seq,
                end=end,
                now=self._clock.now(),
                retention=self.policy.completed_retention,
            )
            if (yield from self._seen.save(group, new, state)):
                break
        yield Unpark(self.consumer, group, seq)
        self._decide("skipped", group, seq, "skipped by operator", level=logging.WARNING)
        if run:
            yield from self.sweep(group)
        return (yield from self._seen.load(group))

    def replay(self, group: str, *, run: bool = True) -> Op[GateResult]:
        """Unblock a group and give its parked head (the poison message) fresh attempts; with
        ``run``, run it now, else the consumer's sweeper runs it next."""
        while True:
            state = yield from self._seen.load(group)
            new = rules.replayed(state)
            if (yield from self._seen.save(group, new, state)):
                break
        self._decide("replayed", group, state.head, "replay requested by operator")
        if not run:
            return GateResult(GateOutcome.IDLE, group, state.head)
        return (yield from self.sweep(group))

    def groups(self) -> Op[list[str]]:
        """The groups a sweep visits: those needing attention (parked or blocked work, as the
        store lists them and as this process saw them) - O(groups with work), however many
        groups went idle. (A held lease needs no visit: unused, it expires by itself.)"""
        return (yield from self._seen.groups())

    def use_lease_hold(self, hold: timedelta) -> None:
        """Hold leases between a group's deliveries for ``hold`` (see ``GatePolicy``), unless
        the policy already chose; the streaming ``Consumer`` calls it before it starts."""
        if self.policy.lease_hold is None:
            self.policy = replace(self.policy, lease_hold=hold)
            self._held = HeldLeases(self.policy, self._clock)

    def release_held(self) -> Op[None]:
        """Give back every lease this process holds between deliveries (a consumer stopping):
        another process then runs those groups at once instead of after the lease."""
        for group, token in self._held.take_all().items():
            yield from self._release(group, token)
