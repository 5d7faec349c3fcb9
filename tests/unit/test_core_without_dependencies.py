"""The core and the contract run on the standard library alone (issue 26).

The two bottom layers of ``[tool.importlinter]`` (pyproject.toml) - the contract and the core
decisions - must need no Google, Redis or Firestore package: they are what a reader, the
simulation and every driver share. Here a venv with no packages at all (``--without-pip``)
imports every module of those layers from this checkout's sources and runs one decision of each
kind: a dedup claim driven by hand (the loop yields its primitives, the test answers them),
the FIFO gate's transitions of a group through its first number, an ingress route and the
relay's release meeting a cancel between its check and its claim. A
stray top-level ``import redis`` (or ``google.cloud``) in one of them fails this test; the
layers contract alone would not see it, as it checks only imports between our own modules.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BOTTOM_LAYERS = 2  # the core decisions and the contract: the last two of the layers contract

# Runs inside the bare venv: argv[1:] are the modules to import.
SCRIPT = """
import importlib, importlib.util, pkgutil, sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta

for absent in ("google", "redis", "flask", "werkzeug"):
    assert importlib.util.find_spec(absent) is None, f"{absent} is importable: the venv is not bare"
imported = 0
for name in sys.argv[1:]:
    package = importlib.import_module(name)
    imported += 1
    # A package (the core) is imported whole: each of its modules.
    for info in pkgutil.walk_packages(getattr(package, "__path__", []), name + "."):
        importlib.import_module(info.name)
        imported += 1

from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.stores.dedup import claims
from pubsub_toolkit.stores.dedup.base import ClaimStatus
from pubsub_toolkit.stores.dedup.claims import CreateOrGet, Found, Stored

# A dedup claim: the loop yields create-or-get; an empty key stores it; the claim is ours.
clock = ManualClock(datetime(2026, 1, 1, tzinfo=UTC))
protocol = claims.claim(
    "ns", "k", "fp", clock=clock, lease=timedelta(seconds=30), ttl=timedelta(hours=1)
)
op = next(protocol)
assert type(op) is CreateOrGet, op
try:
    protocol.send(Stored(1))
except StopIteration as stop:
    claim = stop.value
else:
    raise AssertionError("the claim loop asked for more than one primitive on an empty key")
assert claim.status is ClaimStatus.ACQUIRED, claim

# The same key again: the record found is a live claim elsewhere.
again = claims.claim(
    "ns", "k", "fp", clock=clock, lease=timedelta(seconds=30), ttl=timedelta(hours=1)
)
first = next(again)
try:
    again.send(Found(first.record, 1))
except StopIteration as stop:
    assert stop.value.status is ClaimStatus.IN_PROGRESS, stop.value

# The FIFO gate: #1 leased (a fencing token, its key recorded), then run: the head is #2.
from pubsub_toolkit.core import fifo_rules
from pubsub_toolkit.stores.fifo_state.base import GroupState

now, lease = clock.now(), timedelta(seconds=60)
running = fifo_rules.leased(GroupState(), "digest-1", now=now, lease=lease)
assert running.lease_token == 1 and running.head == 1, running
done = fifo_rules.advanced(running, 1, skipped=(), digest="digest-1", now=now, lease=lease)
assert done.last_processed == 1 and done.head == 2, done

# Ingress routing: a message due later, with no scheduler, is dead-lettered, never early.
from pubsub_toolkit.core import ingress as routing

later = clock.now() + timedelta(seconds=1)
assert routing.route(later, clock.now(), can_schedule=False) is routing.Route.UNDELIVERABLE

# The relay's release: a cancel landing between the check and the claim wins.
from pubsub_toolkit.core import fate, handover, release

protocol = release.release(None)
assert type(next(protocol)) is release.CheckCancelled
assert type(protocol.send(False)) is release.ReleaseOnce
assert type(protocol.send(fate.Processed(fate.Claimed.MISMATCH))) is release.CheckCancelled
try:
    protocol.send(True)
except StopIteration as stop:
    assert stop.value.release is release.Release.CANCELLED, stop.value
else:
    raise AssertionError("the release asked for more after the tombstone")
assert handover.on_failure(last=True, last_but_one=False) is handover.OnFailure.LAST_ATTEMPT

# The gate's core delivering #1, its effects performed by a tiny loop over a dict "store".
from pubsub_toolkit.core import fifo_effects as fx
from pubsub_toolkit.core.fifo_gate import FifoCore
from pubsub_toolkit.core.fifo_policy import GateOutcome
from pubsub_toolkit.message import Message

records, handled = {}, []

def perform(effect):
    if type(effect) is fx.Load:
        return records.get(effect.group, GroupState())
    if type(effect) is fx.Save:  # a compare-and-set on a version counter
        current = records.get(effect.group, GroupState())
        if current.version != effect.expected.version:
            return None
        records[effect.group] = replace(effect.state, version=(current.version or 0) + 1)
        return records[effect.group]
    if type(effect) is fx.Handle:
        handled.append(effect.taken)
        return None
    assert type(effect) in (fx.SpanStart, fx.SpanEnd), effect
    return None

core = FifoCore(consumer="c", decide=lambda *args, **fields: None, clock=clock)
message = Message(b"x", {"dedup_key": "k1", "fifo_seq": "1"}, message_id="m1")
result = fx.run(core.deliver(message, "g", 1), perform)
assert result.outcome is GateOutcome.PROCESSED and handled == [message], (result, handled)
assert records["g"].last_processed == 1 and records["g"].lease_until is None, records

print(f"core ok: {len(sys.argv) - 1} modules (+{imported - len(sys.argv) + 1} in their packages)")
"""


def core_modules() -> list[str]:
    """The modules of the two bottom layers, as the layers contract names them."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    layers = next(c for c in contracts if c["id"] == "layers")["layers"]
    names: list[str] = []
    for layer in layers[-BOTTOM_LAYERS:]:
        names += [part.strip() for part in layer.split(":") if part.strip()]
    return names


def test_the_core_imports_and_decides_with_no_third_party_package(tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    venv.EnvBuilder(with_pip=False, system_site_packages=False).create(bare)
    python = bare / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")
    modules = core_modules()
    assert "pubsub_toolkit.core" in modules  # the layers were read, not empty
    run = subprocess.run(
        [
            str(python),
            "-I",
            "-c",
            f"import sys; sys.path.insert(0, {str(ROOT / 'shared')!r})\n" + SCRIPT,
            *modules,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert f"core ok: {len(modules)} modules (+" in run.stdout
    assert "(+0 in their packages)" not in run.stdout  # the core package's modules, too
