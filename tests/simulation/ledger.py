"""The ledger: what each logical message was meant to do, and what actually happened to it.

Every observation the checker needs is recorded here as a frozen value, in true time:
origin publishes (with their FIFO numbers), final-topic publishes, the handler's effects,
dead letters (the toolkit's, with ``error_reason``, and Pub/Sub's forwards after N delivery
attempts), cancel answers, ALERT decisions, operator actions.

A message is mapped to its logical message by its payload, which starts with the logical id
(``b"L7:..."``) - a dead letter wrapped as JSON included - and otherwise by its dedup key.

**Actions and outputs at risk.** Each top-level step (a delivery, a task run, a sweep) is an
*action*. Outputs an action made (an effect, a dead letter) are *at risk* when the action then
ended without an answer of "done" (a crash, a store error, a nack): the library told the broker
to try again after the output happened - the documented at-least-once window of the two-phase
mode. :mod:`.weaker_guarantees` decides what that excuses.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.message import Message


@dataclass(frozen=True)
class OriginPublish:
    lid: str | None
    at: float
    message_id: str
    group: str | None
    seq: str | None
    hostile: bool
    epoch: str | None = None  # fifo_epoch: a counter that started again numbers anew


@dataclass(frozen=True)
class FinalPublish:
    lid: str | None
    at: float
    message_id: str
    deliver_at: str | None
    filler: bool
    ahead: float  # how far the publishing component's clock ran ahead of true time


@dataclass(frozen=True)
class Effect:
    lid: str | None
    at: float
    process: str
    dedup_key: str | None
    group: str | None
    seq: str | None
    deliver_at: str | None
    filler: bool
    epoch: str | None = None  # fifo_epoch: a counter that started again numbers anew


@dataclass(frozen=True)
class DeadLetter:
    lid: str | None
    at: float
    reason: str
    source: str  # "toolkit" (DeadLetterer) or "pubsub" (forwarded after N attempts)
    group: str | None
    seq: str | None
    action: int  # the action that published it (0 for Pub/Sub's forwards)


@dataclass(frozen=True)
class CancelAnswer:
    lid: str
    at: float
    already_delivered: bool


@dataclass(frozen=True)
class Decision:
    """One decision log record (only ALERTs, takeovers and fencing are kept)."""

    at: float
    outcome: str
    text: str
    fields: tuple[tuple[str, str], ...]
    process: str = ""  # the process whose call logged it (the innermost running one)

    def get(self, name: str) -> str | None:
        return dict(self.fields).get(name)


# The gate's fencing text: "lease T was taken over (now N)" (FifoGate._update).
_FENCED_BY = re.compile(r"lease \d+ was taken over \(now (\d+)\)")


@dataclass(frozen=True)
class OperatorAction:
    at: float
    group: str
    seq: int
    action: str  # "skip" | "replay" | "dlq_replay"
    why: str
    key: str = ""  # a dlq_replay's dedup key


@dataclass
class _Action:
    number: int
    label: str
    outputs: list[tuple[str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class LeaseWrite:
    """A FIFO lease token written: by ``process``, at ``at`` and lasting ``until`` (both on
    that process's clock), at true time ``true_at``; ``order``: the how-manieth lease write of
    the schedule (writes at one virtual instant are ordered too); ``heard``: False when the
    write landed but its writer never heard so (a timeout or an error reply after it)."""

    process: str
    at: datetime
    until: datetime | None
    true_at: float = 0.0
    order: int = 0
    heard: bool = True


@dataclass(frozen=True)
class ClaimWrite:
    """A dedup claim that landed with a new fencing ``token`` (a takeover of the key, or its
    first claim): by ``process`` at true time ``true_at``; ``heard``: False when its writer
    never heard so (a timeout or an error reply after the write), so it logged no decision."""

    token: int
    process: str
    true_at: float
    heard: bool = True


@dataclass
class Ledger:
    """Everything observed during one schedule (append-only lists of frozen values)."""

    origins: list[OriginPublish] = field(default_factory=list)
    finals: list[FinalPublish] = field(default_factory=list)
    effects: list[Effect] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    cancels: list[CancelAnswer] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    operator: list[OperatorAction] = field(default_factory=list)
    at_risk: set[tuple[str, str]] = field(default_factory=set)
    keys: dict[str, str] = field(default_factory=dict)  # dedup key -> its first logical id
    failures: dict[str, list[float]] = field(default_factory=dict)  # lid -> handler failures
    reached_gate: dict[str, float] = field(
        default_factory=dict
    )  # lid -> start of the call first acked
    rollbacks: list[float] = field(default_factory=list)  # when the store lost writes
    error_risk: set[tuple[str, str]] = field(default_factory=set)  # at risk: a live error
    crash_risk: set[tuple[str, str]] = field(default_factory=set)  # at risk: a crash
    # outputs at risk by a live error, per process: its crash later makes them crash risk
    errors_of: dict[str, set[tuple[str, str]]] = field(default_factory=dict)
    batch_raised: list[str] = field(default_factory=list)  # process_batch raised after an output
    # (group, FIFO lease token) -> each write that gave it (again after a loss or an expiry):
    # the writer, when (its own clock) and until when (the last renewal under the token)
    lease_writes: dict[tuple[str, int], list[LeaseWrite]] = field(default_factory=dict)
    lease_write_count: int = 0  # the new tokens written so far (LeaseWrite.order)
    # (namespace, dedup key) -> each claim that landed (invariant 7: who fenced a "fenced" run)
    claim_writes: dict[tuple[str, str], list[ClaimWrite]] = field(default_factory=dict)
    acting: list[str] = field(default_factory=list)  # the processes whose calls are running

    def lease_written(
        self,
        group: str,
        before: int,
        state: Any,
        process: str,
        now: datetime,
        true_at: float,
        *,
        heard: bool = True,
    ) -> None:
        """A FIFO save by ``process`` landed (``heard``: and its reply reached it): a new lease
        token, or its lease renewed."""
        writes = self.lease_writes.setdefault((group, state.lease_token), [])
        if state.lease_token != before:
            self.lease_write_count += 1
            writes.append(
                LeaseWrite(process, now, state.lease_until, true_at, self.lease_write_count, heard)
            )
        elif writes and writes[-1].process == process and state.lease_until is not None:
            writes[-1] = replace(writes[-1], until=state.lease_until)

    def claim_written(
        self, namespace: str, key: str, token: int, process: str, true_at: float, *, heard: bool
    ) -> None:
        """A dedup claim of ``key`` by ``process`` landed with fencing ``token``."""
        write = ClaimWrite(token, process, true_at, heard)
        self.claim_writes.setdefault((namespace, key), []).append(write)

    def lease_write(
        self, group: str, token: int, before: float, process: str | None = None
    ) -> LeaseWrite | None:
        """The last write that gave ``group`` lease ``token`` by true time ``before`` (by
        ``process``, if given: a store that lost its records gives a token again)."""
        writes = [
            w
            for w in self.lease_writes.get((group, token), [])
            if w.true_at <= before and process in (None, w.process)
        ]
        return writes[-1] if writes else None

    _actions: list[_Action] = field(default_factory=list)
    _numbers: int = 0
    _seen: dict[tuple[Any, ...], int] = field(default_factory=dict)

    # --- mapping messages to logical messages ---------------------------------------------

    def lid_of(self, message: Message) -> str | None:
        data = message.data
        if message.attributes.get("dlq_wrapped") == "json":
            try:
                data = base64.b64decode(json.loads(data)["data_base64"])
            except (ValueError, KeyError, TypeError):
                data = message.data  # a producer's forged attribute: the data is its own
        head, sep, _ = data.partition(b":")
        if sep and head.startswith(b"L") and head[1:].isdigit():
            return head.decode()
        key = message.attributes.get(attr.DEDUP_KEY)
        return self.keys.get(key) if key else None

    def lids_of_key(self, key: str, until: float) -> frozenset[str]:
        """The logical messages an ALERT naming dedup key ``key`` at ``until`` may be about: the
        one the key was made for, and every message whose effect ran under it by then - a
        hostile producer's ``key_reuse`` copy may reach the handler first, and a consumer's
        ``complete_failed`` for that key is then about the copy, not the key's owner."""
        lids = {
            e.lid
            for e in self.effects
            if e.lid is not None and e.dedup_key == key and e.at <= until
        }
        owner = self.keys.get(key)
        return frozenset(lids | ({owner} if owner else set()))

    # --- actions --------------------------------------------------------------------------

    def begin(self, label: str) -> _Action:
        self._numbers += 1
        action = _Action(self._numbers, label)
        self._actions.append(action)
        return action

    def crashed(self, process: str) -> None:
        """``process`` crashed: what it kept in memory to record late (an effect whose done
        write failed) is gone with it - the two-phase window, as a crash during the call."""
        self.crash_risk.update(self.errors_of.pop(process, set()))

    def end(self, action: _Action, *, done: bool, error: bool = False, process: str = "") -> None:
        """Close ``action``; its outputs are at risk unless it ended with "done". ``error``:
        it ended by an exception its process lived through (which could log an ALERT), not
        by a crash (which cannot)."""
        self._actions.remove(action)
        if not done:
            self.at_risk.update(action.outputs)
            (self.error_risk if error else self.crash_risk).update(action.outputs)
            if error and process:
                self.errors_of.setdefault(process, set()).update(action.outputs)

    def outlived(self, action: _Action, process: str, since: int) -> None:
        """A call of ``process`` that answered every delivery (``action`` ends "done") may
        still have run effects it could not record: its run was fenced after the handler
        returned, and the gate's ``lease_outlived`` ALERT (in ``decisions[since:]``) named
        them - a batch's fenced numbers are then acked as duplicates of the run that took the
        group over (seed 39068), where ``deliver`` nacks one. Those effects are at risk, as a
        nack would have left them (excused where an ALERT names them). Not when the fencing
        token is the process's own write (seed 90643: no takeover, a false fence), nor for an
        effect its call ran again at once (seed 12956: the toolkit's own rerun, not the
        window)."""
        ids = {o.message_id: o.lid for o in self.origins if o.lid is not None}
        effects = [lid for kind, lid in action.outputs if kind == "effect"]
        for d in self.decisions[since:]:
            if d.get("alert") != "lease_outlived" or d.process != process:
                continue
            match = _FENCED_BY.search(d.text)
            fenced = match and self.lease_write(str(d.get("fifo_group")), int(match[1]), d.at)
            if not fenced or fenced.process == process:
                continue
            key = str(d.get("dedup_key") or "").split("#")[0]
            lid = self.keys.get(key) or ids.get(key)
            if lid is not None and effects.count(lid) == 1:
                self.at_risk.add(("effect", lid))
                self.error_risk.add(("effect", lid))

    def _output(self, kind: str, lid: str | None) -> int:
        if not self._actions or lid is None:
            return 0
        self._actions[-1].outputs.append((kind, lid))
        return self._actions[-1].number

    # --- observations ---------------------------------------------------------------------

    def final_publish(self, lid: str | None) -> None:
        """A publish of ``lid`` to the final topic by the running action (at risk with it)."""
        self._output("final", lid)

    def effect(self, message: Message, at: float, process: str) -> Effect:
        a = message.attributes
        lid = self.lid_of(message)
        self._output("effect", lid)
        effect = Effect(
            lid,
            at,
            process,
            a.get(attr.DEDUP_KEY),
            a.get(attr.FIFO_GROUP),
            a.get(attr.FIFO_SEQ),
            a.get(attr.DELIVER_AT),
            is_filler(message),
            a.get("fifo_epoch"),
        )
        self.effects.append(effect)
        return effect

    def dead_letter(self, message: Message, at: float, reason: str, source: str) -> DeadLetter:
        a = message.attributes
        lid = self.lid_of(message)
        number = self._output(f"dead_letter:{reason}", lid) if source == "toolkit" else 0
        letter = DeadLetter(
            lid, at, reason, source, a.get(attr.FIFO_GROUP), a.get(attr.FIFO_SEQ), number
        )
        self.dead_letters.append(letter)
        return letter

    def decision(self, at: float, text: str, payload: dict[str, Any]) -> None:
        # A waiting group logs its gap ALERT at every sweep: keep the first few of each kind.
        kind = (payload.get("outcome"), payload.get("fifo_group"), payload.get("dedup_key"))
        seen = self._seen.get(kind, 0)
        self._seen[kind] = seen + 1
        if seen >= 5 and payload.get("outcome") not in ("taken_over", "fenced"):
            return
        fields = tuple(sorted((str(k), str(v)) for k, v in payload.items() if v is not None))
        process = self.acting[-1] if self.acting else ""
        self.decisions.append(Decision(at, str(payload.get("outcome", "")), text, fields, process))


def is_filler(message: Message) -> bool:
    """True for a FIFO filler marker (a number that carries no message: never handled)."""
    return "fifo_filler" in message.attributes
