"""FIFO messages numbered off the caller's thread: one counter round trip for all that wait.

A Publisher on a future-returning sink does not reserve a number per ``publish`` call: the
call validates the message, queues it in its group and returns its future (a :class:`Pending`).
One daemon thread takes everything queued - per group, in the order the calls queued it -
reserves ONE block per group for it (one round trip for all the groups when the counter can:
``reserve_many``, however many messages), numbers the messages in queue order and hands them
to the client, which sends them in that order (one ordering key per group). So numbers are
only ever reserved for messages already asked for (no block held ahead: a crash leaves no more
gap than before), each thread's messages of a group get increasing numbers, and a group's
numbers reach the client in ascending order.

Everything the thread takes at once is a *round*. A :class:`Pending` is light - no lock or
condition of its own unless ``concurrent.futures.wait()`` asks for one: it waits on its round
(one event for all its messages) until the thread has handed it to the client, then it is the
client's future (``result()`` is the message id).

A caller waiting on a message the client has not answered yet first waits - up to
:data:`RUN_WAIT` - for the last message of its *run* (its group's messages handed over with it,
which the client sends after it, one batch after the other): one wake-up for the run instead of
one per batch. Each wake-up takes the GIL from the thread handing messages to the client; with
eight threads waiting on their futures in order, that cost the Publisher a tenth of its
throughput (docs/reference/performance.md). A message already answered is returned at once;
``done()`` and callbacks follow the message itself.

The thread exits after ``idle`` seconds without work and starts again on the next message.
It is a daemon thread: wait for the futures (or use ``publish_batch``) before the process
exits, as with google-cloud-pubsub's own futures.

(About 330 lines: the queue, its rounds and the future that waits on them - a
``concurrent.futures.Future`` without a condition per message - belong together.)
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from pubsub_toolkit.producer.sink import PublishFuture, failed

logger = logging.getLogger(__name__)


# How long a caller waiting for a FIFO message first waits for its run (see Pending.result).
RUN_WAIT = 0.2  # seconds


class Run(Protocol):
    """The messages of a group handed to the client together: where a message's number is
    logged as a gap if its publish failed, and what a waiting caller waits for first."""

    def log(self, index: int) -> None:
        """Log message ``index`` of the run as a gap (once, however often asked)."""
        ...

    def wait(self, timeout: float) -> None:
        """Wait until the run's last message is settled, at most ``timeout`` seconds."""
        ...


class _Round:
    """The messages the numbering thread took at once: handed over (or failed) together."""

    __slots__ = ("_deferred", "_handed", "_lock")

    def __init__(self) -> None:
        self._handed = threading.Event()
        self._lock = threading.Lock()
        self._deferred: list[tuple[Pending, Callable[[Any], object]]] = []

    def wait(self, timeout: float | None) -> bool:
        return self._handed.wait(timeout)

    def defer(self, pending: Pending, fn: Callable[[Any], object]) -> bool:
        """Keep ``fn`` for ``pending`` until the round is handed over; False if it already is."""
        with self._lock:
            if self._handed.is_set():
                return False
            self._deferred.append((pending, fn))
            return True

    def handed(self) -> None:
        """Every message of the round has its client future (or its failure): wake the
        waiters, and give the callbacks added meanwhile to those futures."""
        with self._lock:
            self._handed.set()
            deferred, self._deferred = self._deferred, []
        for pending, fn in deferred:
            pending._attach(fn)


# Creating a Pending's condition, once: only futures that concurrent.futures.wait() or
# as_completed() are given ever get one.
_MAKING_CONDITION = threading.Lock()


