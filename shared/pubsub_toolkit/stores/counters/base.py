"""The sequence-counter protocol (the "next-number" of FIFO per group) and its value type.

A publisher numbers each message of a FIFO group with ``fifo_seq`` taken from a counter; the
consumer then processes the group strictly in that order. Every backend guarantees:

* numbers are 1-based and, per group, handed out exactly once: two callers - threads, or
  publisher processes with their own clients - never share a number and never see one twice;
* a reservation of ``count`` numbers is one contiguous block (one atomic store operation, so a
  batch costs one round trip however long it is);
* groups are independent, and any non-empty string is a valid group name.

**Gaps.** A number is never reused, but it may never be published: the publisher crashed or
its publish failed after the reservation, or a store client retried an increment whose first
attempt had in fact been applied. Such a gap is *detectable* and never ambiguous: the consumer
gate sees ``fifo_seq > last + 1``, parks the early message, and when the gap is older than the
group's gap timeout it raises an alert and follows the group's policy (wait, or skip with a
tombstone). Counters therefore trade "no gaps" for "no hot transactions"; they never trade
"no duplicates".

**Epochs.** A counter that starts again at 1 (its store lost it: Redis restarted without
persistence; or it expired with its group, see below) must not be taken for its old numbers.
Each counter records an *epoch* when it is created - a number that grows with every new
creation (the store's clock in microseconds) - and every block carries it; the Publisher
stamps it on each message (``fifo_epoch``), and the consumer gate starts the group's
sequence again when a newer epoch arrives instead of acking its numbers as old ones. Epoch 0
means "not recorded" (a store without epochs: Firestore, which does not lose acknowledged
writes): such a block is published without the attribute and the gate applies no epoch rule.
A consumer record without an epoch (new, or from before epochs) adopts the first one it meets
and keeps its position.

**Many groups at once.** A counter may also offer ``reserve_many({group: count, ...})`` (Redis:
one round trip for all): it returns each group's block *or the exception that reserved nothing
for that group*, so one group's failure never costs the others their blocks - blocks the caller
would otherwise drop unpublished, leaving gaps. Only a failed round trip raises (as ``reserve``).

**Lifetime.** A counter may expire after ``ttl`` without a reservation (Redis: the deployment's
``DEDUP_TTL``), the same retention after which the consumer forgets an idle group: a group
idle that long resumes at 1 in a new epoch, and the gate runs it from there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class SequenceBlock:
    """Numbers ``first..last`` (inclusive, 1-based) reserved for one caller in ``group``."""

    group: str
    first: int
    last: int
    # The counter's epoch (0: not recorded); not part of equality: a block is its numbers.
    epoch: int = field(default=0, compare=False)

    def __post_init__(self) -> None:
        if self.first < 1 or self.last < self.first:
            raise ValueError(f"invalid block {self.first}..{self.last}: need 1 <= first <= last")

    @classmethod
    def ending_at(cls, group: str, last: int, count: int, epoch: int = 0) -> SequenceBlock:
        """The block of ``count`` numbers whose highest is ``last`` (an increment's result)."""
        return cls(group, last - count + 1, last, epoch)

    @property
    def size(self) -> int:
        """How many numbers the block holds."""
        return self.last - self.first + 1

    def numbers(self) -> range:
        """The block's numbers, in order."""
        return range(self.first, self.last + 1)


class SequenceCounter(Protocol):
    """Per-group sequence numbers for FIFO publishing. One implementation per backend module."""

    def reserve(self, group: str, count: int = 1) -> SequenceBlock:
        """Atomically reserve the next ``count`` numbers of ``group``.

        Raises ValueError for an empty group or ``count < 1``, and
        :class:`~pubsub_toolkit.errors.StoreUnavailableError` when the store cannot be reached
        (fail closed: never guess a number).
        """
        ...

    def current(self, group: str) -> int:
        """The highest number handed out in ``group`` so far; 0 if none."""
        ...


def check_reservation(group: str, count: int = 1) -> None:
    """Raise ValueError unless ``group`` is a non-empty string and ``count`` a positive int."""
    check_group(group)
    # bool is an int subclass; True as a count is a caller bug, not "1".
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"count must be a positive integer, got {count!r}")


def check_group(group: str) -> None:
    """Raise ValueError unless ``group`` is a non-empty string."""
    if not isinstance(group, str) or not group:
        raise ValueError(f"group must be a non-empty string, got {group!r}")
