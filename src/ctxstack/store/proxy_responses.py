"""The proxy's Responses conversations: one row per relayed response, chained by parent.

A Responses client continuing a conversation sends ``previous_response_id`` and only its
new input items. To keep what the upstream sees within the budget, ``ctxstack proxy``
must know the whole conversation behind that id: each response it relayed is stored with
its parent's id and the items it added (the request's new input, then the response's
output), so a chain is rebuilt by walking parents. Storing the delta, not the whole
conversation, keeps a chain of ``n`` turns at ``O(n)`` rows of ``O(turn)`` size.

Rows are keyed by ``(owner, response_id)``: ``owner`` is a hash of the caller's identity
and key, so one client never reads another's conversation. The table is bounded: rows
older than ``ttl`` are neither returned nor kept, and beyond ``max_rows`` the oldest are
deleted, by :func:`prune_proxy_responses` (the proxy calls it every so many saves).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import delete, func, select
from sqlalchemy.exc import IntegrityError

from ctxstack.store.db import SessionFactory, reading, transaction
from ctxstack.store.errors import StorageError
from ctxstack.store.models import ProxyResponse, utcnow

DEFAULT_MAX_ROWS = 100_000
DEFAULT_TTL = timedelta(days=7)


class ProxyResponseRecord(BaseModel):
    """One stored response (see :class:`~ctxstack.store.models.ProxyResponse`)."""

    model_config = ConfigDict(frozen=True, from_attributes=True)

    owner: str = Field(min_length=1, max_length=64)
    response_id: str = Field(min_length=1, max_length=200)
    parent_id: str | None = Field(default=None, max_length=200)
    model: str = Field(max_length=200)
    items: str
    """The items this response added to its chain, as a JSON array."""
    created_at: datetime | None = None


async def find_proxy_response(factory: SessionFactory, owner: str, response_id: str, *,
                              ttl: timedelta = DEFAULT_TTL) -> ProxyResponseRecord | None:
    """The unexpired row of ``(owner, response_id)``, or None.

    Raises:
        StorageError: the database failed.
    """
    stmt = select(ProxyResponse).where(
        ProxyResponse.owner == owner, ProxyResponse.response_id == response_id[:200],
        ProxyResponse.created_at >= utcnow() - ttl)
    async with reading(factory, "looking up a proxy response") as session:
        row = await session.scalar(stmt)
        return None if row is None else ProxyResponseRecord.model_validate(row)


async def save_proxy_response(factory: SessionFactory, record: ProxyResponseRecord) -> bool:
    """Store ``record``; False when that owner already has a row with its id. (Saved on
    every relayed response, so pruning is the caller's, every so many saves.)

    Raises:
        StorageError: the database failed.
    """
    now = utcnow()
    row = ProxyResponse(owner=record.owner, response_id=record.response_id,
                        parent_id=record.parent_id, model=record.model[:200],
                        items=record.items, created_at=now)
    try:
        async with transaction(factory, "saving a proxy response") as session:
            session.add(row)
    except StorageError as exc:
        if isinstance(exc.__cause__, IntegrityError):
            return False
        raise
    return True


async def prune_proxy_responses(factory: SessionFactory, *, max_rows: int = DEFAULT_MAX_ROWS,
                                ttl: timedelta = DEFAULT_TTL,
                                now: datetime | None = None) -> None:
    """Delete rows older than ``ttl``, then all but the newest ``max_rows``."""
    now = now or utcnow()
    async with transaction(factory, "pruning proxy responses") as session:
        await session.execute(delete(ProxyResponse).where(ProxyResponse.created_at < now - ttl))
        count = int(await session.scalar(select(func.count(ProxyResponse.id))) or 0)
        if count <= max_rows:
            return
        surplus = (select(ProxyResponse.id).order_by(ProxyResponse.id.asc())
                   .limit(count - max_rows))
        await session.execute(delete(ProxyResponse).where(
            ProxyResponse.id.in_(surplus.scalar_subquery())))


async def count_proxy_responses(factory: SessionFactory) -> int:
    """How many responses are stored (for tests)."""
    async with reading(factory, "counting proxy responses") as session:
        return int(await session.scalar(select(func.count(ProxyResponse.id))) or 0)
