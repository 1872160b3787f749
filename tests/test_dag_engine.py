"""The DAG engine end to end with scripted models: enrichment, planning, parallel steps,
analysis, replanning, synthesis, events and usage."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxstack.agent import tool
from ctxstack.budget import ModelBudget
from ctxstack.compaction._prompts import HINTS, compaction_prompt
from ctxstack.dag import (
    AnalysisEvent,
    DAGDoneEvent,
    DAGEngine,
    DAGErrorEvent,
    DAGEvent,
    DAGExecutor,
    DAGPlanner,
    Plan,
    PlanAnalyzer,
    PlanCreatedEvent,
    PlanStep,
    QueryEnrichedEvent,
    ReplanEvent,
    ReplanFailedEvent,
    StepFinishedEvent,
    StepStartedEvent,
    build_enriched_query,
)
from ctxstack.dag._enrich import HISTORY_PREFIX
from ctxstack.dag._prompts import ANALYZER_ROLE, PLANNER_ROLE, STEP_ROLE, SYNTHESIS_ROLE
from ctxstack.errors import LLMError, PlanError
from ctxstack.llm import ScriptedLLM, ToolSpec, Usage
from ctxstack.memory import BaseMemory
from ctxstack.messages import ChatMessage
from ctxstack.protocol import LLMResult
from ctxstack.tokens import HEURISTIC

Reply = str | ChatMessage | LLMResult | BaseException
FAST = ModelBudget(role="fast", context_size=128_000, max_output_tokens=64_000)
PLANNER_INPUT_PROMPT = compaction_prompt("planner_input")


def plan_json(*steps: tuple[str, list[str]] | tuple[str, list[str], str]) -> str:
    out = []
    for s in steps:
        sid, deps = s[0], s[1]
        task = s[2] if len(s) > 2 else f"task {sid}"  # type: ignore[misc]
        out.append({"id": sid, "task": task, "dependencies": deps})
    return json.dumps({"steps": out})


def verdict(achieved: bool, confidence: float, reasoning: str = "ok") -> str:
    return json.dumps({"achieved": achieved, "confidence": confidence, "reasoning": reasoning})


def role_of(messages: Sequence[ChatMessage]) -> str:
    system = messages[0].text if messages and messages[0].role == "system" else ""
    for role, marker in (("planner", PLANNER_ROLE), ("step", STEP_ROLE),
                         ("analyzer", ANALYZER_ROLE), ("synthesis", SYNTHESIS_ROLE)):
        if system.startswith(marker):
            return role
    if system == PLANNER_INPUT_PROMPT:
        return "summariser"
    if any(system.startswith(compaction_prompt(h)[:60]) for h in HINTS):
        return "compaction"
    return "unknown"


def step_task(messages: Sequence[ChatMessage]) -> str:
    """The task line a step agent was started with (its first user message's first line)."""
    first_user = next(m for m in messages if m.role == "user")
    return first_user.text.split("\n", 1)[0]


@dataclass
class Router:
    """Answers each call by role: queued plans and verdicts, per-task step answers."""

    plans: list[Reply] = field(default_factory=list)
    verdicts: list[Reply] = field(default_factory=list)
    steps: dict[str, Reply | Callable[[Sequence[ChatMessage]], Reply]] = field(default_factory=dict)
    synthesis: str = "Final answer."
    summary: Reply = "The user wants a trip plan; budget 3,000 EUR."
    seen: dict[str, list[tuple[ChatMessage, ...]]] = field(default_factory=dict)

    def __call__(self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] | None) -> Reply:
        role = role_of(messages)
        self.seen.setdefault(role, []).append(tuple(messages))
        if role == "planner":
            return self.plans.pop(0)
        if role == "analyzer":
            return self.verdicts.pop(0) if self.verdicts else verdict(True, 0.95)
        if role == "synthesis":
            return self.synthesis
        if role == "summariser":
            return self.summary
        if role == "compaction":
            return "## Goal\nsummarised\n## Key data\n42"
        if role == "step":
            task = step_task(messages)
            reply = self.steps.get(task, f"result of {task}")
            return reply(messages) if callable(reply) else reply
        raise AssertionError(f"unroutable call: {messages[0].text[:80]!r}")


def engine_for(router: Router, *, delay: float = 0.0, **kw: Any) -> tuple[DAGEngine, ScriptedLLM]:
    llm = ScriptedLLM(handler=router, delay=delay)
    kw.setdefault("fast_budget", FAST)
    return DAGEngine(llm, **kw), llm


async def collect(engine: DAGEngine, query: str, **kw: Any) -> list[DAGEvent]:
    return [ev async for ev in engine.run_events(query, **kw)]


def of(events: list[DAGEvent], cls: type[Any]) -> list[Any]:
    return [e for e in events if isinstance(e, cls)]


