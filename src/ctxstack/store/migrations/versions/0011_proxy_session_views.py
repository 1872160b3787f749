"""Proxy sessions: the view last forwarded per client session, its lease, its archive.

* ``proxy_sessions`` — per session (a hash of the client's key and its session id or
  opening messages) the view the proxy forwarded last (a recipe over the client's
  messages), extended by later requests until it overflows; ``lease_owner`` /
  ``lease_until`` make one worker at a time recompute it (single flight);
* ``proxy_archive`` — what was compacted away from a session's view, for
  ``ctxstack_recall`` (:mod:`ctxstack.store.proxy_sessions`).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from ctxstack.store.migrations import _ddl

revision: str = "0011"
down_revision: str | None = "0010"


def upgrade() -> None:
    op.create_table(
        "proxy_sessions",
        sa.Column("session_key", sa.String(64), nullable=False),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("covered", sa.Integer(), nullable=False),
        sa.Column("prefix_hash", sa.String(64), nullable=False),
        sa.Column("recipe", sa.Text(), nullable=False),
        sa.Column("view_tokens", sa.Integer(), nullable=False),
        sa.Column("covered_tokens", sa.Integer(), nullable=False),
        sa.Column("counter", sa.String(100), nullable=False),
        sa.Column("summarized", sa.Integer(), nullable=False),
        sa.Column("method", sa.String(20), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("archived", sa.Integer(), nullable=False),
        sa.Column("lease_owner", sa.String(64), nullable=True),
        _ddl.timestamp("lease_until", nullable=True),
        _ddl.timestamp("updated_at"),
        _ddl.primary_key("proxy_sessions", "session_key"),
    )
    _ddl.create_index("proxy_sessions", "updated_at")
    op.create_table(
        "proxy_archive",
        _ddl.id_column(),
        sa.Column("session_key", sa.String(64), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        _ddl.timestamp("created_at"),
        _ddl.primary_key("proxy_archive"),
        _ddl.unique("proxy_archive", "session_key", "digest"),
    )
    _ddl.create_index("proxy_archive", "session_key")


def downgrade() -> None:
    op.drop_table("proxy_archive")
    op.drop_table("proxy_sessions")
