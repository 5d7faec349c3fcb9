"""The idempotent processor's algorithm, written once and without I/O: claim, run, complete.

:func:`process` is :class:`~pubsub_toolkit.dedup.idempotent.IdempotentProcessor`'s whole
pattern (see that module) as a generator protocol, in the style of
:mod:`pubsub_toolkit.stores.dedup.claims` and :mod:`.consume`: it *yields* each effect it needs
and receives the effect's result; :func:`run` performs them synchronously, :func:`run_async`
awaits them. The sync processor and :class:`~pubsub_toolkit.dedup.idempotent_async.
AsyncIdempotentProcessor` are those two drivers; neither decides anything.

* :class:`ClaimKey` - ``store.claim(...)``; replies the :class:`~.base.Claim`;
* :class:`Complete` - ``store.complete(...)``; replies None;
* :class:`Release` - ``store.release(...)``; replies None;
* :class:`RunEffect` - call (or await) the caller's effect; replies its result;
* :class:`Sleep` - pause between two attempts of ``complete`` (``asyncio.sleep`` on a loop).

An effect's error is thrown into the protocol where it yielded it (a failing effect releases
the claim; an unavailable store is retried by ``complete``); what the protocol does not handle
leaves the driver unchanged. The clock is read directly (as the claim loop does) and decisions
are logged directly through the processor's :class:`Decisions` log, in order with the effects
(the protocol runs between two of them); what a process remembers across deliveries (its
witness) is the :class:`Memory` the driver hands in, shared by all views of one processor.

(About 390 lines: the effects, what a driver hands in, the protocol and the two loops that
perform it are one algorithm, each part read with the others.)
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import logging
import threading
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple, Protocol, TypeVar

from pubsub_toolkit import _drive
from pubsub_toolkit.clock import Clock
from pubsub_toolkit.core.idempotency import OWNED, Verdict, done_at, on_claim, retried_here
from pubsub_toolkit.errors import ClaimInProgressError, StaleClaimError, StoreUnavailableError
from pubsub_toolkit.stores.dedup.base import Claim

T = TypeVar("T")
K_contra = TypeVar("K_contra", contravariant=True)  # keys are only passed in
V = TypeVar("V")

# The processor's own logger (its name is what operators filter on), not this module's.
logger = logging.getLogger("pubsub_toolkit.dedup.idempotent")
COMPLETE_RETRY_DELAYS = (0.1, 0.5, 1.5)


class Outcome(enum.StrEnum):
    """What happened to one delivery."""

    PROCESSED = "processed"
    DUPLICATE = "duplicate"
    MISMATCH = "mismatch"


@dataclass(frozen=True)
class ProcessResult:
    """The outcome and the effect's stored result (for duplicates: the first run's result)."""

    outcome: Outcome
    result: str | None = None


@dataclass(frozen=True)
class Done:
    """What this process remembers of an effect it ran (or found done): its result, when,
    and whether the store acknowledged the ``done`` record - then its absence is a loss."""

    result: str | None
    at: datetime
    recorded: bool


# --- effects ----------------------------------------------------------------------------------


# ClaimKey, Complete and Release are built on every delivery: immutable NamedTuples, not
# frozen dataclasses, whose __init__ sets each field through object.__setattr__ at about twice
# the cost (issue 26). (A NamedTuple also equals a plain tuple of its fields: nothing here
# compares an effect with anything but an effect of its own type.)


class ClaimKey(NamedTuple):
    """Claim ``key`` for ``fingerprint`` in ``namespace``. Replies the store's Claim."""

    namespace: str
    key: str
    fingerprint: str
    lease: timedelta
    ttl: timedelta


class Complete(NamedTuple):
    """Record ``claim`` done with ``result`` (kept ``ttl``). Replies None."""

    namespace: str
    key: str
    claim: Claim
    result: str | None
    ttl: timedelta


class Release(NamedTuple):
    """End ``claim``'s lease so a redelivery can claim at once. Replies None."""

    namespace: str
    key: str
    claim: Claim


@dataclass(frozen=True, slots=True)
class RunEffect:
    """Run the caller's effect (once: the key is claimed). Replies its result."""


@dataclass(frozen=True, slots=True)
class Sleep:
    """Pause ``seconds`` before the next attempt. Replies None."""

    seconds: float


RUN_EFFECT = RunEffect()  # it carries nothing: one instance for every delivery

Effect = ClaimKey | Complete | Release | RunEffect | Sleep
# A reply's type is the effect's (ClaimKey: a Claim, RunEffect: the result, ...).
Run = Generator[Effect, Any, T]


# --- what the protocol is handed ----------------------------------------------------------------


class Remembers(Protocol[K_contra, V]):
    """A bounded, thread-safe memory (:class:`pubsub_toolkit._witness.Witness`)."""

    def get(self, key: K_contra) -> V | None: ...

    def put(self, key: K_contra, value: V) -> None: ...


