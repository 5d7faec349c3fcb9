"""Every boundary a component crosses, with the faults injected there.

A process reaches the outside world only through here: its store calls (:meth:`store`), its
publishes (:meth:`publish`), its Cloud Tasks calls (:meth:`tasks`), and the steps around its
effect and its ack (:meth:`step`, :meth:`ack`). Each boundary is:

1. a dead process does nothing (:class:`~tests.simulation.process.ProcessCrashed`);
2. a yield point - another due event may run here (races);
3. the faults drawn for it: crash before, crash after, a store outage (refused, not applied),
   a timeout after commit (applied, then ``StoreUnavailableError``), an error reply to a
   write (``store_error_reply``: READONLY/OOM, ``StoreUnavailableError`` as the Redis stores
   raise it, before or after the write landed), a publish that fails or
   times out after the topic accepted it (``TransientError``, as ``PubSubSink`` raises).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.errors import StoreUnavailableError, TransientError
from pubsub_toolkit.message import OutboundMessage
from tests.simulation.database import Database, StoreView
from tests.simulation.events import EventLoop
from tests.simulation.faults import Faults
from tests.simulation.ledger import Ledger
from tests.simulation.process import Process, ProcessCrashed
from tests.simulation.pubsub import PubSub
from tests.simulation.tasks import CloudTasks, TasksView
from tests.simulation.tracing import Trace

T = TypeVar("T")


class Boundaries:
    """The fault-injecting gateway shared by every process of one schedule."""

    def __init__(
        self,
        loop: EventLoop,
        faults: Faults,
        db: Database,
        broker: PubSub,
        trace: Trace,
        ledger: Ledger | None = None,
    ) -> None:
        self._ledger = ledger
        self._loop = loop
        self._faults = faults
        self._db = db
        self._broker = broker
        self._trace = trace
        self.publishing: Process | None = None  # the process whose publish is being accepted
        self._reply_lost = False  # the store write being applied: its reply will be lost

    def _enter(self, process: Process) -> None:
        process.check()
        self._loop.yield_point()
        process.check()  # a nested event may have crashed it

    def _crash_draw(self, process: Process, op: str) -> str | None:
        crash = self._faults.crash()
        if crash == "before":
            process.crash(f"before {op}")
        return crash

    # --- stores ---------------------------------------------------------------------------

    def store(self, process: Process, op: str, apply: Callable[[], T], is_read: bool) -> T:
        self._enter(process)
        self._db.clock.use(process.clock)
        if self._faults.store_down(process.kind):
            raise StoreUnavailableError(f"{op}: the store is unreachable (outage)")
        crash = self._crash_draw(process, op)
        reply = None if is_read else self._faults.store_error_reply()
        if reply == "before":
            # Redis answers a write with an error reply (a replica after failover, maxmemory):
            # the Redis stores raise StoreUnavailableError for it (stores/_redis_calls).
            raise StoreUnavailableError(
                f"{op}: READONLY You can't write against a read only replica."
            )
        timeout = not is_read and self._faults.store_timeout()
        # The write lands, but its writer never hears so (the lease writes' record says it).
        self._reply_lost = bool(timeout or reply == "after")
        result = apply()
        if not is_read:
            self._db.after_write()
        if reply == "after":
            # ... or after the write landed (a script's later command refused: OOM)
            self._trace.add(f"{process.name}: {op} applied, then an error reply")
            raise StoreUnavailableError(f"{op}: OOM command not allowed (after the write)")
        if timeout:
            self._trace.add(f"{process.name}: {op} applied, then timed out")
            raise StoreUnavailableError(f"{op}: timed out after the write was applied")
        if crash == "after":
            process.crash(f"after {op}")
        # The reply is on its way back: another thread of this process (or anyone) may act
        # before the caller looks at it - e.g. write the state this read is about to be
        # compared with.
        self._loop.yield_point()
        process.check()
        return result

    def store_view(self, process: Process, name: str) -> Any:
        """``process``'s connection to the database's ``name`` store (dedup, fifo, counter)."""

        def call(op: str, apply: Callable[[], Any], is_read: bool) -> Any:
            return self.store(process, op, apply, is_read)

        def note(method: str, args: tuple[Any, ...], reply: Any) -> None:
            # Who took each dedup claim (invariant 7: a "fenced" run was taken over by a claim
            # that landed, whether or not its writer heard so and logged its takeover).
            if name == "dedup" and method == "claim" and self._ledger and reply.owns_key:
                self._ledger.claim_written(
                    args[0],
                    args[1],
                    reply.token,
                    process.name,
                    self._loop.now,
                    heard=not self._reply_lost,
                )
            # Who wrote each FIFO lease token (invariant 7: a run fenced by a lease its own
            # process wrote was not taken over).
            if name == "fifo" and method == "save" and reply is not None and self._ledger:
                self._ledger.lease_written(
                    args[1],
                    args[3].lease_token,
                    reply,
                    process.name,
                    process.clock.now(),
                    self._loop.now,
                    heard=not self._reply_lost,
                )

        return StoreView(name, self._db.target(name), call, note)

    # --- Pub/Sub --------------------------------------------------------------------------

    def publish(self, process: Process, topic: str, message: OutboundMessage) -> str:
        self._enter(process)
        # A producer app cannot tell a timed-out publish of a message without a dedup key from
        # a lost one, and would publish it again as a new message: only keyed ones get the
        # ambiguous faults (timeout after accept, crash after publish) at the producer.
        ambiguous_ok = process.kind != "producer" or attr.DEDUP_KEY in message.attributes
        fault = self._faults.publish()
        crash = self._crash_draw(process, f"publish to {_short(topic)}")
        if fault == "fail":
            raise TransientError(f"publish to {topic} failed")
        self.publishing = process
        try:
            message_id = self._broker.publish(topic, message)
        finally:
            self.publishing = None
        self._trace.add(
            f"{process.name}: published {message_id} to {_short(topic)} {_brief(message)}"
        )
        if fault == "timeout" and ambiguous_ok:
            self._trace.add(f"{process.name}: ... but the publish timed out")
            raise TransientError(f"publish to {topic} timed out (the topic had accepted it)")
        if crash == "after" and ambiguous_ok:
            process.crash(f"after publish to {_short(topic)}")
        return message_id

    def sink(self, process: Process) -> Any:
        """``process``'s MessageSink (our protocol): publishes through this boundary."""
        return _Sink(self, process)

    # --- Cloud Tasks ----------------------------------------------------------------------

    def tasks(self, process: Process, op: str, apply: Callable[[], T]) -> T:
        self._enter(process)
        if op == "tasks.create" and self._faults.tasks_refused(process.kind):
            raise TransientError(f"{op} refused (relay_tasks_refused)")
        fault = self._faults.publish()
        crash = self._crash_draw(process, op)
        if fault == "fail":
            raise TransientError(f"{op} failed")
        result = apply()
        self._trace.add(f"{process.name}: {op} -> {result}")
        if fault == "timeout":
            raise TransientError(f"{op} timed out (it was applied)")
        if crash == "after":
            process.crash(f"after {op}")
        return result

    def scheduler(self, process: Process, service: CloudTasks) -> TasksView:
        def call(op: str, apply: Callable[[], Any]) -> Any:
            return self.tasks(process, op, apply)

        return TasksView(service, process.clock, call)

    # --- steps ----------------------------------------------------------------------------

    def step(self, process: Process, where: str) -> None:
        """A point between two steps (e.g. before/after the effect): may crash here."""
        self._enter(process)
        if self._faults.crash():
            process.crash(where)

    def ack(self, process: Process) -> bool:
        """Send an ack (or a 2xx); False when it never arrives (crash before, or lost)."""
        if not process.alive:
            return False
        try:
            self.step(process, "before ack")
        except ProcessCrashed:
            return False
        if self._faults.lost_ack():
            self._trace.add(f"{process.name}: ack lost")
            return False
        return True


class _Sink:
    """A process's :class:`pubsub_toolkit.publishing.MessageSink`."""

    def __init__(self, boundaries: Boundaries, process: Process) -> None:
        self._boundaries = boundaries
        self._process = process

    def publish(self, topic: str, message: OutboundMessage) -> str:
        return self._boundaries.publish(self._process, topic, message)


def _short(topic: str) -> str:
    return topic.rsplit("/", 1)[-1]


def _brief(message: OutboundMessage) -> str:
    a = message.attributes
    parts = [message.data[:8].decode(errors="replace").split(":")[0]]
    for name in (
        "dedup_key",
        "fifo_group",
        "fifo_seq",
        "fifo_filler",
        "deliver_at",
        "error_reason",
    ):
        if name in a:
            parts.append(f"{name}={a[name][:40]}")
    return " ".join(parts)
