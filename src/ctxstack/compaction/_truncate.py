"""``smart_truncate``: the heuristic fallback that always produces a usable window.

Rules, in priority order (docs/DESIGN.md §3, layer 2):

1. The system prompt (leading system messages) and every pinned unit are kept.
2. The remaining budget is filled newest → oldest with whole units (a tool call and its
   results are one unit), kept verbatim. Original order is preserved in the output.
3. **The budget is filled** (issue 29): the first unit that does not fit does not end the
   walk. Its turn — that unit and the older units of the turn back to the user message
   (or pinned unit) that opened it — is fitted into the room left by cutting the turn's
   tool outputs head+tail, oldest first, and dropping its oldest steps when even cut they
   cannot fit (:mod:`ctxstack.compaction._fill`); then older whole units are added while
   they fit. Only tool outputs are cut, and every call keeps its result; the units already
   kept stay verbatim, except those after the boundary in its turn when the turn's opener
   does not fit beside them (orphans without it, they are refitted with it). The kept
   history is a contiguous recent suffix, or the turn's opener
   followed by one (when the turn's oldest steps were dropped). ``fill`` caps how much of
   the budget this may fill (the compaction pipeline leaves its low watermark's headroom,
   see :class:`Truncate`); ``fill=0`` is the plain walk, which stops at the first unit that
   does not fit.
4. The newest unit is never dropped just because it is big: if it alone does not fit,
   it is cut head+tail to fit (see :mod:`ctxstack.compaction._cut`).
5. A rolling summary (system message of kind ``"summary"``) is history, not system
   prompt, but it condenses everything older than itself, so after the newest unit it is
   kept in preference to older verbatim messages, when it fits whole.
6. The kept history never opens with an assistant or tool turn whose user turn was
   dropped: leading orphan units are dropped. If that would leave no history turn at all
   (the whole budget went to one long tool loop, or only the pinned query would remain),
   the user message that opened the loop is kept as an *anchor* (cut if needed) followed
   by the newest units that fit — with rule 3, the other case where the kept history is
   not contiguous.

A pinned assistant or tool message may open the history: pinning is the caller's explicit
choice and wins over rule 6.

**Stable windows** (``stride``). A caller that fits its whole stored history afresh at
every call (a session's or memory's view, a per-request filter) cannot leave headroom for
its next call: the walk above fills the budget each time, so the window's start moves with
every new message and every call rewrites the provider's cached prefix (priced in
``benchmarks/bench_bill.py``: ~2–5× the bill of sending the whole history). With a
``stride`` the window's start is chosen among *epoch starts* only: the history units at
which the tokens counted from the history's first unit pass a multiple of ``stride``.
Those positions depend on the history alone and do not move as messages are appended, so
the oldest epoch start whose whole suffix fits stays the window's start until the suffix
outgrows the budget; then the start jumps by at least one epoch. Consecutive calls share
their prefix in between, and the window fills between about ``budget − stride`` and the
budget. Rules 1, 5 and 6 hold as above (pinned units and summaries kept, leading orphans
dropped or the loop's opening user message kept as the anchor); when not even the newest
epoch fits whole (one oversized unit), the plain walk decides.

Input from a broken log (orphan tool results, calls without results) is repaired
first: see :func:`smart_truncate`.

Cost: one pass to split the list, one walk, one assembly — linear in the number of
messages, with per-message estimates cached on the messages (the boundary turn's cuts
search each cut length with the counter: logarithmic in the output's length per output).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from ctxstack.compaction._compactor import CompactionContext
from ctxstack.compaction._cut import cut_group
from ctxstack.compaction._fill import MIN_CUT_TOKENS, Kept, boundary_turns, fill_turn
from ctxstack.compaction._groups import (
    Layout,
    Unit,
    fixed_tokens,
    split_layout,
)
from ctxstack.compaction._options import watermark
from ctxstack.compaction._result import CompactionResult
from ctxstack.errors import ConfigError
from ctxstack.messages import ChatMessage, repair_tool_turns
from ctxstack.messages._model import require_chat_messages
from ctxstack.tokens import (
    DEFAULT_COUNTER,
    TokenCounter,
)
from ctxstack.tokens._counter import effective_budget


def check_budget(max_tokens: object, name: str = "max_tokens") -> int:
    """Return ``max_tokens`` if it is a positive int, else raise :class:`ConfigError`."""
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens <= 0:
        raise ConfigError(f"{name}: must be a positive integer, got {max_tokens!r}")
    return max_tokens


def smart_truncate(
    messages: Sequence[ChatMessage], max_tokens: int, *, counter: TokenCounter | None = None,
    fill: float = 1.0, stride: int | None = None,
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

    ``fill`` (0 to 1) is the share of the room for history — that budget less the system
    prompt and pinned messages — the boundary turn's fill (rule 3) may bring the result up
    to: 1 fills the budget, 0 is the plain walk. Whole units are kept
    up to the full budget either way, so a lower ``fill`` never keeps less than ``0``.

    ``stride`` (tokens): for a caller that truncates its whole history afresh at every
    call — the window's start moves in steps of about ``stride`` tokens, fixed by the
    history itself, so consecutive calls send the same prefix (see *Stable windows* in
    the module doc). ``None``: fill the budget.

    Raises:
        ConfigError: ``max_tokens`` is not a positive integer, ``fill`` is not in [0, 1],
            or ``stride`` is not a positive integer.
        MessageError: an item is not a :class:`ChatMessage` (the error names its index,
            and the converter when it is an OpenAI-format dict).
    """
    check_budget(max_tokens)
    require_chat_messages(messages)
    if isinstance(fill, bool) or not isinstance(fill, int | float) or not 0 <= fill <= 1:
        raise ConfigError(f"fill: must be a number in [0, 1], got {fill!r}")
    if stride is not None:
        check_budget(stride, "stride")
    counter = counter or DEFAULT_COUNTER
    return fit_within(messages, effective_budget(max_tokens, counter), counter, fill=fill,
                      stride=stride)


