"""Each defect fix the simulation guards (issue 11's and later ones), reverted as a mutation: how
many schedules find it?

A :class:`Mutation` is the revert of one fix, applied as a monkeypatch for the duration of a
run: either a *source edit* (the fixed lines of one function replaced by the old ones, the
function recompiled in its own module - so the revert is exactly the diff, and it fails loudly
as ``stale`` when the fixed code changes) or a *replacement* of one function.

``python -m tests.simulation.mutations`` runs the simulation on seeds 0, 1, 2, ... under each
mutation until the first schedule that breaks an invariant the unmutated code keeps on that
seed, and records "schedules needed" per defect in ``bench/results/simulation.json``.
``tests/simulation/test_mutations.py`` asserts each is found within :data:`BOUND` schedules.

Not here: the fix that re-reads a FIFO group when a sibling thread's write landed during the
read and the store then lost it. That needs two events inside one read (the sibling's write,
then the rollback), and interleaving nests one; ``tests/unit/test_fifo_gate_witness.py`` holds
it (it fails with the fix reverted: a number runs twice).
"""

from __future__ import annotations

import importlib
import inspect
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from tests.simulation.world import Result, run_schedule

BOUND = 3000  # schedules within which every mutation must be found


@dataclass(frozen=True)
class SourceEdit:
    """In ``module``'s ``qualname`` (``Class.method`` or ``function``), ``old`` -> ``new``."""

    module: str
    qualname: str
    old: str
    new: str

    def patch(self) -> tuple[Any, str, Any]:
        owner, name, original = _resolve(self.module, self.qualname)
        func = inspect.unwrap(original)
        source = inspect.getsource(func)  # as indented in the file, like ``old`` and ``new``
        if self.old not in source:
            raise StaleMutation(f"{self.module}.{self.qualname} no longer contains {self.old!r}")
        namespace: dict[str, Any] = {}
        module = importlib.import_module(self.module)
        mutant = textwrap.dedent(source.replace(self.old, self.new))
        code = compile(mutant, f"<mutant {self.qualname}>", "exec")
        exec(code, module.__dict__, namespace)
        return owner, name, namespace[func.__name__]


@dataclass(frozen=True)
class Replacement:
    """``module``'s ``qualname`` replaced by ``value``."""

    module: str
    qualname: str
    value: Any

    def patch(self) -> tuple[Any, str, Any]:
        owner, name, _ = _resolve(self.module, self.qualname)
        return owner, name, self.value


class StaleMutation(Exception):
    """The fixed code changed: the revert no longer applies and must be rewritten."""


def _resolve(module_name: str, qualname: str) -> tuple[Any, str, Any]:
    owner: Any = importlib.import_module(module_name)
    *path, name = qualname.split(".")
    for part in path:
        owner = getattr(owner, part)
    return owner, name, _current(owner, name)


@dataclass(frozen=True)
class Mutation:
    defect: str
    what: str
    edits: tuple[SourceEdit | Replacement, ...]


@contextmanager
def applied(mutation: Mutation) -> Iterator[None]:
    """``mutation`` in force inside the block (every edit, or none if one is stale)."""
    patches = [edit.patch() for edit in mutation.edits]
    saved = [(owner, name, _current(owner, name)) for owner, name, _ in patches]
    try:
        for owner, name, value in patches:
            setattr(owner, name, value)
        yield
    finally:
        for owner, name, value in reversed(saved):
            setattr(owner, name, value)


def _current(owner: Any, name: str) -> Any:
    return owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)


def _new_violations(mutated: Result, baseline: Result) -> list[str]:
    known = {(v.invariant, v.lid) for v in baseline.violations}
    return [str(v) for v in mutated.violations if (v.invariant, v.lid) not in known]


def search(mutation: Mutation, bound: int = BOUND, start: int = 0) -> dict[str, Any]:
    """Seeds from ``start`` under ``mutation`` until one breaks what the fixed code keeps."""
    began = time.monotonic()
    for n, seed in enumerate(range(start, start + bound), 1):
        with applied(mutation):
            mutated = run_schedule(seed)
        if not mutated.violations:
            continue
        new = _new_violations(mutated, run_schedule(seed))
        if new:
            seconds = round(time.monotonic() - began, 2)
            return {
                "found": True,
                "seed": seed,
                "schedules_needed": n,
                "violation": new[0],
                "seconds": seconds,
            }
    return {"found": False, "schedules_tried": bound, "seconds": round(time.monotonic() - began, 2)}


def _no_op(*args: Any, **kwargs: Any) -> None:
    return None


def _old_cancel(dedup_key: str, *, store: Any, scheduler: Any) -> Any:
    """cancel() before the fix: a tombstone of its own, then a look at the relay's record."""
    from pubsub_toolkit.delay import cancel as c
    from pubsub_toolkit.stores.dedup.base import RecordState

    lease, ttl = timedelta(minutes=1), c.TOMBSTONE_TTL
    claim = store.claim("cancelled", dedup_key, "cancelled", lease=lease, ttl=ttl)
    if claim.owns_key:
        store.complete("cancelled", dedup_key, claim, "cancelled", ttl=c.TOMBSTONE_TTL)
    deleted = scheduler.delete(dedup_key)
    released = store.get(c.RELAY_NAMESPACE, dedup_key)
    delivered = released is not None and released.state is RecordState.DONE
    return c.CancelResult(dedup_key, task_deleted=deleted, already_delivered=delivered)


