"""Token-count calibration per model (ctxstack.store.calibration).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from ctxstack.store.migrations import _ddl

revision: str = "0003"
down_revision: str | None = "0002"


def upgrade() -> None:
    op.create_table(
        "token_calibrations",
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        _ddl.timestamp("updated_at"),
        _ddl.primary_key("token_calibrations", "model"),
    )


def downgrade() -> None:
    op.drop_table("token_calibrations")
