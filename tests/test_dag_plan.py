"""DAG plans and the pure text-building of the DAG phases."""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from ctxstack.dag import (
    DAG_EVENT_ADAPTER,
    Plan,
    PlanCreatedEvent,
    PlanDraft,
    PlanStep,
    StepFinishedEvent,
    StepResult,
)
from ctxstack.dag._context import (
    build_step_context,
    cut_middle,
    fair_shares,
    format_for_analysis,
    format_for_synthesis,
    format_replan_context,
)
from ctxstack.dag._plan import find_cycle, plan_problems
from ctxstack.errors import InputError


def step(id: str, *deps: str, task: str | None = None) -> PlanStep:
    return PlanStep(id=id, task=task or f"task {id}", dependencies=list(deps))


def done(id: str, answer: str, task: str | None = None) -> StepResult:
    return StepResult(step_id=id, task=task or f"task {id}", status="done", answer=answer)


# ---------------------------------------------------------------------------- validation


def test_valid_diamond_plan_and_layers() -> None:
    plan = Plan(steps=[step("d", "b", "c"), step("a"), step("b", "a"), step("c", "a")])
    assert [[s.id for s in layer] for layer in plan.layers()] == [["a"], ["b", "c"], ["d"]]
    assert plan.dependants("a") == ["d", "b", "c"]
    assert plan.dependants("b") == ["d"]
    assert plan.dependants("d") == []
    assert plan.step("c").dependencies == ["a"]
    with pytest.raises(InputError, match="no step 'x'"):
        plan.step("x")


def test_unknown_dependency_is_named() -> None:
    with pytest.raises(ValidationError, match=r"step 'b' depends on unknown step id\(s\) 'zz'"):
        Plan(steps=[step("a"), step("b", "a", "zz")])


def test_cycle_is_reported_as_a_path() -> None:
    with pytest.raises(ValidationError, match=r"dependency cycle: (a -> c -> b -> a|b -> a -> c -> b|c -> b -> a -> c)"):
        Plan(steps=[step("a", "c"), step("b", "a"), step("c", "b")])


def test_self_dependency_duplicates_and_empty() -> None:
    with pytest.raises(ValidationError, match="step 'a' depends on itself"):
        Plan(steps=[step("a", "a")])
    with pytest.raises(ValidationError, match="step id 'a' is used by 2 steps"):
        Plan(steps=[step("a"), step("a")])
    with pytest.raises(ValidationError, match="the plan has no steps"):
        Plan(steps=[])


def test_every_problem_is_listed_at_once() -> None:
    problems = plan_problems([step("a", "x"), step("a"), step("b", "c"), step("c", "b")])
    assert any("unknown step id(s) 'x'" in p for p in problems)
    assert any("'a' is used by 2 steps" in p for p in problems)
    assert any(p.startswith("dependency cycle:") for p in problems)


def test_draft_accepts_what_plan_rejects() -> None:
    draft = PlanDraft.model_validate({"steps": [{"id": "a", "task": "t", "dependencies": ["a"]}]})
    assert plan_problems(draft.steps) == ["step 'a' depends on itself"]


def test_step_fields_are_normalised_and_checked() -> None:
    s = PlanStep.model_validate({"id": 1, "task": "  do it ", "dependencies": [2, "2", " 3 "], "tool_hint": " "})
    assert (s.id, s.task, s.dependencies, s.tool_hint) == ("1", "do it", ["2", "3"], None)
    assert PlanStep.model_validate({"id": "a", "task": "t", "dependencies": None}).dependencies == []
    assert PlanStep.model_validate({"id": "a", "task": "t", "dependencies": "b"}).dependencies == ["b"]
    with pytest.raises(ValidationError, match="task: a step's task must not be empty"):
        PlanStep(id="a", task="   ")
    with pytest.raises(ValidationError, match="a step id must not be empty"):
        PlanStep(id=" ", task="t")
    with pytest.raises(ValidationError, match=r"dependencies\[0\]: expected a step id"):
        PlanStep.model_validate({"id": "a", "task": "t", "dependencies": [{"x": 1}]})


