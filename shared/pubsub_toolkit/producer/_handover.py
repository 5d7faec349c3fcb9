"""How the Publisher hands numbered messages to the client, and logs the gaps failures leave.

The other side of :mod:`pubsub_toolkit.producer.publisher`: once a FIFO message has its number,
what remains is the client. :func:`hand_over_of` picks how messages reach it - a
:class:`~pubsub_toolkit.producer.sink.HandOverSink`'s runs (a PubSubSink: a group's messages in
one call, from their parts), one ``publish_future`` per message, or, for a blocking sink, no
fast path at all. :func:`numbered_attributes` stamps the numbers into the attributes.

A group's messages handed over together are a :class:`SentRun`: the client settles them in
order, so one callback on the last message checks them all, and a failed message's number is
logged as a gap once (:func:`log_gap`) - the consumer's gap timeout handles it, as a number is
never reused.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import CancelledError

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.message import OutboundMessage
from pubsub_toolkit.producer.sink import MessageSink, PublishFuture, failed

# The Publisher's logger: its gap warnings keep the logger name they have always had.
logger = logging.getLogger("pubsub_toolkit.producer.publisher")

# Hands a run of messages of one ordering key to the client - (topic, key, data, attributes)
# - and returns their futures; and one message without a key - (topic, data, attributes).
HandOver = Callable[[str, str, Sequence[bytes], Sequence[Mapping[str, str]]], list[PublishFuture]]
HandOne = Callable[[str, bytes, Mapping[str, str]], PublishFuture]


def hand_over_of(sink: MessageSink) -> tuple[HandOver | None, HandOne | None]:
    """How the fast path hands messages to ``sink``: its ``publish_run`` and ``publish_one``
    (a PubSubSink), one ``publish_future`` per message (a sink with only that), or neither
    (a blocking sink)."""
    run: HandOver | None = getattr(sink, "publish_run", None)
    one: HandOne | None = getattr(sink, "publish_one", None)
    if run is not None and one is not None:
        return run, one
    publish_future = getattr(sink, "publish_future", None)
    if publish_future is None:
        return None, None

    def one_by_one(
        topic: str,
        ordering_key: str,
        data: Sequence[bytes],
        attributes: Sequence[Mapping[str, str]],
    ) -> list[PublishFuture]:
        futures: list[PublishFuture] = []
        for payload, attrs in zip(data, attributes, strict=True):
            message = OutboundMessage(payload, attrs, ordering_key)
            try:
                futures.append(publish_future(topic, message))
            except Exception as exc:  # refused at once: this message's failure, the rest go on
                futures.append(failed(exc))
        return futures

    def single(topic: str, data: bytes, attributes: Mapping[str, str]) -> PublishFuture:
        return publish_future(topic, OutboundMessage(data, attributes))  # type: ignore[no-any-return]

    return one_by_one, single


def numbered(
    data: bytes, stamped: Mapping[str, str], group: str, epoch: int, seq: int
) -> OutboundMessage:
    """One message of ``group`` with its number (epoch 0: the counter records none)."""
    [attributes] = numbered_attributes([stamped], [seq], [str(epoch) if epoch else ""])
    return OutboundMessage(data, attributes, ordering_key=group)


def numbered_attributes(
    stamped: Sequence[Mapping[str, str]], seqs: Sequence[int], epochs: Sequence[str]
) -> list[dict[str, str]]:
    """Each message's attributes with its number and its epoch ("": the counter records none)."""
    seq_key, epoch_key = attr.FIFO_SEQ, attr.FIFO_EPOCH  # looked up once, not per message
    return [
        {**m, seq_key: str(seq), epoch_key: epoch} if epoch else {**m, seq_key: str(seq)}
        for m, seq, epoch in zip(stamped, seqs, epochs, strict=True)
    ]


class SentRun:
    """A group's messages handed to the client together. Each failed one's number is logged
    as a gap once: when the run's last message is settled (:meth:`check`), or when the caller
    sees the failure first (:meth:`log`, from the caller's future: so a failure is logged by
    the time anyone sees it). A caller waiting for one waits for the last first (:meth:`wait`)."""

    def __init__(self, futures: list[PublishFuture], seqs: list[int], group: str) -> None:
        self._futures = futures
        self._seqs = seqs
        self._group = group
        self._logged: set[int] = set()
        self._lock = threading.Lock()

    def wait(self, timeout: float) -> None:
        """Wait until the run's last message is settled, at most ``timeout`` seconds (its
        outcome is its own caller's: here only the time counts)."""
        with contextlib.suppress(TimeoutError, CancelledError):
            self._futures[-1].exception(timeout)

    def check(self, _last: object = None) -> None:
        """Log each failed message of the run (one not settled yet - a sink that settles out
        of order - is checked when it is)."""
        for index, future in enumerate(self._futures):
            try:
                self._check_one(index, future)
            except TimeoutError:
                future.add_done_callback(functools.partial(self._check_one, index))

    def _check_one(self, index: int, future: PublishFuture) -> None:
        """Log message ``index`` if its ``future`` failed; TimeoutError if it is not settled."""
        try:
            failure = future.exception(timeout=0) is not None
        except CancelledError:
            failure = True
        if failure:
            self.log(index)

    def log(self, index: int) -> None:
        """Log message ``index``'s number as a gap (once: both ways may see its failure)."""
        with self._lock:  # logged before anyone else asking returns
            if index in self._logged:
                return
            self._logged.add(index)
            log_gap(self._seqs[index], self._group)


def log_gap(seq: int, group: str) -> None:
    """Warn that number ``seq`` of ``group`` will never be published."""
    logger.warning(
        "publish of fifo_seq %d in group %r failed: the number stays unused (a gap the "
        "consumer's gap timeout handles)",
        seq,
        group,
    )
