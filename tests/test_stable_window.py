"""Stable windows for callers that refit their whole stored history at every call.

A session's or memory's view (OpenAI Agents, LlamaIndex, ``DbMemory``) or a per-request
filter hands the guard the whole stored history each time (``carried=False``) and keeps
nothing of the last result. Filling the budget each time moves the window's start, and
the masked set, with every new message: every call rewrites the provider's cached prefix.
With epoch-aligned boundaries the start and the masked set move only in steps, so most
consecutive calls share their prefix byte for byte.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxstack import CompactionOptions, ContextGuard, HistoryArchive
from ctxstack.compaction import SUMMARY_PREFIX, smart_truncate
from ctxstack.compaction._mask import apply_mask, plan_mask
from ctxstack.errors import ConfigError
from ctxstack.guard._events import first_changed
from ctxstack.messages import ChatMessage, ToolCall
from ctxstack.tokens import HEURISTIC
from ctxstack.tokens._counter import effective_budget
from tests.conversations import (
    assert_opens_with_user,
    assert_subsequence,
    assert_tool_pairing,
    conversation_and_budget,
    fixed_tokens,
)

SYS = ChatMessage.system("You are a research agent.")


def chat_turn(i: int, rng: random.Random) -> list[ChatMessage]:
    words = " ".join(f"w{i}x{k}" for k in range(rng.randint(10, 40)))
    return [ChatMessage.user(f"Question {i}: {words}"),
            ChatMessage.assistant(f"Answer {i}: " + words[::-1])]


def loop_step(i: int, words: int = 120) -> list[ChatMessage]:
    call = ToolCall(id=f"c{i}", name="read", arguments={"page": i})
    return [ChatMessage.assistant(None, tool_calls=[call]),
            ChatMessage.tool(f"c{i}", f"PAGE-{i:04d} " + " ".join(
                f"p{i}y{k}" for k in range(words)))]


def starts_with(longer: Sequence[ChatMessage], prefix: Sequence[ChatMessage]) -> bool:
    """``prefix`` is the opening of ``longer``, message for message (the same objects)."""
    return len(prefix) <= len(longer) and all(a is b for a, b in zip(prefix, longer,
                                                                    strict=False))


def history_tokens(msgs: Sequence[ChatMessage]) -> int:
    return HEURISTIC.count_messages([m for m in msgs if m.role != "system"])


def test_the_window_start_moves_in_steps_and_consecutive_calls_share_their_prefix() -> None:
    rng = random.Random(7)
    stored = [SYS]
    budget, stride = 4_000, 1_200
    limit = effective_budget(budget, HEURISTIC)
    room = limit - HEURISTIC.count_messages([SYS])
    largest = 0
    previous: list[ChatMessage] | None = None
    moves = calls = 0
    for i in range(150):
        turn = chat_turn(i, rng)
        largest = max(largest, *(HEURISTIC.count_messages([m]) for m in turn))
        stored += turn
        out = smart_truncate(stored, budget, stride=stride)
        assert HEURISTIC.count_messages(out) <= limit
        assert out[-2:] == turn
        assert out[-1] is turn[-1]
        assert_tool_pairing(out)
        assert_opens_with_user(out)
        if HEURISTIC.count_messages(stored) <= limit:
            assert out == stored
            continue
        calls += 1
        # the window never holds less than the budget less one epoch, the unit that
        # straddles the epoch's start and a leading orphan unit dropped after it
        assert history_tokens(out) >= room - stride - 2 * largest
        if previous is not None and not starts_with(out, previous):
            moves += 1
        previous = out
    assert calls > 100
    # each move drops at least an epoch (~stride less a turn): a handful over 150 turns
    grown = history_tokens(stored) - room
    assert moves <= grown // (stride - largest) + 1
    assert moves <= calls // 4


def test_without_a_stride_the_window_start_moves_with_every_turn() -> None:
    """The plain walk (the baseline the stride exists for): the budget is refilled at
    each call, so its start moves nearly every time the history grows."""
    rng = random.Random(7)
    stored = [SYS]
    outs = []
    for i in range(80):
        stored += chat_turn(i, rng)
        outs.append(smart_truncate(stored, 4_000))
    over = [o for o in outs if o[1] is not stored[1]]
    kept_prefix = sum(starts_with(b, a) for a, b in itertools.pairwise(over))
    assert kept_prefix <= len(over) // 4


def test_a_tool_loop_opened_by_one_user_message_keeps_it_as_the_anchor() -> None:
    task = ChatMessage.user("Read every page and report the totals.")
    stored = [SYS, task]
    previous: list[ChatMessage] | None = None
    moves = 0
    for i in range(120):
        stored += loop_step(i, words=30)
        out = smart_truncate(stored, 3_000, stride=900)
        assert HEURISTIC.count_messages(out) <= effective_budget(3_000, HEURISTIC)
        assert out[1] is task  # the loop's opening user message, then a whole suffix
        assert_tool_pairing(out)
        if previous is not None and not starts_with(out, previous):
            moves += 1
        previous = out
    assert moves <= 120 // 4


def test_a_summary_checkpoint_stays_ahead_of_the_window() -> None:
    rng = random.Random(3)
    summary = ChatMessage.system(f"{SUMMARY_PREFIX}\nEarlier: the user chose plan B.",
                                 metadata={"kind": "summary"})
    stored = [SYS, summary, *[m for i in range(60) for m in chat_turn(i, rng)]]
    out = smart_truncate(stored, 3_000, stride=800)
    assert out[:2] == [SYS, summary]
    assert out[1] is summary
    assert out[2].role == "user"
    assert HEURISTIC.count_messages(out) <= effective_budget(3_000, HEURISTIC)


def test_a_newest_turn_larger_than_the_budget_falls_back_to_the_cut() -> None:
    rng = random.Random(5)
    stored = [SYS, *[m for i in range(10) for m in chat_turn(i, rng)],
              ChatMessage.user("Summarise this: " + "zz " * 6_000)]
    out = smart_truncate(stored, 2_000, stride=500)
    assert HEURISTIC.count_messages(out) <= effective_budget(2_000, HEURISTIC)
    assert out[-1].metadata.get("truncated_chars")  # the newest message, cut to fit


@pytest.mark.parametrize("stride", [0, -5, 1.5, True, "100"])
def test_a_stride_that_is_not_a_positive_integer_is_refused(stride: object) -> None:
    with pytest.raises(ConfigError, match="stride"):
        smart_truncate([SYS, ChatMessage.user("hi")], 100, stride=stride)  # type: ignore[arg-type]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=conversation_and_budget(), stride=st.integers(1, 3_000))
def test_a_stable_window_keeps_every_truncation_invariant(
    case: tuple[list[ChatMessage], int], stride: int
) -> None:
    msgs, budget = case
    out = smart_truncate(msgs, budget, stride=stride)
    limit = effective_budget(budget, HEURISTIC)
    if fixed_tokens(msgs) <= limit:
        assert HEURISTIC.count_messages(out) <= limit
    assert_tool_pairing(out)
    assert_opens_with_user(out)
    assert_subsequence(out, msgs)
    assert all(m in out for m in msgs if m.pinned)


def rewritten_share(before: Sequence[ChatMessage], after: Sequence[ChatMessage]) -> float:
    """The share of ``after``'s tokens from the first message that differs from
    ``before`` on the wire: what a provider's prompt cache has to write anew."""
    at = next((i for i, (a, b) in enumerate(zip(before, after, strict=False))
               if a.to_openai() != b.to_openai()), min(len(before), len(after)))
    return HEURISTIC.count_messages(after[at:]) / HEURISTIC.count_messages(after)


