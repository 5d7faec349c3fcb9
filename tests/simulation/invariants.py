"""The invariants checked after each schedule, from the ledger (issue 11, "Build" item 3).

Numbered as in the issue and the README:

1. each logical message has its effect exactly once, or is dead-lettered with a reason -
   never both, never neither (never silently acked);
2. per FIFO group: effects in the producer's publish order, no number run twice;
3. no delayed effect (nor final-topic publish) before its due time, in true time;
4. once faults stop, every group reaches its last published number, or an ALERT and a dead
   letter explain why it stopped;
5. ``cancel()``'s answer matches what happened (False: never published to the final topic);
6. a store rollback is detected (dead letter with a reason) or falls under the weaker
   guarantee of :mod:`.weaker_guarantees` - here, "no message lost silently";

and, from the defects the issue lists: 7 no false ALERT ("effect ran after our lease expired"
without a takeover; "the store lost writes" in a schedule where it lost none); 8 a short
failure of the handler's dependency never makes a message poison; 9 a FIFO filler never reaches
the handler; 10 no task dropped by Cloud Tasks; 11 the run reaches quiescence (no crash loop);
and from issue 24: 12 a message the ``Publisher`` accepted is never refused later
(:mod:`.refusals`); 13 ``process_batch`` answers each message, or raises before it settled any
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pubsub_toolkit.attributes import parse_time
from tests.simulation.clock import to_seconds
from tests.simulation.ledger import Decision, Effect, LeaseWrite, Ledger
from tests.simulation.refusals import accepted_not_refused
from tests.simulation.weaker_guarantees import Relaxation
from tests.simulation.workload import Expect, LogicalMessage

SHORT_OUTAGE = 30.0  # seconds of handler failures that must never make a message poison
POISON = "fifo_poison"
MISMATCH = "fingerprint_mismatch"  # attributes.REASON_FINGERPRINT_MISMATCH


@dataclass(frozen=True)
class Violation:
    invariant: str
    lid: str | None
    detail: str

    def __str__(self) -> str:
        who = f" {self.lid}" if self.lid else ""
        return f"[{self.invariant}]{who}: {self.detail}"


@dataclass(frozen=True)
class Final:
    """What the run left behind, for the checker."""

    ledger: Ledger
    messages: tuple[LogicalMessage, ...]
    groups: dict[str, Any]  # group -> the consumer's final GroupState
    relax: Relaxation
    dropped_tasks: tuple[str, ...]


def check(final: Final) -> list[Violation]:
    return [
        *_exactly_once(final),
        *_fifo_order(final),
        *_never_early(final),
        *_groups_finish(final),
        *_cancel_truthful(final),
        *_no_false_alarm(final),
        *_transient_not_poison(final),
        *_filler_never_handled(final),
        *(Violation("10 no_task_dropped", None, f"task {n} dropped") for n in final.dropped_tasks),
        *(
            Violation("13 batch_answers_each", None, f"process_batch raised late ({what})")
            for what in final.ledger.batch_raised
        ),
        *(
            Violation("12 accepted_not_refused", lid, detail)
            for lid, detail in accepted_not_refused(final.ledger, final.messages)
        ),
    ]


def _by_lid(items: list[Any]) -> dict[str | None, list[Any]]:
    out: dict[str | None, list[Any]] = defaultdict(list)
    for item in items:
        out[item.lid].append(item)
    return out


def _effects(ledger: Ledger) -> list[Effect]:
    return [e for e in ledger.effects if not e.filler]


PUBSUB_DEAD_LETTER = "max_delivery_attempts"


def _exactly_once(f: Final) -> Iterator[Violation]:
    effects, letters = _by_lid(_effects(f.ledger)), _by_lid(f.ledger.dead_letters)
    published = {o.lid for o in f.ledger.origins}
    refused = {c.lid for c in f.ledger.cancels if not c.already_delivered}
    # An operator's replay of a blocked group is a new attempt at its dead-lettered head: that
    # number may then have its effect, or be dead-lettered again.
    replayed = {(a.group, str(a.seq)) for a in f.ledger.operator if a.action == "replay"}
    # An operator's skip of a group blocked on poison is an explicit, logged decision after an
    # ALERT - the only way out when the consumer has no dead-letter topic.
    dropped = {(a.group, str(a.seq)) for a in f.ledger.operator if "blocked" in a.why}
    # And an operator's `dlq replay` of a message outside groups (guarantees.md, item 7): the
    # replay runs it again, so it may be dead-lettered again - once more per replay.
    retries: dict[str, int] = defaultdict(int)
    for a in f.ledger.operator:
        if a.action == "dlq_replay" and not a.group and a.key:
            retries[a.key] += 1
    numbers = defaultdict(set)
    for o in f.ledger.origins:
        numbers[o.lid].add((o.group, o.seq))
    one = "6 rollback_detected" if f.relax.rollback else "1 exactly_once"
    for m in f.messages:
        if m.lid not in published or m.lid in refused:
            continue  # a hostile publish that never happened; cancelled ones: invariant 5
        got, dead = effects.get(m.lid, []), letters.get(m.lid, [])
        if numbers[m.lid] & dropped and not got:
            continue
        reasons = sorted({d.reason for d in dead})
        if m.expect is Expect.DEAD_LETTER:
            if got:
                yield Violation(one, m.lid, f"had its effect {len(got)}x but must be dead-lettered")
            if not dead and not f.relax.may_be_lost(m.lid):
                yield Violation(one, m.lid, "never dead-lettered (nor ran): lost silently")
            elif m.reasons and not set(reasons) & {*m.reasons, PUBSUB_DEAD_LETTER}:
                # Pub/Sub's own policy may take it first, after failed attempts (weaker 5).
                yield Violation(one, m.lid, f"dead-lettered as {reasons}, expected {m.reasons}")
            yield from _repeated_letters(
                f,
                m.lid,
                [d for d in dead if (d.group, d.seq) not in replayed],
                one,
                retries[m.dedup_key or ""],
            )
            continue
        if not got and not dead and not f.relax.may_be_lost(m.lid):
            yield Violation(one, m.lid, "neither an effect nor a dead letter: lost silently")
        if len(got) > 1 and not f.relax.repeat_excused(m.lid, [e.process for e in got]):
            times = ", ".join(f"{e.at:.3f}s by {e.process}" for e in got)
            yield Violation(one, m.lid, f"effect ran {len(got)} times ({times})")
        dead = [d for d in dead if (d.group, d.seq) not in replayed]
        both = [d for d in dead if f.relax.counts_as_both(m.lid, d)]
        if got and both:
            yield Violation(one, m.lid, f"both an effect and dead-lettered as {both[0].reason}")
        yield from _repeated_letters(f, m.lid, dead, one, retries[m.dedup_key or ""])


def _repeated_letters(
    f: Final, lid: str, dead: list[Any], one: str, replays: int = 0
) -> Iterator[Violation]:
    """A dead letter is not repeated - whether the message was to be dead-lettered or not -
    except once more per operator's ``dlq replay`` of it (``replays``)."""
    for reason in sorted({d.reason for d in dead}):
        mine = [d for d in dead if d.reason == reason and d.source == "toolkit"]
        if len(mine) > 1 + replays and not f.relax.dead_letter_may_repeat(lid, reason):
            yield Violation(one, lid, f"dead-lettered {len(mine)} times as {reason}")


