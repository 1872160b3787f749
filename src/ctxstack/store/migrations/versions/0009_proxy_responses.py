"""Proxy: the Responses wire's conversations by response id (ctxstack.store.proxy_responses).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from ctxstack.store.models import BigIntId, UTCDateTime

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "proxy_responses",
        sa.Column("id", BigIntId, autoincrement=True, nullable=False),
        sa.Column("owner", sa.String(64), nullable=False),
        sa.Column("response_id", sa.String(200), nullable=False),
        sa.Column("parent_id", sa.String(200), nullable=True),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("items", sa.Text(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_proxy_responses")),
        sa.UniqueConstraint("owner", "response_id",
                            name=op.f("uq_proxy_responses_owner_response_id")),
    )
    op.create_index(op.f("ix_proxy_responses_created_at"), "proxy_responses", ["created_at"])


def downgrade() -> None:
    op.drop_index(op.f("ix_proxy_responses_created_at"), table_name="proxy_responses")
    op.drop_table("proxy_responses")
