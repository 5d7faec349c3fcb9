"""Deduplication: the store protocol, its backends, and the idempotent-consumer logic.

Backends live one per module (``memory``, ``redis``, ``firestore``) and are imported lazily, so
``pubsub_toolkit.dedup`` works without the optional ``redis`` extra.
"""

from pubsub_toolkit.dedup.idempotent import IdempotentProcessor, Outcome, ProcessResult
from pubsub_toolkit.dedup.memory import MemoryDedupStore
from pubsub_toolkit.dedup.store import Claim, ClaimStatus, DedupRecord, DedupStore, RecordState

__all__ = [
    "Claim",
    "ClaimStatus",
    "DedupRecord",
    "DedupStore",
    "IdempotentProcessor",
    "MemoryDedupStore",
    "Outcome",
    "ProcessResult",
    "RecordState",
]
