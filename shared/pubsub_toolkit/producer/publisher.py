"""The producer side: publish to the origin topic with the contract attributes stamped.

:class:`Publisher` turns keyword arguments into the attribute contract of
:mod:`pubsub_toolkit.attributes` so producers never spell attribute names by hand:

* ``fifo_group`` -> ``fifo_group`` + ``fifo_seq`` (the next number from a
  :class:`~pubsub_toolkit.stores.counters.base.SequenceCounter`) + ``fifo_epoch`` (the
  counter's epoch, when it records one) + the Pub/Sub ordering key;
* ``end_of_group=True`` -> ``fifo_end="true"``: this is the group's last message (the consumer
  then records the group as complete and dead-letters any later number);
* ``dedup_key`` -> ``dedup_key``;
* ``deliver_at`` (aware datetime) -> ``deliver_at`` in RFC 3339 UTC, or ``delay`` (timedelta)
  -> ``delay_seconds``.

**Futures.** ``publish`` returns at once with the publish's future - google-cloud-pubsub's own
when the sink is a :class:`~pubsub_toolkit.producer.sink.PubSubSink`: ``result()`` is the message
id, or raises the failure - so many publishes ride the client's batching instead of waiting
one round trip each. A FIFO message's future is a light one of the toolkit's
(:class:`~pubsub_toolkit.producer.numbering.Pending`, the same methods; a
``concurrent.futures.Future`` too, as the client's, for ``wait()`` and ``as_completed()``) until
the message reaches the client, then the client's. ``publish(...).result()`` is the blocking
form; ``publish_batch`` hands all its items to the client and then waits once. A sink with
only the blocking ``publish`` (our own protocol, e.g. an in-memory sink) works too: its future
is already settled.

**Per message, nothing more than needed.** The fast path costs the client's own work plus a
few microseconds: the contract checks are remembered per attribute set (the data only counts
by its size), a FIFO message is one small object, the numbering thread hands a group's messages
over in one call with one callback for all of them, and no other object per message outlives
the call (each would be scanned by the garbage collector until its batch is sent).

Every message is validated against the contract *before* a number is reserved, so a message
ingress would dead-letter raises ValueError here instead, and does not leave a gap in its
group. A publish that fails *after* the reservation does leave one (the number is never
reused): the failure is the future's exception (logged with the number), and the consumer
gate's gap timeout handles the gap (see :mod:`pubsub_toolkit.stores.counters.base`). A counter
that cannot be reached raises from ``publish`` itself: nothing was numbered or sent.

**Order, and one round trip for many.** On a future-returning sink a FIFO ``publish`` queues
the validated message in its group and returns; one thread reserves ONE block per group for
everything queued and hands the messages to the client in queue order
(:mod:`~pubsub_toolkit.producer.numbering`). On a blocking sink the caller numbers and sends
under a lock per group. Either way a group's numbers reach the client in ascending order -
the client, ordering keys on, sends them so - and each thread's messages of a group get
increasing numbers. Numbers are reserved only for messages asked for, never ahead. In one
round trip for many groups (``reserve_many``) each group's reservation stands or fails alone:
a group whose counter refused (its key holds no counter) fails its own messages - nothing was
reserved for it - and the other groups' blocks are published, never dropped as a gap.

**A retry keeps its number.** A Publisher remembers the number it gave each ``dedup_key`` of a
group with its content (the last 10,000): the same message published again in the group - a
retry after a timeout or a failed batch, through the same Publisher object - reuses that
number, so the consumer sees one message at one number (a duplicate if the first attempt got
through, the gap filled if it did not), never a renumbered copy far from the first. A key
reused for other content, or published again after the group's counter started again (a new
epoch), gets a new number.

A counter whose store lost writes without losing the key (a failover to a replica that was
behind) hands out numbers again in the same epoch. A Publisher remembers the highest number it
handed out per group and epoch, and refuses - StoreUnavailableError, with an ALERT in the log,
nothing published - a block that does not lie above it.

(About 450 lines: the numbering - blocks, retries, a counter that went back - shares the
Publisher's memory of what it handed out. Handing the numbered messages to the client, and
logging the gaps failed ones leave, is :mod:`~pubsub_toolkit.producer._handover`.)
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from pubsub_toolkit import attributes as attr
from pubsub_toolkit import tracing
from pubsub_toolkit._witness import Witness
from pubsub_toolkit.errors import StoreUnavailableError
from pubsub_toolkit.message import OutboundMessage
from pubsub_toolkit.producer._handover import (
    SentRun,
    hand_over_of,
    log_gap,
    numbered,
    numbered_attributes,
)
from pubsub_toolkit.producer.numbering import NumberingQueue, Pending
from pubsub_toolkit.producer.sink import MessageSink, PublishFuture, failed, settled
from pubsub_toolkit.producer.stamping import (
    NumberPlan,
    check_end,
    check_group,
    number_plan,
    stamp,
    validate,
)
from pubsub_toolkit.stores.counters.base import SequenceBlock, SequenceCounter

logger = logging.getLogger(__name__)


# Locks striped by group: bounded memory however many groups; two groups sharing a stripe only
# wait for each other's reserve-and-enqueue (microseconds with a future-returning sink).
_GROUP_LOCKS = 64


class Publisher:
    """Publishes to ``topic`` (a full ``projects/P/topics/T`` path) through ``sink``.

    ``counter`` is required only for FIFO groups. Thread-safe when the sink and the counter are.
    """

    def __init__(
        self, sink: MessageSink, topic: str, counter: SequenceCounter | None = None
    ) -> None:
        if not topic:
            raise ValueError("topic must be a topic path such as projects/P/topics/T")
        self._sink = tracing.traced(sink, hop="producer")
        # The fast path when the sink has one (a PubSubSink); else the blocking publish.
        self._hand_over, self._hand_one = hand_over_of(sink)
        # Re-entrant: a publish made while this thread is inside another one's sink call (a
        # nested callback; the simulation's interleaving) must not wait for itself.
        self._locks = [threading.RLock() for _ in range(_GROUP_LOCKS)]
        self._queue = NumberingQueue(self._send_groups)
        self._topic = topic
        self._counter = counter
        # group -> (epoch, the highest number handed out in it): never a block below it again.
        self._handed: Witness[str, tuple[int, int]] = Witness()
        # (group, dedup_key, content) -> (epoch, number) given to it: a retry goes there again.
        self._numbered: Witness[tuple[str, str, str], tuple[int, int]] = Witness()

    def publish(
        self,
        data: bytes,
        attributes: Mapping[str, str] | None = None,
        *,
        fifo_group: str | None = None,
        dedup_key: str | None = None,
        delay: timedelta | None = None,
        deliver_at: datetime | None = None,
        end_of_group: bool = False,
    ) -> PublishFuture:
        """Publish one message; return at once with its future, whose ``result()`` is the
        message id once Pub/Sub has accepted it (or raises the failure). Blocking form:
        ``publish(...).result()``.

        ``end_of_group=True`` (with ``fifo_group``) marks it as the group's last message: once
        the consumer is past it, any later number of the group is dead-lettered
        (``fifo_after_end``) - publish nothing more to this group.

        Raises ValueError (TypeError for wrong types) for arguments that break the contract,
        before anything is reserved or published. Every later failure is the future's
        exception: the counter's (StoreUnavailableError: nothing published) or the publish's
        (after the reservation: a logged gap).
        """
        stamped = stamp(attributes, dedup_key=dedup_key, delay=delay, deliver_at=deliver_at)
        check_end(end_of_group)
        if end_of_group:
            if fifo_group is None:
                raise ValueError("end_of_group=True needs fifo_group: only a group can end")
            stamped[attr.FIFO_END] = attr.FIFO_END_TRUE
        if fifo_group is None:
            validate(data, stamped)
            return self._send(data, stamped)
        counter = self._require_counter()
        check_group(fifo_group)
        stamped[attr.FIFO_GROUP] = fifo_group
        validate(data, stamped)
        if self._hand_over is not None and not tracing.enabled():  # the common case, direct
            return self._queue.submit_one(fifo_group, data, stamped)
        return self._send_fifo(counter, fifo_group, [(data, stamped)])[0]

    def publish_batch(
        self,
        group: str,
        items: Sequence[tuple[bytes, Mapping[str, str]]],
        *,
        end_of_group: bool = False,
    ) -> list[str]:
        """Publish ``items`` in order in FIFO ``group``, numbered from ONE reserved block.

        One counter round trip for the whole batch; every item is handed to the client before
        any is waited for, then the call waits once. Items may carry ``dedup_key`` and
        ``deliver_at``/``delay_seconds`` in their attributes. ``end_of_group=True`` marks the
        batch's last item as the group's last message (see :meth:`publish`); an empty batch
        has nothing to mark, so that is a ValueError. Every item is validated before the block
        is reserved; if a publish fails, the first failure is raised once all are settled, and
        the numbers of the items not published become a gap (a retry of the batch reuses
        them). Returns the message ids in order.
        """
        counter = self._require_counter()
        check_group(group)
        check_end(end_of_group)
        if end_of_group and not items:
            raise ValueError("end_of_group=True marks the batch's last item, but it has none")
        prepared: list[tuple[bytes, dict[str, str]]] = []
        for index, (data, attributes) in enumerate(items):
            stamped = stamp(attributes, dedup_key=None, delay=None, deliver_at=None)
            stamped[attr.FIFO_GROUP] = group
            if end_of_group and index == len(items) - 1:
                stamped[attr.FIFO_END] = attr.FIFO_END_TRUE
            validate(data, stamped)
            prepared.append((data, stamped))
        if not prepared:
            return []
        futures = self._send_fifo(counter, group, prepared)
        failures = [f.exception() for f in futures]  # the one wait: all were handed over
        failure = next((e for e in failures if e is not None), None)
        if failure is not None:
            raise failure
        return [str(f.result()) for f in futures]

    def _send_fifo(
        self, counter: SequenceCounter, group: str, prepared: list[tuple[bytes, dict[str, str]]]
    ) -> Sequence[PublishFuture]:
        """Number ``prepared`` (validated) in ``group`` and send them, in order: queued for
        the numbering thread on a future-returning sink, else here under the group's lock."""
        if self._hand_over is not None:
            if tracing.enabled():
                prepared = [(data, self._carrying(data, m, group)) for data, m in prepared]
            return self._queue.submit(group, prepared)
        with self._group_lock(group):  # numbers reach the sink in their order
            try:
                numbers = self._numbers(counter, group, prepared)
            except Exception as exc:  # nothing reserved, nothing published
                return [failed(exc) for _ in prepared]
            futures: list[PublishFuture] = []
            failure: PublishFuture | None = None
            for (epoch, seq), (data, stamped) in zip(numbers, prepared, strict=True):
                if failure is not None:  # the rest stay unsent, as a paused ordering key's would
                    futures.append(failure)
                    continue
                message = numbered(data, stamped, group, epoch, seq)
                futures.append(settled(functools.partial(self._sink.publish, self._topic, message)))
                if futures[-1].exception() is not None:
                    log_gap(seq, group)
                    failure = futures[-1]
            return futures

    def _send_groups(self, taken: dict[str, list[Pending]]) -> None:
        """The numbering thread's work: one block per group for its waiting messages - all
        the groups' blocks in one counter round trip when the counter can - then each group's
        messages handed to the client in order, each caller's future then the client's."""
        counter = self._require_counter()
        # Lists of the parts, not a tuple per message: see HandOverSink.
        stamped = {g: [p.stamped for p in items] for g, items in taken.items()}
        plans = {g: self._plan(g, [p.data for p in taken[g]], s) for g, s in stamped.items()}
        blocks = self._reserve_all(counter, {g: p.fresh for g, p in plans.items() if p.fresh})
        hand_over = self._hand_over
        assert hand_over is not None  # only queued when the sink has it
        for group, items in taken.items():
            block = blocks.get(group)
            if isinstance(block, Exception):
                logger.warning(
                    "no numbers for %d message(s) of group %r, nothing published: %s",
                    len(items),
                    group,
                    block,
                )
                for pending in items:
                    pending.fail(block)
                continue
            plan = plans[group]
            if plan.keys is None and block is not None:  # all new: the block's numbers
                seqs = list(block.numbers())
                epochs = [str(block.epoch) if block.epoch else ""] * len(seqs)
            else:
                numbers = self._assign(group, plan, block)
                seqs = [seq for _, seq in numbers]
                epochs = [str(epoch) if epoch else "" for epoch, _ in numbers]
            attributes = numbered_attributes(stamped[group], seqs, epochs)
            futures = hand_over(self._topic, group, [p.data for p in items], attributes)
            run = SentRun(futures, seqs, group)
            for index, (pending, future) in enumerate(zip(items, futures, strict=True)):
                pending.hand_over(future, run, index)
            # One callback per run, not per message: the client settles a key's messages in
            # order, so once the last is settled the others are (check() looks at each).
            futures[-1].add_done_callback(run.check)

    def _carrying(self, data: bytes, stamped: dict[str, str], group: str) -> dict[str, str]:
        """``stamped`` with the caller's trace context (the numbering thread has none), under
        a ``send`` span for handing the message over; ``stamped`` when tracing is off."""
        if not tracing.enabled():
            return stamped
        with tracing.sending(self._topic, OutboundMessage(data, stamped, group), hop="producer"):
            return dict(tracing.with_context(stamped))

    def _numbers(
        self, counter: SequenceCounter, group: str, messages: list[tuple[bytes, dict[str, str]]]
    ) -> list[tuple[int, int]]:
        """(epoch, number) for each message, in order (see :meth:`_plan`), from one block."""
        plan = self._plan(group, [data for data, _ in messages], [m for _, m in messages])
        block = self._reserve(counter, group, plan.fresh) if plan.fresh else None
        return self._assign(group, plan, block)

    def _plan(
        self, group: str, data: Sequence[bytes], stamped: Sequence[Mapping[str, str]]
    ) -> NumberPlan:
        """:func:`~.stamping.number_plan` with what this Publisher remembers of ``group``: the
        numbers it gave each dedup key and content, and the epoch of its latest block."""
        return number_plan(
            data,
            stamped,
            numbered=lambda key: self._numbered.get((group, *key)),
            latest=lambda: (self._handed.get(group) or (None, 0))[0],
        )

    def _assign(
        self, group: str, plan: NumberPlan, block: SequenceBlock | None
    ) -> list[tuple[int, int]]:
        """Each message's (epoch, number) from ``plan`` and its new ``block``, recorded before
        anything is published, so a retry after a failed publish reuses it."""
        if plan.keys is None:  # every message new, none to remember
            assert block is not None  # plan.fresh > 0: a block was reserved
            return [(block.epoch, n) for n in block.numbers()]
        new = iter(()) if block is None else iter(block.numbers())
        numbers: list[tuple[int, int]] = []
        for index, (key, number) in enumerate(zip(plan.keys, plan.known, strict=True)):
            if number is not None:
                numbers.append(number)
            elif index in plan.copies and key is not None:
                numbers.append(numbers[plan.first[key]])
            else:
                numbers.append((block.epoch if block else 0, next(new)))
        for key, number in zip(plan.keys, numbers, strict=True):
            if key:
                self._numbered.put((group, *key), number)
        return numbers

    def _reserve(self, counter: SequenceCounter, group: str, count: int) -> SequenceBlock:
        """A block from ``counter``, refused if it does not lie above every number this
        Publisher handed out in the group's epoch (the counter's store lost writes)."""
        # Read BEFORE the reservation: every block recorded by then was handed out before this
        # one was asked for, so a healthy counter gives more (a concurrent one may give less).
        before = self._handed.get(group)
        return self._accept(group, counter.reserve(group, count), before)

    def _reserve_all(
        self, counter: SequenceCounter, requests: dict[str, int]
    ) -> dict[str, SequenceBlock | Exception]:
        """:meth:`_reserve` for every group of ``requests``: one round trip through the
        counter's ``reserve_many`` when it has one (Redis), else a reservation per group; a
        group's failure is its value, the others go on - ``reserve_many`` reports each group's
        outcome apart, so a group whose reservation failed never costs the others the blocks
        they were given (numbers reserved and never published: a gap)."""
        many = getattr(counter, "reserve_many", None)
        if many is None or len(requests) < 2:
            out: dict[str, SequenceBlock | Exception] = {}
            for group, count in requests.items():
                try:
                    out[group] = self._reserve(counter, group, count)
                except Exception as exc:
                    out[group] = exc
            return out
        before = {group: self._handed.get(group) for group in requests}  # see _reserve
        try:
            blocks: Mapping[str, SequenceBlock | Exception] = many(requests)
        except Exception as exc:
            # The round trip failed: its scripts may or may not have run (a lost reply), as
            # for a single reservation - at worst a gap the consumer's gap timeout handles.
            logger.warning(
                "reserving numbers for %d group(s) failed (%s): none is published; a "
                "reservation Redis applied before the failure is a gap",
                len(requests),
                exc,
            )
            return dict.fromkeys(requests, exc)
        accepted: dict[str, SequenceBlock | Exception] = {}
        for group in requests:
            block = blocks.get(group)
            if block is None:
                block = StoreUnavailableError(f"group {group!r}: the counter gave no block")
            if isinstance(block, Exception):  # this group's alone: it reserved nothing
                accepted[group] = block
                continue
            try:
                accepted[group] = self._accept(group, block, before[group])
            except StoreUnavailableError as exc:
                accepted[group] = exc
        return accepted

    def _accept(
        self, group: str, block: SequenceBlock, before: tuple[int, int] | None
    ) -> SequenceBlock:
        """``block`` recorded as handed out, unless it lies at or below what this Publisher
        handed out in its epoch ``before`` asking: then ALERT and StoreUnavailableError."""
        epoch, handed = before or (None, 0)
        if block.epoch == epoch and block.first <= handed:
            logger.error(
                "ALERT: the counter of group %r handed out %d..%d, but this Publisher already "
                "published up to %d in epoch %d: its store lost writes; nothing published",
                group,
                block.first,
                block.last,
                handed,
                block.epoch,
            )
            raise StoreUnavailableError(
                f"group {group!r}: the counter went back to {block.first} (at least {handed} "
                "was handed out): its store lost writes"
            )
        latest = self._handed.get(group)  # another thread may have recorded more meanwhile
        top = latest[1] if latest is not None and latest[0] == block.epoch else 0
        self._handed.put(group, (block.epoch, max(block.last, top)))
        return block

    def _send(self, data: bytes, stamped: dict[str, str]) -> PublishFuture:
        """Hand the message to the sink: the client's future, or the blocking publish's as a
        settled one.

        With tracing on, the fast path's ``send`` span covers handing the message to the
        client (the message carries its context); the id arrives later, on the future."""
        hand_one = self._hand_one
        if hand_one is None:
            message = OutboundMessage(data, stamped)
            return settled(lambda: self._sink.publish(self._topic, message))
        if not tracing.enabled():
            return hand_one(self._topic, data, stamped)
        with tracing.sending(self._topic, OutboundMessage(data, stamped), hop="producer"):
            return hand_one(self._topic, data, tracing.with_context(stamped))

    def _group_lock(self, group: str) -> threading.RLock:
        return self._locks[hash(group) % _GROUP_LOCKS]

    def _require_counter(self) -> SequenceCounter:
        if self._counter is None:
            raise ValueError(
                "fifo_group needs a sequence counter: Publisher(sink, topic, counter=...)"
            )
        return self._counter
