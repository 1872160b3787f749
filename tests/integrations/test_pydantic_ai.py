"""ctxstack.integrations.pydantic_ai: a real pydantic-ai Agent (FunctionModel) under the guard."""

from __future__ import annotations

import itertools
import logging
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_ai import Agent, ModelRetry
from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai.messages import (
    BinaryContent,
    ImageUrl,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryFeedbackPart,
    RetryInfo,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCalls, FunctionModel
from pydantic_ai.usage import RequestUsage

from ctxstack import ChatMessage, CompactionEvent, ConfigError, ContextGuard, LLMError, ToolCall
from ctxstack.errors import InputError
from ctxstack.integrations.pydantic_ai import (
    GuardedHistory,
    PydanticAISummarizer,
    from_chat_messages,
    history_processor,
    to_chat_messages,
)

try:  # pydantic-ai's own history repair, public since 2.3x
    from pydantic_ai.messages import repair_messages

    def pydantic_ai_repair(history: list[ModelMessage]) -> list[ModelMessage]:
        return repair_messages(history, repair_last_response=False)
except ImportError:  # older 2.x: the same pass is private to the agent graph
    from pydantic_ai._agent_graph import _clean_message_history

    def pydantic_ai_repair(history: list[ModelMessage]) -> list[ModelMessage]:
        return _clean_message_history(list(history))

BUDGET = 4_000
SYSTEM = "You are a careful research agent. Cite every figure you use. " * 4
INSTRUCTIONS = "Answer in English. Keep answers short."


def tool_model(turns: int) -> tuple[FunctionModel, list[tuple[list[ModelMessage], str | None]]]:
    """A FunctionModel that calls ``lookup`` ``turns`` times, then answers; records inputs."""
    seen: list[tuple[list[ModelMessage], str | None]] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append((list(messages), info.instructions))
        step = sum(1 for _ in seen) - 1
        if step % (turns + 1) < turns:
            return ModelResponse(parts=[
                TextPart(f"Step {step}: looking up item {step}. " + "reasoning " * 25),
                ToolCallPart("lookup", {"q": f"item {step}"})])
        return ModelResponse(parts=[TextPart(f"Final answer after {step} steps.")])

    return FunctionModel(respond), seen


def summary_model() -> FunctionModel:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("Looked up catalogue items; prices 42.50 EUR.")],
                             usage=RequestUsage(input_tokens=900, output_tokens=12))

    return FunctionModel(respond)


def make_agent(model: FunctionModel, guard: ContextGuard,
               outputs: list[list[ModelMessage]]) -> Agent[None, str]:
    processor = history_processor(guard, BUDGET)

    async def recording(messages: list[ModelMessage]) -> list[ModelMessage]:
        out = await processor(messages)
        outputs.append(out)
        return out

    agent: Agent[None, str] = Agent(model, system_prompt=SYSTEM, instructions=INSTRUCTIONS,
                                    capabilities=[ProcessHistory(recording)])

    @agent.tool_plain
    def lookup(q: str) -> str:
        """Look an item up in the catalogue."""
        return f"Catalogue entry for {q}: price 42.50 EUR, stock 17. " + "details " * 180

    return agent


def request_tokens(guard: ContextGuard, messages: Sequence[ModelMessage],
                   instructions: str | None) -> int:
    extra = [ChatMessage.system(instructions)] if instructions else []
    return guard.counter.count_messages([*extra, *to_chat_messages(messages)])


def assert_pairs_valid(messages: Sequence[ModelMessage]) -> None:
    """pydantic-ai's rules: requests and responses alternate, starting and ending with a
    request; every tool call is answered in the next request, every return answers one."""
    assert isinstance(messages[0], ModelRequest)
    assert isinstance(messages[-1], ModelRequest)
    for a, b in itertools.pairwise(messages):
        assert type(a) is not type(b), "two requests or two responses in a row"
    for i, m in enumerate(messages):
        if isinstance(m, ModelResponse):
            calls = {p.tool_call_id for p in m.parts if isinstance(p, ToolCallPart)}
            nxt = messages[i + 1] if i + 1 < len(messages) else None
            answered = {p.tool_call_id for p in (nxt.parts if nxt else [])
                        if isinstance(p, ToolReturnPart | RetryPromptPart)}
            assert calls == answered or (nxt is None and not answered)
        elif i > 0:
            prev = messages[i - 1]
            assert isinstance(prev, ModelResponse)
            calls = {p.tool_call_id for p in prev.parts if isinstance(p, ToolCallPart)}
            for p in m.parts:
                if isinstance(p, ToolReturnPart):
                    assert p.tool_call_id in calls, "orphan tool return"


