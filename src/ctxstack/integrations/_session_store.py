"""Framework items kept in ctxstack's own tables: one conversation per session id.

A framework session (an OpenAI Agents ``Session``) is stored as a ctxstack conversation,
no extra table: each item is one row of ``messages`` (its role, its text for search and
the archive, and the item itself, verbatim, in ``metadata["item"]``), ordered by the
conversation's sequence numbers; a rolling summary is a ``compaction_checkpoints`` row, as
in the chat service. So SQLite and PostgreSQL, migrations, concurrency-safe numbering and
the archive come with the store.

The conversation id is derived from the session id (a hash, 32 hex like every
conversation id) and the conversation belongs to a service user (default
``ctxstack-integrations``, created on first use; its API token is random and never shown),
so these sessions never appear among a human user's conversations.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from ctxstack.errors import InputError
from ctxstack.store import (
    CheckpointCandidate,
    CheckpointRecord,
    NewMessage,
    SessionFactory,
    append_messages,
    create_engine_from_url,
    create_user,
    session_factory,
    upgrade,
)
from ctxstack.store.checkpoints import read_latest_checkpoint, save_checkpoint
from ctxstack.store.db import reading, transaction
from ctxstack.store.messages import read_page
from ctxstack.store.models import CompactionCheckpoint, Conversation, Message, User

ITEM_KEY = "item"
SERVICE_USER = "ctxstack-integrations"
# Engines already migrated by a store (weak: an engine's identity, not its URL, since two
# PostgreSQL schemas share a URL).
_migrated: weakref.WeakSet[Engine] = weakref.WeakSet()


def conversation_id_for(namespace: str, session_id: str) -> str:
    """The conversation id of a framework session (stable, 32 lowercase hex)."""
    return hashlib.sha256(f"{namespace}\0{session_id}".encode()).hexdigest()[:32]


@dataclass(frozen=True)
class StoredItem:
    seq: int
    item: dict[str, Any]


class ItemStore:
    """Items of one session in one database (engine made lazily, migrated once)."""

    def __init__(self, namespace: str, session_id: str, database: str | AsyncEngine | None,
                 *, owner: str = SERVICE_USER, migrate: bool = True) -> None:
        if not isinstance(session_id, str) or not session_id:
            raise InputError("session_id: expected a non-empty string")
        self.session_id = session_id
        self.conversation_id = conversation_id_for(namespace, session_id)
        self._database = database
        self._owner = owner
        self._migrate = migrate
        self._factory: SessionFactory | None = None
        self._engine: AsyncEngine | None = None
        self._owns_engine = not isinstance(database, AsyncEngine)
        self._owner_id: int | None = None
        self._lock: asyncio.Lock | None = None

    async def factory(self) -> SessionFactory:
        if self._factory is not None:
            return self._factory
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:  # concurrent first calls make one engine, migrate once
            if self._factory is not None:
                return self._factory
            engine = (self._database if isinstance(self._database, AsyncEngine)
                      else create_engine_from_url(self._database))
            if self._migrate and engine.sync_engine not in _migrated:
                await upgrade(engine)
                _migrated.add(engine.sync_engine)
            self._engine, self._factory = engine, session_factory(engine)
            return self._factory

    async def close(self) -> None:
        """Dispose of the engine this store created (a given engine is the caller's)."""
        if self._engine is not None and self._owns_engine:
            await self._engine.dispose()
        self._engine = self._factory = None

    async def _ensure_conversation(self, factory: SessionFactory) -> None:
        async with reading(factory, "looking up a session") as s:
            if await s.scalar(select(Conversation.id).where(
                    Conversation.id == self.conversation_id)) is not None:
                return
        owner_id = await self._owner_id_of(factory)
        title = " ".join(f"session {self.session_id}".split())[:200]
        try:
            async with transaction(factory, f"creating session {self.session_id!r}") as s:
                s.add(Conversation(id=self.conversation_id, owner_id=owner_id, title=title,
                                   last_seq=0, input_tokens=0, output_tokens=0))
        except Exception as exc:  # a concurrent first write created it: fine
            if not isinstance(exc.__cause__, IntegrityError):
                raise

    async def _owner_id_of(self, factory: SessionFactory) -> int:
        if self._owner_id is None:
            async with reading(factory, f"looking up user {self._owner!r}") as s:
                found = await s.scalar(select(User.id).where(User.name == self._owner))
            if found is None:
                try:
                    record, _ = await create_user(factory, self._owner)
                    found = record.id
                except InputError:  # created concurrently
                    async with reading(factory, f"looking up user {self._owner!r}") as s:
                        found = await s.scalar(select(User.id).where(User.name == self._owner))
            self._owner_id = int(found) if found is not None else None
        if self._owner_id is None:
            raise InputError(f"owner: user {self._owner!r} could not be created")
        return self._owner_id

    async def add(self, rows: Sequence[tuple[str, str | None, dict[str, Any]]]) -> None:
        """Append ``(role, text, item)`` rows in order."""
        if not rows:
            return
        factory = await self.factory()
        await self._ensure_conversation(factory)
        messages = [
            NewMessage(role=role, content=text,
                       metadata={ITEM_KEY: json.loads(json.dumps(item, default=str))})
            for role, text, item in rows
        ]
        await append_messages(factory, self.conversation_id, messages)

    async def read(
        self, *, after_seq: int = 0, last: int | None = None
    ) -> tuple[list[StoredItem], CheckpointRecord | None]:
        """Items after ``after_seq`` (or the newest ``last``) in order, and the checkpoint
        (only read when ``last`` is None)."""
        factory = await self.factory()
        async with reading(factory, f"reading session {self.session_id!r}") as s:
            checkpoint = None
            if last is None:
                checkpoint = await read_latest_checkpoint(s, self.conversation_id)
                if checkpoint is not None:
                    after_seq = max(after_seq, checkpoint.last_seq)
            records = await read_page(s, self.conversation_id, after_seq=after_seq,
                                      roles=None, limit=last, newest_first=last is not None)
        if last is not None:
            records.reverse()
        items = [StoredItem(r.seq, r.metadata[ITEM_KEY]) for r in records
                 if isinstance(r.metadata.get(ITEM_KEY), dict)]
        return items, checkpoint

    async def checkpoint(self, summary: str, last_seq: int, tokens: int) -> None:
        factory = await self.factory()
        await save_checkpoint(factory, self.conversation_id, CheckpointCandidate(
            summary=summary, last_seq=last_seq, token_count=tokens))

    async def pop(self) -> dict[str, Any] | None:
        """Remove and return the newest item (and any checkpoint that covered it)."""
        factory = await self.factory()
        async with transaction(factory, f"popping from session {self.session_id!r}") as s:
            row = await s.scalar(select(Message).where(
                Message.conversation_id == self.conversation_id
            ).order_by(Message.seq.desc()).limit(1))
            if row is None:
                return None
            item = (row.meta or {}).get(ITEM_KEY)
            await s.execute(delete(Message).where(Message.id == row.id))
            await s.execute(delete(CompactionCheckpoint).where(
                CompactionCheckpoint.conversation_id == self.conversation_id,
                CompactionCheckpoint.last_seq >= row.seq))
        return item if isinstance(item, dict) else None

    async def clear(self) -> None:
        """Delete the session: its items and checkpoints go with the conversation."""
        factory = await self.factory()
        async with transaction(factory, f"clearing session {self.session_id!r}") as s:
            await s.execute(delete(CompactionCheckpoint).where(
                CompactionCheckpoint.conversation_id == self.conversation_id))
            await s.execute(delete(Message).where(
                Message.conversation_id == self.conversation_id))
            await s.execute(delete(Conversation).where(
                Conversation.id == self.conversation_id))
