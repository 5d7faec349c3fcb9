"""The backend protocol: one storage service, every store the toolkit needs on one client.

A backend makes the four stores - dedup records, the FIFO gate's state, the producer's
sequence counter and the dashboard's stats - over one connection (a Redis client and its
connection pool, a Firestore client), so a process that uses them all opens it once. Each call
makes a new store object; stores made by one backend share its storage (for
:class:`~pubsub_toolkit.stores.backends.memory.MemoryBackend`, its in-process dicts).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

from pubsub_toolkit.stores.stats.base import INGRESS_SCOPE

if TYPE_CHECKING:
    from pubsub_toolkit.stores.counters.base import SequenceCounter
    from pubsub_toolkit.stores.dedup.base import DedupStore
    from pubsub_toolkit.stores.fifo_state.base import FifoStore
    from pubsub_toolkit.stores.stats.base import StatsStore

__all__ = ["INGRESS_SCOPE", "Backend"]


@runtime_checkable
class Backend(Protocol):
    """Makes every store on one client; :meth:`close` releases what the backend opened."""

    #: ``"memory"``, ``"redis"`` or ``"firestore"`` (the values of ``Settings.store_backend``).
    name: str

    def dedup_store(self) -> DedupStore:
        """The dedup records (two-phase claims) for ingress, the relay and the consumer."""
        ...

    def fifo_store(self) -> FifoStore:
        """The FIFO gate's per-group state and parked messages."""
        ...

    def counter(self) -> SequenceCounter:
        """The producer's per-group sequence numbers."""
        ...

    def stats_store(self, *, scope: str = INGRESS_SCOPE) -> StatsStore:
        """The dashboard's shared counters of ``scope``."""
        ...

    def close(self) -> None:
        """Close the client if the backend made it (one it was handed stays the caller's)."""
        ...