# ---------------------------------------------------------------------- the agent loop
async def test_agent_runs_32_tool_turns_within_budget(caplog: pytest.LogCaptureFixture) -> None:
    model, seen = tool_model(32)
    events: list[CompactionEvent] = []
    guard = ContextGuard(compact_llm=PydanticAISummarizer(summary_model()),
                         on_compact=events.append)
    outputs: list[list[ModelMessage]] = []
    agent = make_agent(model, guard, outputs)
    query = "Look up items 0 to 31 and report their prices."
    with caplog.at_level(logging.INFO, logger="ctxstack.integrations.pydantic_ai"):
        result = await agent.run(query)

    assert result.output == "Final answer after 32 steps."
    assert len(seen) == 33
    for messages, instructions in seen:
        assert instructions == INSTRUCTIONS
        assert request_tokens(guard, messages, instructions) <= BUDGET
        first = messages[0].parts[0]
        assert isinstance(first, SystemPromptPart)
        assert first.content == SYSTEM
        prompts = [p for m in messages for p in m.parts if isinstance(p, UserPromptPart)]
        assert prompts[-1].content == query
        assert_pairs_valid(messages)
    # What the processor handed back is what pydantic-ai's own repair leaves as it is.
    for out in outputs:
        assert pydantic_ai_repair(out) == out
        assert_pairs_valid(out)
    assert events
    assert "llm" in {e.method for e in events}
    assert {e.method for e in events} <= {"mask", "llm"}  # cheapest stage first
    summaries_made = [e for e in events if e.method == "llm"]
    assert sum(e.usage.input_tokens for e in events) == 900 * len(summaries_made)
    assert sum("guard compacted (" in r.message for r in caplog.records) == len(events)
    history = result.all_messages()
    summaries = [p for m in history for p in m.parts if isinstance(p, SystemPromptPart)
                 and p.content.startswith("[Conversation summary]")]
    assert len(summaries) == 1
    if hasattr(summaries[0], "metadata"):  # pydantic-ai >= 2.5x marks it there too
        assert summaries[0].metadata == {"ctxstack": "summary"}
    assert history[0].parts[1] is summaries[0]  # right after the system prompt


async def test_second_run_with_history_keeps_the_new_prompt() -> None:
    model, seen = tool_model(16)
    guard = ContextGuard()  # truncation only
    outputs: list[list[ModelMessage]] = []
    agent = make_agent(model, guard, outputs)
    first = await agent.run("First: items 0-15.")
    n = len(seen)
    second = await agent.run("Second: items 16-31.", message_history=first.all_messages())
    for messages, instructions in seen[n:]:
        assert request_tokens(guard, messages, instructions) <= BUDGET
        prompts = [p for m in messages for p in m.parts if isinstance(p, UserPromptPart)]
        assert prompts[-1].content == "Second: items 16-31."
        assert isinstance(messages[0].parts[0], SystemPromptPart)
        assert_pairs_valid(messages)
    assert guard.totals.truncations > 0
    assert second.output.startswith("Final answer")


async def test_tool_retries_stay_paired_with_their_calls() -> None:
    attempts: dict[str, int] = {}
    calls: list[int] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        done = len(calls)
        calls.append(done)
        if done < 30:
            return ModelResponse(parts=[TextPart("again " * 40),
                                        ToolCallPart("flaky", {"n": done})])
        return ModelResponse(parts=[TextPart("finished")])

    guard = ContextGuard()
    outputs: list[list[ModelMessage]] = []
    agent: Agent[None, str] = Agent(FunctionModel(respond), system_prompt=SYSTEM, capabilities=[
        ProcessHistory(_recording(history_processor(guard, 2_000), outputs))])

    @agent.tool_plain(retries=40)
    def flaky(n: int) -> str:
        """Fails every other call."""
        attempts[str(n)] = attempts.get(str(n), 0) + 1
        if n % 2:
            raise ModelRetry(f"try again with n={n + 1} " + "because " * 60)
        return "ok " * 100

    result = await agent.run("go")
    assert result.output == "finished"
    assert sum(attempts.values()) == 30
    assert any(isinstance(p, RetryPromptPart) or getattr(p, "outcome", None) == "retried"
               for out in outputs for m in out for p in m.parts)
    assert guard.totals.compactions > 0
    for out in outputs:
        assert pydantic_ai_repair(out) == out
        assert_pairs_valid(out)
        assert guard.counter.count_messages(to_chat_messages(out)) <= 2_000


