"""LLM compaction: fold the oldest history into one rolling summary.

The flow of :func:`compact_detailed` (docs/DESIGN.md §3, layer 2):

1. Within budget → returned unchanged (``method="none"``).
2. Split into system prompt / pinned / compactable units; earlier summaries become the
   *previous summary* and are replaced, never piled up.
3. Choose the fold (:func:`ctxstack.compact.groups.choose_fold`): the newest
   ``keep_recent`` messages at least, then as many more as fit ``target_fill`` of the
   budget *with the summary's reserved size included*, tool groups whole, the kept part
   opening with a user turn.
4. Summarise (:mod:`ctxstack.compact.summarize`), re-attach dropped exact values, and
   assemble: system prompt → summary → remaining messages in original order.
5. Still over budget (pinned messages, a huge recent group) → ``smart_truncate`` the
   result; the summary is kept in preference to older verbatim messages.

Any summariser failure (exception, timeout, empty or scratchpad-only answer) falls back
to ``smart_truncate`` of the input: the caller always gets a usable window, the result's
``reason`` says why, and a WARNING is logged. Nothing is raised for a model failure.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict

from ctxstack.compact.groups import Layout, choose_fold, split_layout
from ctxstack.compact.summarize import (
    build_summary_message,
    previous_text,
    run_summarizer,
    summary_reserve,
)
from ctxstack.compact.truncate import check_budget, smart_truncate
from ctxstack.errors import ConfigError
from ctxstack.messages import ChatMessage
from ctxstack.prompts import check_hint
from ctxstack.protocol import LLM, Usage
from ctxstack.tokens import DEFAULT_COUNTER, TokenCounter, effective_budget

logger = logging.getLogger("ctxstack.compact")

SUMMARY_SHARE = 0.15
"""The summariser's answer may use this share of the budget (``max_tokens`` option)."""
FACTS_SHARE = 0.05
"""The "Facts kept verbatim" list may use this share of the budget."""
MIN_ANSWER_TOKENS = 64
MIN_FACTS_TOKENS = 16

Method = Literal["none", "llm", "truncate"]


class CompactionResult(BaseModel):
    """Everything a compaction did, for callers that report or persist it.

    ``summarized`` are the original messages folded into ``summary`` (earlier summaries
    included), in original order; a storage layer checkpoints on their
    ``metadata["seq"]``. It is a contiguous run of the history except when an *anchor*
    user message was kept (a long tool loop whose user turn is not pinned).
    ``reason`` says why the summariser was not used (``"no_llm"``,
    ``"nothing_to_summarize"``, ``"timeout"``, ``"empty_summary"``, ``"llm_error: …"``);
    it is None for ``"none"`` and successful ``"llm"`` results.
    """

    model_config = ConfigDict(frozen=True)

    messages: list[ChatMessage]
    method: Method
    reason: str | None = None
    usage: Usage = Usage()
    summary: ChatMessage | None = None
    summarized: tuple[ChatMessage, ...] = ()
    tokens_before: int
    tokens_after: int
    messages_before: int
    messages_after: int
    previous_summary: str | None = None

    @property
    def compacted(self) -> bool:
        """Whether anything was changed (``method != "none"``)."""
        return self.method != "none"


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


def check_timeout(timeout: object) -> None:
    """:class:`ConfigError` unless ``timeout`` is None or a positive finite number."""
    if timeout is not None and (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise ConfigError(f"timeout: must be a positive number of seconds, got {timeout!r}")


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


async def compact_detailed(
    messages: Sequence[ChatMessage],
    llm: LLM | None,
    max_tokens: int,
    keep_recent: int = 4,
    hint: str = "general",
    *,
    prompt: str | None = None,
    target_fill: float = 0.6,
    timeout: float | None = None,  # noqa: ASYNC109 (the summariser call only; expiry means fallback)
    counter: TokenCounter | None = None,
) -> CompactionResult:
    """Compact ``messages`` to ``max_tokens`` with ``llm`` as summariser; see the module doc.

    Raises :class:`ConfigError` for invalid arguments (never for a model failure).
    """
    check_budget(max_tokens)
    check_hint(hint)
    check_keep_recent(keep_recent)
    check_target_fill(target_fill)
    check_timeout(timeout)
    counter = counter or DEFAULT_COUNTER
    nominal = max_tokens
    # Compare with the counter's margin applied; smart_truncate receives the nominal
    # budget and applies the same margin itself (never twice).
    max_tokens = effective_budget(nominal, counter)
    msgs = list(messages)
    # _Outcomes.fallback truncates to the nominal budget (smart_truncate applies the margin).
    done = _Outcomes(msgs, counter.count_messages(msgs), counter, nominal)
    if done.before <= max_tokens:
        return done.result(msgs, "none")
    if llm is None:
        return done.fallback("no_llm")

    layout = split_layout(msgs, counter)
    units = layout.units
    summaries = layout.summaries()
    previous = "\n\n".join(previous_text(msgs[units[i].start]) for i in summaries) or None
    answer_tokens, facts_tokens = summary_sizes(max_tokens, llm)
    fixed = (
        layout.prompt_tokens
        + layout.pinned_tokens()
        + summary_reserve(answer_tokens, facts_tokens, counter)
    )
    plan = choose_fold(
        layout,
        keep_recent=keep_recent,
        fixed_tokens=fixed,
        target_tokens=int(max_tokens * target_fill),
        limit_tokens=max_tokens,
    )
    folded_units = sorted((*plan.fold, *summaries))
    if not plan.fold and not summaries:
        return done.fallback("nothing_to_summarize")
    folded = [m for i in folded_units for m in msgs[units[i].start : units[i].stop]]
    to_summarize = [m for i in plan.fold for m in msgs[units[i].start : units[i].stop]]

    outcome = await run_summarizer(
        to_summarize, previous, llm, hint=hint, prompt=prompt, timeout=timeout,
        answer_tokens=answer_tokens, counter=counter,
    )
    if outcome.text is None:
        return done.fallback(outcome.reason or "empty_summary", outcome.usage, previous)

    summary = build_summary_message(
        outcome.text, to_summarize, previous, hint=hint, answer_tokens=answer_tokens,
        facts_tokens=facts_tokens, counter=counter,
    )
    out = _assemble(msgs, layout, plan.keep, summary)
    if counter.count_messages(out) > max_tokens:
        out = smart_truncate(out, nominal, counter=counter)
    return done.result(
        out, "llm", usage=outcome.usage, summary=summary, summarized=tuple(folded),
        previous=previous,
    )


async def llm_compact(
    messages: Sequence[ChatMessage],
    llm: LLM | None,
    max_tokens: int,
    keep_recent: int = 4,
    hint: str = "general",
    *,
    prompt: str | None = None,
    target_fill: float = 0.6,
    timeout: float | None = None,  # noqa: ASYNC109 (the summariser call only; expiry means fallback)
    counter: TokenCounter | None = None,
) -> list[ChatMessage]:
    """:func:`compact_detailed`, returning only the messages."""
    res = await compact_detailed(
        messages,
        llm,
        max_tokens,
        keep_recent,
        hint,
        prompt=prompt,
        target_fill=target_fill,
        timeout=timeout,
        counter=counter,
    )
    return res.messages
