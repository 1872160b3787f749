"""What the guard reports: one :class:`CompactionEvent` per compaction, running totals.

Compaction is the one moment context management costs tokens and loses detail, so it is
never silent: each one yields a frozen event — returned by
:meth:`~ctxstack.guard._guard.ContextGuard.check` with the messages (a :class:`GuardCheck`), passed
to every ``on_compact`` listener, and logged to ``ctxstack.guard._guard`` at INFO — and
:class:`GuardTotals` sums them so a caller can add compaction usage to the turn's usage
(the ``done`` event's figures include it).

Every check, compacting or not, is also reported to the guard's ``on_check`` listeners as
a :class:`GuardCheckEvent` (what went in, what came out, the budget and hint used): how a
context meter or a fold tracker observes a guard without subclassing it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict

from ctxstack.compaction import Hint
from ctxstack.messages import ChatMessage
from ctxstack.protocol import Usage

CompactionMethod = Literal["mask", "llm", "truncate"]


class CompactionEvent(BaseModel):
    """One compaction by :class:`~ctxstack.guard.ContextGuard`.

    ``method`` is the stage that produced the result: ``"mask"`` (old tool outputs
    cleared, nothing summarised), ``"llm"`` (a summary) or ``"truncate"``
    (``smart_truncate``). ``reason`` is set whenever the result is not what the guard was
    configured to produce — why an LLM compaction fell back to truncation (exception,
    timeout, empty or unusable answer) — and is ``None`` for truncation by configuration
    (no compact LLM). ``usage`` is the compaction call's usage (zero for truncation, or
    whatever a failed call reported). Token figures use the guard's counter.
    """

    model_config = ConfigDict(frozen=True)

    type: Literal["compaction"] = "compaction"
    hint: Hint
    method: CompactionMethod
    reason: str | None = None
    budget: int
    messages_before: int
    messages_after: int
    tokens_before: int
    tokens_after: int
    summarized: int = 0
    """Messages folded into the summary (``"llm"`` only)."""
    masked: int = 0
    """Tool outputs cleared to placeholders (by the "mask" stage, also before a summary)."""
    archived: int = 0
    """Messages archived (recallable) by this compaction."""
    summary_ref: str | None = None
    """The archive ref of the summary this compaction made (``"llm"`` with an archive that
    keeps summaries, see :mod:`ctxstack.compaction._summaries`): its range and children
    are ``archive.get_summary(summary_ref)``; ``None`` otherwise."""
    unpinned: int = 0
    """Injected messages the pinned cap unpinned before compacting."""
    cut_messages: int = 0
    """Messages cut head+tail in this call (oversized, or a query over the pinned cap)."""
    usage: Usage = Usage()
    duration_s: float = 0.0
    cache_write_tokens_estimate: int = 0
    """The compaction's estimated prompt-cache cost: the tokens of the compacted context
    from its first message that differs (in wire form) from the messages the compaction
    started from, to its end. Providers read a call's prefix identical to the previous
    call's from their cache (~0.1× the input price) and write the rest (~1.25×, 2× for an
    hour-long cache), so this is what the next model call must write again that it would
    otherwise have read. ``0`` when the compaction left every message in place. An
    estimate: the previous call held the messages before the newest appended ones — for
    a caller that refits its stored history (``carried=False``), the result the guard
    last refitted for the same conversation (recognised by its opening messages; the
    last 256 conversations kept), when it has one — and a summariser request the
    compaction sent is not included (its usage is ``usage``)."""

    @property
    def fell_back(self) -> bool:
        """True when an LLM compaction was attempted but truncation produced the result."""
        return self.method == "truncate" and self.reason is not None

    @property
    def fits(self) -> bool:
        """True when the result is within the budget (false only if pinned/system overflow)."""
        return self.tokens_after <= self.budget


def first_changed(before: Sequence[ChatMessage], after: Sequence[ChatMessage]) -> int:
    """The index of ``after``'s first message that is not ``before``'s message at that
    position as a provider sees it (the same object, an equal message, or the same wire
    form: metadata is never sent); ``len(after)`` when ``after`` only keeps or extends
    ``before``'s leading messages."""
    for i, (a, b) in enumerate(zip(before, after, strict=False)):
        if a is not b and a != b and a.to_openai() != b.to_openai():
            return i
    return min(len(before), len(after))


class GuardTotals(BaseModel):
    """Running totals of one guard (a snapshot; the guard keeps counting).

    ``usage`` is the summed usage of every compaction call — add it to the turn's usage.
    """

    model_config = ConfigDict(frozen=True)

    checks: int = 0
    compactions: int = 0
    mask_compactions: int = 0
    llm_compactions: int = 0
    fallbacks: int = 0
    truncations: int = 0
    cut_messages: int = 0
    unpinned: int = 0
    masked: int = 0
    archived: int = 0
    usage: Usage = Usage()
    duration_s: float = 0.0
    cache_write_tokens_estimate: int = 0
    """The compactions' summed :attr:`CompactionEvent.cache_write_tokens_estimate`."""

    def plus_checks(self, checks: int, cut_messages: int) -> GuardTotals:
        """These totals plus ``checks`` guard calls that cut ``cut_messages`` messages
        without compacting (the under-budget path counts in plain ints, not events)."""
        return self.model_copy(
            update={"checks": self.checks + checks,
                    "cut_messages": self.cut_messages + cut_messages}
        )

    def add(self, event: CompactionEvent) -> GuardTotals:
        """These totals plus one compaction."""
        return self.model_copy(
            update={
                "compactions": self.compactions + 1,
                "mask_compactions": self.mask_compactions + (event.method == "mask"),
                "llm_compactions": self.llm_compactions + (event.method == "llm"),
                "masked": self.masked + event.masked,
                "archived": self.archived + event.archived,
                "fallbacks": self.fallbacks + event.fell_back,
                "truncations": self.truncations + (event.method == "truncate"),
                "unpinned": self.unpinned + event.unpinned,
                "cut_messages": self.cut_messages + event.cut_messages,
                "usage": self.usage + event.usage,
                "duration_s": self.duration_s + event.duration_s,
                "cache_write_tokens_estimate": self.cache_write_tokens_estimate
                + event.cache_write_tokens_estimate,
            }
        )


class GuardCheck(NamedTuple):
    """One guard call's outcome: the fitted messages, and its compaction if there was one."""

    messages: list[ChatMessage]
    event: CompactionEvent | None


class GuardCheckEvent(NamedTuple):
    """What each ``on_check`` listener receives once per completed guard check.

    ``messages_in`` is the sequence the caller passed (the same object, not a copy: do
    not modify it); ``result`` is the :class:`GuardCheck` the call returns (its
    ``messages`` are what the model will see, its ``event`` the compaction if there was
    one); ``budget`` is the token budget the check enforced (the guard's default when the
    call passed none, a :class:`~ctxstack.budget.ModelBudget`'s usable input tokens when
    it passed one); ``hint`` the validated hint. A check that raises (an invalid budget or
    hint, a non-message element) reports nothing.
    """

    messages_in: Sequence[ChatMessage]
    result: GuardCheck
    budget: int
    hint: Hint
