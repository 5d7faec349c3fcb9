"""The operator: after the faults stop, acts on what the alerts and the dead letters say.

An operator reads ALERTs and the dead-letter topic, never the simulation's ledger. For each
group that has not reached its last published number, once the system is quiet:

* a group **blocked** on poison (an ALERT said so): ``FifoGate.replay`` it once (the cause may
  have been fixed), and ``FifoGate.skip`` the number if it blocks again;
* a group **waiting** for a number: skip it when an ALERT for the group was logged and the
  dead-letter topic holds that number (it will not come), or the number never reached the
  origin topic (a reserved number whose publish failed: the ``Publisher`` logged that it
  "stays unused", README "Numbering"), or - under the rollback relaxation
  (:mod:`.weaker_guarantees`) - on the ALERT alone.

Anything else stays stuck, and invariant 4 reports it: nothing explained why.
"""

from __future__ import annotations

from typing import Any

from tests.simulation.components import CONSUMER_ID, build_gate
from tests.simulation.ledger import OperatorAction
from tests.simulation.process import Process

MAX_ACTIONS = 200


class Operator:
    def __init__(self, world: Any) -> None:
        self._w = world
        self._replayed: set[tuple[str, int]] = set()
        self._process: Process | None = None

    def _gate(self) -> Any:
        w = self._w
        process = Process("operator", 0, 0, w.consumers.slots[0].process.clock, lambda p, s: None)

        def handler(message: Any) -> None:
            raise AssertionError("the operator's gate never runs a handler (run=False)")

        return build_gate(w, process, handler)

    def act(self) -> bool:
        """One round over every group; True if anything was done."""
        w = self._w
        if len(w.ledger.operator) >= MAX_ACTIONS:
            return False
        acted = False
        targets = w.targets()
        for group in sorted(targets):
            # Where the group stands - an expired idle record is a group that went quiet
            # (its status says so), not one back at 0.
            state = w.db.fifo_position(CONSUMER_ID, group)
            if state.last_processed >= targets[group]:
                continue
            head = state.last_processed + 1
            alerted = any(d.get("fifo_group") == group for d in w.ledger.decisions)
            if not alerted:
                continue
            if state.blocked_at is not None:
                acted |= self._unblock(group, head)
                continue
            letters = [d for d in w.ledger.dead_letters if d.group == group and d.seq == str(head)]
            unused = not any(o.group == group and o.seq == str(head) for o in w.ledger.origins)
            if letters:
                acted |= self._do(group, head, "skip", f"dead letter {letters[0].reason}")
            elif unused:
                acted |= self._do(group, head, "skip", "never published (the Publisher's warning)")
            elif w.relax_operator:
                acted |= self._do(group, head, "skip", "ALERT after a store rollback")
        return acted

    def _unblock(self, group: str, head: int) -> bool:
        if (group, head) not in self._replayed:
            self._replayed.add((group, head))
            return self._do(group, head, "replay", "blocked on poison: replay after a fix")
        return self._do(group, head, "skip", "blocked again after the replay")

    def _do(self, group: str, seq: int, action: str, why: str) -> bool:
        w = self._w
        gate = self._gate()
        try:
            if action == "skip":
                gate.skip(group, seq, run=False)
            else:
                gate.replay(group, run=False)
        except ValueError as exc:
            w.trace.add(f"OPERATOR {action} {group}#{seq} refused: {exc}")
            return False
        w.trace.add(f"OPERATOR {action} {group}#{seq}: {why}")
        for slot in w.consumers.slots:
            w.drivers.poke(slot)  # the consumers' sweepers pick the group up within a second
        w.ledger.operator.append(OperatorAction(w.loop.now, group, seq, action, why))
        return True
