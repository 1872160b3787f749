"""Real-shaped histories through each adapter, checked by the framework itself.

Parallel tool calls, multimodal parts, thinking / reasoning items, retries and long runs,
as each framework records them; the adapters' output must be accepted by the framework
(pydantic-ai's message adapter, the Agents SDK's input-item type, LlamaIndex's message
model, a LangChain agent that runs on), fit the budget, and never split a call from its
result.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from agents.items import TResponseInputItem
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from llama_index.core.base.llms.types import ThinkingBlock, ToolCallBlock
from llama_index.core.llms import ChatMessage as LIMessage
from llama_index.core.llms import ImageBlock, MessageRole, TextBlock
from openai.types.chat import ChatCompletionMessageToolCall
from openai.types.chat.chat_completion_message_tool_call import Function
from pydantic import TypeAdapter
from pydantic_ai.messages import (
    BinaryContent,
    ImageUrl,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from ctxstack import ContextGuard
from ctxstack.integrations.langchain import ContextGuardMiddleware
from ctxstack.integrations.langchain import to_chat_messages as lc_to_ctx
from ctxstack.integrations.llamaindex import GuardedMemory
from ctxstack.integrations.openai_agents import CtxstackSession
from ctxstack.integrations.pydantic_ai import history_processor
from ctxstack.integrations.pydantic_ai import to_chat_messages as pai_to_ctx
from ctxstack.store import create_engine_from_url
from tests.integrations.test_langchain import SYSTEM, ToolCallingFake, assert_tool_sequence_valid
from tests.integrations.test_langchain import lookup as lc_lookup

BUDGET = 3_000
WORDS = "the figures for order A-1042 grew 3.2 percent "


# ---------------------------------------------------------------------- LangChain
def lc_history(turns: int) -> list[BaseMessage]:
    out: list[BaseMessage] = []
    for i in range(turns):
        out.append(HumanMessage(content=[
            {"type": "text", "text": f"question {i}: {WORDS * 4}"},
            {"type": "image", "base64": "iVBORw0KGgo=", "mime_type": "image/png"}]))
        out.append(AIMessage(
            content=[{"type": "text", "text": "checking " * 10},
                     {"type": "tool_use", "id": f"t{i}a", "name": "lookup", "input": {"q": "a"}},
                     {"type": "tool_use", "id": f"t{i}b", "name": "lookup", "input": {"q": "b"}}],
            tool_calls=[{"name": "lookup", "args": {"q": "a"}, "id": f"t{i}a"},
                        {"name": "lookup", "args": {"q": "b"}, "id": f"t{i}b"}]))
        out.append(ToolMessage(content=[{"type": "text", "text": "a: " + WORDS * 10}],
                               tool_call_id=f"t{i}a", name="lookup"))
        out.append(ToolMessage(content="b: " + WORDS * 10, tool_call_id=f"t{i}b",
                               status="error"))
        out.append(AIMessage(content=f"answer {i}: {WORDS * 3}"))
    return out


async def test_langchain_agent_runs_on_over_a_parallel_multimodal_history() -> None:
    model = ToolCallingFake(messages=iter([
        AIMessage("", tool_calls=[{"name": "lookup", "args": {"q": "z"}, "id": "n1"},
                                  {"name": "lookup", "args": {"q": "y"}, "id": "n2"}]),
        AIMessage("done")]))
    guard = ContextGuard()
    agent = create_agent(model, [lc_lookup], system_prompt=SYSTEM,
                         middleware=[ContextGuardMiddleware(guard, BUDGET)])
    out = await agent.ainvoke({"messages": [*lc_history(30), HumanMessage("latest")]})
    assert out["messages"][-1].content == "done"
    assert len(model.seen) == 2
    for call in model.seen:
        assert guard.counter.count_messages(lc_to_ctx(call)) <= BUDGET
        assert_tool_sequence_valid(call)
        assert [m for m in call if isinstance(m, HumanMessage)][-1].content == "latest"


# ---------------------------------------------------------------------- pydantic-ai
def pai_history(turns: int) -> list[ModelMessage]:
    out: list[ModelMessage] = []
    for i in range(turns):
        parts: list[Any] = [UserPromptPart([
            f"question {i}: {WORDS * 4}", ImageUrl(url="https://example.com/a.png"),
            BinaryContent(data=b"\x89PNG" + bytes(500), media_type="image/png")])]
        if i == 0:
            parts.insert(0, SystemPromptPart("You are careful."))
        out.append(ModelRequest(parts=parts))
        out.append(ModelResponse(parts=[
            ThinkingPart("weighing " * 20), TextPart("let me look"),
            ToolCallPart("lookup", {"q": "a"}, tool_call_id=f"c{i}a"),
            ToolCallPart("lookup", '{"q": "b"}', tool_call_id=f"c{i}b")]))
        out.append(ModelRequest(parts=[
            ToolReturnPart("lookup", WORDS * 15, tool_call_id=f"c{i}a"),
            ToolReturnPart("lookup", "bad arguments", tool_call_id=f"c{i}b",
                           outcome="retried")]))
        out.append(ModelResponse(parts=[TextPart(f"answer {i}: {WORDS * 3}")]))
    return out


def check_pydantic_ai_history(messages: list[ModelMessage]) -> None:
    assert isinstance(messages[0], ModelRequest)
    assert isinstance(messages[-1], ModelRequest)
    for a, b in itertools.pairwise(messages):
        assert type(a) is not type(b), "requests and responses must alternate"
    open_ids: set[str] = set()
    for m in messages:
        if isinstance(m, ModelResponse):
            open_ids = {p.tool_call_id for p in m.parts if isinstance(p, ToolCallPart)}
            continue
        answered = {p.tool_call_id for p in m.parts if isinstance(p, ToolReturnPart)}
        assert answered == open_ids, (answered, open_ids)
        open_ids = set()
    ModelMessagesTypeAdapter.validate_json(ModelMessagesTypeAdapter.dump_json(messages))


async def test_pydantic_ai_history_with_parallel_calls_and_retries_validates() -> None:
    guard = ContextGuard()
    history = [*pai_history(30), ModelRequest(parts=[UserPromptPart("latest question")])]
    out = await history_processor(guard, BUDGET)(history)
    assert len(out) < len(history)
    assert guard.counter.count_messages(pai_to_ctx(out)) <= BUDGET
    check_pydantic_ai_history(out)
    assert out[-1] is history[-1]


# ---------------------------------------------------------------------- OpenAI Agents SDK
def sdk_items(turns: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(turns):
        out += [
            {"role": "user", "content": [
                {"type": "input_text", "text": f"question {i}: {WORDS * 4}"},
                {"type": "input_image", "image_url": "https://example.com/a.png",
                 "detail": "low"},
                # a file by id is estimated at 10 PDF pages (ctxstack.tokens._parts): once
                *([{"type": "input_file", "file_id": "file-abc"}] if i == 0 else [])]},
            {"type": "reasoning", "id": f"rs_{i}",
             "summary": [{"type": "summary_text", "text": "weighing " * 20}]},
            {"type": "function_call", "id": f"fc_{i}a", "call_id": f"call_{i}a",
             "name": "lookup", "arguments": json.dumps({"q": "a"}), "status": "completed"},
            {"type": "function_call", "id": f"fc_{i}b", "call_id": f"call_{i}b",
             "name": "lookup", "arguments": '{"q": "b"}', "status": "completed"},
            {"type": "function_call_output", "call_id": f"call_{i}a", "output": WORDS * 15},
            {"type": "function_call_output", "call_id": f"call_{i}b",
             "output": [{"type": "input_text", "text": WORDS * 8}]},
            {"type": "message", "id": f"msg_{i}", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "text": f"answer {i}: {WORDS * 3}",
                          "annotations": [], "logprobs": []}]},
        ]
    return out


async def test_agents_session_items_validate_and_keep_calls_with_outputs(
        tmp_path: Path) -> None:
    engine = create_engine_from_url(f"sqlite+aiosqlite:///{tmp_path / 'agents.db'}")
    try:
        session = CtxstackSession("real-shape", ContextGuard(), BUDGET, engine)
        items = sdk_items(30)
        adapter: TypeAdapter[list[TResponseInputItem]] = TypeAdapter(list[TResponseInputItem])
        adapter.validate_python(items)
        await session.add_items(items)  # type: ignore[arg-type]
        got = await session.get_items()
        assert len(got) < len(items)
        adapter.validate_python(got)
        calls = {it["call_id"] for it in got if it.get("type") == "function_call"}
        outputs = {it["call_id"] for it in got if it.get("type") == "function_call_output"}
        assert calls == outputs
        assert got[-1] == items[-1]
        assert len(await session.get_items(limit=3)) == 3  # the SDK's verbatim tail reads
    finally:
        await engine.dispose()


# ---------------------------------------------------------------------- LlamaIndex
def li_history(turns: int, style: str) -> list[LIMessage]:
    out = [LIMessage(role="system", content="You are an agent.")]
    for i in range(turns):
        out.append(LIMessage(role="user", blocks=[
            TextBlock(text=f"question {i}: {WORDS * 4}"),
            ImageBlock(image=b"\x89PNG\r\n\x1a\n" + bytes(100), image_mimetype="image/png")]))
        if style == "openai-kwargs":
            out.append(LIMessage(role="assistant", content="", additional_kwargs={"tool_calls": [
                ChatCompletionMessageToolCall(id=f"c{i}{k}", type="function", function=Function(
                    name="lookup", arguments='{"q": "a"}')) for k in "ab"]}))
        else:
            out.append(LIMessage(role="assistant", blocks=[
                ThinkingBlock(content="weighing " * 20), TextBlock(text="calling"),
                *[ToolCallBlock(tool_call_id=f"c{i}{k}", tool_name="lookup",
                                tool_kwargs={"q": k}) for k in "ab"]]))
        for k in "ab":
            out.append(LIMessage(role="tool", content=WORDS * 12,
                                 additional_kwargs={"tool_call_id": f"c{i}{k}",
                                                    "name": "lookup"}))
        out.append(LIMessage(role="assistant", content=f"answer {i}: {WORDS * 3}"))
    out.append(LIMessage(role="user", content="latest"))
    return out


def _call_ids(message: LIMessage) -> set[str]:
    ids = {b.tool_call_id for b in message.blocks if isinstance(b, ToolCallBlock)}
    ids |= {tc.id for tc in message.additional_kwargs.get("tool_calls") or []}
    return {i for i in ids if i}


@pytest.mark.parametrize("style", ["openai-kwargs", "tool-call-blocks"])
def test_llamaindex_memory_get_returns_valid_paired_messages(style: str) -> None:
    memory = GuardedMemory(guard=ContextGuard(), budget=BUDGET)
    history = li_history(30, style)
    memory.put_messages(history)
    got = memory.get()
    assert len(got) < len(history)
    assert got[-1] is history[-1]
    open_ids: set[str] = set()
    for m in got:
        LIMessage.model_validate(m.model_dump())
        if m.role == MessageRole.TOOL:
            assert m.additional_kwargs["tool_call_id"] in open_ids, "orphan tool result"
            open_ids.discard(m.additional_kwargs["tool_call_id"])
            continue
        assert not open_ids, f"calls left unanswered: {open_ids}"
        if m.role == MessageRole.ASSISTANT:
            open_ids = _call_ids(m)
