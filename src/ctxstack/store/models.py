"""The database tables (SQLAlchemy 2.x declarative, async-friendly).

Portable by construction: the same models and migrations run on SQLite (aiosqlite, the
default) and PostgreSQL (asyncpg). Hence no PostgreSQL ENUM types (closed value sets are
``CHECK`` constraints), JSON columns that become ``JSONB`` on PostgreSQL, and timestamps
stored as UTC and always handed back timezone-aware (SQLite forgets the zone).

Ids a user can see in a URL (conversations, files) are random 32-hex strings so they
cannot be enumerated; internal ids (users, messages, checkpoints, model configs) are
integers.

The order of a conversation is ``messages.seq``: a per-conversation sequence number
allocated from ``conversations.last_seq`` inside the inserting transaction (see
:mod:`ctxstack.store.messages`) and protected by the unique ``(conversation_id, seq)``
constraint. Timestamps are informative only: two rows may share one.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

STORED_ROLES = ("system", "user", "assistant", "tool")
MODEL_ROLES = ("main", "fast")
CHECKPOINT_METHODS = ("llm",)
IMAGE_MIME_TYPES = ("image/png", "image/jpeg", "image/webp", "image/gif")

# Stable constraint names, so later migrations can refer to them on both backends.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

JsonType = JSON().with_variant(JSONB(), "postgresql")
# SQLite only auto-increments a column declared exactly INTEGER PRIMARY KEY.
BigIntId = BigInteger().with_variant(Integer(), "sqlite")


def utcnow() -> datetime:
    """The current time, timezone-aware UTC (the only kind stored)."""
    return datetime.now(UTC)


def new_public_id() -> str:
    """A random 32-hex id for rows whose id appears in URLs (not guessable, not a counter)."""
    return uuid.uuid4().hex


class UTCDateTime(TypeDecorator[datetime]):
    """A timestamp stored in UTC and always returned timezone-aware.

    PostgreSQL keeps the zone (``timestamptz``); SQLite returns naive values, which are UTC
    because only UTC is ever written.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column; pass an aware datetime")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    """Declarative base with the shared naming convention."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)


def table_of(model: type[Base]) -> Table:
    """``model``'s table, for Core statements (SQLAlchemy types ``__table__`` as any
    FromClause). What every chat turn runs — appends, history and record reads, the
    inject queue's claim, polls and settle — is Core on the tables: the ORM's unit of
    work, bulk INSERT/UPDATE/DELETE paths and entity loading cost several times the CPU
    of the statement itself (issue 15)."""
    return cast(Table, model.__table__)


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


class User(Base):
    """A person (or API client). Only the SHA-256 of the API token is stored."""

    __tablename__ = "users"

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Conversation(Base):
    """A chat thread owned by one user.

    ``last_seq`` is the sequence counter: the highest ``messages.seq`` handed out so far.
    ``input_tokens`` / ``output_tokens`` total the usage recorded on its messages.
    """

    __tablename__ = "conversations"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_public_id)
    owner_id: Mapped[int] = mapped_column(
        BigIntId, ForeignKey("users.id", ondelete="CASCADE"), index=True
    )
    title: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    last_seq: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    input_tokens: Mapped[int] = mapped_column(BigInteger, default=0, server_default=text("0"))
    output_tokens: Mapped[int] = mapped_column(BigInteger, default=0, server_default=text("0"))