def masked_runs(stride: int | None) -> list[float]:
    options = CompactionOptions()
    stored = [SYS, ChatMessage.user("Read the pages.")]
    shares, previous, sets = [], None, []
    for i in range(45):
        stored += loop_step(i, words=400)
        if HEURISTIC.count_messages(stored) <= 30_000:
            continue
        plan = plan_mask(stored, 30_000, options, HEURISTIC, stride=stride)
        out = apply_mask(stored, plan, [None] * len(plan.indices), options)
        sets.append(set(plan.indices))
        if previous is not None:
            shares.append(rewritten_share(previous, out))
        previous = out
    # each call's cleared outputs include the previous call's: oldest first, never undone
    assert all(a <= b for a, b in itertools.pairwise(sets))
    return shares


def test_stateless_masking_clears_whole_epochs_so_fewer_calls_rewrite_the_context() -> None:
    plain, stable = masked_runs(None), masked_runs(18_000)
    # without the stride every call clears the next output in the middle of the context
    assert sum(x > 0.4 for x in plain) == len(plain)
    assert sum(x > 0.4 for x in stable) <= 0.7 * len(plain)
    assert sum(stable) < 0.75 * sum(plain)


def test_holding_the_newest_groups_back_to_an_epoch_start_clears_them_in_steps() -> None:
    """Long past the point where clearing every old output is needed, the newest
    ``mask_keep_groups`` move on with every call: without ``hold`` one more output is
    cleared at every call (a rewrite of the context's tail each time); with it, the
    unmasked tail reaches back to an epoch start and is cleared an epoch at a time."""
    options = CompactionOptions()
    stored = [SYS, ChatMessage.user("Read the pages.")]
    plans: dict[bool, list[tuple[int, ...]]] = {False: [], True: []}
    for i in range(80):
        stored += loop_step(i, words=60)
        if i < 40:
            continue
        for hold in (False, True):
            plans[hold].append(plan_mask(stored, 4_000, options, HEURISTIC, stride=2_400,
                                         hold=hold).indices)
    changes = {hold: sum(a != b for a, b in itertools.pairwise(p)) for hold, p in plans.items()}
    assert changes[False] == len(plans[False]) - 1
    assert changes[True] <= changes[False] // 3
    # what is held back is only ever the newest outputs: the held plan clears a prefix
    # of what the plain plan clears
    for held, plain in zip(plans[True], plans[False], strict=True):
        assert held == plain[: len(held)]


