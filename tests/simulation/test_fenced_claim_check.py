"""Invariant 7's check of the dedup path's "fenced" ALERT (``invariants._no_false_alarm``).

The idempotent processor logs "ALERT: effect ran after our lease expired and another worker
took over" when ``complete`` finds its claim's token superseded. That is a false alarm when no
newer claim of the key exists - but the takeover need not have been logged: seed 167324's
taker (``dedup.claim applied, then an error reply``) never heard its claim land, so it logged
no ``taken_over`` and never ran the effect, yet the store held its token 2 and fenced the slow
first run's ``complete``. The ALERT was true; the checker now counts a landed claim its writer
never heard of. Still caught: a fence with no newer claim at all, and one whose only newer
claim is the run's own process's (a process never claims a key it is running).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from tests.simulation.invariants import _no_false_alarm
from tests.simulation.ledger import Decision, Ledger

NS = "sim-consumer"
RUN = "consumer0#0"
OTHER = "consumer1#0"


def _fenced(ledger: Ledger, at: float, token: int = 1) -> None:
    text = "ALERT: effect ran after our lease expired and another worker took over"
    fields = (("consumer", NS), ("dedup_key", "m6"), ("outcome", "fenced"), ("token", str(token)))
    ledger.decisions.append(Decision(at, "fenced", text, fields, RUN))


def _claimed(ledger: Ledger, token: int, process: str, at: float, *, heard: bool) -> None:
    ledger.claim_written(NS, "m6", token, process, at, heard=heard)


def _violations(ledger: Ledger) -> list[str]:
    relax = SimpleNamespace(checks_alarms=True, rollback=False)
    final: Any = SimpleNamespace(ledger=ledger, relax=relax)
    return [v.detail for v in _no_false_alarm(final)]


def test_a_takeover_whose_claim_landed_unheard_is_no_false_alarm() -> None:
    """Seed 167324: claim 1 at 55 s (a 145 s handler), consumer1's claim 2 at 96 s landed and
    got an error reply (no taken_over logged), the run's complete fenced at 200 s."""
    ledger = Ledger()
    _claimed(ledger, 1, RUN, 55.4, heard=True)
    _claimed(ledger, 2, OTHER, 96.3, heard=False)
    _fenced(ledger, 200.1)
    assert _violations(ledger) == []


def test_a_fence_with_no_newer_claim_is_a_false_alarm() -> None:
    ledger = Ledger()
    _claimed(ledger, 1, RUN, 55.4, heard=True)
    _fenced(ledger, 200.1)
    assert _violations(ledger) == [
        "ALERT: effect ran after our lease expired and another worker took over (m6: no takeover)"
    ]


def test_a_newer_claim_of_the_runs_own_process_or_after_the_alert_is_no_takeover() -> None:
    """Its own process never claims a key it runs (``Memory.running``), and a claim after the
    ALERT did not fence it: neither excuses the ALERT."""
    ledger = Ledger()
    _claimed(ledger, 1, RUN, 55.4, heard=True)
    _claimed(ledger, 2, RUN, 96.3, heard=False)
    _claimed(ledger, 3, OTHER, 210.0, heard=False)
    _fenced(ledger, 200.1)
    assert len(_violations(ledger)) == 1
