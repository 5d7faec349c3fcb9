"""What the relay does when Cloud Tasks' last attempt of a task fails: continue, else
dead-letter - never lose, never both.

Cloud Tasks deletes a task once its last attempt (:mod:`.attempts`) is answered 5xx, so a relay
whose store has been down for the whole retry budget would lose the message: neither the final
nor the dead-letter topic. On that attempt (and already on the one before) **any transient
failure** - the store, the final topic or Cloud Tasks unreachable, the release claimed by a run
still going: an outage of something the message needs - hands the message to a **task of the
relay's own**: the next hop (:func:`~pubsub_toolkit.delay.scheduler.task_id`, the same body and
due time, a fresh retry budget), answered 2xx. The queue keeps the message until the outage
heals, and that task then releases it as any other, checked against its release record and a
``cancel`` tombstone (``relay_deferred``, an ALERT naming the failure). Dead-lettering at once
could not tell a message released earlier - by ingress, or a copy of a task whose create timed
out after it was applied - from one never released, so it put delivered messages on the
dead-letter topic too (the simulation's ``relay_store_outage``: "both an effect and
dead-lettered", seeds 614, 619, 938, 1209 and 1272), and it left a FIFO group waiting.

A failed create may have made the task (:func:`~pubsub_toolkit.delay.scheduler.create_refused`
tells a refusal from a doubt). The name is fixed, so a create tried again answers AlreadyExists
when an earlier one was applied. A doubt on the last attempt but one is answered 5xx: the last
attempt creates the same name again and learns the outcome. A doubt on the last attempt is
neither dead-lettered (the task may exist and release it: the message would be both delivered
and dead-lettered - review finding on issue 24) nor dropped silently: the message goes to the
operator whole (``relay_handover_unconfirmed``: data, attributes, the task's name to look for,
and a ``replay_id``). Its route is a replay, as ``dlq replay`` does one (mint the id, publish to
the ingress topic with it): ingress releases it through the message's release record, so a
cancel wins and a task releasing it too is a duplicate. Published again without the id, ingress
acks it as a duplicate of the original publish (its record lives ``DEDUP_TTL``): lost. A FIFO
number handed over so is filled (``dead_lettered:relay_handover_unconfirmed``), as a dead-lettered
one is: its group does not wait for the operator, and a copy released later is kept by the gate
(``fifo_late_after_skip``), never run out of order (seed 79 of ``relay_tasks_refused``).

Hand-overs end: a message is handed over only until it is ``DEDUP_TTL`` past its due time
(consumers keep its key that long, so a copy an earlier run published unrecorded is still a
duplicate to them) and up to hop :data:`~pubsub_toolkit.delay.payload.MAX_HOP`. The last
attempt still creates the name up to :data:`HANDOVER_GRACE` later: the attempt before it (up to
the queue's ``max_backoff`` earlier) or a duplicate run may have left a create in doubt inside
the limit, and refusing on time would dead-letter a message that task releases. Past that, or
when no task can be made (no scheduler, Cloud Tasks refusing the request itself), the relay
dead-letters it with a reason, an ALERT, and in its ``error_detail`` why it was not handed
over:

* ``relay_store_unavailable``: the store could not be reached (the relay could not read the
  cancel tombstone, claim the release record, or write it);
* ``relay_retries_exhausted``: any other transient failure (the final topic unreachable, the
  next hop not scheduled, the release claimed by another attempt still running).

Why not publish to the final topic instead? Without the store the relay cannot see a
``cancel`` tombstone, and a cancelled message must never reach it. The dead letter's risk is the
opposite: an earlier attempt (or a duplicate run on another instance) may have published the
message before the store failed to record it. Its ``error_detail`` says so; replaying it
republishes the same ``dedup_key``, which consumers acknowledge as a duplicate while they keep
its record (``DEDUP_TTL``) - but a replay is not checked against a cancel tombstone, so the
operator checks that first. Where the relay *knows* it published the message (this process did,
see :class:`~pubsub_toolkit.delay.relay.Relay`) it answers 2xx and dead-letters nothing. If the
dead-letter publish fails too, nothing is left to try: the task is answered 5xx and dropped,
with an ALERT naming the key.

A dead-lettered FIFO number is followed by a **filler** on the final topic
(``fifo_filler=dead_lettered:REASON``), as ingress does for every FIFO message it dead-letters:
the consumer's gate passes over the number with a tombstone, so the group goes on once the
faults heal instead of waiting for a number that will not come - and a replay of the dead letter
arriving later is kept (``fifo_late_after_skip``), never run out of order. Waiting for an
operator's ``fifo skip`` instead failed when the operator came later than the group's record
(an idle group forgets its record ``DEDUP_TTL`` after its last change; the relay gives up days
after the due time): the skip was refused ("waits for 1"). If the filler's publish fails too,
an ALERT names the group and number to skip.

Which end a failed attempt takes, and whether a next task may be made, is decided in
:mod:`pubsub_toolkit.core.handover`; this module performs it (the creates, the dead letter, the
filler) and writes the ALERTs that tell an operator what happened.

(About 370 lines, half of them this overview and the ALERTs' texts: what an operator reads
when a message is handed over, dead-lettered or lost is written out here in full.)
"""

