"""The service's database pool keeps what one worker's concurrent turns check out.

With SQLAlchemy's default of 5 kept connections, every checkout beyond them opened a new
connection and closed it on return: under load (issue 15) that was a new PostgreSQL
server process and handshake per burst of queries. The service sizes its pool by
``CTXSTACK_DB_POOL_SIZE`` instead.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sqlalchemy import text

from ctxstack.errors import ConfigError
from ctxstack.server.settings import DEFAULT_DB_POOL_SIZE, Settings
from ctxstack.server.state import close_state, open_state
from ctxstack.store.db import create_engine_from_url, engine_of
from ctxstack.store.migrate import upgrade


async def _burst(settings: Settings, width: int) -> int:
    """Hold ``width`` connections at once, release them; how many the pool kept."""
    state = await open_state(settings)
    try:
        engine = engine_of(state.factory)
        barrier = asyncio.Barrier(width)

        async def hold() -> None:
            async with engine.connect() as conn:
                await conn.execute(text("SELECT 1"))
                await barrier.wait()

        await asyncio.gather(*(hold() for _ in range(width)))
        return int(engine.pool.checkedin())  # type: ignore[attr-defined]
    finally:
        await close_state(state)


async def test_a_burst_within_the_pool_size_keeps_every_connection(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'pool.db'}"
    await upgrade(url)
    settings = Settings.from_env({"CTXSTACK_DATABASE_URL": url, "CTXSTACK_AUTH": "token",
                                  "CTXSTACK_CALIBRATE": "0", "CTXSTACK_DB_POOL_SIZE": "12",
                                  "CTXSTACK_FILES_DIR": str(tmp_path / "files")})
    assert Settings.from_env(settings.to_env()).db_pool_size == 12
    # 12 at once: SQLAlchemy's default pool would have kept 5 and closed the other 7.
    assert await _burst(settings, 12) == 12


async def test_the_default_pool_is_bigger_than_sqlalchemys(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'pool.db'}"
    await upgrade(url)
    settings = Settings(database_url=url, auth="token", calibrate=False,
                        files_dir=tmp_path / "files")
    assert settings.db_pool_size == DEFAULT_DB_POOL_SIZE > 5
    # More than the pool: the extra ones are opened for the burst and closed after it.
    assert await _burst(settings.model_copy(update={"db_pool_size": 3}), 6) == 3


def test_the_pool_size_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="CTXSTACK_DB_POOL_SIZE"):
        Settings.from_env({"CTXSTACK_DB_POOL_SIZE": "0"})


async def test_an_in_memory_sqlite_engine_ignores_the_pool_size() -> None:
    engine = create_engine_from_url("sqlite+aiosqlite:///:memory:", pool_size=20,
                                    max_overflow=5)
    try:
        async with engine.connect() as conn:
            assert (await conn.execute(text("SELECT 1"))).scalar() == 1
    finally:
        await engine.dispose()
