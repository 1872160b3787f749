"""Stage "mask": clear old tool outputs before anything is summarised.

Tool output is the bulk of an agent's context and the part it needs least once it has
been read: the model's own next message already says what it concluded. Replacing the
content of old tool results with a short placeholder frees most of the room a summary
would, costs no model call, and keeps every message in place, so the conversation's
structure (and every tool-call pair) stays valid. Observation masking matched LLM
summarisation at about half the cost on SWE-agent runs (arXiv 2508.21433).

The placeholder names the tool, its arguments, the output's size, a head preview and the
archive reference the model can ``recall`` it by::

    [tool output cleared: search({"q": "hotels"}) returned 12,345 characters; head:
    "[{"id": "H-1", …"; recall ref a7]

Decisions are pure (:func:`plan_mask`); the caller archives the originals (getting their
references) and then applies the plan (:func:`apply_mask`). Outputs are cleared **oldest
first and only until the context reaches the mask stage's low watermark** (``mask_fill``),
so one masking step frees enough room for several iterations and the messages before the
first newly cleared output are unchanged: consecutive calls keep sharing their prefix.
A placeholder's text depends only on the original message, its tool call and its archive
reference, and a cleared output is never cleared again, so a later mask step leaves every
earlier placeholder (and everything before its own first new one) byte-identical.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from ctxstack.compaction._archive import ARCHIVE_REF_KEY, MASKED_KEY
from ctxstack.compaction._compactor import THREAD_MIN_MESSAGES, CompactionContext
from ctxstack.compaction._groups import fixed_tokens
from ctxstack.compaction._options import CompactionOptions, watermark
from ctxstack.compaction._result import CompactionResult
from ctxstack.messages import ChatMessage, ToolCall
from ctxstack.messages._model import binary_note
from ctxstack.tokens import TokenCounter

ARGS_PREVIEW_CHARS = 120
_PENDING_REF = "?"


@dataclass(frozen=True, slots=True)
class MaskPlan:
    """Which messages to clear (indices, oldest first) and the tokens that frees."""

    indices: tuple[int, ...]
    tokens_before: int
    tokens_after: int

    def __bool__(self) -> bool:
        return bool(self.indices)


def _calls_answered(messages: Sequence[ChatMessage]) -> dict[int, ToolCall]:
    """Index of each tool result → the call it answers: a call of the nearest assistant
    message before it, matched by id in call order. Not a global id map: some servers
    number every turn's calls from ``call_0``, so one id names many calls."""
    answered: dict[int, ToolCall] = {}
    pending: list[ToolCall] = []
    for i, m in enumerate(messages):
        if m.role == "tool":
            call = next((c for c in pending if c.id == m.tool_call_id), None)
            if call is not None:
                pending.remove(call)
                answered[i] = call
        elif m.role == "assistant" and m.tool_calls:
            pending = list(m.tool_calls)
        else:
            pending = []
    return answered


def placeholder_text(
    message: ChatMessage, call: ToolCall | None, ref: str | None, preview_chars: int,
    tool: str = "recall",
) -> str:
    """The text that replaces a cleared tool output (see the module doc; ``tool``: the
    name of the tool that reads ``ref`` back)."""
    text = message.text
    name = message.name or (call.name if call else "tool")
    args = call.arguments_json if call else ""
    if len(args) > ARGS_PREVIEW_CHARS:
        args = args[:ARGS_PREVIEW_CHARS] + "…"
    head = " ".join(text[:preview_chars].split())
    if len(text) > preview_chars:
        head += "…"
    where = f"; {tool} ref {ref}" if ref else ""
    # An audio or file part goes with the output it came in (never half of it): named.
    attached = "".join(f" and {binary_note(p)}" for p in message.binary_parts)
    return (
        f"[tool output cleared: {name}({args}) returned {len(text):,} characters{attached}; "
        f"head: {json.dumps(head, ensure_ascii=False)}{where}]"
    )


def _tool_groups(messages: Sequence[ChatMessage]) -> list[list[int]]:
    """Indices of the tool results of each assistant tool-call message, in order."""
    groups: list[list[int]] = []
    current: list[int] | None = None
    ids: set[str] = set()
    for i, m in enumerate(messages):
        if m.role == "assistant" and m.tool_calls:
            current = []
            groups.append(current)
            ids = {c.id for c in m.tool_calls}
        elif m.role == "tool" and current is not None and m.tool_call_id in ids:
            current.append(i)
        else:
            current = None
    return groups