@st.composite
def dags(draw: st.DrawFn) -> list[PlanStep]:
    n = draw(st.integers(1, 12))
    steps = []
    for i in range(n):
        deps = draw(st.lists(st.integers(0, max(0, i - 1)), max_size=3)) if i else []
        steps.append(step(f"s{i}", *[f"s{d}" for d in deps]))
    return draw(st.permutations(steps))


@settings(max_examples=60, deadline=None)
@given(dags())
def test_layers_respect_every_dependency(steps: list[PlanStep]) -> None:
    plan = Plan(steps=steps)
    depth = {s.id: k for k, layer in enumerate(plan.layers()) for s in layer}
    assert sorted(depth) == sorted(s.id for s in steps)
    for s in steps:
        assert all(depth[d] < depth[s.id] for d in s.dependencies)
        # each step sits in the first layer its dependencies allow
        assert depth[s.id] == 1 + max((depth[d] for d in s.dependencies), default=-1)


@settings(max_examples=60, deadline=None)
@given(dags(), st.data())
def test_an_added_back_edge_is_always_found(steps: list[PlanStep], data: st.DataObject) -> None:
    plan = Plan(steps=steps)
    with_deps = [s for s in plan.steps if s.dependencies]
    if not with_deps:
        return
    s = data.draw(st.sampled_from(with_deps))
    ancestor = plan.step(s.dependencies[0])
    broken = [
        x.model_copy(update={"dependencies": [*x.dependencies, s.id]}) if x.id == ancestor.id else x
        for x in plan.steps
    ]
    cycle = find_cycle(broken)
    assert cycle is not None
    assert cycle[0] == cycle[-1]
    by_id = {x.id: x for x in broken}
    for a, b in itertools.pairwise(cycle):
        assert b in by_id[a].dependencies


# ---------------------------------------------------------------------------- cutting


def test_cut_middle_keeps_head_and_tail_and_says_how_much() -> None:
    text = "H" * 1000 + "M" * 8000 + "T" * 1000
    cut = cut_middle(text, 2000)
    assert len(cut) <= 2000
    assert cut.startswith("H" * 500)
    assert cut.endswith("T" * 500)
    match = re.search(r"\n\[… ([\d,]+) characters truncated …\]\n", cut)
    assert match is not None
    kept = len(cut) - len(match.group(0))
    assert kept + int(match.group(1).replace(",", "")) == len(text)
    assert cut_middle("short", 10) == "short"
    assert cut_middle("abcdef", 3) == "abc"
    with pytest.raises(ValueError, match="max_chars"):
        cut_middle("x", -1)


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=3000), st.integers(0, 3000))
def test_cut_middle_never_exceeds(text: str, limit: int) -> None:
    out = cut_middle(text, limit)
    assert len(out) <= max(limit, 0)
    if len(text) <= limit:
        assert out == text


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 5000), max_size=8), st.integers(-10, 20000))
def test_fair_shares(lengths: list[int], budget: int) -> None:
    shares = fair_shares(lengths, budget)
    assert sum(shares) <= max(0, budget)
    assert all(0 <= s <= n for s, n in zip(shares, lengths, strict=True))
    if sum(lengths) <= budget:
        assert shares == lengths
    else:
        # nobody who was cut got less than anyone else's share
        cut = [s for s, n in zip(shares, lengths, strict=True) if s < n]
        assert not cut or min(cut) >= max(shares) - 1


# ---------------------------------------------------------------------------- phases


def test_step_context_without_dependencies_is_the_task() -> None:
    s = PlanStep(id="a", task="Find the 2023 revenue of ACME", tool_hint="search")
    assert build_step_context(s, {}) == "Find the 2023 revenue of ACME\n\n(Suggested tool: search)"


