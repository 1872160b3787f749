"""Folding history older than DbMemory's read window into the rolling summary, in chunks.

DbMemory reads a conversation newest-first and stops at its window (a few budgets of
tokens), so a load costs O(budget). A conversation that grew far past its budget without
a checkpoint has older messages outside that window; they used to be left out of the
summary silently. Now they are *folded*: read oldest-first in chunks that fit the
summariser, each chunk summarised into the rolling summary (the previous chunk's summary
is the "previous summary" of the next), until the window is reached — at most
``max_chunks`` chunks per load, so one turn's cost stays bounded. What a bounded turn
could not fold is counted and reported, and the checkpoint saved after the turn covers
what was folded, so the next turn continues from there: nothing is skipped for good.

A caller that knows what the conversation's previous model call sent before the first row
folded (Compact now: the system prompt, the summary the turn started from, the tools)
passes it as ``prefix``: the first chunk is then summarised with the cache-aligned request
(that call's start, the chunk's rows as the model saw them, the instruction last;
:mod:`ctxstack.compaction._prefix_request`), the transcript request as its fallback. Later
chunks follow a summary the model never saw, and DbMemory folds rows older than its
window, which no recent call held: those use the transcript request.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncSession

from ctxstack.compaction import CompactionOptions
from ctxstack.compaction._llm_compact import summary_sizes
from ctxstack.compaction._prefix_request import CallPrefix
from ctxstack.compaction._summarize import (
    build_summary_message,
    previous_text,
    summarize,
    summarizer_input_tokens,
)
from ctxstack.messages import ChatMessage
from ctxstack.protocol import LLM, Usage
from ctxstack.store.messages import MessageRecord, read_page
from ctxstack.tokens import TokenCounter

PAGE_ROWS = 200
"""Rows per read: the ORM materialises a page on the event loop, so pages stay small."""
CHUNK_SHARE = 0.7
"""Share of what the summariser can read that one chunk may fill (room for the prompt and
the previous summary)."""
MAX_CHUNK_TOKENS = 48_000


@dataclass
class FoldOutcome:
    """What folding did: the summary (None if nothing was folded), rows folded, the last
    sequence number folded, the summariser's usage, and why it stopped early, if it did."""

    summary: ChatMessage | None = None
    folded: int = 0
    last_seq: int | None = None
    usage: Usage = field(default_factory=Usage)
    stopped: str | None = None


def _costs(
    counter: TokenCounter, page: list[MessageRecord]
) -> tuple[list[ChatMessage], list[int]]:
    """The page's messages and their token costs (CPU work, run off the event loop)."""
    messages = [ChatMessage(role=r.role, content=r.content or "", metadata=_meta(r))
                for r in page]
    return messages, [counter.count_message(m) for m in messages]


_UNSEEN = "ctxstack.store.fold:unseen"
"""Marks a folded row the model never saw as DbMemory loads it (a failed turn's notice)
or saw otherwise (an image row): left out of, or ending, a cache-aligned head."""


def _meta(record: MessageRecord) -> dict[str, object]:
    if "images" in record.metadata:
        return {"seq": record.seq, _UNSEEN: "images"}
    if record.role == "assistant" and record.metadata.get("status") == "failed":
        return {"seq": record.seq, _UNSEEN: "failed"}
    return {"seq": record.seq}


def _head(prefix: CallPrefix, chunk: list[ChatMessage]) -> list[ChatMessage] | None:
    """The cache-aligned request's messages for ``chunk`` (the first one): the prefix,
    then the rows as DbMemory shows them (failure notices left out); ``None`` when an
    image row is among them (the model saw its data, not this row)."""
    if not prefix.enabled or any(m.metadata.get(_UNSEEN) == "images" for m in chunk):
        return None
    return [*prefix.before, *(m for m in chunk if _UNSEEN not in m.metadata)]


async def fold_older(
    session: AsyncSession,
    conversation_id: str,
    *,
    after_seq: int,
    before_seq: int,
    previous: str | None,
    llm: LLM,
    budget: int,
    options: CompactionOptions,
    counter: TokenCounter,
    max_chunks: int,
    prefix: CallPrefix | None = None,
) -> FoldOutcome:
    """Fold the history rows with ``after_seq < seq < before_seq`` (see the module doc).

    ``prefix``: what the previous model call sent before the first row (see the module
    doc). Never raises for a model failure: folding stops and ``stopped`` says why.
    """
    out = FoldOutcome()
    answer_tokens, facts_tokens = summary_sizes(budget, llm)
    chunk_limit = min(MAX_CHUNK_TOKENS, int(summarizer_input_tokens(llm) * CHUNK_SHARE))
    cursor = after_seq
    chunk: list[ChatMessage] = []
    chunk_tokens = 0
    chunks = 0

    async def flush() -> bool:
        nonlocal chunk, chunk_tokens, chunks, previous
        head = _head(prefix, chunk) if prefix is not None and chunks == 0 else None
        outcome = await summarize(
            chunk, previous, llm, hint=options.hint, prompt=options.prompt,
            timeout=options.timeout, answer_tokens=answer_tokens, counter=counter, head=head,
            tools=prefix.tools if prefix is not None else None)
        out.usage += outcome.usage
        if outcome.text is None:
            out.stopped = f"summariser failed: {outcome.reason}"
            return False
        # choosing facts is CPU work: off the event loop
        summary = await asyncio.to_thread(
            build_summary_message, outcome.text, chunk, previous, hint=options.hint,
            answer_tokens=answer_tokens, facts_tokens=facts_tokens, counter=counter,
        )
        out.last_seq = int(chunk[-1].metadata["seq"])
        out.summary = summary.replace(metadata={"kind": "summary",
                                                "checkpoint_seq": out.last_seq})
        out.folded += len(chunk)
        previous = previous_text(summary)
        chunk, chunk_tokens = [], 0
        chunks += 1
        return True

    while True:
        page = await read_page(session, conversation_id, after_seq=cursor,
                               before_seq=before_seq, limit=PAGE_ROWS)
        messages, costs = await asyncio.to_thread(_costs, counter, page)
        for message, cost in zip(messages, costs, strict=True):
            if chunk and chunk_tokens + cost > chunk_limit:
                if chunks >= max_chunks:
                    out.stopped = f"bounded: {max_chunks} chunk(s) per load"
                    return out
                if not await flush():
                    return out
            chunk.append(message)
            chunk_tokens += cost
        if len(page) < PAGE_ROWS:
            break
        cursor = page[-1].seq
    if chunk:
        if chunks >= max_chunks:
            out.stopped = f"bounded: {max_chunks} chunk(s) per load"
        else:
            await flush()
    return out
