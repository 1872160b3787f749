"""`ctxstack demo`: offline, deterministic, and it shows what each approach keeps."""

from __future__ import annotations

from click.testing import CliRunner

from ctxstack.cli import main
from ctxstack.cli.walkthrough import FACTS, run_demo
from ctxstack.tokens import HEURISTIC


async def test_demo_compacts_within_budget_and_keeps_exact_facts() -> None:
    report = await run_demo(budget=3_000, turns=10)
    assert report.total_history_tokens > 2 * report.budget  # the scenario really overflows
    assert [r.turn for r in report.rows] == list(range(1, 11))
    assert report.rows[0].action == "within budget"
    assert any(r.action == "LLM summary" for r in report.rows)
    assert all(r.tokens_out <= report.budget for r in report.rows)
    assert HEURISTIC.count_messages(report.final_context) <= report.budget

    guard, truncate, naive = report.outcomes
    for outcome in report.outcomes:
        assert outcome.query_kept
        assert outcome.system_kept
        assert outcome.tokens <= report.budget
    # Exact values stated early survive rolling summaries; plain cutting loses them.
    for label in ("budget cap", "ticket", "headcount", "dates", "report path"):
        assert guard.facts_kept[label], label
        assert not naive.facts_kept[label], label
    assert sum(guard.facts_kept.values()) > sum(truncate.facts_kept.values())
    assert set(guard.facts_kept) == set(FACTS)


async def test_demo_is_deterministic() -> None:
    a, b = await run_demo(budget=2_500, turns=6), await run_demo(budget=2_500, turns=6)
    assert a.rows == b.rows
    assert a.outcomes == b.outcomes


def test_cli_prints_the_tables() -> None:
    result = CliRunner().invoke(main, ["demo", "--budget", "3000", "--turns", "6"])
    assert result.exit_code == 0, result.output
    for heading in ("ContextGuard, every turn", "Planted facts", "Final context"):
        assert heading in result.output
    assert "OPS-4471" in result.output


def test_cli_rejects_a_tiny_budget() -> None:
    result = CliRunner().invoke(main, ["demo", "--budget", "10"])
    assert result.exit_code == 2
    assert "--budget" in result.output