from __future__ import annotations

import base64
import logging
from datetime import datetime, timedelta
from typing import Protocol

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.core import handover as core
from pubsub_toolkit.core import release as decide
from pubsub_toolkit.core.handover import (
    HANDOVER_GRACE,
    REASON_HANDOVER_UNCONFIRMED,
    REASON_RETRIES_EXHAUSTED,
    REASON_STORE_UNAVAILABLE,
    Created,
    CreateReply,
    CreateTask,
    HandOver,
    InDoubt,
    Refused,
)
from pubsub_toolkit.dead_letters.send import DeadLetterer
from pubsub_toolkit.delay.payload import MAX_HOP, DelayedMessage
from pubsub_toolkit.delay.scheduler import create_refused, task_id
from pubsub_toolkit.errors import TransientError
from pubsub_toolkit.message import Message, OutboundMessage
from pubsub_toolkit.observability import DecisionLog
from pubsub_toolkit.producer.sink import MessageSink

__all__ = [
    "HANDOVER_GRACE",
    "REASON_HANDOVER_UNCONFIRMED",
    "REASON_RETRIES_EXHAUSTED",
    "REASON_STORE_UNAVAILABLE",
    "HandOver",
    "HopScheduler",
    "LastAttempt",
]


class HopScheduler(Protocol):
    """What the relay needs of the scheduler: park a message's next hop (a long delay's, or
    the last attempt's hand-over)."""

    def schedule(
        self, message: OutboundMessage, deliver_at: datetime, dedup_key: str, hop: int = 0
    ) -> str: ...


