"""The seed's step_dependency rule: a dependency result over its cut is summarised by the
fast model with that hint; the character cut stays as the fallback; each attempt is a
CompactionEvent relayed as the step's activity."""

from __future__ import annotations

from collections.abc import Sequence

from ctxstack.agent import CompactionNoticeEvent
from ctxstack.compaction._prompts import compaction_prompt, summary_instruction
from ctxstack.dag import DAGEngine, PlanStep, StepActivityEvent, StepResult
from ctxstack.dag._context import build_step_context, dependency_shares
from ctxstack.llm import ScriptedLLM, ToolSpec
from ctxstack.messages import ChatMessage
from tests.test_dag_engine import FAST, Reply, Router, collect, plan_json, step_task

DEPENDENCY_PROMPT = compaction_prompt("step_dependency")
DEPENDENCY_INSTRUCTION = summary_instruction("step_dependency")
HUGE = "HEAD-" + "filler line with words. " * 5_000 + "revenue: 1234567 EUR -TAIL"


class DependencyRouter(Router):
    """The DAG router, answering step_dependency summaries itself (and counting them): the
    cache-aligned request (the step's own conversation, the instruction last) and the
    transcript request (the hint's system prompt)."""

    def __init__(self, summary: str | BaseException, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.dependency_summary = summary
        self.dependency_calls: list[tuple[ChatMessage, ...]] = []

    def __call__(self, messages: Sequence[ChatMessage],
                 tools: Sequence[ToolSpec] | None) -> Reply:
        if messages and ((messages[0].role == "system"
                          and messages[0].text == DEPENDENCY_PROMPT)
                         or messages[-1].text == DEPENDENCY_INSTRUCTION):
            self.dependency_calls.append(tuple(messages))
            if isinstance(self.dependency_summary, BaseException):
                raise self.dependency_summary
            return self.dependency_summary
        return super().__call__(messages, tools)


def _b_query(router: Router) -> str:
    call = next(m for m in router.seen["step"] if step_task(m) == "task b")
    return next(m for m in call if m.role == "user").text


def _engine(router: Router, **kw: object) -> DAGEngine:
    return DAGEngine(ScriptedLLM(handler=router), fast_budget=FAST, **kw)  # type: ignore[arg-type]


def _dependency_compactions(events: Sequence[object]) -> list[CompactionNoticeEvent]:
    return [e.activity for e in events
            if isinstance(e, StepActivityEvent) and isinstance(e.activity, CompactionNoticeEvent)
            and e.activity.compaction.hint == "step_dependency"]


async def test_a_result_over_its_cut_is_summarised_with_the_step_dependency_hint() -> None:
    router = DependencyRouter("- revenue: 1234567 EUR\nConclusion: growth is steady.",
                              plans=[plan_json(("a", []), ("b", ["a"]))], steps={"task a": HUGE})
    events = await collect(_engine(router), "q")
    assert len(router.dependency_calls) == 1
    # the summariser read the dependency result: step a's own context, its answer last,
    # then the instruction (the prefix step a's last call cached)
    [request] = router.dependency_calls
    [a_last] = [m for m in router.seen["step"] if step_task(m) == "task a"][-1:]
    assert request[: len(a_last)] == a_last
    assert request[-2].role == "assistant"
    assert request[-2].text == HUGE
    assert request[-1].text == DEPENDENCY_INSTRUCTION
    query = _b_query(router)
    assert "### Step a: task a\n- revenue: 1234567 EUR" in query
    assert "characters truncated" not in query
    notices = _dependency_compactions(events)
    assert len(notices) == 1
    assert notices[0].compaction.method == "llm"
    assert notices[0].compaction.summarized == 1
    assert notices[0].compaction.tokens_after < notices[0].compaction.tokens_before


async def test_a_failing_summariser_falls_back_to_the_character_cut() -> None:
    router = DependencyRouter(RuntimeError("fast model down"),
                              plans=[plan_json(("a", []), ("b", ["a"]))], steps={"task a": HUGE})
    events = await collect(_engine(router), "q")
    query = _b_query(router)
    assert "characters truncated" in query
    assert query.endswith("-TAIL")
    notices = _dependency_compactions(events)
    assert len(notices) == 1
    assert notices[0].compaction.method == "truncate"
    assert "fast model down" in (notices[0].compaction.reason or "")


async def test_a_long_winded_summary_is_bounded_to_the_cut() -> None:
    router = DependencyRouter("y" * 80_000, plans=[plan_json(("a", []), ("b", ["a"]))],
                              steps={"task a": HUGE})
    events = await collect(_engine(router), "q")
    query = _b_query(router)
    assert len(query) <= 50_000
    assert query.endswith("- 1234567 EUR")  # the exact value is re-attached as a fact
    [notice] = _dependency_compactions(events)
    assert notice.compaction.method == "llm"


async def test_results_within_their_share_are_never_summarised() -> None:
    router = DependencyRouter("unused", plans=[plan_json(("a", []), ("b", ["a"]))],
                              steps={"task a": "short result 42"})
    events = await collect(_engine(router), "q")
    assert router.dependency_calls == []
    assert _dependency_compactions(events) == []
    assert "short result 42" in _b_query(router)


async def test_without_a_compact_model_only_the_cut_applies() -> None:
    router = DependencyRouter("unused", plans=[plan_json(("a", []), ("b", ["a"]))],
                              steps={"task a": HUGE})
    await collect(_engine(router, compact_steps_with_llm=False), "q")
    assert router.dependency_calls == []
    assert "characters truncated" in _b_query(router)


def test_shares_are_what_build_step_context_cuts_to() -> None:
    step = PlanStep(id="c", task="combine", dependencies=["a", "b"])
    results = {
        "a": StepResult(step_id="a", task="ta", status="done", answer="s" * 100),
        "b": StepResult(step_id="b", task="tb", status="done", answer="L" * 90_000),
    }
    shares = dependency_shares(step, results, 10_000)
    assert shares[0] == 100
    assert 9_000 < shares[1] < 10_000
    text = build_step_context(step, results, 10_000)
    assert len(text) <= 10_000
