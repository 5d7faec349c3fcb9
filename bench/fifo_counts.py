"""bench/fifo_counts: what the FIFO gate asks of its store, this tree against a baseline commit.

Machine-independent counts, so a baseline from another commit can stand beside them: the gate of
each tree runs on the in-memory store wrapped by :class:`bench.counting.CountingFifoStore` (the
counts are the gate's protocol calls; each maps to one billed operation on Firestore and one
round trip on Redis, see that module), in its own ``python -I`` subprocess whose ``sys.path``
starts with that tree's ``shared/``:

* **in order, one by one**: 1,000 messages of one group delivered in order; state writes
  (``save``) and all writes (with ``park``/``unpark``) per message;
* **sweep**: 10,000 idle groups (one message each) and 10 with a parked message (their head
  missing); one sweep round - ``gate.groups()`` and ``gate.sweep`` of each - by the gate that
  wrote them and by a fresh one (a restarted process): groups visited and billed reads.

The current tree runs with the consumer's default ``PUBSUB_TOOLKIT_FIFO_LEASE_HOLD_SECONDS`` (2 s),
the baseline with its own defaults. ``python -m bench.fifo_counts [--baseline COMMIT]``: the
baseline (default ``0990fda``, main before issue 15) is checked out with ``git worktree`` under /tmp
and removed afterwards. JSON to ``bench/results/fifo_counts.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import write_result

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_BASELINE = "0990fda"
MESSAGES = 1_000
IDLE_GROUPS = 10_000
ACTIVE_GROUPS = 10

# Runs inside the subprocess, on the tree whose shared/ is first on sys.path.
_PROBE = """
import inspect, json, sys
from datetime import timedelta
sys.path[:0] = [sys.argv[1], sys.argv[2]]
import pubsub_toolkit
assert pubsub_toolkit.__file__.startswith(sys.argv[1]), pubsub_toolkit.__file__
from bench.counting import CountingFifoStore
from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.core.fifo_policy import GatePolicy
from pubsub_toolkit.message import Message
from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore

def policy():
    if "lease_hold" in inspect.signature(GatePolicy).parameters:
        return GatePolicy(lease_hold=timedelta(seconds=2))  # the consumer's default
    return GatePolicy()

def gate(store):
    return FifoGate(store, consumer="c", handler=lambda m: None, policy=policy())

def message(group, seq):
    attributes = {"fifo_group": group, "fifo_seq": str(seq), "dedup_key": f"{group}-{seq}"}
    return Message(b"x", attributes, message_id=f"{group}-{seq}")

figures = {}
store = CountingFifoStore(MemoryFifoStore())
one = gate(store)
for seq in range(1, MESSAGES + 1):
    one.deliver(message("g", seq), "g", seq)
figures["in_order_state_writes_per_message"] = store.calls["save"] / MESSAGES
figures["in_order_writes_per_message"] = store.writes / MESSAGES
figures["in_order_reads_per_message"] = store.reads / MESSAGES

store = CountingFifoStore(MemoryFifoStore())
writer = gate(store)
for n in range(IDLE_GROUPS):
    writer.deliver(message(f"idle-{n}", 1), f"idle-{n}", 1)
for n in range(ACTIVE_GROUPS):
    writer.deliver(message(f"active-{n}", 2), f"active-{n}", 2)
for label, sweeper in (("writing_gate", writer), ("fresh_gate", gate(store))):
    store.reset()
    groups = sweeper.groups()
    for group in groups:
        sweeper.sweep(group)
    figures[f"sweep_{label}_groups_visited"] = len(groups)
    figures[f"sweep_{label}_reads"] = store.reads
print(json.dumps(figures))
"""


def _measure(tree: Path) -> dict[str, float]:
    constants = f"MESSAGES={MESSAGES}\nIDLE_GROUPS={IDLE_GROUPS}\nACTIVE_GROUPS={ACTIVE_GROUPS}\n"
    out = subprocess.run(
        [sys.executable, "-I", "-c", constants + _PROBE, str(tree / "shared"), str(ROOT)],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    figures: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default=DEFAULT_BASELINE)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pubsub-toolkit-baseline-")) / "tree"
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(work), args.baseline],
        check=True,
    )
    try:
        baseline = _measure(work)
    finally:
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(work)], check=True
        )
    current = _measure(ROOT)
    result = {
        "baseline_commit": args.baseline,
        "messages": MESSAGES,
        "idle_groups": IDLE_GROUPS,
        "active_groups": ACTIVE_GROUPS,
        "baseline": baseline,
        "current": current,
        "targets": {"in_order_state_writes_per_message": 1.0, "sweep_reads": "O(active groups)"},
    }
    path = write_result("fifo_counts", result)
    for key in current:
        print(f"{key:>40}: {baseline.get(key, float('nan')):>10.3f} -> {current[key]:>10.3f}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
