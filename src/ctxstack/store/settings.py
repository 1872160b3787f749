"""The storage's configuration: which database, how long to wait for it, where files go.

Read by :func:`ctxstack.store.db.create_engine_from_url` and
:class:`ctxstack.store.files.FileStore` when their caller passes nothing; the chat service's
:class:`~ctxstack.server.settings.Settings` extends this class. Why each default is what it
is: :mod:`ctxstack.store.db`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BeforeValidator, Field

from ctxstack.configuration import EnvSettings

DEFAULT_DB_POOL_SIZE = 20
"""Database connections a worker keeps open (``CTXSTACK_DB_POOL_SIZE``). SQLAlchemy's
default of 5 is below what one worker's concurrent turns check out at once: every
checkout beyond the kept ones opened a new connection and closed it on return — on
PostgreSQL a new server process and a handshake per query burst, which was most of the
worker's CPU per turn and its event-loop lag under load (issue 15). 10 more may be opened
for a burst beyond it (SQLAlchemy's ``max_overflow``)."""


def _upper(value: Any) -> Any:
    return value.upper() if isinstance(value, str) else value


class StorageSettings(EnvSettings):
    """Where the store keeps its data and how long it waits for the database."""

    component: ClassVar[str] = "Storage (service and proxy)"

    database_url: str | None = Field(None, validation_alias="CTXSTACK_DATABASE_URL")
    """SQLAlchemy URL, SQLite file or PostgreSQL (``sqlite+aiosqlite:///path.db``,
    ``postgresql+asyncpg://user@host/db``); unset: ``ctxstack.db`` in the user's data
    directory."""
    database_schema: str | None = Field(None, validation_alias="CTXSTACK_DATABASE_SCHEMA")
    """PostgreSQL schema to work in (tests, shared databases)."""
    files_dir: Path | None = Field(None, validation_alias="CTXSTACK_FILES_DIR")
    """Where uploaded images are kept; unset: ``files`` in the user's data directory."""
    db_connect_timeout: float = Field(5.0, gt=0, le=3600,
                                      validation_alias="CTXSTACK_DB_CONNECT_TIMEOUT")
    """Seconds to open a database connection (PostgreSQL)."""
    db_statement_timeout: float = Field(15.0, gt=0, le=86_400,
                                        validation_alias="CTXSTACK_DB_STATEMENT_TIMEOUT")
    """Seconds one statement (or the wait for a pooled connection, or SQLite's lock) may
    take."""
    db_pool_size: int = Field(DEFAULT_DB_POOL_SIZE, gt=0, le=1000,
                              validation_alias="CTXSTACK_DB_POOL_SIZE")
    """Database connections a worker keeps open (10 more may open for a burst)."""
    sqlite_synchronous: Annotated[Literal["NORMAL", "FULL"], BeforeValidator(_upper)] = Field(
        "NORMAL", validation_alias="CTXSTACK_SQLITE_SYNCHRONOUS")
    """SQLite's commit durability: ``NORMAL`` loses the last commits only on a power loss
    or OS crash; ``FULL`` syncs the log on every commit (slower under load)."""
