"""Run every ``benchmarks/bench_*.py`` module and write ``REPORT.md`` plus PNG plots.

Usage (from the repository root)::

    benchmarks/run                 # everything, full sizes
    benchmarks/run --quick         # reduced sizes, about 3 minutes in total on 2 cores
    benchmarks/run --only fidelity --only guard --out /tmp/report
    benchmarks/run --llm           # the fidelity summariser is the configured real endpoint
    benchmarks/run --smoke --out /tmp/x   # tiniest sizes, only to check the command works

The module protocol (see ``benchmarks/README.md``): a module defines ``run(quick) ->
list[BenchRow]`` (a coroutine function is awaited), and may define ``plot_data(quick) ->
dict`` (see :mod:`benchmarks.plots`) and ``report_markdown(quick) -> str``, both called
right after ``run`` in the same process so they can return what ``run`` measured. A module
that fails to import, raises, or returns the wrong shape is reported as failed (traceback
in the report) and makes the runner exit 1; the other modules' results are still written.

``--repeat N`` runs each module N times and keeps, per figure, the row of the run with the
median value (its baseline, ratio and verdict come from that same run, so a row is always
one real measurement, never a mix).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import os
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from benchmarks.common import BenchRow, fmt_number, fmt_target, met_mark
from benchmarks.machine import MachineInfo, collect
from benchmarks.plots import CANONICAL_PLOTS, PlotData, parse_plots, render

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
DEFAULT_OUT = BENCH_DIR / "results"
QUICK_LIMIT_SECONDS = 240.0
"""``--quick`` warns past this: it takes about 3 minutes on 2 cores (124–190 s on the
hosts of the last reports), so a warning means a module grew, not a slow host."""
LLM_ENV = "CTXSTACK_BENCH_LLM"
"""Set to ``1`` by ``--llm``; modules that can use a real endpoint read it."""
SMOKE_ENV = "CTXSTACK_BENCH_SMOKE"
"""Set to ``1`` by ``--smoke`` (implies ``--quick``): modules that honour it shrink to the
least that exercises their code, for the test suite. Its figures mean nothing."""

ROW_FIELDS = ("name", "value", "unit", "baseline", "ratio", "target", "met")


@dataclass
class ModuleResult:
    """What one module produced, or how it failed."""

    name: str
    rows: list[BenchRow] = field(default_factory=list)
    plots: dict[str, PlotData] = field(default_factory=dict)
    markdown: str = ""
    error: str | None = None
    seconds: float = 0.0
    title: str = ""

    @property
    def ok(self) -> bool:
        return self.error is None


def discover(bench_dir: Path = BENCH_DIR) -> list[str]:
    """Short names (``fidelity`` for ``bench_fidelity.py``) of every module, sorted."""
    return sorted(p.stem.removeprefix("bench_") for p in bench_dir.glob("bench_*.py"))


def select(names: Sequence[str], only: Sequence[str]) -> list[str]:
    """Filter by ``--only`` (``fidelity`` or ``bench_fidelity`` both work).

    An unknown name is an error listing the known ones: a typo must not silently run
    nothing and report success.
    """
    if not only:
        return list(names)
    wanted = [o.removeprefix("bench_").removesuffix(".py") for o in only]
    unknown = [w for w in wanted if w not in names]
    if unknown:
        raise SystemExit(
            f"--only: unknown benchmark(s) {', '.join(unknown)}; known: {', '.join(names)}"
        )
    return [n for n in names if n in wanted]


def _call(fn: Callable[..., Any], quick: bool) -> Any:
    result = fn(quick)
    if inspect.isawaitable(result):
        result = asyncio.run(_await(result))
    return result


async def _await(awaitable: Any) -> Any:
    return await awaitable


def _check_rows(module: str, rows: object) -> list[BenchRow]:
    """Accept any row objects with the BenchRow fields (a module may build its own)."""
    if not isinstance(rows, list | tuple):
        raise TypeError(f"{module}.run() returned {type(rows).__name__}, expected list[BenchRow]")
    out: list[BenchRow] = []
    for i, row in enumerate(rows):
        if isinstance(row, BenchRow):
            out.append(row)
            continue
        missing = [f for f in ROW_FIELDS if not hasattr(row, f)]
        if missing:
            raise TypeError(
                f"{module}.run()[{i}]: {type(row).__name__} lacks BenchRow field(s) "
                f"{', '.join(missing)}"
            )
        out.append(BenchRow(**{f: getattr(row, f) for f in ROW_FIELDS},
                            invariant=bool(getattr(row, "invariant", False))))
    return out


def median_rows(runs: Sequence[Sequence[BenchRow]]) -> list[BenchRow]:
    """Per figure name, the row of the run whose value is the (lower) median.

    Order follows the first run. A figure missing from some runs uses the runs that have it.
    """
    if len(runs) == 1:
        return list(runs[0])
    by_name: dict[str, list[BenchRow]] = {}
    for rows in runs:
        for row in rows:
            by_name.setdefault(row.name, []).append(row)
    out = []
    for candidates in by_name.values():
        ordered = sorted(candidates, key=lambda r: _sort_key(r.value))
        out.append(ordered[(len(ordered) - 1) // 2])
    return out


def _sort_key(value: object) -> float:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return 0.0


def run_module(name: str, module: ModuleType, quick: bool, repeat: int = 1) -> ModuleResult:
    """Run one module (``repeat`` times) and collect rows, plots and markdown."""
    result = ModuleResult(name=name, title=str(getattr(module, "TITLE", "") or name))
    start = time.perf_counter()
    try:
        run = getattr(module, "run", None)
        if not callable(run):
            raise TypeError(f"bench_{name} defines no run(quick) function")
        runs = [_check_rows(name, _call(run, quick)) for _ in range(max(1, repeat))]
        result.rows = median_rows(runs)
        plot_fn = getattr(module, "plot_data", None)
        if callable(plot_fn):
            result.plots = parse_plots(name, _call(plot_fn, quick))
        md_fn = getattr(module, "report_markdown", None)
        if callable(md_fn):
            text = _call(md_fn, quick)
            if not isinstance(text, str):
                raise TypeError(f"{name}.report_markdown() returned {type(text).__name__}")
            result.markdown = text
    except BaseException as exc:  # a benchmark bug must not hide the other results
        if isinstance(exc, KeyboardInterrupt):
            raise
        result.error = "".join(traceback.format_exception(exc)).rstrip()
    result.seconds = time.perf_counter() - start
    return result


def import_module(name: str) -> ModuleType | ModuleResult:
    """Import ``benchmarks.bench_<name>``; an import error becomes a failed result."""
    try:
        return importlib.import_module(f"benchmarks.bench_{name}")
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        return ModuleResult(
            name=name, title=name, error="".join(traceback.format_exception(exc)).rstrip()
        )


# ---------------------------------------------------------------------------- report


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def rows_table(rows: Sequence[BenchRow]) -> str:
    lines = [
        "| figure | ctxstack | baseline | ratio | target | met? |",
        "|---|---:|---:|---:|---|:---:|",
    ]
    for r in rows:
        value = f"{fmt_number(r.value)} {r.unit or ''}".strip()
        baseline = f"{fmt_number(r.baseline)} {r.unit}".strip() if r.baseline is not None else "–"
        ratio = f"{fmt_number(r.ratio)}×" if r.ratio is not None else "–"
        lines.append(
            f"| {_cell(r.name)} | {_cell(value)} | {_cell(baseline)} | {ratio} | "
            f"{_cell(fmt_target(r.target))} | {met_mark(r.met, r.invariant)} |"
        )
    return "\n".join(lines)


def draw_plots(results: Sequence[ModuleResult], out_dir: Path) -> dict[str, tuple[str, Path]]:
    """Render every plot; returns plot file stem → (module, path).

    Two modules giving the same id get ``<module>_<id>.png`` so neither hides the other.
    """
    owners: dict[str, int] = {}
    for r in results:
        for pid in r.plots:
            owners[pid] = owners.get(pid, 0) + 1
    drawn: dict[str, tuple[str, Path]] = {}
    for r in results:
        for pid, data in r.plots.items():
            stem = pid if owners[pid] == 1 else f"{r.name}_{pid}"
            try:
                drawn[stem] = (r.name, render(pid, data, out_dir / f"{stem}.png"))
            except Exception as exc:
                r.error = (r.error + "\n\n" if r.error else "") + (
                    f"plot {pid!r} could not be drawn: {exc!r}"
                )
    return drawn


def write_report(
    results: Sequence[ModuleResult],
    out_dir: Path,
    *,
    quick: bool,
    machine: MachineInfo,
    command: str,
    total_seconds: float,
) -> Path:
    """Write ``REPORT.md`` (and the PNGs) into ``out_dir``; returns the report path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    drawn = draw_plots(results, out_dir)
    failed = [r for r in results if not r.ok]
    lines: list[str] = ["# ctxstack benchmark report", ""]
    mode = "quick mode (reduced sizes)" if quick else "full mode"
    if os.environ.get(SMOKE_ENV, "") not in ("", "0"):
        mode = "SMOKE mode (tiniest sizes: these figures mean nothing)"
    lines.append(f"Command: `{command}` — {mode}, {total_seconds:.1f} s in total.")
    if quick and total_seconds > QUICK_LIMIT_SECONDS:
        lines.append(
            f"**Warning:** quick mode took longer than its {QUICK_LIMIT_SECONDS:.0f} s limit."
        )
    lines += ["", "| machine | |", "|---|---|"]
    lines += [f"| {k} | {_cell(v)} |" for k, v in machine.as_rows()]
    lines += [
        "",
        "Ratios compare ctxstack with a baseline measured in the same run; timings are medians "
        "over repeated measurements inside each module.",
        "",
        "## Summary",
        "",
        "| benchmark | status | figures | targets met | invariants held | time |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in results:
        judged = [row for row in r.rows if row.met is not None and not row.invariant]
        met = sum(1 for row in judged if row.met)
        invariants = [row for row in r.rows if row.invariant]
        held = sum(1 for row in invariants if row.met is not False)
        status = "ok" if r.ok else "**FAILED**"
        lines.append(
            f"| [{r.name}](#{r.name}) | {status} | {len(r.rows)} | "
            f"{met}/{len(judged)} | {held}/{len(invariants)} | {r.seconds:.1f} s |"
        )
    for r in results:
        lines += ["", f'<a id="{r.name}"></a>', "", f"## {r.title} (`bench_{r.name}`)", ""]
        if r.rows:
            lines.append(rows_table(r.rows))
        elif r.ok:
            lines.append("_No figures (see the notes below)._")
        if r.markdown.strip():
            lines += ["", r.markdown.strip()]
        for stem, (owner, path) in drawn.items():
            if owner == r.name:
                lines += ["", f"![{stem}]({path.name})"]
        if not r.ok:
            lines += ["", "**This benchmark failed:**", "", "```text", r.error or "", "```"]
    lines += ["", "## Plots", ""]
    provided = {pid for r in results for pid in r.plots}
    for pid, canon in CANONICAL_PLOTS.items():
        files = [stem for stem in drawn if stem == pid or stem.endswith(f"_{pid}")]
        if files:
            lines += [f"- {canon.title}: " + ", ".join(f"[{s}.png]({s}.png)" for s in files)]
        elif pid in provided:
            lines += [f"- {canon.title}: provided but could not be drawn (see failures)"]
        else:
            lines += [
                f"- {canon.title}: not drawn — no data (expected `plot_data()['{pid}']` "
                f"from `{canon.provider}.py`{'' if _ran(results, canon.provider) else ', not run'})"
            ]
    others = [s for s in drawn if not any(s == p or s.endswith(f"_{p}") for p in CANONICAL_PLOTS)]
    for stem in others:
        lines.append(f"- {stem.replace('_', ' ')}: [{stem}.png]({stem}.png)")
    if failed:
        lines += ["", f"**{len(failed)} benchmark(s) failed:** {', '.join(r.name for r in failed)}."]
    report = out_dir / "REPORT.md"
    report.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return report


def _ran(results: Sequence[ModuleResult], provider: str) -> bool:
    return any(f"bench_{r.name}" == provider for r in results)


# ---------------------------------------------------------------------------- CLI


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="benchmarks/run",
        description="Run ctxstack's benchmarks and write benchmarks/results/REPORT.md.",
    )
    p.add_argument("--quick", action="store_true", help="reduced sizes (about 3 minutes on 2 cores)")
    p.add_argument("--only", action="append", default=[], metavar="NAME",
                   help="run only this benchmark (repeatable), e.g. --only fidelity")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, metavar="DIR",
                   help=f"where REPORT.md and the PNGs go (default {DEFAULT_OUT})")
    p.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="run each module N times, keep the median run per figure")
    p.add_argument("--smoke", action="store_true",
                   help="tiniest sizes, to check the command works (implies --quick; "
                        "figures are meaningless)")
    p.add_argument("--llm", action="store_true",
                   help="fidelity: summarise with the configured real endpoint")
    p.add_argument("--strict", action="store_true",
                   help="also exit 1 when a figure misses its target")
    p.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    args = p.parse_args(argv)
    if args.repeat < 1:
        p.error("--repeat must be at least 1")
    if args.smoke:
        args.quick = True
    return args


