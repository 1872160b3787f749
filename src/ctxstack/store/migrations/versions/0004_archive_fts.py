"""Reversible compaction: archived run messages and full-text search over the archive.

* ``archived_messages`` — tool outputs (and other unstored messages) a turn's guard
  cleared or dropped; with the stored messages they are the conversation's archive.
* SQLite: FTS5 tables with the ``trigram`` tokenizer over ``messages.content`` and
  ``archived_messages.content`` (external content, kept in sync by triggers), so Chinese
  and Japanese text is searchable without word segmentation.
* PostgreSQL: ``pg_trgm`` (installed in ``public`` so every schema shares it; skipped
  when the role may not install it — search then runs without the index) with trigram GIN
  indexes for substring search in any script, and ``simple`` full-text GIN indexes.

Revision ID: 0004
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from ctxstack.store.models import BigIntId, JsonType, UTCDateTime

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_FTS = {"messages": "messages_fts", "archived_messages": "archived_messages_fts"}


def _sqlite_fts(table: str, fts: str) -> list[str]:
    return [
        f"CREATE VIRTUAL TABLE {fts} USING fts5(content, content='{table}', "
        f"content_rowid='id', tokenize='trigram')",
        f"CREATE TRIGGER {fts}_ai AFTER INSERT ON {table} BEGIN "
        f"INSERT INTO {fts}(rowid, content) VALUES (new.id, coalesce(new.content, '')); END",
        f"CREATE TRIGGER {fts}_ad AFTER DELETE ON {table} BEGIN "
        f"INSERT INTO {fts}({fts}, rowid, content) "
        f"VALUES ('delete', old.id, coalesce(old.content, '')); END",
        f"CREATE TRIGGER {fts}_au AFTER UPDATE OF content ON {table} BEGIN "
        f"INSERT INTO {fts}({fts}, rowid, content) "
        f"VALUES ('delete', old.id, coalesce(old.content, '')); "
        f"INSERT INTO {fts}(rowid, content) VALUES (new.id, coalesce(new.content, '')); END",
        f"INSERT INTO {fts}({fts}) VALUES ('rebuild')",
    ]


_PG_EXTENSION = """
DO $$ BEGIN
    CREATE EXTENSION IF NOT EXISTS pg_trgm WITH SCHEMA public;
EXCEPTION WHEN unique_violation OR duplicate_object OR insufficient_privilege THEN NULL;
END $$
"""


def _pg_indexes(table: str) -> list[str]:
    return [
        f"CREATE INDEX ix_{table}_content_tsv ON {table} "
        f"USING gin (to_tsvector('simple', coalesce(content, '')))",
        f"""
DO $$ BEGIN
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm') THEN
        EXECUTE 'CREATE INDEX ix_{table}_content_trgm ON {table} '
                'USING gin (content public.gin_trgm_ops)';
    END IF;
END $$
""",
    ]


def upgrade() -> None:
    op.create_table(
        "archived_messages",
        sa.Column("id", BigIntId, autoincrement=True, nullable=False),
        sa.Column("conversation_id", sa.String(32), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("name", sa.String(64), nullable=True),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("metadata", JsonType, nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["conversation_id"], ["conversations.id"], ondelete="CASCADE",
                                name=op.f("fk_archived_messages_conversation_id_conversations")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_archived_messages")),
    )
    op.create_index(op.f("ix_archived_messages_conversation_id"), "archived_messages",
                    ["conversation_id"])
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        for table, fts in _FTS.items():
            for statement in _sqlite_fts(table, fts):
                op.execute(statement)
    elif dialect == "postgresql":
        op.execute(_PG_EXTENSION)
        for table in _FTS:
            for statement in _pg_indexes(table):
                op.execute(statement)


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        for fts in _FTS.values():
            for suffix in ("ai", "ad", "au"):
                op.execute(f"DROP TRIGGER IF EXISTS {fts}_{suffix}")
            op.execute(f"DROP TABLE IF EXISTS {fts}")
    elif dialect == "postgresql":
        for table in _FTS:
            op.execute(f"DROP INDEX IF EXISTS ix_{table}_content_trgm")
            op.execute(f"DROP INDEX IF EXISTS ix_{table}_content_tsv")
    op.drop_index(op.f("ix_archived_messages_conversation_id"), table_name="archived_messages")
    op.drop_table("archived_messages")
