"""``dlq replay`` keeps a letter Pub/Sub forwarded without a ``dedup_key``. Found by the
simulation's operator (seeds 27184, 28472): such a message's key at ingress was its original
message id, and Pub/Sub's forwarded copy has a new one and no trace of the old - so the replay
was a new message everywhere and ran a second time a message that had run (its ack lost)."""

from __future__ import annotations

from pubsub_toolkit.message import Message
from pubsub_toolkit_cli.dead_letters.listing import REASON_FORWARDED, DeadLetter
from pubsub_toolkit_cli.dead_letters.replay import never_replayed


def _forwarded(attributes: dict[str, str]) -> DeadLetter:
    return DeadLetter(
        Message(b"payload", attributes, message_id="dl-7"),
        REASON_FORWARDED,
        "forwarded by Pub/Sub from subscription origin-push after 5 delivery attempts",
        None,
        ack_id="a",
        dead_letter_id="dl-7",
    )


def test_a_forwarded_letter_without_a_dedup_key_is_kept_with_why() -> None:
    why = never_replayed(_forwarded({}))
    assert "without a dedup_key" in why and "second time" in why


def test_a_forwarded_letter_with_its_dedup_key_is_replayed() -> None:
    assert never_replayed(_forwarded({"dedup_key": "k1"})) == ""
