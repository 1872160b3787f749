"""Rewriting the end of a conversation: regenerate an answer, edit a sent question.

Both replace what followed a question: the rows from a sequence number on are deleted
(their seq numbers are never reused: the counter in ``conversations.last_seq`` only
grows), and every compaction checkpoint whose summary covers one of them is deleted with
them — a summary of messages that no longer exist must not reach the model. The next
load then starts from an older checkpoint (or none) and summarises again if the history
still overflows: the summary is rebuilt on the next turn.

These functions run inside the caller's transaction (the turn's claim: see
:class:`~ctxstack.server.lifecycle.TurnLease`), so a replaced answer and its new
question can never be seen half-written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from ctxstack.errors import InputError
from ctxstack.store.errors import NotFoundError
from ctxstack.store.models import CompactionCheckpoint, Message


@dataclass(frozen=True)
class Question:
    """A stored question (a user message of kind "query"), with its attachments."""

    id: int
    seq: int
    content: str
    images: list[dict[str, Any]] = field(default_factory=list)
    mode: str | None = None


def _question(row: Message) -> Question:
    meta = row.meta or {}
    images = meta.get("images")
    mode = meta.get("mode")
    return Question(id=row.id, seq=row.seq, content=row.content or "",
                    images=[i for i in images if isinstance(i, dict)]
                    if isinstance(images, list) else [],
                    mode=mode if isinstance(mode, str) else None)


async def last_question(session: AsyncSession, conversation_id: str) -> Question:
    """The conversation's newest question (what Regenerate answers again).

    Raises:
        InputError: the conversation has no question yet.
    """
    row = await session.scalar(
        select(Message).where(Message.conversation_id == conversation_id,
                              Message.role == "user", Message.kind == "query")
        .order_by(Message.seq.desc()).limit(1))
    if row is None:
        raise InputError("there is no question to answer again in this conversation")
    return _question(row)


async def question_by_id(session: AsyncSession, conversation_id: str,
                         message_id: int) -> Question:
    """The question with this id in this conversation.

    Raises:
        NotFoundError: no such message here.
        InputError: the message is not a question the user asked (an answer, an inject).
    """
    row = await session.scalar(select(Message).where(
        Message.conversation_id == conversation_id, Message.id == message_id))
    if row is None:
        raise NotFoundError(f"message {message_id} not found")
    if row.role != "user" or row.kind != "query":
        raise InputError(f"message {message_id} is not a question (only questions can be "
                         "edited)")
    return _question(row)


async def delete_from(session: AsyncSession, conversation_id: str, from_seq: int) -> int:
    """Delete the messages with ``seq >= from_seq`` and every checkpoint that covers one
    of them (``last_seq >= from_seq``); the number of messages deleted."""
    await session.execute(delete(CompactionCheckpoint).where(
        CompactionCheckpoint.conversation_id == conversation_id,
        CompactionCheckpoint.last_seq >= from_seq))
    result = await session.execute(delete(Message).where(
        Message.conversation_id == conversation_id, Message.seq >= from_seq))
    return int(getattr(result, "rowcount", 0) or 0)


__all__ = ["Question", "delete_from", "last_question", "question_by_id"]
