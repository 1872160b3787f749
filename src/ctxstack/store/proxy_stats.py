"""``ctxstack proxy``'s running totals, shared by every worker (table ``proxy_stats``).

One row per counter key (``requests``, ``compactions.llm``, ``upstream_errors.429``, …).
Each proxy worker counts in memory and adds what it counted since its last flush in one
transaction (:func:`add_proxy_stats`, an atomic ``value = value + delta`` upsert on both
SQLite and PostgreSQL: no read-modify-write, so concurrent workers never lose an
increment). :func:`load_proxy_stats` reads the sums. The totals are those of every proxy
that used the database since it was created; they survive restarts.
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from ctxstack.errors import InputError
from ctxstack.store.db import SessionFactory, engine_of, reading, retry_transaction
from ctxstack.store.models import ProxyStat, utcnow

MAX_KEY_CHARS = 100


async def add_proxy_stats(factory: SessionFactory, deltas: Mapping[str, int]) -> None:
    """Add ``deltas`` to the stored totals (keys created at their first delta).

    Raises:
        InputError: a key is empty or longer than 100 characters.
        StorageError: the database failed (nothing was added).
    """
    items = sorted((k, int(v)) for k, v in deltas.items() if v)  # sorted: no deadlocks
    if not items:
        return
    for key, _ in items:
        if not key or len(key) > MAX_KEY_CHARS:
            raise InputError(f"proxy stats key: expected 1–{MAX_KEY_CHARS} characters, "
                             f"got {key!r}")
    dialect = engine_of(factory).dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    now = utcnow()

    async def work(session: AsyncSession) -> None:
        for key, delta in items:
            stmt = insert(ProxyStat).values(key=key, value=delta, updated_at=now)
            stmt = stmt.on_conflict_do_update(
                index_elements=[ProxyStat.key],
                set_={"value": ProxyStat.value + stmt.excluded.value, "updated_at": now})
            await session.execute(stmt)

    await retry_transaction(factory, "adding proxy stats", work)


async def load_proxy_stats(factory: SessionFactory) -> dict[str, int]:
    """Every stored total, by key.

    Raises:
        StorageError: the database failed.
    """
    async with reading(factory, "reading proxy stats") as session:
        rows = await session.execute(select(ProxyStat.key, ProxyStat.value))
        return {key: int(value) for key, value in rows}