# ---------------------------------------------------------------------------- execution


async def test_diamond_runs_in_dependency_order_with_parallel_middle() -> None:
    router = Router(plans=[plan_json(("a", []), ("b", ["a"]), ("c", ["a"]), ("d", ["b", "c"]))])
    engine, _ = engine_for(router, delay=0.05)
    events = await collect(engine, "Diamond please")

    finished = {e.step_id: e for e in of(events, StepFinishedEvent)}
    started = {e.step_id: e for e in of(events, StepStartedEvent)}
    assert set(finished) == {"a", "b", "c", "d"}
    assert all(e.status == "done" for e in finished.values())
    # order: a before b and c; d after both
    for mid in ("b", "c"):
        assert started[mid].at >= finished["a"].finished_at
    assert started["d"].at >= max(finished["b"].finished_at, finished["c"].finished_at)
    # b and c overlap in time
    b, c = finished["b"], finished["c"]
    assert b.started_at < c.finished_at
    assert c.started_at < b.finished_at
    # d saw both results, labelled
    d_query = next(m for m in router.seen["step"] if step_task(m) == "task d")
    d_text = next(m for m in d_query if m.role == "user").text
    assert "### Step b: task b\nresult of task b" in d_text
    assert "### Step c: task c\nresult of task c" in d_text
    done = of(events, DAGDoneEvent)[0]
    assert done.answer == "Final answer."
    assert done.rounds == 1
    assert "".join(e.text for e in events if e.type == "answer_delta") == "Final answer."
    assert events[-1] == done


async def test_concurrency_limit_of_one_runs_steps_one_at_a_time() -> None:
    plan = Plan(steps=[PlanStep(id=f"s{i}", task=f"task s{i}") for i in range(4)])
    llm = ScriptedLLM(handler=Router(), delay=0.02)
    executor = DAGExecutor(llm, budget=FAST, max_concurrency=1)
    result = await executor.run(plan)
    spans = sorted((r.started_at or 0, r.finished_at or 0) for r in result.results)
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert start >= end
    assert [r.status for r in result.results] == ["done"] * 4


async def test_failing_step_skips_its_dependants_but_not_the_rest() -> None:
    router = Router(
        plans=[plan_json(("a", []), ("b", ["a"]), ("c", ["b"]), ("x", []), ("y", ["x"]))],
        steps={"task a": LLMError("provider down")},
    )
    engine, _ = engine_for(router)
    events = await collect(engine, "q")
    finished = {e.step_id: e for e in of(events, StepFinishedEvent)}
    assert finished["a"].status == "failed"
    assert "provider down" in (finished["a"].error or "")
    assert finished["b"].status == "skipped"
    assert finished["b"].error == "dependency 'a' failed"
    assert finished["c"].status == "skipped"
    assert finished["c"].error == "dependency 'b' was skipped"
    assert finished["x"].status == "done"
    assert finished["y"].status == "done"
    assert {e.step_id for e in of(events, StepStartedEvent)} == {"a", "x", "y"}
    # the analyzer and the synthesis are told what is missing
    analyzer_text = router.seen["analyzer"][0][-1].text
    assert "Status: failed: LLMError: provider down" in analyzer_text
    synthesis_text = router.seen["synthesis"][0][-1].text
    assert "- b: task b (skipped: dependency 'a' failed)" in synthesis_text
    assert isinstance(events[-1], DAGDoneEvent)


async def test_dependency_context_is_cut_at_50k_head_and_tail() -> None:
    # Without a compact model the character cut is what keeps the message in bounds (with
    # one, the result is summarised first: tests/test_dag_dependencies.py).
    huge = "HEAD-" + "x" * 120_000 + "-TAIL"
    router = Router(plans=[plan_json(("a", []), ("b", ["a"]))], steps={"task a": huge})
    engine, _ = engine_for(router, compact_steps_with_llm=False)
    await collect(engine, "q")
    b_call = next(m for m in router.seen["step"] if step_task(m) == "task b")
    b_query = next(m for m in b_call if m.role == "user").text
    assert len(b_query) <= 50_000
    assert "### Step a: task a\nHEAD-" in b_query
    assert b_query.endswith("-TAIL")
    assert "characters truncated" in b_query


async def test_step_agents_have_no_memory_and_their_own_guard() -> None:
    plan = Plan(steps=[PlanStep(id="a", task="task a"), PlanStep(id="b", task="task b")])
    router = Router()
    executor = DAGExecutor(ScriptedLLM(handler=router), budget=FAST)
    agents = []
    original = executor.make_agent

    def spy(*args: Any) -> Any:
        agent = original(*args)
        agents.append(agent)
        return agent

    executor.make_agent = spy  # type: ignore[method-assign]
    result = await executor.run(plan)
    assert [r.status for r in result.results] == ["done", "done"]
    assert len(agents) == 2
    assert agents[0].guard is not agents[1].guard
    assert all(a.memory is None for a in agents)
    assert all(a.budget == FAST.usable_input_tokens for a in agents)
    for call in router.seen["step"]:
        # system prompt + the step's own task: nothing from elsewhere
        assert [m.role for m in call] == ["system", "user"]


