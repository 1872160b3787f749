"""Mid-run messages ("injects") reach a running DAG run: the step agents working now, later
steps, the planner on a replan, the analyzer and the synthesis; too late once the answer is
being written.

The scripted model calls :meth:`DAGEngine.inject` from inside a chosen call, so the inject
lands in an exact phase of the run, deterministically.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from ctxstack.dag import (
    DAG_EVENT_ADAPTER,
    DAGDoneEvent,
    DAGEngine,
    DAGErrorEvent,
    DAGEvent,
    DAGInjectedEvent,
    StepFinishedEvent,
)
from ctxstack.dag._injects import FOLLOWUP_HEADER, InjectRoute, route_inject, with_followups
from ctxstack.errors import InputError
from ctxstack.llm import ScriptedLLM, ToolSpec
from ctxstack.messages import ChatMessage
from ctxstack.protocol import LLMResult
from tests.test_dag_engine import FAST, plan_json, role_of, step_task, verdict

Reply = str | ChatMessage | LLMResult | BaseException
Hook = Callable[[str, Sequence[ChatMessage]], None]


class Script:
    """Answers by role and lets a test act (inject) inside a given call."""

    def __init__(self, plans: list[str], verdicts: list[str] | None = None) -> None:
        self.plans = plans
        self.verdicts = verdicts or []
        self.hook: Hook | None = None
        self.calls: list[tuple[str, tuple[ChatMessage, ...]]] = []

    def __call__(self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] | None) -> Reply:
        role = role_of(messages)
        self.calls.append((role, tuple(messages)))
        if self.hook is not None:
            self.hook(role, messages)
        if role == "planner":
            return self.plans.pop(0)
        if role == "analyzer":
            return self.verdicts.pop(0) if self.verdicts else verdict(True, 0.95)
        if role == "synthesis":
            return "Final answer."
        if role == "step":
            return f"result of {step_task(messages)}"
        raise AssertionError(f"unexpected call: {messages[0].text[:80]!r}")

    def of(self, role: str) -> list[tuple[ChatMessage, ...]]:
        return [m for r, m in self.calls if r == role]


def make(script: Script) -> tuple[DAGEngine, ScriptedLLM]:
    llm = ScriptedLLM(handler=script)
    return DAGEngine(llm, fast_budget=FAST), llm


async def collect(engine: DAGEngine, query: str = "Plan a trip") -> list[DAGEvent]:
    return [event async for event in engine.run_events(query)]


def pinned_injects(messages: Sequence[ChatMessage]) -> list[str]:
    return [m.text for m in messages if m.role == "user" and m.kind == "inject" and m.pinned]


def step_calls(llm: ScriptedLLM, task: str) -> list[tuple[ChatMessage, ...]]:
    return [c.messages for c in llm.calls
            if role_of(c.messages) == "step" and step_task(c.messages) == task]


def user_text(messages: Sequence[ChatMessage]) -> str:
    return "\n".join(m.text for m in messages if m.role == "user")


# ---------------------------------------------------------------------- pure routing
def test_route_inject_by_phase() -> None:
    assert route_inject("execute") == InjectRoute(accept=True, to_running_steps=True)
    assert route_inject("prepare") == InjectRoute(accept=True, to_running_steps=False)
    assert route_inject("analyze") == InjectRoute(accept=True, to_running_steps=False)
    assert not route_inject("synthesis").accept


def test_with_followups_lists_injects_after_the_query() -> None:
    assert with_followups("Q", []) == "Q"
    text = with_followups("Q", ["one", "two"])
    assert text.startswith("Q\n\n" + FOLLOWUP_HEADER)
    assert text.endswith("- one\n- two")


# ---------------------------------------------------------------------- engine
async def test_inject_during_a_step_reaches_that_step_later_steps_analyzer_and_synthesis() -> None:
    script = Script([plan_json(("s1", []), ("s2", ["s1"]))])
    engine, llm = make(script)
    taken: list[bool] = []

    def hook(role: str, messages: Sequence[ChatMessage]) -> None:
        if role == "step" and step_task(messages) == "task s1" and not taken:
            taken.append(engine.inject("Also check the weather."))

    script.hook = hook
    events = await collect(engine)
    assert taken == [True]
    assert isinstance(events[-1], DAGDoneEvent)

    # s1 was answering when the inject came: its draft was set aside and the model asked
    # again with the inject pinned in its context.
    s1 = step_calls(llm, "task s1")
    assert len(s1) == 2
    assert pinned_injects(s1[0]) == []
    assert pinned_injects(s1[1]) == ["Also check the weather."]
    # s2 started later: it starts with the inject in its context.
    (s2,) = step_calls(llm, "task s2")
    assert pinned_injects(s2) == ["Also check the weather."]
    # The analyzer and the synthesis read it as a follow-up of the request.
    for role in ("analyzer", "synthesis"):
        (messages,) = script.of(role)
        assert FOLLOWUP_HEADER in user_text(messages)
        assert "- Also check the weather." in user_text(messages)

    injected = [e for e in events if isinstance(e, DAGInjectedEvent)]
    assert injected == [DAGInjectedEvent(text="Also check the weather.", round=1,
                                         phase="execute", steps=["s1"])]
    at = events.index(injected[0])
    s1_done = next(i for i, e in enumerate(events)
                   if isinstance(e, StepFinishedEvent) and e.step_id == "s1")
    assert at < s1_done  # reported as soon as the run yields again
    # The event survives a JSON round trip as part of the union.
    assert DAG_EVENT_ADAPTER.validate_json(injected[0].model_dump_json()) == injected[0]


async def test_inject_during_planning_reaches_steps_analyzer_replan_and_synthesis() -> None:
    script = Script(
        [plan_json(("a", []), ("b", [])), plan_json(("c", []))],
        verdicts=[verdict(False, 0.3, "the weather is missing"), verdict(True, 0.9)],
    )
    engine, llm = make(script)

    def hook(role: str, messages: Sequence[ChatMessage]) -> None:
        if role == "planner" and len(script.of("planner")) == 1:
            assert engine.inject("Include the weather.")

    script.hook = hook
    events = await collect(engine)
    done = events[-1]
    assert isinstance(done, DAGDoneEvent)
    assert done.rounds == 2

    first_plan, replan = script.of("planner")
    assert "Include the weather." not in user_text(first_plan)  # asked before it arrived
    assert "- Include the weather." in user_text(replan)
    for task in ("task a", "task b", "task c"):
        (messages,) = step_calls(llm, task)
        assert pinned_injects(messages) == ["Include the weather."]
    analyses = script.of("analyzer")
    assert len(analyses) == 2
    assert all("- Include the weather." in user_text(m) for m in analyses)
    (synthesis,) = script.of("synthesis")
    assert "- Include the weather." in user_text(synthesis)
    injected = [e for e in events if isinstance(e, DAGInjectedEvent)]
    assert injected == [DAGInjectedEvent(text="Include the weather.", round=1,
                                         phase="prepare", steps=[])]


async def test_inject_during_analysis_reaches_the_synthesis() -> None:
    script = Script([plan_json(("a", []))])
    engine, _ = make(script)

    def hook(role: str, _m: Sequence[ChatMessage]) -> None:
        if role == "analyzer":
            assert engine.inject("Make it short.")

    script.hook = hook
    events = await collect(engine)
    (synthesis,) = script.of("synthesis")
    assert "- Make it short." in user_text(synthesis)
    assert [e.phase for e in events if isinstance(e, DAGInjectedEvent)] == ["analyze"]


async def test_inject_after_synthesis_started_is_not_consumed() -> None:
    script = Script([plan_json(("a", []))])
    engine, llm = make(script)
    answers: list[bool] = []

    def hook(role: str, _m: Sequence[ChatMessage]) -> None:
        if role == "synthesis":
            answers.append(engine.inject("Too late?"))

    script.hook = hook
    events = await collect(engine)
    assert answers == [False]
    assert isinstance(events[-1], DAGDoneEvent)
    assert not any(isinstance(e, DAGInjectedEvent) for e in events)
    assert all("Too late?" not in user_text(c.messages) for c in llm.calls)


async def test_inject_before_a_run_waits_for_it_and_empty_text_is_refused() -> None:
    script = Script([plan_json(("a", []))])
    engine, llm = make(script)
    with pytest.raises(InputError, match="non-empty"):
        engine.inject("   ")
    assert engine.inject("Use metric units.")  # no run yet: kept for the next one
    events = await collect(engine)
    assert [e.phase for e in events if isinstance(e, DAGInjectedEvent)] == ["prepare"]
    assert [e.type for e in events[:2]] == ["injected", "query_enriched"]  # taken at the start
    (planner,) = script.of("planner")
    assert "- Use metric units." in user_text(planner)
    (step,) = step_calls(llm, "task a")
    assert pinned_injects(step) == ["Use metric units."]


async def test_inject_taken_before_a_failure_is_still_reported() -> None:
    script = Script([plan_json(("a", []))])
    engine, _ = make(script)
    script.plans = []  # the planner call fails after the inject was taken

    def hook(role: str, _m: Sequence[ChatMessage]) -> None:
        if role == "planner":
            assert engine.inject("Hello?")

    script.hook = hook
    events = await collect(engine)
    assert [e.type for e in events[-2:]] == ["injected", "error"]
    assert isinstance(events[-1], DAGErrorEvent)
