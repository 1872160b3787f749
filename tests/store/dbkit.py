"""Database backends for the storage tests (imported by ``conftest.py`` and tests).

PostgreSQL: ``CTXSTACK_TEST_POSTGRES_URL`` (default
``postgresql+asyncpg://postgres@127.0.0.1:5432/test``). Each test gets its own schema
``ctxstack_test_<random>`` (via ``search_path``), dropped afterwards. When the server is
not reachable the PostgreSQL variants skip — unless ``CTXSTACK_REQUIRE_POSTGRES=1`` (CI),
which turns that into a failure.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from ctxstack.store.db import create_engine_from_url

PG_URL = os.environ.get(
    "CTXSTACK_TEST_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
)
_pg_state: dict[str, str | None] = {}


@dataclass(frozen=True)
class Backend:
    name: str
    url: str
    schema: str | None = None

    def engine(self) -> AsyncEngine:
        return create_engine_from_url(self.url, schema=self.schema)


async def _pg_problem() -> str | None:
    """``None`` when PostgreSQL answers, else why not (checked once per session)."""
    if "problem" not in _pg_state:
        engine = create_engine_from_url(PG_URL, connect_args={"timeout": 3})
        try:
            async with engine.connect() as conn:
                await conn.execute(text("select 1"))
            _pg_state["problem"] = None
        except Exception as exc:
            _pg_state["problem"] = f"{type(exc).__name__}: {exc}".splitlines()[0]
        finally:
            await engine.dispose()
    return _pg_state["problem"]


async def postgres_backend() -> AsyncIterator[Backend]:
    """A fresh PostgreSQL schema (skip or fail when the server is unreachable)."""
    problem = await _pg_problem()
    if problem is not None:
        message = (
            f"PostgreSQL not reachable at {PG_URL} ({problem}). To run these tests start "
            "the server (e.g. pg_ctlcluster <version> main start) or point "
            "CTXSTACK_TEST_POSTGRES_URL at one; .ci/run sets CTXSTACK_REQUIRE_POSTGRES=1 "
            "which makes this a failure."
        )
        if os.environ.get("CTXSTACK_REQUIRE_POSTGRES") == "1":
            pytest.fail(message)
        pytest.skip(message)
    schema = f"ctxstack_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine_from_url(PG_URL)
    try:
        async with admin.begin() as conn:
            await conn.execute(text(f'CREATE SCHEMA "{schema}"'))
        yield Backend("postgres", PG_URL, schema)
    finally:
        async with admin.begin() as conn:
            await conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        await admin.dispose()
