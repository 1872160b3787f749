"""Shared fixtures for the proxy tests that run proxy apps in process over a database.

Registered in the root ``conftest.py``:

* ``proxy_db_url`` — a migrated SQLite database at ``tmp_path / "proxy.db"`` (a test may
  break it through that path);
* ``proxy_backend`` — that database, and (marked ``postgres``) a fresh migrated PostgreSQL
  schema: the cases that must hold across workers sharing a database.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.proxy_support import migrated_backend, migrated_sqlite
from tests.store.dbkit import Backend


@pytest.fixture
async def proxy_db_url(tmp_path: Path) -> str:
    return await migrated_sqlite(tmp_path / "proxy.db")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def proxy_backend(request: pytest.FixtureRequest,
                        proxy_db_url: str) -> AsyncIterator[Backend]:
    async for found in migrated_backend(request.param, proxy_db_url):
        yield found
