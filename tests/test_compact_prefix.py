"""Prompt-cache friendly compaction (issue 14, part 6): compaction happens in steps, and
each step keeps the longest possible prefix of the previous call byte-identical."""

from __future__ import annotations

import itertools

import pytest

from ctxstack import CompactionOptions, ContextGuard, HistoryArchive
from ctxstack.compaction._mask import MASKED_KEY, apply_mask, plan_mask
from ctxstack.compaction._stages import compact_staged
from ctxstack.errors import ConfigError
from ctxstack.guard import CompactionEvent
from ctxstack.llm import ScriptedLLM
from ctxstack.messages import ChatMessage, ToolCall
from ctxstack.tokens import HEURISTIC
from ctxstack.tokens._counter import effective_budget

SYS = ChatMessage.system("You are a research agent.")
QUERY = ChatMessage.user("Read the pages.", pinned=True, metadata={"kind": "query"})


def group(i: int, words: int = 150) -> list[ChatMessage]:
    call = ToolCall(id=f"c{i}", name="read", arguments={"page": i})
    return [ChatMessage.assistant(None, tool_calls=[call]),
            ChatMessage.tool(f"c{i}", f"PAGE-{i:04d} " + " ".join(f"w{i}x{k}" for k in
                                                                  range(words)))]


def dumped(msgs: list[ChatMessage]) -> list[str]:
    return [m.model_dump_json() for m in msgs]


def cleared(msgs: list[ChatMessage]) -> list[int]:
    return [i for i, m in enumerate(msgs) if m.metadata.get(MASKED_KEY)]


async def test_a_second_mask_step_leaves_the_first_steps_placeholders_and_all_before_them_byte_identical(
) -> None:
    archive = HistoryArchive()
    events: list[CompactionEvent] = []
    guard = ContextGuard(default_budget=3_000, archive=archive, on_compact=events.append)
    history = [SYS, QUERY]
    runs: list[list[list[ChatMessage]]] = [[]]  # mask steps, split where a truncation falls
    for i in range(40):
        history = [*history, *group(i)]
        seen = len(events)
        history = await guard.check_and_compact(history)
        if len(events) > seen:
            if events[-1].method == "mask":
                runs[-1].append(history)
            else:
                runs.append([])
    assert max(len(run) for run in runs) >= 3
    for first, second in (pair for run in runs for pair in itertools.pairwise(run)):
        earlier = cleared(first)
        new = [i for i in cleared(second) if i not in earlier]
        assert new
        assert min(new) > max(earlier)  # the new ones extend the cleared prefix
        assert set(earlier) <= set(cleared(second))  # never uncleared, never re-rendered
        # Everything up to the first newly cleared output is byte-identical: the system
        # prompt, the query, every earlier placeholder and the messages between them.
        assert dumped(second[: min(new)]) == dumped(first[: min(new)])


def test_placeholders_are_deterministic_for_the_same_message_and_ref() -> None:
    msgs = [SYS, QUERY, *[m for i in range(8) for m in group(i)]]
    options = CompactionOptions()
    plan = plan_mask(msgs, 1_500, options, HEURISTIC)
    assert plan
    refs = [f"r{i}" for i in range(len(plan.indices))]
    once, twice = apply_mask(msgs, plan, refs, options), apply_mask(msgs, plan, refs, options)
    assert dumped(once) == dumped(twice)
    # planning again over the result clears nothing that is already cleared
    again = plan_mask(once, 1_500, options, HEURISTIC)
    assert not set(again.indices) & set(plan.indices)


async def test_mask_fill_is_the_mask_stages_own_watermark() -> None:
    msgs = [SYS, QUERY, *[m for i in range(20) for m in group(i)]]
    fits = effective_budget(13_000, HEURISTIC)
    results = {}
    for fill in (0.5, 0.8):
        for target in (0.4, 0.9):  # the summary's watermark does not move the mask step
            res = await compact_staged(msgs, None, 13_000,
                                       CompactionOptions(mask_fill=fill, target_fill=target),
                                       counter=HEURISTIC)
            assert res.method == "mask"
            assert res.tokens_after <= fill * fits
            results[fill, target] = dumped(res.messages)
    assert results[0.5, 0.4] == results[0.5, 0.9]
    assert results[0.8, 0.4] == results[0.8, 0.9]
    assert len(cleared_json(results[0.5, 0.4])) > len(cleared_json(results[0.8, 0.4]))


def cleared_json(dumps: list[str]) -> list[str]:
    return [d for d in dumps if '"masked":true' in d]


async def test_consecutive_guard_calls_under_growth_compact_at_most_once_per_n_iterations(
) -> None:
    """After a compaction that reached its watermark, the next one cannot come before the
    growth has filled the room it made: with growth of at most ``g`` tokens per iteration
    and ``room`` tokens free, not within ``room // g`` iterations."""
    events: list[CompactionEvent] = []
    budget = 8_000
    llm = ScriptedLLM(handler=lambda m, t: "Pages read so far.")
    guard = ContextGuard(llm, default_budget=budget, archive=HistoryArchive(),
                         on_compact=events.append)
    fits = effective_budget(budget, guard.counter)
    history = [SYS, QUERY]
    at: list[int] = []
    after: list[int] = []
    growth = 0
    for i in range(100):
        new = group(i, words=100 + (i * 37) % 120)
        growth = max(growth, guard.counter.count_messages(new))
        seen = len(events)
        history = await guard.check_and_compact([*history, *new])
        assert guard.counter.count_messages(history) <= fits
        if len(events) > seen:
            at.append(i)
            after.append(events[-1].tokens_after)
    assert len(at) >= 4
    for (i, tokens), j in zip(zip(at, after, strict=True), at[1:], strict=False):
        assert j - i >= (fits - tokens) // growth
    # A mask step leaves at least (1 - mask_accept) of the budget free, so masking never
    # recurs on the very next call: the only one-call gaps end in the summary.
    gaps = [j - i for i, j in itertools.pairwise(at)]
    assert all(events[k + 1].method == "llm" for k, gap in enumerate(gaps) if gap == 1)
    assert len(at) <= 100 // 3


