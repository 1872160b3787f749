"""``smart_truncate``: the heuristic fallback that always produces a usable window.

Rules, in priority order (docs/DESIGN.md §3, layer 2):

1. The system prompt (leading system messages) and every pinned unit are kept.
2. The remaining budget is filled newest → oldest with whole units (a tool call and its
   results are one unit). The first unit that does not fit does not end the walk: it is
   *squeezed* — that unit and the older units of its turn, back to the user message that
   opened it, are made to fit the room left (:func:`squeeze`): the turn's older steps
   are dropped oldest first while each would be cut to nothing anyway, then oversized
   tool outputs are cut head+tail, oldest first (:mod:`ctxstack.compaction._cut`, the
   same rule as the newest unit's cut), no call ever losing its result. Then older whole
   units are added while they fit (rarely any: the squeeze fills the room). The kept
   history is a contiguous recent suffix, or — when the squeeze dropped steps of a long
   tool loop — the loop's opening user message followed by a contiguous suffix.
   Original order is preserved in the output. (Before issue 29 the walk stopped at the
   first unit that did not fit, and a tool loop with one large output left the window
   nearly empty.)
3. The newest unit is never dropped just because it is big: if it alone does not fit,
   it is squeezed with its turn as above, or, when no opener is in reach, cut head+tail
   to fit on its own (see :mod:`ctxstack.compaction._cut`).
4. A rolling summary (system message of kind ``"summary"``) is history, not system
   prompt, but it condenses everything older than itself, so after the newest unit it is
   kept in preference to older verbatim messages, when it fits whole — except that the
   newest turn, whole, comes first.
5. The kept history never opens with an assistant or tool turn whose user turn was
   dropped: leading orphan units are dropped (the squeeze keeps a turn's opener, so this
   only happens when the squeeze was impossible). If that would leave no history turn
   at all, the user message that opened the loop is kept as an *anchor* (cut if needed)
   followed by the newest units that fit.

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

from ctxstack.compaction._archive import MASKED_KEY
from ctxstack.compaction._compactor import CompactionContext
from ctxstack.compaction._cut import cut_group, cut_message
from ctxstack.compaction._groups import Layout, Unit, split_layout
from ctxstack.compaction._result import CompactionResult
from ctxstack.errors import ConfigError
from ctxstack.messages import ChatMessage, repair_tool_turns
from ctxstack.tokens import DEFAULT_COUNTER, TokenCounter
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
    """Keep units newest → oldest while they fit; fill the rest with one squeezed turn.

    The first unit that does not fit does not end the walk: it is squeezed together with
    the older units of its turn (back to its user opener, or to a pinned message) and with
    the newer units of that turn already kept (orphans without the opener) into the room
    left (:func:`squeeze`); then older whole units are kept while they fit. When the turn
    cannot be squeezed (no opener in reach, or its calls, binary parts and opener alone do
    not fit) the walk stops there; the newest unit is then still cut on its own.

    Summaries are reserved right after the newest unit (before it, when it must be cut).
    Returns the budget left.
    """
    walkable = set(newest_first)
    p = 0
    squeezed = False
    while p < len(newest_first):
        i = newest_first[p]
        unit = units[i]
        first = p == 0
        if unit.tokens <= left:
            kept[i] = None
            left -= unit.tokens
            p += 1
        else:
            # The kept units of the same turn (after ``i``, before its next opener) would
            # be orphans without the opener: they are squeezed together with it.
            tail = _turn_tail(units, i, kept)
            held = [j for j in summaries if j in kept]
            freed = sum(units[j].tokens for j in held)
            if tail and held and unit.tokens <= left + freed:
                # The newest turn, whole, comes before a summary (which gets its chance
                # again once the walk ends).
                for j in held:
                    kept.pop(j)
                kept[i] = None
                left += freed - unit.tokens
                p += 1
                continue
            tail_tokens = sum(units[j].tokens for j in tail)
            if squeezed or left + tail_tokens < MIN_CUT_TOKENS:
                break
            squeezed = True
            reserved: list[int] = []
            room = left
            if first:
                # Summaries go first when the cut still gets a useful share: a summary
                # condenses all older history, the cut only shortens oversized outputs.
                reserved = [j for j in summaries if j not in kept]
                room = _reserve(units, summaries, kept, left)
                if room < MIN_CUT_TOKENS:
                    for j in reserved:
                        kept.pop(j, None)
                    reserved, room = [], left
            room += tail_tokens
            turn = _turn(units, i, walkable)
            plan = None if turn is None else squeeze(msgs, units, tail + turn, room, counter,
                                                     keep=len(tail) + 1)
            if plan is None:
                room -= tail_tokens
            if plan is None and first:
                cut = cut_group(msgs[unit.start : unit.stop], room, counter)
                plan = None if cut is None else {i: cut}
            if plan is None:
                for j in reserved:
                    kept.pop(j, None)
                break
            left = room - sum(_cost(units[j], r, counter) for j, r in plan.items())
            p += 1 if turn is None else len(turn)
            kept.update(plan)
        if first:
            left = _reserve(units, summaries, kept, left)
    # No history unit kept (or none at all): the summaries still get their chance.
    return _reserve(units, summaries, kept, left)


def _turn_tail(units: Sequence[Unit], oldest: int, kept: Kept) -> list[int]:
    """Kept units newer than ``oldest`` in its turn (up to the next user-led or pinned
    unit), newest first."""
    tail: list[int] = []
    for j in range(oldest + 1, len(units)):
        unit = units[j]
        if unit.pinned or unit.user_led:
            break
        if j in kept and not unit.summary:
            tail.append(j)
    tail.reverse()
    return tail


def _turn(units: Sequence[Unit], newest: int, walkable: set[int]) -> list[int] | None:
    """The walkable units from ``newest`` back to what opens its turn, newest first.

    The opener is the nearest older user-led unit (included) or pinned unit (excluded:
    pinned units are kept anyway and may open the history). Summaries are skipped (they
    are reserved apart and may precede any turn). None when no opener is reached through
    walkable units: keeping the turn would open the history on an orphan.
    """
    turn: list[int] = []
    for j in range(newest, -1, -1):
        unit = units[j]
        if unit.pinned:
            return turn or None
        if j not in walkable:
            if unit.summary:
                continue
            return None
        turn.append(j)
        if unit.user_led:
            return turn
    return None


def squeeze(
    msgs: Sequence[ChatMessage],
    units: Sequence[Unit],
    turn: Sequence[int],
    room: int,
    counter: TokenCounter,
    *,
    keep: int = 1,
) -> Kept | None:
    """Fit the units of one turn into ``room`` tokens; None if impossible.

    ``turn`` lists unit indices newest first: the ``keep`` newest are kept (cut if need
    be), the last one is the turn's opening user message when it is user-led (kept, cut
    only as a last resort), the ones between are the turn's older steps. Those older
    steps are dropped oldest first, each only while the excess is at least its whole
    size (cut to its marker it would keep nothing anyway), so the kept part is the
    opener, then a contiguous run of the newest steps: every call keeps its result.
    What is still over is then cut head+tail
    (:func:`~ctxstack.compaction._cut.cut_message`, token-bounded by the counter in
    use), each message as far as needed before the next is touched: tool outputs oldest
    first, then the other messages oldest first, the opener last. Tool-call arguments,
    audio and file parts are never cut, nor is a masked placeholder (its text never
    changes once written, so the prefix providers cache stays byte-identical).
    """
    opener = turn[-1] if len(turn) > keep and units[turn[-1]].user_led else None
    steps = [j for j in turn[keep:] if j != opener]
    excess = sum(units[j].tokens for j in turn) - room
    dropped: set[int] = set()
    for j in reversed(steps):
        if excess < units[j].tokens:
            break
        dropped.add(j)
        excess -= units[j].tokens
    kept_units = sorted(j for j in turn if j not in dropped)
    members = [m for j in kept_units for m in range(units[j].start, units[j].stop)]
    last = () if opener is None else range(units[opener].start, units[opener].stop)
    cuttable = [m for m in members if not msgs[m].metadata.get(MASKED_KEY)]
    order = [m for m in cuttable if msgs[m].role == "tool"]
    order += [m for m in cuttable if msgs[m].role != "tool" and m not in last]
    order += [m for m in cuttable if m in last]
    cuts: dict[int, ChatMessage] = {}
    for m in order:
        if excess <= 0:
            break
        cost = counter.count_message(msgs[m])
        target = max(cost - excess, min(cost, MIN_CUT_TOKENS))
        if target >= cost:
            continue
        cut = cut_message(msgs[m], target, counter)
        if cut is None:
            continue
        cuts[m] = cut
        excess -= cost - counter.count_message(cut)
    if excess > 0:
        return None
    plan: Kept = {}
    for j in kept_units:
        span = range(units[j].start, units[j].stop)
        plan[j] = [cuts.get(m, msgs[m]) for m in span] if any(m in cuts for m in span) else None
    if sum(_cost(units[j], r, counter) for j, r in plan.items()) > room:
        return None
    return plan


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
