"""The Firestore backend: every store on one ``google.cloud.firestore.Client``.

Each store lives in its collection of the backend's
:class:`~pubsub_toolkit.stores.backends.base.StoreNames` (by default the stores' own, unprefixed;
from settings, with ``PUBSUB_TOOLKIT_STORE_PREFIX`` in front - the names the Terraform and its
TTL policies give).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from pubsub_toolkit.clock import SYSTEM_CLOCK, Clock
from pubsub_toolkit.config import DEFAULT_FIRESTORE_DATABASE
from pubsub_toolkit.stores.backends.base import StoreNames
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

    ``names``: the collections (default: the stores' own); ``dedup_collection``, when given,
    replaces its dedup collection. A client you pass stays yours (:meth:`close` leaves it
    open); one made here is closed by :meth:`close`.
    """

    name = "firestore"

    def __init__(
        self,
        client: firestore.Client | None = None,
        *,
        project: str | None = None,
        database: str = DEFAULT_FIRESTORE_DATABASE,
        dedup_collection: str | None = None,
        names: StoreNames | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._owned = client is None
        if client is None:
            from google.cloud import firestore

            client = firestore.Client(project=project, database=database)
        self.client = client
        names = names or StoreNames()
        if dedup_collection is not None:
            names = replace(names, dedup_collection=dedup_collection)
        self.names = names
        self.dedup_collection = names.dedup_collection
        self._clock = clock

    def dedup_store(self, **kwargs: Any) -> FirestoreDedupStore:
        from pubsub_toolkit.stores.dedup.firestore import FirestoreDedupStore

        kwargs.setdefault("collection", self.dedup_collection)
        return FirestoreDedupStore(self.client, clock=self._clock, **kwargs)

    def fifo_store(self, **kwargs: Any) -> FirestoreFifoStore:
        from pubsub_toolkit.stores.fifo_state.firestore import FirestoreFifoStore

        kwargs.setdefault("collection", self.names.fifo_state_collection)
        return FirestoreFifoStore(self.client, **kwargs)

    def counter(self, **kwargs: Any) -> FirestoreSequenceCounter:
        from pubsub_toolkit.stores.counters.firestore import FirestoreSequenceCounter

        kwargs.setdefault("collection", self.names.counter_collection)
        return FirestoreSequenceCounter(self.client, **kwargs)

    def stats_store(self, *, scope: str = INGRESS_SCOPE, **kwargs: Any) -> FirestoreStatsStore:
        from pubsub_toolkit.stores.stats.firestore import FirestoreStatsStore

        kwargs.setdefault("clock", self._clock)
        kwargs.setdefault("collection", self.names.stats_collection)
        return FirestoreStatsStore(self.client, scope=scope, **kwargs)

    def close(self) -> None:
        if self._owned:
            self.client.close()  # type: ignore[no-untyped-call]
