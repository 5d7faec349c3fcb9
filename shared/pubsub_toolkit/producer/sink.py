"""Publishing behind our own small protocol, so tests fake *our* seam, never Google's client.

Two forms. ``publish`` blocks until the message is durable and returns its id: what ingress,
the relay and the dead-letter path need (they ack their input only after their output is
durable). ``publish_future`` (:class:`FutureSink`, optional) hands the message to the client and
returns at once with a :class:`PublishFuture` - google-cloud-pubsub's own future - so a
producer publishing many messages rides the client's batching instead of one round trip each
(the :class:`~pubsub_toolkit.producer.publisher.Publisher` uses it when the sink has it).

``PubSubSink.publish`` blocks until Pub/Sub has accepted the message (the future resolved): a
component only acks its input, or answers 2xx, after its output is durable.

Because every caller waits on its own message, the client it builds batches for 0 s instead of
google-cloud-pubsub's default 10 ms: that window only delayed each lone publish by 10 ms (two
thirds of ingress's publish time), and under concurrency it capped a client at one batch per
window. With 0 s the client's commit thread sends the batch as soon as it runs (publishes made
before that still join it). Measured on the emulator: a blocking publish 12.5 -> 1 ms, and 8
threads publishing through one client 630 -> 3,000 msgs/s (docs/reference/performance.md,
"Immediate-path latency").

**A paused ordering key.** After a failed publish with an ordering key the client pauses the key
(and fails every message queued behind it) until ``resume_publish``. The sink resumes the key
before its next publish to it - from the publishing thread, never from a future's callback: the
client settles the queued messages' futures inside its own locks, and a resume called there
waits for those locks for ever (the commit thread, and every later publish, stuck).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol

from google.api_core import exceptions as gexc

from pubsub_toolkit.errors import PermanentError, TransientError
from pubsub_toolkit.message import OutboundMessage

if TYPE_CHECKING:
    from google.cloud import pubsub_v1  # type: ignore[attr-defined]

logger = logging.getLogger(__name__)

REASON_PUBLISH_REJECTED = "publish_rejected"


class MessageSink(Protocol):
    """Somewhere messages can be published to."""

    def publish(self, topic: str, message: OutboundMessage) -> str:
        """Publish ``message`` to ``topic`` and return its message id once durable."""
        ...


class PublishFuture(Protocol):
    """The outcome of one publish: google-cloud-pubsub's future, or a
    :class:`concurrent.futures.Future` - the message id as its result, the exception on
    failure."""

    def result(self, timeout: float | None = None) -> Any:
        """The message id once Pub/Sub has accepted the message; raises the failure."""
        ...

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The failure once the publish is settled, None when it succeeded."""
        ...

    def done(self) -> bool:
        """Whether the publish is settled."""
        ...

    def add_done_callback(self, fn: Callable[[Any], object]) -> None:
        """Call ``fn(future)`` once settled (at once when it already is)."""
        ...

    def cancel(self) -> bool:
        """Try to cancel the publish (google-cloud-pubsub's futures never can: False)."""
        ...

    def cancelled(self) -> bool:
        """Whether the publish was cancelled."""
        ...


class FutureSink(Protocol):
    """A sink that can also publish without waiting (the Publisher's fast path)."""

    def publish_future(self, topic: str, message: OutboundMessage) -> PublishFuture:
        """Hand ``message`` to the client; the future settles when Pub/Sub has answered."""
        ...


class HandOverSink(Protocol):
    """A sink that hands messages to the client from their parts, many of one ordering key in
    one call (PubSubSink): the Publisher's fast path, with no object per message of its own -
    in a burst of publishes, every object that lives until its batch is sent is one more for
    Python's garbage collector to scan, again and again (string-only dicts are not)."""

    def publish_one(self, topic: str, data: bytes, attributes: Mapping[str, str]) -> PublishFuture:
        """Hand one message without an ordering key to the client; its future."""
        ...

    def publish_run(
        self,
        topic: str,
        ordering_key: str,
        data: Sequence[bytes],
        attributes: Sequence[Mapping[str, str]],
    ) -> list[PublishFuture]:
        """Hand the messages ``data[i]`` with ``attributes[i]`` to the client in order; a
        future each, in the same order."""
        ...


def failed(exc: BaseException) -> Future[str]:
    """A future already settled with ``exc``."""
    future: Future[str] = Future()
    future.set_exception(exc)
    return future


def settled(call: Callable[[], str]) -> Future[str]:
    """``call()``'s outcome as a settled future: its result, or the exception it raised."""
    future: Future[str] = Future()
    try:
        future.set_result(call())
    except Exception as exc:  # handed to the caller through the future
        future.set_exception(exc)
    return future


def publisher_for_sink(max_latency: timedelta = timedelta(0)) -> pubsub_v1.PublisherClient:
    """The client :class:`PubSubSink` builds: message ordering on (ordering keys are FIFO
    groups) and a batching window of ``max_latency`` (see the module docstring for why 0)."""
    from google.cloud import pubsub_v1  # type: ignore[attr-defined]

    return pubsub_v1.PublisherClient(
        batch_settings=pubsub_v1.types.BatchSettings(max_latency=max_latency.total_seconds()),
        publisher_options=pubsub_v1.types.PublisherOptions(enable_message_ordering=True),
    )


