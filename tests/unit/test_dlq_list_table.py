"""`dlq list`'s table, without servers: a long dedup key or FIFO group (both legal: a key up to
the attribute limit, a group up to Pub/Sub's 1,024-byte ordering key) keeps the table readable.
``--json`` carries every value whole."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.message import Message
from pubsub_toolkit_cli.cli.dead_letters import letter_json, table_rows
from pubsub_toolkit_cli.dead_letters.listing import DeadLetter

NOW = datetime(2031, 1, 1, tzinfo=UTC)


def letter(dead_letter_id: str, **attributes: str) -> DeadLetter:
    return DeadLetter(
        Message(b"x", attributes),
        "fifo_poison",
        "handler failed",
        NOW - timedelta(seconds=5),
        "ack",
        dead_letter_id,
    )


def test_long_keys_and_groups_are_shortened_in_the_table_only() -> None:
    long_key, long_group = "k" * 1000, "g" * 1024
    letters = [
        letter("1", **{attr.DEDUP_KEY: long_key, attr.FIFO_GROUP: long_group, attr.FIFO_SEQ: "3"}),
        letter("2", **{attr.DEDUP_KEY: "order-7"}),
    ]
    header, first, second = table_rows(letters, NOW)
    assert header[:4] == ("dead-letter id", "reason", "dedup_key", "group")
    assert first[2] == "k" * 39 + "…" and first[3] == "g" * 39 + "…"
    assert first[4:6] == ("3", "5s")
    assert second[2:5] == ("order-7", "-", "-")  # short values as they are
    assert letter_json(letters[0], NOW)["dedup_key"] == long_key  # --json: whole
    assert letter_json(letters[0], NOW)["group"] == long_group
