"""Clients for the local emulators whose gRPC channels carry Pub/Sub's 10 MB messages.

Pub/Sub accepts messages up to 10 MB, but against ``PUBSUB_EMULATOR_HOST`` google-cloud-pubsub
opens a plain ``grpc.insecure_channel(host)``, which keeps gRPC's default 4 MB *receive* limit
(against Google Cloud the same library sets no limit). A pull that returns a bigger message -
or several that add up to more - then fails with ``ResourceExhausted ... 4194304``: `dlq list`
and `status` crashed and a streaming subscriber silently stalled behind such a message.

:func:`subscriber_client` and :func:`publisher_client` build the official clients on a channel
without those limits when the emulator is configured, and the plain clients otherwise, so every
caller can use them unconditionally.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import grpc
    from google.cloud import pubsub_v1  # type: ignore[attr-defined]

# The options google-cloud-pubsub itself uses for Google Cloud's endpoint (-1: no limit): the
# 10 MB cap is Pub/Sub's to enforce, and a pull response may carry several large messages.
CHANNEL_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.max_send_message_length", -1),
    ("grpc.max_receive_message_length", -1),
)


def emulator_channel(host: str) -> grpc.Channel:
    """A plaintext channel to an emulator at ``host`` (``host:port``) without size limits."""
    import grpc

    return grpc.insecure_channel(host, options=list(CHANNEL_OPTIONS))


def subscriber_client() -> pubsub_v1.SubscriberClient:
    """A SubscriberClient; against PUBSUB_EMULATOR_HOST one that receives 10 MB messages."""
    from google.cloud import pubsub_v1  # type: ignore[attr-defined]

    host = os.environ.get("PUBSUB_EMULATOR_HOST", "").strip()
    if not host:
        return pubsub_v1.SubscriberClient()
    from google.pubsub_v1.services.subscriber.transports import SubscriberGrpcTransport

    transport = SubscriberGrpcTransport(channel=emulator_channel(host))
    return pubsub_v1.SubscriberClient(transport=transport)


def publisher_client(**kwargs: Any) -> pubsub_v1.PublisherClient:
    """A PublisherClient (``kwargs`` such as ``publisher_options`` pass through); against
    PUBSUB_EMULATOR_HOST one on an unlimited channel like :func:`subscriber_client`."""
    from google.cloud import pubsub_v1  # type: ignore[attr-defined]

    host = os.environ.get("PUBSUB_EMULATOR_HOST", "").strip()
    if not host:
        return pubsub_v1.PublisherClient(**kwargs)
    from google.pubsub_v1.services.publisher.transports import PublisherGrpcTransport

    transport = PublisherGrpcTransport(channel=emulator_channel(host))
    return pubsub_v1.PublisherClient(transport=transport, **kwargs)
