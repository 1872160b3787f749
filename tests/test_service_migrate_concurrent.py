"""Two servers starting together on a fresh database both migrate it (issue 15, failure 8).

Before the lock, one of two concurrent ``upgrade`` runs failed with "table users already
exists" (2 of 5 multi-host starts). Now PostgreSQL serialises them with an advisory lock
and SQLite with a lock file; the second finds the head and does nothing.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ctxstack.store import create_user, session_factory
from ctxstack.store.migrate import current_revision, head_revision, upgrade
from tests.store.dbkit import Backend, postgres_backend


async def _race(backend: Backend, starts: int) -> None:
    engines = [backend.engine() for _ in range(starts)]
    try:
        results = await asyncio.gather(*(upgrade(e) for e in engines), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        assert errors == [], errors
        assert results == [head_revision()] * starts
        assert await current_revision(engines[0]) == head_revision()
        user, _ = await create_user(session_factory(engines[0]), "after-race")
        assert user.id > 0
    finally:
        for engine in engines:
            await engine.dispose()


@pytest.mark.parametrize("round_", range(3))
async def test_concurrent_upgrades_on_fresh_sqlite(tmp_path: Path, round_: int) -> None:
    await _race(Backend("sqlite", f"sqlite+aiosqlite:///{tmp_path / 'fresh.db'}"), 3)


@pytest.mark.postgres
@pytest.mark.parametrize("round_", range(3))
async def test_concurrent_upgrades_on_fresh_postgres(round_: int) -> None:
    async for backend in postgres_backend():
        await _race(backend, 3)
