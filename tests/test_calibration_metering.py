"""A metered LLM feeds a CalibratingCounter from provider-reported usage."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

from ctxstack.errors import LLMError
from ctxstack.guard import ContextGuard
from ctxstack.llm import LLMResult, ScriptedLLM, ToolSpec, Usage
from ctxstack.messages import ChatMessage
from ctxstack.tokens import HEURISTIC, CalibratingCounter, UsageMeter

TRUE_FACTOR = 1.6

TOOLS: list[ToolSpec] = [{
    "type": "function",
    "function": {
        "name": "search_documents",
        "description": "Search the document store and return the best matching passages.",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string", "description": "what to look for"},
            "limit": {"type": "integer", "minimum": 1, "maximum": 50},
        }, "required": ["query"]},
    },
}]


def _tools_tokens(tools: Sequence[ToolSpec] | None) -> int:
    return CalibratingCounter().tool_specs_tokens(tools)


def _provider(
    factor: float = TRUE_FACTOR, *, estimated: bool = False, model: str = "gpt-x-2025-01-01"
) -> ScriptedLLM:
    """A model whose tokenizer bills ``factor`` x the heuristic for messages and tools."""

    def handler(messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] | None) -> LLMResult:
        billed = HEURISTIC.count_messages(messages) + _tools_tokens(tools)
        usage = Usage(input_tokens=math.ceil(billed * factor), output_tokens=3, calls=1,
                      estimated=estimated)
        return LLMResult(message=ChatMessage.assistant("ok"), usage=usage, model=model)

    return ScriptedLLM(handler=handler)


def _history(n: int, size: int = 600) -> list[ChatMessage]:
    return [ChatMessage.user(f"turn {i}: " + "word " * (size // 5)) for i in range(n)]


async def test_metered_calls_teach_the_counter_and_its_guard_then_compacts() -> None:
    counter = CalibratingCounter(model="gpt-x")
    llm = UsageMeter().wrap(_provider(), calibrate=counter)
    for n in range(1, 9):
        await llm.chat(_history(n))
    assert counter.samples() == 8
    assert counter.factor() == pytest.approx(TRUE_FACTOR, abs=0.05)

    # A list the heuristic says fits, with room to spare, but the provider would bill
    # ~1.6x: the calibrated guard compacts it, the plain one does not.
    messages = _history(10)
    heuristic = HEURISTIC.count_messages(messages)
    budget = int(heuristic * 1.25)
    plain = ContextGuard(default_budget=budget)
    calibrated = ContextGuard(default_budget=budget, counter=counter)
    assert await plain.check_and_compact(messages) == messages
    fitted = await calibrated.check_and_compact(messages)
    assert len(fitted) < len(messages)
    assert math.ceil(HEURISTIC.count_messages(fitted) * TRUE_FACTOR) <= budget


async def test_estimated_usage_teaches_nothing() -> None:
    counter = CalibratingCounter()
    meter = UsageMeter()
    llm = meter.wrap(_provider(estimated=True), calibrate=counter)
    for n in range(1, 5):
        await llm.chat(_history(n))
    assert counter.samples() == 0
    assert counter.factor() == 1.0
    assert meter.usage.calls == 4  # still metered


async def test_tool_specs_are_counted_on_the_estimated_side() -> None:
    # The provider bills the tool specs exactly as the heuristic estimates them: a
    # counter that accounts for them learns 1.0, not the tool list's share.
    counter = CalibratingCounter()
    llm = UsageMeter().wrap(_provider(1.0), calibrate=counter)
    for n in range(1, 6):
        await llm.chat(_history(n, size=100), tools=TOOLS)
    assert counter.samples() == 5
    assert counter.factor() == pytest.approx(1.0, abs=0.01)
    assert counter.tool_specs_tokens(TOOLS) > 50
    assert counter.tool_specs_tokens(None) == counter.tool_specs_tokens([]) == 0

    # With a true factor on both, the learnt factor is the text's factor.
    scaled = CalibratingCounter()
    llm = UsageMeter().wrap(_provider(), calibrate=scaled)
    for n in range(1, 9):
        await llm.chat(_history(n, size=100), tools=TOOLS)
    assert scaled.factor() == pytest.approx(TRUE_FACTOR, abs=0.05)


async def test_the_counters_own_model_learns_whatever_name_the_provider_answers() -> None:
    counter = CalibratingCounter()
    view = counter.for_model("gpt-x")
    llm = UsageMeter().wrap(_provider(model="gpt-x-2025-01-01"), calibrate=view)
    await llm.chat(_history(4))
    assert view.samples() == 1
    assert view.factor() > 1.0
    assert counter.samples("gpt-x-2025-01-01") == 0


async def test_a_finished_stream_teaches_an_abandoned_one_does_not() -> None:
    counter = CalibratingCounter()
    long_answer = LLMResult(message=ChatMessage.assistant("x" * 400),
                            usage=Usage(input_tokens=1, calls=1))

    def handler(messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] | None) -> LLMResult:
        billed = math.ceil(HEURISTIC.count_messages(messages) * TRUE_FACTOR)
        return long_answer.model_copy(update={"usage": Usage(input_tokens=billed, calls=1)})

    llm = UsageMeter().wrap(ScriptedLLM(handler=handler, stream_chunk=10), calibrate=counter)
    stream = llm.stream_chat(_history(3))
    await stream.__anext__()
    await stream.aclose()
    assert counter.samples() == 0

    stream = llm.stream_chat(_history(3))
    assert len(await stream.text()) == 400
    assert counter.samples() == 1
    assert counter.factor() > 1.0


async def test_a_failed_call_teaches_nothing() -> None:
    counter = CalibratingCounter()
    llm = UsageMeter().wrap(ScriptedLLM([LLMError("boom")]), calibrate=counter)
    with pytest.raises(LLMError):
        await llm.chat(_history(3))
    assert counter.samples() == 0
    assert counter.rejected == 0
