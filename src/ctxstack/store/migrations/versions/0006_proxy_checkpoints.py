"""Proxy: checkpoints keyed by message-prefix hash (ctxstack.store.proxy_checkpoints).

Revision ID: 0006
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from ctxstack.store.models import BigIntId, UTCDateTime

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "proxy_checkpoints",
        sa.Column("id", BigIntId, autoincrement=True, nullable=False),
        sa.Column("prefix_hash", sa.String(64), nullable=False),
        sa.Column("root_hash", sa.String(64), nullable=False),
        sa.Column("covered", sa.Integer(), nullable=False),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("token_count", sa.Integer(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.CheckConstraint("covered > 0", name=op.f("ck_proxy_checkpoints_covered_positive")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_proxy_checkpoints")),
        sa.UniqueConstraint("prefix_hash", name=op.f("uq_proxy_checkpoints_prefix_hash")),
    )
    op.create_index("ix_proxy_checkpoints_root_covered", "proxy_checkpoints",
                    ["root_hash", "covered"])
    op.create_index(op.f("ix_proxy_checkpoints_created_at"), "proxy_checkpoints",
                    ["created_at"])


def downgrade() -> None:
    op.drop_index(op.f("ix_proxy_checkpoints_created_at"), table_name="proxy_checkpoints")
    op.drop_index("ix_proxy_checkpoints_root_covered", table_name="proxy_checkpoints")
    op.drop_table("proxy_checkpoints")
