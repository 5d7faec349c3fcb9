"""The memory counter forgets an idle group as the Redis counter's key expires (issue 24,
defect 4): ``DEDUP_TTL`` after its last reservation it starts again at 1 in a newer epoch, as
the idle group's state has expired too - a counter that outlived it left the resumed group
waiting for a #1 that never came."""

from __future__ import annotations

from datetime import timedelta

from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.stores.counters.memory import MemorySequenceCounter

TTL = timedelta(days=8)


def test_an_idle_group_starts_again_at_one_in_a_newer_epoch() -> None:
    clock = ManualClock()
    counter = MemorySequenceCounter(ttl=TTL, clock=clock)
    first = counter.reserve("g", 3)
    clock.advance(TTL - timedelta(seconds=1))
    assert list(counter.reserve("g").numbers()) == [4]  # still alive: each reservation renews
    clock.advance(TTL)
    assert counter.current("g") == 0
    again = counter.reserve("g")
    assert list(again.numbers()) == [1]
    assert again.epoch > first.epoch


def test_without_a_ttl_a_counter_never_expires() -> None:
    clock = ManualClock()
    counter = MemorySequenceCounter(clock=clock)
    counter.reserve("g")
    clock.advance(timedelta(days=400))
    assert list(counter.reserve("g").numbers()) == [2]
