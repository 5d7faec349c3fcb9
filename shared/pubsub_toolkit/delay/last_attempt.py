"""What the relay does when Cloud Tasks' last attempt of a task fails: continue, else
dead-letter - never lose.

Cloud Tasks deletes a task once its last attempt (:mod:`.attempts`) is answered 5xx, so a relay
whose store has been down for the whole retry budget would lose the message: neither the final
nor the dead-letter topic. On that attempt the relay first hands the message to a **task of its
own** - the next hop (:func:`~pubsub_toolkit.delay.scheduler.task_id`, the same body and due
time, a fresh retry budget) - and answers 2xx: the queue keeps the message until the store is
back, and that task then releases it as any other, checked against its release record and a
``cancel`` tombstone (``relay_deferred``, logged as an ALERT: the store has been down for a
whole retry budget). Dead-lettering at once could not tell a message released earlier - by
ingress, or a copy of a task whose create timed out after it was applied - from one never
released, so it put delivered messages on the dead-letter topic too (the simulation's
``relay_store_outage``: "both an effect and dead-lettered", seeds 614, 619, 938, 1209 and 1272),
and it left a FIFO group waiting at the number. The task name makes the hand-over idempotent:
a second run of the same attempt finds the task made (AlreadyExists) and answers the same, so a
create that timed out is tried again rather than guessed at. Only when no task can be made (no
scheduler, or Cloud Tasks refusing) does the relay dead-letter it instead, with a reason and an
ALERT:

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
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Protocol

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.dead_letters.send import DeadLetterer
from pubsub_toolkit.delay.payload import MAX_HOP, DelayedMessage
from pubsub_toolkit.errors import StoreUnavailableError, TransientError
from pubsub_toolkit.message import Message, OutboundMessage
from pubsub_toolkit.observability import DecisionLog
from pubsub_toolkit.producer.sink import MessageSink

REASON_STORE_UNAVAILABLE = "relay_store_unavailable"
REASON_RETRIES_EXHAUSTED = "relay_retries_exhausted"
# Creates of the next task tried on the last attempt: the name is fixed, so a create that timed
# out after Cloud Tasks applied it is answered AlreadyExists by the next try.
CONTINUE_TRIES = 3


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
    ) -> None:
        self._dead_letters = dead_letters
        self._log = log
        self._attempt = attempt
        self._max_attempts = max_attempts
        self._failure = failure

    @property
    def reason(self) -> str:
        """The dead-letter reason for this failure."""
        if isinstance(self._failure, StoreUnavailableError):
            return REASON_STORE_UNAVAILABLE
        return REASON_RETRIES_EXHAUSTED

    def continued(self, scheduler: HopScheduler | None, delayed: DelayedMessage, key: str) -> bool:
        """Hand ``delayed`` to its next hop's task (see the module doc); False if no task could
        be made (then the caller dead-letters it)."""
        hop, error = delayed.hop + 1, None
        if scheduler is None or hop > MAX_HOP:
            return False
        for _ in range(CONTINUE_TRIES):
            try:
                scheduler.schedule(delayed.message, delayed.deliver_at, delayed.dedup_key, hop)
            except Exception as exc:  # the caller dead-letters it: logged there and here
                error = exc
                continue
            self._log.decision(
                "deferred",
                f"ALERT: last Cloud Tasks attempt failed ({self._failure}); the message waits "
                f"in the queue as hop {hop} (a new retry budget) until the store is back",
                dedup_key=key,
                level=logging.ERROR,
                alert="relay_deferred",
                attempt=self._attempt,
                hop=hop,
            )
            return True
        self._log.decision(
            "not_deferred",
            f"the next task (hop {hop}) could not be made ({error}): dead-lettered instead "
            "(a create that timed out may have made it: then it is released as well)",
            dedup_key=key,
            level=logging.WARNING,
        )
        return False

    def dead_letter(self, message: Message, key: str | None, reason: str | None = None) -> str:
        """Dead-letter ``message`` with ``reason`` (default :attr:`reason`); returns the reason.

        Raises (the task is then answered 5xx and dropped) only if the dead-letter publish fails.
        """
        reason = reason or self.reason
        # A FIFO number: the ALERT names its group and number, so an operator whose group
        # waits at that number (its dead letter will not come back by itself) sees why.
        number = {
            name: message.attributes[name]
            for name in (attr.FIFO_GROUP, attr.FIFO_SEQ)
            if name in message.attributes
        }
        detail = (
            f"Cloud Tasks' last attempt ({self._attempt} of {self._max_attempts}) failed: "
            f"{self._failure}. Whether it had been released already, or cancelled, could not "
            "be checked: before a replay, check that it was not cancelled (is_cancelled); a "
            "released one is a duplicate to consumers while they keep its dedup_key (DEDUP_TTL)"
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
            f"{reason} instead of lost",
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
        group, seq = message.attributes.get(attr.FIFO_GROUP), message.attributes.get(attr.FIFO_SEQ)
        if not (group and seq):
            return
        why = f"{attr.FILLER_DEAD_LETTERED}{reason}"
        epoch = message.attributes.get(attr.FIFO_EPOCH)
        try:
            sink.publish(topic, attr.filler_message(group, seq, key, why, epoch=epoch))
        except Exception as exc:
            # The dead letter holds the message; only the group's way on is missing.
            self._log.decision(
                "filler_unsent",
                f"ALERT: {group}#{seq} was dead-lettered but its filler was not published "
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
