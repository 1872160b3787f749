"""Chat service: running-turn claims and pending injects (ctxstack.server.injects).

Revision ID: 0002
Revises: 0001
Create Date: 2025-01-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from ctxstack.store.models import BigIntId, UTCDateTime

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "active_turns",
        sa.Column("conversation_id", sa.String(32), nullable=False),
        sa.Column("turn_id", sa.String(32), nullable=False),
        sa.Column("started_at", UTCDateTime(), nullable=False),
        sa.Column("heartbeat_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["conversation_id"], ["conversations.id"], ondelete="CASCADE",
                                name=op.f("fk_active_turns_conversation_id_conversations")),
        sa.PrimaryKeyConstraint("conversation_id", name=op.f("pk_active_turns")),
    )
    op.create_table(
        "pending_injects",
        sa.Column("id", BigIntId, autoincrement=True, nullable=False),
        sa.Column("conversation_id", sa.String(32), nullable=False),
        sa.Column("turn_id", sa.String(32), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["conversation_id"], ["conversations.id"], ondelete="CASCADE",
                                name=op.f("fk_pending_injects_conversation_id_conversations")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pending_injects")),
    )
    op.create_index(op.f("ix_pending_injects_conversation_id"), "pending_injects",
                    ["conversation_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_pending_injects_conversation_id"), table_name="pending_injects")
    op.drop_table("pending_injects")
    op.drop_table("active_turns")
