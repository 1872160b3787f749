"""``smart_truncate``: the heuristic fallback that always produces a usable window.

Rules, in priority order (docs/DESIGN.md §3, layer 2):

1. The system prompt (leading system messages) and every pinned unit are kept.
2. The remaining budget is filled newest → oldest with whole units (a tool call and its
   results are one unit); the first unit that does not fit stops the walk, so the kept
   history is a contiguous recent suffix. Original order is preserved in the output.
3. The newest unit is never dropped just because it is big: if it alone does not fit,
   it is cut head+tail to fit (see :mod:`ctxstack.compaction._cut`).
4. A rolling summary (system message of kind ``"summary"``) is history, not system
   prompt, but it condenses everything older than itself, so after the newest unit it is
   kept in preference to older verbatim messages, when it fits whole.
5. The kept history never opens with an assistant or tool turn whose user turn was
   dropped: leading orphan units are dropped. If that would leave no history turn at all
   (the whole budget went to one long tool loop, or only the pinned query would remain),
   the user message that opened the loop is kept as an *anchor* (cut if needed) followed
   by the newest units that fit — the only case where the kept history is not contiguous.

A pinned assistant or tool message may open the history: pinning is the caller's explicit
choice and wins over rule 5.

Input from a broken log (orphan tool results, calls without results) is repaired
first: see :func:`smart_truncate`.

Cost: one pass to split the list, one walk, one assembly — linear in the number of
messages, with per-message estimates cached on the messages.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from ctxstack.compaction._compactor import CompactionContext
from ctxstack.compaction._cut import cut_group
from ctxstack.compaction._groups import (
    Layout,
    Unit,
    split_layout,
)
from ctxstack.compaction._result import CompactionResult
from ctxstack.errors import ConfigError
from ctxstack.messages import ChatMessage, repair_tool_turns
from ctxstack.tokens import (
    DEFAULT_COUNTER,
    TokenCounter,
)
from ctxstack.tokens._counter import effective_budget

MIN_CUT_TOKENS = 24
"""Below this much room a cut message would be little more than its marker: drop instead."""

Kept = dict[int, list[ChatMessage] | None]
"""Unit index → replacement messages (a cut unit) or None (kept unchanged)."""


def check_budget(max_tokens: object, name: str = "max_tokens") -> int:
    """Return ``max_tokens`` if it is a positive int, else raise :class:`ConfigError`."""
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens <= 0:
        raise ConfigError(f"{name}: must be a positive integer, got {max_tokens!r}")
    return max_tokens


def smart_truncate(
    messages: Sequence[ChatMessage], max_tokens: int, *, counter: TokenCounter | None = None
) -> list[ChatMessage]:
    """Fit ``messages`` into ``max_tokens`` without an LLM. See the module docstring.

    "Fits" means within ``effective_budget(max_tokens, counter)``: the counter's margin
    (the default heuristic's measured error) is kept free so the result fits by the
    model's own tokenizer too; an exact counter has no margin.

    The input is first made a valid request (:func:`ctxstack.messages.repair_tool_turns`:
    orphan tool results dropped, interrupted calls given a placeholder result), so what
    comes back can be sent as it is even when the input came from a broken log.

    Returns a new list (the input is untouched); a valid list within budget comes back
    as a plain copy.
    If the system prompt and pinned messages alone exceed the budget they are still all
    returned — nothing else is — and the result is over budget: dropping them would be
    worse than overflowing, and the caller can detect it by estimating the result.
    """
    check_budget(max_tokens)
    counter = counter or DEFAULT_COUNTER
    limit = effective_budget(max_tokens, counter)
    msgs = repair_tool_turns(messages)
    if counter.count_messages(msgs) <= limit:
        return msgs
    layout = split_layout(msgs, counter)
    pinned_tokens = sum(u.tokens for u in layout.units if u.pinned)
    budget = limit - layout.prompt_tokens - pinned_tokens
    kept = plan_truncation(msgs, layout, budget, counter)
    return assemble(msgs, layout, kept)


def plan_truncation(
    msgs: Sequence[ChatMessage], layout: Layout, budget: int, counter: TokenCounter
) -> Kept:
    """Which non-pinned units to keep (and how cut) within ``budget`` tokens."""
    units = layout.units
    history = [i for i, u in enumerate(units) if not u.pinned and not u.summary]
    summaries = [i for i, u in enumerate(units) if not u.pinned and u.summary]
    history.reverse()
    summaries.reverse()

    kept: Kept = {}
    left = _walk(msgs, units, history, budget, kept, counter, summaries=summaries)

    orphans, opened = _leading_orphans(units, kept)
    if not orphans:
        return kept
    for i in orphans:
        left += _cost(units[i], kept.pop(i), counter)
    if opened and any(i in kept for i in history):
        _reserve(units, summaries, kept, left)
        return kept

    # No history turn survived (only summaries, or a pinned query opening the window):
    # keep the loop's opening user message as an anchor rather than an empty window.
    anchor = next(
        (
            i
            for i in range(orphans[0] - 1, -1, -1)
            if units[i].user_led and not units[i].pinned
        ),
        None,
    )
    if anchor is None:
        _reserve(units, summaries, kept, left)
        return kept
    anchored = _anchored(msgs, units, anchor, history, summaries, budget, counter)
    if anchored is None:
        _reserve(units, summaries, kept, left)
        return kept
    return anchored


def _walk(
    msgs: Sequence[ChatMessage],
    units: Sequence[Unit],
    newest_first: Sequence[int],
    left: int,
    kept: Kept,
    counter: TokenCounter,
    *,
    summaries: Sequence[int] = (),
) -> int:
    """Keep units newest → oldest while they fit; cut the newest if it alone does not.

    Summaries are reserved right after the newest unit (before it, when it must be cut).
    Returns the budget left.
    """
    for n, i in enumerate(newest_first):
        unit = units[i]
        if unit.tokens <= left:
            kept[i] = None
            left -= unit.tokens
        elif n == 0 and left >= MIN_CUT_TOKENS:
            # The newest unit will be cut to fit. Summaries go first when the cut still
            # gets a useful share: a summary condenses all older history, the cut only
            # shortens one oversized output.
            reserved = [j for j in summaries if j not in kept]
            room = _reserve(units, summaries, kept, left)
            if room < MIN_CUT_TOKENS:
                for j in reserved:
                    kept.pop(j, None)
                room = left
            cut = cut_group(msgs[unit.start : unit.stop], room, counter)
            if cut is None:
                for j in reserved:
                    kept.pop(j, None)
                break
            kept[i] = cut
            left = room - counter.count_messages(cut)
        else:
            break
        if n == 0:
            left = _reserve(units, summaries, kept, left)
    # No history unit kept (or none at all): the summaries still get their chance.
    return _reserve(units, summaries, kept, left)


def _reserve(units: Sequence[Unit], summaries: Sequence[int], kept: Kept, left: int) -> int:
    """Keep each (not yet kept) summary that fits whole; return the budget left."""
    for i in summaries:
        if i not in kept and units[i].tokens <= left:
            kept[i] = None
            left -= units[i].tokens
    return left


def _cost(unit: Unit, replacement: list[ChatMessage] | None, counter: TokenCounter) -> int:
    return unit.tokens if replacement is None else counter.count_messages(replacement)


def _leading_orphans(units: Sequence[Unit], kept: Kept) -> tuple[list[int], bool]:
    """Kept units that open the history as assistant/tool turns without a user turn.

    Walks the kept and pinned units in order; system units are skipped, the first pinned
    or user-led unit ends the scan. Returns the orphans and whether such an opening unit
    was found after them.
    """
    orphans: list[int] = []
    for i, unit in enumerate(units):
        if not (unit.pinned or i in kept) or unit.lead == "system":
            continue
        if unit.pinned or unit.user_led:
            return orphans, True
        orphans.append(i)
    return orphans, False


def _anchored(
    msgs: Sequence[ChatMessage],
    units: Sequence[Unit],
    anchor: int,
    history_newest_first: Sequence[int],
    summaries: Sequence[int],
    budget: int,
    counter: TokenCounter,
) -> Kept | None:
    """Anchor user message + the newest units after it that fit; None if it cannot fit.

    The anchor is promised a quarter of the budget (or its size, if smaller) before the
    newest units are walked; whatever they leave also goes to it.
    """
    anchor_tokens = units[anchor].tokens
    promised = min(anchor_tokens, max(budget // 4, MIN_CUT_TOKENS))
    if promised > budget:
        return None
    kept: Kept = {}
    after = [i for i in history_newest_first if i > anchor]
    left = _walk(msgs, units, after, budget - promised, kept, counter) + promised
    if anchor_tokens <= left:
        kept[anchor] = None
        left -= anchor_tokens
    else:
        cut = cut_group(msgs[units[anchor].start : units[anchor].stop], left, counter)
        if cut is None or left < MIN_CUT_TOKENS:
            return None
        kept[anchor] = cut
        left -= counter.count_messages(cut)
    _reserve(units, summaries, kept, left)
    return kept


def assemble(msgs: Sequence[ChatMessage], layout: Layout, kept: Kept) -> list[ChatMessage]:
    """System prompt, then pinned and kept units in their original order."""
    out = list(msgs[: layout.prompt_end])
    for i, unit in enumerate(layout.units):
        if unit.pinned:
            out.extend(msgs[unit.start : unit.stop])
        elif i in kept:
            replacement = kept[i]
            out.extend(msgs[unit.start : unit.stop] if replacement is None else replacement)
    return out


class Truncate:
    """Strategy ``"truncate"``: :func:`smart_truncate`, the last resort (no model call).

    Always fits. Everything it drops is archived first when there is an archive.
    """

    name = "truncate"
    method: Literal["truncate"] = "truncate"

    async def compact(
        self, messages: list[ChatMessage], ctx: CompactionContext
    ) -> CompactionResult | None:
        return await self.truncate(messages, ctx)

    async def truncate(self, messages: list[ChatMessage], ctx: CompactionContext
                       ) -> CompactionResult:
        """The truncation (never ``None``: the pipeline's last resort calls it directly)."""
        out = smart_truncate(messages, ctx.budget, counter=ctx.counter)
        archived = await ctx.archive_messages(dropped_messages(messages, out))
        return ctx.result(messages, out, "truncate",
                          reason=None if ctx.llm is not None else "no_llm", archived=archived)


def dropped_messages(
    before: Sequence[ChatMessage], after: Sequence[ChatMessage]
) -> list[ChatMessage]:
    """Messages of ``before`` that are not (the same object) in ``after``."""
    kept = {id(m) for m in after}
    return [m for m in before if id(m) not in kept]
