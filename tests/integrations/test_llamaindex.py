"""The LlamaIndex adapter: GuardedMemory under a real ``FunctionAgent`` workflow driven by
LlamaIndex's own ``MockFunctionCallingLLM``, and under a sync chat engine.

Every LLM call is checked as a provider would see it: within budget, each tool result
answering a tool call made before it and each tool call answered, the agent's system
prompt and the latest user message intact.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ChatMessage as LIMessage
from llama_index.core.base.llms.types import MessageRole, TextBlock, ToolCallBlock
from llama_index.core.chat_engine import SimpleChatEngine
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events import BaseEvent
from llama_index.core.instrumentation.events.llm import LLMChatEndEvent
from llama_index.core.llms import ChatResponse, MockFunctionCallingLLM, MockLLM
from llama_index.core.tools import FunctionTool

from ctxstack import CalibratingCounter, ConfigError, ContextGuard
from ctxstack.integrations.llamaindex import (
    CalibrationHandler,
    CompactionInstrumentEvent,
    GuardedMemory,
    to_ctx,
)
from tests.integrations.inventory import INSTRUCTIONS, TURNS, lookup, question, summariser

# LlamaIndex's workflow engine walks each agent with inspect.getmembers, touching pydantic's
# deprecated attributes (`__fields__`, `model_computed_fields` on an instance, ...): their
# warnings, not ours.
pytestmark = pytest.mark.filterwarnings(
    "ignore::pydantic.warnings.PydanticDeprecationWarning")

MEMORY_BUDGET = 1_800
MODEL_BUDGET = 2_200  # memory budget + system prompt + one run's tool calls and results


class Collector(BaseEventHandler):
    events: list[BaseEvent]

    def handle(self, event: BaseEvent, **kwargs: Any) -> None:
        self.events.append(event)


@pytest.fixture
def instrumented() -> Iterator[Collector]:
    root = get_dispatcher()
    collector = Collector(events=[])
    root.add_event_handler(collector)
    try:
        yield collector
    finally:
        root.event_handlers.remove(collector)


class Inventory:
    """The mock LLM's behaviour: one or two tool calls, then an answer."""

    def __init__(self) -> None:
        self.turn = 0
        self.calls: list[list[LIMessage]] = []

    def __call__(self, messages: Sequence[LIMessage], **kwargs: Any) -> LIMessage:
        self.calls.append(list(messages))
        if messages[-1].role == MessageRole.TOOL:
            return LIMessage(role="assistant", content=f"Shelf S-{self.turn:03d} holds the rows.")
        self.turn += 1
        n = self.turn
        blocks: list[Any] = [ToolCallBlock(tool_call_id=f"call_{n}_a", tool_name="lookup",
                                           tool_kwargs={"key": f"S-{n:03d}"})]
        if n % 3 == 0:
            blocks.append(ToolCallBlock(tool_call_id=f"call_{n}_b", tool_name="lookup",
                                        tool_kwargs={"key": f"S-{n:03d}-b"}))
        return LIMessage(role="assistant", blocks=blocks)


def assert_valid_tool_sequence(messages: Sequence[LIMessage]) -> None:
    called: list[str] = []
    answered: set[str] = set()
    for m in messages:
        called += [b.tool_call_id for b in m.blocks if isinstance(b, ToolCallBlock)]
        if m.role == MessageRole.TOOL:
            call_id = m.additional_kwargs["tool_call_id"]
            assert call_id in called, f"tool result {call_id} without its call"
            answered.add(call_id)
    assert set(called) <= answered, f"tool calls never answered: {set(called) - answered}"


def tokens(guard: ContextGuard, messages: Sequence[LIMessage]) -> int:
    return guard.counter.count_messages([to_ctx(m, i) for i, m in enumerate(messages)])