def _fifo_order(f: Final) -> Iterator[Violation]:
    order = {m.lid: i for i, m in enumerate(sorted(f.messages, key=lambda m: m.publish_at))}
    # A copy Pub/Sub itself dead-lettered (weaker 5) leaves the message to a later copy.
    by_pubsub = {d.lid for d in f.ledger.dead_letters if d.source == "pubsub"}
    legit = {m.lid for m in f.messages if m.group and not m.hostile and m.lid not in by_pubsub}
    by_number: dict[tuple[str, str | None, str], list[Effect]] = defaultdict(list)
    last: dict[str, Effect] = {}
    for e in sorted(_effects(f.ledger), key=lambda e: e.at):
        if e.group is None or e.seq is None:
            continue
        # A counter that started again (a new epoch) numbers new messages from 1 again.
        repeat = bool(by_number[(e.group, e.epoch, e.seq)])
        by_number[(e.group, e.epoch, e.seq)].append(e)
        if e.lid not in legit or e.lid in f.relax.victims or not f.relax.checks_order(e.group):
            continue
        if f.relax.ran_at_later_copy(str(e.lid), e.seq):
            continue
        if repeat and f.relax.effect_at_risk(str(e.lid)):
            # A replay of an effect a crash left unrecorded (excused below, as a repeat): in
            # batch mode the whole batch runs again, so it may follow a later number's first
            # run - a replay of what already ran in order, not a reordering.
            continue
        before = last.get(e.group)
        if before is not None and order[str(e.lid)] < order[str(before.lid)]:
            yield Violation(
                "2 fifo_order",
                e.lid,
                f"ran after {before.lid} in {e.group} but was published first",
            )
        last[e.group] = e
    for (group, _epoch, seq), runs in by_number.items():
        lids = sorted({str(e.lid) for e in runs})
        recorded = [e for e in runs if not f.relax.effect_at_risk(str(e.lid))]
        processes = [e.process for e in recorded]
        distinct = len(set(processes)) == len(processes)
        if len(recorded) > 1 and not (f.relax.group_named(group) and distinct):
            yield Violation("2 fifo_order", lids[0], f"{group}#{seq} ran {len(runs)}x ({lids})")


