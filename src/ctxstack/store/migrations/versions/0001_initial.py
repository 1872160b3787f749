"""Initial schema: users, conversations, messages, files, model configs, checkpoints.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from ctxstack.store.migrations import _ddl
from ctxstack.store.models import BigIntId, JsonType

revision: str = "0001"
down_revision: str | None = None


def upgrade() -> None:
    op.create_table(
        "users",
        _ddl.id_column(),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        _ddl.timestamp("created_at"),
        _ddl.primary_key("users"),
        _ddl.unique("users", "name"),
        _ddl.unique("users", "token_hash"),
    )
    op.create_table(
        "conversations",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("owner_id", BigIntId, nullable=False),
        sa.Column("title", sa.String(200), nullable=False),
        _ddl.timestamp("created_at"),
        _ddl.timestamp("updated_at"),
        sa.Column("last_seq", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("input_tokens", sa.BigInteger(), server_default=sa.text("0"),
                  nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), server_default=sa.text("0"),
                  nullable=False),
        _ddl.cascade("conversations", "owner_id", "users"),
        _ddl.primary_key("conversations"),
    )
    _ddl.create_index("conversations", "owner_id")
    op.create_table(
        "messages",
        _ddl.id_column(),
        sa.Column("conversation_id", sa.String(32), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("content", sa.Text(), nullable=True),
        sa.Column("kind", sa.String(32), nullable=True),
        sa.Column("metadata", JsonType, nullable=False),
        sa.Column("usage", JsonType, nullable=True),
        _ddl.timestamp("created_at"),
        sa.CheckConstraint("role IN ('system', 'user', 'assistant', 'tool')",
                           name=op.f("ck_messages_role")),
        sa.CheckConstraint("seq > 0", name=op.f("ck_messages_seq_positive")),
        _ddl.cascade("messages", "conversation_id", "conversations"),
        _ddl.primary_key("messages"),
        _ddl.unique("messages", "conversation_id", "seq"),
    )
    op.create_table(
        "files",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("owner_id", BigIntId, nullable=False),
        sa.Column("stored_name", sa.String(64), nullable=False),
        sa.Column("mime_type", sa.String(32), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("original_name", sa.String(255), nullable=True),
        _ddl.timestamp("created_at"),
        sa.CheckConstraint(
            "mime_type IN ('image/png', 'image/jpeg', 'image/webp', 'image/gif')",
            name=op.f("ck_files_mime_type"),
        ),
        sa.CheckConstraint("size > 0", name=op.f("ck_files_size_positive")),
        _ddl.cascade("files", "owner_id", "users"),
        _ddl.primary_key("files"),
    )
    _ddl.create_index("files", "owner_id")
    op.create_table(
        "model_configs",
        _ddl.id_column(),
        sa.Column("role", sa.String(8), nullable=False),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("context_size", sa.Integer(), nullable=True),
        sa.Column("max_output_tokens", sa.Integer(), nullable=True),
        sa.Column("active", sa.Boolean(), nullable=False),
        _ddl.timestamp("created_at"),
        _ddl.timestamp("updated_at"),
        sa.CheckConstraint("role IN ('main', 'fast')", name=op.f("ck_model_configs_role")),
        sa.CheckConstraint("context_size IS NULL OR context_size > 0",
                           name=op.f("ck_model_configs_context_size")),
        sa.CheckConstraint("max_output_tokens IS NULL OR max_output_tokens > 0",
                           name=op.f("ck_model_configs_max_output_tokens")),
        _ddl.primary_key("model_configs"),
    )
    op.create_index(
        "uq_model_configs_active_role", "model_configs", ["role"], unique=True,
        sqlite_where=sa.text("active"), postgresql_where=sa.text("active"),
    )
    op.create_table(
        "compaction_checkpoints",
        _ddl.id_column(),
        sa.Column("conversation_id", sa.String(32), nullable=False),
        sa.Column("last_seq", sa.Integer(), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("token_count", sa.Integer(), nullable=False),
        sa.Column("method", sa.String(16), nullable=False),
        _ddl.timestamp("created_at"),
        sa.CheckConstraint("last_seq > 0",
                           name=op.f("ck_compaction_checkpoints_last_seq_positive")),
        sa.CheckConstraint("method IN ('llm')", name=op.f("ck_compaction_checkpoints_method")),
        _ddl.cascade("compaction_checkpoints", "conversation_id", "conversations"),
        _ddl.primary_key("compaction_checkpoints"),
    )
    op.create_index(
        "ix_compaction_checkpoints_conversation_seq", "compaction_checkpoints",
        ["conversation_id", "last_seq"],
    )


def downgrade() -> None:
    for table in ("compaction_checkpoints", "model_configs", "files", "messages",
                  "conversations", "users"):
        op.drop_table(table)
