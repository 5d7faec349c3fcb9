"""The backend protocol: one storage service, every store the toolkit needs on one client.

A backend makes the four stores - dedup records, the FIFO gate's state, the producer's
sequence counter and the dashboard's stats - over one connection (a Redis client and its
connection pool, a Firestore client), so a process that uses them all opens it once. Each call
makes a new store object; stores made by one backend share its storage (for
:class:`~pubsub_toolkit.stores.backends.memory.MemoryBackend`, its in-process dicts).

:class:`StoreNames` is where those stores keep their data: every Firestore collection and Redis
key prefix, one value the Redis and Firestore backends take and hand to each store's
constructor. Its defaults are the stores' own (unprefixed) names;
:func:`pubsub_toolkit.stores.factory.store_names_from_settings` is the one place it is built
from settings (``PUBSUB_TOOLKIT_STORE_PREFIX`` in front of each), so two deployments on one
database or one Redis keep apart.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from pubsub_toolkit.stores.stats.base import INGRESS_SCOPE

if TYPE_CHECKING:
    from pubsub_toolkit.stores.counters.base import SequenceCounter
    from pubsub_toolkit.stores.dedup.base import DedupStore
    from pubsub_toolkit.stores.fifo_state.base import FifoStore
    from pubsub_toolkit.stores.stats.base import StatsStore

__all__ = ["INGRESS_SCOPE", "Backend", "StoreNames"]


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


@dataclass(frozen=True)
class StoreNames:
    """Every collection (Firestore) and key prefix (Redis) of the toolkit's stores.

    Subcollections (a FIFO state document's ``parked``, the stats' ``{collection}_minutes``)
    live under these and need no name of their own.
    """

    dedup_collection: str = "pubsub_toolkit_dedup"
    fifo_state_collection: str = "pubsub_toolkit_fifo_state"
    counter_collection: str = "pubsub_toolkit_fifo_counters"
    stats_collection: str = "pubsub_toolkit_stats"
    dedup_key_prefix: str = "pubsub_toolkit:dedup:"
    fifo_state_key_prefix: str = "pubsub_toolkit:fifo_state:"
    counter_key_prefix: str = "pubsub_toolkit:fifo:"
    stats_key_prefix: str = "pubsub_toolkit:stats:"

    @classmethod
    def prefixed(cls, prefix: str, *, dedup_collection: str | None = None) -> StoreNames:
        """The default names with ``prefix`` in front of each; ``dedup_collection``, when
        given, is taken as it is (a name chosen explicitly is not prefixed again)."""
        names = cls(**{field.name: f"{prefix}{field.default}" for field in fields(cls)})
        if dedup_collection is None:
            return names
        return replace(names, dedup_collection=dedup_collection)
