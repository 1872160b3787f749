"""Compaction checkpoints: a conversation's rolling summary, persisted.

When :class:`~ctxstack.memory.DbMemory` had the LLM summarise older messages it offers a
:class:`CheckpointCandidate` (the summary text and the highest sequence number it covers).
The chat service saves it after the turn with :func:`save_checkpoint`; the next load
starts from :func:`latest_checkpoint` plus the messages after ``last_seq``. One
summarisation per overflow instead of one per request, and a load whose cost follows the
budget rather than the conversation's length.

"Latest" means the highest ``last_seq`` (then the newest row): two turns racing to save
checkpoints cannot make a load fall back to an older, shorter summary.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import Row, bindparam, insert, literal, select
from sqlalchemy.ext.asyncio import AsyncSession

from ctxstack.errors import InputError
from ctxstack.store.conversations import fetch_conversation, valid_public_id
from ctxstack.store.db import SessionFactory, reading, transaction
from ctxstack.store.errors import NotFoundError
from ctxstack.store.models import CompactionCheckpoint, Conversation, UTCDateTime, table_of, utcnow

_CHECKPOINTS = table_of(CompactionCheckpoint)
# Core, built once with a bound parameter: read on every turn (a statement built per call
# cost ~0.1 ms of CPU for its construction and cache key, issue 15).
_LATEST = (
    select(_CHECKPOINTS)
    .where(_CHECKPOINTS.c.conversation_id == bindparam("b_conversation"))
    .order_by(_CHECKPOINTS.c.last_seq.desc(), _CHECKPOINTS.c.id.desc())
    .limit(1)
)


class CheckpointCandidate(BaseModel):
    """What a load that summarised offers to persist.

    ``summary`` is the full text of the summary message (it starts with
    ``[Conversation summary]``); ``last_seq`` the highest sequence number folded into it;
    ``token_count`` the summary message's token estimate.
    """

    model_config = ConfigDict(frozen=True)

    summary: str = Field(min_length=1)
    last_seq: int = Field(gt=0)
    token_count: int = Field(ge=0)
    method: Literal["llm"] = "llm"


class CheckpointRecord(CheckpointCandidate):
    """A stored checkpoint."""

    id: int
    conversation_id: str
    created_at: datetime

    @classmethod
    def from_row(cls, row: CompactionCheckpoint | Row[Any]) -> CheckpointRecord:
        """From an ORM row or a Core row of the table (same attribute names)."""
        return cls(
            id=row.id,
            conversation_id=row.conversation_id,
            summary=row.summary,
            last_seq=row.last_seq,
            token_count=row.token_count,
            method="llm",
            created_at=row.created_at,
        )


async def save_checkpoint(
    factory: SessionFactory,
    conversation_id: str,
    candidate: CheckpointCandidate,
    *,
    owner_id: int | None = None,
) -> CheckpointRecord:
    """Persist ``candidate`` for the conversation.

    Raises:
        NotFoundError: no such conversation (or not ``owner_id``'s).
        InputError: the candidate covers sequence numbers the conversation never had.
        StorageError: the database failed.
    """
    # Write first (an INSERT … SELECT guarded by the conversation row), validate after:
    # on SQLite a transaction that reads before it writes can fail instead of waiting.
    guard = select(
        literal(conversation_id),
        literal(candidate.last_seq),
        literal(candidate.summary),
        literal(candidate.token_count),
        literal(candidate.method),
        literal(utcnow(), UTCDateTime()),
    ).where(Conversation.id == conversation_id, Conversation.last_seq >= candidate.last_seq)
    if owner_id is not None:
        guard = guard.where(Conversation.owner_id == owner_id)
    stmt = (
        insert(CompactionCheckpoint)
        .from_select(["conversation_id", "last_seq", "summary", "token_count", "method",
                      "created_at"], guard)
        .returning(CompactionCheckpoint)
    )
    if not valid_public_id(conversation_id):
        raise NotFoundError(f"conversation {conversation_id!r} not found")
    async with transaction(
        factory, f"saving a checkpoint of conversation {conversation_id!r}"
    ) as session:
        row = await session.scalar(stmt)
        if row is not None:
            return CheckpointRecord.from_row(row)
        conversation = await fetch_conversation(session, conversation_id, owner_id)
        raise InputError(
            f"last_seq: the checkpoint covers up to message {candidate.last_seq} but "
            f"conversation {conversation_id!r} has only {conversation.last_seq}"
        )


async def read_latest_checkpoint(
    session: AsyncSession, conversation_id: str
) -> CheckpointRecord | None:
    """The newest checkpoint inside an open session (one indexed row), or ``None``."""
    row = (await (await session.connection()).execute(
        _LATEST, {"b_conversation": conversation_id})).first()
    return CheckpointRecord.from_row(row) if row is not None else None


async def latest_checkpoint(
    factory: SessionFactory, conversation_id: str, *, owner_id: int | None = None
) -> CheckpointRecord | None:
    """The checkpoint the next load starts from, or ``None`` if there is none.

    Raises:
        NotFoundError: no such conversation (or not ``owner_id``'s).
    """
    async with reading(
        factory, f"loading the checkpoint of conversation {conversation_id!r}"
    ) as session:
        await fetch_conversation(session, conversation_id, owner_id)
        return await read_latest_checkpoint(session, conversation_id)
