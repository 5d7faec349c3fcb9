"""The FIFO gate's core, part one: its parts and the steps every operation shares - the
compare-and-set loop under a lease (:meth:`FifoParts._update`), the advance's change, taking,
renewing and giving back a lease, and dead-lettering.

The core performs no I/O: each step is a generator that yields the effects it needs
(:mod:`.fifo_effects`) and receives their results from a driver. The operations are built on
this class in layers, one module each, so that each stays short: :mod:`.fifo_advance` (run the
handler and record the advance), :mod:`.fifo_run` (the run loop, failures, the gap),
:mod:`.fifo_deliver` (a delivery, or a batch of them), :mod:`.fifo_gate` (the sweep, the
operator's skip and replay: :class:`~.fifo_gate.FifoCore`, what a driver holds).

(About 300 lines: the parts' wiring, and every step that more than one operation takes.)
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.clock import Clock
from pubsub_toolkit.core import fifo_rules as rules
from pubsub_toolkit.core import fifo_verdicts as verdicts
from pubsub_toolkit.core.fifo_effects import MAX_CAS_ROUNDS, DeadLetter, Decide, Op
from pubsub_toolkit.core.fifo_end import GroupEnd
from pubsub_toolkit.core.fifo_epochs import Sequences
from pubsub_toolkit.core.fifo_held import Claim, HeldLeases
from pubsub_toolkit.core.fifo_policy import (
    REASON_SEQUENCE_REUSED,
    GateOutcome,
    GatePolicy,
    GateResult,
    message_key,
)
from pubsub_toolkit.core.fifo_seen import SeenStore
from pubsub_toolkit.errors import (
    PermanentError,
    StaleClaimError,
    StoreUnavailableError,
    TransientError,
)
from pubsub_toolkit.message import Message
from pubsub_toolkit.stores.fifo_state.base import GroupState, key_digest, plain_digest

Step = tuple[int, Message]  # a number and the message that runs there


@dataclass
class Found:
    """What an advance's compare-and-set met in the record (filled in by the change)."""

    parked: set[int] = field(default_factory=set)  # numbers a copy was parked at: unpark them
    displaced: set[int] = field(default_factory=set)  # numbers another message's copy holds


class EarlyArrivalError(TransientError):
    """An early arrival in nack mode (``park=False``): deliver it again later."""


class HandlerFailedError(TransientError):
    """The handler failed below the poison limit: deliver the message again."""


class ParkedInPlaceError(TransientError):
    """A copy was parked in place of an earlier sequence's copy at its number, whose run may
    still unpark the number: deliver the message again (its redelivery parks it again)."""

    def __init__(self, group: str, seq: int) -> None:
        super().__init__(f"{group}#{seq}: parked in place of the old sequence's copy")
        self.seq = seq


