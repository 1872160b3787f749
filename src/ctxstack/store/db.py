"""Engine, sessions and error translation for the store.

Which database: an explicit URL wins, then the environment variable
``CTXSTACK_DATABASE_URL``, then a SQLite file ``ctxstack.db`` in the user's data directory
(``platformdirs.user_data_dir("ctxstack")``). Only the async drivers are used:
``sqlite+aiosqlite://`` and ``postgresql+asyncpg://``; the bare ``sqlite://`` and
``postgresql://`` / ``postgres://`` forms are upgraded to them, any other driver is refused
with a message saying what to write instead.

``schema`` (PostgreSQL only) puts every table in that schema by setting the connection's
``search_path``: that is how the tests run side by side in one database, and how an operator
can share a database between deployments.

SQLite gets foreign keys switched on, write-ahead logging (readers never block the writer)
and a busy timeout, so concurrent writers queue up instead of failing at once. Commits are
``synchronous=NORMAL`` (env ``CTXSTACK_SQLITE_SYNCHRONOUS``: ``NORMAL`` or ``FULL``): with
write-ahead logging that never corrupts the database and survives the process being
killed; what it gives up is the last commits before a power loss or an OS crash, which
``FULL`` keeps by syncing the log on every commit. Each writer holds the one write lock
through that sync, so under load every other writer waits for it too: at half load with two
workers on one file, the p99 of a turn was 273–575 ms with ``FULL`` and 98–101 ms with
``NORMAL`` (issue 15). PostgreSQL, the production database, is not affected.

Every wait is bounded: opening a connection by ``connect_timeout`` (PostgreSQL; env
``CTXSTACK_DB_CONNECT_TIMEOUT``, default 5 s), one statement by ``statement_timeout``
(env ``CTXSTACK_DB_STATEMENT_TIMEOUT``, default 15 s: asyncpg's client-side
``command_timeout`` — which also ends the wait on a server that accepted the connection
and never answers — plus the server's own ``statement_timeout``; SQLite's busy timeout;
and the wait for a pooled connection).

Every database failure leaves the store as a :class:`~ctxstack.store.errors.StorageError` whose
message says what was being done and on which database (password hidden), never as a
driver exception and never as an empty result.
"""

from __future__ import annotations

import asyncio
import random
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, TypeVar

import platformdirs
from sqlalchemy import event
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, SQLAlchemyError
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from ctxstack.errors import ConfigError
from ctxstack.store.errors import StorageError
from ctxstack.store.settings import StorageSettings

ENV_DATABASE_URL = "CTXSTACK_DATABASE_URL"
DEFAULT_DB_FILENAME = "ctxstack.db"
ENV_SQLITE_SYNCHRONOUS = "CTXSTACK_SQLITE_SYNCHRONOUS"

SessionFactory = async_sessionmaker[AsyncSession]

_DRIVER_UPGRADES = {
    "sqlite": "sqlite+aiosqlite",
    "postgresql": "postgresql+asyncpg",
    "postgres": "postgresql+asyncpg",
}
_SUPPORTED = ("sqlite+aiosqlite", "postgresql+asyncpg")


def data_dir() -> Path:
    """ctxstack's per-user data directory (not created here)."""
    return Path(platformdirs.user_data_dir("ctxstack"))


def default_database_url() -> str:
    """The SQLite file used when nothing else is configured."""
    return f"sqlite+aiosqlite:///{data_dir() / DEFAULT_DB_FILENAME}"


def storage_settings(env: Mapping[str, str] | None = None) -> StorageSettings:
    """The storage settings from ``env`` (default ``os.environ``).

    Raises:
        StorageError: a variable has a bad value (the message names it).
    """
    try:
        return StorageSettings.from_env(env)
    except ConfigError as exc:
        raise StorageError(str(exc)) from None


def database_url(url: str | None = None, env: Mapping[str, str] | None = None) -> str:
    """The URL to use: ``url`` if given, else ``CTXSTACK_DATABASE_URL``, else the default."""
    if url:
        return url
    return storage_settings(env).database_url or default_database_url()


def db_timeouts(env: Mapping[str, str] | None = None) -> tuple[float, float]:
    """(connect, statement) timeouts in seconds from the environment (or the defaults).

    Raises:
        StorageError: a variable is not a positive number.
    """
    settings = storage_settings(env)
    return settings.db_connect_timeout, settings.db_statement_timeout


