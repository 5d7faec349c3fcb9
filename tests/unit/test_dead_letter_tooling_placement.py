"""Where the dead-letter code lives (issue 26): what a deployment runs stays in the library,
what an operator runs is the CLI distribution's.

The runtime needs only a replay's mark - ingress dead-letters a ``replay_id`` nobody minted
(``forged_replay_id``), and a relay's given-up message is recovered by minting one - so
:mod:`pubsub_toolkit.dead_letters.replay` keeps ``mint``, ``is_minted`` and the reason. Listing
the dead-letter topic and replaying it (``dlq list``, ``dlq replay``, the status page's count)
are :mod:`pubsub_toolkit_cli.dead_letters`, which mints through the library's ``mint``: the one
record ingress checks.
"""

from __future__ import annotations

import importlib.util

import pubsub_toolkit.dead_letters.replay as marks
import pubsub_toolkit_cli.dead_letters.replay as operator_replay
from pubsub_toolkit_cli.dead_letters import listing
from tests.conftest import repo_root


def test_the_library_keeps_only_the_replay_mark_ingress_checks() -> None:
    assert callable(marks.mint) and callable(marks.is_minted)
    assert marks.REASON_FORGED_REPLAY == "forged_replay_id"
    for operator_name in ("replay", "never_replayed", "DeadLetter", "list_dead_letters"):
        assert not hasattr(marks, operator_name), operator_name
    assert importlib.util.find_spec("pubsub_toolkit.dead_letters.listing") is None
    library = repo_root() / "shared/pubsub_toolkit/dead_letters"
    assert sorted(p.name for p in library.glob("*.py")) == ["__init__.py", "replay.py", "send.py"]


def test_the_operator_tooling_is_the_clis_and_mints_through_the_library() -> None:
    assert callable(listing.list_dead_letters) and callable(listing.read_letter)
    assert callable(operator_replay.replay) and callable(operator_replay.never_replayed)
    # One mint, one record: the operator's replay marks what ingress will look for.
    assert operator_replay.mint is marks.mint
    assert operator_replay.is_minted is marks.is_minted
