"""A refitting caller (``carried=False``) is carried by the guard like an agent loop.

The adapters hand the guard fresh copies of their whole stored history at every call.
The guard remembers its last result per conversation and, when the next history extends
the input of that result, starts from it plus the new messages (``ctxstack.guard._refits``):
fewer compactions and fewer rewrites of the provider's cached context than planning from
the raw history each time — and any change to what was stored falls back to that plan.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from ctxstack import ContextGuard, HistoryArchive
from ctxstack.guard._refits import RefitMemo, mark
from ctxstack.messages import ChatMessage
from ctxstack.tokens._counter import effective_budget
from tests.conversations import assert_tool_pairing
from tests.test_stable_window import SYS, loop_step, rewritten_share

BUDGET = 4_000


def fresh(stored: list[ChatMessage]) -> list[ChatMessage]:
    """The stored rows as a store hands them out: new objects each read."""
    return [m.model_copy(deep=True) for m in stored]


async def refit_run(guard_for_call: Callable[[], ContextGuard], steps: int = 90
                    ) -> tuple[list[list[ChatMessage]], int, list[list[ChatMessage]]]:
    """(results, compactions, inputs) of a tool loop whose every call refits the store."""
    stored = [SYS, ChatMessage.user("Read the pages and answer.")]
    outs, inputs, compactions = [], [], 0
    for i in range(steps):
        stored += loop_step(i)
        rows = fresh(stored)
        out, event = await guard_for_call().check(rows, BUDGET, carried=False)
        compactions += event is not None
        outs.append(out)
        inputs.append(rows)
    return outs, compactions, inputs


async def loop_run(steps: int = 90) -> tuple[list[list[ChatMessage]], int]:
    """(results, compactions) of the same tool loop run as an agent loop: each call is the
    last result plus the new messages (``carried=True``)."""
    guard = ContextGuard(default_budget=BUDGET, archive=HistoryArchive())
    context = [SYS, ChatMessage.user("Read the pages and answer.")]
    outs, compactions = [], 0
    for i in range(steps):
        context, event = await guard.check([*context, *loop_step(i)], BUDGET)
        compactions += event is not None
        outs.append(context)
    return outs, compactions


def wire(messages: list[ChatMessage]) -> list[dict[str, object]]:
    return [m.to_openai() for m in messages]


async def test_a_refitting_caller_is_sent_what_an_agent_loop_sends() -> None:
    guard = ContextGuard(default_budget=BUDGET, archive=HistoryArchive())
    outs, compactions, inputs = await refit_run(lambda: guard)
    fits = effective_budget(BUDGET, guard.counter)
    for out, rows in zip(outs, inputs, strict=True):
        assert guard.counter.count_messages(out) <= fits
        assert_tool_pairing(out)
        assert out[0] is rows[0]
        assert out[-1] is rows[-1]  # kept messages are the caller's current objects
    # after the first compaction (planned from the history), call for call what the loop
    # that carries its context sends
    looped, loop_compactions = await loop_run()
    first = next(i for i, (a, b) in enumerate(zip(outs, inputs, strict=True))
                 if len(a) < len(b))
    assert first < 30
    assert [wire(o) for o in outs[first + 1:]] == [wire(o) for o in looped[first + 1:]]
    # and far fewer compactions and rewrites than planning each call from the history
    planned, planned_compactions, _ = await refit_run(
        lambda: ContextGuard(default_budget=BUDGET, archive=HistoryArchive()))
    assert compactions <= loop_compactions + 1
    assert compactions < 0.6 * planned_compactions, (compactions, planned_compactions)
    rewrites = sum(rewritten_share(a, b) for a, b in itertools.pairwise(outs))
    planned_rewrites = sum(rewritten_share(a, b) for a, b in itertools.pairwise(planned))
    assert rewrites < 0.9 * planned_rewrites, (rewrites, planned_rewrites)
    # between compactions each call sends the last one's messages, then the new ones
    extended = sum(1 for a, b in itertools.pairwise(outs) if wire(b[: len(a)]) == wire(a))
    assert extended >= len(outs) - 1 - compactions


async def test_an_edited_stored_message_falls_back_to_the_plan_from_the_history() -> None:
    """Nothing remembered is sent for a history that no longer extends its input: the
    result is what a guard with no memory makes of the same history."""
    stored = [SYS, ChatMessage.user("Read the pages and answer.")]
    guard = ContextGuard(default_budget=BUDGET)
    for i in range(40):
        stored += loop_step(i)
        await guard.check(fresh(stored), carried=False)
    stored[3] = stored[3].replace(content="PAGE-0000 corrected by the user")
    stored += loop_step(40)
    got = (await guard.check(fresh(stored), carried=False)).messages
    alone = (await ContextGuard(default_budget=BUDGET).check(fresh(stored), carried=False)
             ).messages
    assert [m.to_openai() for m in got] == [m.to_openai() for m in alone]


def marks(messages: list[ChatMessage]) -> tuple[int, ...]:
    return tuple(mark(m) for m in messages)


def test_the_memo_carries_only_an_extension_with_the_same_pins() -> None:
    memo = RefitMemo()
    rows = [SYS, ChatMessage.user("q"), *loop_step(0), *loop_step(1)]
    placeholder = rows[3].replace(content="[cleared]")
    memo.remember(rows, marks(rows), [rows[0], rows[1], rows[2], placeholder, rows[4], rows[5]])
    later = [*fresh(rows), *loop_step(2)]
    carried = memo.carried(later, marks(later))
    assert carried is not None
    assert carried[3] is placeholder
    assert [m is later[i] for i, m in enumerate(carried) if i != 3] == [True] * 7
    # a message pinned since keeps no replacement; an edit or a shorter history neither
    pinned = [*later[:3], later[3].replace(pinned=True), *later[4:]]
    assert memo.carried(pinned, marks(pinned)) is None
    edited = [*later[:4], later[4].replace(content="other"), *later[5:]]
    assert memo.carried(edited, marks(edited)) is None
    assert memo.carried(later[:4], marks(later[:4])) is None
    # an unanswered call at the end of the remembered result is no valid start
    memo.remember(rows, marks(rows), rows[:-1])
    assert memo.carried(later, marks(later)) is None
    assert memo.result_marks(rows) == [mark(m) for m in rows[:-1]]


def test_the_memo_is_bounded_and_keyed_by_conversation() -> None:
    memo = RefitMemo(kept=3)
    chats = [[SYS, ChatMessage.user(f"conversation {k}"), *loop_step(k)] for k in range(5)]
    for chat in chats:
        memo.remember(chat, marks(chat), chat[:2])
    for old in chats[:2]:  # the oldest two are forgotten
        assert memo.carried(fresh(old), marks(old)) is None
    for chat in chats[2:]:
        grown = [*fresh(chat), ChatMessage.user("more")]
        carried = memo.carried(grown, marks(grown))
        assert carried is not None
        assert [m.text for m in carried] == [chat[0].text, chat[1].text, "more"]
