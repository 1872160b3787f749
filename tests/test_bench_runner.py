"""benchmarks/run: discovery, failure reporting, the report file, plots, offline vocabularies."""

from __future__ import annotations

import gzip
import hashlib
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from benchmarks import runner, vocab
from benchmarks.common import BenchRow
from benchmarks.machine import MachineInfo
from benchmarks.plots import PlotData, parse_plots

ROOT = Path(__file__).resolve().parent.parent


def _module(name: str, run, **extra) -> types.ModuleType:  # type: ignore[no-untyped-def]
    mod = types.ModuleType(f"benchmarks.bench_{name}")
    mod.run = run  # type: ignore[attr-defined]
    for key, value in extra.items():
        setattr(mod, key, value)
    return mod


def _rows(quick: bool) -> list[BenchRow]:
    return [BenchRow("speed", 12.5, "ms", baseline=25.0, ratio=2.0, target="≥ 1.5x", met=True),
            BenchRow("size", 3.0, "MB", target="≤ 2 MB", met=False)]


def _boom(quick: bool) -> list[BenchRow]:
    raise RuntimeError("benchmark exploded")


def _machine() -> MachineInfo:
    return MachineInfo(cpu="Test CPU", cores="2 logical", ram="1.0 GiB", python="CPython 3",
                       os="TestOS", git_commit="abc123", date="2026-01-01 00:00:00",
                       ctxstack="0.1.0", tiktoken="0.0")


def test_discover_finds_the_bench_modules_and_only_filters() -> None:
    names = runner.discover()
    assert {"fidelity", "tokens_accuracy"} <= set(names)
    assert names == sorted(names)
    assert runner.select(names, ["bench_fidelity"]) == ["fidelity"]
    assert runner.select(names, []) == names
    with pytest.raises(SystemExit, match=r"unknown benchmark.*nope.*known: "):
        runner.select(names, ["nope"])


def test_a_failing_module_is_reported_without_hiding_the_others(tmp_path: Path) -> None:
    modules = {
        "good": _module("good", _rows),
        "bad": _module("bad", _boom),
        "shape": _module("shape", lambda quick: {"not": "rows"}),
    }
    results = runner.run_all(["good", "bad", "shape"], quick=True, loader=modules.__getitem__)
    assert [r.ok for r in results] == [True, False, False]
    assert "benchmark exploded" in (results[1].error or "")
    assert "expected list[BenchRow]" in (results[2].error or "")
    assert runner.exit_code(results) == 1
    assert runner.exit_code(results[:1]) == 0
    assert runner.exit_code(results[:1], strict=True) == 1  # "size" missed its target

    report = runner.write_report(results, tmp_path, quick=True, machine=_machine(),
                                 command="benchmarks/run --quick", total_seconds=1.0)
    text = report.read_text()
    assert "| speed | 12.50 ms | 25.00 ms | 2.00× | ≥ 1.5x | yes |" in text
    assert "| size | 3.00 MB | – | – | ≤ 2 MB | NO |" in text
    assert "**FAILED**" in text
    assert "RuntimeError: benchmark exploded" in text
    assert "2 benchmark(s) failed:** bad, shape" in text
    assert "| CPU | Test CPU |" in text
    assert "| git commit | abc123 |" in text


def test_invariant_rows_are_labelled_and_not_counted_as_targets_met(tmp_path: Path) -> None:
    def rows(quick: bool) -> list[BenchRow]:
        return [
            BenchRow("speed", 12.5, "ms", baseline=25.0, ratio=2.0, target="≥ 1.5x", met=True),
            BenchRow("fits the budget", 100.0, "%", target="100%", met=True, invariant=True),
        ]

    results = runner.run_all(["inv"], quick=True, loader={"inv": _module("inv", rows)}.get)
    assert results[0].rows[1].invariant
    text = runner.write_report(results, tmp_path, quick=True, machine=_machine(),
                               command="benchmarks/run", total_seconds=1.0).read_text()
    assert "| fits the budget | 100.0 % | – | – | 100% | invariant |" in text
    # one target judged (speed), one invariant held: the invariant is not a "target met"
    assert "| [inv](#inv) | ok | 2 | 1/1 | 1/1 |" in text
    assert runner.exit_code(results) == 0


