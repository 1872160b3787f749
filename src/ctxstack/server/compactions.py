"""What the model remembers: exact compaction counts, and the summaries behind them.

The page draws one divider in a conversation: right after the last stored message the
rolling summary covers, saying how many stored messages it covers. The numbers must be
exact and comparable live and after a reload, so they are counted in one place, over the
conversation's **stored history** (user and assistant rows) only:

* a load compaction (:class:`~ctxstack.store.memory.DbMemory`) covers everything up to
  its checkpoint candidate's ``last_seq`` — the previous summary included, since it is
  folded into the new one (:func:`load_compaction`);
* a guard compaction mid-turn folds stored messages the agent still had verbatim and this
  turn's own tool messages; :class:`FoldTracker`, a listener on the guard's checks, sees
  both lists and tells which stored ``seq`` left the context (:func:`run_compaction`);
* the persisted summaries are the compaction checkpoints: :func:`list_compactions` lists
  them with their prose, their "Facts kept verbatim", the span they cover, their summary
  ref and the earlier summaries each condensed with their own spans (``GET
  /api/conversations/{id}/compactions``; the hierarchy of :mod:`ctxstack.store.summaries`).

A span's count is a ``COUNT`` of history rows up to ``last_seq`` (one indexed query), not
arithmetic on in-memory lists, so it cannot drift from what the messages route returns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from pydantic import BaseModel
from sqlalchemy import func, select

from ctxstack.agent import CompactionNoticeEvent
from ctxstack.compaction import FACTS_HEADING, SUMMARY_PREFIX
from ctxstack.compaction._stages import RECALL_NOTE
from ctxstack.compaction._summaries import strip_ref_note
from ctxstack.dag import StepActivityEvent
from ctxstack.guard import CompactionEvent, GuardCheckEvent
from ctxstack.messages import ChatMessage
from ctxstack.server.sse import CompactData
from ctxstack.store.conversations import fetch_conversation
from ctxstack.store.db import SessionFactory, reading
from ctxstack.store.memory import DbMemory
from ctxstack.store.messages import HISTORY_ROLES
from ctxstack.store.models import CompactionCheckpoint, Message
from ctxstack.store.summaries import checkpoint_nodes


class SummaryChildOut(BaseModel):
    """An earlier summary a compaction condensed: its ref and the stored messages it
    summarised itself (``first_seq``..``last_seq``, ``messages`` of them)."""

    ref: str
    first_seq: int | None
    last_seq: int | None
    messages: int


class CompactionOut(BaseModel):
    """One persisted compaction: the summary the next turns start from.

    ``ref`` is its summary ref (``c<id>``; the agent's ``recall`` expands it);
    ``first_seq``..``last_seq`` and ``summarized_messages`` its whole range; ``children``
    the earlier summaries it condensed, oldest first, each with its own range; and
    ``own_first_seq``..``own_last_seq`` (``own_messages``) what it summarised itself —
    the children's ranges and its own tile the whole (issue 29).
    """

    created_at: datetime
    method: Literal["llm", "truncate", "mask"]
    summarized_messages: int
    first_seq: int | None
    last_seq: int
    summary: str
    facts: list[str]
    ref: str = ""
    children: list[SummaryChildOut] = []
    own_first_seq: int | None = None
    own_last_seq: int | None = None
    own_messages: int = 0


def split_summary(text: str) -> tuple[str, list[str]]:
    """(prose, facts) of a summary message's text (prefix and facts heading removed)."""
    body = text.removeprefix(SUMMARY_PREFIX).strip()
    prose, heading, kept = body.partition(FACTS_HEADING)
    facts = [line.strip()[2:].strip() for line in kept.splitlines()
             if line.strip().startswith("- ")] if heading else []
    # The notes telling the model that recall exists are for the model, not the reader.
    prose = strip_ref_note(prose.replace(RECALL_NOTE, ""))
    return prose, [strip_ref_note(f) for f in facts if f != RECALL_NOTE and strip_ref_note(f)]


def stored_seq(message: ChatMessage) -> int | None:
    """The stored ``seq`` of a history message (``None`` for everything else)."""
    seq = message.metadata.get("seq")
    return seq if isinstance(seq, int) and not isinstance(seq, bool) else None


@dataclass(frozen=True)
class Span:
    """Stored history rows up to a ``seq``: how many, and the first one's ``seq``."""

    count: int = 0
    first_seq: int | None = None
    last_seq: int | None = None


async def history_span(factory: SessionFactory, conversation_id: str, up_to: int) -> Span:
    """The conversation's history rows with ``seq <= up_to`` (one query)."""
    stmt = select(func.count(), func.min(Message.seq), func.max(Message.seq)).where(
        Message.conversation_id == conversation_id, Message.seq <= up_to,
        Message.role.in_(HISTORY_ROLES))
    async with reading(factory, f"counting the history of conversation {conversation_id!r}") \
            as session:
        row = (await session.execute(stmt)).one()
    count, first, last = int(row[0] or 0), row[1], row[2]
    return Span(count=count, first_seq=int(first) if first is not None else None,
                last_seq=int(last) if last is not None else None)


@dataclass(frozen=True)
class PendingSpan:
    """The span of the stored messages up to ``last_seq``, not counted yet.

    What a load that started from a checkpoint and did not compact returns instead of a
    :class:`Span`: counting what the checkpoint covers is a query over every history row
    up to it — a cost that grows with the conversation, not the budget — and only a
    mid-turn compaction needs the figure (:func:`resolve_span`), so most turns skip it.
    """

    conversation_id: str
    last_seq: int


async def resolve_span(span: Span | PendingSpan, factory: SessionFactory) -> Span:
    """``span`` counted (:func:`history_span`) if it is pending, else itself."""
    if isinstance(span, PendingSpan):
        return await history_span(factory, span.conversation_id, span.last_seq)
    return span


async def load_compaction(
    memory: DbMemory, history: Sequence[ChatMessage], factory: SessionFactory
) -> tuple[CompactData | None, Span | PendingSpan]:
    """The ``compact`` event of a load (``None`` if it did not compact) and the span the
    context's summary covers after it (what a later mid-turn compaction starts from;
    :class:`PendingSpan` when the load did not compact: counted only if needed)."""
    if not memory.was_compacted:
        if memory.checkpoint is None:
            return None, Span()
        return None, PendingSpan(memory.conversation_id, memory.checkpoint.last_seq)
    previous = Span()
    if memory.checkpoint is not None:
        previous = await history_span(factory, memory.conversation_id,
                                      memory.checkpoint.last_seq)
    kept = sum(1 for m in history if stored_seq(m) is not None)
    loaded = memory.original_count - (1 if memory.checkpoint is not None else 0)
    original = previous.count + loaded
    summary = next((m for m in history if m.metadata.get("kind") == "summary"), None)
    span = previous
    if memory.checkpoint_candidate is not None:
        span = await history_span(factory, memory.conversation_id,
                                  memory.checkpoint_candidate.last_seq)
    elif memory.method == "llm":  # folded, but not as one leading run (an anchor kept)
        span = Span(count=max(previous.count, original - kept), first_seq=previous.first_seq,
                    last_seq=previous.last_seq)
    if memory.method == "llm" and span.last_seq is not None:
        # Messages the summary covers count as summarised, never as kept, so that
        # summarised + kept = original.
        last = span.last_seq
        kept = sum(1 for m in history if (s := stored_seq(m)) is not None and s > last)
    prose, facts = split_summary(summary.text) if summary is not None else ("", [])
    method: Literal["llm", "truncate"] = "llm" if memory.method == "llm" else "truncate"
    data = CompactData(
        original_messages=original, kept_messages=kept,
        summarized_messages=span.count if method == "llm" else 0,
        method=method, scope="load", first_seq=span.first_seq if method == "llm" else None,
        last_seq=span.last_seq if method == "llm" else None,
        summary=prose or None, facts=facts)
    return data, span if method == "llm" else previous


EventMethod = Literal["llm", "truncate", "mask"]


def _method(value: str) -> EventMethod:
    """A guard method as the event says it ("mask": cleared tool outputs, issue 14)."""
    return "llm" if value == "llm" else "mask" if value == "mask" else "truncate"


@dataclass
class GuardFold:
    """What one guard check changed: stored and in-turn messages in and out."""

    stored_in: list[int]
    stored_out: list[int]
    turn_in: int
    turn_out: int
    summary: ChatMessage | None


def _fold(before: Sequence[ChatMessage], after: Sequence[ChatMessage]) -> GuardFold:
    stored_in = [s for m in before if (s := stored_seq(m)) is not None]
    stored_out = [s for m in after if (s := stored_seq(m)) is not None]

    def turn(messages: Sequence[ChatMessage]) -> int:
        return sum(1 for m in messages if m.role in ("tool", "assistant")
                   and stored_seq(m) is None)

    summary = next((m for m in after if m.metadata.get("kind") == "summary"), None)
    return GuardFold(stored_in, stored_out, turn(before), turn(after), summary)


class FoldTracker:
    """A guard ``on_check`` listener: what the last *compacting* check changed.

    :attr:`last_fold` is read by the turn when the agent reports that compaction (a
    check that kept every message, or returned the list untouched, leaves it as it was).
    """

    def __init__(self) -> None:
        self.last_fold: GuardFold | None = None

    def __call__(self, event: GuardCheckEvent) -> None:
        before, after = event.messages_in, event.result.messages
        if after is not before and len(after) != len(before):
            self.last_fold = _fold(before, after)


def run_compaction(event: CompactionEvent, fold: GuardFold | None, base: Span) -> tuple[
        CompactData, Span]:
    """The ``compact`` event of a mid-turn compaction and the span covered after it.

    ``base`` is what the summary covered before (the load's span). Stored messages that
    left the context were folded into the new summary (``"llm"``) or dropped.
    """
    fold = fold or GuardFold([], [], 0, 0, None)
    gone = sorted(set(fold.stored_in) - set(fold.stored_out))
    if base.last_seq is not None:
        # a stored message the load's summary already covers adds nothing to the span
        # when folded again (it was counted in ``base``)
        gone = [seq for seq in gone if seq > base.last_seq]
    method = _method(event.method)
    span = base
    if method == "llm" and gone:
        first = min(s for s in (base.first_seq, gone[0]) if s is not None)
        span = Span(count=base.count + len(gone), first_seq=first, last_seq=gone[-1])
    original = base.count + len(fold.stored_in)
    prose, facts = split_summary(fold.summary.text) if (
        fold.summary is not None and method == "llm") else ("", [])
    data = CompactData(
        original_messages=original, kept_messages=len(fold.stored_out),
        summarized_messages=span.count if method == "llm" else base.count,
        cleared_tool_outputs=event.masked,
        method=method, scope="run", first_seq=span.first_seq, last_seq=span.last_seq,
        turn_messages=max(0, fold.turn_in - fold.turn_out) if method == "llm" else 0,
        summary=prose or None, facts=facts, hint=event.hint)
    return data, span


def step_compaction(event: StepActivityEvent) -> CompactData:
    """The ``compact`` event of a DAG step's compaction: a dependency result summarised
    for the step's input (hint ``step_dependency``) or the step agent's own context. Only
    the step's own messages are involved, so no stored message is counted."""
    notice = event.activity
    assert isinstance(notice, CompactionNoticeEvent)
    compaction = notice.compaction
    method = _method(compaction.method)
    return CompactData(original_messages=0, kept_messages=0, method=method, scope="step",
                       turn_messages=compaction.summarized, step=event.step_id,
                       hint=compaction.hint, cleared_tool_outputs=compaction.masked)


async def list_compactions(
    factory: SessionFactory, conversation_id: str, owner_id: int
) -> list[CompactionOut]:
    """The conversation's persisted compactions, oldest first (owner-checked).

    Raises:
        NotFoundError: no such conversation, or not ``owner_id``'s.
    """
    action = f"listing the compactions of conversation {conversation_id!r}"
    async with reading(factory, action) as session:
        await fetch_conversation(session, conversation_id, owner_id)
        rows = list(await session.scalars(
            select(CompactionCheckpoint)
            .where(CompactionCheckpoint.conversation_id == conversation_id)
            .order_by(CompactionCheckpoint.created_at, CompactionCheckpoint.id)))
        nodes = await checkpoint_nodes(session, conversation_id)
    out = []
    for row in rows:
        prose, facts = split_summary(row.summary)
        node = nodes[row.id]
        children = [SummaryChildOut(ref=c.ref, first_seq=_seq(c.messages[:1]),
                                    last_seq=_seq(c.messages[-1:]), messages=len(c.messages))
                    for r in node.children if (c := nodes.get(int(r[1:]))) is not None]
        out.append(CompactionOut(
            created_at=row.created_at, method="llm", summarized_messages=node.count,
            first_seq=_seq([node.first] if node.first else []), last_seq=row.last_seq,
            summary=prose, facts=facts, ref=node.ref, children=children,
            own_first_seq=_seq(node.messages[:1]), own_last_seq=_seq(node.messages[-1:]),
            own_messages=len(node.messages)))
    return out


def _seq(refs: Sequence[str]) -> int | None:
    """The stored ``seq`` of the first ``m<seq>`` ref given (None for none)."""
    return int(refs[0][1:]) if refs else None


__all__ = ["CompactionOut", "FoldTracker", "PendingSpan", "Span", "SummaryChildOut",
           "list_compactions", "load_compaction", "resolve_span", "run_compaction", "split_summary",
           "step_compaction", "stored_seq"]
