"""Stand-in for benchmarks/common.py until it lands (same BenchRow fields)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class BenchRow:
    name: str
    value: float
    unit: str
    baseline: float | None = None
    ratio: float | None = None
    target: str = ""
    met: bool | None = None


def print_table(rows: Sequence[BenchRow]) -> None:
    for r in rows:
        base = "" if r.baseline is None else f"{r.baseline:.4f}"
        ratio = "" if r.ratio is None else f"{r.ratio:.1f}x"
        met = "" if r.met is None else ("yes" if r.met else "NO")
        print(f"{r.name:<60} {r.value:>9.4f} {r.unit:<3} {base:>9} {ratio:>7} {r.target:<10} {met}")
