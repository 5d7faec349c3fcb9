"""The gate's transactional mode on Firestore: the handler's writes and the advance commit
together, so a failure between them leaves neither, and a redelivery applies both once."""

from __future__ import annotations

from typing import Any

import pytest
from google.cloud import firestore

from pubsub_toolkit.fifo.firestore_state import FirestoreFifoStore
from pubsub_toolkit.fifo.gate import FifoGate, GateOutcome, HandlerFailedError
from pubsub_toolkit.fifo.memory_state import MemoryFifoStore
from pubsub_toolkit.message import Message


def msg(seq: int) -> Message:
    return Message(f"step {seq}".encode(), {"fifo_group": "g", "fifo_seq": str(seq)})


def test_effects_and_advance_commit_together(firestore_emulator: str, project_id: str) -> None:
    client = firestore.Client(project=project_id)
    effects = client.collection("effects")
    crash_once = {3}

    def handler(message: Message, transaction: Any) -> None:
        seq = int(message.attributes["fifo_seq"])
        transaction.set(effects.document(f"g-{seq}"), {"seq": seq, "data": message.data.decode()})
        if seq in crash_once:  # the write is buffered; failing now must leave nothing behind
            crash_once.discard(seq)
            raise RuntimeError("crashed between the effect and the commit")

    store = FirestoreFifoStore(client)
    gate = FifoGate(
        store, consumer="tx-consumer", handler=lambda m: None, transactional_handler=handler
    )
    for seq in (2, 1, 4):  # 2 and 4 park; 1 runs and releases 2
        gate.deliver(msg(seq), "g", seq)
    assert sorted(d.id for d in effects.stream()) == ["g-1", "g-2"]
    with pytest.raises(HandlerFailedError):
        gate.deliver(msg(3), "g", 3)
    assert sorted(d.id for d in effects.stream()) == ["g-1", "g-2"]  # no effect for 3
    assert store.load("tx-consumer", "g").last_processed == 2  # and no advance past it
    assert gate.deliver(msg(3), "g", 3).outcome is GateOutcome.PROCESSED  # the redelivery
    assert gate.deliver(msg(3), "g", 3).outcome is GateOutcome.DUPLICATE
    assert sorted(d.id for d in effects.stream()) == ["g-1", "g-2", "g-3", "g-4"]
    assert store.load("tx-consumer", "g").last_processed == 4


def test_transactional_mode_needs_a_transactional_store() -> None:
    with pytest.raises(ValueError, match="commit_with"):
        FifoGate(
            MemoryFifoStore(),
            consumer="c",
            handler=lambda m: None,
            transactional_handler=lambda m, t: None,
        )
