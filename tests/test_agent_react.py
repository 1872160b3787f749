"""ReActAgent with ScriptedLLM: the loop, the guard on every iteration, injections, checklist,
cycle warnings, overflow recovery, usage accounting and streamed synthesis."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from typing import Any

import pytest

from ctxstack.agent import (
    AGENT_EVENT_ADAPTER,
    AgentEvent,
    AgentResult,
    ChecklistEvent,
    DoneEvent,
    ErrorEvent,
    InjectedEvent,
    IterationStartedEvent,
    ReActAgent,
    ToolCallEvent,
    ToolResultEvent,
    WarningEvent,
    tool,
)
from ctxstack.agent._prompts import CHECKLIST_PROMPT
from ctxstack.budget import ModelBudget
from ctxstack.compaction import CompactionOptions
from ctxstack.errors import AgentError, ConfigError, ContextOverflowError, InputError, LLMError
from ctxstack.guard import ContextGuard
from ctxstack.llm import ScriptedLLM, ToolSpec, Usage
from ctxstack.memory import BaseMemory
from ctxstack.messages import ChatMessage
from ctxstack.tokens import HEURISTIC
from ctxstack.tokens._counter import tool_specs_tokens
from tests.guard_support import SpyGuard


class ListMemory(BaseMemory):
    """The simplest memory: everything, in order (a test double for the memory layer)."""

    def __init__(self, messages: Sequence[ChatMessage] = ()) -> None:
        self.items = list(messages)

    async def add_message(self, message: ChatMessage) -> None:
        self.items.append(message)

    async def get_messages(self) -> list[ChatMessage]:
        return list(self.items)

    async def clear(self) -> None:
        self.items.clear()


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
def search(query: str) -> str:
    """Search the knowledge base."""
    return f"results for {query}: revenue 2023 was 4,812 units"


def tc(name: str, **args: Any) -> ChatMessage:
    return ScriptedLLM.tool_call(name, args)


def sent(llm: ScriptedLLM, i: int) -> list[ChatMessage]:
    return list(llm.calls[i].messages)


def kinds(messages: Sequence[ChatMessage]) -> list[str | None]:
    return [m.kind for m in messages]


def for_messages(budget: int, llm: ScriptedLLM) -> int:
    """What the agent gives the guard for messages: the budget less the tool specs sent
    (they are billed as input too), counted by the default counter."""
    return budget - tool_specs_tokens(llm.calls[0].tools)


def agent_for(llm: ScriptedLLM, guard: Any = None, **kw: Any) -> ReActAgent:
    kw.setdefault("tools", [add, search])
    return ReActAgent(llm, guard=guard or SpyGuard(), system_prompt="You are a test agent.", **kw)


# ----------------------------------------------------------------- the basic loop


async def test_multi_step_tool_use_reaches_an_answer() -> None:
    llm = ScriptedLLM([tc("search", query="revenue"), tc("add", a=4812, b=100), "It was 4,912."])
    result = await agent_for(llm, checklist_threshold=None).run("What is revenue plus 100?")
    assert result.answer == "It was 4,912."
    assert result.stopped_reason == "answer"
    assert result.iterations == 3
    assert [e.tool for e in result.trace] == ["search", "add"]
    assert result.trace[1].result_preview == "4912"
    # The model saw the system prompt, the pinned query, and every observation in order.
    third = sent(llm, 2)
    assert third[0].role == "system"
    assert third[0].text == "You are a test agent."
    assert third[1].pinned
    assert third[1].kind == "query"
    assert [m.role for m in third[2:]] == ["assistant", "tool", "assistant", "tool"]
    assert third[3].name == "search"
    assert "4,812" in third[3].text
    assert third[5].text == "4912"
    # Native tool specs were sent on every call.
    assert llm.calls[0].tools is not None
    assert {s["function"]["name"] for s in llm.calls[0].tools} == {"add", "search"}
    assert result.messages[-1].role == "assistant"
    assert result.messages[-1].text == "It was 4,912."


async def test_guard_is_called_before_every_model_call_with_react_iteration() -> None:
    guard = SpyGuard()
    llm = ScriptedLLM([tc("add", a=1, b=2), tc("add", a=3, b=4), "done"])
    result = await agent_for(llm, guard, budget=ModelBudget(context_size=20_000,
                                                            max_output_tokens=4_000),
                             checklist_threshold=None).run("q")
    assert result.iterations == 3
    assert [(b, h) for _, b, h in guard.calls] == [(for_messages(16_000, llm),
                                                    "react_iteration")] * 3
    assert for_messages(16_000, llm) < 16_000
    # and the guard saw the growing context each time
    assert [n for n, _, _ in guard.calls] == [2, 4, 6]


async def test_default_budget_is_the_models_window() -> None:
    llm = ScriptedLLM(["x"], context_size=32_000, max_output_tokens=8_000)
    assert agent_for(llm).budget == 24_000
    assert agent_for(llm, budget=5_000).budget == 5_000
    with pytest.raises(ConfigError, match="budget"):
        agent_for(llm, budget=0)


async def test_parallel_tool_calls_run_concurrently_and_results_keep_call_order() -> None:
    both_started = asyncio.Event()
    started: list[str] = []

    @tool
    async def first() -> str:
        """Waits for the second tool to start: only possible if they run concurrently."""
        started.append("first")
        await asyncio.wait_for(both_started.wait(), timeout=2)
        await asyncio.sleep(0.01)  # finish *after* the second
        return "one"

    @tool
    async def second() -> str:
        """Starts second, finishes first."""
        started.append("second")
        both_started.set()
        return "two"

    llm = ScriptedLLM([ScriptedLLM.tool_calls(("first", {}), ("second", {})), "ok"])
    result = await agent_for(llm, tools=[first, second]).run("go")
    assert [e.error for e in result.trace] == [None, None]
    tool_msgs = [m for m in sent(llm, 1) if m.role == "tool"]
    assert [m.text for m in tool_msgs] == ["one", "two"]
    calls = sent(llm, 1)[2].tool_calls
    assert calls is not None
    assert [m.tool_call_id for m in tool_msgs] == [c.id for c in calls]


async def test_history_from_memory_including_a_summary_reaches_the_model() -> None:
    summary = ChatMessage.system("[Conversation summary]\nThe user's budget is 1,250 EUR.",
                                 metadata={"kind": "summary"})
    memory = ListMemory([summary, ChatMessage.user("hi"), ChatMessage.assistant("hello")])
    llm = ScriptedLLM(["Your budget is 1,250 EUR."])
    result = await agent_for(llm, memory=memory).run("What was my budget?")
    first = sent(llm, 0)
    assert [m.text for m in first[1:4]] == [summary.text, "hi", "hello"]
    assert first[-1].kind == "query"
    assert first[-1].text == "What was my budget?"
    # The run is recorded in the memory for the next turn (plain, unpinned).
    assert [(m.role, m.text, m.pinned) for m in memory.items[-2:]] == [
        ("user", "What was my budget?", False), ("assistant", result.answer, False)]


async def test_scratchpad_is_stripped_from_the_answer() -> None:
    llm = ScriptedLLM(["<think>let me think</think>The answer is 42."])
    assert (await agent_for(llm).run("q")).answer == "The answer is 42."


# ----------------------------------------------------------------- cycle warning


async def test_cycle_warning_after_three_identical_consecutive_calls() -> None:
    llm = ScriptedLLM([tc("search", query="x"), tc("search", query="x"), tc("search", query="x"),
                       "gave up"])
    events: list[AgentEvent] = []
    result = await agent_for(llm, checklist_threshold=None, on_event=events.append).run("q")
    assert result.answer == "gave up"
    assert "warning" not in kinds(sent(llm, 2))
    last = sent(llm, 3)
    warnings = [m for m in last if m.kind == "warning"]
    assert len(warnings) == 1
    assert last[-1] is warnings[0]
    assert "'search'" in warnings[0].text
    assert "3 times" in warnings[0].text
    warn_events = [e for e in events if isinstance(e, WarningEvent)]
    assert [(e.tool, e.repeats, e.iteration) for e in warn_events] == [("search", 3, 3)]


async def test_no_cycle_warning_for_three_different_calls() -> None:
    llm = ScriptedLLM([tc("search", query="a"), tc("search", query="b"), tc("add", a=1, b=1),
                       "fine"])
    await agent_for(llm, checklist_threshold=None).run("q")
    assert all(m.kind != "warning" for m in sent(llm, 3))


async def test_cycle_threshold_none_disables_the_warning() -> None:
    llm = ScriptedLLM([tc("search", query="x")] * 3 + ["ok"])
    await agent_for(llm, checklist_threshold=None, cycle_threshold=None).run("q")
    assert all(m.kind != "warning" for m in sent(llm, 3))


# ----------------------------------------------------------------- checklist


async def test_checklist_injected_once_past_the_threshold() -> None:
    llm = ScriptedLLM([tc("add", a=1, b=1), tc("add", a=2, b=2), tc("add", a=3, b=3),
                       "draft answer", "checked answer"])
    events: list[AgentEvent] = []
    result = await agent_for(llm, on_event=events.append).run("sum things")
    assert result.answer == "checked answer"
    assert result.iterations == 5
    last = sent(llm, 4)
    # the draft stays so the model can review it, followed by the checklist
    assert [m.text for m in last[-2:]] == ["draft answer", CHECKLIST_PROMPT]
    assert last[-1].kind == "checklist"
    assert [e.tool_calls for e in events if isinstance(e, ChecklistEvent)] == [3]


async def test_checklist_runs_at_most_once_per_request() -> None:
    llm = ScriptedLLM([tc("add", a=1, b=1), tc("add", a=2, b=2), tc("add", a=3, b=3),
                       "draft", tc("add", a=4, b=4), "second draft"])
    result = await agent_for(llm).run("q")
    assert result.answer == "second draft"
    assert kinds(result.messages).count("checklist") == 1


async def test_no_checklist_below_the_threshold() -> None:
    llm = ScriptedLLM([tc("add", a=1, b=1), tc("add", a=2, b=2), "answer"])
    result = await agent_for(llm).run("q")
    assert result.answer == "answer"
    assert result.iterations == 3
    assert "checklist" not in kinds(result.messages)


# ----------------------------------------------------------------- injection


async def test_injected_message_is_seen_at_the_next_iteration_and_answered() -> None:
    gate = asyncio.Event()

    @tool
    async def slow_search(query: str) -> str:
        """A search that takes a moment."""
        await asyncio.wait_for(gate.wait(), timeout=2)
        return f"found {query}"

    def answer(messages: Sequence[ChatMessage], tools: Any) -> str:
        injected = [m.text for m in messages if m.kind == "inject"]
        return f"Answer covering: {', '.join(injected)}" if injected else "no follow-up seen"

    llm = ScriptedLLM([tc("slow_search", query="flights")], handler=answer)
    agent = agent_for(llm, tools=[slow_search])
    events: list[AgentEvent] = []

    async def user_types() -> None:
        await asyncio.sleep(0.01)  # while the tool is running
        agent.inject("Only direct flights, please.")
        gate.set()

    async def consume() -> None:
        async for ev in agent.run_events("Find flights to Oslo"):
            events.append(ev)

    await asyncio.gather(consume(), user_types())
    second = sent(llm, 1)
    injected = [m for m in second if m.kind == "inject"]
    assert len(injected) == 1
    assert injected[0].pinned
    assert injected[0].role == "user"
    assert injected[0].text == "Only direct flights, please."
    done = events[-1]
    assert isinstance(done, DoneEvent)
    assert done.result.answer == "Answer covering: Only direct flights, please."
    assert done.result.injected == ["Only direct flights, please."]
    assert [e.iteration for e in events if isinstance(e, InjectedEvent)] == [2]


async def test_final_answer_is_deferred_when_a_message_arrives_meanwhile() -> None:
    agent_box: list[ReActAgent] = []

    def first_answer(messages: Sequence[ChatMessage], tools: Any) -> str:
        agent_box[0].inject("Also: in euros.")  # arrives while the model is answering
        return "draft: 100 dollars"

    def second_answer(messages: Sequence[ChatMessage], tools: Any) -> str:
        assert any(m.kind == "inject" for m in messages)
        return "100 dollars, which is 92 euros"

    llm = ScriptedLLM([first_answer, second_answer])
    agent = agent_for(llm)
    agent_box.append(agent)
    result = await agent.run("How much?")
    assert result.answer == "100 dollars, which is 92 euros"
    assert result.iterations == 2
    # the set-aside draft is not part of the context the model answered from
    assert all("draft" not in m.text for m in sent(llm, 1))


async def test_inject_rejects_empty_text() -> None:
    with pytest.raises(InputError, match="non-empty"):
        agent_for(ScriptedLLM()).inject("  ")


# ----------------------------------------------------------------- tool failures


async def test_tool_exception_bad_arguments_and_timeout_become_tool_results() -> None:
    @tool
    def explode() -> str:
        """Fails."""
        raise ValueError("sensor offline")

    @tool(timeout=0.05)
    async def hang() -> str:
        """Hangs."""
        await asyncio.sleep(5)
        return "never"

    llm = ScriptedLLM([tc("explode"), tc("add", a="x"), tc("hang"), tc("nope"), "recovered"])
    result = await agent_for(llm, tools=[explode, hang, add], checklist_threshold=None,
                             cycle_threshold=None).run("q")
    assert result.answer == "recovered"
    assert [e.error for e in result.trace] == [
        "exception: ValueError", "invalid_arguments", "timeout", "unknown_tool"]
    tool_texts = [m.text for m in sent(llm, 4) if m.role == "tool"]
    assert "ValueError: sensor offline" in tool_texts[0]
    assert "a: Input should be a valid integer" in tool_texts[1]
    assert "b: Field required" in tool_texts[1]
    assert "timed out after 0.05s" in tool_texts[2]
    assert "no tool named 'nope'" in tool_texts[3]


# ----------------------------------------------------------------- overflow recovery


async def test_overflow_compacts_to_half_the_budget_and_retries_once() -> None:
    guard = SpyGuard()
    llm = ScriptedLLM([ContextOverflowError("too long", status_code=400), "fits now"])
    result = await agent_for(llm, guard, budget=10_000).run("q")
    assert result.answer == "fits now"
    assert [(b, h) for _, b, h in guard.calls] == [(for_messages(10_000, llm), "react_iteration"),
                                                   (for_messages(5_000, llm), "react_iteration")]
    assert len(llm.calls) == 2


async def test_second_overflow_is_an_agent_error() -> None:
    llm = ScriptedLLM([ContextOverflowError("too long")] * 2)
    with pytest.raises(AgentError, match="half the budget") as info:
        await agent_for(llm, budget=10_000).run("q")
    assert isinstance(info.value.__cause__, ContextOverflowError)


async def test_failures_end_the_event_stream_with_an_error_event() -> None:
    llm = ScriptedLLM([LLMError("endpoint down")])
    events = [ev async for ev in agent_for(llm).run_events("q")]
    assert isinstance(events[-1], ErrorEvent)
    assert events[-1].error_type == "LLMError"
    assert "endpoint down" in events[-1].message
    with pytest.raises(LLMError, match="no scripted reply"):
        await agent_for(ScriptedLLM()).run("q")


# ----------------------------------------------------------------- limits


async def test_max_iterations_gives_an_honest_partial_answer() -> None:
    llm = ScriptedLLM(handler=lambda m, t: ScriptedLLM.tool_call("search", {"query": str(len(m))}))
    result = await agent_for(llm, max_iterations=4).run("never ends")
    assert result.stopped_reason == "max_iterations"
    assert result.iterations == 4
    assert len(llm.calls) == 4
    assert "stopped after 4 steps" in result.answer
    assert "incomplete" in result.answer
    assert "search(" in result.answer  # says what it did
    assert result.messages[-1].text == result.answer


async def test_a_final_answer_on_the_last_iteration_is_not_held_back() -> None:
    llm = ScriptedLLM([tc("add", a=1, b=1), tc("add", a=2, b=2), tc("add", a=3, b=3), "final"])
    result = await agent_for(llm, max_iterations=4).run("q")
    assert (result.answer, result.stopped_reason) == ("final", "answer")


async def test_invalid_arguments_are_refused() -> None:
    with pytest.raises(ConfigError, match="max_iterations"):
        agent_for(ScriptedLLM(), max_iterations=0)
    with pytest.raises(InputError, match="query"):
        await agent_for(ScriptedLLM()).run("")


async def test_one_query_at_a_time_per_agent() -> None:
    llm = ScriptedLLM(["a", "b"], delay=0.05)
    agent = agent_for(llm)
    results = await asyncio.gather(agent.run("one"), agent.run("two"), return_exceptions=True)
    assert isinstance(results[0], AgentResult)
    assert isinstance(results[1], AgentError)
    assert "already running" in str(results[1])
    assert (await agent.run("three")).answer == "b"  # usable again afterwards


# ----------------------------------------------------------------- events


async def test_event_stream_is_typed_ordered_and_ends_with_done() -> None:
    llm = ScriptedLLM([tc("add", a=1, b=2), "three"])
    seen: list[AgentEvent] = []

    async def on_event(ev: AgentEvent) -> None:
        seen.append(ev)

    agent = agent_for(llm, on_event=on_event)
    events = [ev async for ev in agent.run_events("1+2?")]
    assert [e.type for e in events] == [
        "iteration_started", "tool_call", "tool_result", "iteration_started", "done"]
    assert seen == events  # the callback sees the same stream
    call, res = events[1], events[2]
    assert isinstance(call, ToolCallEvent)
    assert isinstance(res, ToolResultEvent)
    assert (call.tool, call.arguments, res.result_preview, res.error) == (
        "add", {"a": 1, "b": 2}, "3", None)
    assert isinstance(events[0], IterationStartedEvent)
    assert events[0].messages == 2
    done = events[-1]
    assert isinstance(done, DoneEvent)
    assert done.answer == "three"
    # events serialise and parse back through the discriminated union
    for ev in events[:-1]:
        assert AGENT_EVENT_ADAPTER.validate_json(ev.model_dump_json()) == ev


# ----------------------------------------------------------------- usage and synthesis


async def test_usage_sums_every_call_including_synthesis() -> None:
    llm = ScriptedLLM([tc("add", a=1, b=2), "3", "The sum of 1 and 2 is 3."], stream_chunk=4)
    guard = SpyGuard()
    agent = agent_for(llm, guard, budget=9_000)
    result = await agent.run("1+2?")
    loop_usage = llm.total_usage
    assert result.usage == loop_usage
    assert result.usage.calls == 2
    deltas = [d async for d in agent.stream_answer("1+2?", result)]
    assert len(deltas) > 1
    assert "".join(deltas) == "The sum of 1 and 2 is 3." == result.synthesis
    assert result.final_answer == result.synthesis
    assert result.usage == llm.total_usage
    assert result.usage.calls == 3
    # the synthesis prompt went through the guard too, with the general hint
    # (the synthesis call carries no tools: its budget is whole)
    assert [(b, h) for _, b, h in guard.calls] == [
        (for_messages(9_000, llm), "react_iteration")] * 2 + [(9_000, "general")]
    synth = llm.calls[-1]
    assert synth.kind == "stream"
    prompt = synth.messages[-1].text
    assert "1+2?" in prompt
    assert 'add({"a": 1, "b": 2}) -> 3' in prompt
    assert "Brief answer" in prompt


async def test_run_events_with_synthesis_streams_answer_deltas_before_done() -> None:
    llm = ScriptedLLM(["brief", "A longer, synthesised answer."], stream_chunk=5)
    events = [ev async for ev in agent_for(llm).run_events("q", synthesize=True)]
    deltas = [e.text for e in events if e.type == "answer_delta"]
    assert "".join(deltas) == "A longer, synthesised answer."
    done = events[-1]
    assert isinstance(done, DoneEvent)
    assert done.answer == "A longer, synthesised answer."
    assert done.result.answer == "brief"
    assert done.result.usage == llm.total_usage


# ----------------------------------------------------------------- tool selection


async def test_fast_llm_selects_tools_when_there_are_many() -> None:
    many = []
    for i in range(5):
        def make(i: int = i) -> Any:
            def fn(x: int) -> int:
                return x + i
            fn.__name__ = f"tool_{i}"
            fn.__doc__ = f"Adds {i}."
            return fn
        many.append(make())
    fast = ScriptedLLM(['Sure: ["tool_3", "made_up"]'])
    llm = ScriptedLLM(["ok"])
    result = await agent_for(llm, tools=many, fast_llm=fast, tool_selection_threshold=3).run("q")
    tools: tuple[ToolSpec, ...] | None = llm.calls[0].tools
    assert tools is not None
    assert [t["function"]["name"] for t in tools] == ["tool_3"]
    assert result.usage == llm.total_usage + fast.total_usage
    # an unusable selection falls back to every tool
    fast = ScriptedLLM(["no idea"])
    llm = ScriptedLLM(["ok"])
    await agent_for(llm, tools=many, fast_llm=fast, tool_selection_threshold=3).run("q")
    assert llm.calls[0].tools is not None
    assert len(llm.calls[0].tools) == 5


# ----------------------------------------------------------------- with the real ContextGuard


def big_page(page: int) -> str:
    row = f"page {page} row: sensor-{page:03d} reading {page * 7}.5 ok; "
    size = 80_000 if page % 7 == 0 else 3_000 + 400 * page  # some over max_message_chars
    return (row * (size // len(row) + 1))[:size]


@tool
async def read_page(page: int) -> str:
    """Read one page of the log."""
    return big_page(page)


def paging_llm(pages: int, final: str = "All pages read.") -> ScriptedLLM:
    """A model that reads pages 1..pages, one per call, then answers."""
    step = itertools.count(1)

    def reply(messages: Sequence[ChatMessage], tools: Any) -> ChatMessage | str:
        n = next(step)
        return final if n > pages else ScriptedLLM.tool_call("read_page", {"page": n})

    return ScriptedLLM(handler=reply)


QUERY = "Read every page of the sensor log and report the anomalies. (ref: Q-7731)"


@pytest.mark.parametrize("summarise", [False, True], ids=["truncate", "llm-compaction"])
async def test_long_run_with_big_outputs_never_exceeds_the_budget(summarise: bool) -> None:
    # The largest page is ~5,200 real (o200k) tokens: the budget must hold it plus the
    # pinned query, a summary and the counter's margin, or nothing but a cut page can fit.
    budget = 12_000
    compact_llm = ScriptedLLM(handler=lambda m, t: "## Goal\nRead all pages (Q-7731).\n"
                              "## Key data\nPages read so far look normal.") if summarise else None
    guard = SpyGuard(compact_llm=compact_llm)
    llm = paging_llm(30)
    events: list[AgentEvent] = []
    result = await agent_for(llm, guard, tools=[read_page], budget=budget, max_iterations=40,
                             checklist_threshold=None, on_event=events.append).run(QUERY)
    assert result.answer == "All pages read."
    assert result.iterations == 31
    # the guard ran before every model call, with the agent's budget and the ReAct hint
    assert [(b, h) for _, b, h in guard.calls] == [
        (for_messages(budget, llm), "react_iteration")] * 31
    for call in llm.calls:
        msgs = list(call.messages)
        assert HEURISTIC.count_messages(msgs) + tool_specs_tokens(call.tools) <= budget
        # the pinned query survives every compaction, verbatim and still pinned
        queries = [m for m in msgs if m.kind == "query"]
        assert [(q.text, q.pinned) for q in queries] == [(QUERY, True)]
        # no orphan tool results: every tool message answers a call present in the context
        ids = {c.id for m in msgs for c in (m.tool_calls or [])}
        assert all(m.tool_call_id in ids for m in msgs if m.role == "tool")
    compactions = [e for e in events if e.type == "compaction"]
    assert compactions, "a run this long must have compacted"
    assert len(compactions) == len(result.compactions) == guard.totals.compactions
    methods = {c.compaction.method for c in compactions}
    # old tool outputs are cleared first ("mask"); with a summariser, what masking cannot
    # free is summarised; without one, truncated
    assert "mask" in methods
    assert ("llm" in methods) if summarise else (methods <= {"mask", "truncate"})
    assert all(c.compaction.tokens_after < c.compaction.tokens_before for c in compactions)
    # a truncation (or the truncation after a summary) drops messages, or cuts the tool
    # outputs of the turn it keeps to fill the budget (issue 29) — the next call sees them
    for c in compactions:
        if c.method != "mask" and c.original_messages <= c.kept_messages:
            seen = llm.calls[c.iteration - 1].messages
            assert any(m.role == "tool" and "characters removed ...]" in m.text for m in seen)
    # usage: the agent's calls plus every compaction call, nothing else
    expected = llm.total_usage + (compact_llm.total_usage if compact_llm else Usage())
    assert result.usage == expected
    if summarise:
        # once summarised, the model keeps seeing one (rolling) summary in every later call
        first = next(c for c in compactions if c.compaction.method == "llm").iteration
        for call in llm.calls[first - 1:]:
            assert [m.kind for m in call.messages].count("summary") == 1
        assert compact_llm is not None
        llm_compactions = [c for c in compactions if c.compaction.method == "llm"]
        assert compact_llm.total_usage.calls == len(llm_compactions)


async def test_compaction_summary_is_visible_to_the_model_in_the_next_call() -> None:
    compact_llm = ScriptedLLM(handler=lambda m, t: "Pages 1-3 were read; page 2 had reading 14.5.")
    # Summary stage only: masking would free this budget on its own.
    guard = ContextGuard(compact_llm=compact_llm, options=CompactionOptions(mask=False))
    llm = paging_llm(8)
    events: list[AgentEvent] = []
    await agent_for(llm, guard, tools=[read_page], budget=5_000, checklist_threshold=None,
                    on_event=events.append).run(QUERY)
    first = next(e for e in events if e.type == "compaction")
    assert first.type == "compaction"
    nxt = sent(llm, first.iteration - 1)  # the call made right after that compaction
    summaries = [m for m in nxt if m.kind == "summary"]
    assert len(summaries) == 1
    assert summaries[0].text.startswith("[Conversation summary]")
    assert "page 2 had reading 14.5" in summaries[0].text


async def test_users_on_compact_callback_still_fires_and_synthesis_usage_counts() -> None:
    seen: list[str] = []
    compact_llm = ScriptedLLM(handler=lambda m, t: "summary of earlier pages")
    guard = ContextGuard(compact_llm=compact_llm, on_compact=lambda e: seen.append(e.method))
    llm = paging_llm(6, final="Nothing anomalous.")
    agent = agent_for(llm, guard, tools=[read_page], budget=5_000, checklist_threshold=None)
    result = await agent.run(QUERY)
    assert seen == [c.method for c in result.compactions]
    assert seen
    llm.push("Synthesised: nothing anomalous across 6 pages.")
    text = "".join([d async for d in agent.stream_answer(QUERY, result)])
    assert text == "Synthesised: nothing anomalous across 6 pages."
    assert result.usage == llm.total_usage + compact_llm.total_usage


async def test_pinned_injections_survive_compaction_until_answered() -> None:
    gate = {"n": 0}
    llm = paging_llm(10)
    agent = agent_for(llm, ContextGuard(), tools=[read_page], budget=5_000,
                      checklist_threshold=None)

    async def on_event(ev: AgentEvent) -> None:
        if ev.type == "tool_result" and gate["n"] == 0:
            gate["n"] = 1
            agent.inject("Also flag readings above 50 (ref: INJ-42).")

    agent.on_event = on_event
    await agent.run(QUERY)
    later = [list(c.messages) for c in llm.calls[1:]]
    assert all(any(m.kind == "inject" and "INJ-42" in m.text for m in msgs) for msgs in later)


async def test_the_same_agent_runs_one_query_after_another() -> None:
    # run() returns from inside the event stream: the stream is closed there, so the
    # agent is not left "already running" until the garbage collector finalises it
    llm = ScriptedLLM(["first answer", "second answer"])
    agent = ReActAgent(llm, [], ContextGuard(), checklist_threshold=None)
    assert (await agent.run("one")).answer == "first answer"
    assert (await agent.run("two")).answer == "second answer"
