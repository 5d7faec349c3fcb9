"""Small protobuf helpers: copies, field-mask paths, and pages of name-ordered listings."""

from __future__ import annotations

import base64
import binascii
import bisect

from .errors import invalid_argument
from .policy import Pb


def copy_pb(cls: type[Pb], pb: Pb) -> Pb:
    """A deep copy of ``pb`` as a new ``cls`` message."""
    out = cls()
    out.CopyFrom(pb)
    return out


def copy_path(source: Pb, target: Pb, path: str) -> None:
    """Copy one field-mask path from ``source`` to ``target`` (unset in source -> cleared)."""
    *parents, leaf = path.split(".")
    for part in parents:
        source, target = getattr(source, part), getattr(target, part)
    if target.DESCRIPTOR.fields_by_name[leaf].message_type is None:
        setattr(target, leaf, getattr(source, leaf))
    elif source.HasField(leaf):
        getattr(target, leaf).CopyFrom(getattr(source, leaf))
    else:
        target.ClearField(leaf)


def page_of(
    names: list[str], page_size: int, page_token: str, default_size: int, max_size: int
) -> tuple[list[str], str]:
    """One page of sorted ``names`` and the token of the next (empty on the last page).

    The token is the last name returned, so a page stays correct when entries are added or
    deleted between calls.
    """
    if page_size < 0:
        raise invalid_argument("page_size must not be negative")
    size = min(page_size or default_size, max_size)
    start = 0
    if page_token:
        try:
            after = base64.urlsafe_b64decode(page_token.encode()).decode()
        except (binascii.Error, UnicodeDecodeError) as err:
            raise invalid_argument("invalid page_token") from err
        start = bisect.bisect_right(names, after)
    page = names[start : start + size]
    more = start + size < len(names)
    token = base64.urlsafe_b64encode(page[-1].encode()).decode() if more and page else ""
    return page, token
