"""The FIFO gate's vocabulary: its policies (:class:`GatePolicy`), what it did with a delivery
(:class:`GateOutcome`, :class:`GateResult`), the dead-letter reasons it gives, and a message's
identity (:func:`message_key`). Values only: the rules over a group's state are
:mod:`.fifo_rules`, the orchestration that applies them :mod:`.fifo_gate`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import timedelta

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.config import DEFAULT_TTL_SECONDS
from pubsub_toolkit.message import Message

REASON_POISON = "fifo_poison"
REASON_LATE_AFTER_SKIP = "fifo_late_after_skip"
REASON_SEQUENCE_REUSED = "fifo_sequence_reused"
REASON_AFTER_END = "fifo_after_end"
REASON_STATE_EXPIRED = "fifo_state_expired"
REASON_SEQUENCE_RESTARTED = "fifo_sequence_restarted"

# PUBSUB_TOOLKIT_FIFO_LEASE_HOLD_SECONDS when unset, for a streaming consumer (see
# GatePolicy.lease_hold).
STREAMING_LEASE_HOLD = timedelta(seconds=2)


class PoisonPolicy(enum.StrEnum):
    SKIP = "skip"  # dead-letter it, leave a tombstone, go on with the group
    BLOCK = "block"  # dead-letter it and stop the group until an operator skips or replays


class GapPolicy(enum.StrEnum):
    WAIT = "wait"  # alert, keep waiting for the missing number
    SKIP = "skip"  # alert, then pass over the missing numbers with tombstones


@dataclass(frozen=True)
class GatePolicy:
    max_attempts: int = 5
    poison: PoisonPolicy = PoisonPolicy.SKIP
    gap_timeout: timedelta = timedelta(minutes=5)
    gap: GapPolicy = GapPolicy.WAIT
    lease: timedelta = timedelta(seconds=60)  # must exceed the handler's longest run
    park: bool = True
    retry_backoff: timedelta = timedelta(seconds=5)  # first wait after a failure; doubles
    max_backoff: timedelta = timedelta(minutes=5)
    # How long a complete group's record outlives its end: while it exists a redelivery is a
    # duplicate and a later number is refused; once gone, a redelivery of #1 would run again.
    # So it must exceed the subscription's redelivery window (Pub/Sub keeps an unacked
    # message at most 7 days): the consumer passes DEDUP_TTL, default 8 days.
    # The same retention dates an IDLE group's record (nothing parked, not blocked) from its
    # last change, so groups that stop (one per order id) do not keep state for good.
    completed_retention: timedelta = timedelta(seconds=DEFAULT_TTL_SECONDS)
    # With lease_hold > 0 an advance keeps the group's lease (renewed for a whole lease: the
    # same one write) and the group's next delivery to this process runs under it - one state
    # write per message instead of two (take the lease, advance). Used within lease_hold of the
    # advance, the handler still has lease - lease_hold; later, the run takes a new lease (one
    # write). An unused lease simply expires (no write); another process's copy parks and this
    # process's sweeper runs it. Zero frees the lease with each advance (a push consumer, whose
    # next delivery may reach another instance and which has no sweeper between requests).
    # None: not chosen - no holding, unless the runner turns it on (FifoGate.use_lease_hold:
    # the streaming Consumer does).
    lease_hold: timedelta | None = None

    def __post_init__(self) -> None:
        hold = self.lease_hold
        if hold is not None and (hold < timedelta(0) or hold * 2 > self.lease):
            raise ValueError(
                f"lease_hold ({self.lease_hold}) must be between 0 and half the lease "
                f"({self.lease}): a handler run under a held lease has lease - lease_hold"
            )

    def backoff(self, failures: int) -> timedelta:
        """How long to wait after the ``failures``-th failure in a row (5 s, 10 s, 20 s, ...)."""
        doublings = min(max(failures - 1, 0), 30)
        wait: timedelta = self.retry_backoff * (2**doublings)
        return min(wait, self.max_backoff)


class GateOutcome(enum.StrEnum):
    PROCESSED = "processed"
    FILLED = "filled"  # a filler: the number carried no message, the group moved past it
    DUPLICATE = "duplicate"
    PARKED = "parked"
    RETRYING = "retrying"  # the handler failed; a parked copy is retried after the backoff
    IN_PROGRESS = "in_progress"
    DEAD_LETTERED = "dead_lettered"
    BLOCKED = "blocked"
    IDLE = "idle"


@dataclass(frozen=True)
class GateResult:
    """What the gate did with one delivery (or sweep); every outcome means "ack"."""

    outcome: GateOutcome
    group: str
    seq: int
    released: int = 0  # parked successors run after it


def message_key(message: Message) -> str:
    """The message's stable identity: its dedup key, else its message id."""
    return message.attributes.get(attr.DEDUP_KEY) or message.message_id
