"""The service's pure parts: settings, SSE encoding, the tools, the demo model, metering."""

from __future__ import annotations

import asyncio
import json

import pytest

from ctxstack.compaction._prompts import compaction_prompt
from ctxstack.errors import ConfigError
from ctxstack.llm import ScriptedLLM
from ctxstack.messages import ChatMessage
from ctxstack.server.demo_model import DemoHandler, build_demo_llm, demo_plan, is_japanese
from ctxstack.server.settings import Settings, is_loopback
from ctxstack.server.sse import (
    AnswerData,
    AnswerEvent,
    CompactData,
    CompactEvent,
    NoteStep,
    SSEEvent,
    StepEvent,
    encode,
    frames,
    parse_stored,
    stored_form,
)
from ctxstack.server.tools import CalculationError, calculate, find_arithmetic, text_stats
from ctxstack.tokens import MeteredLLM, UsageMeter

TOOLS = [{"type": "function", "function": {"name": n, "parameters": {}}}
         for n in ("calculate", "text_stats")]


# ---------------------------------------------------------------------------- settings
def test_settings_from_env_reads_every_variable() -> None:
    settings = Settings.from_env({
        "CTXSTACK_DATABASE_URL": "sqlite+aiosqlite:///x.db", "CTXSTACK_AUTH": "none",
        "CTXSTACK_ADMIN_USERS": "ann, bo", "CTXSTACK_MAX_UPLOAD_BYTES": "1000",
        "LLM_BASE_URL": "http://127.0.0.1:1/v1", "LLM_MODEL": "m", "LLM_CONTEXT_SIZE": "9000",
    })
    assert settings.auth == "none"
    assert settings.admin_users == frozenset({"ann", "bo"})
    assert settings.max_upload_bytes == 1000
    assert settings.demo_model is False
    assert settings.budget_env == {"LLM_CONTEXT_SIZE": "9000"}
    assert Settings.from_env(settings.to_env()).max_upload_bytes == 1000


def test_settings_errors_name_the_variable() -> None:
    with pytest.raises(ConfigError, match="CTXSTACK_MAX_UPLOAD_BYTES"):
        Settings.from_env({"CTXSTACK_MAX_UPLOAD_BYTES": "lots"})
    with pytest.raises(ConfigError, match="CTXSTACK_AUTH"):
        Settings.from_env({"CTXSTACK_AUTH": "maybe"})
    assert Settings.from_env({}).demo_model is True


def test_loopback_addresses() -> None:
    assert is_loopback("127.0.0.1")
    assert is_loopback("localhost")
    assert is_loopback("::1")
    assert not is_loopback("0.0.0.0")
    assert not is_loopback("192.0.2.1")
    # Parsed, not prefix-matched (issue 15): a host name is never loopback but localhost.
    assert not is_loopback("127.evil.example.com")
    assert not is_loopback("127.0.0.1.nip.io")
    assert not is_loopback("localhost.example.com")
    assert is_loopback("127.8.9.10")
    assert is_loopback("[::1]")
    assert is_loopback("::ffff:127.0.0.1")


# ---------------------------------------------------------------------------- SSE
def test_sse_frames_are_one_line_of_json() -> None:
    event = AnswerEvent(data=AnswerData(delta="line one\nline two \u2028 <b>"))
    frame = encode(event).decode()
    assert frame.startswith("event: answer\ndata: ")
    assert frame.endswith("\n\n")
    assert frame.count("\n") == 3  # event line, data line, blank line
    payload = json.loads(frame.split("data: ", 1)[1])
    assert payload == {"delta": "line one\nline two \u2028 <b>"}


async def test_sse_events_queued_together_go_out_in_one_chunk() -> None:
    queue: asyncio.Queue[SSEEvent | None] = asyncio.Queue()
    events = [AnswerEvent(data=AnswerData(delta=f"part {i}")) for i in range(3)]
    for event in events:
        queue.put_nowait(event)
    queue.put_nowait(None)
    chunks = [chunk async for chunk in frames(queue)]
    assert chunks == [b"".join(encode(e) for e in events)]  # one write, then the end
    later: asyncio.Queue[SSEEvent | None] = asyncio.Queue()
    later.put_nowait(events[0])
    stream = frames(later)
    assert await anext(stream) == encode(events[0])  # nothing else waited: sent alone
    later.put_nowait(None)
    assert [chunk async for chunk in stream] == []


def test_stored_events_round_trip_and_junk_is_ignored() -> None:
    compact = CompactEvent(data=CompactData(original_messages=12, kept_messages=5, method="llm"))
    assert parse_stored(stored_form(compact)) == compact
    note = StepEvent(data=NoteStep(kind="warning", text="same call 3 times"))
    assert parse_stored(json.loads(json.dumps(stored_form(note)))) == note
    assert parse_stored({"event": "explode", "data": {}}) is None
    assert parse_stored("nonsense") is None


