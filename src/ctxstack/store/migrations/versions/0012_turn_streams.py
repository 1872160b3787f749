"""Resumable chat streams: ``turn_streams`` and ``turn_stream_events``.

Every chat turn's SSE events are recorded with ids so that a reader on any worker or host
can resume a running turn's stream from ``Last-Event-ID`` (the database backend of
:mod:`ctxstack.server.stream_log`; with Redis configured, Redis streams hold them and
these tables stay empty). Bounded retention: a stream is deleted
``CTXSTACK_STREAM_RETENTION`` seconds after its turn ended.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from ctxstack.store.models import UTCDateTime

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "turn_streams",
        sa.Column("turn_id", sa.String(32), nullable=False),
        sa.Column("conversation_id", sa.String(32), nullable=False),
        sa.Column("started_at", UTCDateTime(), nullable=False),
        sa.Column("ended_at", UTCDateTime(), nullable=True),
        sa.Column("watched_at", UTCDateTime(), nullable=False),
        sa.Column("stop_requested", sa.Boolean(), nullable=False,
                  server_default=sa.text("false")),
        sa.ForeignKeyConstraint(["conversation_id"], ["conversations.id"],
                                name="fk_turn_streams_conversation_id_conversations",
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("turn_id", name="pk_turn_streams"),
    )
    op.create_index("ix_turn_streams_conversation_id", "turn_streams", ["conversation_id"])
    op.create_table(
        "turn_stream_events",
        sa.Column("turn_id", sa.String(32), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("event", sa.String(32), nullable=False),
        sa.Column("data", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["turn_id"], ["turn_streams.turn_id"],
                                name="fk_turn_stream_events_turn_id_turn_streams",
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("turn_id", "seq", name="pk_turn_stream_events"),
    )


def downgrade() -> None:
    op.drop_table("turn_stream_events")
    op.drop_index("ix_turn_streams_conversation_id", table_name="turn_streams")
    op.drop_table("turn_streams")
