"""Cache-aligned summariser requests (issue 29 item 3).

A summary request starts exactly like the conversation's previous model call — its
system prompt, the messages being folded as the model saw them, the same tools — with
the summary instruction last, so the provider's prompt cache serves all but the
instruction. The transcript request is the fallback: when the prefix request would not
fit the summariser, when the fold ends inside a tool group, when the prefix call fails.
Checked on the shared core, and in the agent (its guard), a DAG step (its guard, and the
summary of its result for a later step); DbMemory in
``tests/store/test_memory_db_prefix.py``, the service in
``tests/test_service_summary_prefix.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from ctxstack.agent import ReActAgent, tool
from ctxstack.budget import ModelBudget
from ctxstack.compaction import CompactionOptions, HistoryArchive, compact_detailed
from ctxstack.compaction import _summarize as summarize_module
from ctxstack.compaction._facts import FACTS_HEADING
from ctxstack.compaction._prefix_request import CallPrefix, prefix_request
from ctxstack.compaction._prompts import compaction_prompt, summary_instruction
from ctxstack.compaction._stages import compact_staged
from ctxstack.compaction._summarize import summarize
from ctxstack.dag import DAGExecutor, Plan, PlanStep
from ctxstack.dag._prompts import STEP_SYSTEM_PROMPT
from ctxstack.errors import LLMError
from ctxstack.guard import ContextGuard
from ctxstack.messages import ChatMessage, ToolCall
from ctxstack.protocol import ToolSpec
from ctxstack.testing import ScriptedLLM
from ctxstack.tokens import HEURISTIC

SYS = ChatMessage.system("You are an order-tracking agent.")
TOOLS: list[ToolSpec] = [{"type": "function", "function": {
    "name": "lookup", "description": "Look an order up.",
    "parameters": {"type": "object", "properties": {"id": {"type": "string"}}}}}]


def wire(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    return [m.to_openai() for m in messages]


def chat(turns: int, words: int = 40) -> list[ChatMessage]:
    out = [SYS]
    for i in range(turns):
        out.append(ChatMessage.user(f"Question {i} about ORD-{100 + i}: " + "detail " * words))
        out.append(ChatMessage.assistant(f"Answer {i}: ORD-{100 + i} costs {10 + i} EUR. "
                                         + "note " * words))
    return out


def group(i: int, words: int = 120) -> list[ChatMessage]:
    call = ToolCall(id=f"c{i}", name="lookup", arguments={"id": f"ORD-{i}"})
    return [ChatMessage.assistant(f"Looking up ORD-{i}.", tool_calls=[call]),
            ChatMessage.tool(f"c{i}", f"ORD-{i}: shipped, {i * 3} EUR. " + "log " * words,
                             name="lookup")]


def is_prefix_request(messages: Sequence[ChatMessage], hint: str = "general") -> bool:
    return bool(messages) and messages[-1].role == "user" and \
        messages[-1].text == summary_instruction(hint)


def is_transcript_request(messages: Sequence[ChatMessage], hint: str = "general") -> bool:
    return len(messages) == 2 and messages[0].text == compaction_prompt(hint)


# ---------------------------------------------------------------- the shared core
async def test_the_request_is_the_fold_as_sent_then_the_instruction_with_the_tools() -> None:
    msgs = [*chat(12), ChatMessage.user("And now?")]
    llm = ScriptedLLM(["Summary: ORD-100 to ORD-111 discussed."])
    res = await compact_detailed(msgs, llm, 1200, prefix=CallPrefix.of(tools=TOOLS))
    assert res.method == "llm"
    [call] = llm.calls
    head, instruction = call.messages[:-1], call.messages[-1]
    # exactly the conversation's start, up to the last folded message, the objects sent
    assert list(head) == msgs[: len(head)]
    assert head[-1] is res.summarized[-1]
    assert instruction.role == "user"
    assert instruction.text == summary_instruction("general")
    assert call.tools == tuple(TOOLS)
    assert call.opts["tool_choice"] == "none"


async def test_the_guard_sends_the_outputs_as_the_model_saw_them_before_the_mask() -> None:
    history = [SYS, ChatMessage.query("Check the orders.")]
    for i in range(24):  # enough calls that clearing their outputs is not enough
        history += group(i)
    summariser = ScriptedLLM(handler=lambda m, t: "Summary: orders checked.")
    guard = ContextGuard(compact_llm=summariser, default_budget=1500,
                         options=CompactionOptions(mask_accept=0.5, mask_fill=0.3))
    checked = await guard.check(history, hint="react_iteration", tools=TOOLS)
    assert checked.event is not None
    assert checked.event.method == "llm"
    assert checked.event.masked > 0  # the mask ran first, and still:
    [call] = summariser.calls
    head = call.messages[:-1]
    assert list(head) == history[: len(head)]  # the very messages, outputs uncleared
    assert call.tools == tuple(TOOLS)
    assert is_prefix_request(call.messages, "react_iteration")


async def test_without_a_known_previous_call_the_transcript_request_is_sent() -> None:
    # compaction of a list nobody says the model saw (a proxy whose summariser frames its
    # own request, a user calling llm_compact): the transcript request, as before
    msgs = [*chat(12), ChatMessage.user("And now?")]
    llm = ScriptedLLM(["Summary."])
    assert (await compact_detailed(msgs, llm, 1200)).method == "llm"
    assert is_transcript_request(llm.calls[0].messages)
    guard = ContextGuard(compact_llm=ScriptedLLM(["Summary."]), default_budget=1200,
                         options=CompactionOptions(mask=False))
    assert (await guard.check(msgs)).event is not None
    assert is_transcript_request(guard.compact_llm.calls[0].messages)  # type: ignore[union-attr]
    # an agent without tools says so with an empty list: the prefix request, no tools
    guard = ContextGuard(compact_llm=ScriptedLLM(["Summary."]), default_budget=1200,
                         options=CompactionOptions(mask=False))
    assert (await guard.check(msgs, tools=[])).event is not None
    [call] = guard.compact_llm.calls  # type: ignore[union-attr]
    assert is_prefix_request(call.messages)
    assert call.tools is None
    assert "tool_choice" not in call.opts


async def test_a_request_over_the_summarisers_input_falls_back_to_the_transcript() -> None:
    msgs = [*chat(30, words=80), ChatMessage.user("And now?")]
    # what the summariser can read: far less than the fold, far more than its transcript
    llm = ScriptedLLM(["Summary."], context_size=4_000, max_output_tokens=1_000)
    res = await compact_detailed(msgs, llm, 6_000, prefix=CallPrefix())
    assert res.method == "llm"
    [call] = llm.calls
    assert is_transcript_request(call.messages)
    assert HEURISTIC.count_messages(call.messages) <= 3_000


async def test_a_fold_ending_in_a_dangling_tool_call_falls_back_to_the_transcript() -> None:
    open_call = ChatMessage.assistant(None, tool_calls=[
        ToolCall(id="x1", name="lookup", arguments={"id": "ORD-9"})])
    request, reason = prefix_request([SYS, ChatMessage.user("q"), open_call], "do it", None,
                                     limit=10_000, counter=HEURISTIC)
    assert (request, reason) == (None, "dangling_tool_call")
    orphan = ChatMessage.tool("x2", "a result without its call")
    assert prefix_request([SYS, ChatMessage.user("q"), orphan], "do it", None, limit=10_000,
                          counter=HEURISTIC)[1] == "dangling_tool_call"
    # through compaction: what the previous call sent ahead of the list ends in an open call
    msgs = [*chat(12), ChatMessage.user("And now?")]
    llm = ScriptedLLM(["Summary."])
    res = await compact_detailed(msgs[1:], llm, 1200, prefix=CallPrefix.of(
        before=[SYS, ChatMessage.user("q"), open_call]))
    assert res.method == "llm"
    [call] = llm.calls
    assert is_transcript_request(call.messages)


@pytest.mark.parametrize("failure", [
    LLMError("prefix refused"),
    ScriptedLLM.tool_call("lookup", {"id": "ORD-1"}),  # a tool call is no summary
    "",
])
async def test_a_failed_prefix_call_falls_back_to_the_transcript(failure: object) -> None:
    msgs = [*chat(12), ChatMessage.user("And now?")]
    llm = ScriptedLLM([failure, "Summary: from the transcript."])  # type: ignore[list-item]
    res = await compact_detailed(msgs, llm, 1200, prefix=CallPrefix.of(tools=TOOLS))
    assert res.method == "llm"
    first, second = llm.calls
    assert is_prefix_request(first.messages)
    assert is_transcript_request(second.messages)
    assert second.tools is None
    assert res.summary is not None
    assert "from the transcript" in res.summary.text
    assert res.usage.calls == (1 if isinstance(failure, LLMError) else 2)


async def test_the_outcome_says_which_request_answered_and_why() -> None:
    fold = chat(6)[1:]
    llm = ScriptedLLM([LLMError("down"), "From the transcript."])
    out = await summarize(fold, None, llm, hint="general", prompt=None, timeout=None,
                          answer_tokens=200, counter=HEURISTIC, head=[SYS, *fold])
    assert (out.request, out.text) == ("transcript", "From the transcript.")
    assert out.prefix_reason is not None
    assert "down" in out.prefix_reason
    llm = ScriptedLLM(["From the prefix."])
    out = await summarize(fold, None, llm, hint="general", prompt=None, timeout=None,
                          answer_tokens=200, counter=HEURISTIC, head=[SYS, *fold])
    assert (out.request, out.prefix_reason) == ("prefix", None)
    # no head (the caller knows no previous call): the transcript only
    llm = ScriptedLLM(["Only."])
    out = await summarize(fold, None, llm, hint="general", prompt=None, timeout=None,
                          answer_tokens=200, counter=HEURISTIC)
    assert out.request == "transcript"
    assert is_transcript_request(llm.calls[0].messages)


async def test_facts_and_the_finalize_hook_are_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, str | None, str]] = []
    monkeypatch.setattr(summarize_module, "finalize_summary",
                        lambda *args: seen.append(args) or f"MERGED {args[2]}")
    previous = ChatMessage.summary("[Conversation summary]\nprev")
    msgs = [SYS, previous, *chat(12)[1:], ChatMessage.user("And now?")]
    llm = ScriptedLLM(["new"])
    res = await compact_detailed(msgs, llm, 1200, hint="react_iteration", prefix=CallPrefix())
    assert is_prefix_request(llm.calls[0].messages, "react_iteration")
    assert llm.calls[0].messages[1] is previous  # the previous summary where it stood
    assert seen == [("react_iteration", "prev", "new")]
    assert res.summary is not None
    assert "MERGED new" in res.summary.text
    # exact values of the folded messages re-attached, as with the transcript request
    assert FACTS_HEADING in res.summary.text
    assert "ORD-100" in res.summary.text.split(FACTS_HEADING)[1]


async def test_file_parts_keep_the_transcript_request() -> None:
    from tests.test_binary_compaction import pdf_part, with_parts

    msgs = [SYS, with_parts("Contract ORD-77.", pdf_part(2_000)), *chat(12)[1:],
            ChatMessage.user("And now?")]
    llm = ScriptedLLM(["Summary."])
    res = await compact_staged(msgs, llm, 1200, CompactionOptions(mask=False),
                               prefix=CallPrefix())
    assert res.method == "llm"
    assert is_transcript_request(llm.calls[0].messages)


# ---------------------------------------------------------------- the agent
@tool
def lookup(id: str) -> str:
    """Look an order up."""
    return f"{id}: shipped on 2026-03-04, 120 EUR. " + "warehouse log line. " * 60


class Timeline:
    """One ordered record of the main model's and the summariser's calls."""

    def __init__(self, main_handler: Any, summary: Any = "Summary: orders looked up.") -> None:
        self.calls: list[tuple[str, tuple[ChatMessage, ...], tuple[Any, ...] | None]] = []
        self.summary = summary

        def main(messages: Sequence[ChatMessage], tools: Any) -> Any:
            self.calls.append(("main", tuple(messages), tuple(tools) if tools else None))
            return main_handler(messages, tools)

        def summarise(messages: Sequence[ChatMessage], tools: Any) -> Any:
            self.calls.append(("summary", tuple(messages), tuple(tools) if tools else None))
            reply = self.summary
            return reply(messages, tools) if callable(reply) else reply

        self.main = ScriptedLLM(handler=main)
        self.summariser = ScriptedLLM(handler=summarise)

    def summaries(self) -> list[tuple[tuple[ChatMessage, ...], tuple[ChatMessage, ...],
                                      tuple[Any, ...] | None, tuple[Any, ...] | None]]:
        """(summary request, previous main call, their tools) for each summary call."""
        out = []
        previous: tuple[tuple[ChatMessage, ...], tuple[Any, ...] | None] | None = None
        for kind, messages, tools in self.calls:
            if kind == "main":
                previous = (messages, tools)
            elif previous is not None:
                out.append((messages, previous[0], tools, previous[1]))
        return out


def looping(iterations: int, answer: str = "All orders listed.") -> Any:
    count = [0]

    def reply(messages: Sequence[ChatMessage], tools: Any) -> Any:
        count[0] += 1
        if tools and count[0] <= iterations:
            return ScriptedLLM.tool_call("lookup", {"id": f"ORD-{count[0]}"},
                                         content=f"Step {count[0]}: checking. " * 10)
        return answer

    return reply


def agent(timeline: Timeline, **kw: Any) -> ReActAgent:
    guard = ContextGuard(compact_llm=timeline.summariser, archive=HistoryArchive())
    return ReActAgent(timeline.main, [lookup], guard, system_prompt=SYS.text, budget=3_000,
                      max_iterations=40, checklist_threshold=None, cycle_threshold=None, **kw)


async def test_agent_summary_requests_begin_with_the_previous_call() -> None:
    timeline = Timeline(looping(24))
    result = await agent(timeline).run("List the March orders.")
    assert any(c.method == "llm" for c in result.compactions)
    summaries = timeline.summaries()
    assert summaries
    for request, previous, tools, previous_tools in summaries:
        head = request[:-1]
        assert wire(head) == wire(previous[: len(head)])
        assert head[0].text == SYS.text
        assert tools == previous_tools
        assert tools
        assert is_prefix_request(request, "react_iteration")


async def test_agent_falls_back_when_the_prefix_call_fails_or_would_not_fit() -> None:
    def refuse(messages: Sequence[ChatMessage], tools: Any) -> Any:
        if is_prefix_request(messages, "react_iteration"):
            return LLMError("no prefix here")
        return "Summary: orders looked up."

    timeline = Timeline(looping(24), summary=refuse)
    result = await agent(timeline).run("List the March orders.")
    assert any(c.method == "llm" for c in result.compactions)
    requests = [m for kind, m, _ in timeline.calls if kind == "summary"]
    assert any(is_transcript_request(m, "react_iteration") for m in requests)
    # a summariser reading less than the fold: only transcript requests are sent
    small = Timeline(looping(24))
    small.summariser.context_size, small.summariser.max_output_tokens = 2_600, 1_000
    result = await agent(small).run("List the March orders.")
    assert any(c.method == "llm" for c in result.compactions)
    requests = [m for kind, m, _ in small.calls if kind == "summary"]
    assert requests
    assert all(is_transcript_request(m, "react_iteration") for m in requests)


async def test_a_guard_without_tools_keyword_still_works() -> None:
    class OldGuard:
        def __init__(self) -> None:
            self.inner = ContextGuard()

        async def check(self, messages: list[ChatMessage], budget: int | None = None,
                        hint: Any = "general") -> Any:
            return await self.inner.check(messages, budget, hint)

        @property
        def totals(self) -> Any:
            return self.inner.totals

    llm = ScriptedLLM(["Done."])
    result = await ReActAgent(llm, [lookup], OldGuard()).run("Hi")  # type: ignore[arg-type]
    assert result.answer == "Done."


# ---------------------------------------------------------------- DAG steps
async def test_dag_step_guards_and_dependency_summaries_reuse_the_steps_prefix() -> None:
    long_answer = "Orders:\n" + "\n".join(f"- ORD-{i}: {i} EUR, shipped." for i in range(2_600))
    counts: dict[str, int] = {}

    def step(messages: Sequence[ChatMessage], tools: Any) -> Any:
        task = next(m.text for m in messages if m.kind == "query").split("\n", 1)[0]
        n = counts[task] = counts.get(task, 0) + 1
        if tools and n <= 14:
            return ScriptedLLM.tool_call("lookup", {"id": f"ORD-{n}"},
                                         content=f"Step {n}: checking. " * 10)
        return long_answer if task.startswith("Collect") else "Total: 42 EUR."

    timeline = Timeline(step, summary="- ORD-1: 1 EUR\nConclusion: all shipped.")
    executor = DAGExecutor(timeline.main, [lookup], compact_llm=timeline.summariser,
                           budget=ModelBudget(role="fast", context_size=8_000,
                                              max_output_tokens=4_000),
                           max_concurrency=1, max_iterations=20,
                           agent_options={"checklist_threshold": None,
                                          "cycle_threshold": None})
    plan = Plan(steps=[PlanStep(id="a", task="Collect the orders", dependencies=[]),
                       PlanStep(id="b", task="Total them", dependencies=["a"])])
    result = await executor.run(plan)
    assert result.all_done
    summaries = timeline.summaries()
    guards = [s for s in summaries if is_prefix_request(s[0], "react_iteration")]
    dependency = [s for s in summaries if is_prefix_request(s[0], "step_dependency")]
    assert guards
    assert len(dependency) == 1
    for request, previous, tools, previous_tools in guards:
        head = request[:-1]
        assert head[0].text == STEP_SYSTEM_PROMPT
        assert wire(head) == wire(previous[: len(head)])
        assert tools == previous_tools
    # the result's summary: step a's last call, its answer, then the instruction
    request, previous, tools, previous_tools = dependency[0]
    assert wire(request[: len(previous)]) == wire(previous)
    assert request[len(previous)].role == "assistant"
    assert request[len(previous)].text == long_answer
    assert len(request) == len(previous) + 2
    assert tools == previous_tools
    assert tools


# ---------------------------------------------------------------- SummaryMemory
async def test_summary_memory_asks_with_the_agents_previous_call() -> None:
    from ctxstack.memory import SummaryMemory

    timeline = Timeline(lambda messages, tools: "Answer: ORD-7 costs 7 EUR. " + "note " * 30)
    memory = SummaryMemory(timeline.summariser, threshold=6, keep_recent=2,
                           system_prompt=SYS.text, tools=[lookup.spec()])
    agent = ReActAgent(timeline.main, [lookup], ContextGuard(), system_prompt=SYS.text,
                       memory=memory, checklist_threshold=None)
    for i in range(6):
        await agent.run(f"Question {i}: what does ORD-{i} cost?")
    summaries = timeline.summaries()
    assert summaries
    for request, previous, tools, previous_tools in summaries:
        head = request[:-1]
        assert wire(head) == wire(previous[: len(head)])
        assert tools == previous_tools
        assert is_prefix_request(request)
    # without the agent's system prompt the memory cannot rebuild its call: the transcript
    plain = Timeline(lambda messages, tools: "Answer.")
    memory = SummaryMemory(plain.summariser, threshold=6, keep_recent=2)
    agent = ReActAgent(plain.main, [lookup], ContextGuard(), system_prompt=SYS.text,
                       memory=memory, checklist_threshold=None)
    for i in range(6):
        await agent.run(f"Question {i}?")
    requests = [m for kind, m, _ in plain.calls if kind == "summary"]
    assert requests
    assert all(is_transcript_request(m) for m in requests)
