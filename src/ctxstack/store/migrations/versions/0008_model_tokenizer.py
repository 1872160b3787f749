"""Model configs name the model's tokenizer: ``model_configs.tokenizer_path``.

An optional path of a Hugging Face ``tokenizer.json``; when set, the service counts the
role's tokens with it (:func:`ctxstack.tokens.counter_for_model`). NULL keeps the
choice by model name (tiktoken or the heuristic).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"


def upgrade() -> None:
    with op.batch_alter_table("model_configs") as batch:
        batch.add_column(sa.Column("tokenizer_path", sa.String(1000), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("model_configs") as batch:
        batch.drop_column("tokenizer_path")