class FifoParts:
    """One gate's parts: its policy, its clock, its decision log and its memory of the store
    (shared by every operation of the gate, on any thread: a generator per operation)."""

    def __init__(
        self,
        *,
        consumer: str,
        decide: Decide,
        policy: GatePolicy | None = None,
        clock: Clock,
        dead_letters: bool = False,
        transactional: bool = False,
        batch: int = 1,
    ) -> None:
        """``decide`` logs a decision; ``dead_letters``: a dead-letter topic is configured;
        ``transactional``: the handler commits its writes with the advance (``CommitWith``);
        ``batch`` > 1: the handler takes lists of up to ``batch`` consecutive messages."""
        self.consumer = consumer
        self.batch = batch
        self.policy = policy or GatePolicy()
        self.dead_letters = dead_letters
        self.transactional = transactional
        self._clock = clock
        self._decide = decide
        # The store as this process has seen it: a read that went back is repaired there.
        self._seen = SeenStore(
            consumer,
            clock,
            decide=decide,
            keep_reissued=self._reused,
            dead_letter=self._dead_letter,
            date=self._dated,
            held=self._holds,
        )
        # A gap that keeps waiting is reported when it times out, then at each doubling of its
        # age (group -> its gap_since, the age in seconds of its next report): not every sweep.
        self._gap_reports: dict[str, tuple[datetime, float]] = {}
        # Leases this process keeps between a group's deliveries (policy.lease_hold).
        self._held = HeldLeases(self.policy, clock)
        self._end = GroupEnd(self._seen, consumer, decide, self._dead_letter)
        # A counter that started again (a new epoch) starts the group's sequence again.
        self._sequences = Sequences(
            self._seen,
            consumer,
            clock,
            decide,
            self._dead_letter,
            self.policy.lease,
            self._holds,
            self._running_here,
        )

    @property
    def seen(self) -> SeenStore:
        """This gate's memory of the store (what a test of a store loss tells it it wrote)."""
        return self._seen

    def _held_lease(
        self, group: str, state: GroupState, now: datetime, digest: str
    ) -> Op[GroupState | None]:
        """``state`` leased to this run through the lease this process holds on ``group``: as
        it is if fresh, else renewed by one write (a new fencing token - the lease is ours and
        unused, so nobody else can hold it); None if it is not ours any more or the state
        moved (the caller decides again)."""
        claim = self._held.claim(group, state, now)
        if claim is Claim.FREE:
            return state
        if claim is Claim.RENEW:
            renewed = yield from self._seen.save(
                group, rules.leased(state, digest, now=now, lease=self.policy.lease), state
            )
            if renewed is None:
                # The record moved (someone parked a copy): the lease is still ours, so keep
                # holding it; the caller reads the record again and decides.
                self._held.hold(group, state.lease_token)
            return renewed
        return None

    def _busy(self, group: str, state: GroupState, now: datetime) -> bool:
        """The group's head waits: leased, backing off, or run by this process past its lease."""
        return state.lease_live(now) or state.backing_off(now) or self._held.busy(group)

    def _running_here(self, group: str) -> bool:
        """Whether this process is running one of ``group``'s numbers now (``_held`` is
        replaced by :meth:`use_lease_hold`, so it is looked up at each call)."""
        return self._held.busy(group)

    def _holds(self, group: str) -> bool:
        # Read at each call: use_lease_hold replaces self._held.
        return self._held.holds(group)

    def _release(self, group: str, token: int) -> Op[None]:
        try:
            yield from self._release_lease(group, token)
        except StaleClaimError:
            pass  # fenced meanwhile (an operator, a takeover after expiry): not ours to free
        except (StoreUnavailableError, TransientError) as exc:
            # Not given back: it expires on its own after the lease; say so.
            self._decide("lease_not_released", group, 0, f"held lease left to expire: {exc}")

    def _dated(self, state: GroupState) -> GroupState:
        """``state`` as written: an idle group's record expires a retention from now."""
        return rules.dated(state, now=self._clock.now(), retention=self.policy.completed_retention)

    def _reused(self, message: Message, group: str, seq: int, state: GroupState) -> Op[GateResult]:
        """A different message at a number already taken: keep it, with the reason, and alert."""
        detail = (
            f"{group}#{seq} already belongs to another dedup key (last processed "
            f"{state.last_processed}): a producer reused the number, or the counter's store "
            "lost writes"
        )
        self._decide("sequence_reused", group, seq, f"ALERT: {detail}", level=logging.ERROR)
        yield from self._dead_letter(message, group, seq, REASON_SEQUENCE_REUSED, detail)
        return GateResult(GateOutcome.DEAD_LETTERED, group, seq)

    def _dead_letter(
        self, message: Message, group: str, seq: int, reason: str, detail: str
    ) -> Op[None]:
        """Dead-letter ``message``; without a dead-letter topic refuse to ack it at all."""
        if not self.dead_letters:
            raise PermanentError(reason, f"{detail} (and no dead-letter topic is configured)")
        # Once per copy - (number, sequence, message) - whatever the reason, however often it is
        # redelivered: a repair that finds a lost sequence's copy cannot tell whether another
        # process dead-lettered it already, maybe for another reason (past the group's end).
        digest = key_digest(message_key(message))
        epoch = message.attributes.get(attr.FIFO_EPOCH, "")
        once = f"dead_letter:{group}#{seq}@{epoch}:{digest}"
        replay_id = message.attributes.get(attr.REPLAY_ID)
        if replay_id:  # a `dlq replay` took the letter off the topic: leave a new one
            once += f":replay:{replay_id}"
        yield DeadLetter(message, reason, detail, f"{group}#{seq}", once=once, digest=digest)

    def _take_lease(
        self, group: str, state: GroupState, now: datetime, digest: str
    ) -> Op[GroupState | None]:
        if state.blocked_at is not None or state.lease_live(now) or self._held.busy(group):
            return None  # someone runs the group, or an operator must act first
        leased = rules.leased(state, digest, now=now, lease=self.policy.lease)
        return (yield from self._seen.save(group, leased, state))

    def _one(self, message: Message) -> Any:
        """What the handler takes for one message: the message, or in batch mode a list."""
        return [message] if self.batch > 1 else message

    def _advance_change(
        self,
        seq: int,
        *,
        skipped: tuple[int, ...],
        digest: str | None = None,
        found: Found | None = None,
        end: bool = False,
        hold: bool = False,
    ) -> Callable[[GroupState], GroupState]:
        """The advance past ``seq``; with ``hold`` the lease stays for the group's next delivery
        (see :mod:`.fifo_held`)."""

        def advance(s: GroupState) -> GroupState:
            other = s.key_of(seq) if seq in s.parked else None
            plain = None if digest is None else plain_digest(digest)
            if found is not None:
                if seq in s.parked:
                    found.parked.add(seq)
                if other is not None and other != plain:
                    found.displaced.add(seq)  # another message's copy parked while ours ran
            if s.last_processed >= seq:
                # An operator skipped past it meanwhile: never move the counter backwards.
                raise StaleClaimError(f"{self.consumer}: {seq} was passed over while it ran")
            # Dated here as well as on save: a transactional commit writes it directly.
            return self._dated(
                rules.advanced(
                    s,
                    seq,
                    skipped=skipped,
                    digest=digest,
                    now=self._clock.now(),
                    lease=self.policy.lease,
                    end=end,
                    retention=self.policy.completed_retention,
                    hold=hold,
                )
            )

        return advance

    def _advance(
        self,
        group: str,
        token: int,
        seq: int,
        *,
        skipped: tuple[int, ...],
        digest: str | None = None,
        end: bool = False,
    ) -> Op[GroupState]:
        change = self._advance_change(
            seq, skipped=skipped, digest=digest, end=end, hold=self._held.enabled
        )
        return (yield from self._update(group, token, change))

    def _release_lease(
        self, group: str, token: int, *, known: GroupState | None = None
    ) -> Op[None]:
        yield from self._update(group, token, rules.lease_released, known=known)

    def _update(
        self,
        group: str,
        token: int,
        change: Callable[[GroupState], GroupState],
        *,
        known: GroupState | None = None,
    ) -> Op[GroupState]:
        """Compare-and-set ``change`` while we still hold lease ``token``; return what we wrote.

        (Not a re-read: once our write frees the lease, the record belongs to whoever leases
        it next.) ``known`` is the state this worker last wrote, with its version: the first
        attempt compares against it without reading the record - if anyone wrote since (or
        the store lost our write), the compare-and-set fails and the record is read.
        """
        for _ in range(MAX_CAS_ROUNDS):
            if known is not None and known.version is not None:
                state, known, unread = known, None, True
            else:
                state, unread = (yield from self._seen.load(group)), False
            # A repair of a store loss may have moved this run's own lease to a new token.
            token = self._seen.lease_now(group, token)
            if not verdicts.holds_lease(state, token):
                if unread:
                    # What this run last wrote predates that repair: read the record itself
                    # before calling the lease lost (simulation seed 90643: a false fence).
                    continue
                raise StaleClaimError(
                    f"{self.consumer}/{group}: lease {token} was taken over "
                    f"(now {state.lease_token}); the handler outlived its lease"
                )
            stored = yield from self._seen.save(group, change(state), state)
            if stored is not None:
                return stored
        raise TransientError(f"{self.consumer}/{group}: the state kept changing; try again")
