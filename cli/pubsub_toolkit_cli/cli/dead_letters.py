"""`dlq list`: the dead letters as a table, or one JSON object per letter (``--json``)."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pubsub_toolkit_cli._text_table import format_table
from pubsub_toolkit_cli.cli.common import full_subscription, require_emulator_if_local

if TYPE_CHECKING:
    from pubsub_toolkit_cli.dead_letters.listing import DeadLetter


def cmd_dlq_list(args: argparse.Namespace) -> int:
    """List what waits on the dead-letter subscription (nothing is consumed)."""
    from pubsub_toolkit.clock import SYSTEM_CLOCK
    from pubsub_toolkit_cli.dead_letters.listing import list_dead_letters
    from pubsub_toolkit_cli.emulator import subscriber_client

    require_emulator_if_local()
    subscription = full_subscription(args.subscription)
    subscriber = subscriber_client()  # dead letters can be 10 MB
    try:
        letters = list_dead_letters(subscriber, subscription, limit=args.limit)
    finally:
        subscriber.close()
    now = SYSTEM_CLOCK.now()
    if args.json:
        for letter in letters:
            print(json.dumps(letter_json(letter, now)), flush=True)
        return 0
    print("\n".join(format_table(table_rows(letters, now))))
    unreadable = sum(1 for d in letters if d.unreadable)
    tail = f", {unreadable} of them unreadable (kept on the topic)" if unreadable else ""
    print(f"{len(letters)} dead letter(s){tail}", file=sys.stderr)
    return 0


# Widest dedup key or group shown in the table: both may legally be ~1 KB (an attribute value,
# an ordering key), which would pad every row to that width; --json carries them whole.
_CELL_CHARS = 40


def _cell(text: str) -> str:
    return text if len(text) <= _CELL_CHARS else text[: _CELL_CHARS - 1] + "…"


def table_rows(letters: list[DeadLetter], now: datetime) -> list[tuple[str, ...]]:
    """`dlq list`'s table: a header, then one row per letter (long keys and groups shortened)."""
    rows: list[tuple[str, ...]] = [
        ("dead-letter id", "reason", "dedup_key", "group", "seq", "age", "detail")
    ]
    for d in letters:
        at = d.dead_lettered_at
        age = "-" if at is None else f"{(now - at).total_seconds():.0f}s"
        rows.append(
            (
                d.dead_letter_id,
                d.reason,
                _cell(d.dedup_key or "-"),
                _cell(d.group or "-"),
                "-" if d.seq is None else str(d.seq),
                age,
                f"UNREADABLE, never replayed: {d.unreadable}"[:90]
                if d.unreadable
                else d.detail[:60],
            )
        )
    return rows


def letter_json(letter: DeadLetter, now: datetime) -> dict[str, Any]:
    """One dead letter as `dlq list --json` prints it (the payload is not included)."""
    at = letter.dead_lettered_at
    return {
        "dead_letter_id": letter.dead_letter_id,
        "reason": letter.reason,
        "detail": letter.detail,
        "dedup_key": letter.dedup_key,
        "group": letter.group,
        "seq": letter.seq,
        "dead_lettered_at": None if at is None else at.isoformat(),
        "age_seconds": None if at is None else round((now - at).total_seconds(), 3),
        "unreadable": letter.unreadable or None,
        "attributes": dict(letter.message.attributes),
    }