class LastAttempt:
    """One failed last attempt: its failure, and the relay's dead letters and log."""

    def __init__(
        self,
        dead_letters: DeadLetterer,
        log: DecisionLog,
        attempt: int | None,
        max_attempts: int | None,
        failure: TransientError,
        *,
        final: bool = True,
    ) -> None:
        """``final``: this is the queue's last attempt (False: the last but one, which only
        hands over - anything else is answered 5xx for the last attempt to settle)."""
        self._dead_letters = dead_letters
        self._log = log
        self._attempt = attempt
        self._max_attempts = max_attempts
        self._failure = failure
        self._final = final
        self._which = (
            "last Cloud Tasks attempt"
            if final
            else f"Cloud Tasks attempt {attempt} of {max_attempts} (the last but one)"
        )
        self._why_not = ""  # why the message was not handed to a new task, once known

    @property
    def reason(self) -> str:
        """The dead-letter reason for this failure."""
        return core.give_up_reason(self._failure)

    def continued(
        self,
        scheduler: HopScheduler | None,
        delayed: DelayedMessage,
        key: str,
        *,
        overdue: timedelta,
        limit: timedelta,
    ) -> HandOver:
        """Hand ``delayed`` to its next hop's task (see the module doc and
        :func:`~pubsub_toolkit.core.handover.hand_over`). ``overdue``: how long past its due
        time it is now; ``limit``: ``DEDUP_TTL``."""
        protocol = core.hand_over(
            hop=delayed.hop + 1,
            max_hop=MAX_HOP,
            has_scheduler=scheduler is not None,
            overdue=overdue,
            limit=limit,
            final=self._final,
        )

        def create(task: CreateTask) -> CreateReply:
            assert scheduler is not None
            try:
                scheduler.schedule(delayed.message, delayed.deliver_at, delayed.dedup_key, task.hop)
            except Exception as exc:  # made, refused or in doubt: decided by the core
                return Refused(str(exc)) if create_refused(exc) else InDoubt(str(exc))
            return Created()

        verdict = decide.drive(protocol, create)
        self._why_not = verdict.why_not
        hop = verdict.hop
        if verdict.handed is HandOver.MADE:
            self._log.decision(
                "deferred",
                f"ALERT: {self._which} failed ({self._failure}) - the store, the "
                "final topic or Cloud Tasks failing for a whole retry budget; the message waits "
                f"in the queue as hop {hop} (a new retry budget), released once that heals",
                dedup_key=key,
                level=logging.ERROR,
                alert="relay_deferred",
                attempt=self._attempt,
                hop=hop,
                error=str(self._failure),
            )
        elif verdict.handed is HandOver.UNCONFIRMED and not self._final:
            self._log.decision(
                "handover_retried",
                f"{self._which} failed ({self._failure}) and whether the task taking the "
                f"message over (hop {hop}) was made is unknown ({verdict.error}): answered "
                "5xx, the last attempt creates it again (AlreadyExists if it was made)",
                dedup_key=key,
                level=logging.WARNING,
                attempt=self._attempt,
                hop=hop,
            )
        elif verdict.handed is HandOver.UNCONFIRMED:
            assert scheduler is not None
            self._unconfirmed(scheduler, delayed, key, hop, verdict.error)
        elif verdict.tried:
            then = (
                "dead-lettered instead" if self._final else "answered 5xx: the last attempt decides"
            )
            self._log.decision(
                "not_deferred",
                f"the next task (hop {hop}) was refused ({verdict.error}): {then}",
                dedup_key=key,
                level=logging.WARNING,
            )
        return verdict.handed

    def _unconfirmed(
        self,
        scheduler: HopScheduler,
        delayed: DelayedMessage,
        key: str,
        hop: int,
        doubt: str,
    ) -> None:
        """Every create of the next task failed, one at least without a refusal: it may exist.
        A dead letter could then sit next to its release, so the operator gets the message."""
        message = delayed.message
        number = decide.fifo_fields(message.attributes)
        task = task_id(key, hop, message.attributes.get(attr.FIFO_SEQ))
        queue = getattr(scheduler, "queue", None)
        name = f"{queue}/tasks/{task}" if queue else task
        # Published again as it is, ingress would ack it as a duplicate of the original (its
        # record lives DEDUP_TTL): the operator replays it, as `dlq replay` does, under an id
        # fixed by the task, so replaying the line twice still lets one copy through.
        replay_id = f"relay-handover:{task}"
        self._log.decision(
            "handover_unconfirmed",
            f"ALERT: last Cloud Tasks attempt failed ({self._failure}), and whether the task "
            f"taking the message over (hop {hop}) was made is unknown ({doubt}). Not "
            f"dead-lettered: if that task exists it releases the message. Look for task {name}: "
            "if it is absent (or ran), replay this line as `dlq replay` does - mint replay_id "
            f"{replay_id} for dedup_key {message.attributes.get(attr.DEDUP_KEY, key)!r} in the "
            "store ingress reads (pubsub_toolkit.dead_letters.replay.mint), then publish "
            "data_base64 and attributes plus that replay_id to the ingress topic: ingress "
            "releases it through its release record (not if cancelled; once, should the task "
            "release it too). Not without replay_id: ingress acks that as a duplicate"
            + (
                f". Its FIFO number {number[attr.FIFO_GROUP]}#{number[attr.FIFO_SEQ]} is filled "
                "so the group goes on: a copy released later (the task, or the replay) is kept "
                "on the consumer's dead-letter topic as fifo_late_after_skip, never run out of "
                "order"
                if len(number) == 2
                else ""
            ),
            dedup_key=key,
            level=logging.ERROR,
            alert="relay_handover_unconfirmed",
            attempt=self._attempt,
            hop=hop,
            task_id=task,
            task_name=name,
            replay_id=replay_id,
            error=doubt,
            data_base64=base64.b64encode(message.data).decode(),
            attributes=dict(message.attributes),
            ordering_key=message.ordering_key,
            **number,
        )

    def dead_letter(self, message: Message, key: str | None, reason: str | None = None) -> str:
        """Dead-letter ``message`` with ``reason`` (default :attr:`reason`); returns the reason.

        Raises (the task is then answered 5xx and dropped) only if the dead-letter publish fails.
        """
        reason = reason or self.reason
        # A FIFO number: the ALERT names its group and number, so an operator whose group
        # waits at that number (its dead letter will not come back by itself) sees why.
        number = decide.fifo_fields(message.attributes)
        handed = f" Not handed to a new task: {self._why_not}." if self._why_not else ""
        detail = (
            f"Cloud Tasks' last attempt ({self._attempt} of {self._max_attempts}) failed: "
            f"{self._failure}.{handed} Whether it had been released already, or cancelled, "
            "could not be checked: before a replay, check that it was not cancelled "
            "(is_cancelled); a released one is a duplicate to consumers while they keep its "
            "dedup_key (DEDUP_TTL)"
        )
        try:
            self._dead_letters.send(message, reason, detail, dedup_key=key)
        except Exception:
            self._log.decision(
                "lost",
                "ALERT: last Cloud Tasks attempt, and the dead-letter publish failed too: the "
                "task is dropped (its dedup_key is in this line, its body in the queue's logs)",
                dedup_key=key,
                level=logging.ERROR,
                alert="relay_task_lost",
                attempt=self._attempt,
                reason=reason,
                error=str(self._failure),
                **number,
            )
            raise
        self._log.decision(
            "gave_up",
            f"ALERT: last Cloud Tasks attempt failed ({self._failure}); dead-lettered as "
            f"{reason} instead of lost{' (' + self._why_not + ')' if self._why_not else ''}",
            dedup_key=key,
            level=logging.ERROR,
            alert="relay_gave_up",
            attempt=self._attempt,
            reason=reason,
            **number,
        )
        return reason

    def fill(self, sink: MessageSink, topic: str, message: Message, key: str, reason: str) -> None:
        """For a FIFO number just dead-lettered with ``reason``: a filler on ``topic`` (the
        final topic), so its group passes over the number (see the module doc)."""
        why = f"{attr.FILLER_DEAD_LETTERED}{reason}"
        filler = decide.filler_for(message.attributes, key, why)
        if filler is None:
            return
        group, seq = filler.group, filler.seq
        try:
            sink.publish(topic, filler.message())
        except Exception as exc:
            # The dead letter holds the message; only the group's way on is missing.
            self._log.decision(
                "filler_unsent",
                f"ALERT: {group}#{seq} was given up ({reason}) but its filler was not published "
                f"({exc}): the group waits at that number - skip it (pubsub-toolkit fifo skip "
                f"{group} {seq}) or replay the dead letter",
                dedup_key=key,
                level=logging.ERROR,
                alert="relay_filler_unsent",
                fifo_group=group,
                fifo_seq=seq,
            )
            return
        self._log.decision(
            "filler_forwarded",
            f"{group}#{seq} carries no message ({why})",
            dedup_key=key,
            fifo_group=group,
            fifo_seq=seq,
        )

    def published_unrecorded(self, key: str) -> None:
        """Log that this process had published ``key``, so it is answered 2xx, not dead-lettered."""
        self._log.decision(
            "published_unrecorded",
            "ALERT: last Cloud Tasks attempt failed after this process had published the "
            f"message ({self._failure}); answered 2xx, not dead-lettered. Its release record "
            "may be missing: until it is written, cancel() would wrongly answer 'not delivered'",
            dedup_key=key,
            level=logging.ERROR,
            alert="relay_release_unrecorded",
            attempt=self._attempt,
        )