async def test_function_agent_runs_32_tool_turns_within_budget(instrumented: Collector) -> None:
    guard = ContextGuard(compact_llm=summariser())
    memory = GuardedMemory.from_defaults(guard=guard, budget=MEMORY_BUDGET)
    behaviour = Inventory()
    llm = MockFunctionCallingLLM(response_generator=behaviour)
    agent = FunctionAgent(tools=[FunctionTool.from_defaults(lookup)], llm=llm,
                          system_prompt=INSTRUCTIONS)
    for turn in range(1, TURNS + 1):
        answer = await agent.run(question(turn), memory=memory)
        assert str(answer) == f"Shelf S-{turn:03d} holds the rows."

    assert len(behaviour.calls) == 2 * TURNS
    for call in behaviour.calls:
        assert tokens(guard, call) <= MODEL_BUDGET
        assert call[0].role == MessageRole.SYSTEM
        assert call[0].content == INSTRUCTIONS
        assert_valid_tool_sequence(call)
    for turn, call in enumerate(behaviour.calls[::2], start=1):
        users = [m for m in call if m.role == MessageRole.USER]
        assert users[-1].content == question(turn)
        assert call[-1] is users[-1]

    assert any(e.method == "llm" for e in memory.events)
    seen = [e for e in instrumented.events if isinstance(e, CompactionInstrumentEvent)]
    assert [e.compaction for e in seen] == memory.events
    # The summary is a system message in LlamaIndex form, right after the system prompt.
    summary = behaviour.calls[-1][1]
    assert summary.role == MessageRole.SYSTEM
    assert summary.content is not None
    assert summary.content.startswith("[Conversation summary]")
    assert summary.additional_kwargs["ctxstack_kind"] == "summary"
    # Nothing is lost: every message of every run is still in the memory.
    assert len(memory.get_all()) == sum(4 + (t % 3 == 0) for t in range(1, TURNS + 1))
    # One summary per overflow: far fewer summaries than reads.
    assert len([e for e in memory.events if e.method == "llm"]) < TURNS / 2


def test_sync_chat_engine_reads_guarded_history() -> None:
    guard = ContextGuard()
    memory = GuardedMemory.from_defaults(guard=guard, budget=300)
    engine = SimpleChatEngine.from_defaults(llm=MockLLM(max_tokens=20), memory=memory,
                                            system_prompt=INSTRUCTIONS)
    for turn in range(1, 15):
        engine.chat(question(turn))
    history = memory.get()
    assert tokens(guard, history) <= 300
    assert memory.events
    assert memory.events[0].method == "truncate"
    assert history == memory.get_all()[-len(history):]  # untouched messages, same objects
    assert len(memory.get_all()) == 28


async def test_sync_get_works_inside_a_running_loop() -> None:
    memory = GuardedMemory.from_defaults(guard=ContextGuard(), budget=200)
    memory.set([LIMessage(role="user", content=question(n)) for n in range(10)])
    history = memory.get()  # sync call from async code: runs in a helper thread
    assert history[-1].content == question(9)
    assert len(history) < 10


async def test_memory_api_and_conversions() -> None:
    memory = GuardedMemory.from_defaults(guard=ContextGuard(), budget=10_000)
    legacy_call = LIMessage(role="assistant", content="", additional_kwargs={"tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "lookup",
                                                       "arguments": '{"key": "a"}'}}]})
    messages = [
        LIMessage(role="system", content="sys"),
        LIMessage(role="user", blocks=[TextBlock(text="hi")]),
        legacy_call,
        LIMessage(role="tool", content="a=1", additional_kwargs={"tool_call_id": "c1"}),
    ]
    await memory.aput_messages(messages)
    assert await memory.aget() == messages
    converted = to_ctx(legacy_call, 2)
    assert converted.tool_calls is not None
    assert converted.tool_calls[0].name == "lookup"
    assert converted.tool_calls[0].arguments == {"key": "a"}
    assert to_ctx(messages[3], 3).tool_call_id == "c1"
    await memory.areset()
    assert memory.get_all() == []
    assert await memory.aget() == []


