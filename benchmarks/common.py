"""What every benchmark module returns: rows of figures, each beside a baseline.

A :class:`BenchRow` is one figure ctxstack achieved (``value``, in ``unit``) next to the
figure of the baseline a user would otherwise pick, measured in the same run (``baseline``),
their ``ratio`` and the ``target`` the figure is judged against (``met``). Ratios rather
than absolute times, because absolute times say more about the machine than the library.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class BenchRow:
    """One measured figure.

    ``ratio`` is whatever comparison the module defines (usually ``value / baseline`` or
    ``baseline / value`` so that bigger is better; the ``target`` text says which).
    ``target`` is usually a short text (``"≤ 1.5x"``, ``"100%"``); a bare number is shown
    as is. ``met`` is ``None`` when the row has no target.
    """

    name: str
    value: float
    unit: str = ""
    baseline: float | None = None
    ratio: float | None = None
    target: str | float = ""
    met: bool | None = None


def fmt_number(value: object) -> str:
    """A compact human form of a figure: 3 significant digits, thousands separators."""
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


def met_mark(met: bool | None) -> str:
    """``yes`` / ``NO`` / ``–`` (no target): a miss stands out in a table."""
    if met is None:
        return "–"
    return "yes" if met else "NO"


def fmt_target(target: object) -> str:
    """The target as a table cell (``–`` when there is none)."""
    if target is None or target == "":
        return "–"
    return fmt_number(target) if isinstance(target, int | float) else str(target)


def print_table(rows: Sequence[BenchRow], title: str = "") -> None:
    """Print rows as an aligned plain-text table (for running one module by hand)."""
    header = ("figure", "ctxstack", "baseline", "ratio", "target", "met?")
    body = [
        (
            r.name,
            f"{fmt_number(r.value)} {r.unit}".strip(),
            fmt_number(r.baseline) if r.baseline is not None else "–",
            f"{fmt_number(r.ratio)}x" if r.ratio is not None else "–",
            fmt_target(r.target),
            met_mark(r.met),
        )
        for r in rows
    ]
    widths = [max(len(h), *(len(line[i]) for line in body)) if body else len(h)
              for i, h in enumerate(header)]
    if title:
        print(f"\n{title}")
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for line in body:
        print("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)))