def _recording(processor: Any, outputs: list[list[ModelMessage]]) -> Any:
    async def recording(messages: list[ModelMessage]) -> list[ModelMessage]:
        out: list[ModelMessage] = await processor(messages)
        outputs.append(out)
        return out

    return recording


async def test_under_budget_returns_the_same_list() -> None:
    processor = history_processor(ContextGuard(), 100_000)
    history: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart("hi")])]
    assert await processor(history) is history
    assert isinstance(processor.__self__, GuardedHistory)  # type: ignore[attr-defined]


# ---------------------------------------------------------------------- conversion
def test_conversion_maps_parts() -> None:
    history: list[ModelMessage] = [
        ModelRequest(parts=[SystemPromptPart("sys"), UserPromptPart(
            ["look", ImageUrl(url="https://x/y.png"),
             BinaryContent(data=b"\x89PNG", media_type="image/png")])]),
        ModelResponse(parts=[TextPart("calling"), ToolCallPart("f", {"a": 1}, "c1")]),
        ModelRequest(parts=[ToolReturnPart("f", {"v": 2}, "c1")]),
    ]
    cms = to_chat_messages(history)
    assert [m.role for m in cms] == ["system", "user", "assistant", "tool"]
    assert [p.image_url.url for p in cms[1].images] == ["https://x/y.png",
                                                        "data:image/png;base64,iVBORw=="]
    assert cms[2].tool_calls == [ToolCall(id="c1", name="f", arguments={"a": 1})]
    assert cms[3].tool_call_id == "c1"
    assert '"v"' in cms[3].text
    back = from_chat_messages(cms)
    assert all(a is b for a, b in zip(back, history, strict=True))


def test_cut_part_is_rebuilt_with_new_content() -> None:
    request = ModelRequest(parts=[UserPromptPart("x" * 50)], instructions="be brief")
    cm = to_chat_messages([request])[0]
    back = from_chat_messages([cm.replace(content="cut")])[0]
    assert isinstance(back, ModelRequest)
    assert back.instructions == "be brief"
    assert back.parts[0].content == "cut"  # type: ignore[union-attr]


@pytest.mark.filterwarnings("ignore:`RetryPromptPart` is deprecated")
def test_retry_prompts_convert_by_whom_they_answer_and_come_back_as_they_were() -> None:
    """A retry of a tool call (its arguments failed validation) answers that call: a tool
    message with its id, what the model reads as its text. Output-validation feedback
    answers no call: a user message. Both come back as the same part objects. The
    tool-call retry is ``RetryPromptPart``, which histories stored by earlier pydantic-ai
    versions hold (deprecated since, built here with its warning silenced)."""
    call = ToolCallPart("lookup", {"order": "A-1"}, "c1")
    tool_retry = RetryPromptPart("order must match A-\\d{4}", tool_name="lookup",
                                 tool_call_id="c1", timestamp=_TS)
    feedback = RetryFeedbackPart(content="answer in one line",
                                 retry=RetryInfo(cause="output_validation"), timestamp=_TS)
    history: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart("where is A-1?", timestamp=_TS)]),
        ModelResponse(parts=[call], timestamp=_TS),
        ModelRequest(parts=[tool_retry]),
        ModelResponse(parts=[TextPart("It shipped.\nOn Monday.")], timestamp=_TS),
        ModelRequest(parts=[feedback]),
    ]
    cms = to_chat_messages(history)
    assert [m.role for m in cms] == ["user", "assistant", "tool", "assistant", "user"]
    assert cms[2].tool_call_id == "c1"
    assert cms[2].text == tool_retry.model_response()
    assert "order must match" in cms[2].text
    assert cms[4].text == feedback.model_response()
    assert "answer in one line" in cms[4].text
    back = from_chat_messages(cms)
    assert back == history
    assert all(a is b for a, b in zip(back, history, strict=True))


def test_non_message_is_an_input_error() -> None:
    with pytest.raises(InputError, match=r"messages\[0\]"):
        to_chat_messages(["hello"])  # type: ignore[list-item]


_TS = datetime(2026, 1, 1, tzinfo=UTC)
_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1,
                max_size=30)


