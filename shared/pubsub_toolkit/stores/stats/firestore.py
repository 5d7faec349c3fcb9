"""Firestore stats store: one document per writing instance, summed by the reader.

A Firestore document sustains about one write per second, so all ingress instances cannot
share one counter document. Each instance writes only its own document (``{scope}-{instance}``),
at most once per flush interval, with atomic ``Increment`` transforms; the reader streams the
scope's documents and sums them. Each document carries ``expire_at`` (renewed on every write) so
a Firestore TTL policy on the collection can remove instances that are long gone - their counts
then leave the totals too, which makes the totals "recent" rather than "all time".

Per-minute buckets are documents ``{collection}/{scope}/{collection}_minutes/MINUTE-INSTANCE``
(``MINUTE`` is ``YYYYMMDDHHMM``), one per instance and minute, with ``expire_at`` =
``SERIES_RETENTION`` after the minute (the TTL policy removes them; readers ask for a range of
``minute`` - one field, so no composite index - and ignore what the TTL has not removed yet).
A flush writes both documents in one batch: one commit, two document writes.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from pubsub_toolkit.clock import SYSTEM_CLOCK, Clock
from pubsub_toolkit.stores._firestore_calls import TIMEOUT, bounded_retry, fail_closed, read_all
from pubsub_toolkit.stores.stats.base import (
    INGRESS_SCOPE,
    SERIES_RETENTION,
    minute_key,
    minute_of,
)

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

    def add(
        self,
        deltas: Mapping[str, int],
        per_minute: Mapping[str, int] | None = None,
        *,
        minute: datetime | None = None,
    ) -> None:
        in_minute = deltas if per_minute is None else per_minute
        if not deltas and (minute is None or not in_minute):
            return
        from google.cloud import firestore

        now = self._clock.now()
        batch = self._client.batch()
        if deltas:
            doc = self._client.collection(self._collection).document(
                f"{self.scope}-{self.instance}"
            )
            # Counter names go in a map under "counts": names may hold dots, which a map key
            # allows and a top-level field path would not.
            fields = {
                "scope": self.scope,
                "instance": self.instance,
                "updated_at": now,
                "expire_at": now + self._retention,
                "counts": {name: firestore.Increment(n) for name, n in deltas.items()},
            }
            batch.set(doc, fields, merge=True)
        if minute is not None and in_minute:
            start = minute_of(minute)
            bucket = self._minutes().document(f"{minute_key(start)}-{self.instance}")
            batch.set(
                bucket,
                {
                    "minute": start,
                    "instance": self.instance,
                    "expire_at": start + SERIES_RETENTION,
                    "counts": {name: firestore.Increment(n) for name, n in in_minute.items()},
                },
                merge=True,
            )
        fail_closed(lambda: batch.commit(retry=bounded_retry(), timeout=TIMEOUT))

    def _minutes(self) -> Any:
        return (
            self._client.collection(self._collection)
            .document(self.scope)
            .collection(f"{self._collection}_minutes")
        )

    def totals(self) -> dict[str, int]:
        query = self._client.collection(self._collection).where(
            filter=_field_filter("scope", "==", self.scope)
        )
        sums: Counter[str] = Counter()
        for snapshot in read_all(query):
            counts = (snapshot.to_dict() or {}).get("counts", {})
            sums.update({str(k): int(v) for k, v in counts.items()})
        return dict(sums)

    def minutes(self, since: datetime, until: datetime) -> dict[datetime, dict[str, int]]:
        query = (
            self._minutes()
            .where(filter=_field_filter("minute", ">=", minute_of(since)))
            .where(filter=_field_filter("minute", "<=", minute_of(until)))
        )
        sums: dict[datetime, Counter[str]] = {}
        for snapshot in read_all(query):
            data = snapshot.to_dict() or {}
            start = minute_of(data["minute"])
            counts = data.get("counts", {})
            sums.setdefault(start, Counter()).update({str(k): int(v) for k, v in counts.items()})
        return {m: dict(c) for m, c in sums.items() if c}


def _field_filter(path: str, op: str, value: object) -> Any:
    from google.cloud.firestore_v1.base_query import FieldFilter

    return FieldFilter(path, op, value)
