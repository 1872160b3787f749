"""ContextGuard: the per-iteration budget enforcer (docs/DESIGN.md §3, layer 3)."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from typing import Any

import pytest

from ctxstack.budget import ModelBudget
from ctxstack.compaction import SUMMARY_PREFIX, CompactionOptions
from ctxstack.compaction._prompts import HINTS, LANGUAGE_INSTRUCTION, compaction_prompt
from ctxstack.compaction._working_summary import parse_summary
from ctxstack.errors import ConfigError, LLMError, MessageError
from ctxstack.guard import CompactionEvent, ContextGuard
from ctxstack.llm import LLMResult, ScriptedLLM, Usage
from ctxstack.messages import ChatMessage, ToolCall, from_openai_messages
from ctxstack.protocol import ToolSpec
from ctxstack.tokens import HEURISTIC, SEED_HEURISTIC, CalibratingCounter

MARKER = re.compile(r"\[Truncated: ([\d,]+) characters removed\]")
BUDGET = 3_000
SUMMARY_ONLY = CompactionOptions(mask=False)
"""These tests exercise the summary and truncation stages on tool-heavy conversations, so
masking (which now runs first and would satisfy the budget on its own) is turned off;
the staged order is tested in tests/test_compact_stages.py."""


def summary_guard(*args: Any, timeout: float | None = None, **kwargs: Any) -> ContextGuard:
    return ContextGuard(*args, options=SUMMARY_ONLY.with_(timeout=timeout), **kwargs)


# ---------------------------------------------------------------------------- helpers


def conversation(rounds: int, tool_chars: int = 2_000, *, query: str = "What is ACME's Q3 revenue?"
                 ) -> list[ChatMessage]:
    """System prompt, a pinned query, then ``rounds`` tool rounds (call + result)."""
    msgs = [
        ChatMessage.system("You are a careful research agent."),
        ChatMessage.user("Earlier question about ACME."),
        ChatMessage.assistant("Earlier answer: ACME makes widgets."),
        ChatMessage.user(query, pinned=True, metadata={"kind": "query"}),
    ]
    for i in range(rounds):
        call = ToolCall(id=f"call_{i}", name="search", arguments={"q": f"acme page {i}"})
        msgs.append(ChatMessage.assistant(f"Looking at page {i}.", tool_calls=[call]))
        msgs.append(ChatMessage.tool(f"call_{i}", f"page {i}: " + "data " * (tool_chars // 5)))
    return msgs


def summariser(text: str = "ACME's Q3 revenue search: pages 0-9 read, revenue $1.5M.",
               **kw: float) -> ScriptedLLM:
    return ScriptedLLM(handler=lambda msgs, tools: text, **kw)  # type: ignore[arg-type]


def tokens(msgs: Sequence[ChatMessage]) -> int:
    return HEURISTIC.count_messages(msgs)


def assert_well_formed(out: Sequence[ChatMessage], original: Sequence[ChatMessage]) -> None:
    """System prompt first, query pinned and present, order kept, tool groups whole."""
    assert out[0].role == "system"
    assert out[0].text == original[0].text
    queries = [m for m in out if m.kind == "query"]
    assert len(queries) == 1
    assert queries[0].pinned
    # Messages kept verbatim appear in their original order.
    positions = {id(m): i for i, m in enumerate(original)}
    kept = [positions[id(m)] for m in out if id(m) in positions]
    assert kept == sorted(kept)
    # Every tool result follows the assistant message that called it, and every call's
    # result is present (no split group).
    open_calls: set[str] = set()
    for m in out:
        if m.role == "tool":
            assert m.tool_call_id in open_calls, f"orphan tool result {m.tool_call_id}"
            open_calls.discard(m.tool_call_id)  # type: ignore[arg-type]
        else:
            assert not open_calls, f"tool calls without results: {open_calls}"
            if m.tool_calls:
                open_calls = {c.id for c in m.tool_calls}
    assert not open_calls


def snapshot(msgs: Sequence[ChatMessage]) -> list[dict[str, object]]:
    return [m.model_dump() for m in msgs]


class Recorder:
    def __init__(self) -> None:
        self.events: list[CompactionEvent] = []

    def __call__(self, event: CompactionEvent) -> None:
        self.events.append(event)


# ---------------------------------------------------------------------------- fast path


async def test_within_budget_returns_the_same_list_and_objects() -> None:
    llm = summariser()
    rec = Recorder()
    guard = summary_guard(llm, default_budget=64_000, on_compact=rec)
    msgs = conversation(5)
    before = list(msgs)
    out = await guard.check_and_compact(msgs, hint="react_iteration")
    assert out is msgs
    assert all(a is b for a, b in zip(out, before, strict=True))
    assert llm.calls == []
    assert rec.events == []
    assert guard.totals.checks == 1
    assert guard.totals.compactions == 0
    # A second call (the list grew by one round) is still the same-object fast path.
    msgs += conversation(1)[-2:]
    assert await guard.check_and_compact(msgs) is msgs


async def test_a_tuple_comes_back_as_a_list_of_the_same_objects() -> None:
    msgs = tuple(conversation(2))
    out = await summary_guard().check_and_compact(msgs)
    assert isinstance(out, list)
    assert all(a is b for a, b in zip(out, msgs, strict=True))


async def test_budget_argument_accepts_tokens_or_a_model_budget() -> None:
    guard = summary_guard(default_budget=100_000)
    msgs = conversation(10)  # about 5,000 tokens
    assert await guard.check_and_compact(msgs) is msgs
    small = ModelBudget(context_size=12_000, max_output_tokens=8_000)  # 4,000 usable
    out = await guard.check_and_compact(msgs, budget=small)
    assert tokens(out) <= 4_000
    out = await summary_guard(default_budget=small).check_and_compact(msgs)
    assert tokens(out) <= 4_000


# ---------------------------------------------------------------------------- compaction


async def test_over_budget_llm_compaction_yields_one_summary_within_budget() -> None:
    llm = summariser()
    rec = Recorder()
    guard = summary_guard(llm, default_budget=BUDGET, on_compact=rec)
    msgs = conversation(12)
    frozen = snapshot(msgs)
    copy = list(msgs)
    assert tokens(msgs) > BUDGET
    out = await guard.check_and_compact(msgs, hint="react_iteration")
    assert tokens(out) <= BUDGET
    summaries = [m for m in out if m.kind == "summary"]
    assert len(summaries) == 1
    assert summaries[0].role == "system"
    assert summaries[0].text.startswith(SUMMARY_PREFIX)
    assert "$1.5M" in summaries[0].text
    assert out.index(summaries[0]) == 1  # right after the system prompt
    assert_well_formed(out, msgs)
    assert out[-1] is msgs[-1]  # the newest round stays verbatim
    # The input is never mutated.
    assert msgs == copy
    assert snapshot(msgs) == frozen
    # One event, describing what happened.
    assert len(llm.calls) == 1
    (event,) = rec.events
    assert event.method == "llm"
    assert event.reason is None
    assert event.hint == "react_iteration"
    assert event.budget == BUDGET
    assert (event.messages_before, event.messages_after) == (len(msgs), len(out))
    assert event.tokens_before == tokens(msgs)
    assert event.tokens_after == tokens(out)
    assert event.summarized > 0
    assert event.usage == llm.total_usage
    assert event.usage.calls == 1
    assert event.duration_s >= 0
    assert event.fits
    assert not event.fell_back
    totals = guard.totals
    assert (totals.compactions, totals.llm_compactions, totals.fallbacks) == (1, 1, 0)
    assert totals.usage == llm.total_usage


async def test_without_a_compact_llm_it_truncates() -> None:
    rec = Recorder()
    guard = summary_guard(default_budget=BUDGET, on_compact=rec)
    msgs = conversation(12)
    out = await guard.check_and_compact(msgs)
    assert tokens(out) <= BUDGET
    assert not any(m.kind == "summary" for m in out)
    assert_well_formed(out, msgs)
    (event,) = rec.events
    assert event.method == "truncate"
    assert event.reason is None  # truncation by configuration is not a fallback
    assert event.usage == Usage()
    assert guard.totals.truncations == 1
    assert guard.totals.fallbacks == 0


def _raise(msgs: Sequence[ChatMessage], tools: Sequence[ToolSpec] | None) -> str:
    raise LLMError("503 upstream unavailable")


@pytest.mark.parametrize(
    ("name", "llm"),
    [
        ("raises", ScriptedLLM(handler=_raise)),
        ("raises a non-LLM error", ScriptedLLM([RuntimeError("bug in a wrapper")] * 2)),
        ("hangs past the timeout", summariser(delay=3.0)),
        ("returns empty text", summariser("")),
        ("returns whitespace", summariser("   \n ")),
        ("returns only an analysis block", summariser("<think>I should summarise...</think>")),
    ],
)
async def test_each_llm_failure_falls_back_to_truncation(name: str, llm: ScriptedLLM) -> None:
    rec = Recorder()
    guard = summary_guard(llm, default_budget=BUDGET, on_compact=rec, timeout=0.2)
    msgs = conversation(12)
    out = await guard.check_and_compact(msgs, hint="react_iteration")
    assert tokens(out) <= BUDGET, name
    assert not any(m.kind == "summary" for m in out)
    assert_well_formed(out, msgs)
    (event,) = rec.events
    assert event.method == "truncate"
    assert event.reason, name
    assert event.fell_back
    assert guard.totals.fallbacks == 1
    assert len(llm.calls) >= 1  # the LLM was tried


async def test_timeout_reason_says_so() -> None:
    rec = Recorder()
    guard = summary_guard(summariser(delay=3.0), default_budget=BUDGET, on_compact=rec,
                         timeout=0.2)
    await guard.check_and_compact(conversation(12))
    assert "time" in (rec.events[0].reason or "").lower()


@pytest.mark.parametrize("hint", HINTS)
async def test_each_hint_sends_its_own_prompt_with_the_language_instruction(hint: str) -> None:
    llm = summariser()
    guard = summary_guard(llm, default_budget=BUDGET)
    await guard.check_and_compact(conversation(12), hint=hint)
    (call,) = llm.calls
    sent = "\n".join(m.text for m in call.messages)
    assert compaction_prompt(hint) in sent
    assert LANGUAGE_INSTRUCTION in sent
    for other in HINTS:
        if other != hint:
            assert compaction_prompt(other) not in sent


async def test_a_custom_prompt_replaces_the_hint_prompt() -> None:
    llm = summariser()
    guard = ContextGuard(llm, default_budget=BUDGET,
                         options=SUMMARY_ONLY.with_(prompt="Summarise for an auditor."))
    await guard.check_and_compact(conversation(12), hint="planner_input")
    sent = "\n".join(m.text for m in llm.calls[0].messages)
    assert compaction_prompt("planner_input", custom="Summarise for an auditor.") in sent
    assert compaction_prompt("planner_input") not in sent


# ---------------------------------------------------------------------------- stage 1


async def test_an_oversized_message_is_cut_head_and_tail_keeping_its_fields() -> None:
    guard = summary_guard(default_budget=200_000, max_message_chars=50_000)
    msgs = conversation(2)
    huge = ChatMessage.tool("call_1", "BEGIN " + "r" * 120_000 + " END", name="fetch",
                            metadata={"source": "scrape"})
    msgs[-1] = huge
    frozen = snapshot(msgs)
    out = await guard.check_and_compact(msgs)
    assert out is not msgs
    assert snapshot(msgs) == frozen
    cut = out[-1]
    assert (cut.role, cut.tool_call_id, cut.name, cut.metadata) == (
        "tool", "call_1", "fetch", {"source": "scrape"}
    )
    assert len(cut.text) <= 50_000
    assert cut.text.startswith("BEGIN rrr")
    assert cut.text.endswith("rrr END")
    m = MARKER.search(cut.text)
    assert m is not None
    assert int(m.group(1).replace(",", "")) > 70_000
    assert all(a is b for a, b in zip(out[:-1], msgs[:-1], strict=True))
    assert guard.totals.cut_messages == 1
    assert guard.totals.compactions == 0
    # The cut list is now vetted: checking it again is the same-object fast path.
    assert await guard.check_and_compact(out) is out
    assert guard.totals.cut_messages == 1


async def test_vetting_is_per_limit() -> None:
    msg = ChatMessage.user("x" * 5_000)
    msgs = [msg]
    assert await summary_guard(max_message_chars=10_000).check_and_compact(msgs) is msgs
    out = await summary_guard(max_message_chars=1_000).check_and_compact(msgs)
    assert len(out[0].text) <= 1_000


# ---------------------------------------------------------------------------- pinned cap


def _inject(i: int, chars: int) -> ChatMessage:
    return ChatMessage.user(f"injected {i}: " + "i" * chars, pinned=True,
                            metadata={"kind": "inject"})


async def test_pinned_cap_unpins_injected_messages_oldest_first_never_the_query() -> None:
    rec = Recorder()
    # The seed's formula as the ruler (explicitly): ~4 characters per token, no margin.
    guard = summary_guard(default_budget=3_000, on_compact=rec, counter=SEED_HEURISTIC)
    msgs = conversation(6, tool_chars=800)
    # Four injected messages of ~600 tokens each: ~2,400 pinned > 1,500 (50% of 3,000),
    # so the two oldest must be unpinned (one is not enough).
    for i in range(4):
        msgs.append(_inject(i, 2_400))
        msgs.append(ChatMessage.assistant(f"noted {i}"))
    assert SEED_HEURISTIC.count_messages(msgs) > 3_000
    out = await guard.check_and_compact(msgs, hint="react_iteration")
    assert SEED_HEURISTIC.count_messages(out) <= 3_000
    (event,) = rec.events
    assert event.unpinned == 2
    still_pinned = [m.text[:10] for m in out if m.kind == "inject" and m.pinned]
    assert still_pinned == ["injected 2", "injected 3"]
    for old in ("injected 0", "injected 1"):
        kept = [m for m in out if m.text.startswith(old)]
        assert all(not m.pinned for m in kept)
    query = [m for m in out if m.kind == "query"]
    assert len(query) == 1
    assert query[0].pinned
    assert query[0].text == msgs[3].text


async def test_a_query_larger_than_the_budget_is_cut_not_dropped() -> None:
    guard = summary_guard(default_budget=4_000)
    msgs = conversation(1, query="QUESTION: " + "explain this log " * 3_000 + " END?")
    out = await guard.check_and_compact(msgs)
    assert tokens(out) <= 4_000
    (query,) = [m for m in out if m.kind == "query"]
    assert query.pinned
    assert query.text.startswith("QUESTION: explain")
    assert query.text.endswith("END?")
    assert MARKER.search(query.text)


# ---------------------------------------------------------------------------- rolling summary


async def test_two_react_iteration_compactions_merge_their_working_summaries() -> None:
    first = (
        "## Goal\nFind ACME's Q3 revenue\n"
        "## Key data\n- Q2 revenue: $1.1M\n- report id: RPT-7781\n"
        "## Tried and learned\n- web search: no Q3 figure\n"
        "## Errors still relevant\n- 401 on /v1/reports\n"
        "## Pending\n- fetch report RPT-7781\n- compare with Q2\n"
        "## Next step\nRetry with a token\n"
    )
    second = (
        "## Goal\nFind ACME's Q3 revenue\n"
        "## Key data\n- Q3 revenue: $1.5M\n"
        "## Errors still relevant\n- 401 on /v1/reports (resolved)\n"
        "## Pending\n- fetch report RPT-7781 (done)\n"
        "## Next step\nCompute the growth\n"
    )
    llm = ScriptedLLM([first, second])
    guard = summary_guard(llm, default_budget=BUDGET)
    msgs = await guard.check_and_compact(conversation(12), hint="react_iteration")
    for i in range(12, 24):
        call = ToolCall(id=f"call_{i}", name="search", arguments={"q": f"p{i}"})
        msgs = [*msgs, ChatMessage.assistant(None, tool_calls=[call]),
                ChatMessage.tool(f"call_{i}", "more " * 400)]
    out = await guard.check_and_compact(msgs, hint="react_iteration")
    assert len(llm.calls) == 2
    # The second summariser call saw the first summary.
    assert any("RPT-7781" in m.text for m in llm.calls[1].messages)
    (summary,) = [m for m in out if m.kind == "summary"]
    sections = parse_summary(summary.text.removeprefix(SUMMARY_PREFIX)).sections
    assert "Q2 revenue: $1.1M" in sections["Key data"]  # kept from the first
    assert "Q3 revenue: $1.5M" in sections["Key data"]  # added by the second
    assert sections["Pending"] == ["compare with Q2"]  # closed item dropped
    assert sections["Errors still relevant"] == []
    assert sections["Next step"] == ["Compute the growth"]
    assert tokens(out) <= BUDGET


async def test_repeated_compactions_keep_one_facts_list() -> None:
    llm = ScriptedLLM(handler=lambda m, t: "## Goal\nFind the dates\n## Next step\nGo on\n")
    guard = summary_guard(llm, default_budget=BUDGET)
    msgs = conversation(12)
    for k in range(3):
        msgs = await guard.check_and_compact(msgs, hint="react_iteration")
        for i in range(12):
            j = 100 * k + i
            call = ToolCall(id=f"c{j}", name="search", arguments={"q": f"2024-05-{i + 1:02d}"})
            msgs = [*msgs, ChatMessage.assistant(None, tool_calls=[call]),
                    ChatMessage.tool(f"c{j}", f"INV-{j:04d} " + "more " * 400)]
    assert len(llm.calls) == 3
    (summary,) = [m for m in msgs if m.kind == "summary"]
    assert summary.text.count("Facts kept verbatim:") == 1
    assert "Find the dates" in summary.text


async def test_scratchpad_blocks_never_reach_the_summary() -> None:
    llm = summariser("<think>what matters here?</think>Pages 0-9 read; Q3 revenue $1.5M.")
    out = await summary_guard(llm, default_budget=BUDGET).check_and_compact(conversation(12))
    (summary,) = [m for m in out if m.kind == "summary"]
    assert "Q3 revenue $1.5M" in summary.text
    assert "<think>" not in summary.text
    assert "what matters" not in summary.text


# ---------------------------------------------------------------------------- observability


async def test_async_callbacks_are_awaited_and_failing_ones_ignored(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[CompactionEvent] = []

    async def on_compact(event: CompactionEvent) -> None:
        seen.append(event)

    guard = summary_guard(summariser(), default_budget=BUDGET, on_compact=on_compact)
    await guard.check_and_compact(conversation(12))
    assert len(seen) == 1

    def broken(event: CompactionEvent) -> None:
        raise ValueError("dashboard down")

    guard = summary_guard(summariser(), default_budget=BUDGET, on_compact=broken)
    with caplog.at_level(logging.WARNING, logger="ctxstack.guard._guard"):
        out = await guard.check_and_compact(conversation(12))
    assert tokens(out) <= BUDGET
    assert "on_compact listener failed" in caplog.text


async def test_compactions_are_logged_at_info(caplog: pytest.LogCaptureFixture) -> None:
    guard = summary_guard(summariser(), default_budget=BUDGET)
    with caplog.at_level(logging.INFO, logger="ctxstack.guard._guard"):
        await guard.check_and_compact(conversation(12), hint="general")
    records = [r for r in caplog.records if r.name == "ctxstack.guard._guard"]
    assert any(r.levelno == logging.INFO and "compacted (llm, hint general)" in r.getMessage()
               for r in records)


async def test_totals_accumulate_and_reset() -> None:
    calls = iter([LLMError("down"), "summary two", "summary three"])

    def handler(msgs: Sequence[ChatMessage], tools: Sequence[ToolSpec] | None) -> str:
        reply = next(calls)
        if isinstance(reply, Exception):
            raise reply
        return reply

    llm = ScriptedLLM(handler=handler)
    guard = summary_guard(llm, default_budget=BUDGET)
    for _ in range(3):
        await guard.check_and_compact(conversation(12))
    totals = guard.totals
    assert totals.checks == 3
    assert totals.compactions == 3
    assert totals.fallbacks == 1
    assert totals.llm_compactions == 2
    assert totals.usage.calls == llm.total_usage.calls == 2
    assert totals.usage == llm.total_usage
    previous = guard.reset_totals()
    assert previous == totals
    assert guard.totals.compactions == 0


async def test_calibrating_counter_makes_the_guard_compact_earlier() -> None:
    msgs = conversation(5)  # ~2,600 heuristic tokens
    assert tokens(msgs) < BUDGET
    assert await summary_guard(default_budget=BUDGET).check_and_compact(msgs) is msgs
    counter = CalibratingCounter()
    for _ in range(20):  # the provider bills 1.6x the heuristic
        counter.observe(1_000, 1_600)
    guard = summary_guard(default_budget=BUDGET, counter=counter)
    out = await guard.check_and_compact(msgs)
    assert out is not msgs
    assert counter.count_messages(out) <= BUDGET


async def test_usage_of_a_result_with_reported_usage_is_counted() -> None:
    result = LLMResult(message=ChatMessage.assistant("Summary: revenue $1.5M"),
                       usage=Usage(input_tokens=900, output_tokens=40, calls=1))
    guard = summary_guard(ScriptedLLM([result]), default_budget=BUDGET)
    await guard.check_and_compact(conversation(12))
    assert guard.totals.usage == result.usage


# ---------------------------------------------------------------------------- bad input


async def test_unknown_hint_is_a_config_error_even_within_budget() -> None:
    guard = summary_guard()
    with pytest.raises(ConfigError, match="unknown hint 'react'"):
        await guard.check_and_compact(conversation(1), hint="react")


async def test_bad_budget_and_bad_messages_are_clear_errors() -> None:
    guard = summary_guard()
    with pytest.raises(ConfigError, match="budget"):
        await guard.check_and_compact(conversation(1), budget=0)
    with pytest.raises(ConfigError, match="budget"):
        await guard.check_and_compact(conversation(1), budget=True)
    with pytest.raises(MessageError, match=r"messages\[1\]: expected a ChatMessage, got dict"):
        await guard.check_and_compact([ChatMessage.user("hi"), {"role": "user"}])  # type: ignore[list-item]


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"default_budget": 0}, "default_budget"),
        ({"max_message_chars": 10}, "max_message_chars"),
        ({"pinned_cap": 0}, "pinned_cap"),
        ({"pinned_cap": 1.5}, "pinned_cap"),
        ({"options": {"keep_recent": 2}}, "options"),
        ({"archive": "not an archive"}, "archive"),
    ],
)
def test_bad_settings_are_config_errors_naming_the_setting(
    kwargs: dict[str, object], name: str
) -> None:
    with pytest.raises(ConfigError, match=name):
        ContextGuard(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"keep_recent": -1}, "keep_recent"),
        ({"timeout": 0}, "timeout"),
        ({"target_fill": 0}, "target_fill"),
        ({"prompt": "  "}, "prompt"),
        ({"strategies": []}, "strategies"),
        ({"strategies": ["mask"]}, "strategies"),
    ],
)
def test_compaction_settings_live_in_the_options_and_name_the_bad_one(
    kwargs: dict[str, object], name: str
) -> None:
    with pytest.raises(ConfigError, match=name):
        CompactionOptions(**kwargs)
    with pytest.raises(TypeError):  # the guard no longer repeats the options' fields
        ContextGuard(**kwargs)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- hooks


async def test_listeners_are_a_list_and_check_returns_its_own_event() -> None:
    first: list[str] = []
    later: list[str] = []
    guard = ContextGuard(default_budget=BUDGET, on_compact=[lambda e: first.append(e.method)])
    guard.on_compact.append(lambda e: later.append(e.method))
    within = await guard.check(conversation(1), BUDGET)
    assert within.event is None
    over = await guard.check(conversation(10), BUDGET)
    assert over.event is not None
    assert over.event.method in ("mask", "truncate")  # no summariser: the cheap stages
    assert tokens(over.messages) <= BUDGET
    assert first == later == [over.event.method]


def test_totals_sum_every_field_of_an_event() -> None:
    from ctxstack.guard import GuardTotals

    event = CompactionEvent(
        hint="general", method="llm", budget=10, messages_before=9, messages_after=3,
        tokens_before=50, tokens_after=9, summarized=5, unpinned=2, cut_messages=3,
        usage=Usage(input_tokens=7, output_tokens=1, calls=1), duration_s=0.5,
    )
    totals = GuardTotals().add(event).add(event).plus_checks(4, 1)
    assert (totals.compactions, totals.llm_compactions, totals.unpinned) == (2, 2, 4)
    assert (totals.cut_messages, totals.checks) == (7, 4)
    assert totals.usage == Usage(input_tokens=14, output_tokens=2, calls=2)
    assert totals.duration_s == pytest.approx(1.0)


async def test_cuts_are_counted_once_whether_or_not_the_call_compacts() -> None:
    guard = ContextGuard(default_budget=BUDGET, max_message_chars=3_000)
    big = [ChatMessage.system("s"), ChatMessage.user("x" * 4_000)]
    await guard.check(big, 64_000)  # cut, within budget afterwards
    over = conversation(10, tool_chars=2_000)
    over.append(ChatMessage.tool("call_9", "y" * 5_000))
    compacted = await guard.check(over, BUDGET)  # cut, then compacted
    assert compacted.event is not None
    assert compacted.event.cut_messages == 1
    assert guard.totals.cut_messages == 2
    assert guard.totals.checks == 2


# ---------------------------------------------------------------------------- plain dicts


async def test_openai_dicts_in_dicts_out() -> None:
    """Most users hold OpenAI-format dicts: the guard takes them and returns dicts — the
    very list when nothing changed, a fitted list of dicts when it compacted."""
    guard = ContextGuard(default_budget=BUDGET)
    small = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    assert await guard.check_and_compact(small) is small
    big = [{"role": "system", "content": "Be brief."}]
    for i in range(60):
        big += [{"role": "assistant", "content": None, "tool_calls": [
                    {"id": f"c{i}", "type": "function",
                     "function": {"name": "search", "arguments": json.dumps({"q": i})}}]},
                {"role": "tool", "tool_call_id": f"c{i}", "content": "row " * 300}]
    big.append({"role": "user", "content": "Which page had HOTEL-7?"})
    original = json.dumps(big)
    fitted = await guard.check_and_compact(big)
    assert json.dumps(big) == original  # input untouched
    assert all(isinstance(m, dict) for m in fitted)
    assert fitted[0] == big[0]
    assert fitted[-1] == big[-1]
    assert guard.counter.count_messages(from_openai_messages(fitted)) <= BUDGET


async def test_a_list_mixing_dicts_and_messages_names_the_converter() -> None:
    guard = ContextGuard(default_budget=BUDGET)
    with pytest.raises(MessageError, match=r"messages\[1\].*from_openai_messages"):
        await guard.check_and_compact([{"role": "user", "content": "a"}, ChatMessage.user("b")])
    with pytest.raises(MessageError, match=r"messages\[1\].*from_openai_messages"):
        await guard.check_and_compact([ChatMessage.user("a"), {"role": "user", "content": "b"}])
    with pytest.raises(MessageError, match=r"messages\[0\]"):
        await guard.check_and_compact([{"content": "no role"}])


async def test_compaction_functions_name_the_converter_for_dicts() -> None:
    """``smart_truncate`` and ``compact_detailed`` return ChatMessage lists, so they take
    only ChatMessage objects — a dict is refused with an error that says how to convert
    it (issue 31, item 5), never a bare AttributeError."""
    from ctxstack import CompactUtils

    given = [ChatMessage.system("s"), {"role": "user", "content": "hi"}]
    named = r"messages\[1\].*dict.*from_openai_messages"
    with pytest.raises(MessageError, match=named):
        CompactUtils.smart_truncate(given, 1_000)  # type: ignore[arg-type]
    with pytest.raises(MessageError, match=named):
        await CompactUtils.compact_detailed(given, None, 1_000)  # type: ignore[arg-type]
    with pytest.raises(MessageError, match=r"messages\[0\]: expected a ChatMessage, got str$"):
        CompactUtils.smart_truncate(["hi"], 1_000)  # type: ignore[list-item]
