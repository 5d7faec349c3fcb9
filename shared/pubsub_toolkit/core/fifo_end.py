"""A FIFO group's end (``fifo_end``), as the gate handles it: a delivery numbered past the end
of a complete group, and the copies parked past the end before it ran.

A number past the end is dead-lettered ``fifo_after_end`` (never parked for ever) - unless it
is a copy of a message that already ran (a renumbered retry: a duplicate) or a filler (nothing
to keep). The gate's core (:mod:`.fifo_deliver`) decides when; this is what each verdict does.
"""

from __future__ import annotations

import logging

from pubsub_toolkit.core import fifo_rules as rules
from pubsub_toolkit.core.fifo_alerts import hand_over
from pubsub_toolkit.core.fifo_effects import MAX_CAS_ROUNDS, Decide, Op, ParkedMessage, Unpark
from pubsub_toolkit.core.fifo_policy import REASON_AFTER_END, GateOutcome, GateResult
from pubsub_toolkit.core.fifo_rules import EndVerdict
from pubsub_toolkit.core.fifo_seen import DeadLetter, SeenStore
from pubsub_toolkit.errors import PermanentError, TransientError
from pubsub_toolkit.message import Message
from pubsub_toolkit.stores.fifo_state.base import GroupState


class GroupEnd:
    """What happens past a complete group's end, for one gate."""

    def __init__(
        self,
        seen: SeenStore,
        consumer: str,
        decide: Decide,
        dead_letter: DeadLetter,
    ) -> None:
        self._seen = seen
        self._consumer = consumer
        self._decide = decide
        self._dead_letter = dead_letter
        # A repair that finds a copy past the end of the group it saw, in a sequence the
        # store has since left (a counter restarted with it), settles it here too.
        seen.on_past_end(self.settle_copy)

    def after_end(
        self, message: Message, group: str, seq: int, state: GroupState, verdict: EndVerdict
    ) -> Op[GateResult]:
        """A delivery numbered past the end of a complete group (``verdict`` says which kind)."""
        end = state.last_processed
        if verdict is EndVerdict.DUPLICATE:
            self._decide(
                "duplicate",
                group,
                seq,
                f"past the group's end ({end}), but a copy of a message "
                "that already ran (a renumbered retry)",
            )
            return GateResult(GateOutcome.DUPLICATE, group, seq)
        if verdict is EndVerdict.FILLER:
            self._decide("filled", group, seq, f"a filler past the group's end ({end})")
            return GateResult(GateOutcome.FILLED, group, seq)
        detail = f"{group}#{seq} arrived after the group had ended at {end} (fifo_end)"
        self._decide("after_end", group, seq, detail, level=logging.WARNING)
        yield from self._dead_letter(message, group, seq, REASON_AFTER_END, detail)
        return GateResult(GateOutcome.DEAD_LETTERED, group, seq)

    def settle_copy(self, copy: Message, group: str, seq: int, state: GroupState) -> Op[None]:
        """``copy``, parked at ``seq`` past the end of complete ``state`` (and acked then), judged
        as a delivery would be: dead-lettered ``fifo_after_end`` (once per copy), or dropped as
        a duplicate or a filler - or, with no dead-letter topic, handed to the operator whole."""
        try:
            yield from self.after_end(copy, group, seq, state, rules.after_end(state, seq, copy))
        except PermanentError:
            # No dead-letter topic, and the copy was acked when parked: hand it to the operator
            # whole (seed 91788 lost one with a bare ALERT).
            hand_over(
                self._decide,
                group,
                seq,
                copy,
                why=f"was parked past the group's end ({state.end_seq})",
                outcome="after_end_dropped",
                alert="after_end_dropped",
                then="publish it again in a new group or as a plain message, or drop it",
            )

    def settle(self, group: str, state: GroupState) -> Op[None]:
        """The copies parked past a complete group's end: each judged as a delivery would be
        (dead-lettered, or dropped as a duplicate or a filler), then unlisted.

        Dead letter first, unpark next, the state last: a crash in between leaves the number
        listed, and the next sweep settles it again (the dead letter happens once per copy
        through the gate's ``rejections``).
        """
        pending = tuple(s for s in state.parked if s > state.last_processed)
        if not pending:
            return
        for seq in pending:
            copy = yield ParkedMessage(self._consumer, group, seq)
            if copy is not None:
                yield from self.settle_copy(copy, group, seq, state)
            yield Unpark(self._consumer, group, seq)
        for _ in range(MAX_CAS_ROUNDS):
            current = yield from self._seen.load(group)
            if (
                yield from self._seen.save(
                    group, rules.without_after_end(current, pending), current
                )
            ):
                return
        raise TransientError(f"{group}: the state kept changing; settled again at the next sweep")
