"""bench/charts: one PNG of the recorded benchmark results, for the README.

Run with ``make bench`` (last) or ``python -m bench.charts [--results DIR] [--out FILE]``. It
reads ``dedup.json``, ``delay.json``, ``fifo_sequencer.json``, ``fifo.json`` and
``e2e_mixed.json`` (and ``soak.json`` when present) from ``bench/results/`` and writes
``bench/results/benchmarks.png`` beside them.

The file is deterministic for given inputs: matplotlib's Agg backend, a fixed size and DPI, no
timestamps drawn and none in the PNG metadata, so re-running it without new results changes no
bytes. A missing or malformed input is reported as one line naming the file (exit status 2).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display here, and Agg renders identically everywhere

import matplotlib.pyplot as plt  # after use("Agg"): the backend must be chosen first
from matplotlib.axes import Axes

RESULTS = Path(__file__).resolve().parent / "results"
REQUIRED = ("dedup", "delay", "fifo_sequencer", "fifo", "e2e_mixed")
OPTIONAL = ("soak",)
SIZE_INCHES, DPI = (15.0, 9.0), 100  # 1500 x 900 pixels
COLOURS = {"memory": "#4c72b0", "redis": "#dd8452", "firestore": "#55a868", "other": "#8172b3"}


class ChartInputError(Exception):
    """A results file is missing or does not hold what the charts need."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"{path}: {problem}")


