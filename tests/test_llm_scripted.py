"""ScriptedLLM: the shared offline fake behaves like a provider."""

from __future__ import annotations

import pytest

from ctxstack.errors import LLMError
from ctxstack.llm import LLM, LLMResult, ScriptedLLM, Usage
from ctxstack.messages import ChatMessage
from ctxstack.tokens import HEURISTIC


async def test_queued_replies_and_recorded_calls() -> None:
    llm = ScriptedLLM(["first", ScriptedLLM.tool_call("search", {"q": "x"})])
    r1 = await llm.chat([ChatMessage.user("hi")])
    r2 = await llm.chat([ChatMessage.user("again")], tools=[{"type": "function"}])
    assert r1.text == "first"
    assert r2.message.tool_calls is not None
    assert r2.message.tool_calls[0].name == "search"
    assert r2.finish_reason == "tool_calls"
    assert [c.messages[0].text for c in llm.calls] == ["hi", "again"]
    assert llm.calls[1].tools == ({"type": "function"},)


async def test_handler_sees_the_messages() -> None:
    llm = ScriptedLLM(handler=lambda msgs, tools: f"echo:{msgs[-1].text}")
    assert (await llm.chat([ChatMessage.user("ping")])).text == "echo:ping"


async def test_exception_reply_is_raised_and_empty_queue_is_an_error() -> None:
    llm = ScriptedLLM([LLMError("boom")])
    with pytest.raises(LLMError, match="boom"):
        await llm.chat([ChatMessage.user("x")])
    with pytest.raises(LLMError, match="no scripted reply"):
        await llm.chat([ChatMessage.user("x")])


async def test_usage_is_deterministic_and_summed() -> None:
    llm = ScriptedLLM(["a" * 40, "b" * 80])
    r1 = await llm.chat([ChatMessage.user("a" * 400)])
    # usage is the default counter's figure: the messages (with overhead) in, the text out
    assert r1.usage == Usage(input_tokens=4 + HEURISTIC.count_text("a" * 400),
                             output_tokens=HEURISTIC.count_text("a" * 40), calls=1)
    again = await ScriptedLLM(["a" * 40]).chat([ChatMessage.user("a" * 400)])
    assert again.usage == r1.usage  # deterministic
    stream = llm.stream_chat([ChatMessage.user("q")])
    assert await stream.text() == "b" * 80
    assert stream.usage.output_tokens == HEURISTIC.count_text("b" * 80)
    assert llm.total_usage == r1.usage + stream.usage
    assert sum([r1.usage, stream.usage]) == llm.total_usage


async def test_stream_yields_deltas() -> None:
    llm = ScriptedLLM(["hello world, streamed"], stream_chunk=5)
    deltas = [d async for d in llm.stream_chat([ChatMessage.user("q")])]
    assert len(deltas) > 1
    assert "".join(deltas) == "hello world, streamed"


def test_satisfies_protocol() -> None:
    assert isinstance(ScriptedLLM(), LLM)


def test_llm_result_text() -> None:
    assert LLMResult(message=ChatMessage.assistant("x")).text == "x"


def test_first_sentence_summarizer_keeps_one_sentence_per_entry() -> None:
    from ctxstack.testing import first_sentence, first_sentence_summarizer

    request = ChatMessage.user(
        "Conversation to fold in:\n\n"
        "[user] Budget is $48,250. Please hurry.\n"
        "[assistant] 参加者は42名です。よろしく。\n"
        "[tool result: search] {\"a\": 1}\n"
        "free text that is not an entry"
    )
    summary = first_sentence_summarizer([request])
    assert summary.splitlines() == [
        "- [user] Budget is $48,250.",
        "- [assistant] 参加者は42名です。",
        '- [tool result: search] {"a": 1}',
    ]
    assert first_sentence("x" * 500, limit=10) == "x" * 10


def test_usage_difference_of_running_totals() -> None:
    before = Usage(input_tokens=10, output_tokens=2, calls=1)
    after = before + Usage(input_tokens=5, output_tokens=3, cached_tokens=1, calls=2)
    assert after - before == Usage(input_tokens=5, output_tokens=3, cached_tokens=1, calls=2)
