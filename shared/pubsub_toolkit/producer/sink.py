"""Publishing behind our own small protocol, so tests fake *our* seam, never Google's client.

``PubSubSink.publish`` blocks until Pub/Sub has accepted the message (the future resolved): a
component only acks its input, or answers 2xx, after its output is durable.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import TYPE_CHECKING, Protocol

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


class PubSubSink:
    """Publishes with google-cloud-pubsub; message ordering enabled for ordering keys."""

    def __init__(
        self,
        client: pubsub_v1.PublisherClient | None = None,
        *,
        timeout: timedelta = timedelta(seconds=30),
    ) -> None:
        if client is None:
            from google.cloud import pubsub_v1  # type: ignore[attr-defined]

            client = pubsub_v1.PublisherClient(
                publisher_options=pubsub_v1.types.PublisherOptions(enable_message_ordering=True)
            )
        self._client = client
        self._timeout = timeout.total_seconds()

    def publish(self, topic: str, message: OutboundMessage) -> str:
        try:
            future = self._client.publish(
                topic, message.data, ordering_key=message.ordering_key, **message.attributes
            )
            return str(future.result(timeout=self._timeout))
        except (gexc.InvalidArgument, ValueError, TypeError) as exc:
            self._resume(topic, message)
            raise PermanentError(
                REASON_PUBLISH_REJECTED, f"Pub/Sub rejected the message: {exc}"
            ) from exc
        except Exception as exc:
            # Timeouts, unavailability, a missing topic: nothing was lost, so let the input
            # be delivered again once the cause is fixed.
            self._resume(topic, message)
            raise TransientError(f"publish to {topic} failed: {exc}") from exc

    def _resume(self, topic: str, message: OutboundMessage) -> None:
        # After a failed publish with an ordering key the client pauses that key until resumed.
        if message.ordering_key:
            self._client.resume_publish(topic, message.ordering_key)

    def close(self) -> None:
        """Flush and stop the client's background threads."""
        self._client.stop()