def parse_url(url: str | URL) -> URL:
    """Parse and normalise a database URL to one of the async drivers.

    Raises:
        StorageError: the URL cannot be parsed or names an unsupported database/driver.
    """
    try:
        parsed = make_url(url) if isinstance(url, str) else url
    except ArgumentError as exc:
        raise StorageError(
            f"not a valid database URL: {_redact_text(str(url))!r} ({exc}); expected e.g. "
            "sqlite+aiosqlite:///path/to/ctxstack.db or postgresql+asyncpg://user@host/db "
            f"(set {ENV_DATABASE_URL})"
        ) from None
    driver = parsed.drivername
    driver = _DRIVER_UPGRADES.get(driver, driver)
    if driver not in _SUPPORTED:
        raise StorageError(
            f"unsupported database driver {parsed.drivername!r} in "
            f"{parsed.render_as_string(hide_password=True)!r}: ctxstack uses the async drivers "
            "only, write sqlite+aiosqlite://… or postgresql+asyncpg://…"
        )
    return parsed.set(drivername=driver)


def _redact_text(url: str) -> str:
    """Hide a password in a URL that could not even be parsed."""
    head, sep, tail = url.partition("@")
    if not sep or "://" not in head:
        return url
    scheme, _, userinfo = head.partition("://")
    user = userinfo.split(":", 1)[0]
    return f"{scheme}://{user}:***@{tail}" if ":" in userinfo else url


def describe(engine: AsyncEngine) -> str:
    """The engine's URL with the password hidden, for messages and logs."""
    return engine.url.render_as_string(hide_password=True)


def create_engine_from_url(
    url: str | URL | None = None,
    *,
    schema: str | None = None,
    echo: bool = False,
    connect_timeout: float | None = None,
    statement_timeout: float | None = None,
    **engine_kwargs: Any,
) -> AsyncEngine:
    """Create the async engine for ``url`` (see :func:`database_url` for the default).

    Creating an engine does not connect; the first query does, and a failure there is a
    :class:`StorageError` from the repository function that ran it.

    Args:
        url: database URL; ``None`` → ``CTXSTACK_DATABASE_URL`` → the default SQLite file.
        schema: PostgreSQL schema to work in (via ``search_path``); refused for SQLite.
        echo: log every SQL statement.
        connect_timeout: seconds to open a connection (see the module docstring);
            ``None`` reads it from the environment.
        statement_timeout: seconds one statement may take (likewise).
        engine_kwargs: passed to :func:`sqlalchemy.ext.asyncio.create_async_engine`.

    Raises:
        StorageError: the URL is malformed or names an unsupported driver, or ``schema``
            was given for SQLite.
    """
    resolved = url if isinstance(url, URL) else database_url(url)
    parsed = parse_url(resolved)
    connect_args: dict[str, Any] = dict(engine_kwargs.pop("connect_args", {}))
    is_sqlite = parsed.drivername.startswith("sqlite")
    env_connect, env_statement = db_timeouts()
    connect_s = connect_timeout if connect_timeout is not None else env_connect
    statement_s = statement_timeout if statement_timeout is not None else env_statement
    engine_kwargs.setdefault("pool_timeout", statement_s)
    if is_sqlite:
        engine_kwargs.pop("pool_timeout", None)
        if parsed.database in (None, "", ":memory:"):
            # One shared connection (StaticPool): there is no pool to size.
            engine_kwargs.pop("pool_size", None)
            engine_kwargs.pop("max_overflow", None)
        if schema:
            raise StorageError("a database schema can only be chosen on PostgreSQL, not SQLite")
        connect_args.setdefault("timeout", statement_s)
        if parsed.database and parsed.database != ":memory:":
            folder = Path(parsed.database).expanduser().parent
            if resolved == default_database_url():
                folder.mkdir(parents=True, exist_ok=True)
            elif not folder.is_dir():
                # Checked here because a failed aiosqlite connect leaves its worker thread
                # calling back into the event loop later; and the message is clearer.
                raise StorageError(
                    f"the directory of the SQLite database {parsed.database!r} does not "
                    f"exist: create it or fix {ENV_DATABASE_URL}"
                )
    else:
        connect_args.setdefault("timeout", connect_s)
        connect_args.setdefault("command_timeout", statement_s)
        settings = dict(connect_args.get("server_settings", {}))
        settings.setdefault("statement_timeout", str(int(statement_s * 1000)))
        if schema:
            settings["search_path"] = schema
        connect_args["server_settings"] = settings
    try:
        engine = create_async_engine(parsed, echo=echo, connect_args=connect_args,
                                     **engine_kwargs)
    except (ArgumentError, NoSuchModuleError, ImportError) as exc:
        raise StorageError(
            f"cannot create a database engine for "
            f"{parsed.render_as_string(hide_password=True)!r}: {exc}"
        ) from None
    if is_sqlite:
        memory = parsed.database in (None, "", ":memory:")
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas(memory))
    return engine


