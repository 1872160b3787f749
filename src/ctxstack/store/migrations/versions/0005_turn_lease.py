"""Turn lease: the claim of a running turn records its state and its holder process.

``state`` is ``running`` while the turn works and accepts injects, ``saving`` once it has
drained its injects and is writing its answer (injects are then refused, a new turn still
waits); ``holder`` is ``host:pid`` of the process holding the claim, so a restarted server
on the same host takes over the claims of its dead predecessor at once instead of waiting
for the lease to expire (:mod:`ctxstack.server.lifecycle`).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"


def upgrade() -> None:
    with op.batch_alter_table("active_turns") as batch:
        batch.add_column(sa.Column("state", sa.String(16), nullable=False,
                                   server_default="running"))
        batch.add_column(sa.Column("holder", sa.String(200), nullable=False,
                                   server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("active_turns") as batch:
        batch.drop_column("holder")
        batch.drop_column("state")
