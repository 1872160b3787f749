"""Token-count calibration per model (ctxstack.store.calibration).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from ctxstack.store.models import UTCDateTime

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "token_calibrations",
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("model", name=op.f("pk_token_calibrations")),
    )


def downgrade() -> None:
    op.drop_table("token_calibrations")
