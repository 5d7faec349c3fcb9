"""The stats store protocol: add counter deltas, read the totals over every writer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

INGRESS_SCOPE = "ingress"  # whose counters (only ingress flushes today)
DELIVERIES = "deliveries"  # every delivery ingress handled, valid or not
DUPLICATES = "duplicate"  # the dedup outcome's name: deliveries dropped as duplicates


class StatsStore(Protocol):
    """Shared counters of one scope. One module per backend."""

    def add(self, deltas: Mapping[str, int]) -> None:
        """Add ``deltas`` (name -> increment) to this writer's counters, atomically per call."""
        ...

    def totals(self) -> dict[str, int]:
        """Every counter summed over all writers (missing names are simply absent)."""
        ...
