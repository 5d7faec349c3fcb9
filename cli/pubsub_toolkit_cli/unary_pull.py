"""A subscriber that pulls with unary ``Pull`` calls behind the streaming ``subscribe`` interface.

    subscriber = UnaryPullSubscriber()
    consumer = Consumer(subscription, processor, subscriber=subscriber)

Why: the Pub/Sub emulator (0.8.20) never unregisters a streaming-pull stream whose client went
away (on the stream's cancel its jar throws ``NoSuchMethodError ...
InternalStatus.asRuntimeException``), and keeps handing that subscription's messages - new ones,
and expired ones shortly after they return - to the dead stream. After any streaming subscriber
stopped (cleanly or by ``kill -9``), the next one on the same subscription receives nothing until
the emulator restarts. Unary pulls open no stream, so a consumer on them can be stopped and
started freely. Real Pub/Sub does not have the defect; streaming pull stays the default there.

It keeps the contract :class:`~pubsub_toolkit.consumer.subscriber.Consumer` relies on:

* ``subscribe(subscription, callback, flow_control=...)`` returns a future; ``cancel()`` stops
  pulling and ``result()`` waits until the pull loop ended (or raises what ended it, e.g. a
  missing subscription); each message has ``ack()`` and ``nack()`` (deadline 0: at once
  deliverable again);
* flow control: at most ``max_messages`` / ``max_bytes`` held unsettled; the pull asks only for
  the room left, so nothing is pulled that cannot be handled;
* leases: held messages get their ack deadline extended (to the subscription's own deadline,
  every third of it) for up to ``max_lease_duration``;
* on cancel, messages pulled but not yet handed to the callback are nacked.

Pulls use ``return_immediately`` with a short idle wait: the emulator otherwise holds an empty
pull for about 7 seconds, and a client-side deadline would cancel the call - the very RPC cancel
the emulator mishandles. Acks are sent one call per message (simple, and durable before the
caller moves on); fine for local rates, not tuned for Google Cloud throughput.

One module of about 360 lines, most of it docstrings: the message, the future, the pull session and
the subscriber share the session's lock and lease table and make sense only together.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from google.api_core import exceptions as gexc

if TYPE_CHECKING:
    from google.cloud import pubsub_v1  # type: ignore[attr-defined]

logger = logging.getLogger(__name__)

_MAX_PER_PULL = 1000  # Pub/Sub's cap on max_messages per Pull
_MAX_IDS_PER_CALL = 1000  # well below the 2,500 ack ids (and 512 KB) a request may carry
_FATAL = (gexc.NotFound, gexc.PermissionDenied, gexc.InvalidArgument, gexc.Unauthenticated)
DEFAULT_ACK_DEADLINE = 60


class PulledMessage:
    """One pulled message: the fields of google-cloud-pubsub's ``Message`` plus ack/nack."""

    def __init__(self, session: _PullSession, received: Any) -> None:
        message = received.message
        self._session = session
        self.ack_id: str = received.ack_id
        self.data: bytes = message.data
        self.attributes: dict[str, str] = dict(message.attributes)
        self.message_id: str = message.message_id
        self.publish_time: datetime | None = message.publish_time
        self.ordering_key: str = message.ordering_key
        self.delivery_attempt: int | None = received.delivery_attempt or None
        self.size = len(self.data) + sum(len(k) + len(v) for k, v in self.attributes.items())

    def ack(self) -> None:
        """Acknowledge: the message is done."""
        self._session.settle(self, ack=True)

    def nack(self) -> None:
        """Release at once: the message can be delivered again (to anyone) right away."""
        self._session.settle(self, ack=False)

    def __repr__(self) -> str:
        return f"PulledMessage(message_id={self.message_id!r}, size={self.size})"


class UnaryPullFuture(concurrent.futures.Future[None]):
    """What ``subscribe`` returns: ``cancel()`` stops the pull loop, ``result()`` waits for it."""

    def __init__(self) -> None:
        super().__init__()
        self._stop: Callable[[], None] = lambda: None

    def cancel(self) -> bool:
        """Stop pulling (non-blocking, like the streaming future); ``result()`` then waits."""
        self._stop()
        return True


