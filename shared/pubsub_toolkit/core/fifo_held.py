"""The leases one gate process keeps between a group's deliveries (``GatePolicy.lease_hold``):
bookkeeping only - which groups, under which fencing token, since when - and the rule for
using one. The gate does the store writes.

Why: taking the lease is a state write, so a group's every message would cost two (lease,
advance). With holding on, an advance keeps the lease (renewed for a whole ``lease``: the same
one write), and the group's next delivery to this process runs under it with no lease write.

It also knows which groups this process has a run under way on (:meth:`HeldLeases.running`):
a handler that outlives its lease is still this process's run, so this process neither takes
the group over (its sweeper, or a redelivery, would run the number a second time) nor, by
the same token, runs it again - another process still may, after the lease; the gate's ALERT
then says so.

Holding costs no write of its own: an unused lease is never given back by a write; it simply
expires. Nobody is kept waiting for it either: another process's copy of the group's head
parks (the group is then listed for the sweepers), and this process's sweeper - visiting
listed groups only - runs it under the lease it holds. Only this process dying leaves the
copy waiting for the lease to expire, as a crash in the middle of a run would.
"""

from __future__ import annotations

import enum
import threading
from collections import Counter
from datetime import datetime, timedelta

from pubsub_toolkit.clock import Clock
from pubsub_toolkit.core.fifo_policy import GatePolicy
from pubsub_toolkit.stores.fifo_state.base import GroupState

PRUNE_EVERY = 1024  # holds between two passes that forget expired leases (bounds the map)


class Claim(enum.Enum):
    """What a held lease is good for right now."""

    NONE = "none"  # not held here (any more): take a lease the usual way
    FREE = "free"  # run under it as it is: no write
    RENEW = "renew"  # ours and unused, but too little of it is left: write a new lease first


class Running:
    """:meth:`HeldLeases.running`'s block: ``group`` counted as run here while it lasts.

    A class rather than a ``@contextmanager`` generator: every run of a number enters one, and
    the generator's machinery cost about as much as the counting (issue 26's 64-group
    consumer, CPU-bound)."""

    __slots__ = ("_group", "_lock", "_running")

    def __init__(self, lock: threading.Lock, running: Counter[str], group: str) -> None:
        self._lock, self._running, self._group = lock, running, group

    def __enter__(self) -> None:
        with self._lock:
            self._running[self._group] += 1

    def __exit__(self, *exc_info: object) -> None:
        group = self._group
        with self._lock:
            self._running[group] -= 1
            if not self._running[group]:
                del self._running[group]


class HeldLeases:
    """Held leases by group (thread-safe): taken out by whichever call uses one."""

    def __init__(self, policy: GatePolicy, clock: Clock) -> None:
        self._policy = policy
        self._clock = clock
        self._lock = threading.Lock()
        self._held: dict[str, tuple[int, datetime]] = {}  # group -> (token, since)
        self._holds = 0
        self._running: Counter[str] = Counter()  # group -> runs under way in this process

    def running(self, group: str) -> Running:
        """A run under way on ``group`` in this process, for as long as the block lasts."""
        return Running(self._lock, self._running, group)

    def busy(self, group: str) -> bool:
        """True while this process has a run under way on ``group`` (see :meth:`running`)."""
        with self._lock:
            return group in self._running

    @property
    def enabled(self) -> bool:
        return bool(self._hold)

    def hold(self, group: str, token: int) -> None:
        """Keep the lease ``token`` on ``group`` (just renewed by an advance) for its next
        delivery."""
        now = self._clock.now()
        with self._lock:
            self._held[group] = (token, now)
            self._holds += 1
            if self._holds % PRUNE_EVERY == 0:
                expired = [g for g, (_t, since) in self._held.items() if now - since >= self._lease]
                for stale in expired:
                    del self._held[stale]

    def holds(self, group: str) -> bool:
        with self._lock:
            return group in self._held

    def claim(self, group: str, state: GroupState, now: datetime) -> Claim:
        """Take the lease held on ``group`` for a run, as ``state`` shows it (the entry is
        gone afterwards; the run holds again when it ends)."""
        with self._lock:
            held = self._held.pop(group, None)
        if held is None:
            return Claim.NONE
        token, since = held
        if (
            state.lease_token != token
            or not state.lease_live(now)
            or state.blocked_at is not None
            or state.complete
        ):
            return Claim.NONE  # fenced, expired or stopped meanwhile: not ours to use
        # Used within lease_hold of its renewal, the lease has at least lease - lease_hold left
        # for the handler; later, a new lease (one write) gives the run a whole one.
        fresh = now - since < self._hold
        assert state.lease_until is not None  # lease_live says so
        enough = state.lease_until - now >= self._lease - self._hold
        return Claim.FREE if fresh and enough else Claim.RENEW

    def take_all(self) -> dict[str, int]:
        """Every held lease, forgotten here: group -> token (a consumer stopping)."""
        with self._lock:
            held, self._held = self._held, {}
        now = self._clock.now()
        return {g: token for g, (token, since) in held.items() if now - since < self._lease}

    @property
    def _lease(self) -> timedelta:
        return self._policy.lease

    @property
    def _hold(self) -> timedelta:
        return self._policy.lease_hold or timedelta(0)