class Results:
    """The parsed results files; ``get`` names the file and field when one is missing."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.docs: dict[str, dict[str, Any]] = {}
        for name in REQUIRED + OPTIONAL:
            path = directory / f"{name}.json"
            if not path.exists():
                if name in OPTIONAL:
                    continue
                raise ChartInputError(path, "missing (run `make bench` to record it)")
            try:
                document = json.loads(path.read_text())
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise ChartInputError(path, f"not valid JSON ({exc})") from None
            if not isinstance(document, dict):
                raise ChartInputError(path, "expected a JSON object at the top level")
            self.docs[name] = document

    def has(self, name: str) -> bool:
        return name in self.docs

    def get(self, name: str, dotted: str) -> Any:
        value: Any = self.docs[name]
        for part in dotted.split("."):
            if not isinstance(value, dict) or part not in value:
                raise ChartInputError(self.directory / f"{name}.json", f"no field {dotted!r}")
            value = value[part]
        return value

    def number(self, name: str, dotted: str) -> float:
        value = self.get(name, dotted)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ChartInputError(
                self.directory / f"{name}.json", f"field {dotted!r} is not a number: {value!r}"
            )
        return float(value)


def _label_bars(ax: Axes, bars: Any, fmt: str) -> None:
    ax.bar_label(bars, labels=[fmt.format(b.get_height()) for b in bars], padding=2, fontsize=9)


def dedup_panel(ax: Axes, r: Results) -> None:
    backends = ("memory", "redis", "firestore")
    ratios = [r.number("dedup", f"ingress.ratio_to_passthrough.{b}") for b in backends]
    bars = ax.bar(backends, ratios, color=[COLOURS[b] for b in backends])
    _label_bars(ax, bars, "{:.2f}x")
    ax.axhline(1.0, color="grey", linewidth=1, linestyle=":")
    for backend in ("redis", "firestore"):
        target = r.number("dedup", f"ingress.targets.{backend}")
        x = backends.index(backend)
        ax.hlines(target, x - 0.4, x + 0.4, colors="black", linestyles="--", linewidth=1)
    passthrough = r.number("dedup", "ingress.msgs_per_s_median.passthrough")
    ax.set_title(f"Dedup: ingress ÷ pass-through ({passthrough:.0f} msgs/s)\n-- = target")
    ax.set_ylabel("ratio (higher is better)")
    ax.set_ylim(0, 1.2)


def lateness_panel(ax: Axes, r: Results) -> None:
    stats = ("p50", "p99", "max")
    bench_count = r.number("delay", "lateness.messages")
    series = [
        (
            f"delay bench ({bench_count:,.0f} msgs, 1-10 s)",
            [r.number("delay", f"lateness.lateness_ms.{s}") for s in stats],
        )
    ]
    if r.has("soak"):
        soak_count = r.number("soak", "lateness_ms.messages")
        series.append(
            (
                f"soak ({soak_count:,.0f} delayed msgs, under load)",
                [r.number("soak", f"lateness_ms.{s}") for s in stats],
            )
        )
    width = 0.8 / len(series)
    for i, (label, values) in enumerate(series):
        xs = [x + (i - (len(series) - 1) / 2) * width for x in range(len(stats))]
        colour = COLOURS["firestore"] if i == 0 else COLOURS["other"]
        bars = ax.bar(xs, values, width, label=label, color=colour)
        _label_bars(ax, bars, "{:.0f}")
    target = r.number("delay", "lateness.target.p99_ms")
    ax.axhline(target, color="black", linestyle="--", linewidth=1, label=f"p99 target {target:.0f}")
    ax.set_xticks(range(len(stats)), stats)
    early = int(r.number("delay", "lateness.early"))
    ax.set_title(f"Delayed delivery: arrival - due time (early: {early})")
    ax.set_ylabel("lateness, ms (lower is better)")
    ax.legend(fontsize=8, loc="upper left")


def sequencer_panel(ax: Axes, r: Results) -> None:
    variants = (
        ("firestore_transaction", "Firestore\ntransaction"),
        ("firestore_increment", "Firestore\nIncrement"),
        ("firestore_block", "Firestore\nblock of 50"),
        ("redis_incrby", "Redis\nINCRBY"),
    )
    rates = [r.number("fifo_sequencer", f"runs.{key}.numbers_per_s") for key, _ in variants]
    colours = [
        COLOURS["redis"] if k.startswith("redis") else COLOURS["firestore"] for k, _ in variants
    ]
    bars = ax.bar([label for _, label in variants], rates, color=colours)
    _label_bars(ax, bars, "{:,.1f}")
    ax.set_yscale("log")
    ax.set_ylim(0.1, max(rates) * 10)
    publishers = int(r.number("fifo_sequencer", "publishers"))
    ax.set_title(f"FIFO sequencer: numbers/s, {publishers} publishers on one group (log)")
    ax.set_ylabel("numbers per second")


def consumer_panel(ax: Axes, r: Results) -> None:
    by_groups = r.get("fifo", "fifo_msgs_per_s_by_groups")
    if not isinstance(by_groups, dict) or not by_groups:
        raise ChartInputError(r.directory / "fifo.json", "fifo_msgs_per_s_by_groups is empty")
    groups = sorted(by_groups, key=int)
    rates = [r.number("fifo", f"fifo_msgs_per_s_by_groups.{g}") for g in groups]
    backend = str(r.get("fifo", "backend"))
    bars = ax.bar(groups, rates, color=COLOURS.get(backend, COLOURS["other"]))
    _label_bars(ax, bars, "{:.0f}")
    unordered = r.number("fifo", "unordered_msgs_per_s")
    ax.axhline(unordered, color="black", linestyle="--", linewidth=1)
    ax.annotate(
        f"unordered (dedup only): {unordered:.0f}/s",
        (0, unordered),
        xytext=(0, 4),
        textcoords="offset points",
        fontsize=8,
    )
    ax.set_ylim(0, unordered * 1.2)
    ax.set_xlabel("FIFO groups")
    ax.set_ylabel("messages per second")
    ax.set_title(f"FIFO consumer ({backend} state):\nmessages/s by number of groups")


def pipeline_panel(ax: Axes, r: Results) -> None:
    runs = [("e2e mixed", "e2e_mixed")] + ([("soak", "soak")] if r.has("soak") else [])
    rates = [r.number(name, "published_msgs_per_s") for _, name in runs]
    counts = [r.number(name, "messages" if name == "soak" else "published") for _, name in runs]
    walls = [r.number(name, "wall_s") for _, name in runs]
    labels = [
        f"{label}\n{count:,.0f} msgs, {wall:,.0f} s"
        for (label, _), count, wall in zip(runs, counts, walls, strict=True)
    ]
    bars = ax.bar(labels, rates, color=[COLOURS["firestore"], COLOURS["other"]][: len(runs)])
    _label_bars(ax, bars, "{:.1f}")
    ax.set_ylim(0, max(rates) * 1.3)
    ax.set_ylabel("published messages per second")
    ax.set_title(
        "Whole local stack: published messages/s\n(bound by the emulator's 2 pushes in flight)"
    )


def ledger_panel(ax: Axes, r: Results) -> None:
    if not r.has("soak"):
        ax.axis("off")
        ax.text(0.5, 0.5, "soak: not recorded\n(make soak)", ha="center", va="center")
        return
    parts = ("delivered", "deduplicated", "dead_lettered")
    values = [r.number("soak", f"ledger.{p}") for p in parts]
    total = r.number("soak", "ledger.in")
    left = 0.0
    for part, value, colour in zip(parts, values, COLOURS.values(), strict=False):
        ax.barh(
            [1.55],
            [value],
            height=0.4,
            left=left,
            color=colour,
            label=f"{part.replace('_', '-')}: {value:,.0f}",
        )
        left += value
    balanced = r.get("soak", "ledger.balanced") is True
    ax.set_title(
        f"Soak ledger: in {total:,.0f} = "
        + " + ".join(f"{v:,.0f}" for v in values)
        + f"\n({'balanced' if balanced else 'NOT balanced'}: delivered + deduplicated"
        " + dead-lettered)"
    )
    reasons = r.get("soak", "ledger.dead_letter_reasons")
    if not isinstance(reasons, dict):
        raise ChartInputError(r.directory / "soak.json", "ledger.dead_letter_reasons is no object")
    lines = [
        f"wall {r.number('soak', 'wall_s'):,.0f} s, "
        f"{r.number('soak', 'published_msgs_per_s'):.1f} published msgs/s, "
        f"backend {r.get('soak', 'backend')}",
        f"delay lateness p99 {r.number('soak', 'lateness_ms.p99'):.0f} ms, "
        f"early {r.number('soak', 'lateness_ms.early'):.0f}",
        f"FIFO groups in order: {r.number('soak', 'ledger.fifo_groups_in_order'):.0f}"
        f"/{r.number('soak', 'ledger.fifo_groups'):.0f}",
        "dead-lettered by reason:",
    ]
    entries = [f"{k} {v}" for k, v in sorted(reasons.items())]
    # Two reasons a line: a long line would squeeze the other panels in tight_layout.
    lines += ["  " + ", ".join(entries[i : i + 2]) for i in range(0, len(entries), 2)]
    ax.text(0.01, 0.03, "\n".join(lines), transform=ax.transAxes, fontsize=8, va="bottom")
    ax.set_xlim(0, max(total, left) * 1.02)
    ax.set_ylim(0, 2.0)
    ax.set_yticks([])
    ax.legend(fontsize=8, loc="upper center", ncols=3)


PANELS = (
    dedup_panel,
    lateness_panel,
    sequencer_panel,
    consumer_panel,
    pipeline_panel,
    ledger_panel,
)


def render(results_dir: Path, out: Path) -> Path:
    """Draw every panel from the files in ``results_dir`` into ``out``; raises ChartInputError."""
    results = Results(results_dir)
    plt.rcParams.update({"font.size": 10})
    fig, axes = plt.subplots(2, 3, figsize=SIZE_INCHES, dpi=DPI)
    try:
        for panel, ax in zip(PANELS, axes.flat, strict=True):
            panel(ax, results)
        fig.suptitle("pubsub-toolkit benchmarks (2 shared cores; emulators on the same machine)")
        fig.tight_layout()
        out.parent.mkdir(parents=True, exist_ok=True)
        # No "Software"/date chunks: the same inputs give the same bytes.
        fig.savefig(out, dpi=DPI, metadata={"Software": None})
    finally:
        plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS, help="folder of result JSON")
    parser.add_argument("--out", type=Path, help="PNG to write (default RESULTS/benchmarks.png)")
    args = parser.parse_args(argv)
    try:
        path = render(args.results, args.out or args.results / "benchmarks.png")
    except ChartInputError as exc:
        print(f"charts: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
