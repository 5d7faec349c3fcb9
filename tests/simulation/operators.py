"""The operator: after the faults stop, acts on what the alerts and the dead letters say.

An operator reads ALERTs and the dead-letter topic, never the simulation's ledger: the letters
are read with the operator's own tooling (the CLI's ``dead_letters.listing.read_letter``,
what ``pubsub-toolkit dlq list`` shows: the original message, its group and number, the reason).
For each group that has not reached its last published number, once the system is quiet:

* a group **blocked** on poison (an ALERT said so): ``FifoGate.replay`` it once (the cause may
  have been fixed), and ``FifoGate.skip`` the number if it blocks again;
* a group **waiting** for a number that Pub/Sub's own dead-letter policy forwarded (its
  attempts ran out while the pipeline could not take it; the guarantees' weaker case 5):
  ``dlq replay`` that letter once (the library's replay: the replay id minted in ingress's
  store, the original published to origin), and skip the number if the group still waits;
* a group **waiting** for a number: skip it when an ALERT for the group was logged and the
  dead-letter topic holds that number (it will not come), or the number never reached the
  origin topic (a reserved number whose publish failed: the ``Publisher`` logged that it
  "stays unused", README "Numbering"), or - under the rollback relaxation
  (:mod:`.weaker_guarantees`) - on the ALERT alone.

Anything else stays stuck, and invariant 4 reports it: nothing explained why.
"""

from __future__ import annotations

from typing import Any

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.dead_letters.replay import is_minted, mint
from pubsub_toolkit.message import OutboundMessage
from pubsub_toolkit_cli.dead_letters.listing import REASON_FORWARDED, DeadLetter, read_letter
from pubsub_toolkit_cli.dead_letters.replay import never_replayed
from tests.simulation.components import CONSUMER_ID, ORIGIN, TTL, build_gate
from tests.simulation.ledger import OperatorAction
from tests.simulation.process import Process
from tests.simulation.pubsub import SOURCE_SUBSCRIPTION_ATTRIBUTE

MAX_ACTIONS = 200
ORIGIN_PUSH = "origin-push"  # the origin subscription (world._wire_topics)


