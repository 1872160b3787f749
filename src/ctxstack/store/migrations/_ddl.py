"""The DDL building blocks the migrations share: keys, timestamps and search indexes.

Every table follows the same conventions — a surrogate ``id``, UTC timestamps, constraints
and indexes named ``pk_<table>``, ``fk_<table>_<column>_<target>``, ``uq_<table>_<columns>``
and ``ix_<table>_<columns>`` — and the archive's two searches (migrations 0004 and 0010)
build the same SQLite FTS5 tables and triggers with different tokenizers. Spelling them out
once keeps the migrations to what each one adds.

Frozen: a migration that has run must build the same schema for ever, and the migrations
build what these helpers emit. Never change the DDL a helper emits
(``tests/store/test_migration_schema.py`` pins each revision's schema on both backends);
a migration that needs something else gets a helper of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

from ctxstack.store.models import BigIntId, UTCDateTime


def id_column() -> sa.Column[Any]:
    """The surrogate key ``id``: BIGINT, INTEGER on SQLite (which auto-increments only a
    column declared exactly ``INTEGER PRIMARY KEY``)."""
    return sa.Column("id", BigIntId, autoincrement=True, nullable=False)


def timestamp(name: str, *, nullable: bool = False) -> sa.Column[Any]:
    """A UTC timestamp column (``timestamptz`` on PostgreSQL)."""
    return sa.Column(name, UTCDateTime(), nullable=nullable)


def primary_key(table: str, *columns: str) -> sa.PrimaryKeyConstraint:
    """``pk_<table>`` over ``columns`` (``id`` when none are named)."""
    return sa.PrimaryKeyConstraint(*(columns or ("id",)), name=op.f(f"pk_{table}"))


def cascade(table: str, column: str, target: str, key: str = "id") -> sa.ForeignKeyConstraint:
    """``table.column`` references ``target.key``; deleting the target row deletes this
    one. Named ``fk_<table>_<column>_<target>``."""
    return sa.ForeignKeyConstraint([column], [f"{target}.{key}"], ondelete="CASCADE",
                                   name=op.f(f"fk_{table}_{column}_{target}"))


def unique(table: str, *columns: str) -> sa.UniqueConstraint:
    """``uq_<table>_<columns>``: no two rows share the values of ``columns``."""
    return sa.UniqueConstraint(*columns, name=op.f(f"uq_{table}_{'_'.join(columns)}"))


def create_index(table: str, *columns: str) -> None:
    """The plain index ``ix_<table>_<columns>`` (dropped with its table)."""
    op.create_index(op.f(f"ix_{table}_{'_'.join(columns)}"), table, list(columns))


def dialect() -> str:
    """The name of the database's dialect (``sqlite`` or ``postgresql``)."""
    return op.get_bind().dialect.name


SEARCHED = ("messages", "archived_messages")
"""The tables the archive's searches index (their ``content``), in the order they are
indexed."""


def create_search(fts_suffix: str, tokenize: str,
                  postgresql: Callable[[str], Sequence[str]]) -> None:
    """One of the archive's searches over each :data:`SEARCHED` table: on SQLite the FTS5
    table ``<table><fts_suffix>`` with the ``tokenize`` tokenizer (see
    :func:`_create_sqlite_fts`), on PostgreSQL the statements ``postgresql(table)``."""
    name = dialect()
    for table in SEARCHED:
        if name == "sqlite":
            _create_sqlite_fts(table, f"{table}{fts_suffix}", tokenize)
        elif name == "postgresql":
            for statement in postgresql(table):
                op.execute(statement)


def drop_search(fts_suffix: str, postgresql_indexes: Callable[[str], Sequence[str]]) -> None:
    """Undo :func:`create_search`: the FTS5 tables and their triggers, or the PostgreSQL
    indexes ``postgresql_indexes(table)`` names (a missing one is no error: the trigram
    indexes exist only where ``pg_trgm`` could be installed)."""
    name = dialect()
    for table in SEARCHED:
        if name == "sqlite":
            fts = f"{table}{fts_suffix}"
            for suffix in ("ai", "ad", "au"):
                op.execute(f"DROP TRIGGER IF EXISTS {fts}_{suffix}")
            op.execute(f"DROP TABLE IF EXISTS {fts}")
        elif name == "postgresql":
            for index in postgresql_indexes(table):
                op.execute(f"DROP INDEX IF EXISTS {index}")


def _create_sqlite_fts(table: str, fts: str, tokenize: str) -> None:
    """An FTS5 table ``fts`` over ``table.content`` with the ``tokenize`` tokenizer:
    external content (``table``'s rows by ``id``, a NULL content indexed as empty), kept in
    sync by the triggers ``<fts>_ai``, ``<fts>_ad`` and ``<fts>_au``, built from the rows
    already there."""
    insert_new = (f"INSERT INTO {fts}(rowid, content) "
                  f"VALUES (new.id, coalesce(new.content, ''));")
    delete_old = (f"INSERT INTO {fts}({fts}, rowid, content) "
                  f"VALUES ('delete', old.id, coalesce(old.content, ''));")
    for statement in (
        f"CREATE VIRTUAL TABLE {fts} USING fts5(content, content='{table}', "
        f"content_rowid='id', tokenize='{tokenize}')",
        f"CREATE TRIGGER {fts}_ai AFTER INSERT ON {table} BEGIN {insert_new} END",
        f"CREATE TRIGGER {fts}_ad AFTER DELETE ON {table} BEGIN {delete_old} END",
        f"CREATE TRIGGER {fts}_au AFTER UPDATE OF content ON {table} BEGIN "
        f"{delete_old} {insert_new} END",
        f"INSERT INTO {fts}({fts}) VALUES ('rebuild')",
    ):
        op.execute(statement)
