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
"""

from __future__ import annotations

from alembic import op

from ctxstack.store.migrations import _ddl

revision: str = "0010"
down_revision: str | None = "0009"

_FTS = {"messages": "messages_fts_words", "archived_messages": "archived_messages_fts_words"}
TOKENIZER = "porter unicode61 remove_diacritics 2"


def upgrade() -> None:
    dialect = _ddl.dialect()
    if dialect == "sqlite":
        for table, fts in _FTS.items():
            _ddl.create_sqlite_fts(table, fts, tokenize=TOKENIZER)
    elif dialect == "postgresql":
        for table in _FTS:
            op.execute(f"CREATE INDEX ix_{table}_english_content_tsv ON {table} "
                       f"USING gin (to_tsvector('english', coalesce(content, '')))")


def downgrade() -> None:
    dialect = _ddl.dialect()
    if dialect == "sqlite":
        for fts in _FTS.values():
            _ddl.drop_sqlite_fts(fts)
    elif dialect == "postgresql":
        for table in _FTS:
            _ddl.drop_indexes(f"ix_{table}_english_content_tsv")