def sqlite_synchronous(env: Mapping[str, str] | None = None) -> str:
    """The SQLite ``synchronous`` level from ``CTXSTACK_SQLITE_SYNCHRONOUS`` (default
    ``NORMAL``; see the module docstring).

    Raises:
        StorageError: the variable is set to anything but ``NORMAL`` or ``FULL``.
    """
    return storage_settings(env).sqlite_synchronous


def _sqlite_pragmas(memory: bool) -> Any:
    synchronous = sqlite_synchronous()

    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute("PRAGMA foreign_keys=ON")
            if not memory:
                cursor.execute("PRAGMA journal_mode=WAL")
                cursor.execute(f"PRAGMA synchronous={synchronous}")
        finally:
            cursor.close()

    return on_connect


def session_factory(engine: AsyncEngine | str | URL | None = None) -> SessionFactory:
    """An ``async_sessionmaker`` for ``engine`` (or for a URL, creating the engine).

    Sessions do not expire objects on commit: repository functions return plain records,
    never live ORM objects, so nothing needs reloading after a commit.
    """
    if not isinstance(engine, AsyncEngine):
        engine = create_engine_from_url(engine)
    return async_sessionmaker(engine, expire_on_commit=False)


def engine_of(factory: SessionFactory) -> AsyncEngine:
    """The engine a session factory is bound to."""
    bind = factory.kw.get("bind")
    if not isinstance(bind, AsyncEngine):
        raise StorageError("the session factory is not bound to an async engine")
    return bind


def explain(exc: BaseException) -> str:
    """A one-line reason for a database failure (the driver's message, not the SQL)."""
    if isinstance(exc, DBAPIError) and exc.orig is not None:
        text = str(exc.orig) or type(exc.orig).__name__
    else:
        text = str(exc) or type(exc).__name__
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return first[:300]


def storage_error(action: str, engine: AsyncEngine, exc: BaseException) -> StorageError:
    """Build the :class:`StorageError` for a failed ``action`` on ``engine``."""
    return StorageError(
        f"{action} failed on database {describe(engine)}: {explain(exc)} "
        f"(check {ENV_DATABASE_URL} and that the database is reachable and migrated: "
        "ctxstack db upgrade)"
    )


DB_ERRORS: tuple[type[BaseException], ...] = (SQLAlchemyError, OSError)


@asynccontextmanager
async def transaction(factory: SessionFactory, action: str) -> AsyncIterator[AsyncSession]:
    """A session inside one transaction; commits on success, rolls back on error.

    Database and connection errors leave as :class:`StorageError` naming ``action``;
    ctxstack's own errors (``NotFoundError``, ``InputError``) pass through unchanged.
    """
    try:
        async with writer_turn(factory), factory() as session, session.begin():
            yield session
    except DB_ERRORS as exc:
        raise storage_error(action, engine_of(factory), exc) from exc


_HOLDS_WRITE_LOCK: ContextVar[bool] = ContextVar("ctxstack_holds_write_lock", default=False)
_WRITE_LOCKS: weakref.WeakKeyDictionary[Engine, dict[asyncio.AbstractEventLoop, asyncio.Lock]] = (
    weakref.WeakKeyDictionary())