Loader = Callable[[str], "ModuleType | ModuleResult"]


def run_all(names: Sequence[str], *, quick: bool, repeat: int = 1,
            loader: Loader | None = None) -> list[ModuleResult]:
    """Import and run each named module in turn, with a progress bar on stderr."""
    from tqdm import tqdm  # type: ignore[import-untyped]

    load = loader or import_module
    results: list[ModuleResult] = []
    with tqdm(total=len(names), desc="benchmarks", unit="module", file=sys.stderr) as bar:
        for name in names:
            bar.set_postfix_str(name)
            loaded = load(name)
            result = (loaded if isinstance(loaded, ModuleResult)
                      else run_module(name, loaded, quick, repeat))
            results.append(result)
            status = "ok" if result.ok else "FAILED"
            bar.write(f"  {name}: {status} ({len(result.rows)} figures, {result.seconds:.1f} s)")
            bar.update(1)
    return results


def exit_code(results: Sequence[ModuleResult], *, strict: bool = False) -> int:
    """1 when a module failed or an invariant broke (or, with ``strict``, a figure missed
    its target), else 0. A broken invariant is a bug, not a slow machine."""
    if any(not r.ok for r in results):
        return 1
    if any(row.invariant and row.met is False for r in results for row in r.rows):
        return 1
    if strict and any(row.met is False for r in results for row in r.rows):
        return 1
    return 0


