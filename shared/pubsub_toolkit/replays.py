"""Replay tokens: only the dead-letter replay path can mint a ``replay_id``.

Ingress claims a replay under ``dedup_key#replay:REPLAY_ID`` so that a message already recorded
(as dead-lettered) can run again. If producers could set ``replay_id`` themselves, any producer
could push a delivered key through ingress dedup a second time. So a replay id is only honoured
when the store holds a *mint* record for it - written by :func:`mint` in ``dlq replay`` just
before it publishes - naming the same dedup key. Ingress dead-letters a message whose
``replay_id`` was never minted (``forged_replay_id``).
"""

from __future__ import annotations

from datetime import timedelta

from pubsub_toolkit.dedup.store import DedupStore, RecordState

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
