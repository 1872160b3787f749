"""How a message list divides into things that must be kept or dropped whole.

Every compaction decision in ctxstack works on *units*, never on single messages:

* the **system prompt** — the leading run of ``system`` messages that are not summaries.
  It is always kept and never summarised;
* a **tool group** — an assistant message carrying ``tool_calls`` plus the ``tool``
  results answering those calls that follow it. Providers reject a tool result whose call
  is missing and an assistant tool call whose results are missing, so a group is atomic;
* any other message on its own (user turns, plain assistant answers, summaries,
  mid-conversation system notes, and stray tool results whose call is absent).

A unit is *pinned* if any of its messages is pinned (pinning a tool result keeps its call).
A unit is a *summary* if it is a ``system`` message of kind ``"summary"``: summaries are
compactable history, not part of the system prompt.

A kept history must open with something the model can read as the start of a turn: a
user message (or a pinned message, which the caller put there on purpose). An assistant or
tool turn whose user turn was dropped confuses models and some providers reject it.
:func:`valid_start` encodes that rule once for every caller.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ctxstack.messages import ChatMessage, Role
from ctxstack.tokens import TokenCounter


@dataclass(frozen=True, slots=True)
class Unit:
    """A contiguous slice ``messages[start:stop]`` kept or dropped as a whole."""

    start: int
    stop: int
    tokens: int
    lead: Role
    pinned: bool
    summary: bool

    @property
    def size(self) -> int:
        """Number of messages in the unit."""
        return self.stop - self.start

    @property
    def user_led(self) -> bool:
        """Whether the unit opens with a user message (a turn start)."""
        return self.lead == "user"


@dataclass(frozen=True, slots=True)
class Layout:
    """A message list split into its system prompt and its units (in order)."""

    prompt_end: int
    prompt_tokens: int
    units: tuple[Unit, ...]

    def compactable(self) -> list[int]:
        """Indices of the units a summary may replace: not pinned, not a summary."""
        return [i for i, u in enumerate(self.units) if not u.pinned and not u.summary]

    def summaries(self) -> list[int]:
        """Indices of the summary units (folded into the next summary, pinned or not)."""
        return [i for i, u in enumerate(self.units) if u.summary]

    def pinned_tokens(self) -> int:
        """Tokens of the pinned, non-summary units (kept by compaction unconditionally)."""
        return sum(u.tokens for u in self.units if u.pinned and not u.summary)

    @property
    def fixed_tokens(self) -> int:
        """Tokens compaction never shrinks: the system prompt and the pinned units. The
        watermarks are shares of what they leave (``compaction._options.watermark``)."""
        return self.prompt_tokens + self.pinned_tokens()


def is_summary(message: ChatMessage) -> bool:
    """A rolling-summary message: ``system`` role with metadata kind ``"summary"``."""
    return message.role == "system" and message.kind == "summary"


def split_layout(messages: Sequence[ChatMessage], counter: TokenCounter) -> Layout:
    """Split ``messages`` into system prompt and units. Linear in ``len(messages)``."""
    n = len(messages)
    prompt_end = 0
    while (
        prompt_end < n
        and messages[prompt_end].role == "system"
        and not is_summary(messages[prompt_end])
    ):
        prompt_end += 1
    prompt_tokens = counter.count_messages(messages[:prompt_end])

    units: list[Unit] = []
    i = prompt_end
    while i < n:
        first = messages[i]
        j = i + 1
        if first.role == "assistant" and first.tool_calls:
            ids = {c.id for c in first.tool_calls}
            while j < n and messages[j].role == "tool" and messages[j].tool_call_id in ids:
                j += 1
        members = messages[i:j]
        units.append(
            Unit(
                start=i,
                stop=j,
                tokens=counter.count_messages(members),
                lead=first.role,
                pinned=any(m.pinned for m in members),
                summary=is_summary(first),
            )
        )
        i = j
    return Layout(prompt_end=prompt_end, prompt_tokens=prompt_tokens, units=tuple(units))


def valid_start(units: Sequence[Unit], kept: Iterable[int]) -> bool:
    """Whether the kept units (indices into ``units``) open the history correctly.

    The first kept unit that is not a system message must be pinned or user-led.
    System units (summaries, notes) are skipped: they may precede any turn.
    """
    for index in sorted(kept):
        unit = units[index]
        if unit.lead == "system":
            continue
        return unit.pinned or unit.user_led
    return True


@dataclass(frozen=True, slots=True)
class Fold:
    """Which compactable units a summary replaces and which stay verbatim."""

    fold: tuple[int, ...]
    keep: frozenset[int]
    anchor: int | None = None


def choose_fold(
    layout: Layout,
    *,
    keep_recent: int,
    fixed_tokens: int,
    target_tokens: int,
    limit_tokens: int,
    limit_messages: int | None = None,
    open_ended: bool = False,
) -> Fold:
    """Split the compactable units into a folded prefix and a verbatim suffix.

    * At least the newest ``keep_recent`` compactable messages stay verbatim, rounded up
      to whole units (a tool group is never split).
    * Beyond that floor, older units stay verbatim while ``fixed_tokens`` plus the kept
      units fit ``target_tokens`` (the low watermark), so a compaction keeps as much as it
      can afford and the next iteration is not over budget again.
    * The kept part must open with a user turn (or follow a pinned message). If it would
      open with an assistant/tool unit the boundary moves, in order of preference: back to
      the turn's user message, if the kept part then stays within ``limit_tokens`` (with
      ``fixed_tokens``) and ``limit_messages``; forward to the next user turn; or, inside
      one long tool loop with no later user turn, the loop's user message is kept as an
      ``anchor`` and the units between are folded.
    * ``open_ended`` (a memory that will receive more messages): the kept part must hold a
      turn opener even if it would otherwise be empty, so that later assistant and tool
      messages never follow the summary directly.
    """
    units = layout.units
    comp = layout.compactable()
    pinned = {i for i, u in enumerate(units) if u.pinned and not u.summary}
    k = len(comp)
    kept_tokens = kept_msgs = 0
    while k > 0:
        unit = units[comp[k - 1]]
        if kept_msgs >= keep_recent and fixed_tokens + kept_tokens + unit.tokens > target_tokens:
            break
        k -= 1
        kept_tokens += unit.tokens
        kept_msgs += unit.size

    def opens(kept: set[int]) -> bool:
        if not valid_start(units, kept):
            return False
        return not open_ended or any(units[i].lead != "system" for i in kept)

    anchor: int | None = None
    if comp and not opens(pinned | set(comp[k:])):
        back = next((j for j in range(k - 1, -1, -1) if units[comp[j]].user_led), None)
        ahead = next((j for j in range(k + 1, len(comp)) if units[comp[j]].user_led), None)
        between = [units[i] for i in comp[back or 0 : k]] if back is not None else []
        widen_ok = (
            back is not None
            and fixed_tokens + kept_tokens + sum(u.tokens for u in between) <= limit_tokens
            and (
                limit_messages is None
                or kept_msgs + sum(u.size for u in between) <= limit_messages
            )
        )
        if widen_ok:
            k = back  # type: ignore[assignment]
        elif ahead is not None:
            k = ahead
        elif back is not None:
            anchor = comp[back]
        else:
            k = len(comp)
    fold = tuple(i for i in comp[:k] if i != anchor)
    keep = set(comp[k:])
    if anchor is not None:
        keep.add(anchor)
    return Fold(fold=fold, keep=frozenset(keep), anchor=anchor)


def fixed_tokens(messages: Sequence[ChatMessage], counter: TokenCounter) -> int:
    """:attr:`Layout.fixed_tokens` of ``messages``."""
    return split_layout(messages, counter).fixed_tokens
