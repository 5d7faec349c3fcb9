"""A replay's mark: what makes a ``replay_id`` unforgeable, for ingress and whoever replays.

Ingress deduplicates a replay under ``dedup_key#replay:replay_id``: the original key is already
recorded (as dead-lettered), and without this the replay would be dropped as a duplicate. So a
``replay_id`` must be genuine: before a replay is published, its id is *minted* in the dedup
store ingress reads (:func:`mint`, naming the dedup key it replays), and ingress dead-letters a
``replay_id`` it finds no mint for (:data:`REASON_FORGED_REPLAY`, :func:`is_minted`) - a
producer setting ``replay_id`` itself cannot push a delivered key through ingress dedup again.

The operator's ``dlq replay`` (the CLI distribution, which lists and replays the dead-letter
topic) mints here; so does anyone re-publishing a message by hand, such as one the relay gave up
on (:mod:`pubsub_toolkit.delay.last_attempt`).
"""

from __future__ import annotations

from datetime import timedelta

from pubsub_toolkit.stores.dedup.base import DedupStore, RecordState

REPLAY_NAMESPACE = "replays"
REASON_FORGED_REPLAY = "forged_replay_id"
# Long enough for a replay to reach ingress through any backlog (Pub/Sub keeps 7 days).
MINT_TTL = timedelta(days=8)


def mint(store: DedupStore, replay_id: str, dedup_key: str, *, ttl: timedelta = MINT_TTL) -> None:
    """Record that ``replay_id`` is a genuine replay of ``dedup_key`` (idempotent)."""
    claim = store.claim(REPLAY_NAMESPACE, replay_id, dedup_key, lease=timedelta(minutes=1), ttl=ttl)
    if claim.owns_key:
        store.complete(REPLAY_NAMESPACE, replay_id, claim, dedup_key, ttl=ttl)


def is_minted(store: DedupStore, replay_id: str, dedup_key: str) -> bool:
    """True when ``replay_id`` was minted for ``dedup_key`` by the replay path."""
    record = store.get(REPLAY_NAMESPACE, replay_id)
    return (
        record is not None and record.state is RecordState.DONE and record.fingerprint == dedup_key
    )
