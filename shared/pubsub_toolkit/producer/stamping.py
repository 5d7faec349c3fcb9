"""The Publisher's checks and stamps: the caller's keywords as contract attributes, and every
message checked against the contract (ingress's own rules) before anything is reserved."""

from __future__ import annotations

from collections.abc import Mapping
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