# ---------------------------------------------------------------------------- tools
def test_calculate_does_arithmetic_only() -> None:
    assert calculate("(17 + 25) * 3") == "(17 + 25) * 3 = 126"
    assert calculate("2^10") == "2**10 = 1024"
    assert calculate("sqrt(16) + pi - pi") == "sqrt(16) + pi - pi = 4"
    for bad in ("__import__('os').system('true')", "open('/etc/passwd')", "a.b", "9**99999",
                "1/0", "", "[1, 2]"):
        with pytest.raises(CalculationError):
            calculate(bad)


def test_text_stats_and_arithmetic_detection() -> None:
    stats = text_stats("日本語 text with 3 numbers: 4, 5.5")
    assert "words: " in stats
    assert "numbers: 3, 4, 5.5" in stats
    assert "non-ASCII characters: 3" in stats
    assert find_arithmetic("What is 12*7 please?") == "12*7"
    assert find_arithmetic("version 3.11 released in 2023") is None


# ---------------------------------------------------------------------------- demo model
def test_demo_uses_a_tool_then_answers_briefly() -> None:
    handler = DemoHandler()
    query = ChatMessage.user("What is 12*7?", pinned=True, metadata={"kind": "query"})
    first = handler([ChatMessage.system("sys"), query], TOOLS)
    assert isinstance(first, ChatMessage)
    assert first.tool_calls
    call = first.tool_calls[0]
    assert (call.name, call.arguments) == ("calculate", {"expression": "12*7"})
    result = ChatMessage.tool(call.id, "12*7 = 84")
    brief = handler([ChatMessage.system("sys"), query, first, result], TOOLS)
    assert isinstance(brief, str)
    assert "12*7 = 84" in brief
    assert "Context: 0 earlier messages; summary: no." in brief


def test_demo_long_answer_quotes_the_request_in_its_language() -> None:
    handler = DemoHandler()
    prompt = ("Request:\n東京の人口は？\n\nTool calls and results:\n"
              "1. text_stats({}) -> characters: 6\n\nBrief answer:\nツールの結果: x\n"
              "Context: 4 earlier messages; summary: yes.")
    answer = handler([ChatMessage.system("synth"), ChatMessage.user(prompt)], None)
    assert isinstance(answer, str)
    assert "「東京の人口は？」" in answer
    assert "characters: 6" in answer
    assert "**4**" in answer
    assert "会話の要約" in answer
    english = handler([ChatMessage.system("synth"),
                       ChatMessage.user("Request:\nHow big is it?\n\nBrief answer:\nok")], None)
    assert isinstance(english, str)
    assert 'You asked: "How big is it?"' in english
    assert len(english) > 2000  # long on purpose: compaction shows after a few turns
    assert is_japanese("東京")
    assert not is_japanese("Tokyo")


def test_demo_summarises_keeping_numbers() -> None:
    summary = DemoHandler()([ChatMessage.system(compaction_prompt("general")),
                             ChatMessage.user("user: order 4471 costs 19.99 EUR")], None)
    assert isinstance(summary, str)
    assert "4471" in summary
    assert "19.99" in summary


def test_demo_plan_is_a_valid_dag_plan() -> None:
    from ctxstack.dag import Plan

    plan = Plan.model_validate(demo_plan("Compute 6*7 and describe it"))
    assert [s.id for s in plan.steps] == ["s1", "s2"]


async def test_demo_model_streams_with_usage() -> None:
    llm = build_demo_llm(delay=0, chunk_delay=0)
    stream = llm.stream_chat([ChatMessage.user("Request:\nhello")])
    text = await stream.text()
    assert "hello" in text
    assert stream.usage.output_tokens > 500


# ---------------------------------------------------------------------------- metering
async def test_meter_counts_chat_and_stream_calls() -> None:
    inner = ScriptedLLM(["first", "second streamed answer"])
    meter = UsageMeter()
    llm = MeteredLLM(inner, meter)
    await llm.chat([ChatMessage.user("hi")])
    stream = llm.stream_chat([ChatMessage.user("go on")])
    assert await stream.text() == "second streamed answer"
    assert meter.usage.input_tokens == inner.total_usage.input_tokens
    assert meter.usage.output_tokens == inner.total_usage.output_tokens
    assert meter.usage.calls == 2
    assert stream.usage.calls == 1


async def test_meter_ignores_an_abandoned_stream() -> None:
    inner = ScriptedLLM(["a long answer " * 20], stream_chunk=4)
    meter = UsageMeter()
    stream = MeteredLLM(inner, meter).stream_chat([ChatMessage.user("x")])
    assert await stream.__anext__()
    await stream.aclose()
    assert meter.usage.calls == 0
