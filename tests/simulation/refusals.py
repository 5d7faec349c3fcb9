"""Invariant 12 (issue 24): what the toolkit's own ``Publisher`` accepted is never refused.

A message published through ``Publisher`` by a well-behaved producer - no attribute the toolkit
reserves, no hostile number - is never dead-lettered later with a reason that says it breaks
the contract: e.g. a ``RetryLater`` copy of a message carrying as many attributes as the
``Publisher`` takes (``too_many_attributes``), or a group that went quiet for longer than the
TTL (``fifo_state_expired``).
"""

from __future__ import annotations

from collections.abc import Iterator

from tests.simulation.ledger import Ledger
from tests.simulation.workload import LogicalMessage

# Reasons that say "this message breaks the contract": never right for one the toolkit's own
# Publisher accepted and that carries nothing a producer may not set (issue 24: a RetryLater
# copy near the attribute cap), nor for a group that only went quiet for a while.
REFUSALS = frozenset(
    {
        "empty_data",
        "message_too_large",
        "too_many_attributes",
        "attribute_too_large",
        "reserved_attribute",
        "invalid_dedup_key",
        "invalid_deliver_at",
        "invalid_delay_seconds",
        "conflicting_delay",
        "invalid_fifo_group",
        "invalid_fifo_seq",
        "invalid_fifo_end",
        "invalid_retry_attempt",
        "task_too_large",
        "malformed_task",
        "fifo_state_expired",
        # Cloud Tasks refuses a schedule time beyond 30 days: the scheduler must hop instead.
        "schedule_rejected",
    }
)


def accepted_not_refused(
    ledger: Ledger, messages: tuple[LogicalMessage, ...]
) -> Iterator[tuple[str | None, str]]:
    """12: a legitimate message is never dead-lettered as breaking the contract; yields
    (logical id, what happened) for each such dead letter."""
    specs = {m.lid: m for m in messages}
    for letter in ledger.dead_letters:
        spec = specs.get(str(letter.lid))
        legit = spec is not None and not spec.hostile and not spec.reserved
        if legit and letter.reason in REFUSALS and letter.source == "toolkit":
            yield letter.lid, f"dead-lettered as {letter.reason}"