def _old_is_cancelled(store: Any, dedup_key: str) -> bool:
    return store.get("cancelled", dedup_key) is not None


def _mismatch_every_time(process: Callable[..., Any]) -> Callable[..., Any]:
    """IdempotentProcessor.process, except that a mismatch dead letter is never deduplicated."""

    def mutant(self: Any, key: str, fingerprint: str, effect: Any, **kwargs: Any) -> Any:
        if key.startswith("mismatch:"):
            from pubsub_toolkit.dedup.idempotent import Outcome, ProcessResult

            return ProcessResult(Outcome.PROCESSED, effect())
        return process(self, key, fingerprint, effect, **kwargs)

    return mutant


def mutations() -> tuple[Mutation, ...]:
    from pubsub_toolkit.dedup.idempotent import IdempotentProcessor

    gate, idem = "pubsub_toolkit.consumer.gate", "pubsub_toolkit.dedup.idempotent"
    rules = "pubsub_toolkit.consumer.gate_rules"
    return (
        Mutation(
            "1",
            "ingress forwards no filler for a renumbered producer retry",
            (
                Replacement(
                    "pubsub_toolkit.ingress.pipeline", "Ingress._fill_renumbered_retry", _no_op
                ),
            ),
        ),
        Mutation(
            "2",
            "no witness: a process trusts a store that lost its writes",
            (Replacement("pubsub_toolkit._witness", "Witness.get", lambda self, key: None),),
        ),
        Mutation(
            "3",
            "no backoff, and a TransientError from the handler counts as a failure",
            (
                Replacement(rules, "GatePolicy.backoff", lambda self, failures: timedelta(0)),
                SourceEdit(
                    gate,
                    "FifoGate._on_failure",
                    "counts = rules.counts_as_attempt(exc)",
                    "counts = True",
                ),
            ),
        ),
        Mutation(
            "4",
            "without a dead-letter topic, poison is skipped with a log line",
            (
                SourceEdit(
                    gate,
                    "FifoGate._on_failure",
                    "if self._dead_letters is not None and self.policy.poison is PoisonPolicy.SKIP"
                    ":\n"
                    "            self._dead_letters.send(",
                    "if self.policy.poison is PoisonPolicy.SKIP:\n"
                    "            self._dead_letters and self._dead_letters.send(",
                ),
            ),
        ),
        Mutation(
            "5",
            "cancel writes its own tombstone and reads the relay's record after",
            (
                Replacement("pubsub_toolkit.delay.cancel", "cancel", _old_cancel),
                Replacement("pubsub_toolkit.delay.cancel", "is_cancelled", _old_is_cancelled),
                Replacement("pubsub_toolkit.delay.relay", "is_cancelled", _old_is_cancelled),
                Replacement("pubsub_toolkit.ingress.pipeline", "is_cancelled", _old_is_cancelled),
            ),
        ),
        Mutation(
            "6",
            "complete is not idempotent: a lost reply is a StaleClaimError",
            (
                SourceEdit(
                    "pubsub_toolkit.stores.dedup.memory",
                    "MemoryDedupStore.complete",
                    "if mine and current is not None and current.state is RecordState.DONE:",
                    "if False:",
                ),
            ),
        ),
        Mutation(
            "6b",
            "a fingerprint mismatch is dead-lettered again at every redelivery",
            (
                Replacement(
                    idem,
                    "IdempotentProcessor.process",
                    _mismatch_every_time(IdempotentProcessor.process),
                ),
            ),
        ),
        Mutation(
            "8",
            "fifo_seq has no upper bound (a 64-bit store cannot hold it)",
            (
                SourceEdit(
                    "pubsub_toolkit.attributes",
                    "parse_fifo_seq",
                    "if len(raw) > len(str(MAX_FIFO_SEQ)) or int(raw) > MAX_FIFO_SEQ:",
                    "if False:",
                ),
            ),
        ),
        Mutation(
            "9",
            "the gate ignores which key a number belongs to",
            (
                SourceEdit(
                    gate,
                    "FifoGate.deliver",
                    "if state.key_of(seq) is not None and not state.records(seq, digest):",
                    "if False:",
                ),
            ),
        ),
        Mutation(
            "12",
            "a read is compared with what this process saw after it (a sibling's write: a loss)",
            (
                SourceEdit(
                    "pubsub_toolkit.consumer._gate_store",
                    "SeenStore.load",
                    "seen = self._witness.get(group)\n"
                    "            state = self._store.load(self._consumer, group)\n",
                    "state = self._store.load(self._consumer, group)\n"
                    "            seen = self._witness.get(group)\n",
                ),
            ),
        ),
        Mutation(
            "13",
            "a done record whose write failed is alerted as lost when written late",
            (
                SourceEdit(
                    idem, "IdempotentProcessor._record_again", "if done.recorded:", "if True:"
                ),
            ),
        ),
    )


def run_all(bound: int = BOUND) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mutation in mutations():
        try:
            found = search(mutation, bound)
        except StaleMutation as exc:
            found = {"found": False, "stale": str(exc)}
        out[mutation.defect] = {"reverted": mutation.what, **found}
        print(f"defect {mutation.defect} ({mutation.what}): {found}", flush=True)
    return out


def main() -> int:
    from tests.simulation.runner import write

    results = run_all()
    write("mutations", results)
    return 0 if all(r.get("found") for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