# ---------------------------------------------------------------------------- planner


async def test_planner_sends_exactly_two_messages() -> None:
    router = Router(plans=[plan_json(("a", []))])
    planner = DAGPlanner(ScriptedLLM(handler=router))
    result = await planner.plan("Find X")
    call = router.seen["planner"][0]
    assert [m.role for m in call] == ["system", "user"]
    assert call[1].text == "Find X"
    assert result.plan.ids == ["a"]
    assert result.attempts == 1
    assert result.usage.calls == 1


@pytest.mark.parametrize(
    ("broken", "problem"),
    [
        (plan_json(("a", ["b"]), ("b", ["a"])), "dependency cycle"),
        (plan_json(("a", []), ("b", ["nope"])), "unknown step id(s) 'nope'"),
        (plan_json(("a", []), ("a", [])), "'a' is used by 2 steps"),
        (json.dumps({"steps": []}), "the plan has no steps"),
    ],
)
async def test_invalid_plan_is_reasked_with_the_error_then_accepted(broken: str, problem: str) -> None:
    router = Router(plans=[broken, plan_json(("a", []), ("b", ["a"]))])
    llm = ScriptedLLM(handler=router)
    result = await DAGPlanner(llm).plan("Do it")
    assert result.attempts == 2
    assert result.plan.ids == ["a", "b"]
    retry = router.seen["planner"][1]
    assert retry[-1].role == "user"
    assert problem in retry[-1].text
    assert retry[-2].role == "assistant"  # the model sees its own broken plan
    assert result.usage == llm.total_usage


async def test_plan_still_invalid_after_reask_is_a_plan_error() -> None:
    cyc = plan_json(("a", ["b"]), ("b", ["a"]))
    router = Router(plans=[cyc, plan_json(("a", ["zz"]))])
    with pytest.raises(PlanError, match=r"unknown step id\(s\) 'zz'"):
        await DAGPlanner(ScriptedLLM(handler=router)).plan("Do it")


async def test_engine_reports_a_plan_error_as_the_last_event_with_usage() -> None:
    cyc = plan_json(("a", ["b"]), ("b", ["a"]))
    router = Router(plans=[cyc, cyc])
    engine, llm = engine_for(router)
    events = await collect(engine, "q")
    error = events[-1]
    assert isinstance(error, DAGErrorEvent)
    assert error.error_type == "PlanError"
    assert "dependency cycle" in error.message
    assert error.usage == llm.total_usage
    assert error.usage.calls == 2
    with pytest.raises(PlanError):
        await engine_for(Router(plans=[cyc, cyc]))[0].run("q")


async def test_too_many_steps_is_a_graph_problem() -> None:
    many = plan_json(*[(f"s{i}", []) for i in range(5)])
    router = Router(plans=[many, plan_json(("s1", []))])
    result = await DAGPlanner(ScriptedLLM(handler=router), max_steps=3).plan("q")
    assert "at most 3 are allowed" in router.seen["planner"][1][-1].text
    assert result.plan.ids == ["s1"]


async def test_planner_lists_the_step_tools() -> None:
    @tool
    def search(query: str) -> str:
        """Search the web.

        Args:
            query: what to look for.
        """
        return "found"

    router = Router(plans=[plan_json(("a", []))])
    await DAGPlanner(ScriptedLLM(handler=router), tools=[search]).plan("q")
    assert "- search: Search the web." in router.seen["planner"][0][0].text


# ---------------------------------------------------------------------------- analyzer


async def test_analyzer_sees_each_result_cut_at_10k() -> None:
    plan = Plan(steps=[PlanStep(id="a", task="task a"), PlanStep(id="b", task="task b")])
    from ctxstack.dag import StepResult

    results = {
        "a": StepResult(step_id="a", task="task a", status="done", answer="A" * 40_000 + "END-A"),
        "b": StepResult(step_id="b", task="task b", status="done", answer="short b"),
    }
    router = Router(verdicts=[verdict(False, 0.4, "b is thin")])
    out = await PlanAnalyzer(ScriptedLLM(handler=router)).analyze("the question", plan, results)
    assert (out.analysis.achieved, out.analysis.confidence) == (False, 0.4)
    text = router.seen["analyzer"][0][-1].text
    assert "the question" in text
    block_a = text.split("### Step a: task a\n", 1)[1].split("### Step b")[0]
    assert 9_000 < len(block_a) <= 10_000 + 50
    assert block_a.rstrip().endswith("END-A")
    assert "short b" in text


