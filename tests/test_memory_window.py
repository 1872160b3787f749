"""WindowMemory: last N non-system messages, all system messages, tool groups whole."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxstack.errors import ConfigError, MessageError
from ctxstack.memory import BaseMemory, WindowMemory
from ctxstack.memory._window import window_indices
from ctxstack.messages import ChatMessage, ToolCall
from tests.conversations import assert_opens_with_user, assert_tool_pairing, conversation

SYS = ChatMessage.system("You are helpful.")


def group(call_id: str, n: int = 1) -> list[ChatMessage]:
    calls = [ToolCall(id=f"{call_id}_{i}", name="f") for i in range(n)]
    return [ChatMessage.assistant(None, tool_calls=calls)] + [
        ChatMessage.tool(c.id, f"result {c.id}") for c in calls
    ]


async def filled(n: int, msgs: list[ChatMessage]) -> WindowMemory:
    mem = WindowMemory(n)
    for m in msgs:
        await mem.add_message(m)
    return mem


async def test_keeps_last_n_and_all_system_messages() -> None:
    note = ChatMessage.system("note in the middle")
    msgs = [SYS]
    for i in range(10):
        msgs += [ChatMessage.user(f"q{i}"), ChatMessage.assistant(f"a{i}")]
        if i == 2:
            msgs.append(note)
    mem = await filled(4, msgs)
    out = await mem.get_messages()
    assert [m.text for m in out] == ["You are helpful.", "note in the middle", "q8", "a8", "q9", "a9"]
    assert isinstance(mem, BaseMemory)


async def test_window_rounds_forward_to_a_user_turn_and_never_splits_a_group() -> None:
    msgs = [SYS, ChatMessage.user("q1"), *group("g1", n=3), ChatMessage.assistant("a1"),
            ChatMessage.user("q2"), ChatMessage.assistant("a2")]
    # last 5 non-system: tool, tool, a1, q2, a2 -> starts inside the group
    out = await (await filled(5, msgs)).get_messages()
    assert [m.text for m in out] == ["You are helpful.", "q2", "a2"]
    # last 7 starts at the group's call: no user turn there, so still only q2/a2
    out = await (await filled(7, msgs)).get_messages()
    assert [m.text for m in out] == ["You are helpful.", "q2", "a2"]
    # last 8: everything
    out = await (await filled(8, msgs)).get_messages()
    assert out == msgs


async def test_long_tool_loop_keeps_its_user_message() -> None:
    msgs = [SYS, ChatMessage.user("old"), ChatMessage.assistant("old"), ChatMessage.user("task")]
    for i in range(10):
        msgs += group(f"g{i}")
    out = await (await filled(5, msgs)).get_messages()
    assert [m.text for m in out[:2]] == ["You are helpful.", "task"]
    assert out[2:] == msgs[-4:], "the newest whole groups that fit in N - 1"
    assert_tool_pairing(out)


async def test_history_without_any_user_turn_keeps_whole_groups() -> None:
    msgs = [SYS]
    for i in range(6):
        msgs += group(f"g{i}")
    out = await (await filled(3, msgs)).get_messages()
    assert out == [SYS, *msgs[-2:]]


async def test_storage_stays_bounded_and_window_is_unchanged_by_pruning() -> None:
    mem = WindowMemory(6)
    everything: list[ChatMessage] = [SYS]
    await mem.add_message(SYS)
    for i in range(500):
        turn = [ChatMessage.user(f"q{i}"), *group(f"g{i}", n=i % 3 + 1), ChatMessage.assistant(f"a{i}")]
        for m in turn:
            await mem.add_message(m)
        everything += turn
        if i % 50 == 0 or i == 499:
            window = set(window_indices(everything, 6))
            expected = [m for j, m in enumerate(everything) if m.role == "system" or j in window]
            assert await mem.get_messages() == expected
    assert len(mem._messages) <= 2 * 6 + 16 + 1


async def test_get_messages_returns_a_new_list_and_clear_forgets() -> None:
    mem = await filled(3, [ChatMessage.user("a"), ChatMessage.assistant("b")])
    out = await mem.get_messages()
    out.append(ChatMessage.user("injected"))
    assert len(await mem.get_messages()) == 2
    await mem.clear()
    assert await mem.get_messages() == []


async def test_concurrent_adds_lose_nothing() -> None:
    mem = WindowMemory(1000)

    async def add(i: int) -> None:
        await asyncio.sleep(0)
        await mem.add_message(ChatMessage.user(f"m{i}"))

    await asyncio.gather(*(add(i) for i in range(300)))
    texts = {m.text for m in await mem.get_messages()}
    assert texts == {f"m{i}" for i in range(300)}


@pytest.mark.parametrize("bad", [0, -1, 2.5, "3", True])
def test_invalid_size_is_rejected(bad: object) -> None:
    with pytest.raises(ConfigError, match="max_messages"):
        WindowMemory(bad)  # type: ignore[arg-type]


async def test_openai_dicts_are_accepted_and_anything_else_is_named() -> None:
    memory = WindowMemory(3)
    await memory.add_message({"role": "user", "content": "where is order A-1042?"})
    await memory.add_message(ChatMessage.assistant("Shipped."))
    got = await memory.get_messages()
    assert [m.role for m in got] == ["user", "assistant"]
    assert got[0].text == "where is order A-1042?"
    with pytest.raises(MessageError, match="ChatMessage or an OpenAI-format dict"):
        await memory.add_message("hello")  # type: ignore[arg-type]
    with pytest.raises(MessageError, match=r"message: .*role"):
        await memory.add_message({"content": "no role"})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(msgs=conversation(), n=st.integers(1, 12))
def test_window_properties(msgs: list[ChatMessage], n: int) -> None:
    out = asyncio.run(_window(msgs, n))
    assert [m for m in out if m.role == "system"] == [m for m in msgs if m.role == "system"]
    assert sum(1 for m in out if m.role != "system") <= n
    it = iter(msgs)
    assert all(any(m is o for o in it) for m in out), "order kept, nothing invented"
    assert_tool_pairing(out)
    assert_opens_with_user([m.replace(pinned=False) for m in out])


async def _window(msgs: list[ChatMessage], n: int) -> list[ChatMessage]:
    return await (await filled(n, msgs)).get_messages()