def fit_within(messages: Sequence[ChatMessage], limit: int, counter: TokenCounter, *,
               fill: float = 1.0, stride: int | None = None) -> list[ChatMessage]:
    """:func:`smart_truncate` to ``limit`` tokens by ``counter``'s count, the margin
    already applied (arguments unchecked)."""
    msgs = repair_tool_turns(messages)
    if counter.count_messages(msgs) <= limit:
        return msgs
    layout = split_layout(msgs, counter)
    fixed = layout.prompt_tokens + sum(u.tokens for u in layout.units if u.pinned)
    budget = limit - fixed
    kept = None if stride is None else stable_window(layout.units, budget, stride)
    if kept is None:
        kept = plan_truncation(msgs, layout, budget, counter,
                               spare=None if fill == 0 else limit - watermark(limit, fixed, fill))
    return assemble(msgs, layout, kept)


def epoch_starts(units: Sequence[Unit], history: Sequence[int], stride: int) -> list[int]:
    """Positions in ``history`` (unit indices, oldest first) of the units at which the
    tokens counted from the first of them pass a multiple of ``stride``; the first unit is
    one. Appending units never changes the earlier ones' positions."""
    starts: list[int] = []
    offset, epoch = 0, -1
    for p, i in enumerate(history):
        if offset // stride != epoch:
            epoch = offset // stride
            starts.append(p)
        offset += units[i].tokens
    return starts


def stable_window(units: Sequence[Unit], budget: int, stride: int) -> Kept | None:
    """The whole units from the oldest epoch start whose suffix fits ``budget`` (with
    every summary, and the anchor when the suffix opens inside a tool loop), or None when
    none fits (see *Stable windows* in the module doc)."""
    history = [i for i, u in enumerate(units) if not u.pinned and not u.summary]
    summaries = [i for i, u in enumerate(units) if not u.pinned and u.summary]
    room = budget - sum(units[i].tokens for i in summaries)
    if not history or room <= 0:
        return None
    suffix = [0] * (len(history) + 1)
    for p in range(len(history) - 1, -1, -1):
        suffix[p] = suffix[p + 1] + units[history[p]].tokens
    # A pinned unit (not a summary) ahead of the window opens the history (rule 6).
    opened = next((i for i, u in enumerate(units) if u.pinned and u.lead != "system"),
                  len(units))
    for p in epoch_starts(units, history, stride):
        if suffix[p] > room:
            continue
        first = p  # leading orphans dropped: the window opens at a turn or a pinned unit
        while (first < len(history) and history[first] < opened
               and not units[history[first]].user_led):
            first += 1
        if first < len(history):
            return {i: None for i in (*summaries, *history[first:])}
        # No turn opens after the epoch start: the loop's opening user message anchors it.
        anchor = next((history[q] for q in range(p - 1, -1, -1)
                       if units[history[q]].user_led), None)
        if anchor is not None and suffix[p] + units[anchor].tokens <= room:
            return {i: None for i in (*summaries, anchor, *history[p:])}
    return None


