"""A create in doubt is never dead-lettered, also when the hand-over limit falls between the last
two attempts (review finding F1 on issue 24).

The last attempt but one answers 5xx for a create of the next task in doubt, relying on the last
attempt to create the same name again and learn the outcome (AlreadyExists). When the message
crossed ``DEDUP_TTL`` past its due time between the two (Cloud Tasks backs off up to the queue's
``max_backoff``, an hour by default), the last attempt refused the hand-over on time without
trying the name: it dead-lettered the message (a FIFO one with a filler) while the task made in
doubt released it later - both delivered and dead-lettered. A last attempt up to
``HANDOVER_GRACE`` past the limit now creates the same name again; past that it dead-letters.

The world (in-memory store behind an outage switch, an in-process queue through the real
``plan_task``) is :mod:`tests.unit.test_relay_handover_outcomes`'s.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from pubsub_toolkit.delay.last_attempt import HANDOVER_GRACE, REASON_STORE_UNAVAILABLE
from pubsub_toolkit.delay.relay import RelayOutcome
from pubsub_toolkit.errors import TransientError
from tests.unit.test_relay_handover_outcomes import (
    DEDUP_TTL,
    DLQ,
    FINAL,
    MAX_ATTEMPTS,
    World,
    fifo_body,
)

# Cloud Tasks' default max_backoff: the longest wait between the last two attempts.
MAX_BACKOFF = timedelta(hours=1)


def delivered(world: World) -> list[bytes]:
    return [m.data for m in world.sink.on(FINAL) if "fifo_filler" not in m.attributes]


@pytest.mark.parametrize("backoff", [timedelta(minutes=2), MAX_BACKOFF])
def test_a_create_in_doubt_before_the_limit_is_learned_by_a_last_attempt_after_it(
    backoff: timedelta,
) -> None:
    world = World()
    world.clock.advance(DEDUP_TTL - timedelta(minutes=1))  # just inside the hand-over limit
    world.store.down = True
    world.queue.faults = ["timeout"] * 3  # the last but one: the create applied, its reply lost
    with pytest.raises(TransientError):
        world.relay.release(fifo_body(), attempt=MAX_ATTEMPTS - 1)
    assert len(world.queue.tasks) == 1  # the next hop's task exists
    world.clock.advance(backoff)  # Cloud Tasks' backoff: the last attempt is past the limit
    # It creates the same name again: AlreadyExists, so the task has the message.
    assert world.last_attempt(fifo_body()) is RelayOutcome.RESCHEDULED
    assert world.sink.on(DLQ) == [] and world.sink.on(FINAL) == []  # no letter, no filler
    assert world.run_queued() == [RelayOutcome.PUBLISHED]
    assert delivered(world) == [b"payload"] and world.sink.on(DLQ) == []


def test_a_duplicate_run_of_the_last_attempt_past_the_limit_learns_the_first_runs_doubt() -> None:
    world = World()
    world.clock.advance(DEDUP_TTL - timedelta(seconds=1))
    world.queue.faults = ["timeout"] * 3  # the first run: made, unknown to it
    assert world.last_attempt(fifo_body()) is RelayOutcome.RESCHEDULED  # unconfirmed
    world.clock.advance(timedelta(seconds=5))  # Cloud Tasks runs the attempt once more
    assert world.last_attempt(fifo_body()) is RelayOutcome.RESCHEDULED  # AlreadyExists
    assert world.run_queued() == [RelayOutcome.PUBLISHED]
    assert delivered(world) == [b"payload"] and world.sink.on(DLQ) == []


def test_past_the_grace_the_last_attempt_dead_letters_without_a_task() -> None:
    world = World()
    world.clock.advance(DEDUP_TTL + HANDOVER_GRACE)
    world.store.down = True
    with pytest.raises(TransientError):  # the last but one hands over only inside the limit
        world.relay.release(fifo_body(), attempt=MAX_ATTEMPTS - 1)
    assert world.last_attempt(fifo_body()) is RelayOutcome.DEAD_LETTERED
    assert world.queue.tasks == {}
    [dead] = world.sink.on(DLQ)
    assert dead.attributes["error_reason"] == REASON_STORE_UNAVAILABLE
    assert "DEDUP_TTL" in dead.attributes["error_detail"]


def test_the_grace_outlasts_cloud_tasks_longest_backoff() -> None:
    assert HANDOVER_GRACE > MAX_BACKOFF
