"""Engine configuration, error translation, migrations and the ``ctxstack db`` command."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from click.testing import CliRunner
from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

import ctxstack.cli.db  # noqa: F401  (registers `ctxstack db`)
from ctxstack.cli import main
from ctxstack.store import (
    create_conversation,
    create_user,
    current_revision,
    downgrade,
    head_revision,
    list_conversations,
    session_factory,
    upgrade,
)
from ctxstack.store.archive import is_search_object
from ctxstack.store.db import (
    ENV_DATABASE_URL,
    ENV_SQLITE_SYNCHRONOUS,
    SessionFactory,
    create_engine_from_url,
    database_url,
    default_database_url,
    parse_url,
    reading,
    transaction,
)
from ctxstack.store.errors import StorageError
from ctxstack.store.models import Base
from tests.store.dbkit import PG_URL, Backend, postgres_backend

TABLES = {"users", "conversations", "messages", "files", "model_configs",
          "compaction_checkpoints"}


# ---------------------------------------------------------------- URL resolution
def test_url_precedence_explicit_then_env_then_default() -> None:
    env = {ENV_DATABASE_URL: "postgresql+asyncpg://u@h/db"}
    assert database_url("sqlite+aiosqlite:///x.db", env) == "sqlite+aiosqlite:///x.db"
    assert database_url(None, env) == "postgresql+asyncpg://u@h/db"
    assert database_url(None, {}) == default_database_url()
    assert default_database_url().startswith("sqlite+aiosqlite:///")
    assert default_database_url().endswith("ctxstack.db")


def test_sync_driver_names_are_upgraded_to_async_ones() -> None:
    assert parse_url("postgresql://u@h/db").drivername == "postgresql+asyncpg"
    assert parse_url("postgres://u@h/db").drivername == "postgresql+asyncpg"
    assert parse_url("sqlite:///x.db").drivername == "sqlite+aiosqlite"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("not a url", "not a valid database URL"),
        ("mysql://u:secret@h/db", "unsupported database driver 'mysql'"),
        ("postgresql+psycopg2://u@h/db", "async drivers only"),
    ],
)
def test_bad_url_is_a_storage_error_naming_the_problem(url: str, expected: str) -> None:
    with pytest.raises(StorageError, match=expected) as info:
        create_engine_from_url(url)
    assert "secret" not in str(info.value)


def test_schema_is_refused_for_sqlite(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="only be chosen on PostgreSQL"):
        create_engine_from_url(f"sqlite+aiosqlite:///{tmp_path}/x.db", schema="s")


async def test_unreachable_postgres_is_a_clear_storage_error() -> None:
    # Port 1 on loopback: nothing listens there, the connection is refused at once.
    sf = session_factory("postgresql+asyncpg://postgres:hunter2@127.0.0.1:1/test")
    try:
        with pytest.raises(StorageError) as info:
            await list_conversations(sf, 1)
    finally:
        await sf.kw["bind"].dispose()
    message = str(info.value)
    assert "listing conversations of user 1 failed" in message
    assert "127.0.0.1:1" in message
    assert "hunter2" not in message
    assert ENV_DATABASE_URL in message


async def test_sqlite_in_a_missing_directory_is_a_clear_storage_error(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path}/no/such/dir/x.db"
    with pytest.raises(StorageError, match=r"directory of the SQLite database .* does not exist"):
        await upgrade(url)


async def test_unmigrated_database_is_a_storage_error_not_an_empty_result(
    tmp_path: Path,
) -> None:
    sf = session_factory(f"sqlite+aiosqlite:///{tmp_path}/empty.db")
    try:
        with pytest.raises(StorageError, match=r"no such table.*ctxstack db upgrade"):
            await list_conversations(sf, 1)
    finally:
        await sf.kw["bind"].dispose()


@pytest.mark.postgres
async def test_missing_postgres_database_is_a_clear_storage_error() -> None:
    async for _ in postgres_backend():  # skips/fails like the other PostgreSQL tests
        missing = PG_URL.rsplit("/", 1)[0] + f"/no_such_db_{uuid.uuid4().hex[:8]}"
        with pytest.raises(StorageError, match="does not exist"):
            await upgrade(missing)


# ---------------------------------------------------------------- migrations
def _tables(connection: Connection) -> set[str]:
    return set(inspect(connection).get_table_names())


def _include(obj: object, name: str | None, type_: str, reflected: bool, compare_to: object
             ) -> bool:
    # Migration 0004's search tables (SQLite FTS5) and indexes (PostgreSQL GIN) are not
    # SQLAlchemy models: they are compared by test_archive_store, not here.
    return not is_search_object(name)


def _diff(connection: Connection) -> list[object]:
    context = MigrationContext.configure(connection, opts={"include_object": _include})
    return list(compare_metadata(context, Base.metadata))


async def test_migrations_from_empty_create_the_schema(backend: Backend) -> None:
    engine = backend.engine()
    try:
        assert await current_revision(engine) is None
        async with engine.connect() as conn:
            assert not (await conn.run_sync(_tables)) & TABLES
        assert await upgrade(engine) == head_revision()
        assert await current_revision(engine) == head_revision()
        async with engine.connect() as conn:
            assert await conn.run_sync(_tables) >= TABLES | {"alembic_version"}
            # The migrations build exactly what the models describe.
            assert await conn.run_sync(_diff) == []
        # Upgrading again is a no-op, and the schema is usable.
        assert await upgrade(engine) == head_revision()
        sf = session_factory(engine)
        user, _ = await create_user(sf, "carol")
        conv = await create_conversation(sf, user.id, "first")
        assert [c.id for c in await list_conversations(sf, user.id)] == [conv.id]
    finally:
        await engine.dispose()


async def test_downgrade_to_base_removes_the_tables(engine: AsyncEngine) -> None:
    assert await downgrade(engine, revision="base") is None
    async with engine.connect() as conn:
        assert not (await conn.run_sync(_tables)) & TABLES


async def test_unknown_revision_is_a_storage_error(engine: AsyncEngine) -> None:
    with pytest.raises(StorageError, match="migrating to 'nope' failed"):
        await upgrade(engine, revision="nope")


@pytest.mark.postgres
async def test_postgres_schema_isolates_tables() -> None:
    async for pg in postgres_backend():
        engine = pg.engine()
        try:
            await upgrade(engine)
            async with engine.connect() as conn:
                where = await conn.scalar(text(
                    "select table_schema from information_schema.tables "
                    "where table_name = 'messages' and table_schema = current_schema()"
                ))
            assert where == pg.schema
        finally:
            await engine.dispose()


# ---------------------------------------------------------------- CLI
def test_cli_db_upgrade_then_current(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path}/cli.db"
    runner = CliRunner()
    before = runner.invoke(main, ["db", "current", "--url", url])
    assert before.exit_code == 0, before.output
    assert "not migrated" in before.output
    assert "ctxstack db upgrade" in before.output
    result = runner.invoke(main, ["db", "upgrade", "--url", url])
    assert result.exit_code == 0, result.output
    assert f"is at revision {head_revision()}" in result.output
    after = runner.invoke(main, ["db", "current"], env={ENV_DATABASE_URL: url})
    assert after.exit_code == 0, after.output
    assert f"at revision {head_revision()}" in after.output
    assert "run:" not in after.output


def test_cli_db_upgrade_reports_a_broken_url_without_a_traceback() -> None:
    result = CliRunner().invoke(
        main, ["db", "upgrade", "--url", "postgresql+asyncpg://u:pw@127.0.0.1:1/x"]
    )
    assert result.exit_code == 1
    assert "Error: migrating to 'head' failed on database" in result.output
    assert "pw@" not in result.output
    assert "Traceback" not in result.output


async def test_retry_transaction_retries_transient_errors_only(sf: SessionFactory) -> None:
    from sqlalchemy.exc import OperationalError

    from ctxstack.store import retry_transaction
    from ctxstack.store.errors import NotFoundError, StorageError

    calls: list[int] = []
    retried: list[str] = []

    async def flaky(session: AsyncSession) -> int:
        calls.append(1)
        if len(calls) < 3:
            raise OperationalError("UPDATE x", {}, Exception("database is locked"))
        return int(await session.scalar(text("select 41 + 1")))

    async def note(exc: BaseException) -> None:
        retried.append(type(exc).__name__)

    assert await retry_transaction(sf, "flaky work", flaky, before_retry=note) == 42
    assert len(calls) == 3
    assert retried == ["OperationalError", "OperationalError"]

    async def broken(session: AsyncSession) -> int:
        calls.append(1)
        raise OperationalError("SELECT", {}, Exception("no such table: nothing"))

    calls.clear()
    with pytest.raises(StorageError, match="broken work"):
        await retry_transaction(sf, "broken work", broken)
    assert len(calls) == 1  # not transient: no retry

    async def missing(session: AsyncSession) -> int:
        raise NotFoundError("conversation 'x' not found")

    with pytest.raises(NotFoundError):  # ctxstack's own errors pass through unchanged
        await retry_transaction(sf, "lookup", missing)

    async def always_locked(session: AsyncSession) -> int:
        calls.append(1)
        raise OperationalError("UPDATE", {}, Exception("database is locked"))

    calls.clear()
    with pytest.raises(StorageError, match="locked work"):
        await retry_transaction(sf, "locked work", always_locked, attempts=3)
    assert len(calls) == 3


async def test_sqlite_writers_of_one_process_take_turns(tmp_path: Path) -> None:
    """Many read-then-write transactions at once on one SQLite file: with a busy timeout
    far shorter than the queue, none fails with "database is locked" and no update is
    lost — the process's writers wait for each other instead of racing for the lock."""
    import asyncio

    from ctxstack.store.db import transaction

    engine = create_engine_from_url(f"sqlite+aiosqlite:///{tmp_path / 'turns.db'}",
                                    statement_timeout=0.001)
    try:
        async with engine.begin() as conn:
            await conn.execute(text("create table counter (n integer not null)"))
            await conn.execute(text("insert into counter values (0)"))
        factory = session_factory(engine)

        async def bump() -> None:
            async with transaction(factory, "bumping the counter") as session:
                seen = int(await session.scalar(text("select n from counter")))
                await asyncio.sleep(0.002)  # another writer runs meanwhile, if it may
                await session.execute(text("update counter set n = :n"), {"n": seen + 1})

        await asyncio.gather(*(bump() for _ in range(25)))
        async with factory() as session:
            assert await session.scalar(text("select n from counter")) == 25
    finally:
        await engine.dispose()


