"""What the idempotent consumer does with a claim's answer, decided once.

The idempotent processor's protocol (:mod:`.idempotent_run`: the two-phase claim, which the
sync and the asyncio processors drive) and :class:`~pubsub_toolkit.dedup.inbox.TransactionalInbox`
(the marker read after a failed commit) both map a :class:`ClaimStatus` to what happens to the
delivery. They used to write that mapping each in its own words; :func:`on_claim` is it, once:

==================  ================================================================
DONE                :attr:`Verdict.DUPLICATE` - the stored result, the effect not run
owned, remembered   :attr:`Verdict.RECORD_AGAIN` - this process ran it: record, never rerun
MISMATCH            :attr:`Verdict.MISMATCH` - the key reused with other content
IN_PROGRESS         :attr:`Verdict.IN_PROGRESS` - a live claim elsewhere: deliver again later
TAKEN_OVER          :attr:`Verdict.TAKE_OVER` - the previous holder's claim ended: run it
ACQUIRED            :attr:`Verdict.RUN` - a free key: run the effect
==================  ================================================================
"""

from __future__ import annotations

import enum
from datetime import datetime, timedelta

from pubsub_toolkit.stores.dedup.base import ClaimStatus


class Verdict(enum.Enum):
    """What to do with a delivery once its key's claim answered."""

    DUPLICATE = "duplicate"
    RECORD_AGAIN = "record_again"
    MISMATCH = "mismatch"
    IN_PROGRESS = "in_progress"
    TAKE_OVER = "take_over"
    RUN = "run"

    @property
    def runs(self) -> bool:
        """True when the effect runs now (the caller holds the claim)."""
        return self in (Verdict.RUN, Verdict.TAKE_OVER)


# on_claim's table, looked up once per claim: a dict, not a chain of comparisons with members
# looked up on their Enum class (``ClaimStatus.DONE``: about 90 ns each in Python 3.11, a
# measurable share of a delivery on the memory store - issue 26). (ClaimStatus is a StrEnum:
# str's own hash, in C.)
_VERDICTS = {
    ClaimStatus.DONE: Verdict.DUPLICATE,
    ClaimStatus.MISMATCH: Verdict.MISMATCH,
    ClaimStatus.IN_PROGRESS: Verdict.IN_PROGRESS,
    ClaimStatus.TAKEN_OVER: Verdict.TAKE_OVER,
    ClaimStatus.ACQUIRED: Verdict.RUN,
}
#: The statuses whose caller holds the claim (:attr:`~.base.Claim.owns_key`), bound once.
OWNED = (ClaimStatus.ACQUIRED, ClaimStatus.TAKEN_OVER)
_RECORD_AGAIN = Verdict.RECORD_AGAIN


def on_claim(
    status: ClaimStatus,
    *,
    remembered_at: datetime | None = None,
    now: datetime | None = None,
    ttl: timedelta | None = None,
) -> Verdict:
    """The verdict on a claim that answered ``status``. ``remembered_at``: when this process
    saw the same key and content done (its witness), which counts for ``ttl`` after that: a
    claim it then wins means the store lost (or never got) the ``done`` record - the effect is
    recorded again, never run again."""
    if remembered_at is not None and status in OWNED and _still_counts(remembered_at, now, ttl):
        return _RECORD_AGAIN
    return _VERDICTS[status]


def _still_counts(remembered_at: datetime, now: datetime | None, ttl: timedelta | None) -> bool:
    if now is None or ttl is None:
        raise TypeError("a remembered run needs now and the TTL to be weighed")
    return now < remembered_at + ttl


def retried_here(released_token: int | None, token: int) -> bool:
    """True when a takeover at ``token`` takes over the very claim this process released after
    its effect failed (fencing tokens grow by one per holder): a retry, not a lost worker."""
    return released_token is not None and released_token == token - 1


def done_at(expire_at: datetime, ttl: timedelta) -> datetime:
    """When a ``done`` record that expires at ``expire_at`` was written (its TTL restarts at
    completion), so a witness of it lasts as long as the store's record."""
    return expire_at - ttl