async def test_equal_messages_keep_one_archive_reference() -> None:
    archive = HistoryArchive()
    original = loop_step(1)[1]
    first = await archive.add([original])
    again = await archive.add([original.model_copy(deep=True)])
    assert again == first
    assert len(archive) == 1
    other = await archive.add([original.replace(content="another output")])
    assert other != first
    assert len(archive) == 2


async def test_a_guard_refitting_stored_history_sends_a_stable_prefix() -> None:
    """The adapters' way: every call hands the guard fresh copies of the whole stored
    history (``carried=False``), with an archive. Most calls share the previous call's
    wire form as a prefix; the archive holds each cleared output once."""
    archive = HistoryArchive()
    guard = ContextGuard(default_budget=4_000, archive=archive)
    stored = [SYS, ChatMessage.user("Read the pages and answer.")]
    outs: list[list[ChatMessage]] = []
    for i in range(90):
        stored += loop_step(i)
        fresh = [m.model_copy(deep=True) for m in stored]  # as a store hands them out
        out, event = await guard.check(fresh, carried=False)
        assert guard.counter.count_messages(out) <= effective_budget(4_000, guard.counter)
        assert_tool_pairing(out)
        if event is not None and outs and len(outs[-1]) < len(stored) - 2:
            # the estimate is what this call writes after the previous call's result
            # (that caller sent the result, not its history)
            at = first_changed(outs[-1], out)
            assert event.cache_write_tokens_estimate == guard.counter.count_messages(out[at:])
        outs.append(out)
    over = [o for o in outs if len(o) < len(stored)]  # the calls that compacted
    shares = [rewritten_share(a, b) for a, b in itertools.pairwise(over)]
    # most calls write only what was appended since the last one
    assert sum(x > 0.5 for x in shares) <= len(shares) // 4
    assert len(archive) <= len(stored)  # each stored message archived once, not per call
