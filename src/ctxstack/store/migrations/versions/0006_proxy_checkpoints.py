"""Proxy: checkpoints keyed by message-prefix hash (ctxstack.store.proxy_checkpoints).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from ctxstack.store.migrations import _ddl

revision: str = "0006"
down_revision: str | None = "0005"


def upgrade() -> None:
    op.create_table(
        "proxy_checkpoints",
        _ddl.id_column(),
        sa.Column("prefix_hash", sa.String(64), nullable=False),
        sa.Column("root_hash", sa.String(64), nullable=False),
        sa.Column("covered", sa.Integer(), nullable=False),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("token_count", sa.Integer(), nullable=False),
        _ddl.timestamp("created_at"),
        sa.CheckConstraint("covered > 0", name=op.f("ck_proxy_checkpoints_covered_positive")),
        _ddl.primary_key("proxy_checkpoints"),
        _ddl.unique("proxy_checkpoints", "prefix_hash"),
    )
    op.create_index("ix_proxy_checkpoints_root_covered", "proxy_checkpoints",
                    ["root_hash", "covered"])
    _ddl.create_index("proxy_checkpoints", "created_at")


def downgrade() -> None:
    op.drop_table("proxy_checkpoints")
