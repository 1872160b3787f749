"""Initial schema: users, conversations, messages, files, model configs, checkpoints.

Revision ID: 0001
Revises:
Create Date: 2025-01-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from ctxstack.store.models import BigIntId, JsonType, UTCDateTime

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "users",
        sa.Column("id", BigIntId, autoincrement=True, nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_users")),
        sa.UniqueConstraint("name", name=op.f("uq_users_name")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_users_token_hash")),
    )
    op.create_table(
        "conversations",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("owner_id", BigIntId, nullable=False),
        sa.Column("title", sa.String(200), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.Column("last_seq", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("input_tokens", sa.BigInteger(), server_default=sa.text("0"),
                  nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), server_default=sa.text("0"),
                  nullable=False),
        sa.ForeignKeyConstraint(["owner_id"], ["users.id"], ondelete="CASCADE",
                                name=op.f("fk_conversations_owner_id_users")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_conversations")),
    )
    op.create_index(op.f("ix_conversations_owner_id"), "conversations", ["owner_id"])
    op.create_table(
        "messages",
        sa.Column("id", BigIntId, autoincrement=True, nullable=False),
        sa.Column("conversation_id", sa.String(32), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("content", sa.Text(), nullable=True),
        sa.Column("kind", sa.String(32), nullable=True),
        sa.Column("metadata", JsonType, nullable=False),
        sa.Column("usage", JsonType, nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.CheckConstraint("role IN ('system', 'user', 'assistant', 'tool')",
                           name=op.f("ck_messages_role")),
        sa.CheckConstraint("seq > 0", name=op.f("ck_messages_seq_positive")),
        sa.ForeignKeyConstraint(["conversation_id"], ["conversations.id"], ondelete="CASCADE",
                                name=op.f("fk_messages_conversation_id_conversations")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_messages")),
        sa.UniqueConstraint("conversation_id", "seq",
                            name=op.f("uq_messages_conversation_id_seq")),
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
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.CheckConstraint(
            "mime_type IN ('image/png', 'image/jpeg', 'image/webp', 'image/gif')",
            name=op.f("ck_files_mime_type"),
        ),
        sa.CheckConstraint("size > 0", name=op.f("ck_files_size_positive")),
        sa.ForeignKeyConstraint(["owner_id"], ["users.id"], ondelete="CASCADE",
                                name=op.f("fk_files_owner_id_users")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_files")),
    )
    op.create_index(op.f("ix_files_owner_id"), "files", ["owner_id"])
    op.create_table(
        "model_configs",
        sa.Column("id", BigIntId, autoincrement=True, nullable=False),
        sa.Column("role", sa.String(8), nullable=False),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("context_size", sa.Integer(), nullable=True),
        sa.Column("max_output_tokens", sa.Integer(), nullable=True),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.CheckConstraint("role IN ('main', 'fast')", name=op.f("ck_model_configs_role")),
        sa.CheckConstraint("context_size IS NULL OR context_size > 0",
                           name=op.f("ck_model_configs_context_size")),
        sa.CheckConstraint("max_output_tokens IS NULL OR max_output_tokens > 0",
                           name=op.f("ck_model_configs_max_output_tokens")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_model_configs")),
    )
    op.create_index(
        "uq_model_configs_active_role", "model_configs", ["role"], unique=True,
        sqlite_where=sa.text("active"), postgresql_where=sa.text("active"),
    )
    op.create_table(
        "compaction_checkpoints",
        sa.Column("id", BigIntId, autoincrement=True, nullable=False),
        sa.Column("conversation_id", sa.String(32), nullable=False),
        sa.Column("last_seq", sa.Integer(), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("token_count", sa.Integer(), nullable=False),
        sa.Column("method", sa.String(16), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.CheckConstraint("last_seq > 0",
                           name=op.f("ck_compaction_checkpoints_last_seq_positive")),
        sa.CheckConstraint("method IN ('llm')", name=op.f("ck_compaction_checkpoints_method")),
        sa.ForeignKeyConstraint(
            ["conversation_id"], ["conversations.id"], ondelete="CASCADE",
            name=op.f("fk_compaction_checkpoints_conversation_id_conversations"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_compaction_checkpoints")),
    )
    op.create_index(
        "ix_compaction_checkpoints_conversation_seq", "compaction_checkpoints",
        ["conversation_id", "last_seq"],
    )


def downgrade() -> None:
    op.drop_table("compaction_checkpoints")
    op.drop_table("model_configs")
    op.drop_table("files")
    op.drop_table("messages")
    op.drop_table("conversations")
    op.drop_table("users")
