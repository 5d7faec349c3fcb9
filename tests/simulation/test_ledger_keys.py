"""An ALERT names a dedup key; the ledger says which logical messages that key may mean.

Seed 19186: a hostile producer's ``key_reuse`` copy (L8) took the key ``k5`` before the
message it was made for (L5). The consumer ran L8's effect, its ``done`` write failed in a
store outage (ALERT ``complete_failed``, dedup_key ``k5``), and another consumer ran it again
after the lease - the documented two-phase window. The ALERT is about L8, not the key's owner.
"""

from __future__ import annotations

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.message import Message
from tests.simulation.ledger import Ledger
from tests.simulation.weaker_guarantees import Relaxation


def _ledger_with_reused_key() -> Ledger:
    ledger = Ledger(keys={"k5": "L5"})  # the workload maps a key to its legitimate message
    action = ledger.begin("consume m2 (attempt 1)")
    hostile = Message(b"L8:hostile0000", {attr.DEDUP_KEY: "k5"}, message_id="m2")
    ledger.effect(hostile, 17.0, "consumer0#0")
    ledger.end(action, done=False, error=True, process="consumer0#0")  # complete failed
    return ledger


def test_an_alert_on_a_reused_key_names_the_copy_whose_effect_ran_under_it() -> None:
    ledger = _ledger_with_reused_key()
    assert ledger.lids_of_key("k5", 22.0) == {"L5", "L8"}


def test_an_alert_names_no_effect_that_ran_after_it() -> None:
    ledger = _ledger_with_reused_key()
    assert ledger.lids_of_key("k5", 16.0) == {"L5"}
    assert ledger.lids_of_key("k9", 22.0) == frozenset()


def test_a_complete_failed_alert_on_a_reused_key_excuses_the_copys_rerun() -> None:
    ledger = _ledger_with_reused_key()
    ledger.decision(
        22.0,
        "ALERT: effect done but not recorded; a redelivery after the lease may repeat it",
        {"outcome": "complete_failed", "dedup_key": "k5", "consumer": "sim-consumer"},
    )
    relax = Relaxation.for_schedule(ledger)
    assert relax.repeat_excused("L8", ["consumer0#0", "consumer2#0"])
