"""Proxy: checkpoints expire by last use; running totals shared by every proxy worker.

* ``proxy_checkpoints.used_at`` — when a request last reused the checkpoint (NULL: never);
  a checkpoint expires ``ttl`` after its last use, not its creation
  (:mod:`ctxstack.store.proxy_checkpoints`);
* ``proxy_stats`` — one counter per key (``requests``, ``compactions.llm``, …), incremented
  in batches by each proxy worker (:mod:`ctxstack.store.proxy_stats`).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from ctxstack.store.migrations import _ddl

revision: str = "0007"
down_revision: str | None = "0006"


def upgrade() -> None:
    with op.batch_alter_table("proxy_checkpoints") as batch:
        batch.add_column(_ddl.timestamp("used_at", nullable=True))
    op.create_table(
        "proxy_stats",
        sa.Column("key", sa.String(100), nullable=False),
        sa.Column("value", sa.BigInteger(), nullable=False),
        _ddl.timestamp("updated_at"),
        _ddl.primary_key("proxy_stats", "key"),
    )


def downgrade() -> None:
    op.drop_table("proxy_stats")
    with op.batch_alter_table("proxy_checkpoints") as batch:
        batch.drop_column("used_at")
