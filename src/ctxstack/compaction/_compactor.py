"""The compaction strategy protocol: one method, composed in a pipeline.

A :class:`Compactor` takes the messages and a :class:`CompactionContext` (the budget, the
summariser, the counter, the options, the archive) and returns a
:class:`~ctxstack.compaction.CompactionResult`, or ``None`` for "not enough: I did nothing
here". The pipeline (:func:`ctxstack.compaction._stages.compact_staged`, run by the guard
and by DbMemory) tries ``CompactionOptions.strategies`` in order, cheapest first:

* a result that fits the budget ends the pipeline;
* a result that does not fit is progress: the next strategy starts from its messages
  (clearing tool outputs that frees some room, then a summary of the rest);
* ``None`` passes the same messages on.

A strategy may also *offer a fallback* (:meth:`CompactionContext.offer_fallback`): a
result that would fit but that a later, costlier strategy should try to beat (a mask that
leaves the context so full that it would recur on the next calls). It is used when no
later strategy fits, and a truncation never replaces it: dropping messages loses more
than clearing outputs. If nothing fits at the end, the pipeline truncates, so the caller
always gets a list within budget.

The built-ins, each next to its algorithm: :class:`~ctxstack.compaction.MaskToolOutputs`
(``"mask"``), :class:`~ctxstack.compaction.RollingSummary` (``"llm"``),
:class:`~ctxstack.compaction.Truncate` (``"truncate"``). A strategy of one's own declares
which of those three kinds of loss it makes (``method``), so reports and the service's
``compact`` event stay a closed set; ``examples/custom_strategy.py`` shows one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

from ctxstack.compaction._archive import ARCHIVE_REF_KEY, MASKED_KEY, Archive
from ctxstack.compaction._options import CompactionOptions, watermark
from ctxstack.compaction._prefix_request import CallPrefix
from ctxstack.compaction._result import CompactionResult
from ctxstack.messages import ChatMessage
from ctxstack.protocol import LLM
from ctxstack.tokens import TokenCounter

StrategyMethod = Literal["mask", "llm", "truncate"]

THREAD_MIN_MESSAGES = 64
"""Pure planning over more messages than this runs in a worker thread (off the loop)."""


@runtime_checkable
class Compactor(Protocol):
    """One compaction strategy. ``name`` identifies it in logs; ``method`` is the kind of
    loss its results make (``"mask"``, ``"llm"`` or ``"truncate"``)."""

    @property
    def name(self) -> str:
        """The strategy's name, in logs."""
        ...

    @property
    def method(self) -> StrategyMethod:
        """The kind of loss its results make."""
        ...

    async def compact(
        self, messages: list[ChatMessage], ctx: CompactionContext
    ) -> CompactionResult | None:
        """A result (fitting, or progress toward fitting), or ``None``: not enough."""
        ...


@dataclass
class CompactionContext:
    """What a strategy may use: read the fields, call the helpers; never mutate the input.

    ``budget`` is the nominal budget (hand it to ``smart_truncate`` / ``compact_detailed``,
    which apply the counter's margin themselves); ``fits`` is the budget with that margin,
    what a result must not exceed.
    """

    llm: LLM | None
    budget: int
    fits: int
    options: CompactionOptions
    counter: TokenCounter
    archive: Archive | None = None
    note: str | None = None
    """A line a summary should end with (the recall hint, when there is an archive)."""
    prefix: CallPrefix | None = None
    """The conversation's previous model call, for a cache-aligned summary request (its
    ``seen``: the pipeline's input, before any strategy changed it)."""
    carried: bool = True
    """Whether the caller carries the result into its next call (the guard in a loop),
    so headroom left now saves compacting again at the next one. False for a caller that
    fits its whole stored history afresh at every call (a session's or memory's view, a
    per-request filter): there headroom saves nothing; instead the mask and truncate
    stages move their boundaries in steps fixed by the history itself, so consecutive
    calls keep their prefix (*Stable windows* in :mod:`ctxstack.compaction._truncate`)."""
    stable_start: bool = True
    """For a caller that does not carry its result: whether the messages begin at a fixed
    point of its stored history (its first message, or a summary checkpoint), from which
    the stable boundaries are counted. False for a read window that moves with the
    conversation (``DbMemory`` leaving older rows out): the budget is then filled."""
    _fallback: Callable[[], Awaitable[CompactionResult]] | None = field(default=None,
                                                                       repr=False)

    def stride(self, fill: float, fixed: int = 0) -> int | None:
        """The step of the stable boundaries for a stage that would otherwise fill
        ``fill`` of the room for history (``fixed``: the tokens of the system prompt and
        pinned messages; None: the caller carries its result, or its messages do not
        start at a fixed point — see :attr:`carried` and :attr:`stable_start`)."""
        if self.carried or not self.stable_start:
            return None
        return max(1, self.fits - watermark(self.fits, fixed, fill))

    def offer_fallback(self, make: Callable[[], Awaitable[CompactionResult]]) -> None:
        """Offer a fitting result, built only if it is used (see the module doc)."""
        self._fallback = make

    def take_fallback(self) -> Callable[[], Awaitable[CompactionResult]] | None:
        """The fallback offered last, if any (the pipeline's; cleared once taken)."""
        make, self._fallback = self._fallback, None
        return make

    async def count(self, messages: Sequence[ChatMessage]) -> int:
        """Tokens of ``messages`` (long lists counted off the event loop)."""
        if len(messages) > THREAD_MIN_MESSAGES:
            return await asyncio.to_thread(self.counter.count_messages, messages)
        return self.counter.count_messages(messages)

    async def archive_messages(self, messages: Sequence[ChatMessage]) -> int:
        """Archive the messages not archived yet (placeholders and summaries skipped);
        returns how many went in."""
        if self.archive is None:
            return 0
        fresh = [m for m in messages
                 if not m.metadata.get(MASKED_KEY) and ARCHIVE_REF_KEY not in m.metadata
                 and m.kind != "summary"]
        if fresh:
            await self.archive.add(fresh)
        return len(fresh)

    async def archive_refs(self, messages: Sequence[ChatMessage]) -> tuple[list[str], int]:
        """Archive what :meth:`archive_messages` would; returns the archive refs of every
        message that is not a summary, in order (a placeholder or cut copy by the ref it
        carries: its original), and how many went in. ``([], 0)`` without an archive."""
        if self.archive is None:
            return [], 0
        originals = [m for m in messages if m.kind != "summary"
                     and (ARCHIVE_REF_KEY in m.metadata or not m.metadata.get(MASKED_KEY))]
        fresh = [m for m in originals if ARCHIVE_REF_KEY not in m.metadata]
        added = iter(await self.archive.add(fresh) if fresh else [])
        refs = [str(m.metadata[ARCHIVE_REF_KEY]) if ARCHIVE_REF_KEY in m.metadata
                else next(added) for m in originals]
        return refs, len(fresh)

    def result(
        self, before: Sequence[ChatMessage], after: list[ChatMessage],
        method: StrategyMethod, *, reason: str | None = None, masked: int = 0,
        archived: int = 0,
    ) -> CompactionResult:
        """A :class:`CompactionResult` for a strategy that turned ``before`` into ``after``."""
        return CompactionResult(
            messages=after, method=method, reason=reason,
            tokens_before=self.counter.count_messages(before),
            tokens_after=self.counter.count_messages(after),
            messages_before=len(before), messages_after=len(after),
            masked=masked, archived=archived,
        )

