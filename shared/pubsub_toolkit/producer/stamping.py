"""The Publisher's checks and stamps: the caller's keywords as contract attributes, every
message checked against the contract (ingress's own rules) before anything is reserved, and
which messages take a new number (:func:`number_plan`: a producer's retry keeps its own)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.attributes import FIFO_EPOCH
from pubsub_toolkit.envelope import check_produced
from pubsub_toolkit.errors import ContractViolation

# Only the Publisher may write these: a group's numbers must all come from its counter, and its
# end mark sits on a number the Publisher reserved (the keyword to pass instead of each).
_OWNED_BY_PUBLISHER = {
    attr.FIFO_GROUP: "fifo_group=",
    attr.FIFO_SEQ: "fifo_group=",
    attr.FIFO_END: "end_of_group=True",
    FIFO_EPOCH: "fifo_group=",
}


def stamp(
    attributes: Mapping[str, str] | None,
    *,
    dedup_key: str | None,
    delay: timedelta | None,
    deliver_at: datetime | None,
) -> dict[str, str]:
    """The caller's attributes plus the toolkit's, after checking they do not conflict."""
    stamped = dict(attributes or {})
    for key, value in stamped.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(f"attribute keys and values must be str, got {key!r}: {value!r}")
    for owned, keyword in _OWNED_BY_PUBLISHER.items():
        if owned in stamped:
            raise ValueError(f"attribute {owned!r} is set by the Publisher: pass {keyword}")
    if dedup_key is not None:
        if attr.DEDUP_KEY in stamped:
            raise ValueError("dedup_key given both as an argument and as an attribute")
        stamped[attr.DEDUP_KEY] = dedup_key
    if delay is not None and deliver_at is not None:
        raise ValueError("give delay or deliver_at, not both")
    if (delay is not None or deliver_at is not None) and (
        attr.DELIVER_AT in stamped or attr.DELAY_SECONDS in stamped
    ):
        raise ValueError("a due time given both as an argument and as an attribute")
    if delay is not None:
        stamped[attr.DELAY_SECONDS] = _format_delay(delay)
    if deliver_at is not None:
        if not isinstance(deliver_at, datetime):
            raise TypeError(f"deliver_at must be a datetime, got {type(deliver_at).__name__}")
        if deliver_at.tzinfo is None or deliver_at.utcoffset() is None:
            raise ValueError("deliver_at must be timezone-aware (naive datetimes are ambiguous)")
        stamped[attr.DELIVER_AT] = attr.format_time(deliver_at)
    return stamped


def _format_delay(delay: timedelta) -> str:
    """``delay`` as decimal seconds with at most microsecond digits: ``90``, ``1.5``."""
    if not isinstance(delay, timedelta):
        raise TypeError(f"delay must be a timedelta, got {type(delay).__name__}")
    if delay < timedelta(0):
        raise ValueError(f"delay must not be negative, got {delay}")
    return f"{delay.total_seconds():.6f}".rstrip("0").rstrip(".")


def check_end(end_of_group: object) -> None:
    # A bool only: a truthy string such as "false" must not end a group by accident.
    if not isinstance(end_of_group, bool):
        raise TypeError(f"end_of_group must be a bool, got {type(end_of_group).__name__}")


def check_group(group: str) -> None:
    if not isinstance(group, str) or not group.strip():
        raise ValueError(f"fifo_group must be a non-blank string, got {group!r}")
    size = len(group.encode())
    if size > attr.MAX_FIFO_GROUP_BYTES:
        raise ValueError(
            f"fifo_group is {size} bytes; the ordering key limit is {attr.MAX_FIFO_GROUP_BYTES}"
        )


# Attribute sets that passed, and the largest data they passed with. Ingress's rules read the
# data only for its size (none, or too much with the attributes), so attributes that passed
# with n bytes of data pass with any 1..n bytes: the same check again is one look-up - the
# common case, a producer's messages sharing their attributes (a FIFO group's, none at all).
# Bounded: cleared when full. (A rule that read the data's content would have to go.)
_PASSED: dict[tuple[tuple[str, str], ...], int] = {}
_PASSED_MAX = 4096


def validate(data: bytes, stamped: Mapping[str, str]) -> None:
    """Raise ValueError for a message ingress would dead-letter (same rules, same code)."""
    if not isinstance(data, bytes):
        raise TypeError(f"data must be bytes, got {type(data).__name__}")
    key = tuple(stamped.items())
    passed = _PASSED.get(key)
    if passed is not None and 0 < len(data) <= passed:
        return
    # Include a placeholder fifo_seq so the attribute-count limit accounts for the real one.
    probe = dict(stamped)
    if attr.FIFO_GROUP in probe:
        probe[attr.FIFO_SEQ] = "1"
        probe[FIFO_EPOCH] = "1"
    try:
        # The placeholder id stands in for the message_id Pub/Sub will assign.
        check_produced(data, probe, message_id="unpublished")
    except ContractViolation as exc:
        raise ValueError(f"the message breaks the attribute contract ({exc})") from exc
    if len(_PASSED) >= _PASSED_MAX:
        _PASSED.clear()
    _PASSED[key] = max(len(data), passed or 0)


@dataclass(frozen=True)
class NumberPlan:
    """Which of a group's messages take a new number (see :func:`number_plan`)."""

    # (dedup_key, content) per message, or None; None for all: no message has a dedup key.
    keys: tuple[tuple[str, str] | None, ...] | None
    known: tuple[tuple[int, int] | None, ...]  # the (epoch, number) it was given before
    first: dict[tuple[str, str], int]  # a key -> the index of its first new copy here
    copies: frozenset[int]  # indexes of later copies of a key new here (the first's number)
    fresh: int  # how many new numbers the group needs


def number_plan(
    data: Sequence[bytes],
    stamped: Sequence[Mapping[str, str]],
    *,
    numbered: Callable[[tuple[str, str]], tuple[int, int] | None],
    latest: Callable[[], int | None],
) -> NumberPlan:
    """Which of a group's messages (``data`` and their ``stamped`` attributes) need a new
    number: not one the Publisher gave their dedup key and content before (``numbered``: the
    (epoch, number) it gave them, if any) while the group's counter is in the same epoch
    (``latest``: its latest block's) - a producer's retry keeps its number, or the gate would
    run it twice; a key reused for other content is a new message - nor a copy numbered
    together with its first (a retry queued before the first was numbered takes the first's
    number too). ``numbered`` and ``latest`` are asked only when a message has a dedup key."""
    if not any(attr.DEDUP_KEY in m for m in stamped):  # nothing to look up
        return NumberPlan(None, (), {}, frozenset(), len(stamped))
    epoch = latest()
    keys = [
        (m[attr.DEDUP_KEY], attr.content_fingerprint(d, m)) if attr.DEDUP_KEY in m else None
        for d, m in zip(data, stamped, strict=True)
    ]
    known = [numbered(k) if k else None for k in keys]
    known = [n if n is not None and n[0] == epoch else None for n in known]
    first: dict[tuple[str, str], int] = {}  # key -> index of its first new copy here
    for index, (key, number) in enumerate(zip(keys, known, strict=True)):
        if key is not None and number is None:
            first.setdefault(key, index)
    copies = frozenset(i for i, k in enumerate(keys) if k is not None and first.get(k, i) != i)
    fresh = sum(1 for i, n in enumerate(known) if n is None and i not in copies)
    return NumberPlan(tuple(keys), tuple(known), first, copies, fresh)
