"""The application on the producer side: it publishes the workload, cancels, and misbehaves.

It keeps an *outbox* that survives its crashes (as an application's own database would): each
logical message is published until ``Publisher.publish`` returns. A timeout - even one after
Pub/Sub accepted the message - or a crash means "publish it again": the same data and dedup key
(and the same absolute ``deliver_at``), which for a FIFO group takes a **new** number from the
counter (defect 1's path). A group's messages are published one after the other, in order.

It also calls ``cancel(dedup_key)`` at the workload's moments and records each answer, and - the
*hostile producer* - publishes raw messages that break the rules (see :mod:`.workload`).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.delay import cancel as cancelling
from pubsub_toolkit.errors import ContractViolation
from pubsub_toolkit.message import OutboundMessage
from tests.simulation.components import ORIGIN, build_producer
from tests.simulation.dimensions import RESERVED
from tests.simulation.faults import Kind
from tests.simulation.ledger import CancelAnswer
from tests.simulation.process import ProcessCrashed
from tests.simulation.workload import OUT_OF_RANGE_SEQ, LogicalMessage

MAX_ATTEMPTS = 200  # an outbox entry never published after this many tries is a harness bug


class ProducerApp:
    """Drives the producer pool from the workload."""

    def __init__(self, world: Any) -> None:
        self._world = world
        self._deliver_at: dict[str, Any] = {}  # lid -> the absolute due time fixed at first try
        self._reused: dict[str, str] = {}  # hostile lid -> the number it reuses
        self._batched: dict[str, list[LogicalMessage]] = {}  # publish_batch: first lid -> all
        self._ending: set[str] = set()  # fifo_end: lids whose next publish ends their group
        self._timed_out: set[str] = set()  # renumber_far: first publishes made to time out
        # renumber_far: the Publisher the timed-out message's retry goes through - the
        # producer's, restarted since (built fresh for its process: no number remembered)
        self._restarted: dict[str, tuple[Any, Any]] = {}

    def start(self) -> None:
        world = self._world
        plain = [m for m in world.workload.messages if m.group is None or m.hostile]
        for m in plain:
            self._at(m.publish_at, m, republish=False, then=None)
            if m.republish_after is not None:
                self._at(m.publish_at + m.republish_after, m, republish=True, then=None)
            if m.cancel_at is not None:
                world.loop.at(m.cancel_at, f"cancel {m.dedup_key}", lambda m=m: self._cancel(m, 0))
            if m.late_cancel_at is not None:
                label = f"cancel {m.dedup_key} (late)"
                world.loop.at(m.late_cancel_at, label, lambda m=m: self._cancel(m, 0))
        for group in world.workload.groups:
            entries = []
            for m in world.workload.messages:
                if m.group == group and not m.hostile:
                    entries.append((m.publish_at, m, False))
                    if m.republish_after is not None:
                        entries.append((m.publish_at + m.republish_after, m, True))
            entries.sort(key=lambda e: (e[0], e[1].lid))
            self._chain(entries, 0)

    def _chain(self, entries: list[tuple[float, LogicalMessage, bool]], index: int) -> None:
        """Publish a group's entries one after the other (each after the previous returned)."""
        if index < len(entries):
            at, m, republish = entries[index]
            batch = self._batch(entries, index)
            last = entries[index + len(batch) - 1][1] if batch else m
            once = sum(1 for e in entries if e[1].lid == last.lid) == 1  # same args every time
            end = index + max(len(batch), 1) == len(entries)
            if end and once and self._world.plan.has(Kind.FIFO_END):
                self._ending.add(last.lid)  # the group's last message: end_of_group=True
            following = index + max(len(batch), 1)
            self._at(at, m, republish=republish, then=lambda: self._chain(entries, following))

    def _batch(
        self, entries: list[tuple[float, LogicalMessage, bool]], index: int
    ) -> list[LogicalMessage]:
        """publish_batch: the keyed entries due within 30 s from ``index`` (2-5), or []."""
        if not self._world.plan.has(Kind.PUBLISH_BATCH):
            return []

        def simple(entry: tuple[float, LogicalMessage, bool]) -> bool:
            _, m, republish = entry
            plain = not (m.delayed or m.wide or m.retry_after_burst or m.hostile)
            return plain and not republish and m.dedup_key is not None

        batch: list[LogicalMessage] = []
        for entry in entries[index : index + 5]:
            if not simple(entry) or entry[0] > entries[index][0] + 30.0:
                break
            batch.append(entry[1])
        if len(batch) < 2:
            return []
        self._batched[batch[0].lid] = batch
        return batch

    def _at(
        self, at: float, m: LogicalMessage, *, republish: bool, then: Callable[[], None] | None
    ) -> None:
        label = f"produce {m.lid}{' again' if republish else ''}"
        self._world.loop.at(at, label, lambda: self._publish(m, 1, then))

    def _publish(self, m: LogicalMessage, attempt: int, then: Callable[[], None] | None) -> None:
        world = self._world
        if attempt > MAX_ATTEMPTS:
            if m.hostile:
                world.trace.add(f"hostile {m.lid} gave up")
                return
            raise RuntimeError(f"the producer could not publish {m.lid} in {MAX_ATTEMPTS} tries")
        slot = world.producers.pick()
        retry = world.rng.uniform(0.5, 5.0)
        if slot is not None:
            action = world.ledger.begin(f"produce {m.lid}")
            try:
                self._send(self._publisher(slot, m), slot.process, m)
            except ProcessCrashed:
                world.ledger.end(action, done=False)
            except Exception as exc:
                world.trace.add(f"{slot.process.name}: publish of {m.lid} failed ({exc}); retrying")
                world.ledger.end(action, done=False)
            else:
                world.ledger.end(action, done=True)
                if m.retry_after_burst and m.lid not in self._timed_out:
                    # renumber_far: Pub/Sub accepted it but the producer saw a timeout; its
                    # retry comes after the burst published behind it (> 64 numbers later).
                    self._timed_out.add(m.lid)
                    world.trace.add(f"produce {m.lid}: timed out (accepted); retry after burst")
                    world.loop.after(
                        60.0, f"produce {m.lid} retry", lambda: self._publish(m, 2, None)
                    )
                if then is not None:
                    then()
                return
        world.loop.after(
            retry, f"produce {m.lid} retry", lambda: self._publish(m, attempt + 1, then)
        )

    def _publisher(self, slot: Any, m: LogicalMessage) -> Any:
        """The Publisher ``m`` goes through now: the slot's - except for renumber_far's retry,
        which its outbox sends after the producer restarted. A Publisher gives a retry of a
        key and content its first number again (issue 24's 24.1b) only while it remembers it;
        a restarted one takes a new number from the counter, more than the gate's key window
        after the first copy - the case ingress's filler (24.1) and the gate's own memory of
        the keys it ran (24.L2) are for."""
        if m.lid not in self._timed_out:
            return slot.app
        process, publisher = self._restarted.get(m.lid, (None, None))
        if process is not slot.process:
            publisher = build_producer(self._world, slot.process)
            self._restarted[m.lid] = (slot.process, publisher)
        return publisher

    def _send(self, publisher: Any, process: Any, m: LogicalMessage) -> None:
        if m.hostile in ("reused_seq", "out_of_range_seq") or m.reserved:
            self._raw(process, m)
            return
        batch = self._batched.get(m.lid)
        if batch is not None:  # a failure retries the whole batch: new numbers for every item
            items = [(x.data, {attr.DEDUP_KEY: str(x.dedup_key)}) for x in batch]
            self._world.trace.add(f"publish_batch {[x.lid for x in batch]} in {m.group}")
            publisher.publish_batch(str(m.group), items, end_of_group=batch[-1].lid in self._ending)
            return
        kwargs: dict[str, Any] = {"dedup_key": m.dedup_key, "fifo_group": m.group}
        if m.lid in self._ending:
            kwargs["end_of_group"] = True
        if m.delay:
            kwargs["delay"] = timedelta(seconds=m.delay)
        if m.deliver_in:
            due = self._deliver_at.setdefault(
                m.lid, process.clock.now() + timedelta(seconds=m.deliver_in)
            )
            kwargs["deliver_at"] = due
        if not m.wide:
            publisher.publish(m.data, None, **kwargs).result()  # a failed publish raises here
            return
        # As many attributes of its own as the Publisher takes: the widest it accepts (the
        # library's rule, whatever it is - a reverted fix included), found by asking it; a
        # refused publish (ValueError at once) reserves and sends nothing.
        for own in range(attr.MAX_ATTRIBUTES, -1, -1):
            try:
                future = publisher.publish(m.data, {f"u{i}": "x" for i in range(own)}, **kwargs)
            except ValueError as exc:
                if not _too_many_attributes(exc):
                    raise
                continue
            future.result()
            return

    def _raw(self, process: Any, m: LogicalMessage) -> None:
        """A hostile producer's publish straight to origin, numbered by itself."""
        world = self._world
        if m.reserved:  # a plain message carrying attributes the toolkit reserves
            attrs = {name: RESERVED[name] for name in m.reserved}
            if m.dedup_key:
                attrs[attr.DEDUP_KEY] = m.dedup_key
            world.boundaries.publish(process, ORIGIN, OutboundMessage(m.data, attrs))
            return
        if m.hostile == "out_of_range_seq":
            seq = OUT_OF_RANGE_SEQ
        else:
            taken = [o.seq for o in world.ledger.origins if o.group == m.group and not o.hostile]
            if not taken:
                raise RuntimeError(f"{m.lid}: no number of {m.group} to reuse yet")
            seq = self._reused.setdefault(m.lid, str(world.rng.choice(taken)))
        attrs = {attr.FIFO_GROUP: str(m.group), attr.FIFO_SEQ: str(seq)}
        if m.dedup_key:
            attrs[attr.DEDUP_KEY] = m.dedup_key
        world.boundaries.publish(process, ORIGIN, OutboundMessage(m.data, attrs, str(m.group)))

    def _cancel(self, m: LogicalMessage, attempt: int) -> None:
        world = self._world
        slot = world.producers.pick()
        if slot is not None and attempt < MAX_ATTEMPTS:
            b = world.boundaries
            try:
                result = cancelling.cancel(  # looked up at call time (mutations)
                    str(m.dedup_key),
                    store=b.store_view(slot.process, "dedup"),
                    scheduler=b.scheduler(slot.process, world.tasks),
                )
            except ProcessCrashed:
                pass
            except Exception as exc:
                world.trace.add(f"cancel {m.dedup_key} failed ({exc}); retrying")
            else:
                world.trace.add(f"cancel {m.dedup_key} -> {result}")
                world.ledger.cancels.append(
                    CancelAnswer(m.lid, world.loop.now, result.already_delivered)
                )
                return
        if attempt < MAX_ATTEMPTS:
            world.loop.after(
                2.0, f"cancel {m.dedup_key} retry", lambda: self._cancel(m, attempt + 1)
            )


def _too_many_attributes(exc: ValueError) -> bool:
    """The Publisher refused a message for its attribute count (and nothing else)."""
    cause = exc.__cause__
    return isinstance(cause, ContractViolation) and cause.reason == attr.REASON_TOO_MANY_ATTRIBUTES