@pytest.mark.parametrize(("setting", "expected"), [(None, 1), ("full", 2), (" NORMAL ", 1)])
async def test_sqlite_commits_are_synchronous_normal_unless_full_is_asked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, setting: str | None, expected: int
) -> None:
    """WAL + synchronous=NORMAL by default (FULL made every writer wait for every other
    commit's log sync: issue 15's SQLite tail); CTXSTACK_SQLITE_SYNCHRONOUS=FULL keeps the
    last commits through a power loss. PRAGMA synchronous answers 1 (NORMAL) or 2 (FULL)."""
    if setting is None:
        monkeypatch.delenv(ENV_SQLITE_SYNCHRONOUS, raising=False)
    else:
        monkeypatch.setenv(ENV_SQLITE_SYNCHRONOUS, setting)
    engine = create_engine_from_url(f"sqlite+aiosqlite:///{tmp_path / 'sync.db'}")
    try:
        async with engine.connect() as connection:
            assert (await connection.execute(text("PRAGMA synchronous"))).scalar() == expected
            mode = (await connection.execute(text("PRAGMA journal_mode"))).scalar()
            assert mode == "wal"
    finally:
        await engine.dispose()


def test_an_unknown_sqlite_synchronous_level_is_refused_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_SQLITE_SYNCHRONOUS, "OFF")
    with pytest.raises(StorageError, match="CTXSTACK_SQLITE_SYNCHRONOUS: Input should be 'NORMAL' or 'FULL'"):
        create_engine_from_url(f"sqlite+aiosqlite:///{tmp_path / 'x.db'}")


