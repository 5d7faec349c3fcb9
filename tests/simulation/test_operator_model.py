"""The simulation's operator follows docs/how-to/operate.md, and is given the rounds it needs.

Three seeds whose "violations" were the model's, not the library's:

* 37470 - a FIFO message's first copy (#5) was forwarded from origin by Pub/Sub while its
  producer's retry ran at #117 through ingress; the operator replayed the old letter 45 days
  later, past ``DEDUP_TTL``, when ingress had forgotten the key, so the message ran at both
  numbers. The documented operator replays within ``DEDUP_TTL`` of the letter; later it skips
  the number (the letter keeps the message).
* 50196 - a store restarted empty forgot a long group's position; the operator skips one
  number a round, and 60 rounds ran out before the numbers still parked behind the gap.
* 1638 - a group waited at a number whose letter Pub/Sub forwarded without a ``dedup_key``;
  ``dlq replay`` keeps such a letter (it could run the message twice), and the operator did
  nothing more, so the numbers parked behind it never ran. It skips the number instead.
"""

from __future__ import annotations

from tests.simulation.world import Options, run_schedule


def test_a_letter_older_than_the_dedup_ttl_is_skipped_not_replayed() -> None:
    result = run_schedule(37470, Options(trace_limit=None))
    assert result.violations == ()
    assert "OPERATOR skip g1#5: dead letter forwarded past DEDUP_TTL" in result.trace
    assert "OPERATOR dlq replay k21" not in result.trace


def test_the_operator_rounds_reach_the_numbers_parked_behind_a_long_gap() -> None:
    result = run_schedule(50196, Options(trace_limit=None))
    assert result.violations == ()
    assert "EFFECT consumer0#7 L76 key=b76 group=g1 seq=68" in result.trace


def test_a_kept_letter_at_the_head_is_skipped() -> None:
    result = run_schedule(1638, Options(trace_limit=None))
    assert result.violations == ()
    assert "OPERATOR skip g1#4: its dead letter is kept" in result.trace