async def test_a_mask_step_that_would_leave_the_context_near_the_budget_gives_way_to_the_summary(
) -> None:
    msgs = [SYS, QUERY, *[m for i in range(20) for m in group(i, words=300)]]
    llm = ScriptedLLM(handler=lambda m, t: "Pages read so far.")
    archive = HistoryArchive()
    # 0.35 of the budget is out of the mask's reach here (two whole groups plus 18
    # placeholders fill ~0.4 of it), the budget itself is not
    tight = CompactionOptions(mask_fill=0.3, mask_accept=0.35)
    res = await compact_staged(msgs, llm, 14_000, tight, counter=HEURISTIC, archive=archive)
    assert res.method == "llm"
    assert len(llm.calls) == 1
    assert res.masked == 0
    assert len(archive) == res.archived == len(res.summarized)
    # the same mask is taken when it leaves enough room, or when there is no summariser
    loose = CompactionOptions(mask_fill=0.3, mask_accept=1.0)
    assert (await compact_staged(msgs, llm, 14_000, loose, counter=HEURISTIC)).method == "mask"
    assert (await compact_staged(msgs, None, 14_000, tight, counter=HEURISTIC)).method == "mask"
    # a failing summariser falls back to that mask, not to truncation
    broken = ScriptedLLM(handler=lambda m, t: "")
    fallback = await compact_staged(msgs, broken, 14_000, tight, counter=HEURISTIC,
                                    archive=HistoryArchive())
    assert fallback.method == "mask"
    assert fallback.reason
    assert len(fallback.messages) == len(msgs)
    assert fallback.masked == len(cleared(fallback.messages)) > 0


def test_mask_fill_may_not_exceed_mask_accept() -> None:
    with pytest.raises(ConfigError, match="mask_fill"):
        CompactionOptions(mask_fill=0.8, mask_accept=0.7)
    assert CompactionOptions(mask_fill=0.7, mask_accept=0.7).mask_fill == 0.7


async def test_without_a_summariser_a_truncation_leaves_the_low_watermark() -> None:
    """A truncation filled to the brim is undone by the next message: one truncation, and
    one rewritten cached prefix, per call. It keeps whole units up to ``target_fill`` of
    the budget instead, so the next truncation is several calls away."""
    events: list[CompactionEvent] = []
    guard = ContextGuard(default_budget=3_000, on_compact=events.append)
    fits = effective_budget(3_000, guard.counter)
    low = effective_budget(int(3_000 * guard.options.target_fill), guard.counter)
    history = [SYS, QUERY]
    truncated: list[int] = []
    for i in range(60):
        new = group(i)
        seen = len(events)
        history = await guard.check_and_compact([*history, *new])
        assert guard.counter.count_messages(history) <= fits
        assert history[-2:] == new
        assert history[-1] is new[-1]
        if len(events) > seen and events[-1].method == "truncate":
            truncated.append(i)
            assert events[-1].tokens_after <= low
    assert len(truncated) >= 3
    assert all(j - i >= 3 for i, j in itertools.pairwise(truncated))


async def test_a_newest_unit_beyond_the_watermark_is_kept_whole_up_to_the_budget() -> None:
    guard = ContextGuard(default_budget=3_000)
    big = group(99, words=550)  # ~2,200 tokens: over 0.6 of the budget, within it
    assert guard.counter.count_messages(big) > 0.6 * 3_000
    history = [SYS, QUERY, *[m for i in range(6) for m in group(i)], *big]
    out = await guard.check_and_compact(history)
    assert out[-1] is big[-1]
    assert out[-2] is big[-2]
    assert guard.counter.count_messages(out) <= effective_budget(3_000, guard.counter)


async def test_a_caller_that_refits_its_whole_history_gets_a_stable_window_not_headroom(
) -> None:
    """``carried=False`` (a memory's view, a per-request filter: the next call fits the
    whole stored history again) leaves no watermark headroom — it would only drop
    context — but a window whose start moves in steps (``tests/test_stable_window.py``):
    it holds more than the budget less one step and one unit, and a call with one more
    message sends the same prefix."""
    history = [SYS, QUERY, *[m for i in range(40) for m in group(i)]]
    guard = ContextGuard(default_budget=3_000)
    fits = effective_budget(3_000, guard.counter)
    low = effective_budget(int(3_000 * guard.options.target_fill), guard.counter)
    carried = (await guard.check(history)).messages
    refitted = (await guard.check(history, carried=False)).messages
    assert guard.counter.count_messages(carried) <= low
    step = fits - int(fits * guard.options.target_fill)
    unit = guard.counter.count_messages(group(0))
    assert fits - step - unit < guard.counter.count_messages(refitted) <= fits
    assert refitted[-1] is history[-1]
    assert carried[-1] is history[-1]
    grown = [*history, *group(40, words=20)]
    again = (await guard.check(grown, carried=False)).messages
    # the same window start; only the output leaving the newest groups is newly cleared
    tail = 2 * (guard.options.mask_keep_groups + 1)
    assert dumped(again[: len(refitted) - tail]) == dumped(refitted[:-tail])
    assert again[2] is refitted[2]
