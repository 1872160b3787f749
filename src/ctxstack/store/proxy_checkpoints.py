"""The proxy's checkpoints: rolling summaries keyed by the hash of the prefix they cover.

``ctxstack proxy`` sees no conversation ids: clients resend the whole history on every
call. After the proxy had a summary written it stores it here with the hash of the message
prefix the summary stands for; the next request of the same (grown) conversation finds it
by its ``root_hash`` (its opening messages), checks the prefix hash, and starts from the
summary instead of summarising again. One summarisation per overflow, shared by every
proxy worker that uses the same database.

The table is bounded: rows not used for ``ttl`` (by ``used_at``, else ``created_at``) are
neither returned nor kept, and beyond ``max_rows`` the least recently used rows are
deleted. Both happen when a checkpoint is saved, which is rare (once per overflow), so
lookups stay one indexed read. A reused checkpoint's life is extended by
:func:`touch_proxy_checkpoint`, which writes ``used_at`` at most once per ``every`` (a
conditional update: a checkpoint hit by every request of a busy conversation costs one
write an hour, not one per request).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import ColumnElement, and_, delete, func, or_, select, update
from sqlalchemy.exc import IntegrityError

from ctxstack.errors import InputError
from ctxstack.store.db import SessionFactory, reading, transaction
from ctxstack.store.errors import StorageError
from ctxstack.store.models import ProxyCheckpoint, utcnow

DEFAULT_MAX_ROWS = 10_000
DEFAULT_TTL = timedelta(days=7)
LOOKUP_LIMIT = 8
"""Candidates read per lookup: the newest few checkpoints of a conversation root."""


class ProxyCheckpointRecord(BaseModel):
    """One stored proxy checkpoint (see :class:`~ctxstack.store.models.ProxyCheckpoint`)."""

    model_config = ConfigDict(frozen=True, from_attributes=True)

    prefix_hash: str = Field(min_length=1, max_length=64)
    root_hash: str = Field(min_length=1, max_length=64)
    covered: int = Field(gt=0)
    model: str = Field(max_length=200)
    summary: str = Field(min_length=1)
    token_count: int = Field(ge=0)
    created_at: datetime | None = None
    used_at: datetime | None = None
    """When a request last reused it (None: never); it expires ``ttl`` after that."""

    def last_use(self) -> datetime | None:
        """``used_at``, else ``created_at``: what its expiry counts from."""
        return self.used_at or self.created_at


def _alive(cutoff: datetime) -> ColumnElement[bool]:
    """Used (or, never used, created) at or after ``cutoff``."""
    return or_(ProxyCheckpoint.used_at >= cutoff,
               and_(ProxyCheckpoint.used_at.is_(None), ProxyCheckpoint.created_at >= cutoff))


def _expired(cutoff: datetime) -> ColumnElement[bool]:
    """Neither created nor used since ``cutoff`` (the ``created_at`` index narrows it)."""
    return and_(ProxyCheckpoint.created_at < cutoff,
                or_(ProxyCheckpoint.used_at.is_(None), ProxyCheckpoint.used_at < cutoff))


async def find_proxy_checkpoints(
    factory: SessionFactory,
    root_hash: str,
    max_covered: int,
    *,
    ttl: timedelta = DEFAULT_TTL,
    limit: int = LOOKUP_LIMIT,
    now: datetime | None = None,
) -> list[ProxyCheckpointRecord]:
    """Unexpired checkpoints of ``root_hash`` covering at most ``max_covered`` messages,
    longest first. The caller verifies which one's ``prefix_hash`` matches its messages.

    Raises:
        StorageError: the database failed.
    """
    stmt = (
        select(ProxyCheckpoint)
        .where(
            ProxyCheckpoint.root_hash == root_hash,
            ProxyCheckpoint.covered <= max_covered,
            _alive((now or utcnow()) - ttl),
        )
        .order_by(ProxyCheckpoint.covered.desc(), ProxyCheckpoint.id.desc())
        .limit(limit)
    )
    async with reading(factory, "looking up proxy checkpoints") as session:
        return [ProxyCheckpointRecord.model_validate(r) for r in await session.scalars(stmt)]


async def save_proxy_checkpoint(
    factory: SessionFactory,
    record: ProxyCheckpointRecord,
    *,
    max_rows: int = DEFAULT_MAX_ROWS,
    ttl: timedelta = DEFAULT_TTL,
) -> bool:
    """Store ``record`` and prune expired and surplus rows. Returns False when a checkpoint
    with the same prefix hash already existed (another worker summarised the same prefix
    first; its summary is as good as ours, so ours is dropped).

    Raises:
        InputError: ``max_rows`` is not a positive integer.
        StorageError: the database failed.
    """
    if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1:
        raise InputError(f"max_rows: expected a positive integer, got {max_rows!r}")
    now = utcnow()
    row = ProxyCheckpoint(
        prefix_hash=record.prefix_hash, root_hash=record.root_hash, covered=record.covered,
        model=record.model[:200], summary=record.summary, token_count=record.token_count,
        created_at=now,
    )
    try:
        async with transaction(factory, "saving a proxy checkpoint") as session:
            session.add(row)
    except StorageError as exc:  # the unique prefix hash: a concurrent save of one prefix
        if isinstance(exc.__cause__, IntegrityError):
            return False
        raise
    await prune_proxy_checkpoints(factory, max_rows=max_rows, ttl=ttl, now=now)
    return True


async def prune_proxy_checkpoints(
    factory: SessionFactory,
    *,
    max_rows: int = DEFAULT_MAX_ROWS,
    ttl: timedelta = DEFAULT_TTL,
    now: datetime | None = None,
) -> None:
    """Delete expired rows, then all but the ``max_rows`` most recently used."""
    now = now or utcnow()
    async with transaction(factory, "pruning proxy checkpoints") as session:
        await session.execute(delete(ProxyCheckpoint).where(_expired(now - ttl)))
        count = int(await session.scalar(select(func.count(ProxyCheckpoint.id))) or 0)
        if count <= max_rows:
            return
        last_use = func.coalesce(ProxyCheckpoint.used_at, ProxyCheckpoint.created_at)
        surplus = (select(ProxyCheckpoint.id)
                   .order_by(last_use.asc(), ProxyCheckpoint.id.asc())
                   .limit(count - max_rows))
        await session.execute(delete(ProxyCheckpoint).where(
            ProxyCheckpoint.id.in_(surplus.scalar_subquery())))


async def touch_proxy_checkpoint(
    factory: SessionFactory,
    prefix_hash: str,
    *,
    every: timedelta,
    now: datetime | None = None,
) -> bool:
    """Mark a checkpoint used now, unless it was marked (or created) less than ``every``
    ago. Returns whether a row was written.

    Raises:
        StorageError: the database failed.
    """
    now = now or utcnow()
    stale = now - every
    stmt = (
        update(ProxyCheckpoint)
        .where(ProxyCheckpoint.prefix_hash == prefix_hash,
               or_(ProxyCheckpoint.used_at < stale,
                   and_(ProxyCheckpoint.used_at.is_(None),
                        ProxyCheckpoint.created_at < stale)))
        .values(used_at=now)
        .execution_options(synchronize_session=False)
    )
    async with transaction(factory, "marking a proxy checkpoint used") as session:
        result = await session.execute(stmt)
        return bool(getattr(result, "rowcount", 0))


async def count_proxy_checkpoints(factory: SessionFactory) -> int:
    """How many checkpoints are stored (for stats and tests)."""
    async with reading(factory, "counting proxy checkpoints") as session:
        return int(await session.scalar(select(func.count(ProxyCheckpoint.id))) or 0)
