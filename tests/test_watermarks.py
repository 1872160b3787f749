"""Watermarks are shares of the room for history, not of the whole budget.

A real agent's system prompt (policy, tool rules) can be most of a small budget: τ-bench's
airline policy is ~1,200 tokens, and a budget of "the system prompt plus 40% of the rest"
leaves the history a few hundred. A watermark taken over the whole budget then fell below
the system prompt alone: the truncation stage filled the budget to the brim (its headroom
computed over the whole budget went to the system prompt), so every next message compacted
again — one compaction, and one rewritten cached prefix, per call; the mask stage cleared
every output it could, its target out of reach.
"""

from __future__ import annotations

import itertools

import pytest

from ctxstack.compaction import CompactionOptions, HistoryArchive
from ctxstack.compaction._groups import fixed_tokens
from ctxstack.compaction._options import watermark
from ctxstack.guard import CompactionEvent, ContextGuard
from ctxstack.llm import ScriptedLLM
from ctxstack.messages import ChatMessage, ToolCall
from ctxstack.testing import first_sentence_summarizer
from ctxstack.tokens import HEURISTIC
from ctxstack.tokens._counter import effective_budget

BUDGET = 10_000
POLICY = ChatMessage.system(" ".join(
    f"Rule {i}: check the booking reference and the passenger's name before acting."
    for i in range(420)))


def turn(i: int) -> list[ChatMessage]:
    return [ChatMessage.user(f"Question {i}: what about flight HAT{i:03d} on May {i % 28 + 1}? "
                             "I need the seats and the fare class."),
            ChatMessage.assistant(f"Answer {i}: HAT{i:03d} departs at 09:{i % 60:02d}, "
                                  "12 economy seats left, fare class Y.")]


def test_watermark_is_the_fixed_part_plus_a_share_of_what_it_leaves() -> None:
    assert watermark(1_000, 0, 0.6) == 600
    assert watermark(1_000, 800, 0.5) == 900
    # nothing left for history: the limit itself (no watermark below the fixed part)
    assert watermark(1_000, 1_000, 0.6) == 1_000
    assert watermark(1_000, 1_500, 0.6) == 1_000


def test_fixed_tokens_count_the_system_prompt_and_pinned_messages_only() -> None:
    pinned = ChatMessage.user("Always answer in French.", pinned=True)
    summary = ChatMessage.summary("[Conversation summary]\nEarlier: the user booked HAT001.")
    msgs = [POLICY, summary, *turn(1), pinned, *turn(2)]
    assert fixed_tokens(msgs, HEURISTIC) == (HEURISTIC.count_messages([POLICY])
                                              + HEURISTIC.count_messages([pinned]))
    assert fixed_tokens([], HEURISTIC) == 0


@pytest.mark.parametrize("llm", [False, True], ids=["truncate", "summary"])
async def test_a_long_system_prompt_still_leaves_headroom_after_a_compaction(
        llm: bool) -> None:
    """With a system prompt past ``target_fill`` of the budget, a compaction leaves
    ``1 − target_fill`` of the room for history free, so the next turns append without
    compacting again (before: the truncation filled the budget, and every turn compacted)."""
    limit = effective_budget(BUDGET, HEURISTIC)
    fixed = HEURISTIC.count_messages([POLICY])
    assert fixed > 0.6 * limit  # the case: the old watermark fell below the prompt
    events: list[CompactionEvent] = []
    guard = ContextGuard(ScriptedLLM(handler=first_sentence_summarizer) if llm else None, default_budget=BUDGET, archive=HistoryArchive(),
                         on_compact=events.append)
    context: list[ChatMessage] = [POLICY]
    compacted_at: list[int] = []
    for i in range(60):
        context = await guard.check_and_compact([*context, *turn(i)])
        if events and (not compacted_at or len(events) > len(compacted_at)):
            compacted_at.append(i)
            assert context[0] is POLICY
            # the low watermark over the room, not over the budget (slack: whole turns)
            low = fixed + int((limit - fixed) * 0.6)
            assert HEURISTIC.count_messages(context) <= low + HEURISTIC.count_messages(turn(i))
        assert HEURISTIC.count_messages(context) <= limit
    turn_tokens = HEURISTIC.count_messages(turn(0))
    headroom_turns = int((limit - fixed) * 0.4) // turn_tokens
    assert headroom_turns >= 3
    # consecutive compactions are at least the headroom's turns apart (not one a turn)
    gaps = [b - a for a, b in itertools.pairwise(compacted_at)]
    assert gaps, compacted_at
    assert min(gaps) >= headroom_turns - 1, compacted_at


def _tool_turn(i: int, size: int) -> list[ChatMessage]:
    call = ToolCall(id=f"c{i}", name="search_flights", arguments={"day": i})
    rows = "\n".join(f"HAT{i:03d}-{r:03d} JFK SEA 2024-05-{i % 28 + 1:02d} economy 12 seats"
                     for r in range(size))
    return [ChatMessage.user(f"Find flights for day {i}."),
            ChatMessage.assistant(None, tool_calls=[call]),
            ChatMessage.tool(f"c{i}", rows),
            ChatMessage.assistant(f"Day {i}: several flights found.")]


async def test_the_mask_stage_clears_only_down_to_its_watermark_over_the_room() -> None:
    """The mask step clears the oldest outputs until the context is within ``mask_fill``
    of the room for history (the system prompt plus that share of what it leaves), and
    no further: over the whole budget its target sat ~800 tokens lower here, and it
    cleared two more outputs than needed."""
    policy = ChatMessage.system(" ".join(
        f"Rule {i}: check the booking reference and the passenger's name before acting."
        for i in range(240)))
    msgs = [policy]
    for i in range(12):
        msgs += _tool_turn(i, 21)
    limit = effective_budget(BUDGET, HEURISTIC)
    assert HEURISTIC.count_messages(msgs) > limit
    events: list[CompactionEvent] = []
    guard = ContextGuard(default_budget=BUDGET, on_compact=events.append,
                         options=CompactionOptions(mask_fill=0.8))
    out = await guard.check_and_compact(msgs)
    assert [e.method for e in events] == ["mask"]
    tools = [m for m in out if m.role == "tool"]
    cleared = [i for i, m in enumerate(tools) if m.metadata.get("masked")]
    assert cleared == list(range(len(cleared)))  # oldest first
    assert 0 < len(cleared) < len(tools) - 2  # not every output it could clear
    fixed = HEURISTIC.count_messages([policy])
    low = fixed + int((limit - fixed) * 0.8)  # the system prompt + 80% of what it leaves
    assert low - int(limit * 0.8) > 500  # far from 80% of the whole budget
    tokens = HEURISTIC.count_messages(out)
    assert tokens <= low
    # one clear fewer would be above the watermark: the step stopped as soon as it could
    saved = (HEURISTIC.count_messages([msgs[3]])
             - HEURISTIC.count_messages([out[out.index(tools[0])]]))
    assert tokens > low - saved
