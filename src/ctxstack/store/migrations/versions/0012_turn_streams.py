"""Resumable chat streams: ``turn_streams`` and ``turn_stream_events``.

Every chat turn's SSE events are recorded with ids so that a reader on any worker or host
can resume a running turn's stream from ``Last-Event-ID`` (the database backend of
:mod:`ctxstack.server.stream_log`; with Redis configured, Redis streams hold them and
these tables stay empty). Bounded retention: a stream is deleted
``CTXSTACK_STREAM_RETENTION`` seconds after its turn ended.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from ctxstack.store.migrations import _ddl

revision: str = "0012"
down_revision: str | None = "0011"


def upgrade() -> None:
    op.create_table(
        "turn_streams",
        sa.Column("turn_id", sa.String(32), nullable=False),
        sa.Column("conversation_id", sa.String(32), nullable=False),
        _ddl.timestamp("started_at"),
        _ddl.timestamp("ended_at", nullable=True),
        _ddl.timestamp("watched_at"),
        sa.Column("stop_requested", sa.Boolean(), nullable=False,
                  server_default=sa.text("false")),
        _ddl.cascade("turn_streams", "conversation_id", "conversations"),
        _ddl.primary_key("turn_streams", "turn_id"),
    )
    _ddl.create_index("turn_streams", "conversation_id")
    op.create_table(
        "turn_stream_events",
        sa.Column("turn_id", sa.String(32), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("event", sa.String(32), nullable=False),
        sa.Column("data", sa.Text(), nullable=False),
        _ddl.cascade("turn_stream_events", "turn_id", "turn_streams", key="turn_id"),
        _ddl.primary_key("turn_stream_events", "turn_id", "seq"),
    )


def downgrade() -> None:
    op.drop_table("turn_stream_events")
    op.drop_table("turn_streams")
