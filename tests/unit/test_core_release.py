"""The relay's release, its last attempts and cancel, as tables: each row inputs -> verdict.

:mod:`pubsub_toolkit.core.release`'s and :mod:`pubsub_toolkit.core.handover`'s protocols are
driven by a script of replies (the effects they yield are recorded and compared too);
:mod:`pubsub_toolkit.core.fate`'s functions take values. Every branch the relay, ingress's
release, ``cancel`` and the last attempt had in between their I/O is a row.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.core import fate, handover, release
from pubsub_toolkit.core.fate import CancelVerdict, Claimed, Processed, Replay
from pubsub_toolkit.core.handover import (
    CONTINUE_TRIES,
    HANDOVER_GRACE,
    Created,
    CreateTask,
    HandOver,
    HandOverNow,
    InDoubt,
    LastEnd,
    OnFailure,
    Refused,
)
from pubsub_toolkit.core.release import (
    MAX_WAIT,
    CheckCancelled,
    Filler,
    ReadClock,
    Release,
    ReleaseOnce,
    ReleaseVerdict,
    Wait,
)
from pubsub_toolkit.errors import StoreUnavailableError, TransientError
from pubsub_toolkit.message import OutboundMessage
from pubsub_toolkit.stores.dedup.base import Claim, ClaimStatus, DedupRecord, RecordState

DUE = datetime(2026, 1, 1, tzinfo=UTC)


def run(protocol: Generator[Any, Any, Any], replies: Sequence[Any]) -> tuple[list[Any], Any]:
    """Drive ``protocol`` with ``replies`` in order: the effects it yielded, and its verdict.
    It must ask for exactly as many effects as there are replies."""
    effects: list[Any] = []
    try:
        effects.append(next(protocol))
        for reply in replies:
            effects.append(protocol.send(reply))
    except StopIteration as stop:
        assert len(effects) == len(replies), f"asked {effects} for replies {replies}"
        return effects, stop.value
    raise AssertionError(f"the protocol asked for more than {replies}: {effects}")


def released(message_id: str, seq: str | None = None) -> str:
    return json.dumps({"id": message_id, "seq": seq})


CHECK, CLOCK, ONCE = CheckCancelled(), ReadClock(), ReleaseOnce()
PUB, DUP, MIS = Claimed.PROCESSED, Claimed.DUPLICATE, Claimed.MISMATCH
# due time (None: ingress's release), the script of (effect, reply) -> the verdict
RELEASES: list[tuple[str, datetime | None, list[tuple[Any, Any]], ReleaseVerdict]] = [
    ("cancelled before the claim", DUE, [(CHECK, True)], ReleaseVerdict(Release.CANCELLED)),
    (
        "far from due: the next hop",
        DUE,
        [(CHECK, False), (CLOCK, DUE - MAX_WAIT - timedelta(microseconds=1))],
        ReleaseVerdict(Release.HOP),
    ),
    (
        "a moment early: waits it out, then publishes on time",
        DUE,
        [
            (CHECK, False),
            (CLOCK, DUE - timedelta(seconds=1.5)),
            (Wait(1.5), None),
            (ONCE, Processed(PUB, released("m1"))),
            (CLOCK, DUE),
        ],
        ReleaseVerdict(Release.PUBLISHED, "m1", 0.0),
    ),
    (
        "early by MAX_WAIT exactly: still waits",
        DUE,
        [
            (CHECK, False),
            (CLOCK, DUE - MAX_WAIT),
            (Wait(MAX_WAIT.total_seconds()), None),
            (ONCE, Processed(PUB, released("m1"))),
            (CLOCK, DUE),
        ],
        ReleaseVerdict(Release.PUBLISHED, "m1", 0.0),
    ),
    (
        "late: published, how late",
        DUE,
        [
            (CHECK, False),
            (CLOCK, DUE + timedelta(seconds=3)),
            (ONCE, Processed(PUB, released("m1", "4"))),
            (CLOCK, DUE + timedelta(seconds=5)),
        ],
        ReleaseVerdict(Release.PUBLISHED, "m1", 5.0),
    ),
    (
        "the clock behind after the publish: never negative",
        DUE,
        [
            (CHECK, False),
            (CLOCK, DUE),
            (ONCE, Processed(PUB, released("m1"))),
            (CLOCK, DUE - timedelta(seconds=1)),
        ],
        ReleaseVerdict(Release.PUBLISHED, "m1", 0.0),
    ),
    (
        "released before: the first release's id",
        DUE,
        [(CHECK, False), (CLOCK, DUE), (ONCE, Processed(DUP, released("m0")))],
        ReleaseVerdict(Release.DUPLICATE, "m0"),
    ),
    (
        "released before by an older version (its id as the result)",
        DUE,
        [(CHECK, False), (CLOCK, DUE), (ONCE, Processed(DUP, "m0"))],
        ReleaseVerdict(Release.DUPLICATE, "m0"),
    ),
    (
        "a cancel between the check and the claim wins",
        DUE,
        [(CHECK, False), (CLOCK, DUE), (ONCE, Processed(MIS)), (CHECK, True)],
        ReleaseVerdict(Release.CANCELLED, after_claim=True),
    ),
    (
        "other content: a mismatch",
        DUE,
        [(CHECK, False), (CLOCK, DUE), (ONCE, Processed(MIS)), (CHECK, False)],
        ReleaseVerdict(Release.MISMATCH),
    ),
    ("ingress: cancelled", None, [(CHECK, True)], ReleaseVerdict(Release.CANCELLED)),
    (
        "ingress: published, no clock",
        None,
        [(CHECK, False), (ONCE, Processed(PUB, released("m1")))],
        ReleaseVerdict(Release.PUBLISHED, "m1"),
    ),
    (
        "ingress: released before",
        None,
        [(CHECK, False), (ONCE, Processed(DUP, released("m0")))],
        ReleaseVerdict(Release.DUPLICATE, "m0"),
    ),
    (
        "ingress: a cancel between the check and the claim",
        None,
        [(CHECK, False), (ONCE, Processed(MIS)), (CHECK, True)],
        ReleaseVerdict(Release.CANCELLED, after_claim=True),
    ),
    (
        "ingress: other content",
        None,
        [(CHECK, False), (ONCE, Processed(MIS)), (CHECK, False)],
        ReleaseVerdict(Release.MISMATCH),
    ),
]


@pytest.mark.parametrize(
    ("due", "script", "verdict"), [r[1:] for r in RELEASES], ids=[r[0] for r in RELEASES]
)
def test_release(
    due: datetime | None, script: list[tuple[Any, Any]], verdict: ReleaseVerdict
) -> None:
    effects, got = run(release.release(due), [reply for _, reply in script])
    assert effects == [effect for effect, _ in script]
    assert got == verdict


def record(state: RecordState, fingerprint: str = "fp") -> DedupRecord:
    return DedupRecord("relay", "k", state, 1, fingerprint, None, DUE + timedelta(days=366))


DONE, PENDING = RecordState.DONE, RecordState.PENDING
TOMB = record(DONE, fate.CANCELLED)
# what cancel's claim found -> the verdict
CANCELS = [
    (
        "a free key: the tombstone is ours",
        Claim(ClaimStatus.ACQUIRED, 1, record(PENDING, fate.CANCELLED)),
        CancelVerdict.TOMBSTONE,
    ),
    (
        "a dead cancel's claim taken over",
        Claim(ClaimStatus.TAKEN_OVER, 2, record(PENDING, fate.CANCELLED)),
        CancelVerdict.TOMBSTONE,
    ),
    (
        "another cancel half-way",
        Claim(ClaimStatus.IN_PROGRESS, 1, record(PENDING, fate.CANCELLED)),
        CancelVerdict.IN_PROGRESS,
    ),
    (
        "a release half-way",
        Claim(ClaimStatus.IN_PROGRESS, 1, record(PENDING)),
        CancelVerdict.IN_PROGRESS,
    ),
    (
        "a finished release: too late",
        Claim(ClaimStatus.MISMATCH, 1, record(DONE)),
        CancelVerdict.DELIVERED,
    ),
    (
        "a release claimed, never finished",
        Claim(ClaimStatus.MISMATCH, 1, record(PENDING)),
        CancelVerdict.UNFINISHED,
    ),
    ("a mismatch without a record", Claim(ClaimStatus.MISMATCH, 1, None), CancelVerdict.UNFINISHED),
    ("cancelled before", Claim(ClaimStatus.DONE, 1, TOMB), CancelVerdict.CANCELLED),
]


@pytest.mark.parametrize(
    ("claim", "verdict"), [r[1:] for r in CANCELS], ids=[r[0] for r in CANCELS]
)
def test_cancel(claim: Claim, verdict: CancelVerdict) -> None:
    got = fate.cancel_verdict(claim)
    assert got is verdict
    assert got.delivered is (verdict is CancelVerdict.DELIVERED)


# a record -> tombstone, finished, released
RECORDS = [
    ("none", None, (False, False, False)),
    ("a pending release", record(PENDING), (False, False, False)),
    ("a finished release", record(DONE), (False, True, True)),
    ("a pending tombstone", record(PENDING, fate.CANCELLED), (True, False, False)),
    ("a tombstone", TOMB, (True, True, False)),
]


@pytest.mark.parametrize(
    ("found", "expected"), [r[1:] for r in RECORDS], ids=[r[0] for r in RECORDS]
)
def test_what_a_fate_record_says(
    found: DedupRecord | None, expected: tuple[bool, bool, bool]
) -> None:
    assert (fate.is_tombstone(found), fate.is_finished(found), fate.is_released(found)) == expected


RETRY = {attr.RETRY_CONSUMER: "c", attr.RETRY_ATTEMPT: "2"}
# attributes -> fate key, the replayed original's key
KEYS = [
    ("a message", {}, "k", None),
    ("a DLQ replay", {attr.REPLAY_ID: "r"}, "k#replay:r", "k"),
    ("a consumer's retry", RETRY, "k#retry:c:2", None),
    ("a retry of a replay", {attr.REPLAY_ID: "r"} | RETRY, "k#replay:r#retry:c:2", "k"),
    ("half a retry's marks", {attr.RETRY_CONSUMER: "c"}, "k", None),
    ("an empty replay id", {attr.REPLAY_ID: ""}, "k", None),
]


@pytest.mark.parametrize(
    ("attrs", "key", "original"), [r[1:] for r in KEYS], ids=[r[0] for r in KEYS]
)
def test_fate_keys(attrs: dict[str, str], key: str, original: str | None) -> None:
    assert fate.fate_key("k", attrs) == key
    assert fate.replayed_key("k", attrs) == original
    expected = (key,) if original is None else (key, original)
    assert fate.cancel_keys(key, original) == expected  # a replay: its original's tombstone too


def test_the_fate_record_outlives_the_longest_delay() -> None:
    assert fate.fate_ttl(timedelta(days=1)) == fate.TOMBSTONE_TTL == timedelta(days=366)
    assert fate.fate_ttl(timedelta(days=400)) == timedelta(days=400)


# the result -> its FIFO number, its message id
RESULTS = [
    ("a FIFO release", released("m1", "4"), "4", "m1"),
    ("a plain release", released("m1"), None, "m1"),
    ("an older version's id", "m1", None, "m1"),
    ("no result", None, None, ""),
    ("a number written as an int", json.dumps({"id": "m1", "seq": 4}), "4", "m1"),
]


@pytest.mark.parametrize(
    ("result", "seq", "message_id"), [r[1:] for r in RESULTS], ids=[r[0] for r in RESULTS]
)
def test_a_release_records_result(result: str | None, seq: str | None, message_id: str) -> None:
    assert (fate.released_seq(result), fate.released_message_id(result)) == (seq, message_id)


# this copy's number, what the claim did -> the second record (None: none)
RENUMBERED = [
    ("released now", "5", Processed(PUB, released("m1", "5")), None),
    ("a duplicate at the same number", "5", Processed(DUP, released("m1", "5")), None),
    ("a duplicate at another number", "7", Processed(DUP, released("m1", "5")), "k#fifo_seq:7"),
    ("a duplicate of a record without number", "7", Processed(DUP, "m1"), None),
    ("not FIFO", None, Processed(DUP, released("m1", "5")), None),
    ("a mismatch", "7", Processed(MIS, released("m1", "5")), None),
]


@pytest.mark.parametrize(
    ("seq", "processed", "key"), [r[1:] for r in RENUMBERED], ids=[r[0] for r in RENUMBERED]
)
def test_a_renumbered_copy_is_released_once_per_number(
    seq: str | None, processed: Processed, key: str | None
) -> None:
    assert fate.renumbered_release_key("k", seq, processed) == key
    assert fate.released_result("m1", seq) == released("m1", seq)


# released while holding the original's record, what the original's claim did, a tombstone there
REPLAYS = [
    ("the original never went out", True, PUB, None, Replay.RELEASED),
    ("the original cancelled", False, MIS, True, Replay.CANCELLED),
    ("the original released by other content", False, MIS, False, Replay.OWN),
    ("the original released before", False, DUP, None, Replay.OWN),
]


@pytest.mark.parametrize(
    ("inside", "original", "cancelled", "verdict"),
    [r[1:] for r in REPLAYS],
    ids=[r[0] for r in REPLAYS],
)
def test_a_replays_release(
    inside: bool, original: Claimed, cancelled: bool | None, verdict: Replay
) -> None:
    assert fate.replay_goes_on(inside, original, cancelled) is verdict


# the last attempt, the last but one -> the path of a transient failure
FAILURES = [
    ("any attempt", False, False, OnFailure.RETRY),
    ("the last but one", False, True, OnFailure.HAND_OVER_EARLY),
    ("the last", True, False, OnFailure.LAST_ATTEMPT),
]


@pytest.mark.parametrize(
    ("last", "last_but_one", "path"), [r[1:] for r in FAILURES], ids=[r[0] for r in FAILURES]
)
def test_the_path_of_a_transient_failure(last: bool, last_but_one: bool, path: OnFailure) -> None:
    assert handover.on_failure(last=last, last_but_one=last_but_one) is path


DAY = timedelta(days=1)
LIMIT = 7 * DAY
OK = {"has_scheduler": True, "hop": 3, "max_hop": 999, "overdue": DAY, "limit": LIMIT}
# arguments (over OK), final, the creates' replies -> handed, why not (a prefix), error
HAND_OVERS: list[tuple[str, dict[str, Any], bool, list[Any], HandOver, str, str]] = [
    ("no scheduler", {"has_scheduler": False}, True, [], HandOver.NOT_MADE, "no scheduler", ""),
    (
        "past the last hop",
        {"hop": 1000},
        True,
        [],
        HandOver.NOT_MADE,
        "its hop 999 is the last",
        "",
    ),
    ("the last hop", {"hop": 999}, True, [Created()], HandOver.MADE, "", ""),
    (
        "past the limit, the last but one",
        {"overdue": LIMIT},
        False,
        [],
        HandOver.NOT_MADE,
        "it is 7.0 days past",
        "",
    ),
    (
        "past the limit, the last: the grace",
        {"overdue": LIMIT},
        True,
        [Created()],
        HandOver.MADE,
        "",
        "",
    ),
    (
        "past the grace",
        {"overdue": LIMIT + HANDOVER_GRACE},
        True,
        [],
        HandOver.NOT_MADE,
        "it is 7.1 days past",
        "",
    ),
    ("made", {}, True, [Created()], HandOver.MADE, "", ""),
    ("made at the second try", {}, False, [InDoubt("timeout"), Created()], HandOver.MADE, "", ""),
    (
        "refused",
        {},
        True,
        [Refused("400")],
        HandOver.NOT_MADE,
        "Cloud Tasks refused its next task (400)",
        "400",
    ),
    (
        "in doubt, then refused",
        {},
        True,
        [InDoubt("timeout"), Refused("400")],
        HandOver.UNCONFIRMED,
        "",
        "timeout",
    ),
    (
        "in doubt every try",
        {},
        False,
        [InDoubt("a"), InDoubt("b"), InDoubt("c")],
        HandOver.UNCONFIRMED,
        "",
        "c",
    ),
    (
        "in doubt without a word",
        {},
        True,
        [InDoubt("")] * CONTINUE_TRIES,
        HandOver.UNCONFIRMED,
        "",
        "",
    ),
]


@pytest.mark.parametrize(
    ("changes", "final", "replies", "handed", "why_not", "error"),
    [r[1:] for r in HAND_OVERS],
    ids=[r[0] for r in HAND_OVERS],
)
def test_hand_over(
    changes: dict[str, Any],
    final: bool,
    replies: list[Any],
    handed: HandOver,
    why_not: str,
    error: str,
) -> None:
    arguments = OK | changes
    effects, verdict = run(handover.hand_over(final=final, **arguments), replies)
    assert effects == [CreateTask(arguments["hop"])] * len(replies)
    assert (verdict.handed, verdict.hop, verdict.error) == (handed, arguments["hop"], error)
    assert verdict.tried is bool(replies)
    assert verdict.why_not.startswith(why_not) and bool(verdict.why_not) is bool(why_not)


# final, parsed, published here, the hand-over (None: not asked) -> the end
LAST_ATTEMPTS: list[tuple[str, bool, bool, bool, HandOver | None, LastEnd]] = [
    ("last: a body that is no message", True, False, False, None, LastEnd.DEAD_LETTER_BODY),
    ("last: published here", True, True, True, None, LastEnd.PUBLISHED),
    ("last: handed over", True, True, False, HandOver.MADE, LastEnd.RESCHEDULED),
    (
        "last: in doubt, to the operator",
        True,
        True,
        False,
        HandOver.UNCONFIRMED,
        LastEnd.TO_OPERATOR,
    ),
    ("last: no task", True, True, False, HandOver.NOT_MADE, LastEnd.DEAD_LETTER),
    ("last but one: a body that is no message", False, False, False, None, LastEnd.RETRY),
    ("last but one: published here", False, True, True, None, LastEnd.RETRY),
    ("last but one: handed over", False, True, False, HandOver.MADE, LastEnd.RESCHEDULED),
    ("last but one: in doubt", False, True, False, HandOver.UNCONFIRMED, LastEnd.RETRY),
    ("last but one: no task", False, True, False, HandOver.NOT_MADE, LastEnd.RETRY),
]


@pytest.mark.parametrize(
    ("final", "parsed", "published", "handed", "end"),
    [r[1:] for r in LAST_ATTEMPTS],
    ids=[r[0] for r in LAST_ATTEMPTS],
)
def test_the_end_of_a_failed_attempt(
    final: bool, parsed: bool, published: bool, handed: HandOver | None, end: LastEnd
) -> None:
    replies = [] if handed is None else [handed]
    effects, got = run(
        handover.last_attempt(final=final, parsed=parsed, published_here=published), replies
    )
    assert effects == [HandOverNow()] * len(replies)
    assert got is end


@pytest.mark.parametrize(
    ("failure", "reason"),
    [
        (StoreUnavailableError("down"), handover.REASON_STORE_UNAVAILABLE),
        (TransientError("topic"), handover.REASON_RETRIES_EXHAUSTED),
    ],
)
def test_the_reason_a_message_is_given_up(failure: Exception, reason: str) -> None:
    assert handover.give_up_reason(failure) == reason


FIFO = {attr.FIFO_GROUP: "g", attr.FIFO_SEQ: "4"}
# attributes -> the filler for its number (why "w"), the ALERT's fields
FILLERS = [
    ("not FIFO", {}, None, {}),
    ("FIFO", FIFO, Filler("g", "4", "k", "w"), FIFO),
    ("FIFO in an epoch", FIFO | {attr.FIFO_EPOCH: "e"}, Filler("g", "4", "k", "w", "e"), FIFO),
    ("a group without a number", {attr.FIFO_GROUP: "g"}, None, {attr.FIFO_GROUP: "g"}),
    (
        "an empty group",
        {attr.FIFO_GROUP: "", attr.FIFO_SEQ: "4"},
        None,
        {attr.FIFO_GROUP: "", attr.FIFO_SEQ: "4"},
    ),
]


@pytest.mark.parametrize(
    ("attrs", "filler", "fields"), [r[1:] for r in FILLERS], ids=[r[0] for r in FILLERS]
)
def test_a_relay_filler(
    attrs: dict[str, str], filler: Filler | None, fields: dict[str, str]
) -> None:
    assert release.filler_for(attrs, "k", "w") == filler
    assert release.fifo_fields(attrs) == fields


# attributes, hop -> the hop's once-only key
HOPS = [
    ("a message", {}, 2, "k#2"),
    ("a FIFO number", {attr.FIFO_SEQ: "4"}, 2, "k#4#2"),
    ("a replay", {attr.REPLAY_ID: "r"}, 1, "k#replay:r#1"),
]


@pytest.mark.parametrize(("attrs", "hop", "key"), [r[1:] for r in HOPS], ids=[r[0] for r in HOPS])
def test_a_hops_key(attrs: dict[str, str], hop: int, key: str) -> None:
    assert release.hop_key("k", attrs, hop) == key


def test_the_relays_once_only_keys_and_fingerprint() -> None:
    stamped = OutboundMessage(b"x", {attr.CONTENT_SHA256: "stamped"})
    unstamped = OutboundMessage(b"x", {"a": "1"})
    assert release.release_fingerprint(stamped) == "stamped"
    assert release.release_fingerprint(unstamped) == attr.content_fingerprint(b"x", {"a": "1"})
    assert (
        release.rejection_key(b"body")
        == release.rejection_key(b"body")
        != release.rejection_key(b"other")
    )
    assert release.mismatch_key("k", "fp") == "mismatch:k:fp"
    assert (
        release.mismatch_detail("k") == "dedup_key 'k' was released before with different content"
    )
