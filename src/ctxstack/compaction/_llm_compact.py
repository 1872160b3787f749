"""LLM compaction: fold the oldest history into one rolling summary.

The flow of :func:`compact_detailed` (docs/DESIGN.md §3, layer 2):

1. Within budget → returned unchanged (``method="none"``).
2. Split into system prompt / pinned / compactable units; earlier summaries become the
   *previous summary* and are replaced, never piled up.
3. Choose the fold (:func:`ctxstack.compaction._groups.choose_fold`): the newest
   ``keep_recent`` messages at least, then as many more as fit ``target_fill`` of the
   room for history (:func:`~ctxstack.compaction._options.watermark`) *with the summary's
   reserved size included*, tool groups whole, the kept part
   opening with a user turn.
4. Summarise (:mod:`ctxstack.compaction._summarize`), re-attach dropped exact values, and
   assemble: system prompt → summary → remaining messages in original order. The
   summariser is asked with the cache-aligned request first
   (:mod:`ctxstack.compaction._prefix_request`): the messages up to the end of the fold as
   the model last saw them (``prefix``: what the previous call sent before them, the list
   before a mask, its tools), the instruction last, when the caller gives a ``prefix``;
   the transcript request is its fallback (and the only request without one).
5. Still over budget (pinned messages, a huge recent group) → ``smart_truncate`` the
   result; the summary is kept in preference to older verbatim messages.

Any summariser failure (exception, timeout, empty or scratchpad-only answer) falls back
to ``smart_truncate`` of the input: the caller always gets a usable window, the result's
``reason`` says why, and a WARNING is logged. Nothing is raised for a model failure.

This is stage (c) of the staged compaction (:mod:`ctxstack.compaction._stages`). The CPU-heavy
parts (splitting and counting, building the transcript, choosing the facts) run in a
worker thread (``asyncio.to_thread``), so a compaction of thousands of messages never
stalls the event loop that serves other streams.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Literal

from ctxstack.compaction._compactor import CompactionContext
from ctxstack.compaction._groups import Fold, Layout, choose_fold, split_layout
from ctxstack.compaction._options import CompactionOptions, watermark
from ctxstack.compaction._prefix_request import CallPrefix
from ctxstack.compaction._result import CompactionResult, Method
from ctxstack.compaction._summaries import context_ref, record_summary, with_ref
from ctxstack.compaction._summarize import (
    assemble_summary,
    finalize_text,
    previous_text,
    summarize,
    summary_reserve,
)
from ctxstack.compaction._truncate import check_budget, smart_truncate
from ctxstack.errors import ConfigError
from ctxstack.messages import ChatMessage, repair_tool_turns
from ctxstack.messages._model import require_chat_messages
from ctxstack.protocol import LLM, Usage
from ctxstack.tokens import DEFAULT_COUNTER, TokenCounter
from ctxstack.tokens._counter import effective_budget

logger = logging.getLogger("ctxstack.compaction")

SUMMARY_SHARE = 0.15
"""The summariser's answer may use this share of the room for history (the budget less
the system prompt and pinned messages; its ``max_tokens`` option)."""
FACTS_SHARE = 0.05
"""The "Facts kept verbatim" list may use this share of the room for history."""
MIN_ANSWER_TOKENS = 64
MIN_FACTS_TOKENS = 16

MAX_FACTS_SHARE = 0.25
"""The facts list may grow into the headroom below the low watermark, up to this share of
the room for history."""



def summary_sizes(max_tokens: int, llm: LLM | None) -> tuple[int, int]:
    """(answer tokens, facts tokens) for a summary compacting to ``max_tokens``."""
    answer = max(MIN_ANSWER_TOKENS, int(max_tokens * SUMMARY_SHARE))
    limit = getattr(llm, "max_output_tokens", None)
    if isinstance(limit, int) and limit > 0:
        answer = min(answer, limit)
    return answer, max(MIN_FACTS_TOKENS, int(max_tokens * FACTS_SHARE))


def check_keep_recent(keep_recent: object) -> None:
    """:class:`ConfigError` unless ``keep_recent`` is a non-negative int."""
    if isinstance(keep_recent, bool) or not isinstance(keep_recent, int) or keep_recent < 0:
        raise ConfigError(f"keep_recent: must be a non-negative integer, got {keep_recent!r}")


def check_target_fill(target_fill: object) -> None:
    """:class:`ConfigError` unless ``target_fill`` is a number in (0, 1]."""
    if (
        isinstance(target_fill, bool)
        or not isinstance(target_fill, int | float)
        or not 0 < target_fill <= 1
    ):
        raise ConfigError(f"target_fill: must be a number in (0, 1], got {target_fill!r}")


@dataclass(frozen=True)
class _Outcomes:
    """Builds the :class:`CompactionResult` of one compaction (success or fallback)."""

    msgs: list[ChatMessage]
    before: int
    counter: TokenCounter
    max_tokens: int

    def result(
        self,
        out: list[ChatMessage],
        method: Method,
        *,
        reason: str | None = None,
        usage: Usage | None = None,
        summary: ChatMessage | None = None,
        summarized: tuple[ChatMessage, ...] = (),
        previous: str | None = None,
    ) -> CompactionResult:
        return CompactionResult(
            messages=out,
            method=method,
            reason=reason,
            usage=usage or Usage(),
            summary=summary,
            summarized=summarized,
            tokens_before=self.before,
            tokens_after=self.counter.count_messages(out),
            messages_before=len(self.msgs),
            messages_after=len(out),
            previous_summary=previous,
        )

    def fallback(
        self, reason: str, usage: Usage | None = None, previous: str | None = None
    ) -> CompactionResult:
        """``smart_truncate`` instead; logged unless there was simply nothing to do."""
        if reason not in ("no_llm", "nothing_to_summarize"):
            logger.warning("LLM compaction failed (%s); falling back to smart_truncate", reason)
        out = smart_truncate(self.msgs, self.max_tokens, counter=self.counter)
        return self.result(out, "truncate", reason=reason, usage=usage, previous=previous)


def _assemble(
    msgs: list[ChatMessage], layout: Layout, keep: Collection[int], summary: ChatMessage
) -> list[ChatMessage]:
    """System prompt → summary → the kept and pinned units in their original order."""
    out = list(msgs[: layout.prompt_end])
    out.append(summary)
    for i, unit in enumerate(layout.units):
        if not unit.summary and (i in keep or unit.pinned):
            out.extend(msgs[unit.start : unit.stop])
    return out


def resolve_options(
    options: CompactionOptions | None,
    *,
    keep_recent: int | None = None,
    hint: str | None = None,
    prompt: str | None = None,
    target_fill: float | None = None,
    timeout: float | None = None,
) -> CompactionOptions:
    """``options`` (default :class:`CompactionOptions`) with the given overrides applied.

    Raises :class:`ConfigError` naming an invalid argument.
    """
    base = options if options is not None else CompactionOptions()
    if not isinstance(base, CompactionOptions):
        raise ConfigError(f"options: expected CompactionOptions, got {type(base).__name__}")
    return base.with_(keep_recent=keep_recent, hint=hint, prompt=prompt,
                      target_fill=target_fill, timeout=timeout)


@dataclass(frozen=True)
class _Prepared:
    """The pure part before the summariser call (computed off the event loop)."""

    layout: Layout
    plan: Fold
    summaries: list[int]
    previous: str | None
    to_summarize: list[ChatMessage]
    folded: list[ChatMessage]
    head: list[ChatMessage] | None
    """The cache-aligned request's messages: the previous call's start to the fold's end
    (``None``: the prefix is not usable, the transcript request only)."""


def history_room(layout: Layout, max_tokens: int) -> int:
    """The room for history: ``max_tokens`` less the system prompt and pinned messages.
    The summary is sized by it, as the watermarks are (a share of the whole budget could
    outgrow the room a long system prompt leaves)."""
    return max(0, max_tokens - layout.fixed_tokens)


def _prepare(
    msgs: list[ChatMessage], llm: LLM, max_tokens: int, opts: CompactionOptions,
    counter: TokenCounter, note: str | None, prefix: CallPrefix,
) -> _Prepared | None:
    layout = split_layout(msgs, counter)
    units = layout.units
    summaries = layout.summaries()
    previous = "\n\n".join(previous_text(msgs[units[i].start]) for i in summaries) or None
    answer_tokens, facts_tokens = summary_sizes(history_room(layout, max_tokens), llm)
    fixed = (
        layout.fixed_tokens
        + summary_reserve(answer_tokens, facts_tokens, counter)
        + (counter.count_text(note) + 1 if note else 0)
    )
    plan = choose_fold(
        layout,
        keep_recent=opts.keep_recent,
        fixed_tokens=fixed,
        target_tokens=watermark(max_tokens, layout.fixed_tokens, opts.target_fill),
        limit_tokens=max_tokens,
    )
    if not plan.fold and not summaries:
        return None
    folded_units = sorted((*plan.fold, *summaries))
    folded = [m for i in folded_units for m in msgs[units[i].start : units[i].stop]]
    to_summarize = [m for i in plan.fold for m in msgs[units[i].start : units[i].stop]]
    end = max(units[i].stop for i in folded_units)
    head = [*prefix.before, *prefix.view(msgs)[:end]] if prefix.enabled else None
    return _Prepared(layout, plan, summaries, previous, to_summarize, folded, head)


def _finish(
    msgs: list[ChatMessage], prep: _Prepared, text: str, llm: LLM, max_tokens: int,
    opts: CompactionOptions, counter: TokenCounter, note: str | None, nominal: int,
) -> tuple[list[ChatMessage], ChatMessage]:
    """Build the summary (facts filling the room left) and assemble the result.

    ``max_tokens`` is what the result may fill (the counter's margin applied);
    ``smart_truncate`` gets the ``nominal`` budget and applies the margin itself.
    """
    room = history_room(prep.layout, max_tokens)
    answer_tokens, facts_tokens = summary_sizes(room, llm)
    final = finalize_text(text, prep.previous, hint=opts.hint, answer_tokens=answer_tokens,
                          counter=counter)
    bare = assemble_summary(final, (), None, facts_tokens=0, counter=counter, note=note)
    without_facts = counter.count_messages(_assemble(msgs, prep.layout, prep.plan.keep, bare))
    headroom = watermark(max_tokens, prep.layout.fixed_tokens, opts.target_fill) - without_facts
    facts_tokens = max(facts_tokens, min(headroom, int(room * MAX_FACTS_SHARE)))
    summary = assemble_summary(final, prep.to_summarize, prep.previous,
                               facts_tokens=facts_tokens, counter=counter, note=note)
    out = _assemble(msgs, prep.layout, prep.plan.keep, summary)
    if counter.count_messages(out) > max_tokens:
        # Over budget (pinned messages, a huge recent group): truncate the verbatim part,
        # never the summary — it stands for everything folded (and its facts). Its fill
        # stops at the summary's low watermark: filled to the brim, the next message
        # would summarise again.
        held = summary.replace(pinned=True)
        kept = smart_truncate([held if m is summary else m for m in out], nominal,
                              counter=counter, fill=opts.target_fill)
        kept = [summary if m is held else m for m in kept]
        # A budget too small even for the summary: plain truncation decides.
        fits = counter.count_messages(kept) <= max_tokens
        out = kept if fits else smart_truncate(out, nominal, counter=counter)
    return out, summary


async def compact_detailed(
    messages: Sequence[ChatMessage],
    llm: LLM | None,
    max_tokens: int,
    keep_recent: int | None = None,
    hint: str | None = None,
    *,
    options: CompactionOptions | None = None,
    prompt: str | None = None,
    target_fill: float | None = None,
    timeout: float | None = None,  # noqa: ASYNC109 (the summariser call only; expiry means fallback)
    counter: TokenCounter | None = None,
    note: str | None = None,
    prefix: CallPrefix | None = None,
) -> CompactionResult:
    """Compact ``messages`` to ``max_tokens`` with ``llm`` as summariser; see the module doc.

    Settings come from ``options`` (default :class:`CompactionOptions`: keep_recent 4,
    hint "general", …); the keyword arguments override it. ``note`` is a line appended
    to the summary (the guard says there that archived messages can be recalled).
    ``prefix`` describes the conversation's previous model call (see
    :class:`~ctxstack.compaction._prefix_request.CallPrefix`; ``CallPrefix()``: it sent
    ``messages`` themselves, without tools): the summariser is asked with it first.
    Without one, the transcript request only.

    Raises :class:`ConfigError` for invalid arguments, :class:`MessageError` for an item
    that is not a :class:`ChatMessage` (naming the converter for OpenAI-format dicts) —
    never for a model failure.
    """
    check_budget(max_tokens)
    require_chat_messages(messages)
    opts = resolve_options(options, keep_recent=keep_recent, hint=hint, prompt=prompt,
                           target_fill=target_fill, timeout=timeout)
    counter = counter or DEFAULT_COUNTER
    nominal = max_tokens
    # Compare and size with the counter's margin applied; smart_truncate receives the
    # nominal budget and applies the same margin itself (never twice).
    max_tokens = effective_budget(nominal, counter)
    msgs = repair_tool_turns(messages)  # a valid request out, even from a broken log
    before = (await asyncio.to_thread(counter.count_messages, msgs) if len(msgs) > 64
              else counter.count_messages(msgs))
    done = _Outcomes(msgs, before, counter, nominal)
    if done.before <= max_tokens:
        return done.result(msgs, "none")
    if llm is None:
        return done.fallback("no_llm")

    call = prefix if prefix is not None else CallPrefix(enabled=False)
    prep = await asyncio.to_thread(_prepare, msgs, llm, max_tokens, opts, counter, note, call)
    if prep is None:
        return done.fallback("nothing_to_summarize")
    outcome = await summarize(
        prep.to_summarize, prep.previous, llm, hint=opts.hint, prompt=opts.prompt,
        timeout=opts.timeout,
        answer_tokens=summary_sizes(history_room(prep.layout, max_tokens), llm)[0],
        counter=counter, head=prep.head, tools=call.tools,
    )
    if outcome.text is None:
        return done.fallback(outcome.reason or "empty_summary", outcome.usage, prep.previous)
    out, summary = await asyncio.to_thread(
        _finish, msgs, prep, outcome.text, llm, max_tokens, opts, counter, note, nominal
    )
    return done.result(
        out, "llm", usage=outcome.usage, summary=summary, summarized=tuple(prep.folded),
        previous=prep.previous,
    )


async def llm_compact(
    messages: Sequence[ChatMessage],
    llm: LLM | None,
    max_tokens: int,
    keep_recent: int | None = None,
    hint: str | None = None,
    *,
    options: CompactionOptions | None = None,
    prompt: str | None = None,
    target_fill: float | None = None,
    timeout: float | None = None,  # noqa: ASYNC109 (the summariser call only; expiry means fallback)
    counter: TokenCounter | None = None,
) -> list[ChatMessage]:
    """:func:`compact_detailed`, returning only the messages.

    ``llm_compact(messages, llm, max_tokens, keep_recent=4, hint="general")`` (DESIGN §2)
    keeps working: omitted arguments take the :class:`CompactionOptions` defaults.
    """
    res = await compact_detailed(
        messages, llm, max_tokens, keep_recent, hint, options=options, prompt=prompt,
        target_fill=target_fill, timeout=timeout, counter=counter,
    )
    return res.messages


class RollingSummary:
    """Strategy ``"llm"``: fold the oldest history into the one rolling summary
    (:func:`compact_detailed` with the context's summariser, down to ``target_fill``).

    With ``ctx.prefix`` (the pipeline's input as the model saw it, the call's tools) the
    summariser is asked with the cache-aligned request, the transcript request as its
    fallback; without one, with the transcript request.
    Skipped without a summariser. When the summariser fails, hangs or answers nothing,
    the result is the truncation :func:`compact_detailed` falls back to (the seed's rule);
    a fallback offered earlier (a mask) is preferred to it by the pipeline. What the
    summary folds, or the truncation drops, is archived.
    """

    name = "summary"
    method: Literal["llm"] = "llm"

    async def compact(
        self, messages: list[ChatMessage], ctx: CompactionContext
    ) -> CompactionResult | None:
        if ctx.llm is None:
            return None
        res = await compact_detailed(messages, ctx.llm, ctx.budget, options=ctx.options,
                                     counter=ctx.counter, note=ctx.note, prefix=ctx.prefix)
        if res.method == "llm":
            refs, folded = await ctx.archive_refs(res.summarized)
            if ctx.archive is not None:
                res = await _name_summary(res, ctx, refs)
        else:
            kept = {id(m) for m in res.messages}
            folded = await ctx.archive_messages([m for m in messages if id(m) not in kept])
        return res.model_copy(update={"archived": folded})


async def _name_summary(
    res: CompactionResult, ctx: CompactionContext, refs: list[str]
) -> CompactionResult:
    """``res`` with its summary archived as a :class:`SummaryNode` (its range, its
    children) and naming its ref, when the archive keeps summaries (see
    :mod:`ctxstack.compaction._summaries`). The ref line costs a few tokens: a result it
    pushes over budget is truncated again, the summary kept."""
    assert ctx.archive is not None
    assert res.summary is not None
    node = await record_summary(ctx.archive, res.summary, res.summarized, refs,
                                note=ctx.note)
    if node is None:
        return res
    named = with_ref(res.summary, node, ctx.options.recall_tool,
                     context_ref(ctx.archive, node.ref))
    out = [named if m is res.summary else m for m in res.messages]
    if ctx.counter.count_messages(out) > ctx.fits:
        held = named.replace(pinned=True)
        kept = smart_truncate([held if m is named else m for m in out], ctx.budget,
                              counter=ctx.counter, fill=ctx.options.target_fill)
        out = [named if m is held else m for m in kept]
    return res.model_copy(update={"messages": out, "summary": named,
                                  "tokens_after": ctx.counter.count_messages(out),
                                  "messages_after": len(out)})
