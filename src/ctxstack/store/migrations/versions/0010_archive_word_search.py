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

from ctxstack.store.migrations import _ddl

revision: str = "0010"
down_revision: str | None = "0009"

TOKENIZER = "porter unicode61 remove_diacritics 2"


def _pg_index(table: str) -> list[str]:
    return [f"CREATE INDEX ix_{table}_english_content_tsv ON {table} "
            f"USING gin (to_tsvector('english', coalesce(content, '')))"]


def upgrade() -> None:
    _ddl.create_search("_fts_words", TOKENIZER, _pg_index)


def downgrade() -> None:
    _ddl.drop_search("_fts_words", lambda table: [f"ix_{table}_english_content_tsv"])
