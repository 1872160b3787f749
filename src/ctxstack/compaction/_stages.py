"""The compaction pipeline: ``CompactionOptions.strategies``, cheapest first.

:func:`compact_staged` is what :class:`~ctxstack.guard.ContextGuard` and
:class:`~ctxstack.store.memory.DbMemory` run when messages exceed their budget (cutting
oversized single messages, stage (a), happens before, in the guard). The default
strategies (see :mod:`ctxstack.compaction._compactor` for the protocol and the rules that
compose them):

(b) **mask** (:class:`~ctxstack.compaction.MaskToolOutputs`) — clear old tool outputs,
    oldest first, down to ``mask_fill``; enough when it brings the context within budget —
    with a summariser set, within ``mask_accept`` of it, since a step freeing less would
    recur on the next calls;
(c) **llm** (:class:`~ctxstack.compaction.RollingSummary`) — the rolling summary over the
    masked messages, down to ``target_fill``, when a summariser is set;
(d) **truncate** (:class:`~ctxstack.compaction.Truncate`) — ``smart_truncate`` when there is
    no summariser (a failed summary already ends in truncation).

The result's ``method`` names the strategy kind that produced it. With an ``archive``,
every message a strategy masks, folds into the summary or drops is archived first, the
placeholders name their references and the summary says how to recall them.
"""

from __future__ import annotations

from collections.abc import Sequence

from ctxstack.compaction._archive import Archive
from ctxstack.compaction._compactor import CompactionContext, Compactor
from ctxstack.compaction._llm_compact import RollingSummary, resolve_options
from ctxstack.compaction._mask import MaskToolOutputs
from ctxstack.compaction._options import CompactionOptions
from ctxstack.compaction._prefix_request import CallPrefix
from ctxstack.compaction._result import CompactionResult
from ctxstack.compaction._truncate import Truncate, check_budget
from ctxstack.messages import ChatMessage
from ctxstack.protocol import LLM, Usage
from ctxstack.tokens import DEFAULT_COUNTER, TokenCounter
from ctxstack.tokens._counter import effective_budget

RECALL_NOTE = (
    "Earlier messages are archived verbatim: call the `recall` tool with a search query, "
    "or with the ref a cleared tool output names, to read them."
)


def recall_note(tool: str = "recall") -> str:
    """:data:`RECALL_NOTE` naming ``tool`` (``CompactionOptions.recall_tool``)."""
    return RECALL_NOTE.replace("`recall`", f"`{tool}`")

DEFAULT_STRATEGIES: tuple[Compactor, ...] = (MaskToolOutputs(), RollingSummary(), Truncate())
"""Mask, then summarise, then truncate: what ``CompactionOptions(strategies=None)`` runs."""


async def compact_staged(
    messages: Sequence[ChatMessage],
    llm: LLM | None,
    max_tokens: int,
    options: CompactionOptions | None = None,
    *,
    counter: TokenCounter | None = None,
    archive: Archive | None = None,
    prefix: CallPrefix | None = None,
    carried: bool = True,
    stable_start: bool = True,
) -> CompactionResult:
    """Fit ``messages`` into ``max_tokens`` with ``options.strategies`` (see the module doc).

    ``carried``, ``stable_start``: see :attr:`~ctxstack.compaction.CompactionContext.carried`
    and :attr:`~ctxstack.compaction.CompactionContext.stable_start`.

    ``prefix`` describes the conversation's previous model call (what it sent ahead of
    ``messages``, its tools; ``seen`` defaults to ``messages`` as given here): a summary
    reuses it as its cache-aligned request. Without one, summaries use the transcript
    request.

    Never raises for a model failure (the summary falls back to truncation); the result
    always fits. ``tokens_before`` / ``messages_before`` describe ``messages``; ``usage``,
    ``masked`` and ``archived`` add up over every strategy that ran.

    Raises:
        ConfigError: an invalid budget or option.
    """
    check_budget(max_tokens)
    opts = resolve_options(options)
    counter = counter or DEFAULT_COUNTER
    msgs = list(messages)
    ctx = CompactionContext(llm=llm, budget=max_tokens, fits=effective_budget(max_tokens, counter),
                            options=opts, counter=counter, archive=archive,
                            note=recall_note(opts.recall_tool) if archive is not None
                            else None, carried=carried, stable_start=stable_start)
    before = await ctx.count(msgs)
    ctx.prefix = prefix.seeing(msgs) if prefix is not None else None  # as the model saw it
    if before <= ctx.fits:
        return CompactionResult(messages=msgs, method="none", tokens_before=before,
                                tokens_after=before, messages_before=len(msgs),
                                messages_after=len(msgs))

    current, usage, masked, archived = msgs, Usage(), 0, 0
    final: CompactionResult | None = None
    for strategy in opts.strategies or DEFAULT_STRATEGIES:
        res = await strategy.compact(current, ctx)
        if res is None:
            continue
        usage, masked, archived = usage + res.usage, masked + res.masked, archived + res.archived
        if res.tokens_after > ctx.fits:
            current = res.messages  # progress, not enough: the next strategy goes on from here
            continue
        final = res
        break
    fallback = ctx.take_fallback()
    if fallback is not None and (final is None or final.method == "truncate"):
        reason = final.reason if final is not None else None
        final = (await fallback()).model_copy(update={"reason": reason})
        masked, archived = masked + final.masked, archived + final.archived
    elif final is None:  # nothing fitted: the last resort always does
        final = await Truncate().truncate(current, ctx)
        archived += final.archived
    return _totals(final.model_copy(update={"usage": usage, "masked": masked,
                                            "archived": archived}), msgs, before)


def _totals(res: CompactionResult, msgs: list[ChatMessage], before: int) -> CompactionResult:
    return res.model_copy(update={"tokens_before": before, "messages_before": len(msgs)})
