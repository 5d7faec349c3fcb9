"""The Publisher's numbering thread reserves every waiting group's block in one call
(``reserve_many``); a group whose reservation failed fails its own messages only. The other
groups' blocks are reserved: were their messages failed too, their numbers would never be
published - a gap their consumer waits at for ever under gap policy ``wait``."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from concurrent.futures import Future

from pubsub_toolkit.message import OutboundMessage
from pubsub_toolkit.producer.publisher import Publisher
from pubsub_toolkit.stores.counters.base import SequenceBlock
from pubsub_toolkit.stores.counters.memory import MemorySequenceCounter


class KeyIsNoCounter(Exception):
    """What a Redis script answers for a key that holds something else than a counter."""


class OneGroupFails(MemorySequenceCounter):
    """The memory counter with a ``reserve_many`` like Redis's: each group's outcome apart,
    and group ``bad`` refused (nothing reserved for it)."""

    def __init__(self) -> None:
        super().__init__()
        self.many_calls: list[dict[str, int]] = []

    def reserve(self, group: str, count: int = 1) -> SequenceBlock:
        if group == "bad":
            raise KeyIsNoCounter(group)
        return super().reserve(group, count)

    def reserve_many(self, requests: Mapping[str, int]) -> dict[str, SequenceBlock | Exception]:
        self.many_calls.append(dict(requests))
        outcomes: dict[str, SequenceBlock | Exception] = {}
        for group, count in requests.items():
            try:
                outcomes[group] = self.reserve(group, count)
            except KeyIsNoCounter as exc:
                outcomes[group] = exc
        return outcomes


class HeldSink:
    """A future-returning sink whose first publish waits for the test, so everything published
    meanwhile is numbered together, in one ``reserve_many``."""

    def __init__(self) -> None:
        self.sent: list[OutboundMessage] = []
        self.gate = threading.Event()
        self.entered = threading.Event()  # the numbering thread is inside the first publish

    def publish(self, topic: str, message: OutboundMessage) -> str:
        raise AssertionError("the fast path is used")

    def publish_future(self, topic: str, message: OutboundMessage) -> Future[str]:
        self.entered.set()
        self.gate.wait(timeout=30)
        self.sent.append(message)  # only the numbering thread sends
        future: Future[str] = Future()
        future.set_result(str(len(self.sent)))
        return future


def test_a_group_whose_reservation_fails_fails_alone_and_the_others_are_published() -> None:
    counter, sink = OneGroupFails(), HeldSink()
    publisher = Publisher(sink, "projects/p/topics/t", counter)
    first = publisher.publish(b"first", fifo_group="a")  # holds the numbering thread
    # Held there before the rest is queued: else a round could take only some of the groups.
    assert sink.entered.wait(timeout=30)
    waiting = {
        group: [publisher.publish(f"{group}{n}".encode(), fifo_group=group) for n in range(3)]
        for group in ("a", "bad", "b")
    }
    sink.gate.set()
    assert first.result(timeout=30)
    assert [f.result(timeout=30) for g in ("a", "b") for f in waiting[g]]
    assert all(isinstance(f.exception(timeout=30), KeyIsNoCounter) for f in waiting["bad"])
    assert {"a", "bad", "b"} in [set(call) for call in counter.many_calls]  # one call for all
    published: dict[str, list[int]] = {}
    for message in sink.sent:
        group = message.attributes["fifo_group"]
        published.setdefault(group, []).append(int(message.attributes["fifo_seq"]))
    assert published == {"a": [1, 2, 3, 4], "b": [1, 2, 3]}
    assert (counter.current("a"), counter.current("b")) == (4, 3)  # every number published
