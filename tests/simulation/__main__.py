"""``python -m tests.simulation``: run N schedules, or replay one seed with its whole trace.

    python -m tests.simulation --seeds 10000 [--start 0] [--workers 2]
    python -m tests.simulation --seed 123
    python -m tests.simulation --seeds 500 --enable store_restart_empty,long_pause [--strict]
    python -m tests.simulation --seeds 500 --all     # every opt-in kind of issue 24
    python -m tests.simulation --seeds 500 --shape asyncio,idempotent_callback
    python -m tests.simulation --seed 7 --shape process --one-at-a-time   # asyncio's schedule

Exit status 1 when any schedule breaks an invariant. Run with PYTHONHASHSEED=0 (``make sim``
does) - the simulation never depends on set order, but a fixed hash seed makes sure of it.
"""

from __future__ import annotations

import argparse
import sys

from tests.simulation.faults import EXTRA_KINDS, Kind
from tests.simulation.runner import replay, run_many, write
from tests.simulation.shapes import Shape
from tests.simulation.world import Options


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.simulation", description=__doc__)
    parser.add_argument("--seeds", type=int, default=10_000, help="how many schedules to run")
    parser.add_argument("--start", type=int, default=0, help="the first seed")
    parser.add_argument("--seed", type=int, default=None, help="replay this one seed, traced")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--only",
        default=None,
        help="comma-separated fault kinds to enable in every schedule (e.g. cancel,interleave)",
    )
    parser.add_argument(
        "--enable",
        default="",
        help="comma-separated opt-in kinds drawn too (p = 0.5 each): "
        + ",".join(k.value for k in EXTRA_KINDS),
    )
    parser.add_argument("--all", action="store_true", help="enable every opt-in kind")
    parser.add_argument(
        "--strict",
        action="store_true",
        help="a store loss excuses only the messages and groups an ALERT named",
    )
    parser.add_argument(
        "--shape",
        default="",
        help="comma-separated consumer shapes every schedule is drawn from: "
        + ",".join(s.value for s in Shape),
    )
    parser.add_argument(
        "--one-at-a-time",
        action="store_true",
        help="no process_batch, no batch handler: `--shape process` runs the schedule "
        "`--shape asyncio` runs (tests/simulation/test_sync_async_same_effects.py)",
    )
    args = parser.parse_args(argv)
    forced = tuple(Shape(s).value for s in args.shape.split(",") if s)
    only = None if args.only is None else tuple(Kind(k) for k in args.only.split(",") if k)
    enable = EXTRA_KINDS if args.all else tuple(Kind(k) for k in args.enable.split(",") if k)
    if args.seed is not None:
        result, small = replay(
            args.seed,
            Options(
                only=only,
                enable=enable,
                strict=args.strict,
                shapes=forced,
                one_at_a_time=args.one_at_a_time,
            ),
        )
        write(
            "replay",
            {
                "seed": args.seed,
                "shape": result.shape,
                "events": result.events,
                "faults_injected": dict(result.faults),
                "violations": [str(v) for v in result.violations],
                "shrunk_faults": list(small.enabled) if small else None,
            },
        )
        return 1 if result.violations else 0
    figures = run_many(
        args.start,
        args.seeds,
        workers=args.workers,
        only=only,
        enable=enable,
        strict=args.strict,
        forced_shapes=forced,
        one_at_a_time=args.one_at_a_time,
    )
    section = "run" if only is None else "run_only"
    section = "run_opt_in" if enable else "run_strict" if args.strict else section
    section = "run_shapes" if forced else section
    write(section, figures)
    return 1 if figures["schedules_with_violations"] else 0


if __name__ == "__main__":
    sys.exit(main())
