"""Alembic environment for ctxstack's schema (SQLite and PostgreSQL, async drivers).

Two ways in:

* programmatic (:func:`ctxstack.store.migrate.upgrade`): the caller opens an async
  connection and runs Alembic inside ``connection.run_sync``; the sync facade of that
  connection arrives here as ``config.attributes["connection"]``;
* the ``alembic`` command with the ``alembic.ini`` shipped beside this directory: the URL
  is ``-x url=…``, else ``CTXSTACK_DATABASE_URL``, else the default SQLite file.

``render_as_batch`` lets later migrations alter tables on SQLite (which cannot ALTER most
things in place) by copying them.
"""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy.engine import Connection

from ctxstack.store.db import create_engine_from_url
from ctxstack.store.models import Base

config = context.config
target_metadata = Base.metadata


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=True,
        compare_type=True,
    )


def _run_on(connection: Connection) -> None:
    _configure(connection)
    with context.begin_transaction():
        context.run_migrations()


async def _run_with_own_engine() -> None:
    url = context.get_x_argument(as_dictionary=True).get("url")
    engine = create_engine_from_url(url)
    try:
        async with engine.connect() as connection:
            await connection.run_sync(_run_on)
            await connection.commit()
    finally:
        await engine.dispose()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run_on(connection)
    else:
        asyncio.run(_run_with_own_engine())


if context.is_offline_mode():
    raise SystemExit("ctxstack migrations run online only (they need a live connection)")
run_migrations_online()
