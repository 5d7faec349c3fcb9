"""The dedup claim loop, written once: claim, complete, release and get over store primitives.

Every backend (memory, Redis, Firestore; sync and asyncio) runs these generators; none decides
anything itself. A generator *yields* the primitive it needs and receives the store's reply
(the sans-I/O style of h11; the shape of AWS Powertools' idempotency ``persistence/base.py``):

* :class:`CreateOrGet` - create ``record`` if the key is free, else read what holds it; one
  atomic step (Redis ``SET NX GET``, Firestore ``create()`` then a read, a lock in memory).
  Replies :class:`Stored` (created) or :class:`Found`.
* :class:`Get` - read the record. Replies :class:`Found` (expired records included: the rules
  need their fencing token).
* :class:`Replace` - compare-and-set: write ``record`` only if the key still holds the
  version it was read at (``version``, or ``expected`` as written when the version is None).
  Replies :class:`Stored`, :class:`Found` (what holds the key now, when the store says so in
  the same round trip) or None (lost, what holds it unknown: the loop reads again).

A backend performs them with :func:`run` (sync) or :func:`run_async`, and takes its
``claim``, ``complete``, ``release`` and ``get`` from :class:`ClaimLoop` (or
:class:`AsyncClaimLoop`), which run these generators. Errors of the store
(:class:`~pubsub_toolkit.errors.StoreUnavailableError`) pass through unchanged; the loop raises
:class:`~pubsub_toolkit.errors.StaleClaimError` itself. Fencing tokens only grow: every write
of a new holder is a compare-and-set on the record it superseded (:func:`rules.next_token`).

(About 320 lines: the primitives, the four protocols and the two bases that run them for every
backend are one loop, each part read with the others.)
"""

from __future__ import annotations

import enum
from collections.abc import Generator
from dataclasses import dataclass
from datetime import timedelta
from typing import Generic, TypeVar

from pubsub_toolkit import _drive
from pubsub_toolkit.clock import Clock
from pubsub_toolkit.errors import StaleClaimError, StoreUnavailableError
from pubsub_toolkit.stores.dedup import rules
from pubsub_toolkit.stores.dedup.base import Claim, ClaimStatus, DedupRecord, RecordState

T = TypeVar("T")
A = TypeVar("A")  # how a backend addresses one record: a dict key, a Redis key, a document

# Compare-and-set attempts before giving up as "store unavailable, try later": each failed one
# means another writer changed the record in between, so this many in a row is a storm of
# contenders, not a state the loop could settle by trying harder.
MAX_ATTEMPTS = 64

# What complete and release change (a backend may write only these fields: the
# compare-and-set proves the others are the claim's own).
DONE_FIELDS = ("state", "lease_until", "expire_at", "result")
RELEASED_FIELDS = ("lease_until",)

# Bound once: a member looked up on its Enum class costs about 90 ns in Python 3.11, and these
# are on every claim's path (issue 26).
_ACQUIRED, _TAKEN_OVER = ClaimStatus.ACQUIRED, ClaimStatus.TAKEN_OVER


@dataclass(frozen=True, slots=True)
class CreateOrGet:
    """Create ``record`` if its key is free; else report what holds the key."""

    record: DedupRecord


@dataclass(frozen=True, slots=True)
class Get:
    """Read the key's record (expired or not)."""


@dataclass(frozen=True, slots=True)
class Replace:
    """Write ``record`` if the key still holds ``expected`` as read at ``version`` (None: as
    written by this process, when the backend can tell without a version)."""

    version: object
    expected: DedupRecord
    record: DedupRecord
    fields: tuple[str, ...] | None = None  # None: every field may have changed


@dataclass(frozen=True, slots=True)
class Stored:
    """The write applied; ``version`` identifies it for a later compare-and-set."""

    version: object = None


@dataclass(frozen=True, slots=True)
class Found:
    """The key holds ``record`` (None: nothing) at ``version``."""

    record: DedupRecord | None
    version: object = None


Op = CreateOrGet | Get | Replace
Reply = Stored | Found | None
Protocol = Generator[Op, Reply, T]


