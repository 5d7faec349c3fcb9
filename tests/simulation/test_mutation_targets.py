"""Every mutation still applies (no revert is stale), and those of the core - the FIFO gate's
protocol and the dedup claim loop - target its public, documented decisions, not private names
(issue 26): a refactoring that renames a step cannot silently drop a guarded defect."""

from __future__ import annotations

import importlib

import pytest

from tests.simulation.mutations import Mutation, Replacement, SourceEdit, mutations

CORE = ("pubsub_toolkit.core.", "pubsub_toolkit.stores.dedup.claims")


@pytest.mark.parametrize("mutation", mutations(), ids=lambda m: f"defect-{m.defect}")
def test_every_revert_applies_to_todays_code(mutation: Mutation) -> None:
    for edit in mutation.edits:
        edit.patch()  # StaleMutation when the fixed text is gone


CORE_EDITS = [
    (m.defect, edit)
    for m in mutations()
    for edit in m.edits
    if isinstance(edit, SourceEdit | Replacement) and edit.module.startswith(CORE)
]


@pytest.mark.parametrize(("defect", "edit"), CORE_EDITS, ids=[d for d, _ in CORE_EDITS])
def test_a_core_mutation_targets_a_public_documented_decision(
    defect: str, edit: SourceEdit | Replacement
) -> None:
    private = [part for part in edit.qualname.split(".") if part.startswith("_")]
    assert not private, f"defect {defect}: {edit.module}.{edit.qualname} is private"
    target = importlib.import_module(edit.module)
    for part in edit.qualname.split("."):
        target = getattr(target, part)
    assert (target.__doc__ or "").strip(), f"defect {defect}: {edit.qualname} has no docstring"
