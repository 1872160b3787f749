"""The one place that turns a failing dependency into what a client may see.

The service depends on a database, optionally Redis, and a model endpoint. Each call to
them is bounded (database connect and statement timeouts, Redis socket timeouts,
``LLM_TIMEOUT`` / ``FAST_LLM_TIMEOUT``); when one fails, the low-level exception — which
names URLs, hosts, users, schemas — is classified here into a :class:`Failure`: the
dependency, the HTTP status (503) and a generic message naming only the dependency. The
details go to the server log, never to the client, and never into the conversation
(a failed turn's text is shown to the user but is not history the model reads back:
see :func:`ctxstack.store.memory` loading, which skips failed answers).

Like httpx's exception mapping, routes and the turn never look at driver exceptions
themselves: they call :func:`classify`.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Literal

from ctxstack.errors import (
    AuthenticationError,
    BadRequestError,
    ContextOverflowError,
    CtxstackError,
    LLMConnectionError,
    LLMError,
    LLMTimeoutError,
    RateLimitError,
    ServerError,
    StructuredOutputError,
)
from ctxstack.store.errors import NotFoundError, StorageError

log = logging.getLogger(__name__)

Dependency = Literal["database", "redis", "model"]

PUBLIC_MESSAGES: dict[Dependency, str] = {
    "database": "the database is unavailable; try again shortly",
    "redis": "the inject queue (Redis) is unavailable; try again shortly",
    "model": "the model is unavailable; try again shortly",
}

_MODEL_PROBLEMS: dict[str, str] = {
    LLMTimeoutError.__name__: "the model did not answer within the time limit",
    RateLimitError.__name__: "the model endpoint is rate limiting requests (HTTP 429)",
    ContextOverflowError.__name__: "the conversation no longer fits the model's context window",
    ServerError.__name__: "the model endpoint kept failing (HTTP 5xx)",
    LLMConnectionError.__name__: "the model could not be reached, or its answer was cut off",
    AuthenticationError.__name__: "the model endpoint refused the configured credentials",
    BadRequestError.__name__: "the model endpoint refused the request",
    StructuredOutputError.__name__: "the model's answer did not have the expected form",
    LLMError.__name__: "the model call failed",
}
_URL = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]{0,20}://[^\s'\"]+")
_AFTER_URL = ".,;:!?)]}"


class DependencyError(CtxstackError):
    """A dependency (Redis, …) failed or timed out; ``detail`` is for the log only."""

    def __init__(self, dependency: Dependency, detail: str) -> None:
        super().__init__(PUBLIC_MESSAGES[dependency])
        self.dependency: Dependency = dependency
        self.detail = detail


@dataclass(frozen=True)
class Failure:
    """What a client is told about a failed dependency."""

    dependency: Dependency
    status: int
    message: str


def _is_redis_error(exc: BaseException) -> bool:
    try:
        from redis.exceptions import RedisError
    except ImportError:  # pragma: no cover - redis is part of the server extra
        return False
    return isinstance(exc, RedisError)


def classify(exc: BaseException) -> Failure | None:
    """The dependency failure ``exc`` stands for, or ``None`` when it is not one.

    ``NotFoundError`` (a ``StorageError``) is the caller's problem, not the database's.
    """
    if isinstance(exc, DependencyError):
        return Failure(exc.dependency, 503, PUBLIC_MESSAGES[exc.dependency])
    if isinstance(exc, NotFoundError):
        return None
    if isinstance(exc, StorageError):
        return Failure("database", 503, PUBLIC_MESSAGES["database"])
    if _is_redis_error(exc):
        return Failure("redis", 503, PUBLIC_MESSAGES["redis"])
    if isinstance(exc, LLMError):
        return Failure("model", 503, model_problem(type(exc).__name__))
    return None


def model_problem(error_type: str) -> str:
    """A generic sentence for a model error class name (no URL, no provider text)."""
    return _MODEL_PROBLEMS.get(error_type, _MODEL_PROBLEMS[LLMError.__name__])


def scrub(text: str) -> str:
    """``text`` with every URL replaced by ``<url>`` (a last line of defence). Punctuation
    that ends a URL's match — the ``)`` of ``(see https://…)``, a sentence's ``.`` — is
    the sentence's, not the URL's: it stays after ``<url>``."""
    return _URL.sub(_url_placeholder, text)


def _url_placeholder(match: re.Match[str]) -> str:
    url = match.group()
    return "<url>" + url[len(url.rstrip(_AFTER_URL)):]


def turn_failure_text(error_type: str, message: str) -> str:
    """What the user reads when a turn failed with ``error_type`` / ``message``.

    Model errors get a generic sentence; dependency errors name the dependency; anything
    else (the agent's own refusals) keeps its message, with URLs scrubbed.
    """
    if error_type in _MODEL_PROBLEMS:
        detail = model_problem(error_type)
    elif error_type in (StorageError.__name__, DependencyError.__name__):
        detail = "a service dependency is unavailable"
    else:
        detail = scrub(message) or error_type
    return f"The turn failed: {detail}. Your question is saved; you can retry or rephrase."


def failure_text(exc: BaseException) -> str:
    """:func:`turn_failure_text` for an exception (logged in full first)."""
    failure = classify(exc)
    log.warning("turn failed: %s: %s", type(exc).__name__, exc)
    if failure is not None and failure.dependency != "model":
        return turn_failure_text(StorageError.__name__, "")
    return turn_failure_text(type(exc).__name__, str(exc))