class Held(enum.Enum):
    """What a write under a claim's token found (see :func:`held_verdict`)."""

    WRITTEN = "written"
    ALREADY_DONE = "already_done"  # done under our token: our own earlier, applied attempt
    LOST = "lost"  # absent, another token, or (for a release) already done
    STILL_HELD = "still_held"  # our pending record still: write again against it


def held_verdict(current: DedupRecord | None, held: Claim, new: DedupRecord) -> Held:
    """What a write of ``new`` under ``held``'s token makes of ``current``, the record the key
    holds after a compare-and-set missed: ``LOST`` when the key is gone or another holder took
    it over (its token is not ours: a stale holder never completes a claim it lost);
    ``ALREADY_DONE`` when it is done under our token and ``new`` is a completion too (our own
    earlier attempt applied and its reply was lost: complete is idempotent); ``LOST`` for a
    release of a done record; else ``STILL_HELD`` (our pending record: write again)."""
    if current is None or current.token != held.token:
        return Held.LOST
    if current.state is RecordState.DONE:
        return Held.ALREADY_DONE if new.state is RecordState.DONE else Held.LOST
    return Held.STILL_HELD


def claim(
    namespace: str,
    key: str,
    fingerprint: str,
    *,
    clock: Clock,
    lease: timedelta,
    ttl: timedelta,
) -> Protocol[Claim]:
    """Claim ``key`` or report who has it (see :meth:`~.base.DedupStore.claim`)."""
    fresh = rules.pending_record(
        namespace, key, fingerprint, 1, now=clock.now(), lease=lease, ttl=ttl
    )
    reply = yield CreateOrGet(fresh)
    if type(reply) is Stored:
        return Claim(_ACQUIRED, 1, fresh, version=reply.version)
    assert type(reply) is Found
    return (
        yield from settle(reply, namespace, key, fingerprint, clock=clock, lease=lease, ttl=ttl)
    )


def settle(
    found: Found,
    namespace: str,
    key: str,
    fingerprint: str,
    *,
    clock: Clock,
    lease: timedelta,
    ttl: timedelta,
) -> Protocol[Claim]:
    """Decide on the record a claim found; take it over (its lease or itself expired) by a
    compare-and-set on exactly what was read, so of several contenders exactly one wins and
    the others decide again on the winner's record."""
    for _ in range(MAX_ATTEMPTS):
        now = clock.now()
        existing = found.record
        if existing is None:  # gone since (TTL): a fresh claim, as on a new key
            fresh = rules.pending_record(
                namespace, key, fingerprint, 1, now=now, lease=lease, ttl=ttl
            )
            reply = yield CreateOrGet(fresh)
            if type(reply) is Stored:
                return Claim(_ACQUIRED, 1, fresh, version=reply.version)
            assert type(reply) is Found
            found = reply
            continue
        status = rules.evaluate_claim(existing, fingerprint, now)
        if status is not _ACQUIRED and status is not _TAKEN_OVER:
            return Claim(status, existing.token, existing)
        record = rules.pending_record(
            namespace,
            key,
            fingerprint,
            rules.next_token(existing),
            now=now,
            lease=lease,
            ttl=ttl,
        )
        reply = yield Replace(found.version, existing, record)
        if type(reply) is Stored:
            return Claim(status, record.token, record, version=reply.version)
        found = reply if type(reply) is Found else (yield from _read())
    raise StoreUnavailableError(f"claim on {namespace}/{key}: too many concurrent writers")


def complete(
    namespace: str,
    key: str,
    held: Claim,
    result: str | None,
    *,
    clock: Clock,
    ttl: timedelta,
) -> Protocol[None]:
    """Mark ``held`` done with ``result``; idempotent for the same claim (a record already
    done under its token is our own earlier attempt, whose reply was lost). Raises
    StaleClaimError when another holder has the key."""
    if held.record is None:
        raise StaleClaimError(f"claim on {namespace}/{key} carries no record")
    done = rules.done_record(held.record, result, now=clock.now(), ttl=ttl)
    outcome = yield from _write_held(held, done, DONE_FIELDS)
    if outcome is Held.LOST:
        raise StaleClaimError(f"claim {held.token} on {namespace}/{key} is no longer held")


def release(namespace: str, key: str, held: Claim, *, clock: Clock) -> Protocol[None]:
    """End ``held``'s lease so a redelivery can claim at once; the record (and its token)
    stays. A claim no longer held, or already done, is left alone."""
    if held.record is None:
        return
    released = rules.released_record(held.record, now=clock.now())
    yield from _write_held(held, released, RELEASED_FIELDS)