async def test_analyzer_rejects_out_of_range_confidence_after_reask() -> None:
    from ctxstack.errors import StructuredOutputError

    plan = Plan(steps=[PlanStep(id="a", task="t")])
    router = Router(verdicts=[verdict(True, 1.7), verdict(True, -1)])
    with pytest.raises(StructuredOutputError):
        await PlanAnalyzer(ScriptedLLM(handler=router)).analyze("q", plan, {})


async def test_a_failing_analyzer_does_not_stop_the_answer() -> None:
    router = Router(plans=[plan_json(("a", []))], verdicts=["not json", "still not"])
    engine, _ = engine_for(router)
    events = await collect(engine, "q")
    analysis = of(events, AnalysisEvent)[0]
    assert analysis.achieved is None
    assert "StructuredOutputError" in (analysis.error or "")
    assert isinstance(events[-1], DAGDoneEvent)
    assert events[-1].achieved is None


# ---------------------------------------------------------------------------- replanning


async def test_replan_gets_500_char_summaries_and_the_reasoning() -> None:
    router = Router(
        plans=[plan_json(("a", [])), plan_json(("a2", []))],
        verdicts=[verdict(False, 0.3, "A gave the wrong year"), verdict(True, 0.9)],
        steps={"task a": "Z" * 3_000},
    )
    engine, _ = engine_for(router)
    events = await collect(engine, "What happened in 1999?")
    replans = of(events, ReplanEvent)
    assert len(replans) == 1
    assert replans[0].round == 2
    assert replans[0].reason == "A gave the wrong year"
    second = router.seen["planner"][1]
    assert [m.role for m in second] == ["system", "user"]  # still two messages
    user = second[1].text
    assert user.startswith("What happened in 1999?")
    assert "Why it was judged not achieved: A gave the wrong year" in user
    assert 400 < user.count("Z") <= 500
    done = events[-1]
    assert isinstance(done, DAGDoneEvent)
    assert done.rounds == 2
    assert done.achieved is True
    # the answer is synthesised from the last round's results
    synthesis = router.seen["synthesis"][0][-1].text
    assert "### Step a2: task a2" in synthesis
    assert "ZZZZ" not in synthesis


@pytest.mark.parametrize(("max_replans", "rounds"), [(0, 1), (1, 2), (2, 3)])
async def test_round_limit(max_replans: int, rounds: int) -> None:
    router = Router(
        plans=[plan_json((f"r{i}", [])) for i in range(5)],
        verdicts=[verdict(False, 0.1, f"bad {i}") for i in range(5)],
    )
    engine, _ = engine_for(router, max_replans=max_replans)
    events = await collect(engine, "q")
    assert len(router.seen["planner"]) == rounds
    assert len(router.seen["analyzer"]) == rounds  # the last round is analysed too
    assert len(of(events, ReplanEvent)) == rounds - 1
    assert [e.round for e in of(events, PlanCreatedEvent)] == list(range(1, rounds + 1))
    done = events[-1]
    assert isinstance(done, DAGDoneEvent)
    assert done.rounds == rounds
    assert done.achieved is False


@pytest.mark.parametrize(("achieved", "confidence"), [(False, 0.8), (False, 0.95), (True, 0.1)])
async def test_no_replan_when_achieved_or_confident(achieved: bool, confidence: float) -> None:
    router = Router(plans=[plan_json(("a", []))], verdicts=[verdict(achieved, confidence)])
    engine, _ = engine_for(router)
    events = await collect(engine, "q")
    assert not of(events, ReplanEvent)
    assert len(router.seen["planner"]) == 1


def test_should_replan_rule() -> None:
    from ctxstack.dag import Analysis

    engine = DAGEngine(ScriptedLLM(), fast_budget=FAST, max_replans=2, confidence_threshold=0.8)
    low = Analysis(achieved=False, confidence=0.79, reasoning="")
    assert engine.should_replan(low, 1)
    assert engine.should_replan(low, 2)
    assert not engine.should_replan(low, 3)
    assert not engine.should_replan(low.model_copy(update={"confidence": 0.8}), 1)
    assert not engine.should_replan(low.model_copy(update={"achieved": True}), 1)
    with pytest.raises(ValueError, match="max_replans"):
        DAGEngine(ScriptedLLM(), fast_budget=FAST, max_replans=-1)
    with pytest.raises(ValueError, match="confidence_threshold"):
        DAGEngine(ScriptedLLM(), fast_budget=FAST, confidence_threshold=1.5)


# ---------------------------------------------------------------------------- enrichment


