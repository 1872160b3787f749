"""Persistence: SQLAlchemy async tables, SQLite by default and PostgreSQL in production.

Everything here takes a session factory (:func:`session_factory`) and returns plain,
frozen records — never live ORM objects — so callers cannot trigger lazy I/O by accident.
Every database failure is a :class:`~ctxstack.store.errors.StorageError`; a row that does not
exist *for the caller* is a :class:`~ctxstack.store.errors.NotFoundError`.

Typical start-up::

    engine = create_engine_from_url()        # CTXSTACK_DATABASE_URL or the SQLite default
    await upgrade(engine)                    # or: ctxstack db upgrade
    sessions = session_factory(engine)
"""

from ctxstack.store.checkpoints import (
    CheckpointCandidate,
    CheckpointRecord,
    latest_checkpoint,
    save_checkpoint,
)
from ctxstack.store.conversations import (
    ConversationRecord,
    count_conversations,
    create_conversation,
    delete_conversation,
    get_conversation,
    list_conversations,
    rename_conversation,
)
from ctxstack.store.db import (
    ENV_DATABASE_URL,
    SessionFactory,
    create_engine_from_url,
    database_url,
    default_database_url,
    is_transient_error,
    retry_transaction,
    session_factory,
)
from ctxstack.store.messages import (
    MessageRecord,
    NewMessage,
    append_message,
    append_messages,
    append_messages_in,
    list_messages,
)
from ctxstack.store.migrate import current_revision, downgrade, head_revision, upgrade
from ctxstack.store.model_configs import (
    ModelConfigRecord,
    get_active_model_config,
    list_model_configs,
    load_budget,
    load_budgets,
    set_model_config,
)
from ctxstack.store.users import UserRecord, create_user, get_user, user_by_token

__all__ = [
    "ENV_DATABASE_URL",
    "CheckpointCandidate",
    "CheckpointRecord",
    "ConversationRecord",
    "MessageRecord",
    "ModelConfigRecord",
    "NewMessage",
    "SessionFactory",
    "UserRecord",
    "append_message",
    "append_messages",
    "append_messages_in",
    "count_conversations",
    "create_conversation",
    "create_engine_from_url",
    "create_user",
    "current_revision",
    "database_url",
    "default_database_url",
    "delete_conversation",
    "downgrade",
    "get_active_model_config",
    "get_conversation",
    "get_user",
    "head_revision",
    "is_transient_error",
    "latest_checkpoint",
    "list_conversations",
    "list_messages",
    "list_model_configs",
    "load_budget",
    "load_budgets",
    "rename_conversation",
    "retry_transaction",
    "save_checkpoint",
    "session_factory",
    "set_model_config",
    "upgrade",
    "user_by_token",
]
