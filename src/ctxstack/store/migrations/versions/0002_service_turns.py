"""Chat service: running-turn claims and pending injects (ctxstack.server.injects).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from ctxstack.store.migrations import _ddl

revision: str = "0002"
down_revision: str | None = "0001"


def upgrade() -> None:
    op.create_table(
        "active_turns",
        sa.Column("conversation_id", sa.String(32), nullable=False),
        sa.Column("turn_id", sa.String(32), nullable=False),
        _ddl.timestamp("started_at"),
        _ddl.timestamp("heartbeat_at"),
        _ddl.cascade("active_turns", "conversation_id", "conversations"),
        _ddl.primary_key("active_turns", "conversation_id"),
    )
    op.create_table(
        "pending_injects",
        _ddl.id_column(),
        sa.Column("conversation_id", sa.String(32), nullable=False),
        sa.Column("turn_id", sa.String(32), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        _ddl.timestamp("created_at"),
        _ddl.cascade("pending_injects", "conversation_id", "conversations"),
        _ddl.primary_key("pending_injects"),
    )
    _ddl.create_index("pending_injects", "conversation_id")


def downgrade() -> None:
    op.drop_table("pending_injects")
    op.drop_table("active_turns")