def test_a_broken_invariant_fails_the_run_even_without_strict(tmp_path: Path) -> None:
    def rows(quick: bool) -> list[BenchRow]:
        return [BenchRow("fits the budget", 97.0, "%", target="100%", met=False,
                         invariant=True)]

    results = runner.run_all(["inv"], quick=True, loader={"inv": _module("inv", rows)}.get)
    text = runner.write_report(results, tmp_path, quick=True, machine=_machine(),
                               command="benchmarks/run", total_seconds=1.0).read_text()
    assert "| fits the budget | 97.00 % | – | – | 100% | **BROKEN** |" in text
    assert runner.exit_code(results) == 1


def test_rows_from_another_class_keep_their_invariant_flag() -> None:
    class Row:
        name, value, unit, baseline, ratio, target, met = "x", 1.0, "u", None, None, "", True
        invariant = True

    assert runner._check_rows("m", [Row()])[0].invariant


def test_import_errors_become_failed_results(tmp_path: Path) -> None:
    result = runner.import_module("does_not_exist")
    assert isinstance(result, runner.ModuleResult)
    assert not result.ok
    assert "ModuleNotFoundError" in (result.error or "")


def test_async_run_plots_and_markdown_hooks(tmp_path: Path) -> None:
    async def run(quick: bool) -> list[BenchRow]:
        return [BenchRow("x", 1.0, "s")]

    calls: list[bool] = []

    def plot_data(quick: bool) -> dict[str, object]:
        calls.append(quick)
        return {
            "guard_overhead": {"x": [10, 100, 1000], "series": {"guard": [0.1, 0.2, 0.4],
                                                                "baseline": [0.1, 0.1, None]}},
            "estimator_throughput": {"kind": "bar", "x": ["en", "cjk"],
                                     "series": {"heuristic": [50.0, 40.0]}},
        }

    mod = _module("demo", run, plot_data=plot_data, report_markdown=lambda q: "extra notes",
                  TITLE="Demo bench")
    result = runner.run_module("demo", mod, quick=True)
    assert result.ok, result.error
    assert calls == [True]
    assert set(result.plots) == {"guard_overhead", "estimator_throughput"}
    report = runner.write_report([result], tmp_path, quick=False, machine=_machine(),
                                 command="benchmarks/run", total_seconds=2.0).read_text()
    for png in ("guard_overhead.png", "estimator_throughput.png"):
        data = (tmp_path / png).read_bytes()
        assert data.startswith(b"\x89PNG")
        assert len(data) > 5_000
        assert f"]({png})" in report
    assert "## Demo bench (`bench_demo`)" in report
    assert "extra notes" in report
    # Canonical plots nobody provided are named, with the module expected to provide them.
    assert "not drawn — no data (expected `plot_data()['dbmemory_load']` from " \
           "`bench_dbmemory.py`, not run)" in report


def test_bad_plot_data_fails_the_module_with_a_clear_message() -> None:
    with pytest.raises(ValueError, match=r"demo.plot_data\(\)\['p'\]: .*2 values for 3 x"):
        parse_plots("demo", {"p": {"x": [1, 2, 3], "series": {"a": [1.0, 2.0]}}})
    with pytest.raises(TypeError, match="expected a dict"):
        parse_plots("demo", [1, 2])
    mod = _module("demo", _rows, plot_data=lambda q: {"p": {"x": [1], "series": {}}})
    result = runner.run_module("demo", mod, quick=True)
    assert not result.ok
    assert "at least one series" in (result.error or "")
    assert PlotData(x=[1.0], series={"a": [None]}).series == {"a": [None]}


def test_repeat_keeps_the_median_run_of_each_figure() -> None:
    values = iter([5.0, 1.0, 3.0])

    def run(quick: bool) -> list[BenchRow]:
        v = next(values)
        return [BenchRow("t", v, "ms", baseline=v * 2, ratio=2.0, met=v < 4)]

    result = runner.run_module("r", _module("r", run), quick=True, repeat=3)
    assert result.rows == [BenchRow("t", 3.0, "ms", baseline=6.0, ratio=2.0, met=True)]


def test_main_writes_the_report_and_returns_nonzero_on_failure(tmp_path: Path) -> None:
    modules = {"good": _module("good", _rows), "bad": _module("bad", _boom)}
    code = runner.main(["--quick", "--out", str(tmp_path)], loader=modules.__getitem__,
                       names=["bad", "good"])
    assert code == 1
    assert (tmp_path / "REPORT.md").is_file()
    code = runner.main(["--quick", "--only", "good", "--out", str(tmp_path)],
                       loader=modules.__getitem__, names=["bad", "good"])
    assert code == 0
    assert "bad" not in (tmp_path / "REPORT.md").read_text().split("## Summary")[1]


