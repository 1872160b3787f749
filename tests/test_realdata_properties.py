"""Properties over logs broken the way real ones are (Hypothesis).

Random mixes of user turns, assistant answers, parallel tool calls (ids reused across
turns), results that arrive late, never, twice, or for a call that does not exist, and
system notes. Whatever the mix: the repair yields a valid request and is idempotent, and
``smart_truncate`` / ``WindowMemory`` results are valid requests within budget.
"""

from __future__ import annotations

import asyncio

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ctxstack import ChatMessage, CompactUtils, ToolCall, WindowMemory
from ctxstack.messages import repair_tool_turns, tool_turns_valid
from ctxstack.messages._tool_turns import tool_turn_problems
from ctxstack.tokens import DEFAULT_COUNTER
from ctxstack.tokens._counter import effective_budget

IDS = ["call_1", "call_2", "toolu_3", "4f1c-uuid", "functions.f:0"]

event = st.one_of(
    st.tuples(st.just("user"), st.text(max_size=40)),
    st.tuples(st.just("answer"), st.text(max_size=40)),
    st.tuples(st.just("calls"), st.lists(st.sampled_from(IDS), min_size=1, max_size=3)),
    st.tuples(st.just("result"), st.sampled_from([*IDS, "orphan_9"])),
    st.tuples(st.just("note"), st.text(max_size=20)),
)


def build(events: list[tuple[str, object]]) -> list[ChatMessage]:
    out = [ChatMessage.system("You are an agent.")]
    for kind, value in events:
        match kind:
            case "user":
                out.append(ChatMessage.user(str(value)))
            case "answer":
                out.append(ChatMessage.assistant(str(value)))
            case "calls":
                calls = [ToolCall(id=i, name="bash", arguments={"n": n})
                         for n, i in enumerate(value)]  # type: ignore[arg-type]
                out.append(ChatMessage.assistant("thinking", tool_calls=calls))
            case "result":
                out.append(ChatMessage.tool(str(value), "output " * 20))
            case _:
                out.append(ChatMessage.system(f"note: {value}"))
    return out


SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(st.lists(event, max_size=30))
def test_repair_always_yields_a_valid_idempotent_request(events: list[tuple[str, object]]
                                                          ) -> None:
    messages = build(events)
    assert tool_turns_valid(messages) == (not tool_turn_problems(messages))
    repaired = repair_tool_turns(messages)
    assert tool_turn_problems(repaired) == []
    assert repair_tool_turns(repaired) == repaired
    # nothing that is not a tool result is ever dropped, and their order is kept
    kept = [m for m in repaired if m.role != "tool"]
    assert kept == [m for m in messages if m.role != "tool"]


@SETTINGS
@given(st.lists(event, max_size=30), st.integers(min_value=40, max_value=1_500))
@example(events=[("result", "call_1"), ("note", "0\U00010000"), ("note", "\U00010000" * 2)],
         budget=40)  # the orphan result dropped, the notes join the system prompt
def test_truncation_of_a_broken_log_is_valid_and_fits(events: list[tuple[str, object]],
                                                      budget: int) -> None:
    messages = build(events)
    out = CompactUtils.smart_truncate(messages, budget)
    assert tool_turn_problems(out) == []
    # The system prompt is kept: the leading system messages once the log is repaired
    # (smart_truncate repairs first; a dropped orphan result can join notes to the prompt).
    repaired = repair_tool_turns(messages)
    prompt = next((i for i, m in enumerate(repaired) if m.role != "system"), len(repaired))
    fixed = DEFAULT_COUNTER.count_messages(repaired[:prompt])
    if fixed <= effective_budget(budget, DEFAULT_COUNTER):
        assert DEFAULT_COUNTER.count_messages(out) <= effective_budget(budget, DEFAULT_COUNTER)


@SETTINGS
@given(st.lists(event, max_size=30), st.integers(min_value=1, max_value=12))
def test_window_of_a_broken_log_is_valid(events: list[tuple[str, object]], size: int) -> None:
    async def run() -> list[ChatMessage]:
        memory = WindowMemory(size)
        for m in build(events):
            await memory.add_message(m)
        return await memory.get_messages()

    out = asyncio.run(run())
    assert tool_turn_problems(out) == []
