"""Acks that say when Pub/Sub did not take them (exactly-once delivery).

On a subscription with exactly-once delivery on, Pub/Sub confirms each ack: once confirmed the
message is not delivered again, and an ack it refuses (the ack id expired, the message went to
another subscriber) means it will be. google-cloud-pubsub reports that only through
``ack_with_response()``; a plain ``ack()`` drops it. Without exactly-once delivery the client
answers at once with success, so the Consumer acks this way on every subscription.

A refused ack loses nothing: the effect is recorded in the store before the ack, so the
redelivery is answered as a duplicate. It is logged at WARNING, because a steady stream of them
means handlers outlive the ack deadline.
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger(__name__)


def ack(received: Any) -> None:
    """Ack ``received`` (a google-cloud-pubsub message) and log a refusal when one comes."""
    respond = getattr(received, "ack_with_response", None)
    if respond is None:  # a message type without confirmations
        received.ack()
        return
    message_id = received.message_id

    def confirmed(future: Any) -> None:
        failure = future.exception()
        if failure is not None:
            logger.warning(
                "Pub/Sub refused the ack of %s (%s): it will deliver the message again, and "
                "the store answers that delivery as a duplicate",
                message_id,
                failure,
            )

    respond().add_done_callback(confirmed)
