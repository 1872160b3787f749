"""Hypothesis properties of smart_truncate and llm_compact over random conversations."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxstack.compaction import CompactUtils
from ctxstack.llm import ScriptedLLM
from ctxstack.messages import ChatMessage
from ctxstack.tokens import HEURISTIC
from ctxstack.tokens._counter import effective_budget
from tests.conversations import (
    assert_opens_with_user,
    assert_subsequence,
    assert_tool_pairing,
    conversation_and_budget,
    fixed_tokens,
    is_summary,
    snapshot,
    system_prompt,
)

SETTINGS = settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def check_common(out: list[ChatMessage], msgs: list[ChatMessage], budget: int) -> None:
    prompt = system_prompt(msgs)
    assert all(a is b for a, b in zip(out, prompt, strict=False)), "system prompt moved"
    assert len(out) >= len(prompt), "system prompt lost"
    for m in msgs:
        if m.pinned and not is_summary(m):
            assert any(o is m for o in out), f"pinned message lost: {m!r}"
    # "fits" keeps the default counter's margin free (ctxstack.tokens._counter.effective_budget)
    limit = effective_budget(budget, HEURISTIC)
    if fixed_tokens(msgs) <= limit:
        assert HEURISTIC.count_messages(out) <= limit
    assert_tool_pairing(out)
    assert_opens_with_user(out)


@SETTINGS
@given(case=conversation_and_budget())
def test_smart_truncate_invariants(case: tuple[list[ChatMessage], int]) -> None:
    msgs, budget = case
    before = snapshot(msgs)
    out = CompactUtils.smart_truncate(msgs, budget)
    assert snapshot(msgs) == before, "input mutated"
    check_common(out, msgs, budget)
    assert_subsequence(out, msgs)
    if HEURISTIC.count_messages(msgs) <= effective_budget(budget, HEURISTIC):
        assert out == msgs
        assert out is not msgs


def _summariser(size: int) -> ScriptedLLM:
    def answer(messages: Sequence[ChatMessage], tools: object) -> str:
        # Mentions a value from the request so facts are sometimes already present.
        return ("Summary: the user discussed ORD-4521 and 東京. " * size).strip()

    return ScriptedLLM(handler=answer)


@SETTINGS
@given(
    case=conversation_and_budget(minimum=40),
    keep_recent=st.integers(0, 6),
    summary_size=st.integers(1, 60),
    target_fill=st.sampled_from([0.3, 0.6, 0.9]),
)
def test_llm_compact_invariants(
    case: tuple[list[ChatMessage], int], keep_recent: int, summary_size: int, target_fill: float
) -> None:
    msgs, budget = case
    before = snapshot(msgs)
    llm = _summariser(summary_size)
    res = asyncio.run(
        CompactUtils.compact_detailed(
            msgs, llm, budget, keep_recent=keep_recent, target_fill=target_fill
        )
    )
    out = res.messages
    assert snapshot(msgs) == before, "input mutated"
    check_common(out, msgs, budget)
    summaries = [m for m in out if is_summary(m)]
    assert len(summaries) <= 1, "summaries piled up"
    if res.method == "llm":
        assert res.summary is not None
        assert res.reason is None
        prompt = system_prompt(msgs)
        if summaries:
            assert out[len(prompt)] is res.summary, "summary not right after the system prompt"
        assert_subsequence([m for m in out if m is not res.summary], msgs)
        assert all(any(s is m for m in msgs) for s in res.summarized)
        assert not any(s is m for s in res.summarized for m in out)
        assert res.usage.calls == 1
    else:
        assert_subsequence(out, msgs)
    if res.method == "none":
        assert out == msgs
        assert not llm.calls
    assert res.tokens_after == HEURISTIC.count_messages(out)
    assert res.messages_after == len(out)