def main(argv: Sequence[str] | None = None, *, loader: Loader | None = None,
         names: Sequence[str] | None = None) -> int:
    """The ``benchmarks/run`` command. ``loader`` and ``names`` exist for tests."""
    args = parse_args(argv)
    known = list(names) if names is not None else discover()
    if args.list:
        print("\n".join(known))
        return 0
    selected = select(known, args.only)
    if args.llm:
        os.environ[LLM_ENV] = "1"
    if args.smoke:
        os.environ[SMOKE_ENV] = "1"

    start = time.perf_counter()
    results = run_all(selected, quick=args.quick, repeat=args.repeat, loader=loader)
    total = time.perf_counter() - start

    command = "benchmarks/run " + " ".join(sys.argv[1:] if argv is None else argv)
    report = write_report(
        results, args.out, quick=args.quick, machine=collect(REPO_ROOT),
        command=command.strip(), total_seconds=total,
    )
    failed = [r.name for r in results if not r.ok]
    missed = [f"{r.name}: {row.name}" for r in results for row in r.rows
              if row.met is False and not row.invariant]
    broken = [f"{r.name}: {row.name}" for r in results for row in r.rows
              if row.met is False and row.invariant]
    print(f"report: {report}")
    if failed:
        print(f"FAILED: {', '.join(failed)}", file=sys.stderr)
    if broken:
        print(f"INVARIANTS BROKEN ({len(broken)}): " + "; ".join(broken), file=sys.stderr)
    if missed:
        print(f"targets missed ({len(missed)}): " + "; ".join(missed), file=sys.stderr)
    if args.quick and total > QUICK_LIMIT_SECONDS:
        print(f"warning: --quick took {total:.0f} s (limit {QUICK_LIMIT_SECONDS:.0f} s)",
              file=sys.stderr)
    return exit_code(results, strict=args.strict)


if __name__ == "__main__":
    sys.exit(main())

