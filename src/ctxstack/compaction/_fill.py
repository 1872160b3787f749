"""Filling the budget at the truncation's boundary: the turn that does not fit is cut to fit.

``smart_truncate`` keeps whole units newest → oldest. On an agent's history the first unit
that does not fit is usually a tool group with a large output, and stopping there leaves
most of the budget empty: on tool-heavy conversations cut from ~129K to 8K tokens the old
walk filled a median 4% of the budget, often keeping only the question (issue 29). This
module fits that *boundary turn* into the room left instead:

* the turn is the boundary unit plus the older units of its turn, back to the message that
  opens it — a user message (kept whole: it states the task) or a pinned unit (kept
  anyway); a turn whose opener cannot be reached (a summary or the start of the history
  comes first) is not filled, since its kept part would open on an orphan. When the user
  opener and the boundary do not fit beside the units the walk kept after the boundary in
  the same turn (its *tail*, or when the boundary is the opener itself), the tail is
  refitted with them: without its opener it would be dropped as orphans anyway;
* the turn's older steps are dropped oldest first while the excess is at least a step's
  whole size (cut to its marker it would keep nothing anyway), and further while even the
  shortest form of what remains does not fit: the kept part is the opener, then a
  contiguous run of the turn's newest steps, so every call keeps its result;
* what is still over is taken from the tool outputs of the kept steps, **oldest first**,
  each cut head+tail (:func:`~ctxstack.compaction._cut.cut_message`, token-bounded by the
  counter in use) as far as needed before the next is touched, none below
  ``MIN_CUT_TOKENS``.

Only tool outputs are ever cut here. User and assistant text, tool-call arguments, audio
and file parts and masked placeholders (whose text never changes once written, so the
prefix providers cache stays byte-identical) are kept as they are, and so is every unit the
walk kept that stands without the fill (all of them but a tail refitted as above): a
verbatim message stays verbatim, a cut one carries the cut marker and
``metadata["truncated_chars"]``.

Pure: indices in, a plan out; every cost is counted with the caller's counter, so the
plan's total is exact for that counter.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from ctxstack.compaction._archive import MASKED_KEY
from ctxstack.compaction._cut import cut_message
from ctxstack.compaction._groups import Unit
from ctxstack.messages import ChatMessage
from ctxstack.tokens import TokenCounter

MIN_CUT_TOKENS = 24
"""Below this much room a cut message would be little more than its marker: drop instead."""

Kept = dict[int, list[ChatMessage] | None]
"""Unit index → replacement messages (a cut unit) or None (kept unchanged)."""


@dataclass(frozen=True, slots=True)
class BoundaryTurn:
    """The units a boundary fill may keep: ``opener`` (a user-led unit to keep, or None
    when a pinned unit opens the turn) and ``steps``, the turn's units after it, oldest
    first, up to the boundary (and, with ``tail``, the units after the boundary the walk
    had kept). ``before`` is the index the walk continues below."""

    opener: int | None
    steps: tuple[int, ...]
    before: int
    tail: bool = False


def boundary_turns(units: Sequence[Unit], boundary: int, walkable: Collection[int]
                   ) -> list[BoundaryTurn]:
    """The ways to fill the turn of ``units[boundary]``, to be tried in order.

    Walking back from the boundary, a pinned unit opens the turn (it is kept anyway and
    may open the history) and a user-led walkable unit opens it and is kept; anything
    else that is not walkable (a summary) or the start of the history means no opener,
    and no fill. The first way leaves the units the walk kept after the boundary as they
    are. When a user message opens the turn, those units (the *tail*, up to the next turn)
    would be dropped as orphans if the opener did not fit, so a second way refits them
    with the rest of the turn; it is the only way when the boundary is the opener itself.
    """
    stop = boundary + 1
    while stop < len(units) and not (units[stop].pinned or units[stop].user_led):
        stop += 1
    tail = tuple(j for j in range(boundary + 1, stop) if not units[j].summary)
    if units[boundary].user_led:
        return [BoundaryTurn(boundary, tail, boundary, tail=True)] if tail else []
    for j in range(boundary - 1, -1, -1):
        unit = units[j]
        if unit.pinned:
            return [BoundaryTurn(None, tuple(range(j + 1, boundary + 1)), j)]
        if j not in walkable:
            return []
        if unit.user_led:
            steps = tuple(range(j + 1, boundary + 1))
            turns = [BoundaryTurn(j, steps, j)]
            if tail:
                turns.append(BoundaryTurn(j, steps + tail, j, tail=True))
            return turns
    return []


def _cuttable(message: ChatMessage) -> bool:
    """A tool output with text that is not a masked placeholder."""
    return message.role == "tool" and bool(message.text) and not message.metadata.get(MASKED_KEY)


def fill_turn(
    msgs: Sequence[ChatMessage],
    units: Sequence[Unit],
    turn: BoundaryTurn,
    room: int,
    counter: TokenCounter,
) -> tuple[Kept, int] | None:
    """Fit ``turn`` into ``room`` tokens (see the module doc): ``(plan, tokens)`` or None.

    ``tokens`` is the plan's exact cost by ``counter`` (opener included), never above
    ``room``. None when the opener plus the boundary unit with its outputs cut as far as
    they go do not fit.
    """
    opener_tokens = 0 if turn.opener is None else units[turn.opener].tokens
    cost = {m: counter.count_message(msgs[m]) for j in turn.steps
            for m in range(units[j].start, units[j].stop)}
    # Each step with its cuttable outputs down to MIN_CUT_TOKENS (an estimate: a cut lands
    # at or under its target, so the real floor is no higher).
    floor = {j: sum(min(cost[m], MIN_CUT_TOKENS) if _cuttable(msgs[m]) else cost[m]
                    for m in range(units[j].start, units[j].stop)) for j in turn.steps}
    excess = opener_tokens + sum(units[j].tokens for j in turn.steps) - room
    shortest = opener_tokens + sum(floor.values())
    # Oldest steps go while they would be cut to nothing, or cannot fit in any form.
    first = 0
    while first < len(turn.steps) - 1 and (
            excess >= units[turn.steps[first]].tokens or shortest > room):
        excess -= units[turn.steps[first]].tokens
        shortest -= floor[turn.steps[first]]
        first += 1
    steps = turn.steps[first:]
    if shortest > room:
        return None
    cuts: dict[int, ChatMessage] = {}
    for m in (m for j in steps for m in range(units[j].start, units[j].stop)):
        if excess <= 0:
            break
        if not _cuttable(msgs[m]) or cost[m] <= MIN_CUT_TOKENS:
            continue
        cut = cut_message(msgs[m], max(cost[m] - excess, MIN_CUT_TOKENS), counter)
        if cut is None or cut is msgs[m]:
            continue
        cuts[m] = cut
        excess -= cost[m] - counter.count_message(cut)
    if excess > 0:
        return None
    plan: Kept = {} if turn.opener is None else {turn.opener: None}
    total = opener_tokens
    for j in steps:
        span = range(units[j].start, units[j].stop)
        if any(m in cuts for m in span):
            replaced = [cuts.get(m, msgs[m]) for m in span]
            plan[j] = replaced
            total += counter.count_messages(replaced)
        else:
            plan[j] = None
            total += units[j].tokens
    return (plan, total) if total <= room else None