def _never_early(f: Final) -> Iterator[Violation]:
    ahead: dict[str | None, float] = defaultdict(float)
    for p in f.ledger.finals:
        ahead[p.lid] = max(ahead[p.lid], p.ahead)
    for item in [*f.ledger.effects, *f.ledger.finals]:
        if item.deliver_at is None:
            continue
        early = to_seconds(parse_time(item.deliver_at)) - item.at
        if early > f.relax.early_tolerance(ahead[item.lid]):
            what = "effect" if isinstance(item, Effect) else "final-topic publish"
            yield Violation("3 never_early", item.lid, f"{what} {early:.3f}s early")


def _groups_finish(f: Final) -> Iterator[Violation]:
    # The last number of each group's newest counter epoch: a counter that started again
    # (expired with an idle group, or lost by its store) numbers from 1 in a newer epoch.
    newest: dict[str, int] = {}
    for o in f.ledger.origins:
        if o.group is not None and o.seq is not None and not o.hostile:
            newest[o.group] = max(newest.get(o.group, 0), int(o.epoch or 0))
    targets: dict[str, int] = {}
    for o in f.ledger.origins:
        numbered = o.group is not None and o.seq is not None and not o.hostile
        if numbered and int(o.epoch or 0) == newest[str(o.group)]:
            targets[str(o.group)] = max(targets.get(str(o.group), 0), int(str(o.seq)))
    for group, target in sorted(targets.items()):
        if not f.relax.checks_group_position(group):
            continue
        state = f.groups[group]
        ended = state.end_seq is not None and state.last_processed >= state.end_seq
        if state.last_processed >= target or ended or (f.relax.rollback and _all_settled(f, group)):
            # fifo_end: a copy numbered after the end is the producer's; after a store loss the
            # stored position may lag: the group is judged by its messages
            continue
        head = state.last_processed + 1
        alerts = [d for d in f.ledger.decisions if d.get("fifo_group") == group]
        letters = [d for d in f.ledger.dead_letters if d.group == group and d.seq == str(head)]
        if any(d.source == "pubsub" for d in letters):
            continue  # Pub/Sub's own dead-letter policy took it before ingress could (weaker 5)
        if _waits_behind_pubsub_letter(f, group, head):
            continue  # the same, behind numbers that never reached the origin topic (weaker 5)
        why = f"alerts={len(alerts)}, dead letters for #{head}={len(letters)}"
        yield Violation(
            "4 groups_finish",
            None,
            f"{group} stopped at {state.last_processed} of {target} ({why})",
        )
    yield from _gave_up_names_number(f)


GAVE_UP = frozenset({"relay_gave_up", "relay_task_lost"})


def _gave_up_names_number(f: Final) -> Iterator[Violation]:
    """The relay's ALERT for a FIFO message it dead-letters (or loses) on its last attempt names
    the group and the number: the ALERT is what explains a group waiting there (invariant 4)."""
    groups = {o.lid: o.group for o in f.ledger.origins if o.lid and o.group and not o.hostile}
    for d in f.ledger.decisions:
        if d.get("alert") not in GAVE_UP:
            continue
        lid = f.ledger.keys.get(str(d.get("dedup_key") or "").split("#")[0])
        if lid in groups and not (d.get("fifo_group") and d.get("fifo_seq")):
            yield Violation("4 groups_finish", lid, f"{d.get('alert')} ALERT names no FIFO number")


