"""The gate's transactional mode on Firestore: the handler's writes and the advance commit
together, so a failure between them leaves neither, and a redelivery applies both once.

The state is read outside the transaction (a read inside would lock the group's document for
the whole handler), so other writers of the group go on while a handler runs, and the commit's
``last_update_time`` precondition catches what they changed: a park → run again on the new
state; a takeover → StaleClaimError. A commit whose reply was lost is recognised as ours.
"""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from google.api_core import exceptions as gexc
from google.cloud import firestore
from google.cloud.firestore_v1.transaction import Transaction

from pubsub_toolkit.consumer.gate import FifoGate, HandlerFailedError
from pubsub_toolkit.core.fifo_policy import GateOutcome, GatePolicy
from pubsub_toolkit.errors import StaleClaimError
from pubsub_toolkit.message import Message
from pubsub_toolkit.stores.fifo_state.base import GroupState
from pubsub_toolkit.stores.fifo_state.firestore import FirestoreFifoStore
from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore


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
        store,
        consumer="tx-consumer",
        handler=lambda m: None,
        transactional_handler=handler,
        policy=GatePolicy(retry_backoff=timedelta(0)),  # the redelivery may run at once
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


def test_a_transactional_batch_commits_its_effects_with_one_advance(
    firestore_emulator: str, project_id: str
) -> None:
    client = firestore.Client(project=project_id)
    effects = client.collection("batch-effects")
    failures_left = {6: 2}  # the batch holding #6, then #6 alone
    calls: list[list[int]] = []

    def handler(messages: list[Message], transaction: Any) -> None:
        numbers = [int(m.attributes["fifo_seq"]) for m in messages]
        calls.append(numbers)
        for seq in numbers:
            transaction.set(effects.document(f"g-{seq}"), {"seq": seq})
        if 6 in numbers and failures_left[6]:  # buffered writes: nothing of it may land
            failures_left[6] -= 1
            raise RuntimeError("failed after writing the batch's effects")

    store = FirestoreFifoStore(client)
    gate = FifoGate(
        store,
        consumer="tx-batch",
        handler=lambda m: None,
        transactional_handler=handler,  # type: ignore[arg-type]  # batch mode: lists
        policy=GatePolicy(retry_backoff=timedelta(0)),
        batch=10,
    )
    deliveries = [(msg(seq), seq) for seq in range(1, 6)]
    assert all(not isinstance(r, Exception) for r in gate.deliver_batch("g", deliveries))
    assert calls == [[1, 2, 3, 4, 5]]  # one list, one commit
    assert store.load("tx-batch", "g").last_processed == 5
    gate.deliver_batch("g", [(msg(seq), seq) for seq in range(6, 9)])
    # The batch failed and nothing of it committed; one at a time #6 failed alone (its copy is
    # parked for the retry), and the rest ran after it - each number committed once.
    assert calls[1:3] == [[6, 7, 8], [6]]
    for _ in range(3):
        gate.sweep("g")
    committed = [n for call in calls if not (6 in call and call != [6]) for n in call]
    assert committed[5:] == [6, 6, 7, 8]  # #6's two lone attempts (the first failed), #7, #8
    assert sorted(int(d.id.split("-")[1]) for d in effects.stream()) == list(range(1, 9))
    assert store.load("tx-batch", "g").last_processed == 8


def test_transactional_mode_needs_a_transactional_store() -> None:
    with pytest.raises(ValueError, match="commit_with"):
        FifoGate(
            MemoryFifoStore(),
            consumer="c",
            handler=lambda m: None,
            transactional_handler=lambda m, t: None,
        )


def test_another_writer_saves_the_group_state_while_the_handler_runs(
    firestore_emulator: str, project_id: str
) -> None:
    # Defect 7b: a read of the state inside the transaction locks the group's document for the
    # whole handler (the emulator too: the other writer waits ~2 s, then fails Aborted).
    client = firestore.Client(project=project_id)
    other = FirestoreFifoStore(firestore.Client(project=project_id))  # another consumer process
    effects = client.collection("effects")
    runs: list[int] = []
    parking_took: list[float] = []

    def handler(message: Message, transaction: Any) -> None:
        runs.append(int(message.attributes["fifo_seq"]))
        transaction.set(effects.document("g-1"), {"run": len(runs)})
        if len(runs) == 1:  # meanwhile, another process parks an early arrival of the group
            started = time.monotonic()
            other.park("tx-consumer", "g", 3, msg(3))
            state = other.load("tx-consumer", "g")
            assert other.save("tx-consumer", "g", state.with_parked(3), state)
            parking_took.append(time.monotonic() - started)

    store = FirestoreFifoStore(client)
    gate = FifoGate(
        store, consumer="tx-consumer", handler=lambda m: None, transactional_handler=handler
    )
    assert gate.deliver(msg(1), "g", 1).outcome is GateOutcome.PROCESSED
    assert parking_took[0] < 1.0, f"the other writer waited {parking_took[0]:.1f}s"
    # Its save made our commit's precondition fail whole; the handler ran again on the new
    # state, and only that run committed - with the park kept, not overwritten.
    assert runs == [1, 1]
    assert effects.document("g-1").get().to_dict() == {"run": 2}
    state = store.load("tx-consumer", "g")
    assert (state.last_processed, state.parked) == (1, (3,))
    assert store.parked_message("tx-consumer", "g", 3) is not None


def test_a_takeover_while_the_handler_runs_fences_its_writes(
    firestore_emulator: str, project_id: str
) -> None:
    client = firestore.Client(project=project_id)
    other = FirestoreFifoStore(firestore.Client(project=project_id))
    store = FirestoreFifoStore(client)
    assert store.save("c", "g", replace(GroupState(), lease_token=1), GroupState())
    effects = client.collection("effects")

    def writes(transaction: Any) -> None:
        transaction.set(effects.document("late"), {"n": 1})
        state = other.load("c", "g")  # our lease expired; another worker takes the group
        assert other.save("c", "g", replace(state, lease_token=2), state)

    with pytest.raises(StaleClaimError, match="lease 1 was taken over"):
        store.commit_with("c", "g", token=1, change=lambda s: s.advanced_to(1), writes=writes)
    assert not effects.document("late").get().exists
    assert store.load("c", "g").last_processed == 0


def test_a_lost_commit_reply_is_not_a_handler_failure(
    firestore_emulator: str, project_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The commit applies and its reply is lost; the client's rollback of a transaction no
    # longer in progress then raises ValueError. The advance is ours: processed, run once.
    client = firestore.Client(project=project_id)
    real_commit = Transaction._commit

    def commit_then_lose_reply(self: Transaction) -> list[Any]:
        real_commit(self)
        raise gexc.DeadlineExceeded("commit reply lost")

    runs: list[int] = []
    store = FirestoreFifoStore(client)
    gate = FifoGate(
        store,
        consumer="tx-consumer",
        handler=lambda m: None,
        transactional_handler=lambda m, tx: runs.append(1),
    )
    monkeypatch.setattr(Transaction, "_commit", commit_then_lose_reply)
    assert gate.deliver(msg(1), "g", 1).outcome is GateOutcome.PROCESSED
    monkeypatch.undo()
    assert runs == [1]
    state = store.load("tx-consumer", "g")
    assert (state.last_processed, state.attempts) == (1, 0)
