"""Staged compaction, cheapest first: mask → summarise → truncate.

:func:`compact_staged` is what :class:`~ctxstack.guard.ContextGuard` and
:class:`~ctxstack.store.memory.DbMemory` run when messages exceed their budget (cutting
oversized single messages, stage (a), happens before, in the guard):

(b) **mask** — clear old tool outputs (:mod:`ctxstack.compaction._mask`), oldest first, down
    to the stage's own low watermark ``mask_fill``. Enough when it brings the context
    within budget — with a summariser set, within ``mask_accept`` of it, since a step
    freeing less would recur on the next calls: no model call, nothing summarised;
(c) **llm** — the rolling summary (:func:`ctxstack.compaction.compact_detailed`)
    over the masked messages, down to ``target_fill``, when a summariser is set and masking
    was not enough;
(d) **truncate** — ``smart_truncate`` when there is no summariser or it failed.

The result's ``method`` names the stage that produced it. With an ``archive``, every
message the compaction masks, folds into the summary or drops is archived first, the
placeholders name their references and the summary says how to recall them. The
decisions are pure; this module only sequences them and does the archive I/O.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from ctxstack.compaction._archive import (
    ARCHIVE_REF_KEY,
    Archive,
)
from ctxstack.compaction._llm_compact import (
    CompactionResult,
    compact_detailed,
    resolve_options,
)
from ctxstack.compaction._mask import (
    MASKED_KEY,
    MaskPlan,
    apply_mask,
    plan_mask,
)
from ctxstack.compaction._options import CompactionOptions
from ctxstack.compaction._truncate import (
    check_budget,
    smart_truncate,
)
from ctxstack.messages import ChatMessage
from ctxstack.protocol import LLM
from ctxstack.tokens import (
    DEFAULT_COUNTER,
    TokenCounter,
)
from ctxstack.tokens._counter import effective_budget

RECALL_NOTE = (
    "Earlier messages are archived verbatim: call the `recall` tool with a search query, "
    "or with the ref a cleared tool output names, to read them."
)
THREAD_MIN_MESSAGES = 64
"""Planning over more messages than this runs in a worker thread (off the event loop)."""


async def _archive(archive: Archive | None, messages: Sequence[ChatMessage]) -> int:
    """Archive the messages not archived yet (placeholders and summaries are skipped)."""
    if archive is None:
        return 0
    fresh = [
        m for m in messages
        if not m.metadata.get(MASKED_KEY) and ARCHIVE_REF_KEY not in m.metadata
        and m.kind != "summary"
    ]
    if fresh:
        await archive.add(fresh)
    return len(fresh)


def dropped_messages(
    before: Sequence[ChatMessage], after: Sequence[ChatMessage]
) -> list[ChatMessage]:
    """Messages of ``before`` that are not (the same object) in ``after``."""
    kept = {id(m) for m in after}
    return [m for m in before if id(m) not in kept]


async def compact_staged(
    messages: Sequence[ChatMessage],
    llm: LLM | None,
    max_tokens: int,
    options: CompactionOptions | None = None,
    *,
    counter: TokenCounter | None = None,
    archive: Archive | None = None,
) -> CompactionResult:
    """Fit ``messages`` into ``max_tokens``, cheapest stage first (see the module doc).

    Never raises for a model failure (the summary stage falls back to truncation).

    Raises:
        ConfigError: an invalid budget or option.
    """
    check_budget(max_tokens)
    opts = resolve_options(options)
    counter = counter or DEFAULT_COUNTER
    msgs = list(messages)
    # Stage decisions compare with the counter's margin applied; compact_detailed and
    # smart_truncate get the nominal budget and apply the same margin themselves.
    fits = effective_budget(max_tokens, counter)
    big = len(msgs) > THREAD_MIN_MESSAGES
    before = (await asyncio.to_thread(counter.count_messages, msgs) if big
              else counter.count_messages(msgs))
    if before <= fits:
        return _result(msgs, msgs, "none", before, counter)

    plan = (
        await asyncio.to_thread(plan_mask, msgs, fits, opts, counter)
        if big
        else plan_mask(msgs, fits, opts, counter)
    )
    note = RECALL_NOTE if archive is not None else None
    if plan and llm is not None and int(fits * opts.mask_accept) < plan.tokens_after <= fits:
        # The mask would fit but leave the context near the budget, so it would recur on
        # the next calls (CompactionOptions.mask_accept): summarise now instead. The mask
        # stays the fallback when the summariser fails (it fits; truncation drops more).
        res = await compact_detailed(msgs, llm, max_tokens, options=opts, counter=counter,
                                     note=note)
        if res.method == "llm":
            return res.model_copy(update={"archived": await _archive(archive, res.summarized)})
        masked, archived = await _mask(msgs, plan, opts, archive)
        fell_back = _result(msgs, masked, "mask", before, counter, reason=res.reason,
                            masked=len(plan.indices), archived=archived)
        return fell_back.model_copy(update={"usage": res.usage})

    current = msgs
    archived = 0
    if plan:
        current, archived = await _mask(msgs, plan, opts, archive)
        if counter.count_messages(current) <= fits:
            return _result(msgs, current, "mask", before, counter, masked=len(plan.indices),
                           archived=archived)

    if llm is not None:
        res = await compact_detailed(current, llm, max_tokens, options=opts, counter=counter,
                                     note=note)
    else:
        out = smart_truncate(current, max_tokens, counter=counter)
        res = _result(current, out, "truncate", counter.count_messages(current), counter,
                      reason="no_llm")
    if res.method == "llm":
        archived += await _archive(archive, res.summarized)
    elif res.method == "truncate":
        archived += await _archive(archive, dropped_messages(current, res.messages))
    return res.model_copy(update={
        "tokens_before": before, "messages_before": len(msgs),
        "masked": len(plan.indices), "archived": archived,
    })


async def _mask(
    msgs: list[ChatMessage], plan: MaskPlan, opts: CompactionOptions, archive: Archive | None
) -> tuple[list[ChatMessage], int]:
    """Archive the planned outputs (getting their refs) and apply the plan:
    ``(masked messages, messages archived)``."""
    if archive is None:
        return apply_mask(msgs, plan, [None] * len(plan.indices), opts), 0
    originals = [msgs[i] for i in plan.indices]
    refs: list[str | None] = list(await archive.add(originals))
    return apply_mask(msgs, plan, refs, opts), len(originals)


def _result(
    before_msgs: list[ChatMessage], out: list[ChatMessage], method: str, before: int,
    counter: TokenCounter, *, reason: str | None = None, masked: int = 0, archived: int = 0,
) -> CompactionResult:
    return CompactionResult(
        messages=out, method=method, reason=reason,
        tokens_before=before, tokens_after=counter.count_messages(out),
        messages_before=len(before_msgs), messages_after=len(out),
        masked=masked, archived=archived,
    )
