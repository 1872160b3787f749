"""Stored messages and how their sequence numbers are allocated.

**Ordering.** A conversation's order is ``messages.seq`` (1, 2, 3, …), never a timestamp:
two turns may save in the same microsecond, and clocks of several service processes
disagree. Each append runs one transaction that *first* bumps the counter::

    UPDATE conversations SET last_seq = last_seq + n, ... WHERE id = ? [AND owner_id = ?]
    RETURNING last_seq

and then inserts its ``n`` rows with ``last_seq - n + 1 … last_seq``. The UPDATE takes the
conversation row's write lock (PostgreSQL) or the database write lock (SQLite) before
anything else happens in the transaction, so concurrent appends serialise on it: numbers
are never handed out twice, a batch gets consecutive numbers, and a committed message is
never lost. Doing the UPDATE first matters on SQLite: a transaction that read first and
then tries to write can fail at once with "database is locked" instead of waiting.

The unique ``(conversation_id, seq)`` constraint backs this up. Should the counter ever
lag the rows (restored backup, rows written by another tool), the insert violates it, the
counter is re-synchronised to ``max(seq)`` and the append retried. Transient lock errors
(SQLite busy, PostgreSQL deadlock / serialisation failure) are retried too, with a short
back-off; anything else is a :class:`~ctxstack.store.errors.StorageError`.

A caller that must write messages together with other rows in one transaction (the chat
service saves a turn's messages with its compaction checkpoint) calls
:func:`append_messages_in` inside its own
:func:`~ctxstack.store.db.retry_transaction`.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple, Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator
from sqlalchemy import Integer, Row, Text, bindparam, cast, func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from ctxstack.errors import InputError
from ctxstack.messages import ChatMessage, Role
from ctxstack.messages._model import scrub_surrogates
from ctxstack.protocol import Usage
from ctxstack.store.conversations import fetch_conversation, valid_public_id
from ctxstack.store.db import (
    DB_ERRORS,
    SessionFactory,
    engine_of,
    is_transient_error,
    reading,
    retry_transaction,
    storage_error,
)
from ctxstack.store.errors import NotFoundError
from ctxstack.store.models import Conversation, Message, table_of, utcnow

# Every turn appends its question and its answer and reads its history: Core statements
# (see table_of; through the ORM an append cost ~2 ms more CPU on PostgreSQL). Records
# are built from the rows.
_MESSAGES = table_of(Message)
_CONVERSATIONS = table_of(Conversation)
MESSAGE_COLUMNS = ("id", "conversation_id", "seq", "role", "content", "kind", "metadata",
                   "usage", "created_at")
"""The ``messages`` table's columns in table order: how :meth:`MessageRecord.from_row`
unpacks a row (a test checks the table against it)."""
HISTORY_COLUMNS = (_MESSAGES.c.seq, _MESSAGES.c.role, _MESSAGES.c.content, _MESSAGES.c.metadata)
"""What a history load selects (:class:`HistoryRow`)."""
HISTORY_TEXT_COLUMNS = (*HISTORY_COLUMNS[:3], cast(_MESSAGES.c.metadata, Text))
""":data:`HISTORY_COLUMNS` with the metadata as its stored JSON text
(:func:`read_history_rows`)."""

# The two statements of every append (a chat turn makes two appends), built once with
# bound parameters: building a Core statement and computing its cache key cost ~0.1 ms
# each time, more than running it on some turns; a statement built once keeps its
# cache key (issue 15).
_BUMP = (
    update(_CONVERSATIONS)
    .where(_CONVERSATIONS.c.id == bindparam("b_conversation"))
    .values(
        last_seq=_CONVERSATIONS.c.last_seq + bindparam("b_count"),
        input_tokens=_CONVERSATIONS.c.input_tokens + bindparam("b_input"),
        output_tokens=_CONVERSATIONS.c.output_tokens + bindparam("b_output"),
        updated_at=bindparam("b_now", type_=_CONVERSATIONS.c.updated_at.type),
    )
    .returning(_CONVERSATIONS.c.last_seq)
)
_BUMP_OWNED = _BUMP.where(_CONVERSATIONS.c.owner_id == bindparam("b_owner"))
_APPEND = insert(_MESSAGES).returning(*_MESSAGES.c)

log = logging.getLogger(__name__)

HISTORY_ROLES: tuple[Role, ...] = ("user", "assistant")


def _without_nul(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd") if "\x00" in value else value
    if isinstance(value, list):
        return [_without_nul(v) for v in value]
    if isinstance(value, dict):
        return {_without_nul(k): _without_nul(v) for k, v in value.items()}
    return value


class NewMessage(BaseModel):
    """A message to store. Images are referenced, not embedded: upload them to the
    :class:`~ctxstack.store.files.FileStore` and list them in ``metadata["images"]`` as
    ``{"file_id", "mime_type"}``."""

    model_config = ConfigDict(frozen=True)

    role: Role
    content: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    usage: Usage | None = None
    created_at: datetime | None = None

    @field_validator("content", "metadata", mode="after")
    @classmethod
    def _storable(cls, value: Any) -> Any:
        """Text every backend stores alike: a NUL character (PostgreSQL's text and jsonb
        refuse it, SQLite keeps it) and a lone surrogate (not encodable as UTF-8) each
        become U+FFFD, in the content and in metadata strings. The service refuses NUL
        at its edge (422) before it gets here; the library's own callers — an imported
        export, a tool that printed binary junk — get their history stored, not an
        error halfway through a batch."""
        return scrub_surrogates(_without_nul(value))

    @classmethod
    def from_chat(cls, message: ChatMessage, *, usage: Usage | None = None) -> NewMessage:
        """The storable form of a chat message (its text and metadata).

        Raises:
            InputError: the message embeds images, audio or files, or carries tool calls —
                store image files and reference them in metadata instead; the store keeps
                text and would otherwise drop the audio or file silently; tool traffic is
                not history.
        """
        if message.binary_parts:
            raise InputError(
                "content: embedded audio and file parts are not stored (the store keeps "
                "a message's text; the part would be lost); keep them outside the store"
            )
        if message.images:
            raise InputError(
                "content: embedded images are not stored; save them with FileStore.save and "
                'reference them in metadata["images"] as {"file_id", "mime_type"}'
            )
        if message.tool_calls:
            raise InputError("tool_calls: tool traffic is not stored as conversation history")
        meta = {k: v for k, v in message.metadata.items() if k != "seq"}
        if message.tool_call_id is not None:
            meta["tool_call_id"] = message.tool_call_id
        content = message.content if isinstance(message.content, str) else (
            message.text if message.content is not None else None
        )
        return cls(role=message.role, content=content, metadata=meta, usage=usage)


class MessageRecord(BaseModel):
    """A stored message. ``metadata`` is what was stored (``seq`` is its own field)."""

    model_config = ConfigDict(frozen=True)

    id: int
    conversation_id: str
    seq: int
    role: Role
    content: str | None
    kind: str | None
    metadata: dict[str, Any]
    usage: Usage | None
    created_at: datetime

    @classmethod
    def from_row(cls, row: Row[Any]) -> MessageRecord:
        """From a row of every column of the ``messages`` table in table order
        (:data:`MESSAGE_COLUMNS`): what :func:`page_statement` selects and an append
        returns.

        Unpacked by position and validated from one dict (the metadata copied, the usage
        validated as a nested model): a history load converts ~1,000 rows per turn, and
        nine lookups by name on the row mapping cost as much as the validation itself
        (~1.7 ms less per 900 rows). A row of another shape fails to unpack.
        """
        values: Sequence[Any] = row
        id_, conversation_id, seq, role, content, kind, metadata, usage, created_at = values
        return cls.model_validate({
            "id": id_, "conversation_id": conversation_id, "seq": seq,
            "role": role,  # the CHECK constraint guarantees a Role
            "content": content, "kind": kind, "metadata": metadata or {},
            "usage": usage or None, "created_at": created_at,
        })

    @property
    def image_refs(self) -> list[dict[str, Any]]:
        """The ``metadata["images"]`` entries that are objects (malformed ones skipped)."""
        return _image_refs(self.metadata)

    def to_chat_message(self) -> ChatMessage:
        """The text-only chat message, ``metadata["seq"]`` set (images are not rebuilt)."""
        return _chat_message(self.role, self.content, self.metadata, self.seq)


class HistoryRow(NamedTuple):
    """A stored message as a history load uses it: ``seq``, role, text and metadata.

    What :class:`~ctxstack.store.memory.DbMemory` reads on every turn — at the default
    64K budget ~1,000 rows — is these four columns into a plain tuple
    (:func:`read_history_page`). A :class:`MessageRecord` per row (every column, the
    usage JSON and the timestamp decoded, a model validated) cost ~3x the CPU on
    PostgreSQL (900 rows: 5.1 -> 1.8 ms) for fields a load never reads. The values are
    the database's: the role is one the query selects (user or assistant), the metadata
    the stored JSON object (``{}`` when NULL); rows are never written back from here.
    """

    seq: int
    role: Role
    content: str | None
    metadata: dict[str, Any]

    @classmethod
    def from_row(cls, row: Row[Any]) -> HistoryRow:
        """From a row of :data:`HISTORY_COLUMNS`, in that order."""
        values: Sequence[Any] = row
        seq, role, content, metadata = values
        return cls(seq, role, content, metadata or {})

    @property
    def image_refs(self) -> list[dict[str, Any]]:
        """As :attr:`MessageRecord.image_refs`."""
        return _image_refs(self.metadata)

    def to_chat_message(self) -> ChatMessage:
        """As :meth:`MessageRecord.to_chat_message`."""
        return _chat_message(self.role, self.content, self.metadata, self.seq)


def _image_refs(metadata: dict[str, Any]) -> list[dict[str, Any]]:
    images = metadata.get("images")
    if not isinstance(images, list):
        return []
    return [i for i in images if isinstance(i, dict)]


def _chat_message(role: Role, content: str | None, metadata: dict[str, Any],
                  seq: int) -> ChatMessage:
    return ChatMessage(
        role=role,
        content=content,
        tool_call_id=(str(metadata.get("tool_call_id") or "unknown")
                      if role == "tool" else None),
        metadata={**metadata, "seq": seq},
    )


def _row_values(conversation_id: str, seq: int, message: NewMessage) -> dict[str, Any]:
    kind = message.metadata.get("kind")
    return {
        "conversation_id": conversation_id,
        "seq": seq,
        "role": message.role,
        "content": message.content,
        "kind": kind if isinstance(kind, str) else None,
        "metadata": message.metadata,
        "usage": message.usage.model_dump() if message.usage else None,
        "created_at": message.created_at or utcnow(),
    }


def _is_seq_collision(exc: IntegrityError) -> bool:
    text = str(exc.orig)
    return (
        "uq_messages_conversation_id_seq" in text  # PostgreSQL names the constraint
        or "messages.conversation_id, messages.seq" in text  # SQLite names the columns
    )


def _storable(
    conversation_id: str, messages: Sequence[NewMessage | ChatMessage]
) -> list[NewMessage]:
    items = [m if isinstance(m, NewMessage) else NewMessage.from_chat(m) for m in messages]
    if items and not valid_public_id(conversation_id):
        raise NotFoundError(f"conversation {conversation_id!r} not found")
    return items


async def append_messages(
    factory: SessionFactory,
    conversation_id: str,
    messages: Sequence[NewMessage | ChatMessage],
    *,
    owner_id: int | None = None,
) -> list[MessageRecord]:
    """Append ``messages`` to the conversation, in order, with consecutive sequence numbers.

    Safe under concurrency (see the module docstring). Usage recorded on the messages is
    added to the conversation's token totals; ``updated_at`` moves to now.

    Raises:
        NotFoundError: no such conversation (or not ``owner_id``'s).
        InputError: a message cannot be stored (embedded images, tool calls).
        StorageError: the database failed (after retrying transient lock errors).
    """
    items = _storable(conversation_id, messages)
    if not items:
        return []
    action = f"appending {len(items)} message(s) to conversation {conversation_id!r}"
    retryable, before_retry = append_retry_policy(factory, conversation_id, action)

    async def work(session: AsyncSession) -> list[MessageRecord]:
        return await append_messages_in(session, conversation_id, items, owner_id=owner_id)

    return await retry_transaction(factory, action, work, retryable=retryable,
                                   before_retry=before_retry)


def append_retry_policy(
    factory: SessionFactory, conversation_id: str, action: str
) -> tuple[Callable[[BaseException], bool], Callable[[BaseException], Awaitable[None]]]:
    """``(retryable, before_retry)`` for :func:`~ctxstack.store.db.retry_transaction` around
    a transaction that calls :func:`append_messages_in`: transient lock errors are retried,
    and so is a sequence-number collision (a counter behind its messages), after
    re-synchronising the counter."""
    def retryable(exc: BaseException) -> bool:
        if isinstance(exc, IntegrityError):
            return _is_seq_collision(exc)
        return is_transient_error(exc)

    async def before_retry(exc: BaseException) -> None:
        if isinstance(exc, IntegrityError):
            log.warning("conversation %s: sequence counter behind its messages; "
                        "re-synchronising and retrying", conversation_id)
            await _resync_counter(factory, conversation_id, action)

    return retryable, before_retry


async def append_message(
    factory: SessionFactory,
    conversation_id: str,
    message: NewMessage | ChatMessage,
    *,
    owner_id: int | None = None,
) -> MessageRecord:
    """Append one message; see :func:`append_messages`."""
    (record,) = await append_messages(factory, conversation_id, [message], owner_id=owner_id)
    return record


async def append_messages_in(
    session: AsyncSession,
    conversation_id: str,
    messages: Sequence[NewMessage | ChatMessage],
    *,
    owner_id: int | None = None,
) -> list[MessageRecord]:
    """Append ``messages`` inside the caller's open transaction (one attempt, no commit).

    For writes that must land together with other rows — e.g. a chat turn's messages and
    its compaction checkpoint: ``async with factory() as s, s.begin(): await
    append_messages_in(s, ...); s.add(...)``. Numbering, token totals and ``updated_at`` are
    as in :func:`append_messages` (which calls this once per attempt); the counter UPDATE
    comes first, so call this before the transaction reads anything on SQLite.

    The caller owns the transaction and therefore the retry policy: database errors are
    *not* wrapped or retried here. Retry the whole transaction on an error for which
:func:`~ctxstack.store.db.is_transient_error` is true — run it inside
    :func:`~ctxstack.store.db.retry_transaction`, which does both.

    Raises:
        NotFoundError: no such conversation (or not ``owner_id``'s); the transaction
            should be rolled back.
        InputError: a message cannot be stored (embedded images, tool calls).
        sqlalchemy.exc.DBAPIError: the database failed (unwrapped, see above).
    """
    items = _storable(conversation_id, messages)
    if not items:
        return []
    n = len(items)
    bound: dict[str, Any] = {
        "b_conversation": conversation_id, "b_count": n,
        "b_input": sum(m.usage.input_tokens for m in items if m.usage),
        "b_output": sum(m.usage.output_tokens for m in items if m.usage),
        "b_now": utcnow(),
    }
    if owner_id is not None:
        bound["b_owner"] = owner_id
    connection = await session.connection()
    last = (await connection.execute(_BUMP if owner_id is None else _BUMP_OWNED,
                                     bound)).scalar()
    if last is None:
        raise NotFoundError(f"conversation {conversation_id!r} not found")
    first = last - n + 1
    rows = [_row_values(conversation_id, first + i, m) for i, m in enumerate(items)]
    # One row: a plain execute; several: one multi-row INSERT (RETURNING order is not
    # guaranteed there, hence the sort).
    result = await connection.execute(_APPEND, rows[0] if n == 1 else rows)
    return sorted((MessageRecord.from_row(r) for r in result), key=lambda r: r.seq)


async def _resync_counter(factory: SessionFactory, conversation_id: str, action: str) -> None:
    highest = (
        select(func.coalesce(func.max(Message.seq), 0))
        .where(Message.conversation_id == conversation_id)
        .scalar_subquery()
    )
    stmt = (
        update(Conversation)
        .where(Conversation.id == conversation_id, Conversation.last_seq < highest)
        .values(last_seq=highest)
        .execution_options(synchronize_session=False)
    )
    try:
        async with factory() as session, session.begin():
            await session.execute(stmt)
    except DB_ERRORS as exc:
        raise storage_error(action, engine_of(factory), exc) from exc


def page_statement(
    conversation_id: str,
    *,
    after_seq: int = 0,
    before_seq: int | None = None,
    roles: Sequence[str] | None = HISTORY_ROLES,
    limit: int | None = None,
    newest_first: bool = False,
) -> Any:
    """The SELECT for a slice of a conversation's messages (by ``seq``): every column of
    the ``messages`` table, rows for :meth:`MessageRecord.from_row`."""
    messages = _MESSAGES.c
    stmt = select(_MESSAGES).where(messages.conversation_id == conversation_id,
                                   messages.seq > after_seq)
    if before_seq is not None:
        stmt = stmt.where(messages.seq < before_seq)
    if roles is not None:
        stmt = stmt.where(messages.role.in_(tuple(roles)))
    stmt = stmt.order_by(messages.seq.desc() if newest_first else messages.seq)
    if limit is not None:
        stmt = stmt.limit(limit)
    return stmt


@functools.lru_cache(maxsize=64)
def _page_template(bounded: bool, roles: tuple[str, ...] | None, limited: bool,
                   newest_first: bool, history: bool = False,
                   metadata_text: bool = False) -> Any:
    """:func:`page_statement`'s shape with bound parameters, built once per shape: a
    turn's history read builds no statement (construction and cache key cost ~0.1 ms
    of CPU per statement, issue 15). ``history``: only :data:`HISTORY_COLUMNS`
    (``metadata_text``: :data:`HISTORY_TEXT_COLUMNS`)."""
    messages = _MESSAGES.c
    columns = (select(*HISTORY_TEXT_COLUMNS) if metadata_text else select(*HISTORY_COLUMNS)) \
        if history else select(_MESSAGES)
    stmt = columns.where(messages.conversation_id == bindparam("b_conversation"),
                         messages.seq > bindparam("b_after"))
    if bounded:
        stmt = stmt.where(messages.seq < bindparam("b_before"))
    if roles is not None:
        stmt = stmt.where(messages.role.in_(roles))
    stmt = stmt.order_by(messages.seq.desc() if newest_first else messages.seq)
    if limited:
        stmt = stmt.limit(bindparam("b_limit", type_=Integer))
    return stmt


async def read_page(
    session: AsyncSession,
    conversation_id: str,
    *,
    after_seq: int = 0,
    before_seq: int | None = None,
    roles: Sequence[str] | None = HISTORY_ROLES,
    limit: int | None = None,
    newest_first: bool = False,
) -> list[MessageRecord]:
    """One slice of messages inside an open session (the rows of :func:`page_statement`)."""
    stmt = _page_template(before_seq is not None, None if roles is None else tuple(roles),
                          limit is not None, newest_first)
    bound = _page_params(conversation_id, after_seq, before_seq, limit)
    return [MessageRecord.from_row(r) for r in await session.execute(stmt, bound)]


def _page_params(conversation_id: str, after_seq: int, before_seq: int | None,
                 limit: int | None) -> dict[str, Any]:
    """The bound values of a :func:`_page_template` statement."""
    bound: dict[str, Any] = {"b_conversation": conversation_id, "b_after": after_seq}
    if before_seq is not None:
        bound["b_before"] = before_seq
    if limit is not None:
        bound["b_limit"] = limit
    return bound


async def read_history_page(
    session: AsyncSession,
    conversation_id: str,
    *,
    after_seq: int = 0,
    before_seq: int | None = None,
    limit: int | None = None,
    newest_first: bool = False,
) -> list[HistoryRow]:
    """One slice of a conversation's user and assistant messages as :class:`HistoryRow`
    tuples, inside an open session (the slice as in :func:`page_statement`; the
    statement built once per shape, as :func:`read_page`'s)."""
    stmt = _page_template(before_seq is not None, HISTORY_ROLES, limit is not None,
                          newest_first, history=True)
    bound = _page_params(conversation_id, after_seq, before_seq, limit)
    return [HistoryRow.from_row(r) for r in await session.execute(stmt, bound)]


class KnownRow(Protocol):
    """A row an earlier read returned, with its metadata's JSON text (what
    :func:`read_history_rows` can give back without decoding it again)."""

    @property
    def row(self) -> HistoryRow: ...

    @property
    def metadata_text(self) -> str | None: ...


async def read_history_rows(
    session: AsyncSession,
    conversation_id: str,
    *,
    after_seq: int = 0,
    before_seq: int | None = None,
    limit: int | None = None,
    newest_first: bool = False,
    known: Mapping[int, KnownRow] | None = None,
) -> list[tuple[HistoryRow, str | None]]:
    """:func:`read_history_page`'s rows, each with its metadata's stored JSON text.

    A row whose ``seq``, role, text and metadata text equal those of ``known[seq]`` is
    that entry's :class:`HistoryRow` (the very object): its metadata is not decoded
    again. On a conversation stored by the chat service every answer's metadata holds
    the turn's events, so decoding ~1,000 of them was a large part of a turn's history
    read; comparing the text costs a string comparison. Any other row is decoded as the
    column's own type decodes it (``json.loads``; ``{}`` when NULL).
    """
    stmt = _page_template(before_seq is not None, HISTORY_ROLES, limit is not None,
                          newest_first, history=True, metadata_text=True)
    bound = _page_params(conversation_id, after_seq, before_seq, limit)
    known = known or {}
    out: list[tuple[HistoryRow, str | None]] = []
    for seq, role, content, text in (await session.execute(stmt, bound)).all():
        hit = known.get(seq)
        if hit is not None and hit.metadata_text == text:
            row = hit.row
            if row.content == content and row.role == role:
                out.append((row, text))
                continue
        out.append((HistoryRow(seq, role, content,
                               (json.loads(text) if text is not None else None) or {}), text))
    return out


async def list_messages(
    factory: SessionFactory,
    conversation_id: str,
    *,
    owner_id: int | None = None,
    after_seq: int = 0,
    limit: int | None = None,
    roles: Sequence[str] | None = None,
) -> list[MessageRecord]:
    """Messages of a conversation in ``seq`` order (all roles unless ``roles`` is given).

    Raises:
        NotFoundError: no such conversation (or not ``owner_id``'s).
    """
    async with reading(factory, f"listing messages of conversation {conversation_id!r}") as s:
        await fetch_conversation(s, conversation_id, owner_id)
        return await read_page(s, conversation_id, after_seq=after_seq, roles=roles,
                               limit=limit)
