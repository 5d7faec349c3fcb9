"""FIFO per group: the sequencer's counters (publisher side).

The :class:`SequenceCounter` protocol hands out 1-based, contiguous, never-shared numbers per
group. Backends live one per module (``memory_counter``, ``redis_counter``,
``firestore_counter``); only the in-memory one is imported here, so ``pubsub_toolkit.fifo``
works without the optional ``redis`` extra.
"""

from pubsub_toolkit.fifo.counter import SequenceBlock, SequenceCounter
from pubsub_toolkit.fifo.memory_counter import MemorySequenceCounter

__all__ = ["MemorySequenceCounter", "SequenceBlock", "SequenceCounter"]