class Decisions(Protocol):
    """Where decisions are logged (:class:`pubsub_toolkit.observability.DecisionLog`)."""

    def decision(
        self, outcome: str, message: str, *, dedup_key: str | None, level: int = ..., **fields: Any
    ) -> None: ...


class Memory:
    """What one processor remembers across deliveries, whichever driver runs them."""

    def __init__(self, done: Remembers[tuple[str, str], Done], released: Remembers[str, int]):
        #: (key, fingerprint) -> what this process saw done (by content too: an impostor under
        #: the same key must not hide the original).
        self.done = done
        #: key -> the token of the claim this process released after its effect failed: the
        #: redelivery that takes that very claim over is a retry, not a lost worker.
        self.released = released
        #: the keys running here, under ``lock`` (read and written by :func:`process` itself:
        #: two method calls per delivery were a measurable share of its cost, issue 26).
        self.running: set[str] = set()
        self.lock = threading.Lock()


@dataclass(frozen=True)
class Scope:
    """One processor as the protocol sees it: its namespace, its records' lease and TTL, and
    its clock, memory and decision log."""

    namespace: str
    lease: timedelta
    ttl: timedelta
    clock: Clock
    memory: Memory
    log: Decisions


Say = Callable[..., None]


# --- the protocol -------------------------------------------------------------------------------


# The members the protocol compares with on every delivery, bound once: a lookup on an Enum
# class (``Verdict.RUN``) costs about 90 ns in Python 3.11, a dozen per delivery (issue 26).
_DUPLICATE, _RECORD_AGAIN, _MISMATCH = Verdict.DUPLICATE, Verdict.RECORD_AGAIN, Verdict.MISMATCH
_IN_PROGRESS, _TAKE_OVER = Verdict.IN_PROGRESS, Verdict.TAKE_OVER
_PROCESSED, _SKIPPED = Outcome.PROCESSED, Outcome.DUPLICATE


def process(  # noqa: PLR0915 - one generator per delivery: a layer per phase cost (issue 26)
    scope: Scope, key: str, fingerprint: str, context: Mapping[str, Any] | None = None
) -> Run[ProcessResult]:
    """Run the effect unless ``key`` was already processed (see IdempotentProcessor.process):
    claim ``key``, then do what the claim's answer says (:func:`.idempotency.on_claim`).
    ``context`` is added to every decision logged."""

    def say(outcome: str, text: str, **fields: Any) -> None:
        scope.log.decision(outcome, text, dedup_key=key, **{**(context or {}), **fields})

    # One generator for the whole delivery, not one per phase: every effect's reply would
    # otherwise pass through each layer (issue 26: this path is the memory store's CPU cost).
    memory, ttl = scope.memory, scope.ttl
    # Two deliveries of one key in this very process never run at once, whatever the store
    # says (it may have lost the first one's claim).
    with memory.lock:
        busy = key in memory.running
        memory.running.add(key)  # (a no-op when busy: the key stays its first delivery's)
    if busy:
        say("in_progress", "key is being processed by this process; retry later")
        raise ClaimInProgressError(f"{scope.namespace}/{key} is running here")
    try:
        claim: Claim = yield ClaimKey(scope.namespace, key, fingerprint, scope.lease, ttl)
        # claim.owns_key, without its two lookups on ClaimStatus (issue 26)
        remembered = memory.done.get((key, fingerprint)) if claim.status in OWNED else None
        verdict = on_claim(
            claim.status,
            remembered_at=remembered.at if remembered is not None else None,
            # the clock is read only when a remembered run is to be weighed (not on every claim)
            now=scope.clock.now() if remembered is not None else None,
            ttl=ttl,
        )
        if verdict is _DUPLICATE:
            say(_SKIPPED, "duplicate delivery skipped")
            stored = claim.record.result if claim.record else None
            # Remember when the STORE's record was done (its TTL runs from then), not now.
            at = done_at(claim.record.expire_at, ttl) if claim.record else scope.clock.now()
            memory.done.put((key, fingerprint), Done(stored, at, recorded=True))
            return ProcessResult(_SKIPPED, stored)
        if verdict is _RECORD_AGAIN:
            assert remembered is not None
            return (yield from record_again(scope, (key, fingerprint), claim, remembered, say))
        if verdict is _MISMATCH:
            say(
                Outcome.MISMATCH,
                "ALERT: dedup key reused with different content",
                level=logging.ERROR,
                alert="fingerprint_mismatch",
                fingerprint=fingerprint,
                stored_fingerprint=claim.record.fingerprint if claim.record else None,
            )
            return ProcessResult(Outcome.MISMATCH)
        if verdict is _IN_PROGRESS:
            say("in_progress", "key is being processed elsewhere; retry later")
            raise ClaimInProgressError(f"{scope.namespace}/{key} is claimed by a live worker")
        if verdict is _TAKE_OVER:
            say_taken_over(memory, key, claim, say)
        try:
            result: str | None = yield RUN_EFFECT
        except GeneratorExit:
            raise  # the driver went away: nothing can be yielded now (the lease frees the key)
        except BaseException:
            yield from release_after_failure(scope, key, claim)
            raise
        # Remembered before the store is told: if recording fails (or the store loses it),
        # this process still knows the effect happened and will not run it again.
        at = scope.clock.now()
        memory.done.put((key, fingerprint), Done(result, at, recorded=False))
        try:
            # complete(), its first attempt inlined: no generator for the common case
            recording = Complete(scope.namespace, key, claim, result, ttl)
            try:
                yield recording
            except StoreUnavailableError:
                yield from complete_again(scope, recording)
        except StaleClaimError:
            say(
                "fenced",
                "ALERT: effect ran after our lease expired and another worker took over",
                level=logging.ERROR,
                token=claim.token,
            )
            raise
        memory.done.put((key, fingerprint), Done(result, at, recorded=True))
        say(_PROCESSED, "processed")
        return ProcessResult(_PROCESSED, result)
    finally:
        with memory.lock:
            memory.running.discard(key)