def get(clock: Clock) -> Protocol[DedupRecord | None]:
    """The key's record, or None when absent or expired."""
    record = (yield from _read()).record
    if record is None or record.is_expired(clock.now()):
        return None
    return record


def _read() -> Protocol[Found]:
    reply = yield Get()
    assert type(reply) is Found
    return reply


def _write_held(held: Claim, new: DedupRecord, fields: tuple[str, ...]) -> Protocol[Held]:
    """Write ``new`` while the key holds ``held``'s pending record: first against the record
    as the claim wrote it (one compare-and-set, no read), then against what the store holds
    for as long as that is still ours."""
    assert held.record is not None
    reply = yield Replace(held.version, held.record, new, fields)
    for _ in range(MAX_ATTEMPTS):
        if type(reply) is Stored:
            return Held.WRITTEN
        found = reply if type(reply) is Found else (yield from _read())
        current = found.record
        verdict = held_verdict(current, held, new)
        if verdict is not Held.STILL_HELD:
            return verdict
        assert current is not None  # STILL_HELD: our pending record
        reply = yield Replace(found.version, current, new, fields)
    raise StoreUnavailableError(f"claim {held.token}: too many concurrent writers")


# The drivers' loop is the one every protocol shares (pubsub_toolkit._drive).
run = _drive.run
run_async = _drive.run_async


class ClaimLoop(Generic[A]):
    """A :class:`~.base.DedupStore` made of the loop: ``claim``, ``complete``, ``release`` and
    ``get`` are this module's protocols, each run by the backend's ``_drive`` on the record
    ``_key(namespace, key)`` addresses (a dict key, a Redis key, a document). A backend
    implements those two; the decisions stay here."""

    _clock: Clock

    def _key(self, namespace: str, key: str) -> A:
        raise NotImplementedError

    def _drive(self, protocol: Protocol[T], at: A) -> T:
        raise NotImplementedError

    def claim(
        self, namespace: str, key: str, fingerprint: str, *, lease: timedelta, ttl: timedelta
    ) -> Claim:
        protocol = claim(namespace, key, fingerprint, clock=self._clock, lease=lease, ttl=ttl)
        return self._drive(protocol, self._key(namespace, key))

    def complete(
        self, namespace: str, key: str, claim: Claim, result: str | None, *, ttl: timedelta
    ) -> None:
        protocol = complete(namespace, key, claim, result, clock=self._clock, ttl=ttl)
        self._drive(protocol, self._key(namespace, key))

    def release(self, namespace: str, key: str, claim: Claim) -> None:
        protocol = release(namespace, key, claim, clock=self._clock)
        self._drive(protocol, self._key(namespace, key))

    def get(self, namespace: str, key: str) -> DedupRecord | None:
        return self._drive(get(self._clock), self._key(namespace, key))


class AsyncClaimLoop(Generic[A]):
    """:class:`ClaimLoop` for an :class:`~.base.AsyncDedupStore`: ``_drive`` awaited."""

    _clock: Clock

    def _key(self, namespace: str, key: str) -> A:
        raise NotImplementedError

    async def _drive(self, protocol: Protocol[T], at: A) -> T:
        raise NotImplementedError

    async def claim(
        self, namespace: str, key: str, fingerprint: str, *, lease: timedelta, ttl: timedelta
    ) -> Claim:
        protocol = claim(namespace, key, fingerprint, clock=self._clock, lease=lease, ttl=ttl)
        return await self._drive(protocol, self._key(namespace, key))

    async def complete(
        self, namespace: str, key: str, claim: Claim, result: str | None, *, ttl: timedelta
    ) -> None:
        protocol = complete(namespace, key, claim, result, clock=self._clock, ttl=ttl)
        await self._drive(protocol, self._key(namespace, key))

    async def release(self, namespace: str, key: str, claim: Claim) -> None:
        protocol = release(namespace, key, claim, clock=self._clock)
        await self._drive(protocol, self._key(namespace, key))

    async def get(self, namespace: str, key: str) -> DedupRecord | None:
        return await self._drive(get(self._clock), self._key(namespace, key))