def long_history(n: int = 120, chars: int = 1_000) -> list[ChatMessage]:
    """~20K tokens by the default counter (a word is about one token)."""
    out = []
    for i in range(n):
        role = ChatMessage.user if i % 2 == 0 else ChatMessage.assistant
        out.append(role(f"turn {i}: " + "words " * (chars // 6)))
    return out


class ListMemory(BaseMemory):
    """A memory that, like DbMemory, reports what its load cost in ``usage``."""

    def __init__(self, messages: list[ChatMessage], usage: Usage | None = None) -> None:
        self.messages = list(messages)
        self.usage = usage or Usage()

    async def add_message(self, message: ChatMessage) -> None:
        self.messages.append(message)

    async def get_messages(self) -> list[ChatMessage]:
        return list(self.messages)

    async def clear(self) -> None:
        self.messages.clear()


async def test_short_history_is_used_as_is() -> None:
    history = [ChatMessage.user("I prefer trains."), ChatMessage.assistant("Noted.")]
    router = Router()
    enriched = await build_enriched_query(
        "Plan a trip to Lyon", memory=ListMemory(history), fast_llm=ScriptedLLM(handler=router)
    )
    assert enriched.text == (
        f"{HISTORY_PREFIX}\nUser: I prefer trains.\n\nAssistant: Noted.\n\n"
        "Current request:\nPlan a trip to Lyon"
    )
    assert enriched.method == "none"
    assert not enriched.summarized
    assert "summariser" not in router.seen
    assert (await build_enriched_query("Just this")).text == "Just this"


async def test_history_over_16k_tokens_is_summarised_with_planner_input() -> None:
    history = long_history()
    assert HEURISTIC.count_messages(history) > 16_000
    router = Router()
    fast = ScriptedLLM(handler=router)
    enriched = await build_enriched_query("Plan my trip", history=history, fast_llm=fast)
    assert enriched.method == "llm"
    assert enriched.summarized
    assert enriched.tokens_before > 16_000
    assert enriched.tokens_after <= 16_000
    assert enriched.text.startswith(HISTORY_PREFIX)
    assert "The user wants a trip plan; budget 3,000 EUR." in enriched.text
    assert enriched.text.endswith("Current request:\nPlan my trip")
    call = router.seen["summariser"][0]
    assert call[0].text == PLANNER_INPUT_PROMPT
    assert "turn 0:" in call[1].text  # the history is what gets summarised
    assert "Plan my trip" not in call[1].text  # not the query
    assert enriched.usage == fast.total_usage


async def test_summary_failure_falls_back_to_truncation(caplog: pytest.LogCaptureFixture) -> None:
    history = long_history()
    router = Router(summary=LLMError("fast model down"))
    enriched = await build_enriched_query("Plan my trip", history=history, fast_llm=ScriptedLLM(handler=router))
    assert enriched.method == "truncate"
    assert not enriched.summarized
    assert enriched.tokens_after <= 16_000
    assert "turn 119:" in enriched.text  # newest kept
    assert "turn 0:" not in enriched.text  # oldest dropped
    assert enriched.text.endswith("Current request:\nPlan my trip")
    assert "planner_input summary failed" in caplog.text


async def test_empty_summary_counts_as_failure() -> None:
    enriched = await build_enriched_query(
        "q", history=long_history(), fast_llm=ScriptedLLM(handler=Router(summary="  "))
    )
    assert enriched.method == "truncate"


async def test_the_query_is_never_cut() -> None:
    query = "word " * 20_000  # 20,000 tokens on its own (o200k_base)
    enriched = await build_enriched_query(query, history=long_history(), fast_llm=ScriptedLLM(handler=Router()))
    assert enriched.text == query
    assert enriched.method == "truncate"
    big = await build_enriched_query(query)
    assert big.text == query


async def test_enrich_argument_errors() -> None:
    with pytest.raises(ValueError, match="query is empty"):
        await build_enriched_query("  ")
    with pytest.raises(ValueError, match="either memory or history"):
        await build_enriched_query("q", memory=ListMemory([]), history=[])


async def test_engine_summarises_long_history_before_planning() -> None:
    router = Router(plans=[plan_json(("a", []))])
    engine, _ = engine_for(router)
    events = await collect(engine, "Plan my trip", history=long_history())
    enriched = of(events, QueryEnrichedEvent)[0]
    assert enriched.method == "llm"
    assert enriched.summarized
    assert enriched.usage.calls == 1
    planner_input = router.seen["planner"][0][1].text
    assert "budget 3,000 EUR" in planner_input
    assert HEURISTIC.count_text(planner_input) <= 16_000


# ---------------------------------------------------------------------------- usage


async def test_usage_totals_include_every_call() -> None:
    """Summary, planner + re-ask, steps (one failing, one compacting), analyzer, synthesis."""
    payload = "data " * 800  # ~1,000 tokens per result: six of them overflow 4,000 tokens

    @tool
    def fetch(name: str) -> str:
        """Fetch a large record.

        Args:
            name: record name.
        """
        return payload

    calls: dict[str, int] = {}

    def compacting_step(messages: Sequence[ChatMessage]) -> Reply:
        calls["c"] = calls.get("c", 0) + 1
        if calls["c"] <= 6:
            return ScriptedLLM.tool_call("fetch", {"name": f"record {calls['c']}"})
        return "record fetched: 42"

    cyc = plan_json(("a", ["b"]), ("b", ["a"]))
    router = Router(
        plans=[cyc, plan_json(("a", []), ("b", ["a"]), ("c", []))],
        steps={"task a": LLMError("boom"), "task c": compacting_step},
    )
    main = ScriptedLLM(handler=router)
    fast = ScriptedLLM(handler=router)
    small = ModelBudget(role="fast", context_size=8_000, max_output_tokens=4_000)
    engine = DAGEngine(main, [fetch], fast_llm=fast, fast_budget=small)
    events = await collect(engine, "Plan my trip", history=long_history())
    done = events[-1]
    assert isinstance(done, DAGDoneEvent), events[-1]

    assert "summariser" in router.seen
    assert len(router.seen["planner"]) == 2
    # The step guard compacted; clearing old tool outputs (the first stage) was enough, so
    # no summariser call was needed (before masking existed this summarised).
    assert "compaction" not in router.seen
    finished = {e.step_id: e for e in of(events, StepFinishedEvent)}
    assert finished["a"].status == "failed"
    assert finished["b"].status == "skipped"
    assert finished["c"].status == "done"
    assert finished["c"].compactions >= 1

    truth = main.total_usage + fast.total_usage
    assert done.usage == truth
    # every call is attributed to exactly one event
    parts = (
        of(events, QueryEnrichedEvent) + of(events, PlanCreatedEvent)
        + of(events, StepFinishedEvent) + of(events, AnalysisEvent)
    )
    attributed = sum((e.usage for e in parts), Usage())
    synthesis_calls = 1
    assert attributed.calls + synthesis_calls == truth.calls
    assert of(events, PlanCreatedEvent)[0].usage.calls == 2
    assert finished["c"].usage.calls == calls["c"] + len(router.seen.get("compaction", []))


async def test_closing_the_stream_early_cancels_running_steps() -> None:
    router = Router(plans=[plan_json(("a", []), ("b", []))])
    engine, llm = engine_for(router, delay=0.2)
    stream = engine.run_events("q")
    async for event in stream:
        if isinstance(event, StepStartedEvent):
            break
    await stream.aclose()
    n = len(llm.calls)
    await asyncio.sleep(0.3)
    assert len(llm.calls) == n  # nothing kept running in the background


# ---------------------------------------------------------------------------- over HTTP


async def test_engine_over_the_openai_compatible_client(stub: Any, stub_client: Any) -> None:
    """The whole pipeline through real loopback HTTP: JSON plans, a tool call, SSE synthesis."""
    from ctxstack.llm.stub import StubReply, StubRequest, stub_usage

    @tool
    def lookup(city: str) -> str:
        """Population of a city.

        Args:
            city: the city.
        """
        return {"Lyon": "522,250", "Nice": "348,085"}[city]

    answered: list[tuple[StubRequest, str]] = []

    def rule(request: StubRequest) -> StubReply:
        role = role_of(request.messages)
        if role == "planner":
            text = plan_json(("lyon", [], "population of Lyon"), ("nice", [], "population of Nice"),
                             ("sum", ["lyon", "nice"], "add both populations"))
        elif role == "step" and not any(m.role == "tool" for m in request.messages):
            city = step_task(request.messages).removeprefix("population of ")
            if city in ("Lyon", "Nice"):
                reply = StubReply.tool_call("lookup", {"city": city})
                answered.append((request, ""))
                return reply
            text = "870,335"
        elif role == "step":
            text = next(m for m in reversed(request.messages) if m.role == "tool").text
        elif role == "analyzer":
            text = verdict(True, 0.9)
        elif role == "synthesis":
            text = "Lyon and Nice have 870,335 inhabitants together."
        else:
            raise AssertionError(role)
        answered.append((request, text))
        return StubReply.text(text)

    stub.rule = rule
    engine = DAGEngine(stub_client, [lookup], fast_budget=FAST)
    events = await collect(engine, "How many people live in Lyon and Nice together?")
    done = events[-1]
    assert isinstance(done, DAGDoneEvent), done
    assert done.answer == "Lyon and Nice have 870,335 inhabitants together."
    finished = {e.step_id: e for e in of(events, StepFinishedEvent)}
    assert finished["lyon"].answer == "522,250"
    assert finished["nice"].answer == "348,085"
    sum_call = next(r for r, _ in answered if role_of(r.messages) == "step"
                    and step_task(r.messages) == "add both populations")
    assert "### Step lyon: population of Lyon\n522,250" in sum_call.messages[1].text
    activity = [e.activity.type for e in events if e.type == "step_activity"]
    assert activity.count("tool_call") == 2
    assert activity.count("tool_result") == 2
    assert len(stub.requests) == len(answered)
    assert any(r.stream for r in stub.requests)  # the synthesis was streamed over SSE
    assert done.usage.calls == len(stub.requests)
    assert done.usage.input_tokens == sum(stub_usage(r.messages, None)[0] for r in stub.requests)


async def test_run_returns_the_whole_result() -> None:
    router = Router(
        plans=[plan_json(("a", [])), plan_json(("b", ["c"]), ("c", []))],
        verdicts=[verdict(False, 0.2, "missing B"), verdict(True, 0.9, "complete")],
    )
    engine, llm = engine_for(router)
    memory = ListMemory([ChatMessage.user("Earlier: use metric units."), ChatMessage.assistant("OK.")])
    result = await engine.run("Report", memory=memory)
    assert result.answer == "Final answer."
    assert result.rounds == 2
    assert result.achieved is True
    assert result.plan.ids == ["b", "c"]
    assert [r.step_id for r in result.results] == ["b", "c"]
    assert [a.reasoning for a in result.analyses] == ["missing B", "complete"]
    assert result.enriched.method == "none"
    assert "use metric units" in result.enriched.text
    assert "use metric units" in router.seen["planner"][0][1].text
    assert result.usage == llm.total_usage


async def test_step_activity_is_relayed_and_user_callbacks_still_fire() -> None:
    @tool
    def double(x: int) -> int:
        """Double a number.

        Args:
            x: the number.
        """
        return 2 * x

    replies = iter([ScriptedLLM.tool_call("double", {"x": 21}), "42"])
    router = Router(steps={"task a": lambda messages: next(replies)})
    seen: list[str] = []
    executor = DAGExecutor(
        ScriptedLLM(handler=router), [double], budget=FAST,
        agent_options={"on_event": lambda event: seen.append(event.type)},
    )
    events = [e async for e in executor.run_events(Plan(steps=[PlanStep(id="a", task="task a")]))]
    kinds = [e.type if e.type != "step_activity" else e.activity.type for e in events]  # type: ignore[union-attr]
    assert kinds == ["step_started", "tool_call", "tool_result", "step_finished"]
    assert events[-1].answer == "42"  # type: ignore[union-attr]
    assert "tool_call" in seen
    assert "done" in seen  # the user's callback sees everything, not only what is relayed
    with pytest.raises(ValueError, match="no memory by design"):
        DAGExecutor(ScriptedLLM(), budget=FAST, agent_options={"memory": ListMemory([])})


async def test_a_memorys_load_usage_counts_in_the_run() -> None:
    spent = Usage(input_tokens=5_000, output_tokens=300, calls=1)
    memory = ListMemory([ChatMessage.user("hi"), ChatMessage.assistant("hello")], usage=spent)
    enriched = await build_enriched_query("q", memory=memory)
    assert enriched.load_usage == spent
    assert enriched.usage == spent
    router = Router(plans=[plan_json(("a", []))])
    engine, llm = engine_for(router)
    events = await collect(engine, "q", memory=memory)
    assert of(events, QueryEnrichedEvent)[0].usage == spent
    done = events[-1]
    assert isinstance(done, DAGDoneEvent)
    assert done.usage == llm.total_usage + spent


@settings(max_examples=40, deadline=None)
@given(
    turns=st.integers(0, 30),
    words=st.integers(1, 200),
    query_words=st.integers(1, 400),
    summary_words=st.one_of(st.none(), st.integers(0, 2_000)),
)
async def test_enriched_query_fits_and_keeps_the_query(
    turns: int, words: int, query_words: int, summary_words: int | None
) -> None:
    """Property: the query ends the text verbatim; the text fits the threshold unless the
    query alone does not (then it is the query alone)."""
    threshold = 600
    history = [
        (ChatMessage.user if i % 2 == 0 else ChatMessage.assistant)(f"m{i} " + "word " * words)
        for i in range(turns)
    ]
    query = "Q: " + "ask " * query_words
    fast = None if summary_words is None else ScriptedLLM(handler=lambda m, t: "sum " * summary_words)
    enriched = await build_enriched_query(query, history=history, fast_llm=fast, threshold_tokens=threshold)
    assert enriched.text.endswith(query)
    if HEURISTIC.count_text(query) > threshold - 10:
        assert enriched.tokens_after <= threshold or enriched.text == query
    else:
        assert enriched.tokens_after <= threshold
    assert enriched.tokens_after == HEURISTIC.count_text(enriched.text)


async def test_a_failed_replan_answers_from_the_round_that_ran() -> None:
    cyc = plan_json(("x", ["y"]), ("y", ["x"]))
    router = Router(
        plans=[plan_json(("a", [])), cyc, cyc],
        verdicts=[verdict(False, 0.2, "thin")],
        steps={"task a": "partial data 17"},
    )
    engine, llm = engine_for(router)
    events = await collect(engine, "q")
    kinds = [e.type for e in events if e.type not in ("answer_delta", "step_started", "step_finished")]
    assert kinds == ["query_enriched", "plan_created", "analysis", "replan", "replan_failed", "done"]
    failed = of(events, ReplanFailedEvent)[0]
    assert failed.round == 2
    assert failed.error_type == "PlanError"
    assert failed.usage.calls == 2
    done = events[-1]
    assert isinstance(done, DAGDoneEvent)
    assert done.rounds == 1
    assert "partial data 17" in router.seen["synthesis"][0][-1].text
    assert done.usage == llm.total_usage


async def test_history_from_a_real_dbmemory(tmp_path: Any) -> None:
    """Phase 1 through DbMemory on SQLite: it compacts on load (its usage counts), drops the
    stored current query, and the result is still bounded to 16K for the planner."""
    from ctxstack.memory import DbMemory
    from ctxstack.store import (
        NewMessage,
        append_messages,
        create_conversation,
        create_user,
        session_factory,
        upgrade,
    )
    from ctxstack.store.db import create_engine_from_url

    db = create_engine_from_url(f"sqlite+aiosqlite:///{tmp_path / 'dag.db'}")
    try:
        await upgrade(db)
        sf = session_factory(db)
        user, _ = await create_user(sf, "alice")
        conversation = await create_conversation(sf, user.id)
        query = "Now plan the Lyon trip within my budget."
        stored = [
            NewMessage(role="user" if i % 2 == 0 else "assistant",
                       content=f"turn {i}: " + "details " * 600)
            for i in range(160)
        ]
        await append_messages(sf, conversation.id, [*stored, NewMessage(role="user", content=query)])

        db_summariser = ScriptedLLM(handler=lambda m, t: "Earlier: Lyon, budget 3,000 EUR.")
        # 110K stored: a summarising load returns its target fill (~27K), over the 16K
        memory = DbMemory(conversation.id, session_factory=sf, budget=80_000,
                          compact_llm=db_summariser, user_id=user.id)
        router = Router(plans=[plan_json(("a", []))])
        engine, llm = engine_for(router)
        events = await collect(engine, query, memory=memory)
    finally:
        await db.dispose()

    done = events[-1]
    assert isinstance(done, DAGDoneEvent), done
    assert memory.was_compacted
    assert memory.trailing_message is not None
    assert memory.trailing_message.text == query
    enriched = of(events, QueryEnrichedEvent)[0]
    assert enriched.method == "llm"  # DbMemory's load still exceeds the planner's 16K
    planner_input = router.seen["planner"][0][1].text
    assert planner_input.count(query) == 1  # the stored query was not loaded as history
    assert HEURISTIC.count_text(planner_input) <= 16_000
    assert db_summariser.total_usage.calls >= 1
    assert done.usage == llm.total_usage + db_summariser.total_usage


async def test_step_guards_count_with_the_step_counter() -> None:
    """The service hands the fast model's calibrating counter to the DAG; the step guards
    must count with it, so a step context the heuristic thinks fits is compacted when the
    provider is known to bill more."""
    from ctxstack.budget import ModelBudget
    from ctxstack.dag import DAGEngine
    from ctxstack.messages import ChatMessage
    from ctxstack.tokens import HeuristicCounter

    class Doubling(HeuristicCounter):
        @property
        def cache_key(self) -> str:
            return "doubling"

        def count_text(self, text: str) -> int:
            return 2 * super().count_text(text)

    counter = Doubling()
    budget = ModelBudget(context_size=10_000, max_output_tokens=4_000)  # 6,000 usable
    engine = DAGEngine(ScriptedLLM(), step_counter=counter, fast_budget=budget)
    executor = engine.make_executor(ScriptedLLM())
    guard = executor.guard_factory(None, executor.budget, executor.max_message_chars)
    assert guard.counter is counter
    messages = [ChatMessage.system("s")] + [
        ChatMessage.user("word " * 1_000) if i % 2 == 0 else ChatMessage.assistant("ok " * 1_000)
        for i in range(5)
    ]  # ≈ 5,000 heuristic tokens: fits 6,000 (margin included), but not when billed double
    assert await DAGEngine(ScriptedLLM(), fast_budget=budget).make_executor(
        ScriptedLLM()
    ).guard_factory(None, budget, 50_000).check_and_compact(messages) is messages
    compacted = await guard.check_and_compact(messages)
    assert len(compacted) < len(messages)
    assert counter.count_messages(compacted) <= budget.usable_input_tokens
