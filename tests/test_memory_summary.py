"""SummaryMemory: rolling summary past a threshold, tool groups whole, safe fallback."""

from __future__ import annotations

import asyncio
import logging

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxstack.compaction import SUMMARY_PREFIX
from ctxstack.compaction._prompts import compaction_prompt
from ctxstack.errors import ConfigError, LLMError
from ctxstack.llm import ScriptedLLM
from ctxstack.memory import BaseMemory, SummaryMemory
from ctxstack.messages import ChatMessage, ToolCall
from ctxstack.tokens import HEURISTIC
from tests.conversations import (
    assert_opens_with_user,
    assert_tool_pairing,
    conversation,
    is_summary,
)

SYS = ChatMessage.system("You are helpful.")


def pair(i: int) -> list[ChatMessage]:
    return [ChatMessage.user(f"q{i}"), ChatMessage.assistant(f"a{i}")]


def group(call_id: str, n: int = 1) -> list[ChatMessage]:
    calls = [ToolCall(id=f"{call_id}_{i}", name="lookup") for i in range(n)]
    return [ChatMessage.assistant(None, tool_calls=calls)] + [
        ChatMessage.tool(c.id, f"result {c.id}") for c in calls
    ]


async def add_all(mem: SummaryMemory, msgs: list[ChatMessage]) -> None:
    for m in msgs:
        await mem.add_message(m)


async def test_below_threshold_nothing_happens() -> None:
    llm = ScriptedLLM([])
    mem = SummaryMemory(llm, threshold=6)
    msgs = [SYS, *pair(0), *pair(1), *pair(2)]
    await add_all(mem, msgs)
    assert await mem.get_messages() == msgs
    assert not llm.calls
    assert isinstance(mem, BaseMemory)


async def test_past_threshold_older_messages_become_one_summary() -> None:
    llm = ScriptedLLM(["The user asked q0..q2."])
    mem = SummaryMemory(llm, threshold=6, keep_recent=2, hint="planner_input")
    msgs = [SYS, *pair(0), *pair(1), *pair(2), ChatMessage.user("q3")]
    await add_all(mem, msgs)
    out = await mem.get_messages()
    assert out[0] is SYS
    assert out[1].role == "system"
    assert out[1].kind == "summary"
    assert out[1].text == f"{SUMMARY_PREFIX}\nThe user asked q0..q2."
    # keep_recent=2 would start at a2: widened back to the user turn q2
    assert [m.text for m in out[2:]] == ["q2", "a2", "q3"]
    (call,) = llm.calls
    assert call.messages[0].text == compaction_prompt("planner_input")
    transcript = call.messages[1].text
    for text in ["[user] q0", "[assistant] a0", "[user] q1", "[assistant] a1"]:
        assert text in transcript
    assert "q2" not in transcript
    assert mem.compactions == 1
    assert mem.usage == llm.total_usage
    assert mem.last_reason is None


async def test_summary_rolls_instead_of_piling_up() -> None:
    llm = ScriptedLLM(["first summary", "second summary"])
    mem = SummaryMemory(llm, threshold=4, keep_recent=2)
    await add_all(mem, [*pair(0), *pair(1), *pair(2)])
    await add_all(mem, [*pair(3), *pair(4)])
    out = await mem.get_messages()
    summaries = [m for m in out if m.kind == "summary"]
    assert len(summaries) == 1
    assert summaries[0].text == f"{SUMMARY_PREFIX}\nsecond summary"
    second_request = llm.calls[1].messages[1].text
    assert "Previous summary" in second_request
    assert "first summary" in second_request
    assert out[0] is summaries[0]


async def test_tool_groups_are_never_split() -> None:
    llm = ScriptedLLM(handler=lambda m, t: "summary")
    mem = SummaryMemory(llm, threshold=5, keep_recent=2)
    msgs = [ChatMessage.user("look up"), *group("g", n=3), ChatMessage.assistant("done"),
            ChatMessage.user("next"), *group("h", n=2)]
    await add_all(mem, msgs)
    out = await mem.get_messages()
    assert_tool_pairing(out)
    assert_opens_with_user(out)


async def test_waits_for_open_tool_calls_and_anchors_the_current_turn() -> None:
    llm = ScriptedLLM(handler=lambda m, t: "summary")
    mem = SummaryMemory(llm, threshold=3, keep_recent=1)
    task = ChatMessage.user("TASK: check all orders")
    await add_all(mem, [*pair(0), task])
    calls = [ToolCall(id="c1", name="lookup"), ToolCall(id="c2", name="lookup")]
    await mem.add_message(ChatMessage.assistant(None, tool_calls=calls))
    assert not llm.calls, "compaction must wait for the open tool call"
    await mem.add_message(ChatMessage.tool("c1", "one"))
    assert not llm.calls, "still one result missing"
    await mem.add_message(ChatMessage.tool("c2", "two"))
    assert llm.calls
    for i in range(5):
        await add_all(mem, group(f"loop{i}"))
    out = await mem.get_messages()
    assert out[0].kind == "summary"
    assert out[1] is task, "the loop's user message stays as the anchor"
    assert_tool_pairing(out)
    non_system = [m for m in out if m.role != "system"]
    assert len(non_system) <= 3


async def test_pinned_messages_are_never_folded() -> None:
    llm = ScriptedLLM(handler=lambda m, t: "summary")
    mem = SummaryMemory(llm, threshold=4, keep_recent=1)
    goal = ChatMessage.user("GOAL: keep this", pinned=True)
    await add_all(mem, [goal, *pair(0), *pair(1), *pair(2)])
    out = await mem.get_messages()
    assert goal in out
    assert all("GOAL" not in c.messages[1].text for c in llm.calls)