@asynccontextmanager
async def writer_turn(factory: SessionFactory) -> AsyncIterator[None]:
    """On SQLite, one write transaction at a time per process and database.

    SQLite has one writer. Left to its busy handler, concurrent writers of one process
    poll for the lock with sleeps growing to 100 ms, and a transaction that read before
    another one committed fails at once with "database is locked" and is retried whole:
    under load that is most of a turn's time in the store (issue 15). Queued on an
    ``asyncio.Lock`` instead, they take turns in order and wait no longer than the writes
    ahead of them; other processes on the same file still meet the busy timeout. Readers
    (:func:`reading`) never take the lock (WAL: they never wait for the writer).
    PostgreSQL, with row locks, is left alone. Re-entrant within a task (a transaction
    opened while this task already holds the lock does not wait for itself).
    """
    engine = engine_of(factory).sync_engine
    if engine.dialect.name != "sqlite" or _HOLDS_WRITE_LOCK.get():
        yield
        return
    loop = asyncio.get_running_loop()
    locks = _WRITE_LOCKS.setdefault(engine, {})
    lock = locks.get(loop)
    if lock is None:
        for stale in [other for other in locks if other.is_closed()]:
            del locks[stale]
        lock = locks[loop] = asyncio.Lock()
    async with lock:
        token = _HOLDS_WRITE_LOCK.set(True)
        try:
            yield
        finally:
            _HOLDS_WRITE_LOCK.reset(token)


T = TypeVar("T")
RETRY_ATTEMPTS = 8
"""Attempts of a retried transaction: lock conflicts between a handful of writers on one
conversation (SQLite's single writer, PostgreSQL deadlocks) clear within a few rounds."""


def is_transient_error(exc: BaseException) -> bool:
    """Whether a database error is a lock conflict worth retrying the transaction for
    (SQLite "database is locked", a PostgreSQL deadlock or serialisation failure)."""
    if not isinstance(exc, DBAPIError):
        return False
    text = str(exc.orig).lower()
    return any(
        marker in text
        for marker in ("database is locked", "deadlock detected", "could not serialize")
    )


async def retry_transaction(
    factory: SessionFactory,
    action: str,
    work: Callable[[AsyncSession], Awaitable[T]],
    *,
    retryable: Callable[[BaseException], bool] = is_transient_error,
    before_retry: Callable[[BaseException], Awaitable[None]] | None = None,
    attempts: int = RETRY_ATTEMPTS,
) -> T:
    """Run ``work`` in one transaction, retrying it whole while the failure is ``retryable``.

    The one retry loop of the storage layer: each attempt is a fresh session and
    transaction, so a retried attempt never sees a half-done earlier one. Between attempts
    it awaits ``before_retry(exc)`` (e.g. re-synchronise a counter) and a short jittered
    pause growing with the attempt number. Database errors that are not retryable, or the
    last attempt's, leave as :class:`StorageError` naming ``action``; ctxstack's own errors
    (``NotFoundError``, ``InputError``) pass through unchanged, never retried.
    """
    for attempt in range(1, attempts + 1):
        try:
            async with writer_turn(factory), factory() as session, session.begin():
                return await work(session)
        except DB_ERRORS as exc:
            if attempt == attempts or not retryable(exc):
                raise storage_error(action, engine_of(factory), exc) from exc
            if before_retry is not None:
                await before_retry(exc)
            await asyncio.sleep(random.uniform(0.002, 0.02) * attempt)
    raise AssertionError("unreachable: the last attempt returns or raises")


@asynccontextmanager
async def reading(factory: SessionFactory, action: str) -> AsyncIterator[AsyncSession]:
    """A session for reads only (no commit needed); errors as in :func:`transaction`.

    Each statement reads what is committed when it runs (no snapshot across statements),
    on both backends. On PostgreSQL the session's connection is in autocommit: no
    ``BEGIN`` / ``ROLLBACK`` around the reads, two round trips fewer each (a chat turn
    makes three such reads); at ``READ COMMITTED`` every statement took its own snapshot
    inside the transaction too, so nothing a reader sees changes. SQLite's driver begins
    a transaction only before a write, so its reads were per statement already. A write
    made in such a session would land at once: none may be. The connection goes back to
    the pool transactional again.
    """
    try:
        async with factory() as session:
            if engine_of(factory).dialect.name == "postgresql":
                await session.connection(execution_options={"isolation_level": "AUTOCOMMIT"})
            yield session
    except DB_ERRORS as exc:
        raise storage_error(action, engine_of(factory), exc) from exc
