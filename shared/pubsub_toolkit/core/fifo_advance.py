"""The FIFO gate's core, part two: run the handler for a number (or a batch of them) and record
the advance past it - in one transaction with the handler's writes in transactional mode - and
what the advance met: a copy of another message parked at the number meanwhile.

No I/O: the handler's call, the store's writes and the waits between retries are effects
(:mod:`.fifo_effects`) a driver performs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.core.fifo_effects import CommitWith, Handle, Load, Op, ParkedMessage, Sleep
from pubsub_toolkit.core.fifo_parts import FifoParts, Found, Step
from pubsub_toolkit.core.fifo_policy import message_key
from pubsub_toolkit.errors import PermanentError, StoreUnavailableError
from pubsub_toolkit.message import Message
from pubsub_toolkit.stores.fifo_state.base import FILLER_MARK, GroupState, key_digest

# The waits before the advance's write is tried again after a store hiccup (seconds).
ADVANCE_RETRY_DELAYS = (0.1, 0.5, 1.5)


class FifoAdvance(FifoParts):
    """The handler's run and the advance past it."""

    def _handle_and_advance(
        self,
        group: str,
        token: int,
        seq: int,
        message: Message,
        *,
        run_handler: bool,
        known: GroupState,
        found: Found,
    ) -> Op[GroupState]:
        """Run the handler for ``seq`` and advance past it - in one transaction if configured.

        ``known`` is the state this worker last wrote (see ``_update``); ``found`` is filled
        with what the advance met in the record."""
        if not run_handler or attr.is_filler(message):
            return (yield from self._advance_after_effect(group, token, seq, message, known, found))
        if self.transactional:
            change = self._advance_change(
                seq,
                skipped=(),
                digest=key_digest(message_key(message)),
                end=attr.is_end_of_group(message),
                found=found,
                hold=self._held.enabled,
            )
            committed = yield from self._commit_with_handler(
                group, token, change, self._one(message)
            )
            if found.displaced:
                yield from self._dead_letter_displaced(group, seq, key_digest(message_key(message)))
            return committed
        yield Handle(self._one(message))
        return (yield from self._advance_after_effect(group, token, seq, message, known, found))

    def _commit_with_handler(
        self, group: str, token: int, change: Callable[[GroupState], GroupState], taken: Any
    ) -> Op[GroupState]:
        """Transactional mode: the handler's writes for ``taken`` (a message, or a batch's list)
        and ``change`` commit in one Firestore transaction."""
        committed: GroupState = yield CommitWith(self.consumer, group, token, change, taken)
        return self._seen.witnessed(committed)

    def _handle_and_advance_batch(
        self, group: str, token: int, steps: list[Step], *, known: GroupState, found: Found
    ) -> Op[GroupState]:
        """Run the handler once for ``steps`` and advance past them all in one write (in the
        handler's transaction in transactional mode)."""
        messages = [message for _seq, message in steps]
        digests = {seq: key_digest(message_key(message)) for seq, message in steps}
        hold = self._held.enabled
        changes = [
            self._advance_change(seq, skipped=(), digest=digests[seq], found=found, hold=hold)
            for seq, _message in steps
        ]

        def change(state: GroupState) -> GroupState:
            for step in changes:
                state = step(state)
            return state

        last = steps[-1][0]
        if self.transactional:
            state = yield from self._commit_with_handler(group, token, change, messages)
        else:
            yield Handle(messages)
            state = yield from self._advance_recorded(
                group, token, change, seq=last, digest=digests[last], known=known
            )
        for seq in sorted(found.displaced):
            yield from self._dead_letter_displaced(group, seq, digests[seq])
        return state

    def _advance_after_effect(  # noqa: PLR0917 - private, two call sites
        self,
        group: str,
        token: int,
        seq: int,
        message: Message,
        known: GroupState,
        found: Found,
    ) -> Op[GroupState]:
        """Record the advance past ``seq`` once its effect happened, retrying a store hiccup.

        Losing this write would let ``seq`` run again once the lease expires, so a short
        outage is worth a few waits (as for a dedup ``complete``); past them the failure is an
        ALERT: the effect may repeat.
        """
        digest = key_digest(message_key(message))
        filler = message.attributes.get(attr.FIFO_FILLER, "")
        skipped = (seq,) if filler.startswith(attr.FILLER_DEAD_LETTERED) else ()
        recorded = FILLER_MARK + digest if filler else digest
        change = self._advance_change(
            seq,
            skipped=skipped,
            digest=recorded,
            found=found,
            end=attr.is_end_of_group(message),
            hold=self._held.enabled,
        )
        state = yield from self._advance_recorded(
            group, token, change, seq=seq, digest=recorded, known=known
        )
        if found.displaced:
            yield from self._dead_letter_displaced(group, seq, digest)
        return state

    def _advance_recorded(
        self,
        group: str,
        token: int,
        change: Callable[[GroupState], GroupState],
        *,
        seq: int,
        digest: str,
        known: GroupState,
    ) -> Op[GroupState]:
        """Write ``change`` (an advance past ``seq``, whose message's ``digest`` it records)."""
        for attempt, delay in enumerate((*ADVANCE_RETRY_DELAYS, None)):
            try:
                if attempt > 0:
                    state = yield from self._seen.load(group)
                    mine = state.lease_token == token and state.records(
                        seq, digest.removeprefix(FILLER_MARK)
                    )
                    if mine and state.last_processed >= seq:
                        return state  # the first attempt was applied; only its answer was lost
                # A retry reads the record: the first attempt may have applied.
                return (
                    yield from self._update(group, token, change, known=None if attempt else known)
                )
            except StoreUnavailableError:
                if delay is None:
                    self._decide(
                        "advance_failed",
                        group,
                        seq,
                        "ALERT: effect done but the advance was not recorded; it may repeat "
                        "after the lease",
                        level=logging.ERROR,
                        alert="advance_failed",
                    )
                    raise
                yield Sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    def _dead_letter_displaced(self, group: str, seq: int, digest: str) -> Op[None]:
        """A copy of ANOTHER message parked at ``seq`` while ours ran (it arrived while the
        number was in progress): it can never run now, so it is a reused number."""
        parked = yield ParkedMessage(self.consumer, group, seq)
        if parked is None or key_digest(message_key(parked)) == digest:
            return
        try:
            yield from self._reused(parked, group, seq, (yield Load(self.consumer, group)))
        except PermanentError:
            # No dead-letter topic, and the copy was acked long ago: say so loudly.
            self._decide(
                "reused_dropped",
                group,
                seq,
                "ALERT: a different message parked at this number could not be dead-lettered "
                "(no dead-letter topic)",
                level=logging.ERROR,
                alert="reused_dropped",
            )