def say_taken_over(memory: Memory, key: str, claim: Claim, say: Say) -> None:
    """Log the takeover of ``key``: a retry of the claim this process released after its
    effect failed, or the end of another holder's."""
    retry = retried_here(memory.released.get(key), claim.token)
    say(
        "taken_over",
        "claim released here after the effect failed; running it again"
        if retry
        else "previous holder's claim ended (its lease expired, or it released the key "
        "after a failure); taking over",
        level=logging.INFO if retry else logging.WARNING,
        token=claim.token,
    )


def record_again(
    scope: Scope, remembered: tuple[str, str], claim: Claim, done: Done, say: Say
) -> Run[ProcessResult]:
    """The store has no ``done`` record for an effect this process ran: write it (again),
    never rerun. Lost writes if the store had acknowledged it; else its ``complete`` failed
    (an outage, said then as ``complete_failed``) and this is, most likely, the late write
    (a write applied just before its timeout, then lost, is indistinguishable from it)."""
    key = remembered[0]
    if done.recorded:
        say(
            "store_rollback",
            "ALERT: the store lost this key's done record; not run again",
            level=logging.ERROR,
            alert="store_rollback",
        )
    else:
        say(
            "recorded_late",
            "effect ran here before its done record could be written; recording it now, "
            "not run again",
            level=logging.WARNING,
        )
    # Someone else may hold it by now: they find it done, or run it under a newer lease.
    with contextlib.suppress(StaleClaimError):
        yield from complete(scope, key, claim, done.result)
        # Acknowledged now: should the store lose it later, that is a loss to alert on.
        scope.memory.done.put(remembered, dataclasses.replace(done, recorded=True))
    return ProcessResult(Outcome.DUPLICATE, done.result)


def complete(scope: Scope, key: str, claim: Claim, result: str | None) -> Run[None]:
    """Record ``claim`` done, retrying an unavailable store a few times."""
    effect = Complete(scope.namespace, key, claim, result, scope.ttl)
    try:
        yield effect
    except StoreUnavailableError:
        yield from complete_again(scope, effect)


def complete_again(scope: Scope, effect: Complete) -> Run[None]:
    """Retry ``effect`` after its first attempt found the store unavailable."""
    # The effect has happened: losing the "done" write now would let a redelivery run it
    # again once the lease expires, so a store hiccup is worth a few quick retries.
    for attempt, delay in enumerate(COMPLETE_RETRY_DELAYS, 1):
        yield Sleep(delay)
        try:
            yield effect
            return
        except StoreUnavailableError:
            if attempt < len(COMPLETE_RETRY_DELAYS):
                continue
            scope.log.decision(
                "complete_failed",
                "ALERT: effect done but not recorded; a redelivery after the lease may repeat it",
                dedup_key=effect.key,
                level=logging.ERROR,
            )
            raise


def release_after_failure(scope: Scope, key: str, claim: Claim) -> Run[None]:
    """Release ``claim`` after its effect failed, so a redelivery can run it at once."""
    # Never let a failing release hide the effect's own exception.
    try:
        yield Release(scope.namespace, key, claim)
        scope.memory.released.put(key, claim.token)
    except Exception:
        logger.exception(
            "could not release %s/%s; it frees when the lease ends", scope.namespace, key
        )
    scope.log.decision(
        "effect_failed",
        "effect raised; claim released for redelivery",
        dedup_key=key,
        level=logging.WARNING,
    )


# The drivers' loop is the one every protocol shares (pubsub_toolkit._drive).
run = _drive.run
run_async = _drive.run_async
