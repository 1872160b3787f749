"""``CompactionEvent.cache_write_tokens_estimate``: what a compaction costs the prompt cache.

A provider reads a call's prefix identical to the previous call's from its cache and
writes the rest; a compaction that rewrites the context from message ``k`` makes the next
call write every token from ``k`` on again. The event reports that figure so a caller
can weigh a compaction's saving against its cache cost.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Literal

from ctxstack.compaction import CompactionContext, CompactionOptions, CompactionResult
from ctxstack.guard import CompactionEvent, ContextGuard, GuardTotals
from ctxstack.guard._events import first_changed
from ctxstack.llm import ScriptedLLM
from ctxstack.messages import ChatMessage
from ctxstack.tokens import HEURISTIC
from tests.test_guard_hooks import conversation as tool_run

BUDGET = 3_000


def wire(m: ChatMessage) -> str:
    return json.dumps(m.to_openai(), separators=(",", ":"))


def rewritten_from(before: Sequence[ChatMessage], after: Sequence[ChatMessage]) -> int:
    """The first position whose wire JSON differs (the test's own reading of the rule)."""
    for i, (a, b) in enumerate(zip(before, after, strict=False)):
        if wire(a) != wire(b):
            return i
    return min(len(before), len(after))


async def test_a_mask_reports_the_tokens_from_the_first_cleared_output_on() -> None:
    msgs = tool_run(10)
    check = await ContextGuard(default_budget=BUDGET).check(msgs)
    event = check.event
    assert event is not None
    assert event.method == "mask"
    k = rewritten_from(msgs, check.messages)
    # The oldest output is the first one cleared: everything before it is the old prefix.
    assert k == 3
    assert msgs[3].role == "tool"
    assert check.messages[3].text != msgs[3].text
    assert event.cache_write_tokens_estimate == HEURISTIC.count_messages(check.messages[k:])
    assert 0 < event.cache_write_tokens_estimate < event.tokens_after


async def test_a_summary_reports_the_tokens_from_the_summary_on() -> None:
    msgs = tool_run(10)
    llm = ScriptedLLM(handler=lambda m, t: "Pages 0-7 read; revenue $1.5M.")
    guard = ContextGuard(llm, default_budget=BUDGET, options=CompactionOptions(mask=False))
    check = await guard.check(msgs)
    event = check.event
    assert event is not None
    assert event.method == "llm"
    k = rewritten_from(msgs, check.messages)
    assert 0 < k < len(check.messages)  # the system prompt (and pinned query) stay in place
    assert event.cache_write_tokens_estimate == HEURISTIC.count_messages(check.messages[k:])
    assert guard.totals.cache_write_tokens_estimate == event.cache_write_tokens_estimate


class LeaveAlone:
    """A mask strategy that finds nothing to clear and says the context fits as it is."""

    name = "leave-alone"
    method: Literal["mask"] = "mask"

    async def compact(self, messages: list[ChatMessage],
                      ctx: CompactionContext) -> CompactionResult | None:
        return CompactionResult(messages=list(messages), method="mask", tokens_before=0,
                                tokens_after=0, messages_before=len(messages),
                                messages_after=len(messages))


async def test_a_mask_that_changes_nothing_reports_zero() -> None:
    # System prompt and pinned query alone exceed the budget: nothing can be cleared or
    # dropped, so the compaction returns the context as it was (and warns); the next call
    # reads it all from the cache.
    msgs = [ChatMessage.system("rules " * 3_000),
            ChatMessage.user("Go.", pinned=True, metadata={"kind": "query"})]
    guard = ContextGuard(default_budget=BUDGET,
                         options=CompactionOptions(strategies=[LeaveAlone()]))
    check = await guard.check(msgs)
    assert check.event is not None
    assert check.event.method == "mask"
    assert [wire(m) for m in check.messages] == [wire(m) for m in msgs]
    assert check.event.cache_write_tokens_estimate == 0


def test_first_changed_ignores_metadata_and_identity_but_not_content() -> None:
    a = [ChatMessage.system("s"), ChatMessage.user("one"), ChatMessage.user("two")]
    tagged = [a[0], a[1].replace(metadata={"archive_ref": "x"}), ChatMessage.user("two")]
    assert first_changed(a, tagged) == 3  # same wire form throughout
    assert first_changed(a, [a[0], ChatMessage.user("ONE"), a[2]]) == 1
    assert first_changed(a, a[:2]) == 2  # a shorter result rewrites nothing it keeps
    assert first_changed(a, [*a, ChatMessage.user("three")]) == 3


def test_totals_sum_the_estimate() -> None:
    event = CompactionEvent(hint="general", method="mask", budget=10, messages_before=4,
                            messages_after=4, tokens_before=20, tokens_after=9,
                            cache_write_tokens_estimate=7)
    assert GuardTotals().add(event).add(event).cache_write_tokens_estimate == 14