def test_calibration_handler_learns_from_reported_prompt_tokens() -> None:
    counter = CalibratingCounter()
    handler = CalibrationHandler(counter=counter)
    sent = [LIMessage(role="user", content=question(1) * 3)]
    handler.handle(LLMChatEndEvent(messages=sent, response=ChatResponse(
        message=LIMessage(role="assistant", content="ok"),
        additional_kwargs={"prompt_tokens": 400})))
    handler.handle(LLMChatEndEvent(messages=sent, response=ChatResponse(
        message=LIMessage(role="assistant", content="no usage"))))
    assert counter.samples() == 1
    assert counter.factor() > 1.0


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ConfigError, match="budget"):
        GuardedMemory.from_defaults(guard=ContextGuard(), budget=-1)
    with pytest.raises(ConfigError, match="guard"):
        GuardedMemory(guard="nope", budget=100)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="counter"):
        GuardedMemory(guard=ContextGuard(), budget=100, counter=CalibratingCounter())
    with pytest.raises(ConfigError, match="hint"):
        GuardedMemory(guard=ContextGuard(), budget=100, hint="bogus")


async def test_oversized_tool_result_is_cut_in_llamaindex_form() -> None:
    memory = GuardedMemory.from_defaults(guard=ContextGuard(max_message_chars=1_000),
                                         budget=50_000)
    call = LIMessage(role="assistant", blocks=[ToolCallBlock(
        tool_call_id="c1", tool_name="read_log", tool_kwargs={})])
    result = LIMessage(role="tool", content="log line\n" * 1_000,
                       additional_kwargs={"tool_call_id": "c1"})
    question = LIMessage(role="user", content="Summarise the log.")
    memory.set([question, call, result])
    got = await memory.aget()
    assert got[0] is question
    assert got[1] is call
    assert got[2] is not result
    assert got[2].role == MessageRole.TOOL
    assert got[2].additional_kwargs["tool_call_id"] == "c1"
    assert got[2].content is not None
    assert "[Truncated" in got[2].content
    assert len(got[2].content) <= 1_000
    assert memory.get_all()[2] is result  # the stored message is not changed
    assert_valid_tool_sequence(got)


@st.composite
def li_histories(draw: st.DrawFn) -> list[LIMessage]:
    out: list[LIMessage] = []
    for t in range(draw(st.integers(1, 8))):
        out.append(LIMessage(role="user", content=f"q{t} " + "w " * draw(st.integers(0, 80))))
        for s in range(draw(st.integers(0, 2))):
            ids = [f"c{t}_{s}_{k}" for k in range(draw(st.integers(1, 2)))]
            out.append(LIMessage(role="assistant", blocks=[
                ToolCallBlock(tool_call_id=i, tool_name="f", tool_kwargs={}) for i in ids]))
            out += [LIMessage(role="tool", content="o " * draw(st.integers(0, 120)),
                              additional_kwargs={"tool_call_id": i}) for i in ids]
        out.append(LIMessage(role="assistant", content=f"a{t}"))
    return out


@settings(max_examples=60, deadline=None)
@given(li_histories(), st.integers(80, 1_500))
async def test_memory_read_always_fits_and_keeps_tool_pairs(
    history: list[LIMessage], budget: int
) -> None:
    guard = ContextGuard()
    memory = GuardedMemory.from_defaults(guard=guard, budget=budget, chat_history=history)
    got = await memory.aget()
    assert tokens(guard, got) <= budget
    assert_valid_tool_sequence(got)
    # Untouched messages come back as the stored objects; a cut message (by the guard's
    # stage 1 or pinned cap, "[Truncated: …]", or by the truncation filling the budget,
    # "[… removed …]") or a tool output the mask stage cleared is a new one.
    assert all(any(m is h for h in history) for m in got
               if "[Truncated" not in (m.content or "")
               and "characters removed ...]" not in (m.content or "")
               and "[tool output cleared:" not in (m.content or ""))
    assert memory.get_all() == history