class PubSubSink:
    """Publishes with google-cloud-pubsub; message ordering enabled for ordering keys."""

    def __init__(
        self,
        client: pubsub_v1.PublisherClient | None = None,
        *,
        timeout: timedelta = timedelta(seconds=30),
        max_latency: timedelta = timedelta(0),
    ) -> None:
        """``max_latency`` is the batching window of the client built when ``client`` is None
        (a given client keeps its own settings)."""
        if client is None:
            client = publisher_for_sink(max_latency)
        self._client = client
        self._timeout = timeout.total_seconds()
        # (topic, ordering key) whose key a failed publish may have paused: resumed by the
        # next publish to it (see the module docstring). A set's add is atomic: callbacks only
        # add, under the client's locks, and never call the client.
        self._paused: set[tuple[str, str]] = set()

    def publish(self, topic: str, message: OutboundMessage) -> str:
        self._resume_if_paused(topic, message.ordering_key)
        try:
            future = self._client.publish(
                topic, message.data, ordering_key=message.ordering_key, **message.attributes
            )
            return str(future.result(timeout=self._timeout))
        except (gexc.InvalidArgument, ValueError, TypeError) as exc:
            self._mark_paused(topic, message.ordering_key)
            raise PermanentError(
                REASON_PUBLISH_REJECTED, f"Pub/Sub rejected the message: {exc}"
            ) from exc
        except Exception as exc:
            # Timeouts, unavailability, a missing topic: nothing was lost, so let the input
            # be delivered again once the cause is fixed.
            self._mark_paused(topic, message.ordering_key)
            raise TransientError(f"publish to {topic} failed: {exc}") from exc

    def publish_future(self, topic: str, message: OutboundMessage) -> PublishFuture:
        """Hand ``message`` to the client and return its future at once (google-cloud-pubsub's
        own: ``result()`` is the message id, or raises the client's exception - NotFound for
        a missing topic). After a failure the client pauses the message's ordering key; the
        sink resumes it before its next publish to the key, as :meth:`publish` does."""
        key = message.ordering_key
        self._resume_if_paused(topic, key)
        future = self._client.publish(topic, message.data, ordering_key=key, **message.attributes)
        if key:
            future.add_done_callback(functools.partial(self._mark_if_failed, topic, key))
        return future  # type: ignore[no-any-return]

    def publish_one(self, topic: str, data: bytes, attributes: Mapping[str, str]) -> PublishFuture:
        """Hand one message without an ordering key to the client; its future (the client's
        own, as :meth:`publish_future`)."""
        return self._client.publish(topic, data, **attributes)  # type: ignore[no-any-return]

    def publish_run(
        self,
        topic: str,
        ordering_key: str,
        data: Sequence[bytes],
        attributes: Sequence[Mapping[str, str]],
    ) -> list[PublishFuture]:
        """Hand the messages ``data[i]`` with ``attributes[i]`` to the client in order, all
        with ``ordering_key``, and return their futures (google-cloud-pubsub's own) in the same
        order: the Publisher's fast path, without a message object or a callback per message.

        A message the client refuses at once has a failed future and the rest are still
        handed over. One callback, on the last future, notes a key the run's failure paused:
        the client fails every message of a paused key - those queued behind the failure and
        those published after it - so if the key is paused once the run is settled, its last
        message failed."""
        self._resume_if_paused(topic, ordering_key)
        publish = self._client.publish
        futures: list[PublishFuture] = []
        for payload, attrs in zip(data, attributes, strict=True):
            try:
                futures.append(publish(topic, payload, ordering_key=ordering_key, **attrs))
            except Exception as exc:  # the client refused it at once: this message's failure
                futures.append(failed(exc))
        if ordering_key and futures:
            futures[-1].add_done_callback(
                functools.partial(self._mark_if_failed, topic, ordering_key)
            )
        return futures

    def _mark_if_failed(self, topic: str, ordering_key: str, settled: Any) -> None:
        # A callback: runs inside the client's locks, so it only notes the key (no client call).
        if settled.exception() is not None:
            self._mark_paused(topic, ordering_key)

    def _mark_paused(self, topic: str, ordering_key: str) -> None:
        if ordering_key:
            self._paused.add((topic, ordering_key))

    def _resume_if_paused(self, topic: str, ordering_key: str) -> None:
        """Resume ``ordering_key`` if a failure may have paused it (cheap when none did)."""
        if not (ordering_key and self._paused):
            return
        pair = (topic, ordering_key)
        if pair not in self._paused:
            return
        self._paused.discard(pair)
        try:
            self._client.resume_publish(topic, ordering_key)
        except RuntimeError:
            # Not paused: resumed already, or the client has not paused it yet (it settles
            # some failures before pausing). A message published to a paused key fails at once
            # and notes the key again, so the next publish resumes it.
            logger.debug("ordering key %r of %s was not paused", ordering_key, topic)

    def close(self) -> None:
        """Flush and stop the client's background threads."""
        self._client.stop()
