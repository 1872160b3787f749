"""Reversible compaction: archived run messages and full-text search over the archive.

* ``archived_messages`` — tool outputs (and other unstored messages) a turn's guard
  cleared or dropped; with the stored messages they are the conversation's archive.
* SQLite: FTS5 tables with the ``trigram`` tokenizer over ``messages.content`` and
  ``archived_messages.content`` (external content, kept in sync by triggers), so Chinese
  and Japanese text is searchable without word segmentation.
* PostgreSQL: ``pg_trgm`` (installed in ``public`` so every schema shares it; skipped
  when the role may not install it — search then runs without the index) with trigram GIN
  indexes for substring search in any script, and ``simple`` full-text GIN indexes.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from ctxstack.store.migrations import _ddl
from ctxstack.store.models import JsonType

revision: str = "0004"
down_revision: str | None = "0003"

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
        _ddl.id_column(),
        sa.Column("conversation_id", sa.String(32), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("name", sa.String(64), nullable=True),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("metadata", JsonType, nullable=False),
        _ddl.timestamp("created_at"),
        _ddl.cascade("archived_messages", "conversation_id", "conversations"),
        _ddl.primary_key("archived_messages"),
    )
    _ddl.create_index("archived_messages", "conversation_id")
    if _ddl.dialect() == "postgresql":
        op.execute(_PG_EXTENSION)
    _ddl.create_search("_fts", "trigram", _pg_indexes)


def downgrade() -> None:
    _ddl.drop_search("_fts", lambda table: (f"ix_{table}_content_trgm",
                                            f"ix_{table}_content_tsv"))
    op.drop_table("archived_messages")