def _all_settled(f: Final, group: str) -> bool:
    """Every legitimate message published in ``group`` had its effect or a dead letter."""
    settled = {e.lid for e in f.ledger.effects} | {d.lid for d in f.ledger.dead_letters}
    mine = {o.lid for o in f.ledger.origins if o.group == group and not o.hostile}
    return mine <= settled


def _waits_behind_pubsub_letter(f: Final, group: str, head: int) -> bool:
    """True when the first number at or after ``head`` that reached the origin topic is one
    Pub/Sub dead-lettered from there (weaker 5): the numbers before it were reserved but never
    published (a counter reply or a publish lost), so no copy of the group past ``head`` ever
    reached the gate - no gap to time, no ALERT possible. The group waits for that dead letter
    to be replayed (its gap then times out) or skipped, as when it waits at the number itself."""
    published = [
        int(o.seq)
        for o in f.ledger.origins
        if o.group == group and not o.hostile and o.seq is not None and o.seq.isdigit()
        if int(o.seq) >= head
    ]
    if not published:
        return False
    first = str(min(published))
    return any(
        d.source == "pubsub" and d.group == group and d.seq == first for d in f.ledger.dead_letters
    )


def _cancel_truthful(f: Final) -> Iterator[Violation]:
    finals, effects = _by_lid(f.ledger.finals), _by_lid(_effects(f.ledger))
    letters = _by_lid(f.ledger.dead_letters)
    for answer in f.ledger.cancels:
        published = finals.get(answer.lid, [])
        undone = f.relax.cancel_may_be_undone(answer.lid)
        if not answer.already_delivered and (published or effects.get(answer.lid)) and not undone:
            yield Violation(
                "5 cancel_truthful",
                answer.lid,
                f"cancel at {answer.at:.3f}s said not delivered, but it was published at "
                f"{[round(p.at, 3) for p in published]}",
            )
        if answer.already_delivered and not published:
            yield Violation("5 cancel_truthful", answer.lid, "cancel said delivered; it never was")
        # A cancel the relay meets after its own check (its claim then finds the tombstone) is
        # a cancel, not other content under the key: no fingerprint_mismatch dead letter.
        mismatch = [d for d in letters.get(answer.lid, []) if d.reason == MISMATCH]
        if not answer.already_delivered and mismatch and not undone:
            yield Violation(
                "5 cancel_truthful",
                answer.lid,
                f"cancel said not delivered, and it was dead-lettered as {MISMATCH}",
            )


# The gate's ALERT for a run fenced by a newer lease (FifoGate._update's StaleClaimError).
_FENCED_BY = re.compile(r"lease (\d+) was taken over \(now (\d+)\)")


def _no_false_alarm(f: Final) -> Iterator[Violation]:
    yield from _fenced_by_itself(f)
    if not f.relax.checks_alarms:
        return
    for alarm in (d for d in f.ledger.decisions if d.get("alert") == "store_rollback"):
        # No write was lost in this schedule: the witness mistook a race for a loss.
        yield Violation("7 no_false_alarm", None, f"{alarm.text} (no write was lost)")
    takeovers = [d for d in f.ledger.decisions if d.outcome == "taken_over"]
    for alarm in (d for d in f.ledger.decisions if d.outcome == "fenced"):
        key, token = alarm.get("dedup_key"), int(alarm.get("token") or 0)
        if not any(
            t.get("dedup_key") == key
            and t.get("consumer") == alarm.get("consumer")
            and int(t.get("token") or 0) > token
            for t in takeovers
        ) and not _taken_over_unheard(f, alarm, token):
            lid = f.ledger.keys.get(str(key).split("#")[0])
            yield Violation(
                "7 no_false_alarm",
                lid,
                f"{alarm.text} ({key}: no takeover)",
            )