class Pending(concurrent.futures.Future[Any]):
    """A FIFO message waiting for its number, and the future its caller holds: settled as the
    client's future once handed over (``result()`` the message id, or the failure), or with
    the failure that kept it from the client (its group's reservation).

    A :class:`concurrent.futures.Future`, as google-cloud-pubsub's futures are, so that
    ``concurrent.futures.wait()`` and ``as_completed()`` take it - but without the base's
    ``__init__``: the condition and waiter list those functions use are made on their first
    use (:attr:`_condition`), not for every message."""

    __slots__ = (
        "_cond",
        "_group_run",
        "_index",
        "_inner",
        "_round",
        "_waiter_list",
        "data",
        "stamped",
    )

    def __init__(self, data: bytes, stamped: dict[str, str], round_: _Round) -> None:
        # The base's __init__ is skipped on purpose (a condition per message; see above).
        self.data = data
        self.stamped = stamped
        self._round = round_
        self._inner: PublishFuture | None = None
        self._group_run: Run | None = None
        self._index = 0
        self._cond: threading.Condition | None = None
        self._waiter_list: list[Any] | None = None  # made with the condition

    # --- what concurrent.futures.wait() and as_completed() read ---------------------------

    @property
    def _condition(self) -> threading.Condition:  # type: ignore[override]
        """The condition ``wait()`` holds while it looks at the state and installs a waiter;
        made on first use, when a callback starts to tell the waiters once settled."""
        cond = self._cond
        if cond is not None:
            return cond
        with _MAKING_CONDITION:
            made = self._cond is None
            if made:
                self._waiter_list = []
                self._cond = threading.Condition()
            cond = self._cond
            assert cond is not None
        if made:
            self.add_done_callback(self._notify_waiters)  # at once if already settled
        return cond

    @property
    def _state(self) -> str:  # type: ignore[override]
        return "FINISHED" if self.done() else "RUNNING"

    @property
    def _waiters(self) -> list[Any]:  # type: ignore[override]
        self._condition  # noqa: B018 - made with the condition, so a waiter is always told
        assert self._waiter_list is not None
        return self._waiter_list

    def _notify_waiters(self, _settled: object) -> None:
        """Tell the waiters ``wait()``/``as_completed()`` installed that this one is settled
        (what the base's ``set_result``/``set_exception`` do)."""
        inner = self._inner
        assert inner is not None  # called once settled
        failed_ = inner.exception(timeout=0) is not None
        with self._condition:
            for waiter in self._waiter_list or ():
                if failed_:
                    waiter.add_exception(self)
                else:
                    waiter.add_result(self)
            self._condition.notify_all()

    def __repr__(self) -> str:
        return f"<Pending FIFO publish at {id(self):#x} state={self._state.lower()}>"

    def hand_over(self, inner: PublishFuture, run: Run, index: int) -> None:
        """The client's future for this message (the numbering thread, before the round is
        marked handed), and where its number is logged as a gap if it fails (``index``)."""
        self._group_run = run
        self._index = index
        self._inner = inner

    def fail(self, exc: BaseException) -> None:
        """This message never reached the client: ``exc`` is its outcome."""
        self._inner = failed(exc)

    def _settled_inner(self, timeout: float | None) -> tuple[PublishFuture, float | None]:
        """The client's future once handed over - and, while it is not settled, after waiting
        up to RUN_WAIT for the run's last message - and what is left of ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        inner = self._inner
        if inner is None:
            if not self._round.wait(timeout):
                raise TimeoutError("the message was not handed to the client in time")
            inner = self._inner
            assert inner is not None  # a round is marked handed only once each message is
        if self._group_run is not None and not inner.done():
            # One wake-up for the run instead of one per batch of it: a thread woken at every
            # batch the client settles takes the GIL from the thread handing messages over.
            left = RUN_WAIT if deadline is None else min(RUN_WAIT, deadline - time.monotonic())
            if left > 0:
                self._group_run.wait(left)
        return inner, None if deadline is None else max(0.0, deadline - time.monotonic())

    def result(self, timeout: float | None = None) -> Any:
        """The message id once Pub/Sub has accepted the message; raises the failure (and
        TimeoutError after ``timeout`` seconds). Not answered yet: waits for its run first,
        up to RUN_WAIT (see the module docstring)."""
        inner, left = self._settled_inner(timeout)
        try:
            return inner.result(left)
        except Exception:
            if self._group_run is not None and inner.done():  # failed, not merely not yet settled
                self._group_run.log(self._index)
            raise

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The failure once settled, None when the message was published."""
        inner, left = self._settled_inner(timeout)
        failure = inner.exception(left)
        if failure is not None and self._group_run is not None:
            self._group_run.log(self._index)
        return failure

    def done(self) -> bool:
        inner = self._inner
        return inner is not None and inner.done()

    def running(self) -> bool:
        """As google-cloud-pubsub's future: True until settled."""
        return not self.done()

    def cancel(self) -> bool:
        """A publish cannot be cancelled (as google-cloud-pubsub's future)."""
        return False

    def cancelled(self) -> bool:
        return False

    def add_done_callback(self, fn: Callable[[Any], object]) -> None:
        """Call ``fn(this future)`` once settled (at once if it already is)."""
        if self._inner is None and self._round.defer(self, fn):
            return
        self._attach(fn)

    def _attach(self, fn: Callable[[Any], object]) -> None:
        inner = self._inner
        assert inner is not None
        inner.add_done_callback(lambda _: fn(self))


