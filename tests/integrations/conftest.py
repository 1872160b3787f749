"""Fixtures for the framework adapters: a database on SQLite and on PostgreSQL.

PostgreSQL comes from :mod:`tests.store.dbkit` (one schema per test, skipped when the
server is unreachable unless ``CTXSTACK_REQUIRE_POSTGRES=1``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.store.dbkit import postgres_backend


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def db_engine(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    """An engine on an empty database (the adapter migrates it on first use)."""
    from ctxstack.store.db import create_engine_from_url

    if request.param == "sqlite":
        engine = create_engine_from_url(f"sqlite+aiosqlite:///{tmp_path / 'agents.db'}")
        try:
            yield engine
        finally:
            await engine.dispose()
        return
    async for pg in postgres_backend():
        engine = pg.engine()
        try:
            yield engine
        finally:
            await engine.dispose()