def plan_truncation(
    msgs: Sequence[ChatMessage], layout: Layout, budget: int, counter: TokenCounter, *,
    spare: int | None = 0,
) -> Kept:
    """Which non-pinned units to keep (and how cut) within ``budget`` tokens.

    ``spare``: tokens the boundary turn's fill must leave free (None: no fill).
    """
    units = layout.units
    history = [i for i, u in enumerate(units) if not u.pinned and not u.summary]
    summaries = [i for i, u in enumerate(units) if not u.pinned and u.summary]
    history.reverse()
    summaries.reverse()

    kept: Kept = {}
    left = _walk(msgs, units, history, budget, kept, counter, summaries=summaries,
                 spare=spare)

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
    spare: int | None = None,
) -> int:
    """Keep units newest → oldest while they fit; cut the newest if it alone does not.

    With ``spare`` set, the first other unit that does not fit has its turn fitted into
    the room left less ``spare`` (:func:`~ctxstack.compaction._fill.fill_turn`), and the
    walk goes on below the turn's opener within that room; a second unit that does not
    fit ends it. Summaries are reserved right after the newest unit (before it, when it
    must be cut). Returns the budget left (after a fill, less ``spare``).
    """
    below: int | None = None  # after a fill: only units below this index are walked
    walkable: set[int] | None = None
    for n, i in enumerate(newest_first):
        if below is not None and i >= below:
            continue
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
        elif spare is not None and below is None:
            walkable = walkable or set(newest_first)
            for turn in boundary_turns(units, i, walkable):
                # the tail is refitted as it is kept (the newest unit may be kept cut)
                refit = sum(_cost(units[j], kept[j], counter) for j in turn.steps if j in kept)
                filled = fill_turn(msgs, units, turn, left - spare + refit, counter)
                if filled is not None:
                    break
            else:
                break
            plan, tokens = filled
            for j in turn.steps:
                kept.pop(j, None)
            kept.update(plan)
            left += refit - spare - tokens  # the walk below the turn keeps the spare free
            below = turn.before
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

    The anchor is promised its whole size when that is at most half the budget — it is
    the user's own request, and the newest units' tool outputs are what gets cut to make
    room — else a quarter of the budget (a long paste is cut rather than crowding out
    the loop); whatever the newest units leave also goes to it.
    """
    anchor_tokens = units[anchor].tokens
    promised = (anchor_tokens if anchor_tokens <= budget // 2
                else min(anchor_tokens, max(budget // 4, MIN_CUT_TOKENS)))
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

    A truncation leaves the low watermark every compaction leaves, ``options.target_fill``
    of the budget: one filled to the brim is undone by the very next message — one
    truncation, and one rewritten cached prefix, per call (what truncating every call
    costs under prompt caching; ``benchmarks/bench_bill.py``). So the whole units older
    than the newest are kept up to the watermark only, when that keeps the newest unit
    whole; otherwise (the newest unit alone needs more) the walk keeps whole units up to
    the full budget and only the boundary turn's fill stops at the watermark. A caller
    that fits its whole stored history afresh at every call (``ctx.carried`` false) keeps
    nothing of this result: it gets a stable window instead (``stride``: the same
    headroom, as the step its start moves by), or the budget filled when its messages do
    not start at a fixed point (``ctx.stable_start`` false).
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
        # A caller that refits its stored history every call gets a stable window: its
        # start moves in steps of the headroom a carried truncation would leave.
        fixed = fixed_tokens(messages, ctx.counter)
        out = _below_watermark(messages, ctx, fixed) or smart_truncate(
            messages, ctx.budget, counter=ctx.counter, fill=ctx.options.target_fill,
            stride=ctx.stride(ctx.options.target_fill, fixed))
        archived = await ctx.archive_messages(dropped_messages(messages, out))
        return ctx.result(messages, out, "truncate",
                          reason=None if ctx.llm is not None else "no_llm", archived=archived)


def _below_watermark(messages: list[ChatMessage], ctx: CompactionContext, fixed: int
                     ) -> list[ChatMessage] | None:
    """Whole units newest → oldest up to ``target_fill`` of the budget, or None unless
    that keeps the newest message and at least one other history message, every kept
    message unchanged (no cut: the newest unit fits the watermark whole)."""
    if not ctx.carried or not messages:
        return None
    low = watermark(ctx.fits, fixed, ctx.options.target_fill)
    if low <= 0:
        return None
    out = fit_within(messages, low, ctx.counter, fill=0)
    given = {id(m) for m in messages}
    if out[-1] is not messages[-1] or any(id(m) not in given for m in out):
        return None
    history = [m for m in out if m.role != "system" and not m.pinned]
    return out if len(history) > 1 else None


def dropped_messages(
    before: Sequence[ChatMessage], after: Sequence[ChatMessage]
) -> list[ChatMessage]:
    """Messages of ``before`` that are not (the same object) in ``after``."""
    kept = {id(m) for m in after}
    return [m for m in before if id(m) not in kept]