# Numbers and sends every group's waiting messages, each group in order; hands each over.
SendGroups = Callable[[dict[str, list[Pending]]], None]


class NumberingQueue:
    """Messages per group waiting for numbers, and the one thread that numbers them."""

    def __init__(self, send_groups: SendGroups, *, idle: float = 1.0) -> None:
        self._send_groups = send_groups
        self._idle = idle
        self._waiting: dict[str, list[Pending]] = {}
        self._round = _Round()  # the round the messages queued now belong to
        self._lock = threading.Lock()  # entered directly by submit: cheaper than the condition
        self._ready = threading.Condition(self._lock)
        self._running = False
        self._sleeping = False  # the thread waits for work: a submit wakes it

    def submit(self, group: str, messages: list[tuple[bytes, dict[str, str]]]) -> list[Pending]:
        """Queue ``messages`` (in order, together) behind what ``group`` already has waiting;
        their futures, in the same order."""
        with self._lock:
            round_ = self._round
            items = [Pending(data, stamped, round_) for data, stamped in messages]
            queued = self._waiting.get(group)
            if queued is None:
                self._waiting[group] = items.copy()  # the caller keeps ``items``
            else:
                queued.extend(items)
            self._wake()
        return items

    def submit_one(self, group: str, data: bytes, stamped: dict[str, str]) -> Pending:
        """:meth:`submit` for one message (``publish``'s case, without the lists)."""
        with self._lock:
            item = Pending(data, stamped, self._round)
            queued = self._waiting.get(group)
            if queued is None:
                self._waiting[group] = [item]
            else:
                queued.append(item)
            self._wake()
        return item

    def _wake(self) -> None:
        """Start the thread, or wake it if it waits for work (under the lock)."""
        if not self._running:
            self._running = True
            threading.Thread(target=self._run, name="publisher-numbering", daemon=True).start()
        elif self._sleeping:
            self._ready.notify()

    def _run(self) -> None:
        while True:
            with self._ready:
                if not self._waiting:
                    self._sleeping = True
                    self._ready.wait(self._idle)
                    self._sleeping = False
                if not self._waiting:
                    self._running = False  # under the lock: the next submit starts a thread
                    return
                taken, self._waiting = self._waiting, {}
                round_, self._round = self._round, _Round()
            failure: BaseException | None = None
            try:
                self._send_groups(taken)
            except Exception as exc:  # settle every future; never kill the thread
                logger.exception("numbering %d group(s) failed; their messages fail", len(taken))
                failure = exc
            finally:
                for items in taken.values():
                    for item in items:
                        if item._inner is None:
                            item.fail(failure or RuntimeError("the numbering thread stopped"))
                round_.handed()