def test_benchmarks_run_quick_completes_and_writes_the_report(tmp_path: Path) -> None:
    """The real command, in a subprocess, over the fast modules, into a temp directory."""
    env = {**os.environ, "PYTHON": sys.executable, "TIKTOKEN_CACHE_DIR": str(tmp_path / "tk")}
    out = tmp_path / "results"
    proc = subprocess.run(
        [str(ROOT / "benchmarks" / "run"), "--quick", "--smoke", "--only", "fidelity",
         "--only", "tokens_accuracy", "--out", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = (out / "REPORT.md").read_text()
    assert report.startswith("# ctxstack benchmark report")
    assert "SMOKE mode" in report
    for field in ("| CPU |", "| cores |", "| RAM |", "| Python |", "| OS |", "| git commit |",
                  "| date (UTC) |"):
        assert field in report
    assert "(`bench_fidelity`)" in report
    assert "(`bench_tokens_accuracy`)" in report
    assert "| figure | ctxstack | baseline | ratio | target | met? |" in report
    assert "#### Budget 16,000 tokens" in report
    assert "| facts kept @4K, llm_compact (general) |" in report
    assert "after per-kind scale calibration (5 calls), Chinese |" in report  # calibration
    assert "growing CJK conversations vs o200k_base (anchored per-kind calibration) |" \
        in report
    for png in ("fidelity_facts_kept.png", "estimator_throughput.png"):
        assert (out / png).read_bytes().startswith(b"\x89PNG")
    assert "benchmarks" in proc.stderr  # the progress bar


# ---------------------------------------------------------------------------- vocab


def test_vocab_is_put_in_tiktokens_cache_offline(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("tiktoken")
    if vocab.bundled_file("o200k_base") is None:
        pytest.skip("bpe-openai (bench/dev extra) is not installed")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    url, expected = vocab.tiktoken_source("o200k_base")
    assert url.endswith("o200k_base.tiktoken")
    assert expected
    target = tmp_path / hashlib.sha1(url.encode()).hexdigest()
    target.write_bytes(b"corrupt")  # a wrong cached file is replaced, never trusted
    assert vocab.ensure_offline("o200k_base") is None
    assert hashlib.sha256(target.read_bytes()).hexdigest() == expected
    assert vocab.ensure_offline("o200k_base") is None  # idempotent


def test_vocab_refuses_a_copy_with_the_wrong_hash(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("tiktoken")
    fake = tmp_path / "pkg" / "data"
    fake.mkdir(parents=True)
    (fake / "cl100k_base.tiktoken.gz").write_bytes(gzip.compress(b"not a vocabulary"))
    monkeypatch.setattr(vocab, "bundled_file", lambda enc: fake / f"{enc}.tiktoken.gz")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "cache"))
    reason = vocab.ensure_offline("cl100k_base")
    assert reason is not None
    assert "does not match" in reason
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")
    assert "disabled" in (vocab.ensure_offline("cl100k_base") or "")


# ---------------------------------------------------------------------------- token accuracy


def test_error_statistics() -> None:
    from benchmarks.bench_tokens_accuracy import rel_errors, stats

    errors = rel_errors(["aaaa", "bbbbbbbb", "cc"], estimate=lambda t: len(t) / 2,
                        exact=lambda t: {4: 4, 8: 2, 2: 0}[len(t)])
    assert errors == [-0.5, 1.0]  # a zero exact count is skipped, not divided by
    s = stats([-0.1, 0.2, -0.3, 0.05] * 5)
    assert s.samples == 20
    assert s.under_share == 50.0
    assert s.median_abs == pytest.approx(15.0)
    assert s.p95_abs == pytest.approx(30.0)
    assert s.median_signed == pytest.approx(-2.5)


def test_without_offline_vocabularies_the_module_says_so_and_reports_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmarks import bench_tokens_accuracy as acc

    monkeypatch.setattr(acc, "exact_counters",
                        lambda: ({}, {"o200k_base": "no offline copy of o200k_base"}))
    monkeypatch.setattr(acc, "_LAST", {})
    assert acc.run(True) == []
    text = acc.report_markdown(True)
    assert "No exact tokenizer vocabulary is available offline" in text
    assert "no offline copy of o200k_base" in text