def _taken_over_unheard(f: Final, alarm: Decision, token: int) -> bool:
    """True when another process's claim of the fenced run's key landed with a newer token
    before the ALERT, but its writer never heard so (the write timed out or got an error reply
    after it landed: seed 167324, ``dedup.claim applied, then an error reply``), so no
    ``taken_over`` decision was logged. The run WAS taken over - the store holds that claim,
    and a redelivery elsewhere after its lease would run the effect again - so the ALERT is
    true (DedupStore.complete: StaleClaimError "if the claim's token is no longer current (the
    lease expired and another worker took over)"). Only unheard claims of ANOTHER process:
    one heard logs its takeover, and a process never claims a key it is running."""
    writes = f.ledger.claim_writes.get((str(alarm.get("consumer")), str(alarm.get("dedup_key"))))
    return any(
        w.token > token and not w.heard and w.process != alarm.process and w.true_at <= alarm.at
        for w in writes or []
    )


def _fenced_by_itself(f: Final) -> Iterator[Violation]:
    """A run the gate says was taken over ("lease T was taken over (now N)") by a lease N its
    own process wrote was not: a process never takes over its own run (``HeldLeases.busy``),
    and a repair of a store loss keeps this process's own live lease (issue 24, defect 3). The
    writes are the simulation's record, not the store's, so this holds after a store loss
    too - except that a repair may lease a group whose run here had outlived its lease.

    N is only the newest token: a run fenced by ANOTHER process first (its repair after a store
    loss fences every lease it did not take) was taken over, whoever wrote N later (seed 51255).
    And after a store loss, a repair that moved the run's own live lease to N (the same expiry)
    in a save that landed but timed out never heard of the move (seed 44601): N was not the
    run's as far as its process could know - the ALERT is true, its advance is not recorded."""
    for alarm in (d for d in f.ledger.decisions if d.get("alert") == "lease_outlived"):
        match = _FENCED_BY.search(alarm.text)
        if match is None:
            continue
        group = str(alarm.get("fifo_group"))
        old, new = (int(n) for n in match.groups())
        ran = f.ledger.lease_write(group, old, alarm.at, alarm.process)
        fenced = f.ledger.lease_write(group, new, alarm.at)
        if ran is None or fenced is None or new <= old or fenced.process != alarm.process:
            continue
        if _fenced_by_another_first(f, group, old, ran, fenced):
            continue
        moved_unheard = fenced.until == ran.until and not fenced.heard
        if f.relax.rollback and moved_unheard:
            continue
        live = ran.until is not None and fenced.at < ran.until
        if live or not f.relax.rollback:
            # (After a store loss a process's repair may lease a group whose run here had
            # outlived its lease: then "outlived" is true.)
            why = "while its lease was live" if live else "after it (no store loss)"
            lid = f.ledger.keys.get(str(alarm.get("dedup_key")).split("#")[0])
            yield Violation(
                "7 no_false_alarm",
                lid,
                f"{alarm.text} ({group}: lease {new} was written by {fenced.process} itself, "
                f"{why}: it took over its own run)",
            )


def _fenced_by_another_first(
    f: Final, group: str, old: int, ran: LeaseWrite, fenced: LeaseWrite
) -> bool:
    """True when a process other than ``fenced``'s wrote ``group`` a token >= ``old`` between
    the run's lease ``ran`` and ``fenced``: that one took the run over (after a store loss a
    token may be given again, ``old`` itself included)."""
    return any(
        w.process != fenced.process and ran.order < w.order < fenced.order
        for (g, token), writes in f.ledger.lease_writes.items()
        if g == group and token >= old
        for w in writes
    )


def _transient_not_poison(f: Final) -> Iterator[Violation]:
    specs = {m.lid: m for m in f.messages}
    for letter in f.ledger.dead_letters:
        spec = specs.get(str(letter.lid))
        if letter.reason != POISON or spec is None or spec.poison:
            continue
        failures = f.ledger.failures.get(str(letter.lid), [])
        span = failures[-1] - failures[0] if failures else 0.0
        if span <= SHORT_OUTAGE:
            yield Violation(
                "8 transient_not_poison",
                letter.lid,
                f"dead-lettered as poison after {len(failures)} failures over {span:.1f}s",
            )


def _filler_never_handled(f: Final) -> Iterator[Violation]:
    for e in f.ledger.effects:
        if e.filler:
            yield Violation(
                "9 filler_never_handled", e.lid, f"{e.group}#{e.seq} reached the handler"
            )
