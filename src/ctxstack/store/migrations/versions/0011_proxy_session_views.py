"""Proxy sessions: the view last forwarded per client session, its lease, its archive.

* ``proxy_sessions`` — per session (a hash of the client's key and its session id or
  opening messages) the view the proxy forwarded last (a recipe over the client's
  messages), extended by later requests until it overflows; ``lease_owner`` /
  ``lease_until`` make one worker at a time recompute it (single flight);
* ``proxy_archive`` — what was compacted away from a session's view, for
  ``ctxstack_recall`` (:mod:`ctxstack.store.proxy_sessions`).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from ctxstack.store.models import BigIntId, UTCDateTime

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


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
        sa.Column("lease_until", UTCDateTime(), nullable=True),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("session_key", name=op.f("pk_proxy_sessions")),
    )
    op.create_index(op.f("ix_proxy_sessions_updated_at"), "proxy_sessions", ["updated_at"])
    op.create_table(
        "proxy_archive",
        sa.Column("id", BigIntId, autoincrement=True, nullable=False),
        sa.Column("session_key", sa.String(64), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_proxy_archive")),
        sa.UniqueConstraint("session_key", "digest",
                            name=op.f("uq_proxy_archive_session_key_digest")),
    )
    op.create_index(op.f("ix_proxy_archive_session_key"), "proxy_archive", ["session_key"])


def downgrade() -> None:
    op.drop_index(op.f("ix_proxy_archive_session_key"), table_name="proxy_archive")
    op.drop_table("proxy_archive")
    op.drop_index(op.f("ix_proxy_sessions_updated_at"), table_name="proxy_sessions")
    op.drop_table("proxy_sessions")
