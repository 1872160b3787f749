"""Writing a finished turn: one transaction for everything the turn produced.

A turn ends with up to four kinds of rows — the injects the agent consumed (user
messages, kind "inject", before the answer), the assistant message (answer, usage, the
turn's SSE events, status), injects that arrived too late (user messages after it, so
nothing the user typed is lost), and DbMemory's new compaction checkpoint. They are
written together or not at all, so a crash can never leave an answer without its
checkpoint or a checkpoint covering messages that were never stored.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from sqlalchemy import bindparam, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from ctxstack.messages._model import kind_metadata
from ctxstack.protocol import Usage
from ctxstack.server.schemas import MessageStatus, Mode
from ctxstack.server.sse import EVENT_NAMES, ErrorData, SseErrorEvent, SSEEvent, stored_form
from ctxstack.store.checkpoints import CheckpointCandidate
from ctxstack.store.db import SessionFactory, retry_transaction
from ctxstack.store.messages import NewMessage, append_messages_in
from ctxstack.store.models import CompactionCheckpoint, Message, table_of, utcnow


class SavedTurn(BaseModel):
    """Ids of what :func:`save_turn` wrote."""

    assistant_message_id: int
    assistant_seq: int
    checkpoint_saved: bool


@dataclass(frozen=True)
class FinishedTurn:
    """Everything a finished turn writes (see the module docstring)."""

    conversation_id: str
    owner_id: int
    consumed_injects: Sequence[str]
    answer: str
    usage: Usage
    events: Sequence[SSEEvent]
    status: MessageStatus
    mode: Mode
    leftover_injects: Sequence[str]
    checkpoint: CheckpointCandidate | None


INTERRUPTED_ANSWER = ("The turn was interrupted before its answer could be saved (its "
                      "worker stopped, or the database was unreachable). Ask again.")
_MESSAGES = table_of(Message)
_LAST_EXCHANGE = (
    select(_MESSAGES.c.role)
    .where(_MESSAGES.c.conversation_id == bindparam("b_conversation"),
           or_(_MESSAGES.c.role == "assistant", _MESSAGES.c.kind == "query"))
    .order_by(_MESSAGES.c.seq.desc()).limit(1))


async def unanswered_question(session: AsyncSession, conversation_id: str) -> bool:
    """Whether the conversation's last question has no answer stored after it — its
    turn failed to save or its worker died. The claim of the next turn is held when
    this is asked, so no turn of the conversation is running."""
    role = (await (await session.connection()).execute(
        _LAST_EXCHANGE, {"b_conversation": conversation_id})).scalar()
    return role == "user"


def interrupted_answer() -> NewMessage:
    """The outcome recorded for a question whose turn never stored its answer (status
    "failed": like a failed turn's text, it is never read back to the model)."""
    error = SseErrorEvent(data=ErrorData(message=INTERRUPTED_ANSWER, kind="failed"))
    return NewMessage(role="assistant", content=INTERRUPTED_ANSWER,
                      metadata={"status": "failed", "outcome": "interrupted",
                                "events": [stored_form(error)]})


def turn_messages(turn: FinishedTurn) -> list[NewMessage]:
    """The rows a turn appends, in order (pure; see the module docstring)."""
    rows = [NewMessage(role="user", content=text, metadata=kind_metadata("inject"))
            for text in turn.consumed_injects]
    rows.append(NewMessage(
        role="assistant",
        content=turn.answer,
        usage=turn.usage,
        metadata={"status": turn.status, "mode": turn.mode,
                  "events": [stored_form(e) for e in turn.events]},
    ))
    rows.extend(NewMessage(role="user", content=text,
                           metadata=kind_metadata("inject", consumed=False))
                for text in turn.leftover_injects)
    return rows


async def save_turn(factory: SessionFactory, turn: FinishedTurn) -> SavedTurn:
    """Append the turn's messages and save its checkpoint in one transaction.

    Raises:
        NotFoundError: the conversation is gone (deleted while the turn ran).
        StorageError: the database failed (transient lock errors are retried first).
    """
    action = f"saving a turn of conversation {turn.conversation_id!r}"

    async def work(session: AsyncSession) -> SavedTurn:
        return await save_turn_in(session, turn)

    return await retry_transaction(factory, action, work)


async def save_turn_in(session: AsyncSession, turn: FinishedTurn) -> SavedTurn:
    """:func:`save_turn`'s writes inside an open transaction (the database inject queue
    finishes, saves and releases a turn in one: see
    :meth:`ctxstack.server.injects.DbInjectQueue.settle`)."""
    records = await append_messages_in(session, turn.conversation_id, turn_messages(turn),
                                       owner_id=turn.owner_id)
    checkpoint = turn.checkpoint
    if checkpoint is not None:
        session.add(CompactionCheckpoint(
            conversation_id=turn.conversation_id, last_seq=checkpoint.last_seq,
            summary=checkpoint.summary, token_count=checkpoint.token_count,
            method=checkpoint.method, created_at=utcnow()))
        await session.flush()
    assistant = records[len(turn.consumed_injects)]
    return SavedTurn(assistant_message_id=assistant.id, assistant_seq=assistant.seq,
                     checkpoint_saved=checkpoint is not None)


def stored_events(metadata: dict[str, Any]) -> list[dict[str, Any]]:
    """The SSE events kept on a stored assistant message (malformed entries skipped)."""
    events = metadata.get("events")
    if not isinstance(events, list):
        return []
    return [e for e in events
            if isinstance(e, dict) and e.get("event") in EVENT_NAMES
            and isinstance(e.get("data"), dict)]
