"""${message}
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from ctxstack.store.migrations import _ddl
${imports if imports else ""}
# The revision and the one it follows are stated here only (Alembic reads them); this
# project uses neither branch labels nor dependencies between revisions.
revision: str = ${repr(up_revision)}
down_revision: str | None = ${repr(down_revision)}


def upgrade() -> None:
    ${upgrades if upgrades else "pass"}


def downgrade() -> None:
    ${downgrades if downgrades else "pass"}
