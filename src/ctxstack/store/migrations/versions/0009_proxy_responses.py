"""Proxy: the Responses wire's conversations by response id (ctxstack.store.proxy_responses).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from ctxstack.store.migrations import _ddl

revision: str = "0009"
down_revision: str | None = "0008"


def upgrade() -> None:
    op.create_table(
        "proxy_responses",
        _ddl.id_column(),
        sa.Column("owner", sa.String(64), nullable=False),
        sa.Column("response_id", sa.String(200), nullable=False),
        sa.Column("parent_id", sa.String(200), nullable=True),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("items", sa.Text(), nullable=False),
        _ddl.timestamp("created_at"),
        _ddl.primary_key("proxy_responses"),
        _ddl.unique("proxy_responses", "owner", "response_id"),
    )
    _ddl.create_index("proxy_responses", "created_at")


def downgrade() -> None:
    op.drop_table("proxy_responses")