@st.composite
def _histories(draw: st.DrawFn) -> list[ModelMessage]:
    """Valid alternating histories: prompt, then responses with or without tool calls."""
    out: list[ModelMessage] = [ModelRequest(parts=[SystemPromptPart(draw(_text), timestamp=_TS),
                                                   UserPromptPart(draw(_text), timestamp=_TS)])]
    for turn in range(draw(st.integers(0, 5))):
        calls = [ToolCallPart("f", {"a": draw(st.integers())}, f"c{turn}_{k}")
                 for k in range(draw(st.integers(0, 2)))]
        out.append(ModelResponse(parts=[TextPart(draw(_text)), *calls], timestamp=_TS))
        if calls:
            out.append(ModelRequest(parts=[ToolReturnPart("f", draw(_text), c.tool_call_id,
                                                          timestamp=_TS) for c in calls]))
        else:
            out.append(ModelRequest(parts=[UserPromptPart(draw(_text), timestamp=_TS)]))
    return out


@settings(max_examples=100, deadline=None)
@given(_histories())
def test_pydantic_ai_round_trip_is_lossless(history: list[ModelMessage]) -> None:
    back = from_chat_messages(to_chat_messages(history))
    assert back == history
    assert all(a is b for a, b in zip(back, history, strict=True))


@st.composite
def _chat(draw: st.DrawFn) -> list[ChatMessage]:
    out = [ChatMessage.system(draw(_text)), ChatMessage.user(draw(_text))]
    for turn in range(draw(st.integers(0, 4))):
        ids = [f"c{turn}_{k}" for k in range(draw(st.integers(0, 2)))]
        out.append(ChatMessage.assistant(draw(_text), tool_calls=[
            ToolCall(id=i, name="f", arguments={"a": 1}) for i in ids] or None))
        out += ([ChatMessage.tool(i, draw(_text)) for i in ids] if ids
                else [ChatMessage.user(draw(_text))])
    return out


@settings(max_examples=100, deadline=None)
@given(_chat())
def test_ctxstack_round_trip_is_lossless(messages: list[ChatMessage]) -> None:
    again = to_chat_messages(from_chat_messages(messages))
    assert [m.replace(metadata={}) for m in again] == messages


# ---------------------------------------------------------------------- summariser
async def test_summarizer_is_a_ctxstack_llm() -> None:
    llm = PydanticAISummarizer(summary_model(), context_size=32_000, max_output_tokens=2_000)
    result = await llm.chat([ChatMessage.system("s"), ChatMessage.user("u")], max_tokens=100)
    assert result.text.startswith("Looked up")
    assert (result.usage.input_tokens, result.usage.output_tokens) == (900, 12)
    assert (llm.context_size, llm.max_output_tokens) == (32_000, 2_000)
    assert "pydantic_ai" not in result.message.metadata


async def test_summarizer_passes_tools_and_returns_tool_calls() -> None:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        assert [t.name for t in info.function_tools] == ["f"]
        return ModelResponse(parts=[ToolCallPart("f", {"x": 1}, "c7")])

    spec = {"type": "function", "function": {"name": "f", "description": "d",
                                             "parameters": {"type": "object"}}}
    result = await PydanticAISummarizer(FunctionModel(respond)).chat(
        [ChatMessage.user("x")], tools=[spec])
    assert result.message.tool_calls == [ToolCall(id="c7", name="f", arguments={"x": 1})]


async def test_summarizer_streams() -> None:
    async def stream(messages: list[ModelMessage], info: AgentInfo
                     ) -> AsyncIterator[str | DeltaToolCalls]:
        for word in ("one ", "two ", "three"):
            yield word

    llm = PydanticAISummarizer(FunctionModel(stream_function=stream))
    chat_stream = llm.stream_chat([ChatMessage.user("go")])
    assert await chat_stream.text() == "one two three"
    assert chat_stream.usage.output_tokens > 0


async def test_summarizer_failure_is_an_llm_error() -> None:
    def broken(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise RuntimeError("provider down")

    llm = PydanticAISummarizer(FunctionModel(broken))
    with pytest.raises(LLMError, match="provider down"):
        await llm.chat([ChatMessage.user("x")])
    with pytest.raises(LLMError, match="while streaming"):
        await llm.stream_chat([ChatMessage.user("x")]).text()


def test_bad_arguments_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="budget"):
        history_processor(ContextGuard(), -1)
    with pytest.raises(ConfigError, match="guard"):
        history_processor(object(), 100)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="model"):
        PydanticAISummarizer("openai:gpt-4o")  # type: ignore[arg-type]


