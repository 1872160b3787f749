"""Apply the schema migrations shipped inside the package.

``await upgrade(url)`` brings a database (empty or older) to the newest schema; it is what
``ctxstack db upgrade`` runs. No ``alembic.ini`` is needed: the Alembic configuration is
built here and the migrations run on an async connection opened by ctxstack, so the same
code serves SQLite and PostgreSQL and can be called from inside a running event loop
(a service's start-up, a test).

Safe under concurrent start: several ``ctxstack serve`` processes (hosts) starting together
on a fresh database run the migrations one at a time. On PostgreSQL the migrating
transaction first takes a transaction-level advisory lock (released with its commit); on
SQLite an exclusive file lock on ``<database>.migrate.lock`` is held around the migration.
Whoever comes second finds the schema at the head and does nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from sqlalchemy import text
from sqlalchemy.engine import URL, Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from ctxstack.store.db import DB_ERRORS, create_engine_from_url, storage_error
from ctxstack.store.errors import StorageError

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
MIGRATION_STATEMENT_TIMEOUT_S = 600.0
ADVISORY_LOCK_KEY = 0x63747873_7461636B & 0x7FFFFFFFFFFFFFFF
"""The PostgreSQL advisory lock migrations take ("ctxstack" in ASCII, as a bigint)."""


def alembic_config() -> Config:
    """The Alembic configuration pointing at the shipped migrations."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return config


def head_revision() -> str:
    """The newest migration's revision id."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:  # pragma: no cover - the package always ships migrations
        raise StorageError("no migrations found in the ctxstack package")
    return head


def _migrate(connection: Connection, revision: str, down: bool) -> str | None:
    config = alembic_config()
    config.attributes["connection"] = connection
    (command.downgrade if down else command.upgrade)(config, revision)
    return MigrationContext.configure(connection).get_current_revision()


def _current(connection: Connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()


async def upgrade(
    target: str | URL | AsyncEngine | None = None,
    *,
    revision: str = "head",
    schema: str | None = None,
) -> str | None:
    """Migrate the database to ``revision`` (default: the newest); return the revision now
    applied.

    Args:
        target: an engine, or a URL (``None`` → ``CTXSTACK_DATABASE_URL`` → the default
            SQLite file); an engine made here is disposed of afterwards.
        revision: an Alembic revision id or ``"head"``.
        schema: PostgreSQL schema to migrate (ignored when an engine is given).

    Raises:
        StorageError: the database cannot be reached or a migration failed; the message
            names the database (password hidden) and the cause.
    """
    return await _run(target, revision, schema, down=False)


async def downgrade(
    target: str | URL | AsyncEngine | None = None,
    *,
    revision: str,
    schema: str | None = None,
) -> str | None:
    """Migrate the database back to ``revision`` (``"base"`` drops every table: data is
    lost). For operators undoing a release; see :func:`upgrade` for the arguments."""
    return await _run(target, revision, schema, down=True)


async def _run(
    target: str | URL | AsyncEngine | None, revision: str, schema: str | None, *, down: bool
) -> str | None:
    own = not isinstance(target, AsyncEngine)
    # Waiting for another process's migration (the lock) may take longer than one
    # statement is allowed in service; connecting stays bounded as usual.
    engine = target if isinstance(target, AsyncEngine) else create_engine_from_url(
        target, schema=schema, statement_timeout=MIGRATION_STATEMENT_TIMEOUT_S
    )
    action = f"migrating to {revision!r}"
    try:
        async with _file_lock(engine), engine.begin() as connection:
            if engine.dialect.name == "postgresql":
                await connection.execute(text("SELECT pg_advisory_xact_lock(:key)"),
                                         {"key": ADVISORY_LOCK_KEY})
            return await connection.run_sync(_migrate, revision, down)
    except CommandError as exc:
        raise StorageError(f"{action} failed: {exc}") from exc
    except DB_ERRORS as exc:
        raise storage_error(action, engine, exc) from exc
    finally:
        if own:
            await engine.dispose()


@contextlib.asynccontextmanager
async def _file_lock(engine: AsyncEngine) -> AsyncIterator[None]:
    """An exclusive lock file beside a SQLite database file (nothing for other databases,
    in-memory SQLite, or platforms without ``fcntl``)."""
    database = engine.url.database
    if engine.dialect.name != "sqlite" or not database or database == ":memory:":
        yield
        return
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: migrations are not serialised
        yield
        return

    def acquire() -> int:
        fd = os.open(os.path.expanduser(f"{database}.migrate.lock"),
                     os.O_CREAT | os.O_RDWR, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)  # blocks until the other migration is done
        return fd

    fd = await asyncio.to_thread(acquire)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


async def current_revision(
    target: str | URL | AsyncEngine | None = None, *, schema: str | None = None
) -> str | None:
    """The revision the database is at (``None`` for a database never migrated)."""
    own = not isinstance(target, AsyncEngine)
    engine = target if isinstance(target, AsyncEngine) else create_engine_from_url(
        target, schema=schema
    )
    try:
        async with engine.connect() as connection:
            return await connection.run_sync(_current)
    except DB_ERRORS as exc:
        raise storage_error("reading the schema revision", engine, exc) from exc
    finally:
        if own:
            await engine.dispose()
