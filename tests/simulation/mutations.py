"""Each defect fix the simulation guards (issue 11's and later ones), reverted as a mutation: how
many schedules find it?

A :class:`Mutation` is the revert of one fix, applied as a monkeypatch for the duration of a
run: either a *source edit* (the fixed lines of one function replaced by the old ones, the
function recompiled in its own module - so the revert is exactly the diff, and it fails loudly
as ``stale`` when the fixed code changes), a *text edit* of a module constant (a store's Lua
script), or a *replacement* of one function.

``python -m tests.simulation.mutations`` runs the simulation on seeds 0, 1, 2, ... under each
mutation until the first schedule that breaks an invariant the unmutated code keeps on that
seed, and records "schedules needed" per defect in ``bench/results/simulation.json``.
``tests/simulation/test_mutations.py`` asserts each is found within :data:`BOUND` schedules.

:func:`hand_made` adds the seven bugs a review introduced by hand (issue 24), found the same
way: by schedules, or by the pytest nodes named in ``guarded_by``.

Not here: the fix that re-reads a FIFO group when a sibling thread's write landed during the
read and the store then lost it. That needs two events inside one read (the sibling's write,
then the rollback), and interleaving nests one; ``tests/unit/test_fifo_gate_witness.py`` holds
it (it fails with the fix reverted: a number runs twice).
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import multiprocessing
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from tests.simulation.faults import Kind
from tests.simulation.world import Options, Result, run_schedule

BOUND = 3000  # schedules within which every mutation must be found
MUTATION_ENV = "PUBSUB_TOOLKIT_TEST_MUTATION"  # tests/conftest.py applies it to a session
ROOT = Path(__file__).resolve().parents[2]


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


@dataclass(frozen=True)
class TextEdit:
    """In ``module``'s constant ``name`` (a Lua script, or a tuple of them), ``old`` -> ``new``:
    a script is re-read where it is used (registered at a store's construction, or named by
    its SHA-1 at each call), so the revert is in force for stores built under it."""

    module: str
    name: str
    old: str
    new: str

    def patch(self) -> tuple[Any, str, Any]:
        owner = importlib.import_module(self.module)
        text = getattr(owner, self.name)
        texts = text if isinstance(text, tuple) else (text,)
        if not any(self.old in t for t in texts):
            raise StaleMutation(f"{self.module}.{self.name} no longer contains {self.old!r}")
        edited = tuple(t.replace(self.old, self.new) for t in texts)
        return owner, self.name, edited if isinstance(text, tuple) else edited[0]


class ScriptShas(dict[str, str]):
    """The Redis dedup store's script SHA-1s, for any script text (an edited one too)."""

    def __missing__(self, script: str) -> str:
        return hashlib.sha1(script.encode()).hexdigest()


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
    """One fix reverted. ``guarded_by``: pytest node ids that must fail under it - for a fix
    only a test against a real server or real ``Consumer`` threads can see (the search then
    runs them, not schedules)."""

    defect: str
    what: str
    edits: tuple[SourceEdit | Replacement | TextEdit, ...]
    guarded_by: tuple[str, ...] = ()
    enable: tuple[str, ...] = ()  # issue-24 kinds its schedules draw at p = 0.5 (``--enable``)
    # Schedules searched before ``guarded_by`` runs (None: BOUND without tests, else none):
    # a test-guarded fix a schedule can see is looked for by schedules first.
    budget: int | None = None
    # The schedules checked with ``--strict``'s sharper rollback excuses (a store loss excuses
    # only what an ALERT named): a violation counts only where the fixed code keeps the seed.
    strict: bool = False

    @property
    def schedules(self) -> int:
        """How many schedules the search runs before it turns to ``guarded_by``."""
        if self.budget is not None:
            return self.budget
        return 0 if self.guarded_by else BOUND


@contextmanager
def applied(mutation: Mutation) -> Iterator[None]:
    """``mutation`` in force inside the block (every edit, or none if one is stale)."""
    patches = []
    for edit in mutation.edits:
        owner, name, value = edit.patch()
        original = _current(owner, name)
        patches.append((owner, name, value))
        # A module function also where another module imported it by name (``from
        # pubsub_toolkit.envelope import parse_envelope``): the revert is in force for every
        # caller, as the old code was.
        if not isinstance(owner, type):
            patches += [(other, name, value) for other in _importers(name, original, owner)]
    saved = [(owner, name, _current(owner, name)) for owner, name, _ in patches]
    try:
        for owner, name, value in patches:
            setattr(owner, name, value)
        yield
    finally:
        for owner, name, value in reversed(saved):
            setattr(owner, name, value)


def _importers(name: str, original: Any, home: Any) -> list[Any]:
    """The loaded modules other than ``home`` holding ``original`` as ``name``: the toolkit's,
    and the simulation's models that run its code (``tasks.TasksView`` plans with
    ``plan_task``, as ``CloudTasksScheduler`` does)."""
    return [
        module
        for key, module in sorted(sys.modules.items())
        if key.startswith(("pubsub_toolkit", "tests.simulation"))
        and module is not home
        and getattr(module, name, None) is original
    ]


def _current(owner: Any, name: str) -> Any:
    return owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)


def _new_violations(mutated: Result, baseline: Result) -> list[str]:
    known = {(v.invariant, v.lid) for v in baseline.violations}
    return [str(v) for v in mutated.violations if (v.invariant, v.lid) not in known]


def search(
    mutation: Mutation, bound: int | None = None, start: int = 0, *, tests: bool = True
) -> dict[str, Any]:
    """Seeds from ``start`` under ``mutation`` until one breaks what the fixed code keeps -
    at most ``bound`` (default: the mutation's own budget); when none does and the mutation is
    test-guarded, its tests run under it (found when they fail; ``tests=False``: not run)."""
    bound = mutation.schedules if bound is None else bound
    found = _search_schedules(mutation, bound, start) if bound else None
    if found is not None and (found["found"] or not (tests and mutation.guarded_by)):
        return found
    if mutation.guarded_by and tests:
        tested = _run_guarding_tests(mutation)
        if found is None:
            return tested
        seconds = round(tested["seconds"] + found["seconds"], 2)  # the schedules', then the tests'
        return {**tested, "schedules_tried": bound, "seconds": seconds}
    return {"found": False, "schedules_tried": 0}