def plan_mask(
    messages: Sequence[ChatMessage],
    max_tokens: int,
    options: CompactionOptions,
    counter: TokenCounter,
    *,
    stride: int | None = None,
    hold: bool = False,
    fixed: int | None = None,
) -> MaskPlan:
    """Tool outputs to clear so that ``messages`` fit ``mask_fill`` of ``max_tokens``.

    Candidates: results in tool groups other than the newest ``mask_keep_groups``, not
    pinned, not already cleared, at least ``mask_min_tokens`` long. Chosen oldest first
    until the estimated total reaches the target; if clearing them all does not, all are
    chosen (the caller goes on to summarise). Pure.

    ``stride`` (tokens), for a caller that hands in its whole stored history afresh at
    every call: the clearing stops only at an epoch's end — the candidates up to the last
    one before the tokens counted from the first message pass the next multiple of
    ``stride``. The set cleared then depends on the history alone and stays the same from
    call to call until the target needs the next epoch, so consecutive calls keep their
    placeholders, and their prefix, byte-identical (see *Stable windows* in
    :mod:`ctxstack.compaction._truncate`). With ``hold`` too, the newest groups stay
    unmasked back to an epoch start: the unmasked tail grows with the history and is
    cleared an epoch at a time, instead of one group per call as the newest
    ``mask_keep_groups`` move on (the caller checks that the result still fits).

    ``fixed``: :func:`~ctxstack.compaction._groups.fixed_tokens` of ``messages``, when the
    caller has it already (it is linear in the list).
    """
    before = counter.count_messages(messages)
    if fixed is None:
        fixed = fixed_tokens(messages, counter)
    target = watermark(max_tokens, fixed, options.mask_fill)
    if not options.mask or before <= target:
        return MaskPlan((), before, before)
    groups = _tool_groups(messages)
    keep = options.mask_keep_groups
    old = groups[: len(groups) - keep] if keep else groups
    calls = _calls_answered(messages)
    offsets = _offsets(messages, counter) if stride is not None else []
    if hold and stride is not None and old and keep:
        boundary = offsets[groups[len(groups) - keep][0]] // stride * stride
        old = [g for g in old if offsets[g[-1]] < boundary]
    total = before
    chosen: list[int] = []
    epoch_end: int | None = None  # after the target is reached: the epoch to finish
    for group in old:
        for i in group:
            m = messages[i]
            if epoch_end is not None and offsets[i] >= epoch_end:
                return MaskPlan(tuple(chosen), before, total)
            if m.pinned or m.metadata.get(MASKED_KEY):
                continue
            cost = counter.count_message(m)
            if cost < options.mask_min_tokens:
                continue
            text = placeholder_text(m, calls.get(i), _PENDING_REF * 4,
                                    options.preview_chars, options.recall_tool)
            saved = cost - counter.count_message(m.replace(content=text))
            if saved <= 0:
                continue
            chosen.append(i)
            total -= saved
            if total <= target and epoch_end is None:
                if stride is None:
                    return MaskPlan(tuple(chosen), before, total)
                epoch_end = (offsets[i] // stride + 1) * stride
    return MaskPlan(tuple(chosen), before, total)


def _offsets(messages: Sequence[ChatMessage], counter: TokenCounter) -> list[int]:
    """Each message's position: the tokens of the messages before it."""
    out, at = [], 0
    for m in messages:
        out.append(at)
        at += counter.count_message(m)
    return out


def apply_mask(
    messages: Sequence[ChatMessage],
    plan: MaskPlan,
    refs: Sequence[str | None],
    options: CompactionOptions,
) -> list[ChatMessage]:
    """A new list with the planned outputs replaced by placeholders naming ``refs``."""
    calls = _calls_answered(messages)
    out = list(messages)
    for i, ref in zip(plan.indices, refs, strict=True):
        m = messages[i]
        text = placeholder_text(m, calls.get(i), ref, options.preview_chars,
                                options.recall_tool)
        meta = {**m.metadata, MASKED_KEY: True}
        if ref:
            meta[ARCHIVE_REF_KEY] = ref
        out[i] = m.replace(content=text, metadata=meta)
    return out


class MaskToolOutputs:
    """Strategy ``"mask"``: clear old tool outputs, oldest first, to ``options.mask_fill``.

    No model call. Skipped when ``options.mask`` is off. With a summariser set, a mask
    that would fit but leave the context above ``options.mask_accept`` of the budget is
    only offered as a fallback (it would recur on the next calls; the summary it postpones
    rewrites from near the start anyway). Every cleared original is archived first, so
    its placeholder names the reference ``recall`` reads it back by.
    """

    name = "mask"
    method: Literal["mask"] = "mask"

    async def compact(
        self, messages: list[ChatMessage], ctx: CompactionContext
    ) -> CompactionResult | None:
        opts = ctx.options
        if not opts.mask:
            return None
        fixed = fixed_tokens(messages, ctx.counter)
        stride = ctx.stride(opts.mask_fill, fixed)  # a caller refitting its history: epochs
        plan = await self._plan(messages, ctx, stride, fixed, hold=stride is not None)
        accept = (watermark(ctx.fits, fixed, opts.mask_accept) if ctx.llm is not None
                  else ctx.fits)
        if stride is not None and plan.tokens_after > accept:
            plan = await self._plan(messages, ctx, stride, fixed, hold=False)  # it must fit
        if not plan:
            return None

        async def apply() -> CompactionResult:
            refs: list[str | None] = [None] * len(plan.indices)
            if ctx.archive is not None:
                refs = list(await ctx.archive.add([messages[i] for i in plan.indices]))
            masked = apply_mask(messages, plan, refs, opts)
            return ctx.result(messages, masked, "mask", masked=len(plan.indices),
                              archived=len(plan.indices) if ctx.archive is not None else 0)

        if ctx.llm is not None and accept < plan.tokens_after <= ctx.fits:
            ctx.offer_fallback(apply)
            return None
        return await apply()

    @staticmethod
    async def _plan(messages: list[ChatMessage], ctx: CompactionContext, stride: int | None,
                    fixed: int, *, hold: bool) -> MaskPlan:
        """:func:`plan_mask` for ``ctx`` (long lists planned off the event loop)."""
        args = (messages, ctx.fits, ctx.options, ctx.counter)
        if len(messages) > THREAD_MIN_MESSAGES:
            return await asyncio.to_thread(plan_mask, *args, stride=stride, hold=hold,
                                           fixed=fixed)
        return plan_mask(*args, stride=stride, hold=hold, fixed=fixed)
