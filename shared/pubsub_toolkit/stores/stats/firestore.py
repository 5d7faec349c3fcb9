"""Firestore stats store: one document per writing instance, summed by the reader.

A Firestore document sustains about one write per second, so all ingress instances cannot
share one counter document. Each instance writes only its own document (``{scope}-{instance}``),
at most once per flush interval, with atomic ``Increment`` transforms; the reader streams the
scope's documents and sums them. Each document carries ``expire_at`` (renewed on every write) so
a Firestore TTL policy on the collection can remove instances that are long gone - their counts
then leave the totals too, which makes the totals "recent" rather than "all time".
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from pubsub_toolkit.clock import SYSTEM_CLOCK, Clock
from pubsub_toolkit.stores._firestore_calls import TIMEOUT, bounded_retry, fail_closed
from pubsub_toolkit.stores.stats.base import INGRESS_SCOPE

DEFAULT_COLLECTION = "pubsub_toolkit_stats"
DEFAULT_RETENTION = timedelta(days=8)


class FirestoreStatsStore:
    """Counters of ``scope``; this instance writes ``{collection}/{scope}-{instance}``."""

    def __init__(
        self,
        client: Any,
        *,
        scope: str = INGRESS_SCOPE,
        collection: str = DEFAULT_COLLECTION,
        instance: str | None = None,
        retention: timedelta = DEFAULT_RETENTION,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._client = client
        self._collection = collection
        self.scope = scope
        self.instance = instance or uuid.uuid4().hex[:16]
        self._retention = retention
        self._clock = clock

    def add(self, deltas: Mapping[str, int]) -> None:
        if not deltas:
            return
        from google.cloud import firestore

        now = self._clock.now()
        doc = self._client.collection(self._collection).document(f"{self.scope}-{self.instance}")
        # Counter names go in a map under "counts": names may hold dots, which a map key allows
        # and a top-level field path would not.
        fields = {
            "scope": self.scope,
            "instance": self.instance,
            "updated_at": now,
            "expire_at": now + self._retention,
            "counts": {name: firestore.Increment(n) for name, n in deltas.items()},
        }
        fail_closed(lambda: doc.set(fields, merge=True, retry=bounded_retry(), timeout=TIMEOUT))

    def totals(self) -> dict[str, int]:
        query = self._client.collection(self._collection).where(
            filter=_field_filter("scope", "==", self.scope)
        )
        sums: Counter[str] = Counter()
        for snapshot in fail_closed(
            lambda: list(query.stream(retry=bounded_retry(), timeout=TIMEOUT))
        ):
            counts = (snapshot.to_dict() or {}).get("counts", {})
            sums.update({str(k): int(v) for k, v in counts.items()})
        return dict(sums)


def _field_filter(path: str, op: str, value: object) -> Any:
    from google.cloud.firestore_v1.base_query import FieldFilter

    return FieldFilter(path, op, value)