class Operator:
    def __init__(self, world: Any) -> None:
        self._w = world
        self._replayed: set[tuple[str, int]] = set()
        self._replayed_letters: set[str] = set()  # the keys of messages `dlq replay` sent again
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
        for letter, source, at in self._listing():
            # `dlq replay` of what Pub/Sub forwarded from the origin subscription outside groups
            # (ingress could not take it while the store was down): once each, now that the
            # faults are over, and - as docs/how-to/operate.md says - within DEDUP_TTL of the
            # letter (later, the records that make a replay of a message that did run a
            # duplicate have expired).
            recent = w.loop.now - at < TTL.total_seconds()
            forwarded = letter.reason == REASON_FORWARDED and source == ORIGIN_PUSH
            if forwarded and recent and letter.group is None:
                acted |= self._replay_once(letter)
        targets = w.targets()
        for group in sorted(targets):
            # Where the group stands - an expired idle record is a group that went quiet
            # (its status says so), not one back at 0.
            state = w.db.fifo_position(CONSUMER_ID, group)
            if state.last_processed >= targets[group]:
                continue
            head = state.last_processed + 1
            listed = [(d, at) for d, _, at in self._listing() if d.group == group and d.seq == head]
            letters = [d for d, _ in listed]
            by_pubsub = [(d, at) for d, at in listed if d.reason == REASON_FORWARDED]
            if state.blocked_at is None and by_pubsub and (group, head) not in self._replayed:
                # The letter explains the wait by itself (`status` shows the group waiting at
                # the number `dlq list` shows forwarded): replay it, no ALERT needed - within
                # DEDUP_TTL of the letter (docs/how-to/operate.md). Later, ingress has forgotten
                # the key, so a copy a producer's retry put at another number would run again
                # (seed 37470): the operator skips the number instead, the letter keeps it - as
                # when `dlq replay` keeps the letter (no dedup_key: seed 1638).
                held, forwarded_at = by_pubsub[0]
                kept = never_replayed(held)
                if kept:
                    w.trace.add(f"OPERATOR dlq replay {held.replay_key} kept: {kept[:80]}")
                    acted |= self._do(group, head, "skip", "its dead letter is kept")
                elif w.loop.now - forwarded_at < TTL.total_seconds():
                    acted |= self._replay_letter(group, head, held)
                else:
                    acted |= self._do(group, head, "skip", "dead letter forwarded past DEDUP_TTL")
                continue
            alerted = any(d.get("fifo_group") == group for d in w.ledger.decisions)
            if not alerted:
                continue
            if state.blocked_at is not None:
                acted |= self._unblock(group, head)
                continue
            unused = not any(o.group == group and o.seq == str(head) for o in w.ledger.origins)
            if letters:
                acted |= self._do(group, head, "skip", f"dead letter {letters[0].reason}")
            elif unused:
                acted |= self._do(group, head, "skip", "never published (the Publisher's warning)")
            elif w.relax_operator:
                acted |= self._do(group, head, "skip", "ALERT after a store rollback")
        return acted

    def _letters(self) -> list[DeadLetter]:
        """The dead-letter topic as ``dlq list`` shows it: each letter read by the library."""
        return [letter for letter, _, _ in self._listing()]

    def _listing(self) -> list[tuple[DeadLetter, str, float]]:
        """Each letter, the subscription Pub/Sub forwarded it from ("" for the toolkit's own
        letters), and when it reached the dead-letter topic."""
        out = []
        for received, at in self._w.dead_letter_topic:
            reading = read_letter(received)
            letter = DeadLetter(
                reading.message,
                reading.reason,
                reading.detail,
                None,
                ack_id=received.message_id,
                dead_letter_id=received.message_id,
                unreadable=reading.unreadable,
            )
            out.append((letter, received.attributes.get(SOURCE_SUBSCRIPTION_ATTRIBUTE, ""), at))
        return out

    def _replay_once(self, letter: DeadLetter) -> bool:
        if letter.replay_key in self._replayed_letters:
            return False  # once per message: a poison message is forwarded again
        self._replayed_letters.add(letter.replay_key)
        return self._replay_letter(None, None, letter)

    def _replay_letter(self, group: str | None, head: int | None, letter: DeadLetter) -> bool:
        """``dlq replay`` of one letter, as the CLI's ``dead_letters.replay`` does it: a letter
        the tool keeps (``never_replayed``) stays; else mint the replay id in ingress's store,
        then publish the original to origin with it."""
        w = self._w
        kept = never_replayed(letter)
        if kept:
            w.trace.add(f"OPERATOR dlq replay {letter.replay_key} kept: {kept[:80]}")
            return False
        self._replayed.add((str(group), head or 0))
        process = self._process_for_io()
        key = letter.replay_key
        store = w.boundaries.store_view(process, "dedup")
        try:
            mint(store, letter.dead_letter_id, key)
            if not is_minted(store, letter.dead_letter_id, key):
                raise RuntimeError("the replay id could not be minted")
            attributes = {
                **letter.message.attributes,
                attr.DEDUP_KEY: key,
                attr.REPLAY_ID: letter.dead_letter_id,
            }
            w.boundaries.sink(process).publish(
                ORIGIN, OutboundMessage(letter.message.data, attributes, ordering_key=group or "")
            )
        except Exception as exc:  # the operator tries again at the next round
            self._replayed.discard((str(group), head or 0))
            self._replayed_letters.discard(letter.replay_key)
            w.trace.add(f"OPERATOR dlq replay {letter.replay_key} failed: {exc}")
            return False
        why = f"dlq replay of the letter Pub/Sub forwarded ({letter.dead_letter_id})"
        w.trace.add(f"OPERATOR dlq replay {letter.replay_key} ({group}#{head}): {why}")
        w.ledger.operator.append(
            OperatorAction(w.loop.now, group or "", head or 0, "dlq_replay", why, key)
        )
        return True

    def _process_for_io(self) -> Process:
        if self._process is None or not self._process.alive:
            clock = self._w.consumers.slots[0].process.clock
            self._process = Process("operator", 0, 0, clock, lambda p, s: None)
        return self._process

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
