"""The ``backend`` fixture: a test that takes it runs on SQLite and on PostgreSQL.

Registered for every test module in ``tests/conftest.py``; see :mod:`tests.store.dbkit`
for how PostgreSQL is found, isolated (a schema per test) and skipped.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.store.dbkit import Backend, postgres_backend


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    """An empty database on each backend."""
    if request.param == "sqlite":
        yield Backend("sqlite", f"sqlite+aiosqlite:///{tmp_path / 'ctxstack.db'}")
        return
    async for pg in postgres_backend():
        yield pg
