"""Shared shape of benchmark results, so every benchmark module reports the same way.

Each benchmark module exposes ``run(quick: bool) -> list[BenchRow]``; a runner can collect
rows from all of them and print one table. Ratios compare against a baseline measured in
the same run, never against absolute numbers from another machine.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table


@dataclass(frozen=True)
class BenchRow:
    """One measured figure.

    ``value`` is ctxstack's figure in ``unit``; ``baseline`` the comparison figure in the
    same unit (None when there is none); ``ratio`` how many times better ctxstack is (or
    the scaling factor, as the row's name says); ``target`` the goal in words; ``met``
    whether it was reached (None for figures that are only reported).

    ``invariant`` marks a row that holds *by construction* — a guarantee the library
    enforces (a result within budget, a valid message sequence), or a comparison whose
    outcome the benchmark's own set-up decides (a checkpoint it seeded, a canned summary's
    length, a loop without any bound). Such a row checks that the guarantee held (``met``
    says whether it did); it is not a measured win, and the report shows it as
    "invariant", never among the targets met.
    """

    name: str
    value: float
    unit: str
    baseline: float | None = None
    ratio: float | None = None
    target: str = ""
    met: bool | None = None
    invariant: bool = False


@contextmanager
def no_gc() -> Iterator[None]:
    """Garbage collection off while timing (as ``timeit`` does): pauses are noise here."""
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def median_time(fn: Callable[[], object], repeats: int) -> float:
    """Median wall time of ``fn()`` in seconds over ``repeats`` runs (GC paused)."""
    times = []
    with no_gc():
        for _ in range(max(1, repeats)):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def median_each(fn: Callable[[object], object], inputs: Sequence[object]) -> float:
    """Median wall time of ``fn(x)`` over ``inputs`` (one run each, GC paused).

    For cold measurements: each input is a fresh object nothing has been cached on.
    """
    times = []
    with no_gc():
        for x in inputs:
            start = time.perf_counter()
            fn(x)
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def fmt_number(value: object) -> str:
    """A compact human form of a figure for reports: 3 significant digits, separators."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if value != value:  # NaN
            return "n/a"
        magnitude = abs(value)
        if magnitude >= 1000:
            return f"{value:,.0f}"
        if magnitude >= 100:
            return f"{value:.1f}"
        if magnitude >= 1 or magnitude == 0:
            return f"{value:.2f}"
        return f"{value:.3g}"
    return str(value)


def fmt_target(target: object) -> str:
    """A row's target as a table cell; tolerates a bare number (``–`` when there is none)."""
    if target is None or target == "":
        return "–"
    return fmt_number(target) if isinstance(target, int | float) else str(target)


def met_mark(met: bool | None, invariant: bool = False) -> str:
    """``yes`` / ``NO`` / ``–`` (no target): a miss stands out in a table.

    An invariant row reads ``invariant`` when it held and ``BROKEN`` when it did not.
    """
    if invariant:
        return "invariant" if met is not False else "**BROKEN**"
    if met is None:
        return "–"
    return "yes" if met else "NO"


def _fmt(x: float | None) -> str:
    if x is None:
        return "-"
    if x >= 100:
        return f"{x:,.0f}"
    if x >= 1:
        return f"{x:.2f}"
    return f"{x:.4f}"


def print_table(rows: Sequence[BenchRow], title: str = "", console: Console | None = None) -> None:
    """Print ``rows`` as a rich table."""
    table = Table(title=title)
    console = console or Console(width=max(120, Console().width))
    for col, justify in [("figure", "left"), ("ctxstack", "right"), ("baseline", "right"),
                         ("ratio", "right"), ("target", "left"), ("met", "center")]:
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for r in rows:
        if r.invariant:
            met = "invariant" if r.met is not False else "[red]BROKEN[/]"
        else:
            met = "-" if r.met is None else ("[green]yes[/]" if r.met else "[red]no[/]")
        ratio = "-" if r.ratio is None else f"{r.ratio:,.1f}x"
        table.add_row(
            r.name,
            f"{_fmt(r.value)} {r.unit}",
            "-" if r.baseline is None else f"{_fmt(r.baseline)} {r.unit}",
            ratio,
            fmt_target(r.target),
            met,
        )
    console.print(table)
