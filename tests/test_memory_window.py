"""WindowMemory: last N non-system messages, all system messages, tool groups whole."""

from __future__ import annotations

import asyncio
import itertools

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


async def filled(n: int, msgs: list[ChatMessage], step: int = 1) -> WindowMemory:
    mem = WindowMemory(n, step=step)
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


async def _window(msgs: list[ChatMessage], n: int, step: int) -> list[ChatMessage]:
    return await (await filled(n, msgs, step)).get_messages()


# ------------------------------------------------------------------ step (prompt caching)
def prefix_moves(calls: list[list[ChatMessage]]) -> int:
    """How many calls do not extend the previous call's messages (a cache rewrite)."""
    return sum(1 for a, b in itertools.pairwise(calls) if b[: len(a)] != a)


async def chat_calls(mem: WindowMemory, turns: int, tools_every: int = 0) -> list[list[ChatMessage]]:
    """Each turn: the user's question is added and the window read (the model call), then
    the reply (with a tool group every ``tools_every`` turns) is added."""
    await mem.add_message(SYS)
    calls = []
    for i in range(turns):
        await mem.add_message(ChatMessage.user(f"q{i}"))
        calls.append(await mem.get_messages())
        if tools_every and i % tools_every == 0:
            for m in group(f"t{i}", n=2):
                await mem.add_message(m)
        await mem.add_message(ChatMessage.assistant(f"a{i}"))
    return calls


async def test_a_step_keeps_the_prefix_between_moves_and_the_window_within_its_bounds() -> None:
    slid = await chat_calls(WindowMemory(20), 200)
    stepped = await chat_calls(WindowMemory(20, step=10), 200)
    # sliding by one: every call past the window's size rewrites the prefix
    assert prefix_moves(slid) >= 185
    # stepping by ten messages (five turns): one rewrite per five turns
    assert prefix_moves(stepped) <= 200 // 5 + 1
    for i, call in enumerate(stepped[20:], start=20):
        held = [m for m in call if m.role != "system"]
        assert 10 <= len(held) <= 20  # N − k + 1, less one where rounded to a user turn
        assert held[0].role == "user"
        assert held[-1].text == f"q{i}"
    # the newest messages are the same ones a sliding window holds
    assert all(a[-5:] == b[-5:] for a, b in zip(slid, stepped, strict=True))


async def test_a_step_survives_pruning_and_tool_groups() -> None:
    """The grid is counted from the first message ever added, so pruning the store (which
    drops what can never re-enter) moves no window; tool groups stay whole."""
    mem = WindowMemory(9, step=4)
    calls = await chat_calls(mem, 300, tools_every=3)
    everything: list[ChatMessage] = [SYS]
    for i in range(300):
        everything.append(ChatMessage.user(f"q{i}"))
        window = set(window_indices(everything, 9, 4))
        assert calls[i] == [m for j, m in enumerate(everything)
                            if m.role == "system" or j in window]
        assert_tool_pairing(calls[i])
        assert_opens_with_user(calls[i][1:])
        if i % 3 == 0:
            everything += group(f"t{i}", n=2)
        everything.append(ChatMessage.assistant(f"a{i}"))
    assert len(mem._messages) <= 2 * 9 + 16 + 1
    # the edge moves at most once per 4 messages added (900 here); sliding, at every call
    added = sum(1 for m in everything if m.role != "system")
    assert prefix_moves(calls) <= added // 4 + 1
    assert prefix_moves(await chat_calls(WindowMemory(9), 300, 3)) >= 295


async def test_a_long_tool_loop_keeps_its_user_message_with_a_step() -> None:
    async def loop(mem: WindowMemory) -> list[list[ChatMessage]]:
        await mem.add_message(ChatMessage.user("run the audit"))
        calls = []
        for i in range(30):  # 60 messages: a call and its result each
            for m in group(f"g{i}"):
                await mem.add_message(m)
            calls.append(await mem.get_messages())
        return calls

    calls = await loop(WindowMemory(6, step=3))
    for call in calls[3:]:
        assert call[0].text == "run the audit"
        assert 1 + 2 <= len(call) <= 6
        assert_tool_pairing(call)
    assert prefix_moves(calls) <= 60 // 3 + 1
    assert prefix_moves(await loop(WindowMemory(6))) >= 27


async def test_clear_restarts_the_grid() -> None:
    mem = WindowMemory(4, step=4)
    for i in range(3):
        await mem.add_message(ChatMessage.user(f"old{i}"))
    await mem.clear()
    for i in range(6):
        await mem.add_message(ChatMessage.user(f"m{i}") if i % 2 == 0
                              else ChatMessage.assistant(f"m{i}"))
    # six messages, grid from the cleared start: the edge moves from 2 to the next
    # multiple of 4, so the window holds m4, m5 (not shifted by the cleared three)
    assert [m.text for m in await mem.get_messages()] == ["m4", "m5"]


@pytest.mark.parametrize("bad", [0, -1, 2.5, "2", True, 7])
def test_invalid_step_is_rejected_naming_it(bad: object) -> None:
    with pytest.raises(ConfigError, match=r"step: must be an integer from 1 to max_messages \(6\)"):
        WindowMemory(6, step=bad)  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(msgs=conversation(), n=st.integers(1, 12), data=st.data())
def test_window_properties(msgs: list[ChatMessage], n: int, data: st.DataObject) -> None:
    step = data.draw(st.integers(1, n))
    out = asyncio.run(_window(msgs, n, step))
    assert [m for m in out if m.role == "system"] == [m for m in msgs if m.role == "system"]
    assert sum(1 for m in out if m.role != "system") <= n
    it = iter(msgs)
    assert all(any(m is o for o in it) for m in out), "order kept, nothing invented"
    assert_tool_pairing(out)
    assert_opens_with_user([m.replace(pinned=False) for m in out])
    # never more than the sliding window's messages: a step only delays the edge's moves
    slid = asyncio.run(_window(msgs, n, 1))
    assert {id(m) for m in out} <= {id(m) for m in slid} | {id(m) for m in msgs
                                                            if m.role == "system"}

