"""Conversations: create, list, rename, delete — always scoped to their owner.

A conversation id that is malformed, unknown, or owned by someone else gives the same
:class:`~ctxstack.store.errors.NotFoundError`: a caller cannot learn whether another user's
conversation exists.
"""

from __future__ import annotations

import re
from datetime import datetime

from pydantic import BaseModel, ConfigDict
from sqlalchemy import bindparam, delete, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from ctxstack.errors import InputError
from ctxstack.store.db import SessionFactory, reading, transaction
from ctxstack.store.errors import NotFoundError
from ctxstack.store.models import Conversation, table_of, utcnow

_CONVERSATIONS = table_of(Conversation)
# The chat route's read of every turn, built once (see store.messages._BUMP: a statement
# built per call cost more CPU than the query).
_BY_ID = select(_CONVERSATIONS).where(_CONVERSATIONS.c.id == bindparam("b_conversation"))
_BY_ID_OWNED = _BY_ID.where(_CONVERSATIONS.c.owner_id == bindparam("b_owner"))

DEFAULT_TITLE = "New conversation"
MAX_TITLE_LENGTH = 200
PUBLIC_ID = re.compile(r"[0-9a-f]{32}")


class ConversationRecord(BaseModel):
    """A conversation's row. ``last_seq`` is the highest message sequence number so far."""

    model_config = ConfigDict(frozen=True, from_attributes=True)

    id: str
    owner_id: int
    title: str
    created_at: datetime
    updated_at: datetime
    last_seq: int
    input_tokens: int
    output_tokens: int


def check_title(title: str) -> str:
    """A clean title: stripped, non-empty, at most 200 characters, one line."""
    title = " ".join(title.split())
    if not title:
        raise InputError("title: must not be empty")
    if len(title) > MAX_TITLE_LENGTH:
        raise InputError(f"title: at most {MAX_TITLE_LENGTH} characters, got {len(title)}")
    return title


def valid_public_id(value: object) -> bool:
    """True when ``value`` has the shape of a conversation or file id (32 lowercase hex)."""
    return isinstance(value, str) and PUBLIC_ID.fullmatch(value) is not None


def _not_found(conversation_id: object) -> NotFoundError:
    return NotFoundError(f"conversation {conversation_id!r} not found")


async def fetch_conversation(
    session: AsyncSession, conversation_id: str, owner_id: int | None
) -> Conversation:
    """The conversation row inside an open session (owner-checked when ``owner_id`` given)."""
    if not valid_public_id(conversation_id):
        raise _not_found(conversation_id)
    stmt = select(Conversation).where(Conversation.id == conversation_id)
    if owner_id is not None:
        stmt = stmt.where(Conversation.owner_id == owner_id)
    row = await session.scalar(stmt)
    if row is None:
        raise _not_found(conversation_id)
    return row


async def create_conversation(
    factory: SessionFactory, owner_id: int, title: str | None = None
) -> ConversationRecord:
    """Start a conversation for ``owner_id`` (title defaults to "New conversation")."""
    clean = check_title(title) if title is not None else DEFAULT_TITLE
    async with transaction(factory, f"creating a conversation for user {owner_id}") as session:
        row = Conversation(owner_id=owner_id, title=clean, last_seq=0,
                           input_tokens=0, output_tokens=0)
        session.add(row)
        await session.flush()
        return ConversationRecord.model_validate(row)


async def get_conversation(
    factory: SessionFactory, conversation_id: str, *, owner_id: int | None = None
) -> ConversationRecord:
    """One conversation; with ``owner_id``, only if that user owns it.

    Raises:
        NotFoundError: malformed id, no such conversation, or another owner's.
    """
    if not valid_public_id(conversation_id):
        raise _not_found(conversation_id)
    async with reading(factory, f"loading conversation {conversation_id!r}") as session:
        return await get_conversation_in(session, conversation_id, owner_id=owner_id)


async def get_conversation_in(
    session: AsyncSession, conversation_id: str, *, owner_id: int | None = None
) -> ConversationRecord:
    """:func:`get_conversation` inside an open session: the chat route reads the
    conversation in the transaction that claims it for the turn (one transaction per
    turn start instead of a read and a write, issue 15).

    Raises:
        NotFoundError: as :func:`get_conversation`.
    """
    if not valid_public_id(conversation_id):
        raise _not_found(conversation_id)
    # Core (see table_of): the chat route reads the conversation on every turn.
    stmt, bound = ((_BY_ID, {"b_conversation": conversation_id}) if owner_id is None else
                   (_BY_ID_OWNED, {"b_conversation": conversation_id, "b_owner": owner_id}))
    row = (await (await session.connection()).execute(stmt, bound)).first()
    if row is None:
        raise _not_found(conversation_id)
    return ConversationRecord.model_validate(dict(row._mapping))


async def list_conversations(
    factory: SessionFactory, owner_id: int, *, limit: int = 100, offset: int = 0
) -> list[ConversationRecord]:
    """The owner's conversations, most recently active first."""
    if limit <= 0 or offset < 0:
        raise InputError("limit must be positive and offset non-negative")
    stmt = (
        select(Conversation)
        .where(Conversation.owner_id == owner_id)
        .order_by(Conversation.updated_at.desc(), Conversation.id)
        .limit(limit)
        .offset(offset)
    )
    async with reading(factory, f"listing conversations of user {owner_id}") as session:
        return [ConversationRecord.model_validate(r) for r in await session.scalars(stmt)]


async def count_conversations(factory: SessionFactory, owner_id: int) -> int:
    """How many conversations ``owner_id`` has."""
    stmt = select(func.count()).select_from(Conversation).where(
        Conversation.owner_id == owner_id
    )
    async with reading(factory, f"counting conversations of user {owner_id}") as session:
        return int(await session.scalar(stmt) or 0)


async def rename_conversation(
    factory: SessionFactory, owner_id: int, conversation_id: str, title: str
) -> ConversationRecord:
    """Give the owner's conversation a new title.

    Raises:
        InputError: the title is empty or too long.
        NotFoundError: not this owner's conversation.
    """
    async with transaction(factory, f"renaming conversation {conversation_id!r}") as session:
        return await rename_conversation_in(session, owner_id, conversation_id, title)


async def rename_conversation_in(
    session: AsyncSession, owner_id: int, conversation_id: str, title: str
) -> ConversationRecord:
    """:func:`rename_conversation` inside the caller's open transaction."""
    clean = check_title(title)
    if not valid_public_id(conversation_id):
        raise _not_found(conversation_id)
    stmt = (
        update(Conversation)
        .where(Conversation.id == conversation_id, Conversation.owner_id == owner_id)
        .values(title=clean, updated_at=utcnow())
        .returning(Conversation)
    )
    row = await session.scalar(stmt)
    if row is None:
        raise _not_found(conversation_id)
    return ConversationRecord.model_validate(row)


async def delete_conversation(factory: SessionFactory, owner_id: int, conversation_id: str) -> None:
    """Delete the owner's conversation with its messages and checkpoints.

    Uploaded files stay: they belong to the user, not to one conversation.

    Raises:
        NotFoundError: not this owner's conversation.
    """
    if not valid_public_id(conversation_id):
        raise _not_found(conversation_id)
    stmt = (
        delete(Conversation)
        .where(Conversation.id == conversation_id, Conversation.owner_id == owner_id)
        .returning(Conversation.id)
    )
    async with transaction(factory, f"deleting conversation {conversation_id!r}") as session:
        if await session.scalar(stmt) is None:
            raise _not_found(conversation_id)