def test_step_context_labels_and_truncates_at_50k() -> None:
    s = step("c", "a", "b", task="Compare A and B")
    big = "A" * 30_000 + "ENDA" + "a" * 60_000 + "TAIL-A"
    small = "B result: 42 units"
    ctx = build_step_context(s, {"a": done("a", big, "Get A"), "b": done("b", small, "Get B")})
    assert len(ctx) <= 50_000
    assert ctx.startswith("Compare A and B")
    assert "### Step a: Get A\n" in ctx
    assert "### Step b: Get B\n" + small in ctx  # the short result is whole
    assert ctx.split("### Step b")[0].rstrip().endswith("TAIL-A")  # tail of the long one kept
    assert "characters truncated" in ctx
    # under the limit nothing is cut
    ctx2 = build_step_context(s, {"a": done("a", "x" * 100), "b": done("b", small)})
    assert "truncated" not in ctx2
    assert "x" * 100 in ctx2


def test_step_context_limit_is_configurable_and_shared_fairly() -> None:
    s = step("c", "a", "b")
    ctx = build_step_context(s, {"a": done("a", "a" * 20_000), "b": done("b", "b" * 20_000)}, max_chars=10_000)
    assert len(ctx) <= 10_000
    assert abs(ctx.count("a") - ctx.count("b")) < 200  # equal shares


def test_step_context_needs_every_dependency() -> None:
    with pytest.raises(InputError, match=r"step 'b': no result yet for dependencies \['a'\]"):
        build_step_context(step("b", "a"), {})


def test_analysis_input_cuts_each_step_at_10k() -> None:
    plan = Plan(steps=[step("a"), step("b"), step("c", "a")])
    results = {
        "a": done("a", "x" * 25_000 + "LAST"),
        "b": StepResult(step_id="b", task="task b", status="failed", error="ToolError: boom"),
        "c": StepResult(step_id="c", task="task c", status="skipped", error="dependency 'a' failed"),
    }
    text = format_for_analysis(plan, results)
    block_a = text.split("### Step b")[0]
    assert len(block_a) < 10_000 + 100
    assert block_a.rstrip().endswith("LAST")
    assert "Status: failed: ToolError: boom" in text
    assert "Status: skipped: dependency 'a' failed" in text
    assert len(format_for_analysis(plan, results, max_chars_per_step=500)) < 1_000


def test_replan_context_cuts_each_result_to_500() -> None:
    plan = Plan(steps=[step("a"), step("b", "a")])
    results = {"a": done("a", "r" * 5_000), "b": StepResult(step_id="b", task="task b", status="failed", error="E" * 2_000)}
    text = format_replan_context(plan, results, "B failed: no data", round_number=1)
    assert "round 1" in text
    assert "- b (after a): task b" in text
    assert "Why it was judged not achieved: B failed: no data" in text
    assert len(text) < 2 * 500 + 800
    line_a = next(line for line in text.splitlines() if line.startswith("  Result: done"))
    assert line_a.count("r") <= 500


def test_synthesis_input_lists_missing_steps() -> None:
    results = [done("a", "42"), StepResult(step_id="b", task="task b", status="skipped", error="dependency 'x' failed")]
    text = format_for_synthesis(results)
    assert "### Step a: task a\n42" in text
    assert "- b: task b (skipped: dependency 'x' failed)" in text
    big = format_for_synthesis([done("a", "y" * 80_000), done("b", "z" * 80_000)], max_chars=20_000)
    assert len(big) <= 20_000


def test_events_round_trip_through_json() -> None:
    plan = Plan(steps=[step("a"), step("b", "a")])
    events = [
        PlanCreatedEvent(round=1, plan=plan, attempts=2),
        StepFinishedEvent.from_result(1, done("a", "ok").model_copy(update={"duration": 1.5})),
    ]
    for ev in events:
        back = DAG_EVENT_ADAPTER.validate_json(ev.model_dump_json())
        assert back == ev
    finished = events[1]
    assert isinstance(finished, StepFinishedEvent)
    assert finished.to_result() == done("a", "ok").model_copy(update={"duration": 1.5})
