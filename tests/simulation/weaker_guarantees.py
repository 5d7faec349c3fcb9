"""The weaker guarantees the checker accepts - every relaxation of DESIGN.md's promise, here.

The guarantee (DESIGN.md, "The guarantee, stated so a checker can hold us to it") is checked
in :mod:`.invariants` at full strength, except in exactly these cases, which the README states:

1. **Store rollback** (a schedule with a ``store_rollback`` fault: Redis restarted without
   persistence, a failover to a replica behind). Acknowledged writes are lost, so the
   toolkit can detect and report, not prevent:

   * invariant 1 becomes "no logical message lost silently": its effect at least once or
     dead-lettered with a reason, and a message may be both; an effect may repeat, but only on
     another process than the one that ran it before (each process's witness remembers what
     it wrote, README "What a store can lose") - except that
     a message the consumer parked (and acked) before or while the store lost writes may
     be gone - its copy was written before the loss, whatever the ack's timing: the gate
     names such messages in a ``store_rollback`` ALERT when the process that parked them
     still runs, and nobody can when it restarted (README, "What a store can lose": the
     residue); and a copy parked after the loss at a number the store gave again, when the
     consumer has no dead-letter topic to keep it, goes to the operator whole in a
     ``reissued_unkept`` ALERT (its data and attributes), not to the handler;
   * invariant 2 (publish order, no number twice) is not checked;
   * invariant 4: a group may need an operator to skip a number the rollback made it wait
     for (the operator skips on a gap ALERT even without a dead letter), and the store's
     record of a group's position may stay behind what was processed (the gate's witness
     repairs it at the group's next delivery, if any): a group's end is then judged by its
     messages (the relaxed invariant 1), not by the stored position;
   * invariant 7 (no false ALERT): a claim the store forgot makes a true alarm that no
     takeover explains, so it is not checked;
   * invariant 5 (cancel's answer): the tombstone ``cancel()`` wrote can be among the lost
     writes, and the message is then released after all; only "said delivered, never was"
     is still checked;
   * invariant 3 (never early) and the rest still hold.

2. **The two-phase window** (README, "The limit of the two-phase mode"): an effect - or a
   dead letter - made by a delivery that then did not finish (its process crashed, or the
   store failed before the result was recorded) may happen again on the redelivery. The
   ledger marks such outputs *at risk*; only those may repeat. Everything else that repeats,
   including a dead letter repeated because a delivery came twice, is a violation. An at-risk
   effect is one the toolkit could not record: for the toolkit the message is still to do, so
   it may also end dead-lettered (say its number was taken meanwhile) - not "both" - and its
   FIFO number may run again with another message.

3. **Clock skew**: a component can only be as right as its clock. The one that releases a
   delayed message (the relay, or ingress publishing at once) may do so early by as much as
   its clock runs ahead of true time, never more (a relay with an accurate clock never
   publishes early; a hop released at the horizon would be days early and is reported).

4. **A number taken by another producer** (``hostile_producer`` publishing a different
   message at a number the counter gave a legitimate one): the gate keeps the first message
   at that number and dead-letters the other with ``fifo_sequence_reused`` and an ALERT
   (defect 9). If the dead-lettered one was the legitimate message and its producer also
   retried it at another number, that copy may run: the victim may then be both run and
   dead-lettered, and run out of publish order. Nothing is lost or run twice. And the gate
   tells messages at a number apart by the keys of the group's last 64 numbers (and each
   process by the keys it ran itself): a hostile message at a number further back than that,
   on a process that did not run the number, cannot be told from a redelivery of the message
   that ran there, and is acked as a duplicate (``forgotten_reuse``; seed 1361 of
   ``--enable renumber_far``). The legitimate message ran once.

5. **Pub/Sub's own dead-letter policy** forwards a message after N failed delivery attempts
   even when an earlier attempt had its effect (the attempts that failed were copies). A
   forwarded copy next to an effect is therefore not "both". And a FIFO message Pub/Sub
   dead-letters from the *origin* subscription (its attempts ran out while ingress could not
   handle it, e.g. a crashed holder's lease) never reaches the gate: its group waits at that
   number, explained by that dead letter, until it is replayed (``dlq replay``) or skipped.

6. **The relay's last Cloud Tasks attempt** (``delay/last_attempt.py``): when the relay's store
   is down for the queue's whole retry budget, the last attempt hands the message to a new task
   (an ALERT ``relay_deferred``) and only dead-letters it (``relay_store_unavailable`` /
   ``relay_retries_exhausted``) when no new task can be made. If an earlier run - on another
   instance, or on one that restarted since - had published it to the final topic and then
   failed before recording that, such a dead-lettered message is *both* delivered and
   dead-lettered (the letter's detail says it may be; a replay is a duplicate to consumers).
   Excused only for those reasons, and only when a run that published the message to the final
   topic did not end done (its publish at risk). And a message a producer's retry put at two
   FIFO numbers has a task per number: each last attempt, knowing nothing of the other copy,
   handles its own (two letters, or a letter next to the effect the other number ran); and
   when its group skipped both numbers while the tasks waited (a days-long outage past the gap
   timeout), each copy arriving late is dead-lettered ``fifo_late_after_skip`` at its own
   number (seed 24633).

7. **A producer's retry far from its first copy** (guarantees.md, "Producer retries through one
   ``Publisher``"): a retry renumbered more than the gate's key window (64) after its first
   copy, whose copy reached ingress first, runs once at the later number - after the messages
   published between the two (invariant 2 not checked for that effect; seeds 85879, 95276).
   When both copies reached the final topic (an ingress published the first and crashed before
   recording it) and the later number is past the group's end, the message ran at its first
   number and the later copy is dead-lettered ``fifo_after_end`` (seed 273).

8. **An operator's replay** (guarantees.md, item 7): a number of a group the operator replayed
   (``fifo replay`` after a poison ALERT) is a new attempt at its dead-lettered head - it may
   then have its effect, or be dead-lettered again, beside its first letter
   (``invariants._exactly_once``: ``replayed``) - and a message outside groups the operator
   ``dlq replay``-ed may be dead-lettered once more per replay (``retries``; seed 224000 with
   ``--enable handler_permanent``: its handler refused again).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

from pubsub_toolkit.message import Message
from pubsub_toolkit.stores.fifo_state.base import KEY_WINDOW
from tests.simulation.ledger import DeadLetter, Decision, Ledger

# The ALERTs that carry a parked copy whole when no dead-letter topic can keep it.
HANDED_OVER = frozenset(
    {"reissued_unkept", "restarted_unkept", "after_end_dropped", "handover_unconfirmed"}
)
LAST_ATTEMPT_REASONS = frozenset({"relay_store_unavailable", "relay_retries_exhausted"})


def _alerts(ledger: Ledger) -> list[Decision]:
    return [d for d in ledger.decisions if "ALERT" in d.text or d.get("alert")]


def _named(ledger: Ledger) -> tuple[frozenset[str], frozenset[str]]:
    """The logical messages and the groups an ALERT named (by key, by group, by data)."""
    lids: set[str] = set()
    groups: set[str] = set()
    # a message without a dedup key is keyed by its origin message id
    ids = {o.message_id: o.lid for o in ledger.origins if o.lid is not None}
    for d in _alerts(ledger):
        if d.get("fifo_group"):
            groups.add(str(d.get("fifo_group")))
        key = str(d.get("dedup_key") or "").split("#")[0]
        lid = ledger.keys.get(key) or ids.get(key)
        if lid is not None:
            lids.add(lid)
        # and every message whose effect ran under that key by then (a foreign copy of the key)
        lids.update(ledger.lids_of_key(key, d.at))
        data = d.get("data_base64")
        if data:
            named = ledger.lid_of(Message(base64.b64decode(data), {}))
            if named is not None:
                lids.add(named)
    return frozenset(lids), frozenset(groups)


def _forgotten_reuse(ledger: Ledger) -> frozenset[str]:
    """Hostile messages published at a number more than the gate's key window behind the
    highest number its group had published by then (weaker guarantee 4)."""
    out = set()
    for o in ledger.origins:
        if not (o.hostile and o.group and o.seq and o.lid and o.seq.isdigit()):
            continue
        highest = max(
            (
                int(p.seq)
                for p in ledger.origins
                if p.group == o.group and not p.hostile and p.seq and p.at <= o.at
            ),
            default=0,
        )
        if int(o.seq) <= highest - KEY_WINDOW:
            out.add(o.lid)
    return frozenset(out)


def _far_copies(ledger: Ledger) -> tuple[tuple[str, int, int], ...]:
    """Messages a producer's retry published at numbers more than the key window apart."""
    numbers: dict[str, set[int]] = {}
    for o in ledger.origins:
        if o.lid and o.seq and o.seq.isdigit() and not o.hostile:
            numbers.setdefault(o.lid, set()).add(int(o.seq))
    return tuple(
        sorted(
            (lid, min(seqs), max(seqs))
            for lid, seqs in numbers.items()
            if max(seqs) - min(seqs) > KEY_WINDOW
        )
    )


