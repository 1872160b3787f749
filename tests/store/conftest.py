"""Fixtures for storage tests: every test using ``sf`` runs on SQLite and on PostgreSQL
(the ``backend`` fixture of :mod:`tests.db_fixtures`).

See :mod:`tests.store.dbkit` for how PostgreSQL is found, isolated and skipped.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from ctxstack.store import SessionFactory, UserRecord, create_user, session_factory, upgrade
from tests.store.dbkit import Backend


@pytest.fixture
async def engine(backend: Backend) -> AsyncIterator[AsyncEngine]:
    """A migrated database's engine."""
    eng = backend.engine()
    await upgrade(eng)
    try:
        yield eng
    finally:
        await eng.dispose()


@pytest.fixture
def sf(engine: AsyncEngine) -> SessionFactory:
    """Session factory on a migrated database."""
    return session_factory(engine)


@pytest.fixture
async def alice(sf: SessionFactory) -> UserRecord:
    user, _ = await create_user(sf, "alice")
    return user


@pytest.fixture
async def bob(sf: SessionFactory) -> UserRecord:
    user, _ = await create_user(sf, "bob")
    return user