@dataclass
class _Held:
    message: PulledMessage
    pulled_at: float


class _PullSession:
    """The pull loop, leases and settlement of one ``subscribe`` call."""

    def __init__(
        self,
        client: Any,
        subscription: str,
        callback: Callable[[PulledMessage], object],
        flow_control: pubsub_v1.types.FlowControl,
        *,
        idle_interval: float,
        callback_threads: int,
    ) -> None:
        self._client = client
        self._subscription = subscription
        self._callback = callback
        self._flow = flow_control
        self._idle_interval = idle_interval
        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)
        self._held: dict[str, _Held] = {}
        self._held_bytes = 0
        self._stopping = threading.Event()
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=callback_threads, thread_name_prefix="unary-pull-callback"
        )
        self.future = UnaryPullFuture()
        self.future._stop = self.stop
        self._deadline = DEFAULT_ACK_DEADLINE
        self._thread = threading.Thread(
            target=self._run, name=f"unary-pull {subscription}", daemon=True
        )
        self._leaser = threading.Thread(
            target=self._lease_loop, name="unary-pull-leases", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        with self._room:
            self._room.notify_all()

    # --- the pull loop ---------------------------------------------------------------------

    def _run(self) -> None:
        failure: BaseException | None = None
        try:
            self._deadline = self._subscription_deadline()
            self._leaser.start()
            self._pull_until_stopped()
        except BaseException as exc:  # reported through the future, as the streaming one does
            failure = exc
        finally:
            self._stopping.set()
            # Callbacks still queued see _stopping and nack; wait so none acts after result().
            self._executor.shutdown(wait=True)
            if failure is None:
                self.future.set_result(None)
            else:
                logger.warning("pulling %s stopped: %s", self._subscription, failure)
                self.future.set_exception(failure)

    def _subscription_deadline(self) -> int:
        try:
            config = self._client.get_subscription(
                subscription=self._subscription, timeout=10, retry=None
            )
        except gexc.NotFound:
            raise
        except gexc.GoogleAPICallError as exc:
            # A subscriber may lack pubsub.subscriptions.get; leases then use 60 s.
            logger.info(
                "cannot read %s's ack deadline (%s); leasing for 60 s", self._subscription, exc
            )
            return DEFAULT_ACK_DEADLINE
        return int(config.ack_deadline_seconds) or DEFAULT_ACK_DEADLINE

    def _pull_until_stopped(self) -> None:
        backoff = 0.0
        while not self._stopping.is_set():
            room = self._wait_for_room()
            if room == 0:
                continue  # woken by stop (or a spurious wake-up): check again
            try:
                response = self._client.pull(
                    subscription=self._subscription,
                    max_messages=min(room, _MAX_PER_PULL),
                    return_immediately=True,
                    timeout=30,
                )
            except _FATAL:
                raise
            except (gexc.GoogleAPICallError, gexc.RetryError) as exc:
                backoff = min(max(backoff * 2, 0.25), 5.0)
                logger.warning(
                    "pull from %s failed (%s); retrying in %.2fs", self._subscription, exc, backoff
                )
                self._stopping.wait(backoff)
                continue
            backoff = 0.0
            if not response.received_messages:
                self._stopping.wait(self._idle_interval)  # the poll interval of an idle pull
                continue
            now = time.monotonic()
            pulled = [PulledMessage(self, item) for item in response.received_messages]
            with self._lock:
                for message in pulled:
                    self._held[message.ack_id] = _Held(message, now)
                    self._held_bytes += message.size
            for message in pulled:
                self._executor.submit(self._dispatch, message)

    def _wait_for_room(self) -> int:
        """How many messages may be pulled now; waits while flow control is full."""
        with self._room:
            while not self._stopping.is_set():
                room = int(self._flow.max_messages) - len(self._held)
                if room > 0 and self._held_bytes < self._flow.max_bytes:
                    return room
                self._room.wait(timeout=1.0)
        return 0

    def _dispatch(self, message: PulledMessage) -> None:
        if self._stopping.is_set():
            message.nack()  # pulled but never handed over: let someone else have it at once
            return
        try:
            self._callback(message)
        except Exception:
            # The streaming client logs and drops such errors too; the lease then expires.
            logger.exception("subscriber callback failed on %s", message.message_id)

    # --- settlement and leases -------------------------------------------------------------

    def settle(self, message: PulledMessage, *, ack: bool) -> None:
        with self._room:
            held = self._held.pop(message.ack_id, None)
            if held is None:
                return  # settled already (or its lease was given up): nothing to send
            self._held_bytes -= message.size
            self._room.notify_all()
        try:
            if ack:
                self._client.acknowledge(
                    subscription=self._subscription, ack_ids=[message.ack_id], timeout=30
                )
            else:
                self._client.modify_ack_deadline(
                    subscription=self._subscription,
                    ack_ids=[message.ack_id],
                    ack_deadline_seconds=0,
                    timeout=30,
                )
        except Exception as exc:  # the message comes back when its deadline passes
            logger.warning(
                "%s of %s failed (%s): it will be redelivered",
                "ack" if ack else "nack",
                message.message_id,
                exc,
            )

    def _lease_loop(self) -> None:
        interval = max(self._deadline / 3, 1.0)
        extension = self._deadline
        if self._flow.max_duration_per_lease_extension:
            extension = min(extension, int(self._flow.max_duration_per_lease_extension))
        while not self._stopping.wait(interval):
            now = time.monotonic()
            with self._lock:
                expired = [
                    h
                    for h in self._held.values()
                    if now - h.pulled_at > self._flow.max_lease_duration
                ]
                for held in expired:
                    self._held.pop(held.message.ack_id)
                    self._held_bytes -= held.message.size
                ack_ids = list(self._held)
            for held in expired:
                logger.warning(
                    "%s held longer than max_lease_duration: its lease is dropped",
                    held.message.message_id,
                )
            for start in range(0, len(ack_ids), _MAX_IDS_PER_CALL):
                try:
                    self._client.modify_ack_deadline(
                        subscription=self._subscription,
                        ack_ids=ack_ids[start : start + _MAX_IDS_PER_CALL],
                        ack_deadline_seconds=extension,
                        timeout=30,
                    )
                except Exception as exc:  # a missed extension only risks a redelivery
                    logger.warning("lease extension on %s failed: %s", self._subscription, exc)


class UnaryPullSubscriber:
    """Drop-in for ``pubsub_v1.SubscriberClient`` where :class:`Consumer` uses it.

    ``client`` defaults to :func:`pubsub_toolkit_cli.emulator.subscriber_client` (10 MB messages
    against the emulator); it is closed by :meth:`close`.
    """

    def __init__(
        self,
        client: pubsub_v1.SubscriberClient | None = None,
        *,
        idle_interval: float = 0.05,
        callback_threads: int = 10,
    ) -> None:
        if client is None:
            from pubsub_toolkit_cli.emulator import subscriber_client

            client = subscriber_client()
        self._client = client
        self._idle_interval = idle_interval
        self._callback_threads = callback_threads
        self._sessions: list[_PullSession] = []

    def subscribe(
        self,
        subscription: str,
        callback: Callable[[PulledMessage], object],
        flow_control: pubsub_v1.types.FlowControl | None = None,
    ) -> UnaryPullFuture:
        """Start pulling ``subscription`` into ``callback``; returns at once."""
        if flow_control is None:
            from google.cloud import pubsub_v1  # type: ignore[attr-defined]

            flow_control = pubsub_v1.types.FlowControl()
        if flow_control.max_messages < 1:
            raise ValueError("flow_control.max_messages must be at least 1")
        session = _PullSession(
            self._client,
            subscription,
            callback,
            flow_control,
            idle_interval=self._idle_interval,
            callback_threads=self._callback_threads,
        )
        self._sessions.append(session)
        session.start()
        return session.future

    def close(self) -> None:
        """Stop every pull loop and close the client's channel."""
        for session in self._sessions:
            session.stop()
        self._client.close()

    def __enter__(self) -> UnaryPullSubscriber:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
