"""The Firestore backend: every store on one ``google.cloud.firestore.Client``.

The dedup records live in ``dedup_collection``; the FIFO state, counters and stats in their
stores' default collections (the ones the Terraform and the TTL policies name).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pubsub_toolkit.clock import SYSTEM_CLOCK, Clock
from pubsub_toolkit.config import DEFAULT_DEDUP_COLLECTION, DEFAULT_FIRESTORE_DATABASE
from pubsub_toolkit.stores.stats.base import INGRESS_SCOPE

if TYPE_CHECKING:
    from google.cloud import firestore

    from pubsub_toolkit.stores.counters.firestore import FirestoreSequenceCounter
    from pubsub_toolkit.stores.dedup.firestore import FirestoreDedupStore
    from pubsub_toolkit.stores.fifo_state.firestore import FirestoreFifoStore
    from pubsub_toolkit.stores.stats.firestore import FirestoreStatsStore


class FirestoreBackend:
    """Every store on ``client``; None makes one for ``project`` (None: the ambient project,
    from GOOGLE_CLOUD_PROJECT or the credentials) and ``database``.

    A client you pass stays yours (:meth:`close` leaves it open); one made here is closed by
    :meth:`close`.
    """

    name = "firestore"

    def __init__(
        self,
        client: firestore.Client | None = None,
        *,
        project: str | None = None,
        database: str = DEFAULT_FIRESTORE_DATABASE,
        dedup_collection: str = DEFAULT_DEDUP_COLLECTION,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._owned = client is None
        if client is None:
            from google.cloud import firestore

            client = firestore.Client(project=project, database=database)
        self.client = client
        self.dedup_collection = dedup_collection
        self._clock = clock

    def dedup_store(self, **kwargs: Any) -> FirestoreDedupStore:
        from pubsub_toolkit.stores.dedup.firestore import FirestoreDedupStore

        kwargs.setdefault("collection", self.dedup_collection)
        return FirestoreDedupStore(self.client, clock=self._clock, **kwargs)

    def fifo_store(self, **kwargs: Any) -> FirestoreFifoStore:
        from pubsub_toolkit.stores.fifo_state.firestore import FirestoreFifoStore

        return FirestoreFifoStore(self.client, **kwargs)

    def counter(self, **kwargs: Any) -> FirestoreSequenceCounter:
        from pubsub_toolkit.stores.counters.firestore import FirestoreSequenceCounter

        return FirestoreSequenceCounter(self.client, **kwargs)

    def stats_store(self, *, scope: str = INGRESS_SCOPE, **kwargs: Any) -> FirestoreStatsStore:
        from pubsub_toolkit.stores.stats.firestore import FirestoreStatsStore

        kwargs.setdefault("clock", self._clock)
        return FirestoreStatsStore(self.client, scope=scope, **kwargs)

    def close(self) -> None:
        if self._owned:
            self.client.close()  # type: ignore[no-untyped-call]
