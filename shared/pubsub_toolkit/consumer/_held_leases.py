"""The leases one gate process keeps between a group's deliveries (``GatePolicy.lease_hold``):
bookkeeping only - which groups, under which fencing token, since when - with the rules for
using one and giving it back. The gate does the store writes.

Why: taking the lease is a state write, so a group's every message would cost two (lease,
advance). Once a group is *busy* here (this process advanced it less than ``lease_hold`` ago)
its advance keeps the lease, and the group's next delivery runs under it: one write per
message. A group's first message frees the lease with its advance, so groups of one message
never pay a release.
"""

from __future__ import annotations

import threading
from datetime import datetime

from pubsub_toolkit._witness import Witness
from pubsub_toolkit.clock import Clock
from pubsub_toolkit.consumer.gate_rules import GatePolicy
from pubsub_toolkit.stores.fifo_state.base import GroupState


class HeldLeases:
    """Held leases by group (thread-safe): taken out by whichever call uses one."""

    def __init__(self, policy: GatePolicy, clock: Clock) -> None:
        self._policy = policy
        self._clock = clock
        self._lock = threading.Lock()
        self._held: dict[str, tuple[int, datetime]] = {}  # group -> (token, last used)
        self._advanced: Witness[str, datetime] = Witness()  # group -> last advance here

    def advanced(self, group: str) -> None:
        """This process just advanced ``group``."""
        self._advanced.put(group, self._clock.now())

    def busy(self, group: str) -> bool:
        """True if the advance being written should keep the lease: holding is on and this
        process advanced the group less than ``lease_hold`` ago (its messages are coming one
        after another)."""
        if not self._policy.lease_hold:
            return False
        last = self._advanced.get(group)
        return last is not None and self._clock.now() - last < self._policy.lease_hold

    def hold(self, group: str, token: int) -> None:
        """Keep the lease ``token`` on ``group`` for its next delivery."""
        with self._lock:
            self._held[group] = (token, self._clock.now())

    def holds(self, group: str) -> bool:
        with self._lock:
            return group in self._held

    def groups(self) -> set[str]:
        with self._lock:
            return set(self._held)

    def claim(self, group: str, state: GroupState, now: datetime) -> bool:
        """Take the held lease on ``group`` for a run, if ``state`` still shows it with enough
        of it left for a handler (``lease - lease_hold``); a stale one is dropped, one that is
        still ours but too old stays for the sweeper to give back."""
        with self._lock:
            held = self._held.pop(group, None)
        if held is None:
            return False
        token, since = held
        usable = (
            state.lease_token == token
            and state.blocked_at is None
            and not state.complete
            and not state.backing_off(now)
            and now - since < self._policy.lease_hold
            and state.lease_until is not None
            and state.lease_until - now >= self._policy.lease - self._policy.lease_hold
        )
        if not usable and state.lease_token == token and state.lease_live(now):
            with self._lock:
                self._held[group] = (token, since)
        return usable

    def unused(self, group: str, state: GroupState, now: datetime) -> tuple[bool, int | None]:
        """Whether the held lease on ``group`` is gone after this call, and the token to give
        back if it was ours and unused for ``lease_hold`` (None: nothing to write)."""
        with self._lock:
            held = self._held.get(group)
            if held is None:
                return True, None
            token, since = held
            if state.lease_token == token and now - since < self._policy.lease_hold:
                return False, None
            del self._held[group]
        return True, token if state.lease_token == token else None

    def take_all(self) -> dict[str, int]:
        """Every held lease, forgotten here: group -> token (a consumer stopping)."""
        with self._lock:
            held, self._held = self._held, {}
        return {group: token for group, (token, _since) in held.items()}
