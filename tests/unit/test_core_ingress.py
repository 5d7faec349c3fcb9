"""Ingress's decisions as tables, each row inputs -> verdict (:mod:`pubsub_toolkit.core.ingress`).

Every branch the routing had inside ``Ingress`` (the claim's three ends, the four routes, a
renumbered retry's filler or second routing, the fillers of a dead-lettered or cancelled FIFO
number, a refused delivery's once-only dead letter) is one row here, with no store, sink or
clock: the functions take values and return frozen verdicts.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.core import ingress as core
from pubsub_toolkit.core.fate import Claimed
from pubsub_toolkit.core.ingress import IngressOutcome, Route, Routed
from pubsub_toolkit.core.release import Filler
from pubsub_toolkit.envelope import Envelope, parse_envelope
from pubsub_toolkit.message import Message
from pubsub_toolkit.stores.fifo_state.base import KEY_WINDOW

NOW = datetime(2026, 1, 1, tzinfo=UTC)
P, S, D, X, C = (
    IngressOutcome.PUBLISHED,
    IngressOutcome.SCHEDULED,
    IngressOutcome.DEAD_LETTERED,
    IngressOutcome.DUPLICATE,
    IngressOutcome.CANCELLED,
)


def envelope(
    seq: int | None = None, *, group: str | None = "g", epoch: str | None = None
) -> Envelope:
    attrs = {attr.DEDUP_KEY: "k"}
    if seq is not None and group is not None:
        attrs |= {attr.FIFO_GROUP: group, attr.FIFO_SEQ: str(seq)}
    if epoch is not None:
        attrs[attr.FIFO_EPOCH] = epoch
    return parse_envelope(Message(b"data", attrs, message_id="m1"), now=NOW)


def test_a_replay_is_claimed_under_its_own_key() -> None:
    assert core.claim_key("k", None) == "k"
    assert core.claim_key("k", "") == "k"
    assert core.claim_key("k", "r1") == "k#replay:r1"


# claimed, the record's result -> the answer, and whether a dead letter / a first copy follows
AFTER_CLAIM = [
    ("ran the route: published", Claimed.PROCESSED, Routed(P, "m9", 3).to_result(), P, "m9"),
    ("ran the route: scheduled", Claimed.PROCESSED, Routed(S, "task").to_result(), S, "task"),
    (
        "ran the route: refused",
        Claimed.PROCESSED,
        Routed(D, "too_large").to_result(),
        D,
        "too_large",
    ),
    (
        "a duplicate: the first copy's detail",
        Claimed.DUPLICATE,
        Routed(P, "m1", 1).to_result(),
        X,
        "m1",
    ),
    ("a duplicate of an older record", Claimed.DUPLICATE, "scheduled:task-7", X, "task-7"),
    ("a duplicate of a record without result", Claimed.DUPLICATE, None, X, ""),
    ("other content", Claimed.MISMATCH, None, D, attr.REASON_FINGERPRINT_MISMATCH),
]


@pytest.mark.parametrize(
    ("claimed", "result", "outcome", "detail"),
    [r[1:] for r in AFTER_CLAIM],
    ids=[r[0] for r in AFTER_CLAIM],
)
def test_after_the_claim(
    claimed: Claimed, result: str | None, outcome: IngressOutcome, detail: str
) -> None:
    env = envelope(2)
    settled = core.after_claim(claimed, result, env)
    assert (settled.result.outcome, settled.result.dedup_key, settled.result.detail) == (
        outcome,
        "k",
        detail,
    )
    if claimed is Claimed.MISMATCH:
        letter = settled.dead_letter
        assert letter is not None and settled.first is None
        assert (letter.reason, letter.dedup_key, letter.fill) == (
            attr.REASON_FINGERPRINT_MISMATCH,
            "k",
            False,
        )
        assert letter.once_key == f"mismatch:k:{env.fingerprint}"  # once per (key, content)
        assert letter.fingerprint == env.fingerprint
        assert "first seen with different content" in letter.detail
    elif claimed is Claimed.DUPLICATE:
        assert settled.dead_letter is None and settled.first == Routed.from_result(result)
    else:
        assert settled.dead_letter is None and settled.first is None


LATER, EARLIER = NOW + timedelta(microseconds=1), NOW - timedelta(days=1)
ROUTES = [
    ("no due time: now", None, True, Route.PUBLISH),
    ("no due time, no scheduler: now", None, False, Route.PUBLISH),
    ("due later: scheduled", LATER, True, Route.SCHEDULE),
    ("due later, no scheduler: never early", LATER, False, Route.UNDELIVERABLE),
    ("due now: released", NOW, True, Route.RELEASE),
    ("due before: released", EARLIER, False, Route.RELEASE),
]


@pytest.mark.parametrize(
    ("due", "can_schedule", "expected"), [r[1:] for r in ROUTES], ids=[r[0] for r in ROUTES]
)
def test_route(due: datetime | None, can_schedule: bool, expected: Route) -> None:
    assert core.route(due, NOW, can_schedule=can_schedule) is expected


def test_an_undeliverable_message_says_when_it_was_due() -> None:
    assert core.undeliverable_detail(LATER) == (
        f"message is due at {attr.format_time(LATER)} but no scheduler is configured"
    )


FAR = KEY_WINDOW + 10
# this copy's number, its first copy -> None (nothing to fill), or (filler's why | None: route
# this copy as well, first_seq_unknown)
RENUMBERED: list[tuple[str, int | None, Routed, tuple[str | None, bool] | None]] = [
    ("not FIFO", None, Routed(P, "m1", 5), None),
    ("the same number: a plain redelivery", 5, Routed(P, "m1", 5), None),
    (
        "first at a lower number: a filler naming it",
        7,
        Routed(P, "m1", 5),
        ("renumbered_copy_of:5", False),
    ),
    (
        "first scheduled at a lower number: a filler",
        7,
        Routed(S, "t", 5),
        ("renumbered_copy_of:5", False),
    ),
    (
        "first far lower: a filler all the same",
        5 + FAR,
        Routed(P, "m1", 5),
        ("renumbered_copy_of:5", False),
    ),
    ("first higher, within the window: routed too", 5, Routed(P, "m1", 7), (None, False)),
    (
        "first higher by the window's last: routed too",
        5,
        Routed(P, "m1", 4 + KEY_WINDOW),
        (None, False),
    ),
    (
        "first higher by the window: a filler",
        5,
        Routed(P, "m1", 5 + KEY_WINDOW),
        (f"renumbered_copy_of:{5 + KEY_WINDOW}", False),
    ),
    (
        "first dead-lettered: a filler saying so",
        7,
        Routed(D, "too_large", 5),
        ("dead_lettered:too_large", False),
    ),
    (
        "first dead-lettered, number unknown",
        7,
        Routed(D, "too_large"),
        ("dead_lettered:too_large", False),
    ),
    ("first cancelled: a filler saying so", 7, Routed(C, "", 5), ("cancelled", False)),
    ("first recorded without its number: routed, logged", 7, Routed(P, "m1"), (None, True)),
]


@pytest.mark.parametrize(
    ("seq", "first", "expected"), [r[1:] for r in RENUMBERED], ids=[r[0] for r in RENUMBERED]
)
def test_a_renumbered_retry(
    seq: int | None, first: Routed, expected: tuple[str | None, bool] | None
) -> None:
    verdict = core.renumbered(envelope(seq, epoch="e1"), "k#replay:r", first)
    if expected is None:
        assert verdict is None
        return
    assert verdict is not None and seq is not None
    why, unknown = expected
    assert verdict.once_key == f"k#replay:r#fifo_seq:{seq}"  # once per number
    assert verdict.first_seq_unknown is unknown
    assert verdict.filler == (None if why is None else Filler("g", seq, "k", why, "e1"))


def test_a_filler_is_the_marker_message_of_its_number() -> None:
    message = Filler("g", 7, "k", "cancelled", "e1").message()
    assert message.data == b"" and message.ordering_key == "g"
    assert dict(message.attributes) == {
        attr.FIFO_GROUP: "g",
        attr.FIFO_SEQ: "7",
        attr.DEDUP_KEY: "k",
        attr.FIFO_FILLER: "cancelled",
        attr.FIFO_EPOCH: "e1",
    }


FIFO = {attr.FIFO_GROUP: "g", attr.FIFO_SEQ: "4"}
# attributes, the dead letter's key -> the filler (None: no number to fill)
DEAD_LETTER_FILLERS = [
    ("not FIFO", {attr.DEDUP_KEY: "k"}, "k", None),
    ("FIFO", FIFO, "k", Filler("g", 4, "k", "dead_lettered:r", None)),
    (
        "FIFO without a key: its message id",
        FIFO,
        None,
        Filler("g", 4, "m1", "dead_lettered:r", None),
    ),
    (
        "in an epoch",
        FIFO | {attr.FIFO_EPOCH: "e"},
        "k",
        Filler("g", 4, "k", "dead_lettered:r", "e"),
    ),
    ("an invalid number", {attr.FIFO_GROUP: "g", attr.FIFO_SEQ: "04"}, "k", None),
    ("a group without a number", {attr.FIFO_GROUP: "g"}, "k", None),
    ("a filler itself", FIFO | {attr.FIFO_FILLER: "cancelled"}, "k", None),
]


@pytest.mark.parametrize(
    ("attrs", "key", "expected"),
    [r[1:] for r in DEAD_LETTER_FILLERS],
    ids=[r[0] for r in DEAD_LETTER_FILLERS],
)
def test_a_dead_lettered_number_is_filled(
    attrs: dict[str, str], key: str | None, expected: Filler | None
) -> None:
    assert core.dead_letter_filler(Message(b"x", attrs, message_id="m1"), "r", key) == expected


def test_a_cancelled_number_is_filled() -> None:
    assert core.cancelled_filler(envelope(None)) is None
    assert core.cancelled_filler(envelope(3, epoch="e")) == Filler("g", 3, "k", "cancelled", "e")


# attributes, message id -> the dead letter's key, and the once-only key's form
REJECTIONS = [
    ("a producer's key", {attr.DEDUP_KEY: "k"}, "m1", "k", "key:"),
    ("no key: the message id", {}, "m1", "m1", "m1:"),
    ("neither", {}, "", None, ":"),
]


@pytest.mark.parametrize(
    ("attrs", "message_id", "key", "prefix"),
    [r[1:] for r in REJECTIONS],
    ids=[r[0] for r in REJECTIONS],
)
def test_a_refused_delivery_is_dead_lettered_once(
    attrs: dict[str, str], message_id: str, key: str | None, prefix: str
) -> None:
    message = Message(b"x", attrs, message_id=message_id)
    letter = core.rejection(message, "too_large", "why")
    fingerprint = attr.content_fingerprint(message.data, message.attributes)
    assert (letter.reason, letter.detail, letter.dedup_key, letter.fill) == (
        "too_large",
        "why",
        key,
        True,
    )
    assert letter.fingerprint == fingerprint
    assert letter.once_key.startswith(prefix) and letter.once_key.endswith(f":{fingerprint}")


def test_which_refused_deliveries_are_one() -> None:
    def key(attrs: dict[str, str], message_id: str = "m1") -> str:
        message = Message(b"x", attrs, message_id=message_id)
        return core.rejection_key(message, attr.content_fingerprint(b"x", attrs))

    base = {attr.DEDUP_KEY: "k", attr.FIFO_SEQ: "1"}
    assert key(base, "m1") == key(base, "m2")  # a producer's retry: a new id, the same message
    assert key(base) != key(base | {attr.REPLAY_ID: "r"})  # a replay leaves a new letter
    assert key(base) != key(base | {attr.FIFO_SEQ: "2"})
    assert key({}, "m1") != key({}, "m2")  # without a key: each message id


ROUTED = [
    ("published", Routed(P, "m1", 3)),
    ("scheduled, no number", Routed(S, "task")),
    ("dead-lettered", Routed(D, "reason", 0)),
]


@pytest.mark.parametrize("routed", [r[1] for r in ROUTED], ids=[r[0] for r in ROUTED])
def test_a_routing_is_stored_and_read_back(routed: Routed) -> None:
    assert Routed.from_result(routed.to_result()) == routed


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        ("published:m1", Routed(P, "m1")),
        ("dead_lettered:r", Routed(D, "r")),
        (None, Routed(P)),
        ("", Routed(P)),
    ],
)
def test_an_older_versions_routing_is_read(result: str | None, expected: Routed) -> None:
    assert Routed.from_result(result) == expected
