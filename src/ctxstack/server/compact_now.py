"""Compact now: summarise a conversation on purpose, after showing what it would do.

The context meter's "Compact now" first asks for a :func:`plan` (``GET
/api/conversations/{id}/compact-preview``): which stored messages would be folded into
the rolling summary (everything after the current checkpoint except the newest
``keep_recent`` — the kept part starts with a question), the tokens the history takes
now and an estimate after. Then :func:`compact` (``POST …/compact``, under the
conversation's claim so no turn runs meanwhile) folds them with the fast model
(:func:`ctxstack.store.fold.fold_older`, the same summariser a turn's load uses) and
saves the result as the conversation's newest checkpoint: the next turn starts from it.
The summary asks with the conversation's cached prefix (the chat's system prompt, the
summary the turns started from, the rows as they were loaded, the service's tools; the
instruction last), the transcript request as its fallback
(:mod:`ctxstack.compaction._prefix_request`).

The estimate guesses the new summary at :data:`ESTIMATED_SUMMARY_SHARE` of what it folds
(the previous summary and the folded messages), capped by the summariser's answer and
facts budget for this conversation (:func:`~ctxstack.compaction._llm_compact.summary_sizes`);
the run reports the real figures.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel

from ctxstack.budget import ModelBudget
from ctxstack.compaction import SUMMARY_PREFIX, CompactionOptions
from ctxstack.compaction._llm_compact import summary_sizes
from ctxstack.compaction._prefix_request import CallPrefix
from ctxstack.errors import InputError
from ctxstack.messages import ChatMessage
from ctxstack.protocol import LLM
from ctxstack.server.compactions import history_span, split_summary
from ctxstack.server.sse import CompactData
from ctxstack.server.tools import service_tool_specs
from ctxstack.server.turn import SYSTEM_PROMPT
from ctxstack.store.checkpoints import (
    CheckpointCandidate,
    CheckpointRecord,
    latest_checkpoint,
    save_checkpoint,
)
from ctxstack.store.db import SessionFactory, reading
from ctxstack.store.fold import fold_older
from ctxstack.store.messages import MessageRecord, list_messages
from ctxstack.tokens import TokenCounter

MAX_FOLD_CHUNKS = 64
ESTIMATED_SUMMARY_SHARE = 0.3
"""The preview's guess of a summary's size, as a share of what it folds (never more than
the summariser's answer and facts budget). A guess, labelled as one on the page; the run
reports the real figure."""


class CompactPreviewOut(BaseModel):
    """What Compact now would do. ``messages`` stored messages (``first_seq`` ..
    ``last_seq``) would be folded into the summary, ``kept_messages`` stay verbatim;
    ``tokens_before`` is the history now (summary included), ``estimated_tokens_after``
    the estimate after (see the module docstring), ``estimated_saving`` their difference
    (never negative)."""

    messages: int
    first_seq: int | None
    last_seq: int | None
    kept_messages: int
    tokens_before: int
    estimated_tokens_after: int
    estimated_saving: int
    has_summary: bool


class CompactNowOut(BaseModel):
    """What Compact now did: the new summary covers ``compact.last_seq`` and before."""

    compact: CompactData
    tokens_before: int
    tokens_after: int
    saving: int


@dataclass(frozen=True)
class CompactPlan:
    checkpoint: CheckpointRecord | None
    fold: list[MessageRecord]
    kept: list[MessageRecord]
    preview: CompactPreviewOut


def _summary_message(checkpoint: CheckpointRecord | None) -> ChatMessage | None:
    if checkpoint is None:
        return None
    text = checkpoint.summary
    if not text.startswith(SUMMARY_PREFIX):
        text = f"{SUMMARY_PREFIX}\n{text}"
    return ChatMessage.summary(text, checkpoint_seq=checkpoint.last_seq)


def split_kept(rows: Sequence[MessageRecord], keep_recent: int
               ) -> tuple[list[MessageRecord], list[MessageRecord]]:
    """(to fold, kept): the newest ``keep_recent`` rows stay, widened back to the question
    that opens them (a kept part never starts with an answer)."""
    cut = max(0, len(rows) - keep_recent)
    while cut > 0 and cut < len(rows) and rows[cut].role != "user":
        cut -= 1
    return list(rows[:cut]), list(rows[cut:])


async def plan(factory: SessionFactory, conversation_id: str, owner_id: int, *,
               budget: ModelBudget, fast_llm: LLM | None, counter: TokenCounter,
               keep_recent: int | None = None) -> CompactPlan:
    """What Compact now would fold (owner-checked; raises ``NotFoundError``)."""
    keep = CompactionOptions().keep_recent if keep_recent is None else keep_recent
    checkpoint = await latest_checkpoint(factory, conversation_id, owner_id=owner_id)
    rows = await list_messages(factory, conversation_id, owner_id=owner_id,
                               after_seq=checkpoint.last_seq if checkpoint else 0,
                               roles=("user", "assistant"))
    rows = [r for r in rows if not (r.role == "assistant"
                                    and r.metadata.get("status") == "failed")]
    fold, kept = split_kept(rows, keep)
    summary = _summary_message(checkpoint)
    summary_tokens = counter.count_message(summary) if summary is not None else 0

    def tokens(records: Sequence[MessageRecord]) -> int:
        return counter.count_messages([r.to_chat_message() for r in records]) if records else 0

    fold_tokens, kept_tokens = tokens(fold), tokens(kept)
    before = summary_tokens + fold_tokens + kept_tokens
    answer, facts = summary_sizes(budget.usable_input_tokens, fast_llm)
    folded = summary_tokens + fold_tokens  # the new summary replaces the old one too
    after = (min(answer + facts, math.ceil(folded * ESTIMATED_SUMMARY_SHARE))
             if fold else summary_tokens) + kept_tokens
    preview = CompactPreviewOut(
        messages=len(fold), first_seq=fold[0].seq if fold else None,
        last_seq=fold[-1].seq if fold else None, kept_messages=len(kept),
        tokens_before=before, estimated_tokens_after=after,
        estimated_saving=max(0, before - after), has_summary=checkpoint is not None)
    return CompactPlan(checkpoint=checkpoint, fold=fold, kept=kept, preview=preview)


async def compact(factory: SessionFactory, conversation_id: str, owner_id: int, *,
                  budget: ModelBudget, fast_llm: LLM, counter: TokenCounter,
                  keep_recent: int | None = None) -> CompactNowOut:
    """Fold what :func:`plan` lists into a new checkpoint (the caller holds the claim).

    Raises:
        InputError: nothing to summarise, or the summariser failed (nothing was saved).
    """
    planned = await plan(factory, conversation_id, owner_id, budget=budget,
                         fast_llm=fast_llm, counter=counter, keep_recent=keep_recent)
    if not planned.fold:
        raise InputError("nothing to summarise: the conversation is already as short as "
                         "compaction keeps it")
    previous = (planned.checkpoint.summary.removeprefix(SUMMARY_PREFIX).strip()
                if planned.checkpoint is not None else None)
    # What the last ReAct call sent before these rows (see the module doc).
    summary = _summary_message(planned.checkpoint)
    ahead = [ChatMessage.system(SYSTEM_PROMPT), *([summary] if summary is not None else [])]
    async with reading(factory, f"compacting conversation {conversation_id!r}") as session:
        outcome = await fold_older(
            session, conversation_id,
            after_seq=planned.checkpoint.last_seq if planned.checkpoint else 0,
            before_seq=planned.fold[-1].seq + 1, previous=previous, llm=fast_llm,
            budget=budget.usable_input_tokens,
            options=CompactionOptions().with_(hint="general"), counter=counter,
            max_chunks=MAX_FOLD_CHUNKS,
            prefix=CallPrefix.of(before=ahead, tools=service_tool_specs()))
    if outcome.summary is None or outcome.last_seq is None:
        why = outcome.stopped or "no summary"
        raise InputError(f"the summary could not be written ({why}); nothing was changed")
    candidate = CheckpointCandidate(summary=outcome.summary.text, last_seq=outcome.last_seq,
                                    token_count=counter.count_message(outcome.summary))
    await save_checkpoint(factory, conversation_id, candidate, owner_id=owner_id)
    span = await history_span(factory, conversation_id, outcome.last_seq)
    kept = [r for r in planned.kept if r.seq > outcome.last_seq]
    kept_tokens = counter.count_messages([r.to_chat_message() for r in kept]) if kept else 0
    after = candidate.token_count + kept_tokens
    prose, facts = split_summary(outcome.summary.text)
    data = CompactData(
        original_messages=span.count + len(kept), kept_messages=len(kept),
        summarized_messages=span.count, method="llm", scope="load",
        first_seq=span.first_seq, last_seq=span.last_seq, summary=prose or None,
        facts=facts, hint="manual")
    before = planned.preview.tokens_before
    return CompactNowOut(compact=data, tokens_before=before, tokens_after=after,
                         saving=max(0, before - after))


__all__ = ["CompactNowOut", "CompactPreviewOut", "compact", "plan", "split_kept"]