def _search_schedules(mutation: Mutation, bound: int, start: int) -> dict[str, Any]:
    for edit in mutation.edits:  # a stale revert fails here, before any schedule runs
        edit.patch()
    options = Options(enable=tuple(Kind(k) for k in mutation.enable), strict=mutation.strict)
    began = time.monotonic()
    for n, seed in enumerate(range(start, start + bound), 1):
        with applied(mutation):
            mutated = run_schedule(seed, options)
        if not mutated.violations:
            continue
        new = _new_violations(mutated, run_schedule(seed, options))
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


def _run_guarding_tests(mutation: Mutation) -> dict[str, Any]:
    """pytest on ``mutation.guarded_by`` with the mutation in force (``tests/conftest.py``
    applies ``PUBSUB_TOOLKIT_TEST_MUTATION``): found only when the tests ran and failed (exit
    1) - an error, a usage error or no test collected is not a finding."""
    for edit in mutation.edits:
        edit.patch()
    began = time.monotonic()
    env = {**os.environ, MUTATION_ENV: mutation.defect}
    command = [sys.executable, "-m", "pytest", *mutation.guarded_by, "-q", "-x"]
    done = subprocess.run(
        [*command, "-p", "no:cacheprovider"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = round(time.monotonic() - began, 2)
    found = done.returncode == pytest_failed
    out: dict[str, Any] = {"found": found, "found_by_test": list(mutation.guarded_by)}
    if not found:
        tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
        out["pytest_exit"], out["pytest_said"] = done.returncode, tail
    return {**out, "seconds": seconds}


pytest_failed = 1  # pytest.ExitCode.TESTS_FAILED


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


def _old_is_cancelled(store: Any, fate_key: str, original_key: str | None = None) -> bool:
    """is_cancelled() before the fix: cancel()'s own tombstones (a replay's original's too)."""
    keys = (fate_key,) if original_key is None else (fate_key, original_key)
    return any(store.get("cancelled", key) is not None for key in keys)


def _mismatch_every_time(process: Callable[..., Any]) -> Callable[..., Any]:
    """IdempotentProcessor.process, except that a mismatch dead letter is never deduplicated."""

    def mutant(self: Any, key: str, fingerprint: str, effect: Any, **kwargs: Any) -> Any:
        if key.startswith("mismatch:"):
            from pubsub_toolkit.dedup.idempotent import Outcome, ProcessResult

            return ProcessResult(Outcome.PROCESSED, effect())
        return process(self, key, fingerprint, effect, **kwargs)

    return mutant


def mutations() -> tuple[Mutation, ...]:
    """Every fix reverted: issue 11's (found by schedules), then issue 24's (schedules or
    tests; ``tests/conftest.py`` applies one by its id for a pytest session)."""
    return (*issue_11(), *issue_24(), *hand_made(), *after_issue_26())


def issue_11() -> tuple[Mutation, ...]:
    """Issue 11's fixes reverted (and the later ones of that series): found by schedules."""
    from pubsub_toolkit.dedup.idempotent import IdempotentProcessor

    idem = "pubsub_toolkit.dedup.idempotent"
    policy = "pubsub_toolkit.core.fifo_policy"
    verdicts = "pubsub_toolkit.core.fifo_verdicts"
    return (
        Mutation(
            "1",
            "ingress forwards no filler for a renumbered producer retry",
            (
                SourceEdit(  # no duplicate at another number has a number to fill
                    "pubsub_toolkit.core.ingress",
                    "renumbered",
                    "    if seq is None or group is None or seq == first.seq:\n",
                    "    if True:\n",
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
                Replacement(policy, "GatePolicy.backoff", lambda self, failures: timedelta(0)),
                SourceEdit(
                    "pubsub_toolkit.core.fifo_rules",
                    "counts_as_attempt",
                    "return isinstance(exc, RetryLater | RedeliveryRequested) or not isinstance("
                    "exc, TransientError)",
                    "return True",
                ),
            ),
        ),
        Mutation(
            "4",
            "without a dead-letter topic, poison is skipped with a log line",
            (
                SourceEdit(  # skipped without a dead-letter topic: with a log line only
                    verdicts,
                    "poison_verdict",
                    "if dead_letters and poison is PoisonPolicy.SKIP:",
                    "if poison is PoisonPolicy.SKIP:",
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
                    "pubsub_toolkit.stores.dedup.claims",
                    "held_verdict",
                    "return Held.ALREADY_DONE if new.state is RecordState.DONE else Held.LOST",
                    "return Held.LOST",
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
                    "pubsub_toolkit.core.fifo_deliver",
                    "FifoDeliver.deliver",
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
                    "pubsub_toolkit.core.fifo_seen",
                    "SeenStore.load",
                    "seen = self._witness.get(group)\n"
                    "            state: GroupState = yield Load(self._consumer, group)\n",
                    "state: GroupState = yield Load(self._consumer, group)\n"
                    "            seen = self._witness.get(group)\n",
                ),
            ),
        ),
        Mutation(
            "13",
            "a done record whose write failed is alerted as lost when written late",
            (
                SourceEdit(
                    "pubsub_toolkit.core.idempotent_run",
                    "record_again",
                    "if done.recorded:",
                    "if True:",
                ),
            ),
        ),
    )


def issue_24() -> tuple[Mutation, ...]:
    """Issue 24's fixes reverted: found by schedules (the default mix, or the issue-24 kinds a
    mutation names at p = 0.5), or by their tests when its schedules miss it."""
    relay, envelope = "pubsub_toolkit.delay.relay", "pubsub_toolkit.envelope"
    handover = "pubsub_toolkit.core.handover"
    verdicts = "pubsub_toolkit.core.fifo_verdicts"
    subscriber = "pubsub_toolkit.consumer.subscriber"
    integration = "tests/integration/"
    return (
        Mutation(
            "24.6",
            "a release record lives DEDUP_TTL, not as long as a cancel tombstone",
            (
                SourceEdit(
                    relay,
                    "Relay.__init__",
                    "ttl=fate_ttl(ttl),  # cancel() must find it as long as it can find a "
                    "tombstone",
                    "ttl=ttl,",
                ),
                SourceEdit(
                    "pubsub_toolkit.ingress.pipeline",
                    "Ingress.__init__",
                    "self._releases = self._processor.sibling(RELAY_NAMESPACE, ttl=fate_ttl(ttl))",
                    "self._releases = self._processor.sibling(RELAY_NAMESPACE)",
                ),
            ),
        ),
        Mutation(
            "24.10",
            "ingress keeps room for 5 stamps only: a RetryLater copy can be refused later",
            (
                SourceEdit(
                    envelope,
                    "check_produced",
                    "max_attributes=MAX_ATTRIBUTES, max_bytes=MAX_MESSAGE_BYTES)\n"
                    "    _check_room_on_path(attrs)\n",
                    "max_attributes=MAX_ATTRIBUTES - 5, max_bytes=MAX_MESSAGE_BYTES)\n",
                ),
            ),
        ),
        Mutation(
            "24.r",
            "a refused message is dead-lettered once per message id (a producer's retry again)",
            (
                SourceEdit(
                    "pubsub_toolkit.core.ingress",
                    "rejection",
                    "rejection_key(message, fingerprint)",
                    'f"{message.message_id}:{fingerprint}"',
                ),
            ),
        ),
        Mutation(
            "24.9",
            "the relay's last Cloud Tasks attempt answers 5xx like any other (the task is lost)",
            (SourceEdit(handover, "on_failure", "if not last:", "if True:"),),
            guarded_by=("tests/unit/test_relay_last_attempt.py",),
            enable=("relay_store_outage",),  # 5 % of default schedules: found at 2 with it
            budget=300,
        ),
        Mutation(
            "24.9b",
            "the last attempt's ALERT does not name a FIFO message's group and number",
            (
                SourceEdit(
                    "pubsub_toolkit.delay.last_attempt",
                    "LastAttempt.dead_letter",
                    "number = decide.fifo_fields(message.attributes)",
                    "number = {}",
                ),
            ),
            guarded_by=(
                "tests/unit/test_relay_last_attempt.py"
                "::test_the_last_attempts_alert_names_a_fifo_messages_group_and_number",
            ),
            # Cloud Tasks refusing the relay's creates: its last attempt dead-letters
            enable=("relay_store_outage", "relay_tasks_refused"),
            budget=300,
        ),
        Mutation(
            "24.5",
            "a raise out of process_batch escapes Consumer's batch path and strands the group",
            (
                SourceEdit(
                    subscriber,
                    "Consumer._process_batch",
                    "        except Exception as exc:\n",
                    "        except ZeroDivisionError as exc:\n",
                ),
                SourceEdit(
                    "pubsub_toolkit.consumer.convoy",
                    "ConvoyDispatcher._run_group",
                    "        except BaseException:\n",
                    "        except ZeroDivisionError:\n",
                ),
            ),
            guarded_by=(
                integration + "test_consumer_failures.py"
                "::test_a_store_outage_in_batch_mode_does_not_wedge_the_group",
            ),
            # A handler's BaseException in Consumer's convoy (an Exception is caught by the
            # convoy's own net, ``_guarded``, before ``_run_group``; so is a raising on_outcome
            # listener, by ``tell``): the group stays active with no runner, what was queued
            # behind it never runs (invariant 1, lost silently).
            enable=("handler_exit",),
            budget=300,
        ),
        Mutation(
            "24.7",
            "the async store factory reads REDIS_URL only, and builds no cluster client",
            (
                SourceEdit(
                    "pubsub_toolkit.stores.factory",
                    "async_stores_from_settings",
                    "            redis_url_from_settings(settings), "
                    'needed_by="the async Redis stores"',
                    '            settings.redis_url or "", needed_by="the async Redis stores"',
                ),
                SourceEdit(
                    "pubsub_toolkit.stores.dedup.redis_async",
                    "connect_async",
                    "    if cluster:\n"
                    "        return aioredis.RedisCluster.from_url(url, **timeouts)\n",
                    "",
                ),
            ),
            guarded_by=(integration + "test_async_store_factory.py",),
        ),
        Mutation(
            "24.8",
            "ingress forwards a producer's dlq_* attributes (its message reads as a dead letter)",
            (
                SourceEdit(
                    envelope, "check_produced", "    _check_no_dead_letter_attribute(attrs)\n", ""
                ),
            ),
            guarded_by=(
                integration + "test_dlq_untrusted_letters.py"
                "::test_a_producers_dead_letter_attributes_are_refused_and_its_letter_is_what_it_sent",
            ),
            # reserved_attributes: a dlq_* name is expected dead-lettered reserved_attribute
            enable=("reserved_attributes",),
            budget=300,
        ),
        Mutation(
            "24.11",
            "a Redis READONLY/OOM reply is a plain ResponseError, not StoreUnavailableError",
            (
                SourceEdit(
                    "pubsub_toolkit.stores._redis_calls",
                    "is_unavailable",
                    "    if isinstance(exc, classes):\n        return True\n",
                    "    if isinstance(exc, (redis_module.ConnectionError, "
                    "redis_module.TimeoutError)):\n        return True\n    return False\n",
                ),
            ),
            guarded_by=(integration + "test_redis_error_replies.py",),
        ),
        Mutation(
            "24.12",
            "Consumer.result() never learns that the subscription is missing",
            (
                SourceEdit(
                    subscriber,
                    "Consumer.start",
                    "        self._end.watch(self._stream, self._closing.is_set)\n",
                    "",
                ),
            ),
            guarded_by=(
                integration + "test_consumer_result.py"
                "::test_a_consumer_on_a_missing_subscription_raises_not_found_from_result",
            ),
        ),
        Mutation(
            "24.1",
            "ingress routes a retry renumbered past the gate's key window (it runs again)",
            (
                SourceEdit(
                    "pubsub_toolkit.core.ingress",
                    "renumbered",
                    "elif first.seq is not None and not 0 < first.seq - seq < KEY_WINDOW:",
                    "elif False:",
                ),
            ),
            guarded_by=(
                "tests/unit/test_ingress.py::test_a_renumbered_retry_far_from_its_first_copy_runs_once",
            ),
            # renumber_far's retry comes from a restarted producer (a new number, > 64 later)
            enable=("renumber_far",),
            budget=600,
        ),
        Mutation(
            "24.1b",
            "a Publisher gives a retry of a key and content a new number",
            (
                SourceEdit(
                    "pubsub_toolkit.producer.stamping",
                    "number_plan",
                    "known = [numbered(k) if k else None for k in keys]",
                    "known = [None for k in keys]",
                ),
            ),
            guarded_by=("tests/unit/test_fifo_producer_retries.py",),
        ),
        Mutation(
            "24.2",
            "the gate ignores a message's counter epoch (a restarted counter's numbers look old)",
            (
                SourceEdit(
                    "pubsub_toolkit.core.fifo_epochs",
                    "Sequences.meet",
                    "epoch = rules.message_epoch(message)",
                    "epoch = None",
                ),
            ),
            guarded_by=(
                integration + "test_fifo_store_loss_redis.py"
                "::test_new_messages_after_redis_restarted_empty_run_not_acked_as_duplicates",
            ),
            budget=BOUND,  # the default mix's store_restart_empty (p = 0.1): found at 362
        ),
        Mutation(
            "24.2b",
            "a process that saw a group before its epoch takes a later restart for a loss",
            (
                SourceEdit(
                    "pubsub_toolkit.core.fifo_rules",
                    "other_sequence",
                    "return state.epoch != seen.epoch and bool(seen.epoch or state.prior)",
                    "return bool(seen.epoch) and state.epoch != seen.epoch",
                ),
            ),
            # Schedules found it before today's strays and restart fixes; since, none in 3,000
            # default schedules nor 1,500 with store_restart_empty.
            guarded_by=(
                "tests/unit/test_fifo_epochs.py"
                "::test_a_process_that_saw_the_group_before_its_epoch_takes_a_restart_for_no_loss",
            ),
        ),
        Mutation(
            "24.2c",
            "a failed run's parked copy does not replace a stray copy left at its number",
            (
                SourceEdit(
                    "pubsub_toolkit.core.fifo_seen",
                    "SeenStore.park_run",
                    "if stored is not None and message_key(stored) != message_key(message):",
                    "if False:",
                ),
            ),
            guarded_by=(
                "tests/unit/test_fifo_gate_strays.py"
                "::test_a_failed_runs_copy_replaces_a_stray_for_every_process_not_only_its_own",
            ),
        ),
        Mutation(
            "24.3",
            "the repair fences this process's own running lease (the in-flight run reruns)",
            (
                SourceEdit(  # a repair's moved lease is not the run's any more
                    "pubsub_toolkit.core.fifo_seen",
                    "SeenStore.lease_now",
                    "moved = self._moved_leases.get((group, token))",
                    "moved = None",
                ),
            ),
            guarded_by=(
                integration + "test_fifo_store_loss_redis.py"
                "::test_the_message_in_flight_when_redis_restarts_empty_runs_once",
            ),
            # The store restarts empty under a slow handler, the repair runs in its process:
            # invariant 7 (fenced by its own process's lease). Default mix: found at 978.
            enable=("slow_handler", "store_restart_empty"),
            budget=300,
        ),
        Mutation(
            "24.4",
            "the Redis counter from settings outlives DEDUP_TTL (an idle group waits for #1)",
            (
                SourceEdit(
                    "pubsub_toolkit.stores.factory",
                    "counter_from_settings",
                    "return cast(RedisBackend, backend).counter(ttl=settings.dedup_ttl)",
                    "return backend.counter()",
                ),
            ),
            guarded_by=(integration + "test_counter_lifetime.py",),
        ),
        Mutation(
            "24.4b",
            "a memory counter never forgets an idle group",
            (
                SourceEdit(
                    "pubsub_toolkit.stores.counters.memory",
                    "MemorySequenceCounter._forget_if_expired",
                    "if expire_at is not None and now >= expire_at:",
                    "if False:",
                ),
            ),
            guarded_by=("tests/unit/test_memory_counter_expiry.py",),
            # The default mix's long_pause (a group idle past DEDUP_TTL resumes): found at 2.
            # It was never searched before (a test-guarded mutation without a budget).
            budget=BOUND,
        ),
        Mutation(
            "24.s",
            "a batch handler's RetryLater runs the batch again at once, one by one",
            (
                SourceEdit(
                    verdicts,
                    "batch_failure",
                    "return BatchFailure.WAIT if isinstance(exc, RetryLater) else",
                    "return BatchFailure.WAIT if False else",
                ),
            ),
            guarded_by=("tests/unit/test_batch_retry_later.py",),
        ),
        Mutation(
            "27.1",
            "a failed publish's future carries no exception",
            (
                SourceEdit(
                    "pubsub_toolkit.producer.sink",
                    "settled",
                    "future.set_exception(exc)",
                    'future.set_result("")',
                ),
            ),
        ),
        Mutation(
            "27.5",
            "a fifo_group without a fifo_seq passes (it runs unordered)",
            (  # ingress, a rebuilt message and a delivery: one rule
                SourceEdit(
                    envelope,
                    "check_fifo_pair",
                    "if group is not None and not numbered:",
                    "if False:",
                ),
            ),
            guarded_by=("tests/unit/test_fifo_group_without_seq.py",),
        ),
        Mutation(
            "24.ttl",
            "a DEDUP_TTL within Pub/Sub's 7-day redelivery window is accepted",
            (
                SourceEdit(
                    "pubsub_toolkit.config",
                    "Settings.__post_init__",
                    "if self.dedup_ttl <= REDELIVERY_WINDOW:",
                    "if False:",
                ),
            ),
            guarded_by=(
                "tests/unit/test_attribute_budget.py"
                "::test_a_dedup_ttl_within_the_redelivery_window_is_refused_naming_the_variable",
            ),
        ),
        Mutation(
            "24.batch",
            "process_batch raises a store failure after part of the batch was settled",
            (
                SourceEdit(
                    "pubsub_toolkit.core.fifo_deliver",
                    "FifoDeliver.deliver_batch",
                    "                except Exception as exc:\n                    if not results:",
                    "                except ZeroDivisionError as exc:\n"
                    "                    if not results:",
                ),
            ),
            guarded_by=(
                "tests/unit/test_batch_store_failures.py"
                "::test_a_store_outage_after_a_batch_ran_is_answered_per_delivery_not_raised",
            ),
        ),
        Mutation(
            "24.outlived",
            "a run that outlived its lease and was taken over is not an ALERT naming it",
            (
                SourceEdit(
                    verdicts,
                    "outlived",
                    "return tuple(steps) if isinstance(exc, StaleClaimError) else ()",
                    "return ()",
                ),
            ),
            guarded_by=(
                "tests/unit/test_fifo_lease_outlived.py"
                "::test_a_run_that_outlived_its_lease_and_was_taken_over_is_an_alert_naming_it",
            ),
            # A slow handler's call outlives the lease and another process runs the number
            # meanwhile: a rerun no ALERT named (invariant 1).
            enable=("slow_handler",),
            budget=300,
        ),
        Mutation(
            "24.busy",
            "a process takes over its own run still under way past the lease",
            (
                SourceEdit(
                    "pubsub_toolkit.core.fifo_held",
                    "HeldLeases.busy",
                    "return group in self._running",
                    "return False",
                ),
            ),
            guarded_by=(
                "tests/unit/test_fifo_lease_outlived.py"
                "::test_its_own_process_does_not_take_over_a_run_still_under_way",
            ),
            # Its own sweeper takes the group over under a slow handler's call: invariant 7
            # (fenced by its own process's lease, no store loss).
            enable=("slow_handler",),
            budget=300,
        ),
        Mutation(
            "24.handover",
            "the relay's last attempt dead-letters instead of handing the message to a new task",
            (
                SourceEdit(  # the last attempt but one: 5xx; the last: a dead letter
                    handover,
                    "last_attempt",
                    "        if handed is not HandOver.MADE:\n"
                    "            return LastEnd.RETRY\n"
                    "        return LastEnd.RESCHEDULED\n"
                    "    if handed is not HandOver.NOT_MADE:",
                    "        if True:\n"
                    "            return LastEnd.RETRY\n"
                    "        return LastEnd.RESCHEDULED\n"
                    "    if False:",
                ),
            ),
            guarded_by=("tests/unit/test_relay_last_attempt_continues.py",),
            enable=("relay_store_outage",),
            budget=300,
        ),
        Mutation(
            "24.filler",
            "a FIFO message the relay dead-letters leaves its group waiting (no filler)",
            (
                SourceEdit(
                    "pubsub_toolkit.delay.last_attempt",
                    "LastAttempt.fill",
                    "if filler is None:",
                    "if True:",
                ),
            ),
            guarded_by=("tests/unit/test_relay_fifo_give_up.py",),
            enable=("relay_store_outage", "relay_tasks_refused"),
            budget=300,
        ),
        Mutation(
            "24.L1",
            "a counter restart drops the old sequence's parked head instead of running it first",
            (
                SourceEdit(
                    verdicts,
                    "restart_verdict",
                    "if state.head in state.parked and state.blocked_at is None:",
                    "if False:",
                ),
                SourceEdit(
                    "pubsub_toolkit.core.fifo_epochs",
                    "Sequences.settle_and_restart",
                    "yield from self._wait(group, seq, state)",
                    "pass",
                ),
            ),
            guarded_by=("tests/unit/test_fifo_restart_parked_head.py",),
            # a counter that restarts: lost with the store, or expired over a long pause
            enable=("store_restart_empty", "long_pause"),
            budget=600,
        ),
        Mutation(
            "24.L2",
            "a process runs again a key it ran, renumbered beyond the state's 64 keys",
            (
                SourceEdit(
                    verdicts,
                    "ran_before",
                    "found = remembered(group, state, seq, message)",
                    "found = None",
                ),
            ),
            guarded_by=("tests/unit/test_fifo_gate_ran_keys.py",),
            enable=("renumber_far",),  # a retry renumbered > 64 later, by a new Publisher
            budget=600,
        ),
        Mutation(
            "24.L3",
            "another message at a number beyond the state's keys is acked as a duplicate",
            (
                SourceEdit(
                    "pubsub_toolkit.core.fifo_deliver",
                    "FifoDeliver.deliver",
                    "if self._seen.ran.reused(group, state, seq, digest):",
                    "if False:",
                ),
            ),
            guarded_by=(
                "tests/unit/test_fifo_gate_ran_keys.py"
                "::test_another_message_at_a_number_further_back_than_the_states_keys_is_not_a_duplicate",
            ),
        ),
        Mutation(
            "24.L4",
            "a stray copy at a parked number runs in place of the listed message",
            (
                SourceEdit(
                    "pubsub_toolkit.core.fifo_seen",
                    "SeenStore.parked",
                    "if stored is not None and listed in (None, key_digest(message_key(stored))):",
                    "if stored is not None:",
                ),
                SourceEdit(  # a refused repair leaves what it parked again (strays)
                    "pubsub_toolkit.core.fifo_seen",
                    "SeenStore.unpark_unlisted",
                    "if seq not in listed and stored and message_key(stored) == message_key(copy):",
                    "if False:",
                ),
            ),
            guarded_by=("tests/unit/test_fifo_gate_strays.py",),
        ),
        Mutation(
            "24.fifo_end",
            "a copy settled past the group's end by another process reads as a lost write",
            (
                SourceEdit(
                    "pubsub_toolkit.core.fifo_rules",
                    "went_back",
                    "and s not in state.parked and not settled_past_end(state, s)\n",
                    "and s not in state.parked\n",
                ),
            ),
            guarded_by=("tests/unit/test_fifo_end_other_process.py",),
            # copies past the end: a far retry after its group's end, on another process
            enable=("renumber_far", "fifo_end"),
            budget=600,
        ),
        Mutation(
            "24.replay_cancel",
            "a DLQ replay of a cancelled message is delivered (its own fate key only)",
            (
                SourceEdit(
                    "pubsub_toolkit.core.fate",
                    "cancel_keys",
                    "keys = (fate_key,) if original_key is None else (fate_key, original_key)",
                    "keys = (fate_key,)",
                ),
                SourceEdit(
                    "pubsub_toolkit.delay.cancel",
                    "release_once",
                    "    if original_key is None:\n",
                    "    if True:\n",
                ),
            ),
            guarded_by=("tests/unit/test_replay_of_cancelled.py",),
        ),
        Mutation(
            "24.replay_cancel_race",
            "a DLQ replay's release claims its own fate record only: a cancel() after its check "
            "answers 'not delivered' about a replay on the final topic",
            (
                SourceEdit(
                    "pubsub_toolkit.delay.cancel",
                    "release_once",
                    "    if original_key is None:\n",
                    "    if True:\n",
                ),
            ),
            guarded_by=("tests/unit/test_cancel_races_replay.py",),
        ),
        Mutation(
            "24.past_end_settled",
            "a settle past a group's end leaves no proof: a copy the store lost before the end ran "
            "is taken for settled (lost silently)",
            (
                SourceEdit(
                    "pubsub_toolkit.core.fifo_rules",
                    "without_after_end",
                    "skipped=merge_ranges(state.skipped, tuple(sorted(gone))),",
                    "skipped=state.skipped,",
                ),
            ),
            guarded_by=("tests/unit/test_fifo_end_other_process.py",),
            # The default mix's fifo_end: a copy settled past the end by another process reads
            # as a lost write (invariant 7), found at 188; it was never searched before.
            budget=BOUND,
        ),
        Mutation(
            "24.older",
            "a late message of the old sequence at a number another key took is a duplicate",
            (
                SourceEdit(
                    verdicts,
                    "older_verdict",
                    "if rules.taken_in_prior(state, epoch, seq, message):",
                    "if False:",
                ),
            ),
            guarded_by=("tests/unit/test_fifo_epoch_reuse.py",),
        ),
        Mutation(
            "24.nack",
            "a handler's own nack() is not counted toward poison (a FIFO group retries for ever)",
            (
                SourceEdit(
                    "pubsub_toolkit.core.fifo_rules",
                    "counts_as_attempt",
                    "isinstance(exc, RetryLater | RedeliveryRequested)",
                    "isinstance(exc, RetryLater)",
                ),
            ),
        ),
    )


def hand_made() -> tuple[Mutation, ...]:
    """Issue 24's seven bugs introduced by hand in a review (the simulation found two of them
    then), as plausible one-line edits of today's code (H3r: the same bug in the Redis FIFO
    store's script; H2r: H2's revert - the claim loop's one token check - seen on a real
    redis-server), each found by schedules of the default mix or by the test named.

    H4 is found by schedules since the Cloud Tasks model refuses a schedule time past 30 days
    (as the service and the local emulator do) and invariant 12 counts ``schedule_rejected`` as
    a refusal of a legitimate message.

    H5 is found by schedules since invariant 5 looks at a cancelled message's dead letters
    too: its relay, meeting the cancel after its own check, dead-lettered it as a mismatch.

    H2 is found by schedules of the default mix since a ``slow_handler`` call lets the due
    events run meanwhile (64 of them, not a plain sleep's 4): the message's redelivery after its
    ack deadline takes the claim over once the lease ran out, and the slow call's complete then
    "succeeds" on the new holder's done record - an effect twice, no ALERT (invariant 1).

    Why a test and not schedules: H1 - no schedule can make its difference observable. The
    simulation is one thread: a run that outlives its lease sleeps inside its handler, and
    whatever runs meanwhile (the takeover) is nested in that sleep and finishes first, so the old
    holder's late write always meets a number the new holder passed, which the advance refuses
    with or without the token check. A write landing after the new holder took the lease but
    before it advanced needs two runs suspended at once (a model with threads or coroutines of
    its own); and even then both versions end the same way for the checker - one of the two
    runs is fenced with a ``lease_outlived`` ALERT naming the number, the rerun is excused by it
    (under H1 the new holder is fenced instead of the old one). The other writes of an
    outlived run (a failure counted, a retry parked) come from a handler that fails after
    outliving its lease: none in 1,000 schedules with ``slow_handler``. H2r runs H2's revert
    against a real redis-server, H3r is Lua only a real redis-server runs; H3 needs a rival's
    write to reach the same save count after a rollback while a process compares with its own
    last version (the ABA the simulation found at seed 16,289; ``store_restart_empty``: none in
    1,000); H6: reissued numbers parked after a loss (none in 1,000 with
    ``store_restart_empty``, nor 300 with ``slow_handler`` beside it).
    """
    fifo_redis = "pubsub_toolkit.stores.fifo_state.redis"
    contract = "tests/integration/test_dedup_store_contract.py"
    faults = (
        "tests/integration/test_store_contract_faults.py"
        "::test_a_fifo_state_lost_by_a_restart_reads_as_new_and_its_old_version_never_matches"
    )
    return (
        Mutation(
            "H1",
            "the FIFO gate's state write no longer checks that it still holds the lease",
            (
                SourceEdit(
                    "pubsub_toolkit.core.fifo_verdicts",
                    "holds_lease",
                    "return state.lease_token == token",
                    "return True",
                ),
            ),
            guarded_by=(
                "tests/unit/test_fifo_lease_fencing.py"
                "::test_a_run_that_outlived_its_lease_cannot_advance_under_the_new_holder",
            ),
        ),
        Mutation(
            "H2",
            "the claim loop (stores.dedup.claims, so every backend: memory, Redis, Firestore, "
            "sync and async) completes a claim whose lease another holder took over",
            (_STALE_COMPLETE,),
            guarded_by=(
                contract + "::test_expired_lease_is_taken_over_and_stale_holder_is_fenced[memory]",
            ),
            # The default mix's slow_handler (p = 0.1): a redelivery takes the claim over under
            # a slow call, whose complete then "succeeds" - an effect twice, no ALERT.
            budget=BOUND,
        ),
        Mutation(
            "H2r",
            "H2's revert (the one token check every backend shares), seen on a real redis-server",
            (_STALE_COMPLETE,),
            guarded_by=(
                contract + "::test_expired_lease_is_taken_over_and_stale_holder_is_fenced[redis]",
            ),
        ),
        Mutation(
            "H3",
            "the memory FIFO store's version counts saves (a rolled-back store issues it again)",
            (
                SourceEdit(
                    "pubsub_toolkit.stores.fifo_state.memory",
                    "MemoryFifoStore.save",
                    "stored = replace(state, version=_Version())",
                    "stored = replace(state, version=(current.version or 0) + 1)",
                ),
            ),
            guarded_by=(faults + "[memory]",),
        ),
        Mutation(
            "H3r",
            "the Redis FIFO store compares the save count, not the write id (ABA after a loss)",
            (
                TextEdit(
                    fifo_redis,
                    "_SAVE_IF_VERSION",
                    "elseif current[2] ~= ARGV[1] then",
                    "elseif current[1] ~= ARGV[1] then",
                ),
                SourceEdit(fifo_redis, "RedisFifoStore.load", '["s", "w"]', '["s", "v"]'),
                SourceEdit(
                    fifo_redis,
                    "RedisFifoStore.save",
                    "return replace(state, version=write_id)",
                    "return replace(state, version=str(int(expected_version or 0) + 1))",
                ),
            ),
            guarded_by=(
                faults + "[redis]",
                "tests/integration/test_fifo_store_contract.py"
                "::test_a_version_from_before_a_data_loss_never_matches_a_later_write[redis]",
            ),
        ),
        Mutation(
            "H4",
            "a task is scheduled at its due time, beyond Cloud Tasks' 30-day horizon (no hop)",
            (
                SourceEdit(
                    "pubsub_toolkit.delay.scheduler",
                    "plan_task",
                    "        min(deliver_at, now + HORIZON),\n",
                    "        deliver_at,\n",
                ),
            ),
        ),
        Mutation(
            "H5",
            "the relay does not look for a cancel that landed between its check and its claim",
            (
                SourceEdit(  # the release protocol ingress runs too
                    "pubsub_toolkit.core.release",
                    "release",
                    "if (yield from _cancelled()):  # cancelled between check and claim",
                    "if False:",
                ),
            ),
            guarded_by=(
                "tests/unit/test_relay.py"
                "::test_a_cancel_landing_between_the_check_and_the_publish_wins_or_is_told_delivered",
            ),
            # invariant 5: a cancel that said "not delivered" is not dead-lettered as a
            # mismatch either (the default mix's cancel + interleave: found at 249)
            budget=BOUND,
        ),
        Mutation(
            "H6",
            "a repair drops the copies parked at a reissued number with the ALERT only (no dead "
            "letter)",
            (
                SourceEdit(
                    "pubsub_toolkit.core.fifo_seen",
                    "SeenStore.keep_reissued",
                    "                yield from self._keep_reissued(copy, group, seq, repaired)\n",
                    "                pass  # the ALERT names them\n",
                ),
            ),
            guarded_by=(
                "tests/unit/test_fifo_gate.py"
                "::test_a_reissued_number_parked_after_a_loss_is_kept_even_if_its_dead_letter_fails_once",
            ),
        ),
        Mutation(
            "H7",
            "a group with parked copies is dated to expire like an idle one",
            (
                SourceEdit(
                    "pubsub_toolkit.core.fifo_rules",
                    "dated",
                    "expire_at=None if needs_attention(state) else now + retention",
                    "expire_at=None if state.blocked_at is not None else now + retention",
                ),
            ),
        ),
    )


# H2, H2r: the claim loop's token check on complete/release, written once for every backend
# (before, H2 edited the memory store and H2r the Redis store's Lua script).
_STALE_COMPLETE = SourceEdit(
    "pubsub_toolkit.stores.dedup.claims",
    "held_verdict",
    "    if current is None or current.token != held.token:\n",
    "    if current is None:\n",
)


def after_issue_26() -> tuple[Mutation, ...]:
    """Defects a new user's trial found after issue 26, with the simulation dimension that
    sees them. P1: a handler's PermanentError outside FIFO groups was nacked (the claim
    released) and redelivered for ever, never dead-lettered - with ``handler_permanent`` a
    plain message whose subscription has no dead-letter policy is then never dead-lettered
    nor run (invariant 1, lost silently; 44 of 600 schedules at p = 0.5). S1, S2: FIFO defects
    found by the default mix beyond seed 200,000 (seeds 232256, 223215); S3, S4: the same after a
    store loss (seeds 230393, 225487); G1: a running head skipped as a gap (seed 103165); R1,
    R2: renumbered copies of one key dead-lettered when their sequence restarted (seeds 132612,
    132734); U1: a new sequence's copy taken by the old sequence's late unpark (seed 160824)."""
    return (
        Mutation(
            "P1",
            "a handler's PermanentError outside FIFO groups is nacked, not dead-lettered",
            (
                SourceEdit(
                    "pubsub_toolkit.core.process",
                    "run_handler",
                    "    except PermanentError as exc:\n",
                    "    except ZeroDivisionError as exc:\n",
                ),
            ),
            enable=("handler_permanent",),
            budget=300,
        ),
        # Found by a run over seeds 205,000-235,000 (default mix): far past a mutation search's
        # budget, so each is held by its unit test, and its seed by test_regression_seeds.py.
        Mutation(
            "S1",
            "a poison verdict whose dead letter was not confirmed runs the handler again",
            (
                SourceEdit(
                    "pubsub_toolkit.core.fifo_verdicts",
                    "poison_pending",
                    "return state.attempts >= max_attempts",
                    "return False",
                ),
            ),
            guarded_by=("tests/unit/test_fifo_poison_letter_unconfirmed.py",),
        ),
        Mutation(
            "S2",
            "a crash's unlisted copy of an ended sequence holds the new sequence's number",
            (
                SourceEdit(
                    "pubsub_toolkit.core.fifo_verdicts",
                    "stray_of_earlier_sequence",
                    "return epoch is not None and epoch < state.epoch and any(",
                    "return False and any(",
                ),
            ),
            guarded_by=("tests/unit/test_fifo_epoch_stray_copy.py",),
        ),
        Mutation(
            "S3",
            "a number refused as reused in an epoch the record adopted only in memory",
            (
                SourceEdit(
                    "pubsub_toolkit.core.fifo_deliver",
                    "FifoDeliver.deliver",
                    "refused = yield from self._refused(message, group, seq, state, loaded)",
                    "refused = yield from self._reused(message, group, seq, state)",
                ),
            ),
            guarded_by=("tests/unit/test_fifo_epoch_adopted_refusal.py",),
        ),
        Mutation(
            "S4",
            "a refused repair unparks a copy ahead of the group that another repair listed",
            (
                SourceEdit(
                    "pubsub_toolkit.core.fifo_seen",
                    "SeenStore.unpark_unlisted",
                    "if seq > state.last_processed:",
                    "if False:",
                ),
            ),
            guarded_by=("tests/unit/test_fifo_refused_repair_relisted.py",),
        ),
        Mutation(
            "G1",
            "a FIFO head that ran under a lease is skipped as a gap the moment the lease ends",
            (
                SourceEdit(
                    "pubsub_toolkit.core.fifo_verdicts",
                    "gap_started",
                    "return max(state.gap_since, state.lease_until)",
                    "return state.gap_since",
                ),
            ),
            guarded_by=("tests/unit/test_fifo_gap_running_head.py",),
        ),
        Mutation(
            "R1",
            "a copy parked in an old sequence whose key already ran is dead-lettered as restarted",
            (
                SourceEdit(
                    "pubsub_toolkit.core.fifo_epochs",
                    "Sequences.settle_and_restart",
                    "if copy is None or self._ran_before(group, state, seq, copy):",
                    "if copy is None:",
                ),
            ),
            guarded_by=(
                "tests/unit/test_fifo_restart_renumbered_copy.py::"
                "test_a_parked_copy_of_a_key_that_ran_is_not_dead_lettered_when_the_sequence_"
                "restarts",
            ),
        ),
        Mutation(
            "R2",
            "two copies of one key parked in an old sequence are both dead-lettered as restarted",
            (
                SourceEdit(
                    "pubsub_toolkit.core.fifo_epochs",
                    "Sequences.settle_and_restart",
                    "elif (first := _first_parked(state, seq)) != seq:",
                    "elif (first := seq) != seq:",
                ),
            ),
            guarded_by=(
                "tests/unit/test_fifo_restart_renumbered_copy.py::"
                "test_two_parked_copies_of_one_key_are_dead_lettered_once_when_the_sequence_"
                "restarts",
            ),
        ),
        Mutation(
            "U1",
            "a new sequence's copy that replaced the old sequence's at its number is acked",
            (
                SourceEdit(
                    "pubsub_toolkit.core.fifo_seen",
                    "SeenStore.park_run",
                    "displaced = older is not None and own is not None and older < own",
                    "displaced = False",
                ),
            ),
            guarded_by=("tests/unit/test_fifo_epoch_late_unpark.py",),
        ),
    )


def run_all(bound: int | None = None, workers: int = 2) -> dict[str, Any]:
    """Every mutation searched for, by id: what it reverts, its series (``issue_11``,
    ``issue_24``, ``hand_made``, ``after_issue_26``), the issue-24 kinds its schedules drew at
    p = 0.5, and what found it (``bound``: schedules each, default its own budget) - on
    ``workers`` processes, each mutation in a process of its own fork (a revert never outlives
    its search)."""
    series = {
        "issue_11": issue_11(),
        "issue_24": issue_24(),
        "hand_made": hand_made(),
        "after_issue_26": after_issue_26(),
    }
    jobs = [(name, m.defect, bound) for name, members in series.items() for m in members]
    with multiprocessing.get_context("fork").Pool(workers, maxtasksperchild=1) as pool:
        done = pool.map(_searched_job, jobs, chunksize=1)
    return dict(done)


def _searched_job(job: tuple[str, str, int | None]) -> tuple[str, dict[str, Any]]:
    name, defect, bound = job
    mutation = next(m for m in mutations() if m.defect == defect)
    return defect, {"series": name, **_searched(mutation, bound)}


def _searched(mutation: Mutation, bound: int | None) -> dict[str, Any]:
    try:
        found = search(mutation, bound)
    except StaleMutation as exc:
        found = {"found": False, "stale": str(exc)}
    print(f"defect {mutation.defect} ({mutation.what}): {found}", flush=True)
    enable = {"enable": list(mutation.enable)} if mutation.enable else {}
    return {"reverted": mutation.what, **enable, **found}


def main() -> int:
    from tests.simulation.runner import write

    workers = int(os.environ.get("WORKERS", "2"))
    results = run_all(workers=workers)
    write("mutations", results)
    return 0 if all(r.get("found") for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
