"""Request and response bodies of the HTTP API (they are also the OpenAPI schema at /docs).

Limits are part of the contract: a query of at most 100,000 characters, at most 8 images
per message, an inject of at most 20,000 characters, a title of at most 200, integers in
query strings at most :data:`MAX_INT` (2^31 - 1), and no NUL character in any text (no
backend can store it the same way: PostgreSQL refuses it, SQLite keeps it). A request that
breaks one is answered 422 with ``{"detail": "<field>: <problem>", "errors": [...]}``.

Every text a client sends goes through one check, :func:`text_problem`: request bodies
by the validator of :class:`_In` (chat, inject, titles, model configs), other inputs
(an upload's file name) by :func:`check_text`, which raises the same 422.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ctxstack.server.injects import MAX_INJECT_CHARS

MAX_QUERY_CHARS = 100_000
MAX_IMAGES_PER_MESSAGE = 8
MAX_TITLE_CHARS = 200
MAX_INT = 2**31 - 1
"""The largest integer a query string may carry (sequence numbers, offsets)."""

Mode = Literal["react", "dag"]
MessageStatus = Literal["ok", "failed", "stopped"]


def text_problem(value: str) -> str | None:
    """What is wrong with a client-sent text, or ``None`` (the one shared check)."""
    if "\x00" in value:
        return "must not contain NUL characters"
    return None


def check_text(value: str | None, *where: str) -> str | None:
    """``value`` if acceptable; else a 422 naming ``where`` (e.g. "file", "filename")."""
    if value is None:
        return None
    problem = text_problem(value)
    if problem is not None:
        raise RequestValidationError([{"loc": where, "msg": problem, "type": "value_error"}])
    return value


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    @field_validator("*", mode="after")
    @classmethod
    def _clean_texts(cls, value: object) -> object:
        texts = value if isinstance(value, list) else [value]
        for item in texts:
            if isinstance(item, str):
                problem = text_problem(item)
                if problem is not None:
                    raise ValueError(problem)
        return value


class _Out(BaseModel):
    model_config = ConfigDict(from_attributes=True)


def _not_blank(value: str, field: str) -> str:
    if not value.strip():
        raise ValueError(f"{field} must not be empty")
    return value


# ---------------------------------------------------------------------------- conversations
class ConversationCreate(_In):
    title: str | None = Field(None, max_length=MAX_TITLE_CHARS,
                              description="Defaults to the first question, once asked.")


class ConversationRename(_In):
    title: str = Field(..., min_length=1, max_length=MAX_TITLE_CHARS)


class ConversationOut(_Out):
    id: str
    title: str
    created_at: datetime
    updated_at: datetime
    input_tokens: int = 0
    output_tokens: int = 0


# ---------------------------------------------------------------------------- messages
class ImageRef(BaseModel):
    file_id: str
    mime_type: str


class UsageOut(BaseModel):
    input_tokens: int = 0
    output_tokens: int = 0


class StoredEvent(BaseModel):
    """An SSE event as stored on an assistant message (all but the answer deltas)."""

    event: Literal["step", "inject", "compact", "compact_start", "compact_end", "context",
                   "answer", "done", "error"]
    data: dict[str, Any]


class MessageOut(BaseModel):
    """One stored message, with what the page needs to redraw it.

    ``events`` (assistant messages) are the turn's SSE events in order; ``status`` says
    whether the turn finished ("ok"), failed (the content then explains the failure) or was
    stopped by the client (the content is what had been produced).
    """

    id: int
    seq: int
    role: Literal["system", "user", "assistant", "tool"]
    content: str | None
    kind: str | None = None
    images: list[ImageRef] = Field(default_factory=list)
    usage: UsageOut | None = None
    events: list[StoredEvent] = Field(default_factory=list)
    status: MessageStatus | None = None
    mode: Mode | None = None
    created_at: datetime


# ---------------------------------------------------------------------------- chat
class ChatRequest(_In):
    conversation_id: str = Field(..., min_length=1, max_length=64)
    query: str = Field(..., min_length=1, max_length=MAX_QUERY_CHARS)
    mode: Mode = "react"
    file_ids: list[str] = Field(default_factory=list, max_length=MAX_IMAGES_PER_MESSAGE)

    @field_validator("query")
    @classmethod
    def _query_not_blank(cls, v: str) -> str:
        return _not_blank(v, "query")


class InjectRequest(_In):
    conversation_id: str = Field(..., min_length=1, max_length=64)
    text: str = Field(..., min_length=1, max_length=MAX_INJECT_CHARS)

    @field_validator("text")
    @classmethod
    def _text_not_blank(cls, v: str) -> str:
        return _not_blank(v, "text")


class InjectOut(BaseModel):
    queued: bool = True


# ---------------------------------------------------------------------------- files
class FileOut(BaseModel):
    id: str
    mime_type: str
    size: int


# ---------------------------------------------------------------------------- users, info
class MeOut(BaseModel):
    id: int
    name: str
    is_admin: bool


class BudgetOut(BaseModel):
    role: Literal["main", "fast"]
    context_size: int
    max_output_tokens: int
    usable_input_tokens: int
    sources: dict[str, str] = Field(default_factory=dict)


class InfoOut(BaseModel):
    """What the page needs before signing in: the model, the auth mode, the budget."""

    version: str
    demo_model: bool
    model: str
    auth_required: bool
    budget: BudgetOut | None = None
    # The counting rule of each role ("tokenizer.json", "tiktoken:o200k_base",
    # "bpe-heuristic", …; no file paths: this endpoint is public). Empty: calibration off.
    token_counters: dict[str, str] = Field(default_factory=dict)


# ---------------------------------------------------------------------------- admin
class ModelConfigIn(_In):
    """An admin-set model config for a role. ``None`` leaves a number to env/defaults."""

    model: str = Field(..., min_length=1, max_length=200)
    context_size: int | None = Field(None, gt=0, le=100_000_000)
    max_output_tokens: int | None = Field(None, gt=0, le=100_000_000)
    # A tokenizer.json on the service's machines, for exact counts (no NUL: _In checks
    # every text). Not checked for existence here: a missing file logs a warning when the
    # counter is built and the role counts with the heuristic.
    tokenizer_path: str | None = Field(None, min_length=1, max_length=1000)


class ModelConfigOut(BaseModel):
    role: Literal["main", "fast"]
    model: str | None
    context_size: int | None
    max_output_tokens: int | None
    tokenizer_path: str | None = None
    budget: BudgetOut


class ErrorOut(BaseModel):
    detail: str
