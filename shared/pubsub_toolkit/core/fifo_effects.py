"""The effects the FIFO gate's core asks its driver to perform, as values.

Every operation of the gate (:mod:`.fifo_gate`: deliver one or a batch, sweep, skip, replay, a
consumer stopping) is a generator: it *yields* one of these frozen dataclasses each time it
needs the world, and the driver sends back the result - or throws in the exception the world
raised (a :class:`~pubsub_toolkit.errors.StoreUnavailableError`, the handler's failure), at the
very yield, so the core's ``try``/``except`` decides what it means. A driver's loop is "take the
effect, perform it, send the result or throw the exception in" (:func:`run`); it decides
nothing. The sync driver is :class:`~pubsub_toolkit.consumer.gate.FifoGate`, the asyncio one
:class:`~pubsub_toolkit.consumer.gate_async.AsyncFifoGate`.

* one effect per :class:`~pubsub_toolkit.stores.fifo_state.base.FifoStore` method:
  :class:`Load`, :class:`Save`, :class:`Park`, :class:`ParkedMessage`, :class:`Unpark`,
  :class:`Groups` (results: what the method returns);
* :class:`Handle` - call the handler with ``taken`` (a message, or a batch's list); result None;
* :class:`CommitWith` - the transactional mode: the handler's writes and ``change`` in one
  store transaction; result: the state committed;
* :class:`DeadLetter` - publish ``message`` to the dead-letter topic (once per ``once`` key,
  when the driver keeps such records); result None;
* :class:`Sleep` - wait ``seconds``; result None;
* :class:`SpanStart` / :class:`SpanEnd` - the handling span of a message run from the park
  (opened before its run, closed after it with the exception that ended it, if any).

The decision log and the clock are injected into the core and used directly (no effect):
neither is I/O the core waits on.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from pubsub_toolkit import _drive
from pubsub_toolkit.message import Message
from pubsub_toolkit.stores.fifo_state.base import GroupState

T = TypeVar("T")

MAX_CAS_ROUNDS = 100  # compare-and-set retries before giving up transiently (bounded loops)


@dataclass(frozen=True, slots=True)
class Load:
    """``FifoStore.load``: the group's state."""

    consumer: str
    group: str


@dataclass(frozen=True, slots=True)
class Save:
    """``FifoStore.save``: ``state`` if the record is still ``expected``; the stored state or
    None."""

    consumer: str
    group: str
    state: GroupState
    expected: GroupState


@dataclass(frozen=True, slots=True)
class Park:
    """``FifoStore.park``: keep ``message`` at ``seq`` (the first copy stays)."""

    consumer: str
    group: str
    seq: int
    message: Message


@dataclass(frozen=True, slots=True)
class ParkedMessage:
    """``FifoStore.parked_message``: the copy parked at ``seq``, or None."""

    consumer: str
    group: str
    seq: int


@dataclass(frozen=True, slots=True)
class Unpark:
    """``FifoStore.unpark``: delete the copy parked at ``seq``."""

    consumer: str
    group: str
    seq: int


@dataclass(frozen=True, slots=True)
class Groups:
    """``FifoStore.groups``: the groups the store lists for the sweeper."""

    consumer: str


@dataclass(frozen=True, slots=True)
class Handle:
    """Call the handler with ``taken``: one message, or (batch mode) a list of them."""

    taken: Any


@dataclass(frozen=True, slots=True)
class CommitWith:
    """Transactional mode: ``handler(taken, transaction)``'s writes and ``change`` of the
    group's record (under lease ``token``) committed in one transaction; the state committed."""

    consumer: str
    group: str
    token: int
    change: Callable[[GroupState], GroupState]
    taken: Any


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """Publish ``message`` to the dead-letter topic with ``reason`` and ``detail``.

    ``once`` (with ``digest``, the message's key digest) makes it happen once per copy when the
    driver keeps rejection records (the consumer's processor gives it them); None: send it."""

    message: Message
    reason: str
    detail: str
    dedup_key: str
    once: str | None = None
    digest: str = ""


@dataclass(frozen=True, slots=True)
class Sleep:
    """Wait ``seconds`` before going on (a store hiccup's retry)."""

    seconds: float


@dataclass(frozen=True, slots=True)
class SpanStart:
    """Open the handling span of ``message`` (unless its span is the current one)."""

    message: Message


@dataclass(frozen=True, slots=True)
class SpanEnd:
    """Close the span the last :class:`SpanStart` opened; ``error`` ended the run, if any."""

    error: BaseException | None = None


Effect = (
    Load
    | Save
    | Park
    | ParkedMessage
    | Unpark
    | Groups
    | Handle
    | CommitWith
    | DeadLetter
    | Sleep
    | SpanStart
    | SpanEnd
)
# An operation of the core: yields effects, receives their results, returns a T.
Op = Generator[Effect, Any, T]


class Decide(Protocol):
    """The gate's decision log: one structured line per outcome."""

    def __call__(
        self,
        outcome: str,
        group: str,
        seq: int,
        text: str,
        *,
        level: int = ...,
        dedup_key: str | None = ...,
        **fields: object,
    ) -> None: ...


# The drivers' loop is the one every protocol shares (pubsub_toolkit._drive).
run = _drive.run
run_async = _drive.run_async
