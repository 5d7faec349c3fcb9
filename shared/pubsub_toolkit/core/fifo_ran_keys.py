"""The dedup keys one gate process saw run in each group, beyond the state's window of keys.

A group's state keeps the keys of its last ``KEY_WINDOW`` (64) numbers, so a producer's retry
renumbered further away than that is recognised by ingress (its dedup record), not by the gate.
When the store lost that record too (a Redis restarted empty, a failover), the retry reaches
the gate as a new message, and the key would run a second time - on the very process that ran
it first, which the store-loss guarantee rules out ("a process that survived the loss runs
nothing twice": :mod:`pubsub_toolkit._witness`). So the gate process remembers, bounded, every
key it saw processed per group (from each state it read or wrote) and takes a later copy of one
for a filler, as it does within the window (:func:`~.fifo_rules.ran_earlier`). It also
remembers which keys it saw at each passed number: a different message at a number the state
has forgotten (a producer reusing it, a counter its store rolled back) is a reused number on
that process - dead-lettered - not a redelivery acked as a duplicate.
"""

from __future__ import annotations

import threading

from pubsub_toolkit._witness import Witness
from pubsub_toolkit.attributes import is_filler
from pubsub_toolkit.core.fifo_policy import message_key
from pubsub_toolkit.message import Message
from pubsub_toolkit.stores.fifo_state.base import FILLER_MARK, GroupState, key_digest, plain_digest

RAN_KEYS = 10_000  # (group, key) pairs remembered per gate, the most recent kept
# What note() reads of a state: its epoch, last processed number and keys.
Noted = tuple[int, int, tuple[tuple[int, str], ...]]


class RanKeys:
    """(group, key digest) -> (epoch, number) where this process saw the key run."""

    def __init__(self, capacity: int = RAN_KEYS) -> None:
        self._ran: Witness[tuple[str, str], tuple[int, int]] = Witness(capacity)
        # (group, epoch, number) -> the keys recorded there (two after a repaired reissue).
        self._at: Witness[tuple[str, int, int], tuple[str, ...]] = Witness(capacity)
        # group -> what its last note() was of (what note() reads of a state).
        self._noted: Witness[str, Noted] = Witness(capacity)
        # note() reads and extends what a number holds: two threads noting different keys at
        # one number (after a repaired reissue) must not drop either.
        self._lock = threading.Lock()

    def note(self, group: str, state: GroupState) -> None:
        """Remember the keys ``state`` records at numbers it has passed."""
        noted: Noted = (state.epoch, state.last_processed, state.keys)
        with self._lock:
            # A group's state is noted when this process writes it and again when it next
            # reads it - most often unchanged (the gate's next delivery of the group). Noting
            # the same keys again would change nothing but their recency, and it walks the
            # whole window (two lookups per key): on a CPU-bound consumer the costliest line
            # of a delivery (issue 26). Their recency was renewed by the note just before.
            if self._noted.get(group) == noted:
                return
            self._noted.put(group, noted)
            for seq, digest in state.keys:
                if seq > state.last_processed:
                    continue
                plain, number = plain_digest(digest), (group, state.epoch, seq)
                there = self._at.get(number) or ()
                if plain not in there:
                    self._at.put(number, (*there, plain))
                key = (group, plain)
                if not digest.startswith(FILLER_MARK) and self._ran.get(key) is None:
                    self._ran.put(key, (state.epoch, seq))  # the first place stays the key's

    def reused(self, group: str, state: GroupState, seq: int, digest: str) -> bool:
        """True when ``seq`` is passed, ``state`` no longer records its key, and this process
        saw another message's key there and never ``digest``'s."""
        if seq > state.last_processed or state.key_of(seq) is not None:
            return False
        there = self._at.get((group, state.epoch, seq))
        return there is not None and digest not in there

    def earlier(self, group: str, state: GroupState, seq: int, message: Message) -> int | None:
        """The number at which ``message``'s key ran before ``seq`` (in this sequence or an
        older one), as this process saw it; None if it did not, or if it has no key."""
        key = message_key(message)
        if is_filler(message) or not key:
            return None
        place = self._ran.get((group, key_digest(key)))
        if place is None:
            return None
        epoch, ran_at = place
        if epoch == state.epoch:
            return ran_at if ran_at < seq else None
        return ran_at if epoch < state.epoch else None