async def test_reads_are_per_statement_on_both_backends_and_writes_still_roll_back(
    backend: Backend,
) -> None:
    """``reading`` runs PostgreSQL reads in autocommit (two round trips fewer per read):
    two statements of one read see two transaction start times, and — as on SQLite, whose
    driver begins transactions only for writes — a commit made elsewhere between them.
    One pooled connection serves it all, so the transaction that follows on that very
    connection must be a real one again: its failed write is rolled back."""
    engine = create_engine_from_url(backend.url, schema=backend.schema,
                                    pool_size=1, max_overflow=0)
    elsewhere = create_engine_from_url(backend.url, schema=backend.schema)
    factory = session_factory(engine)
    try:
        await upgrade(engine)
        async with transaction(factory, "setup") as session:
            await session.execute(text("create table probe (n integer)"))
            await session.execute(text("insert into probe values (1)"))
        async with reading(factory, "probing") as session:
            count = await session.scalar(text("select count(*) from probe"))
            async with elsewhere.begin() as other:
                await other.execute(text("insert into probe values (2)"))
            assert await session.scalar(text("select count(*) from probe")) == count + 1
            if backend.name == "postgres":
                first = await session.scalar(text("select now()"))
                await asyncio.sleep(0.01)
                second = await session.scalar(text("select now()"))
                assert first != second, "the reads ran inside one transaction block"

        async def failing_write() -> None:
            async with transaction(factory, "failing") as session:
                await session.execute(text("update probe set n = 99"))
                raise RuntimeError("abort")

        with pytest.raises(RuntimeError):
            await failing_write()
        async with reading(factory, "checking") as session:
            assert 99 not in set(await session.scalars(text("select n from probe")))
    finally:
        await engine.dispose()
        await elsewhere.dispose()