class Message(Base):
    """One stored chat message. ``meta`` is the ``metadata`` JSON column.

    ``meta`` holds what the message is to ctxstack, e.g. ``{"images": [{"file_id",
    "mime_type"}]}``; ``kind`` repeats ``meta["kind"]`` as a column so it can be filtered.
    """

    __tablename__ = "messages"
    __table_args__ = (
        UniqueConstraint("conversation_id", "seq"),
        CheckConstraint(_in("role", STORED_ROLES), name="role"),
        CheckConstraint("seq > 0", name="seq_positive"),
    )

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    conversation_id: Mapped[str] = mapped_column(
        String(32), ForeignKey("conversations.id", ondelete="CASCADE")
    )
    seq: Mapped[int] = mapped_column(Integer)
    role: Mapped[str] = mapped_column(String(16))
    content: Mapped[str | None] = mapped_column(Text, nullable=True)
    kind: Mapped[str | None] = mapped_column(String(32), nullable=True)
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", JsonType, default=dict)
    usage: Mapped[dict[str, Any] | None] = mapped_column(JsonType, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class StoredFile(Base):
    """An uploaded image on disk. ``stored_name`` is derived from ``id``, never from a user."""

    __tablename__ = "files"
    __table_args__ = (
        CheckConstraint(_in("mime_type", IMAGE_MIME_TYPES), name="mime_type"),
        CheckConstraint("size > 0", name="size_positive"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    owner_id: Mapped[int] = mapped_column(
        BigIntId, ForeignKey("users.id", ondelete="CASCADE"), index=True
    )
    stored_name: Mapped[str] = mapped_column(String(64))
    mime_type: Mapped[str] = mapped_column(String(32))
    size: Mapped[int] = mapped_column(Integer)
    sha256: Mapped[str] = mapped_column(String(64))
    original_name: Mapped[str | None] = mapped_column(String(255), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class ModelConfig(Base):
    """Admin-set model limits per role; at most one active row per role (partial index).

    ``context_size`` / ``max_output_tokens`` may be NULL: that number then comes from the
    next source of :func:`ctxstack.budget.resolve_budget` (environment, defaults).
    """

    __tablename__ = "model_configs"
    __table_args__ = (
        CheckConstraint(_in("role", MODEL_ROLES), name="role"),
        CheckConstraint("context_size IS NULL OR context_size > 0", name="context_size"),
        CheckConstraint(
            "max_output_tokens IS NULL OR max_output_tokens > 0", name="max_output_tokens"
        ),
        Index(
            "uq_model_configs_active_role",
            "role",
            unique=True,
            sqlite_where=text("active"),
            postgresql_where=text("active"),
        ),
    )

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    role: Mapped[str] = mapped_column(String(8))
    model: Mapped[str] = mapped_column(String(200))
    context_size: Mapped[int | None] = mapped_column(Integer, nullable=True)
    max_output_tokens: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # A tokenizer.json for exact counts (ctxstack.tokens._exact); NULL: by model name.
    tokenizer_path: Mapped[str | None] = mapped_column(String(1000), nullable=True)
    active: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class CompactionCheckpoint(Base):
    """A persisted rolling summary of a conversation's messages up to ``last_seq``.

    The newest checkpoint (highest ``last_seq``, then newest row) is where the next load
    starts: its summary stands for every message with ``seq <= last_seq``.
    """

    __tablename__ = "compaction_checkpoints"
    __table_args__ = (
        Index("ix_compaction_checkpoints_conversation_seq", "conversation_id", "last_seq"),
        CheckConstraint("last_seq > 0", name="last_seq_positive"),
        CheckConstraint(_in("method", CHECKPOINT_METHODS), name="method"),
    )

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    conversation_id: Mapped[str] = mapped_column(
        String(32), ForeignKey("conversations.id", ondelete="CASCADE")
    )
    last_seq: Mapped[int] = mapped_column(Integer)
    summary: Mapped[str] = mapped_column(Text)
    token_count: Mapped[int] = mapped_column(Integer)
    method: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class ActiveTurn(Base):
    """The claim of a running turn on its conversation (one row per busy conversation)."""

    __tablename__ = "active_turns"

    conversation_id: Mapped[str] = mapped_column(
        String(32), ForeignKey("conversations.id", ondelete="CASCADE"), primary_key=True
    )
    turn_id: Mapped[str] = mapped_column(String(32))
    started_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    heartbeat_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    state: Mapped[str] = mapped_column(String(16), default="running",
                                       server_default="running")
    holder: Mapped[str] = mapped_column(String(200), default="", server_default="")


class PendingInject(Base):
    """A text sent to a running turn and not yet taken by it."""

    __tablename__ = "pending_injects"

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    conversation_id: Mapped[str] = mapped_column(
        String(32), ForeignKey("conversations.id", ondelete="CASCADE"), index=True
    )
    turn_id: Mapped[str] = mapped_column(String(32))
    text: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class ProxyCheckpoint(Base):
    """A rolling summary written by ``ctxstack proxy``, keyed by the message prefix it covers.

    Proxy clients resend the whole history without an id, so a conversation is recognised
    by content: ``prefix_hash`` is the hash of the first ``covered`` wire messages (salted
    with the caller's identity), ``root_hash`` the hash of its opening messages, the lookup
    key. ``summary`` stands for messages ``[prompt_end, covered)``. Rows expire a while
    after their last use (``used_at``, else ``created_at``) and are bounded in number
    (:mod:`ctxstack.store.proxy_checkpoints`).
    """

    __tablename__ = "proxy_checkpoints"
    __table_args__ = (
        Index("ix_proxy_checkpoints_root_covered", "root_hash", "covered"),
        CheckConstraint("covered > 0", name="covered_positive"),
    )

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    prefix_hash: Mapped[str] = mapped_column(String(64), unique=True)
    root_hash: Mapped[str] = mapped_column(String(64))
    covered: Mapped[int] = mapped_column(Integer)
    model: Mapped[str] = mapped_column(String(200))
    summary: Mapped[str] = mapped_column(Text)
    token_count: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, index=True)
    used_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class ProxySession(Base):
    """The view ``ctxstack proxy`` last computed for one client session, and its lease.

    ``session_key`` is the session's hash (the client's key and session id or opening
    messages: :mod:`ctxstack.proxy.sessions`). ``recipe`` is the forwarded view as JSON:
    per position either a client message index or a message the proxy made (the summary,
    a cleared tool output); it stands for the client's first ``covered`` messages, whose
    salted prefix hash is ``prefix_hash``. A later request whose prefix matches is forwarded
    as that view plus its new messages. ``lease_owner`` / ``lease_until``: the worker
    recomputing the view (single flight across workers). ``archived``: messages of the
    session in ``proxy_archive`` (recall is offered once it is above zero).
    """

    __tablename__ = "proxy_sessions"

    session_key: Mapped[str] = mapped_column(String(64), primary_key=True)
    model: Mapped[str] = mapped_column(String(200), default="")
    covered: Mapped[int] = mapped_column(Integer, default=0)
    prefix_hash: Mapped[str] = mapped_column(String(64), default="")
    recipe: Mapped[str] = mapped_column(Text, default="")
    view_tokens: Mapped[int] = mapped_column(Integer, default=0)
    covered_tokens: Mapped[int] = mapped_column(Integer, default=0)
    counter: Mapped[str] = mapped_column(String(100), default="")
    summarized: Mapped[int] = mapped_column(Integer, default=0)
    method: Mapped[str] = mapped_column(String(20), default="")
    version: Mapped[int] = mapped_column(Integer, default=0)
    archived: Mapped[int] = mapped_column(Integer, default=0)
    lease_owner: Mapped[str | None] = mapped_column(String(64), nullable=True)
    lease_until: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, index=True)


class ProxyArchiveEntry(Base):
    """One message ``ctxstack proxy`` compacted away from a session's view (a cleared tool
    output, a summarised or dropped message), kept for ``ctxstack_recall``. ``digest``
    makes archiving idempotent per session (a view recomputed clears the same output
    again)."""

    __tablename__ = "proxy_archive"
    __table_args__ = (UniqueConstraint("session_key", "digest"),)

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    session_key: Mapped[str] = mapped_column(String(64), index=True)
    digest: Mapped[str] = mapped_column(String(64))
    message: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class ProxySummary(Base):
    """One summary ``ctxstack proxy`` made for a session's view: its
    :class:`~ctxstack.compaction.SummaryNode` as JSON (its text, the ``proxy_archive`` refs
    of the messages it covers, the summaries it condensed), for ``ctxstack_recall`` to
    expand. Its ref is ``s<id>``."""

    __tablename__ = "proxy_summaries"

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    session_key: Mapped[str] = mapped_column(String(64), index=True)
    node: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class ProxyResponse(Base):
    """One response the proxy relayed on the Responses wire, kept so a later request naming
    it as ``previous_response_id`` can be expanded into its whole conversation.

    ``items`` is JSON: the input items the request added to its chain (after
    ``parent_id``'s conversation) followed by the response's output items, each as the
    client or upstream sent it. ``owner`` is a hash of the caller's identity and key: a
    chain is only ever found by whoever created it. Only responses created with ``store``
    not false are written; rows expire and are bounded
    (:mod:`ctxstack.store.proxy_responses`).
    """

    __tablename__ = "proxy_responses"
    __table_args__ = (UniqueConstraint("owner", "response_id"),)

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    owner: Mapped[str] = mapped_column(String(64))
    response_id: Mapped[str] = mapped_column(String(200))
    parent_id: Mapped[str | None] = mapped_column(String(200), nullable=True)
    model: Mapped[str] = mapped_column(String(200))
    items: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, index=True)


class ProxyStat(Base):
    """One running total of ``ctxstack proxy`` (``requests``, ``compactions.llm``, …),
    summed over every worker that shares the database (:mod:`ctxstack.store.proxy_stats`)."""

    __tablename__ = "proxy_stats"

    key: Mapped[str] = mapped_column(String(100), primary_key=True)
    value: Mapped[int] = mapped_column(BigInteger)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class TokenCalibration(Base):
    """What a :class:`~ctxstack.tokens.CalibratingCounter` learnt for one model:
    its correction factors and sample counts as JSON (``CalibratingCounter.export_state``).
    Loaded when a service process starts and saved after it learns, so what one worker
    learnt survives restarts and reaches the others."""

    __tablename__ = "token_calibrations"

    model: Mapped[str] = mapped_column(String(200), primary_key=True)
    state: Mapped[str] = mapped_column(Text)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class ArchivedMessage(Base):
    """A message a turn's guard archived that is not itself stored (a tool output it
    cleared or dropped): with the stored messages it forms the conversation's archive
    (:mod:`ctxstack.store.archive`). ``name`` is the tool name, ``meta`` holds tool calls."""

    __tablename__ = "archived_messages"

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    conversation_id: Mapped[str] = mapped_column(
        String(32), ForeignKey("conversations.id", ondelete="CASCADE"), index=True
    )
    role: Mapped[str] = mapped_column(String(16))
    name: Mapped[str | None] = mapped_column(String(64), nullable=True)
    content: Mapped[str] = mapped_column(Text)
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", JsonType, default=dict)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class TurnStream(Base):
    """The recorded SSE stream of one chat turn (the database backend of
    :mod:`ctxstack.server.stream_log`; with Redis configured the streams live there).

    ``ended_at`` is set when the turn's last event was recorded; a stream is deleted
    ``CTXSTACK_STREAM_RETENTION`` seconds after it ended. ``watched_at`` is the last time
    a reader on any worker read it (the turn keeps running while someone does);
    ``stop_requested`` asks the turn's worker to stop it.
    """

    __tablename__ = "turn_streams"

    turn_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    conversation_id: Mapped[str] = mapped_column(
        String(32), ForeignKey("conversations.id", ondelete="CASCADE"), index=True
    )
    started_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    watched_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    stop_requested: Mapped[bool] = mapped_column(Boolean, default=False,
                                                 server_default=text("false"))


class TurnStreamEvent(Base):
    """One recorded SSE event of a turn: ``seq`` (1, 2, …) is its id within the turn."""

    __tablename__ = "turn_stream_events"

    turn_id: Mapped[str] = mapped_column(
        String(32), ForeignKey("turn_streams.turn_id", ondelete="CASCADE"), primary_key=True
    )
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    event: Mapped[str] = mapped_column(String(32))
    data: Mapped[str] = mapped_column(Text)
