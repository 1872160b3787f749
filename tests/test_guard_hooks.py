"""ContextGuard's hooks: ``on_check`` listeners (one report per check) and the memo that
keeps a grown conversation's check cheap (its results are property-tested in
tests/test_guard_properties.py)."""

from __future__ import annotations

import logging

import pytest

from ctxstack.budget import ModelBudget
from ctxstack.errors import ConfigError, MessageError
from ctxstack.guard import ContextGuard, GuardCheckEvent
from ctxstack.messages import ChatMessage, ToolCall
from ctxstack.tokens import HEURISTIC, CalibratingCounter, HeuristicCounter


def conversation(rounds: int, tool_chars: int = 2_000) -> list[ChatMessage]:
    msgs = [ChatMessage.system("You are a careful research agent."),
            ChatMessage.user("What is ACME's Q3 revenue?", pinned=True,
                             metadata={"kind": "query"})]
    for i in range(rounds):
        call = ToolCall(id=f"call_{i}", name="search", arguments={"q": f"acme page {i}"})
        msgs.append(ChatMessage.assistant(f"Looking at page {i}.", tool_calls=[call]))
        msgs.append(ChatMessage.tool(f"call_{i}", f"page {i}: " + "data " * (tool_chars // 5)))
    return msgs


# ---------------------------------------------------------------------------- on_check


async def test_each_check_is_reported_once_with_what_went_in_and_came_out() -> None:
    seen: list[GuardCheckEvent] = []
    guard = ContextGuard(default_budget=3_000, on_check=seen.append)
    small, big = conversation(1), conversation(30)
    within = await guard.check(small, hint="react_iteration")
    model_budget = ModelBudget(context_size=8_000, max_output_tokens=1_000)
    over = await guard.check(big, model_budget)
    assert len(seen) == 2
    first, second = seen
    assert first.messages_in is small
    assert first.result is within  # the very GuardCheck the caller got
    assert first.result.messages is small
    assert first.result.event is None
    assert (first.budget, first.hint) == (3_000, "react_iteration")
    assert second.messages_in is big
    assert second.result is over
    assert over.event is not None
    assert second.result.messages is not big
    assert (second.budget, second.hint) == (model_budget.usable_input_tokens, "general")


async def test_check_listeners_are_a_list_called_in_order_sync_or_async() -> None:
    order: list[str] = []

    async def later(event: GuardCheckEvent) -> None:
        order.append(f"async {len(event.messages_in)}")

    guard = ContextGuard(on_check=[lambda e: order.append("first")])
    guard.on_check.append(later)
    await guard.check_and_compact(conversation(1))
    assert order == ["first", "async 4"]


async def test_the_compaction_is_reported_before_the_check() -> None:
    order: list[str] = []
    guard = ContextGuard(default_budget=3_000, on_compact=lambda e: order.append("compact"),
                         on_check=lambda e: order.append("check"))
    await guard.check(conversation(10))
    assert order == ["compact", "check"]


async def test_a_failing_check_listener_is_logged_and_ignored(
    caplog: pytest.LogCaptureFixture,
) -> None:
    after: list[GuardCheckEvent] = []

    def broken(event: GuardCheckEvent) -> None:
        raise ValueError("meter down")

    guard = ContextGuard(on_check=[broken, after.append])
    msgs = conversation(1)
    with caplog.at_level(logging.WARNING, logger="ctxstack.guard._guard"):
        out = await guard.check_and_compact(msgs)
    assert out is msgs  # the agent goes on
    assert len(after) == 1  # and later listeners still hear of the check
    assert "on_check listener failed" in caplog.text


async def test_a_check_that_raises_reports_nothing() -> None:
    seen: list[GuardCheckEvent] = []
    guard = ContextGuard(on_check=seen.append)
    with pytest.raises(ConfigError):
        await guard.check(conversation(1), hint="nonsense")
    with pytest.raises(MessageError):
        await guard.check([ChatMessage.user("hi"), "not a message"])  # type: ignore[list-item]
    assert seen == []


# ---------------------------------------------------------------------------- the memo


async def test_a_grown_conversation_is_counted_from_where_it_changed() -> None:
    """The guard's total is exact whether the caller grows one list in place, passes new
    lists sharing the old messages, or rewrites the middle of the conversation."""
    counter = HeuristicCounter(margin=0.0)
    seen: list[GuardCheckEvent] = []
    guard = ContextGuard(default_budget=10**6, counter=counter, on_check=seen.append)
    msgs = conversation(20)
    assert await guard.check_and_compact(msgs) is msgs
    msgs.extend(conversation(2)[2:])  # the same list object, grown
    msgs[5] = msgs[5].replace(content="a different, much longer tool output " * 40)
    total = sum(counter.count_message(m) for m in msgs)
    over = await guard.check(msgs, total - 1)
    assert over.event is not None
    assert over.event.tokens_before == total
    assert (await guard.check(msgs, total)).event is None


async def test_an_in_place_vetting_state_is_per_limit() -> None:
    msg = ChatMessage.user("x" * 5_000)
    guard = ContextGuard(max_message_chars=10_000)
    msgs = [msg]
    assert await guard.check_and_compact(msgs) is msgs
    guard.max_message_chars = 1_000  # the remembered vetting was against 10,000
    out = await guard.check_and_compact(msgs)
    assert len(out[0].text) <= 1_000


async def test_a_non_additive_counter_is_asked_for_the_whole_total() -> None:
    """A calibrating counter's total is not a sum of per-message figures: the guard asks it
    for every check instead of memoising."""
    calibrating = CalibratingCounter(HeuristicCounter(margin=0.0))
    calibrating.observe(1_000, 2_000)  # learns a factor of about 2
    guard = ContextGuard(default_budget=10**6, counter=calibrating)
    msgs = conversation(20)
    await guard.check(msgs)
    msgs.append(ChatMessage.user("one more question"))
    expected = calibrating.count_messages(msgs)
    assert expected > HEURISTIC.count_messages(msgs)
    over = await guard.check(msgs, expected - 1)
    assert over.event is not None
    assert over.event.tokens_before == expected