@dataclass(frozen=True)
class Relaxation:
    """What one schedule's checker may accept (see the module docstring).

    ``rollback`` is true only when the store actually lost a write (a planned rollback that
    lost nothing switches no check off), and each excuse of weaker guarantee 1 applies to a
    message only where an ALERT named it or its group (``named``)."""

    rollback: bool
    at_risk: frozenset[tuple[str, str]]
    reached_gate: tuple[tuple[str, float], ...]
    last_rollback: float
    victims: frozenset[str] = frozenset()
    handed_over: frozenset[str] = frozenset()
    named_lids: frozenset[str] = frozenset()
    named_groups: frozenset[str] = frozenset()
    groups_of: tuple[tuple[str, str], ...] = ()  # lid -> its FIFO group
    strict: bool = False  # False: a store loss excuses every message, named or not (today's)
    silent_risk: frozenset[str] = frozenset()  # effects at risk only by a live error
    renumbered: frozenset[str] = frozenset()  # published at more than one FIFO number
    # hostile messages at a number further back than the gate's key window (weaker 4)
    forgotten_reuse: frozenset[str] = frozenset()
    # lids a producer's retry put more than the key window apart: (lid, first, last number)
    far_copies: tuple[tuple[str, int, int], ...] = ()

    @classmethod
    def for_schedule(cls, ledger: Ledger, *, strict: bool = False) -> Relaxation:
        stolen = {(o.group, o.seq) for o in ledger.origins if o.hostile and o.group}
        victims = {
            o.lid
            for o in ledger.origins
            if not o.hostile and o.lid is not None and (o.group, o.seq) in stolen
        }
        # A copy parked at a number the store gave again, or past its group's end, with no
        # dead-letter topic to keep it: its ALERT carries the message whole, for the operator
        # (not lost silently).
        handed_over = {
            ledger.lid_of(Message(base64.b64decode(d.get("data_base64") or ""), {}))
            for d in ledger.decisions
            if d.outcome in HANDED_OVER
        }
        lids, groups = _named(ledger)
        return cls(
            forgotten_reuse=_forgotten_reuse(ledger),
            far_copies=_far_copies(ledger),
            victims=frozenset(victims),
            handed_over=frozenset(lid for lid in handed_over if lid is not None),
            rollback=bool(ledger.rollbacks),
            at_risk=frozenset(ledger.at_risk),
            reached_gate=tuple(sorted(ledger.reached_gate.items())),
            last_rollback=max(ledger.rollbacks, default=float("-inf")),
            named_lids=lids,
            named_groups=groups,
            groups_of=tuple(
                sorted({(o.lid, o.group) for o in ledger.origins if o.lid and o.group})
            ),
            strict=strict,
            renumbered=frozenset(
                lid
                for lid in {o.lid for o in ledger.origins if o.lid and o.seq and not o.hostile}
                if len({o.seq for o in ledger.origins if o.lid == lid and not o.hostile}) > 1
            ),
            silent_risk=frozenset(
                lid for kind, lid in ledger.error_risk - ledger.crash_risk if kind == "effect"
            ),
        )

    def named(self, lid: str | None) -> bool:
        """Did an ALERT name ``lid`` or its group (and did the store lose writes at all)?"""
        if not self.rollback or lid is None:
            return False
        if not self.strict:
            return True
        group = dict(self.groups_of).get(lid)
        return lid in self.named_lids or (group is not None and group in self.named_groups)

    def group_named(self, group: str) -> bool:
        return self.rollback and (not self.strict or group in self.named_groups)

    def may_be_lost(self, lid: str) -> bool:
        """Acked by the consumer before the store lost writes - the rollback's residue -
        and named by an ALERT; or handed to the operator whole."""
        if lid in self.forgotten_reuse:
            return True  # weaker 4: acked as a redelivery of the number's own message
        reached = dict(self.reached_gate).get(lid)
        before = reached is not None and reached <= self.last_rollback
        return lid in self.handed_over or (self.rollback and before and self.named(lid))

    def effect_at_risk(self, lid: str) -> bool:
        """The effect ran but the toolkit could not record it (the two-phase window)."""
        return ("effect", lid) in self.at_risk

    def alerted(self, lid: str) -> bool:
        """Did any ALERT name ``lid`` or its group (store loss or not)?"""
        group = dict(self.groups_of).get(lid)
        return lid in self.named_lids or (group is not None and group in self.named_groups)

    def repeat_excused(self, lid: str, processes: list[str]) -> bool:
        """May ``lid``'s effect have run on each of ``processes`` (in order)? The two-phase
        window excuses a rerun after a crash; after an error the process lived through, only
        if an ALERT said so ("effect done but not recorded")."""
        if self.effect_at_risk(lid) and (lid not in self.silent_risk or self.alerted(lid)):
            return True
        return self.named(lid) and len(set(processes)) == len(processes)

    def dead_letter_may_repeat(self, lid: str, reason: str) -> bool:
        # A victim may lose more than one of its numbers (each copy is dead-lettered once).
        victim = lid in self.victims and reason == "fifo_sequence_reused"
        at_risk = (f"dead_letter:{reason}", lid) in self.at_risk
        return self.named(lid) or victim or at_risk or self._copy_gave_up(lid, reason)

    def counts_as_both(self, lid: str, letter: DeadLetter) -> bool:
        """Does this dead letter next to ``lid``'s effect break "never both"?"""
        excused = self.named(lid) or self.effect_at_risk(lid) or lid in self.victims
        # weaker 6: the relay's last attempt, after a run that published and could not record
        unrecorded = letter.reason in LAST_ATTEMPT_REASONS and ("final", lid) in self.at_risk
        # weaker 7: a far retry's later copy past its group's end, next to the first copy an
        # ingress published and could not record (the two-phase window; seed 273)
        past_end = (
            letter.reason == "fifo_after_end"
            and ("final", lid) in self.at_risk
            and self.ran_at_later_copy(lid, letter.seq)
        )
        gave_up = self._copy_gave_up(lid, letter.reason)
        return not (excused or unrecorded or past_end or gave_up) and (letter.source != "pubsub")

    def _copy_gave_up(self, lid: str, reason: str) -> bool:
        """weaker 6: a renumbered copy's own task, dead-lettered on its last attempt, or late
        at a number its group skipped while the task waited."""
        own = reason in LAST_ATTEMPT_REASONS or reason == "fifo_late_after_skip"
        return own and lid in self.renumbered

    def early_tolerance(self, releaser_ahead: float) -> float:
        """How early (seconds, true time) a release may be when its releaser's clock runs
        ``releaser_ahead`` seconds ahead."""
        return releaser_ahead + 1e-6

    def checks_order(self, group: str) -> bool:
        return not self.group_named(group)

    def ran_at_later_copy(self, lid: str, seq: str | None) -> bool:
        """The documented renumbered-retry case (guarantees.md, "Producer retries"): a retry
        more than the key window after its first copy reached ingress first, so the message
        ran once at the later number - after what was published between (seeds 85879,
        95276)."""
        return any(
            far == lid and seq is not None and seq.isdigit() and int(seq) > first
            for far, first, _ in self.far_copies
        )

    def cancel_may_be_undone(self, lid: str) -> bool:
        return self.named(lid)

    @property
    def checks_alarms(self) -> bool:
        return not self.rollback

    def checks_group_position(self, group: str) -> bool:
        """Liveness is checked after every heal, but after a store loss not for a group an
        ALERT named (strict) or for any group (default); there by its messages (the stored
        position may lag)."""
        return not self.group_named(group)

    @property
    def operator_skips_unexplained_gaps(self) -> bool:
        return self.rollback
