"""Proxy session summaries: ``proxy_summaries``.

Each summary the proxy's guard makes for a session's view is kept with the archive refs
of the messages it covers and the earlier summaries it condensed (a
:class:`~ctxstack.compaction.SummaryNode` as JSON), so ``ctxstack_recall`` can expand a
summary ref into its sources (:mod:`ctxstack.store.proxy_sessions`). Pruned with the
session's archive.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from ctxstack.store.migrations import _ddl

revision: str = "0013"
down_revision: str | None = "0012"


def upgrade() -> None:
    op.create_table(
        "proxy_summaries",
        _ddl.id_column(),
        sa.Column("session_key", sa.String(64), nullable=False),
        sa.Column("node", sa.Text(), nullable=False),
        _ddl.timestamp("created_at"),
        _ddl.primary_key("proxy_summaries"),
    )
    _ddl.create_index("proxy_summaries", "session_key")


def downgrade() -> None:
    op.drop_table("proxy_summaries")
