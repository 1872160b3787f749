"""Word-level search over the archive (issue 29): the word half of the hybrid ranking.

The archive's ranking fuses word BM25 (for space-separated scripts, where words carry a
question's meaning) with the character n-gram ranking of migration 0004 (for Chinese,
Japanese and identifiers); see :mod:`ctxstack.compaction._archive`. The database picks
each half's candidates by its own rank:

* SQLite: FTS5 tables with the ``porter unicode61`` tokenizer (case-folded, diacritics
  and punctuation stripped, English words stemmed) over ``messages.content`` and
  ``archived_messages.content`` — external content, kept in sync by triggers like 0004's
  trigram tables — ranked by ``bm25()``;
* PostgreSQL: GIN indexes on ``to_tsvector('english', content)`` (stemmed, stop words
  removed), ranked by ``ts_rank``.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_FTS = {"messages": "messages_fts_words", "archived_messages": "archived_messages_fts_words"}
TOKENIZER = "porter unicode61 remove_diacritics 2"


def _sqlite_fts(table: str, fts: str) -> list[str]:
    return [
        f"CREATE VIRTUAL TABLE {fts} USING fts5(content, content='{table}', "
        f"content_rowid='id', tokenize='{TOKENIZER}')",
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


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        for table, fts in _FTS.items():
            for statement in _sqlite_fts(table, fts):
                op.execute(statement)
    elif dialect == "postgresql":
        for table in _FTS:
            op.execute(f"CREATE INDEX ix_{table}_english_content_tsv ON {table} "
                       f"USING gin (to_tsvector('english', coalesce(content, '')))")


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        for fts in _FTS.values():
            for suffix in ("ai", "ad", "au"):
                op.execute(f"DROP TRIGGER IF EXISTS {fts}_{suffix}")
            op.execute(f"DROP TABLE IF EXISTS {fts}")
    elif dialect == "postgresql":
        for table in _FTS:
            op.execute(f"DROP INDEX IF EXISTS ix_{table}_english_content_tsv")
