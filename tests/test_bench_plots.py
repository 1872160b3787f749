"""The guard and agent benchmarks hand the runner the data of their canonical plots.

``guard_overhead`` (bench_guard) and ``tokens_per_iteration`` (bench_agent) must come from
what ``run()`` measured, be well-formed, and be drawn by ``benchmarks/run``. Smoke mode
throughout; no timing is asserted (timings belong in the benchmark's own table).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import bench_agent, bench_guard
from benchmarks.plots import parse_plots

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _smoke(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CTXSTACK_BENCH_SMOKE", "1")
    # A fresh cache per test: nothing measured before this test's run() leaks in.
    monkeypatch.setattr(bench_guard, "_LAST", {})
    monkeypatch.setattr(bench_agent, "_LAST", {})


def _well_formed(values: list[float | None]) -> list[float]:
    assert all(isinstance(v, float) and math.isfinite(v) for v in values), values
    return [v for v in values if v is not None]


def test_guard_overhead_is_the_sweep_run_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    assert bench_guard.plot_data(True) == {}  # nothing measured yet: nothing to plot
    assert bench_guard.report_markdown(True) == ""
    rows = bench_guard.run(True)
    # The existing figures and their targets are still there, plus the sweep's last point.
    assert [r.target for r in rows[:2]] == [f"< {bench_guard.TARGET_MS} ms"] * 2
    assert rows[0].name.startswith("check_and_compact under budget, median (")
    sweep_row = rows[-1]
    assert sweep_row.name.endswith(f"at {bench_guard.SMOKE_SWEEP_SIZES[-1]} msgs (sweep)")

    monkeypatch.setattr(bench_guard, "sweep", lambda *a: pytest.fail("plot_data measured"))
    raw = bench_guard.plot_data(True)
    assert set(raw) == {"guard_overhead"}
    plot = parse_plots("guard", raw)["guard_overhead"]
    assert plot.kind == "line"
    assert plot.x == [float(n) for n in bench_guard.SMOKE_SWEEP_SIZES]
    assert set(plot.series) == {bench_guard.GUARD_SERIES, bench_guard.BASELINE_SERIES}
    for values in plot.series.values():
        assert len(values) == len(plot.x)
        assert all(v > 0 for v in _well_formed(values))
    # The plot and the table row are one measurement, not two.
    assert plot.series[bench_guard.GUARD_SERIES][-1] == sweep_row.value
    assert plot.series[bench_guard.BASELINE_SERIES][-1] == sweep_row.baseline
    table = bench_guard.report_markdown(True)
    for n in bench_guard.SMOKE_SWEEP_SIZES:
        assert f"\n| {n:,} | " in table


def test_sweep_rejects_a_conversation_size_it_cannot_build() -> None:
    with pytest.raises(ValueError, match="even and at least 4, got 7"):
        bench_guard._conversation(7)
    assert len(bench_guard._conversation(10)) == 10


def test_tokens_per_iteration_is_what_the_runs_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    assert bench_agent.plot_data(True) == {}
    rows = {r.name: r for r in bench_agent.run(True)}

    async def no_rerun(*args: object, **kwargs: object) -> None:
        pytest.fail("plot_data measured again")

    monkeypatch.setattr(bench_agent, "guarded_run", no_rerun)
    monkeypatch.setattr(bench_agent, "baseline_run", no_rerun)
    raw = bench_agent.plot_data(True)
    assert set(raw) == {"tokens_per_iteration"}
    plot = parse_plots("agent", raw)["tokens_per_iteration"]
    assert plot.kind == "line"
    assert plot.x == [float(i) for i in range(1, bench_agent.ITERATIONS + 1)]
    no_guard = plot.series["no guard (full history)"]
    guarded = {name: values for name, values in plot.series.items() if "ContextGuard" in name}
    assert set(guarded) == {"with ContextGuard (truncate)", "with ContextGuard (LLM compaction)"}
    full = _well_formed(no_guard)
    assert len(full) == len(plot.x)
    assert full == sorted(full)  # the full history only grows
    for name, values in guarded.items():
        tokens = _well_formed(values)
        assert len(tokens) == len(plot.x)
        assert tokens[-1] < full[-1], name
        assert all(t > 0 for t in tokens)
    # Each series sums to its "tokens sent" row, so the plot shows the table's runs.
    for label, name in (("truncate guard", "with ContextGuard (truncate)"),
                        ("LLM-compaction guard", "with ContextGuard (LLM compaction)")):
        row = rows[f"tokens sent in {bench_agent.ITERATIONS} iterations, {label} "
                   "(ratio: x fewer)"]
        assert sum(_well_formed(plot.series[name])) == row.value
        assert sum(full) == row.baseline
    # The truncating guard keeps every prompt of the main model within its budget.
    assert max(_well_formed(guarded["with ContextGuard (truncate)"])) <= bench_agent.BUDGET


def test_benchmarks_run_draws_both_plots(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHON": sys.executable}
    out = tmp_path / "results"
    proc = subprocess.run(
        [str(ROOT / "benchmarks" / "run"), "--quick", "--smoke", "--only", "guard",
         "--only", "agent", "--out", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = (out / "REPORT.md").read_text()
    for png in ("guard_overhead.png", "tokens_per_iteration.png"):
        data = (out / png).read_bytes()
        assert data.startswith(b"\x89PNG")
        assert len(data) > 5_000  # a drawn figure, not an empty canvas
        assert f"]({png})" in report
    assert "- ContextGuard overhead vs conversation length: [guard_overhead.png]" in report
    assert "- Tokens sent per ReAct iteration, with and without the guard: " \
           "[tokens_per_iteration.png]" in report
    for pid in ("guard_overhead", "tokens_per_iteration"):
        assert f"expected `plot_data()['{pid}']`" not in report
    assert "Conversation-length sweep" in report
