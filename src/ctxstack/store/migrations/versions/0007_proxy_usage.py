"""Proxy: checkpoints expire by last use; running totals shared by every proxy worker.

* ``proxy_checkpoints.used_at`` — when a request last reused the checkpoint (NULL: never);
  a checkpoint expires ``ttl`` after its last use, not its creation
  (:mod:`ctxstack.store.proxy_checkpoints`);
* ``proxy_stats`` — one counter per key (``requests``, ``compactions.llm``, …), incremented
  in batches by each proxy worker (:mod:`ctxstack.store.proxy_stats`).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from ctxstack.store.models import UTCDateTime

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("proxy_checkpoints") as batch:
        batch.add_column(sa.Column("used_at", UTCDateTime(), nullable=True))
    op.create_table(
        "proxy_stats",
        sa.Column("key", sa.String(100), nullable=False),
        sa.Column("value", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_proxy_stats")),
    )


def downgrade() -> None:
    op.drop_table("proxy_stats")
    with op.batch_alter_table("proxy_checkpoints") as batch:
        batch.drop_column("used_at")