async def test_summariser_failure_drops_the_oldest_and_keeps_the_old_summary(
    caplog: pytest.LogCaptureFixture,
) -> None:
    llm = ScriptedLLM(["first summary"], handler=lambda m, t: LLMError("down"))
    mem = SummaryMemory(llm, threshold=4, keep_recent=2)
    await add_all(mem, [*pair(0), *pair(1), ChatMessage.user("q2")])
    assert [m.text for m in await mem.get_messages()] == [
        f"{SUMMARY_PREFIX}\nfirst summary", "q1", "a1", "q2"]
    with caplog.at_level(logging.WARNING, logger="ctxstack.memory"):
        await add_all(mem, [ChatMessage.assistant("a2"), ChatMessage.user("q3")])
    out = await mem.get_messages()
    # q1/a1 would have been folded: dropped instead, the earlier summary stays
    assert [m.text for m in out] == [f"{SUMMARY_PREFIX}\nfirst summary", "q2", "a2", "q3"]
    assert mem.last_reason == "llm_error: LLMError: down"
    assert any("down" in r.getMessage() for r in caplog.records)


async def test_timeout_and_empty_answers_fall_back_too() -> None:
    mem = SummaryMemory(ScriptedLLM(["x"], delay=5.0), threshold=3, keep_recent=1, timeout=0.05)
    await add_all(mem, [*pair(0), *pair(1)])
    assert mem.last_reason == "timeout"
    assert [m.text for m in await mem.get_messages()] == ["q1", "a1"]
    mem = SummaryMemory(ScriptedLLM(["<think>hmm</think>"]), threshold=3, keep_recent=1)
    await add_all(mem, [*pair(0), *pair(1)])
    assert mem.last_reason == "empty_summary"


async def test_budget_triggers_compaction_and_bounds_the_output() -> None:
    llm = ScriptedLLM(handler=lambda m, t: "compact summary")
    mem = SummaryMemory(llm, threshold=1000, keep_recent=2, budget=300)
    for i in range(20):
        await add_all(mem, [ChatMessage.user(f"q{i} " + "w " * 60), ChatMessage.assistant(f"a{i}")])
    assert llm.calls, "token budget triggered a compaction before the count threshold"
    out = await mem.get_messages()
    assert HEURISTIC.count_messages(out) <= 300
    assert sum(1 for m in out if m.kind == "summary") == 1
    assert llm.calls[0].opts["max_tokens"] == 64


async def test_concurrent_adds_lose_nothing() -> None:
    seen: list[str] = []

    def summarise(msgs: object, tools: object) -> str:
        seen.append(msgs[1].text)  # type: ignore[index]
        return "summary"

    llm = ScriptedLLM(handler=summarise, delay=0.001)
    mem = SummaryMemory(llm, threshold=10, keep_recent=3)

    async def add(i: int) -> None:
        await asyncio.sleep(0)
        await mem.add_message(ChatMessage.user(f"msg-{i:03d}"))

    await asyncio.gather(*(add(i) for i in range(100)))
    out = await mem.get_messages()
    verbatim = [m.text for m in out if m.role == "user"]
    assert len(verbatim) == len(set(verbatim))
    folded = "\n".join(seen)
    for i in range(100):
        name = f"msg-{i:03d}"
        assert (name in verbatim) != (name in folded), f"{name} lost or duplicated"
    assert sum(1 for m in out if m.kind == "summary") == 1


async def test_get_messages_returns_a_new_list_and_clear_forgets() -> None:
    mem = SummaryMemory(ScriptedLLM([]), threshold=5)
    await mem.add_message(ChatMessage.user("a"))
    out = await mem.get_messages()
    out.clear()
    assert len(await mem.get_messages()) == 1
    await mem.clear()
    assert await mem.get_messages() == []


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"threshold": 0}, "threshold"),
        ({"threshold": 4, "keep_recent": 4}, "keep_recent"),
        ({"threshold": 4, "keep_recent": -1}, "keep_recent"),
        ({"threshold": 5, "hint": "nope"}, "hint"),
        ({"threshold": 5, "budget": 0}, "budget"),
        ({"threshold": 5, "timeout": -1}, "timeout"),
    ],
)
def test_invalid_configuration_names_the_argument(kwargs: dict[str, object], name: str) -> None:
    with pytest.raises(ConfigError, match=name):
        SummaryMemory(ScriptedLLM([]), **kwargs)  # type: ignore[arg-type]


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(msgs=conversation(), threshold=st.integers(2, 10), keep=st.integers(0, 4),
       fail=st.booleans())
def test_summary_memory_properties(
    msgs: list[ChatMessage], threshold: int, keep: int, fail: bool
) -> None:
    keep = min(keep, threshold - 1)
    llm = ScriptedLLM(handler=lambda m, t: LLMError("down") if fail else "summary")
    mem = SummaryMemory(llm, threshold=threshold, keep_recent=keep)
    out = asyncio.run(_run(mem, msgs))
    assert sum(1 for m in out if is_summary(m)) <= 1
    assert_tool_pairing(out)
    assert_opens_with_user(out)
    for m in msgs:
        if m.pinned and not is_summary(m):
            assert any(o is m for o in out), "pinned message folded"
    assert all(m.role != "system" or m in msgs or is_summary(m) for m in out)


async def _run(mem: SummaryMemory, msgs: list[ChatMessage]) -> list[ChatMessage]:
    await add_all(mem, msgs)
    return await mem.get_messages()
