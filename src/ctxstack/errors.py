"""The one exception hierarchy of ctxstack.

Every error the library raises on purpose derives from :class:`CtxstackError`, so a
caller can catch "anything ctxstack decided to refuse" in one place and still tell the
cases apart::

    CtxstackError
    ├── ConfigError (ValueError)    bad configuration or constructor argument (names it)
    ├── MessageError (ValueError)   a message or message list that breaks the format
    ├── InputError (ValueError)     another value handed to ctxstack is invalid (a title,
    │   │                           a token, a role…); the message names it
    │   └── store.FileRejectedError an upload is not an accepted image, empty or too large
    ├── TokenizerUnavailableError   an exact tokenizer asked for but not available offline
    ├── LLMError                    a provider call failed
    │   ├── AuthenticationError     401/403: the key is wrong or lacks access
    │   ├── RateLimitError          429: carries ``retry_after`` seconds when given
    │   ├── LLMTimeoutError         the call exceeded its deadline
    │   ├── LLMConnectionError      the endpoint could not be reached / stream dropped
    │   ├── BadRequestError         400-class refusal that is not an overflow
    │   │   └── ContextOverflowError  the prompt is longer than the model's window
    │   ├── ServerError             5xx after the retry budget was spent
    │   └── StructuredOutputError   the model's JSON did not validate after a re-ask
    ├── store.StorageError          the database or file store failed
    │   └── store.NotFoundError     a row or file does not exist *for this owner*
    ├── server.TurnBusyError        a chat turn is already running on the conversation
    ├── server.NoRunningTurnError   an inject for a conversation with no turn running
    ├── ToolError                   a tool definition is invalid (not a tool *run* error:
    │                               those become tool results the model can read)
    ├── ToolArgumentsError (ValueError)  a call's arguments do not match the tool's schema
    │                               (the agent turns it into a tool result)
    ├── PlanError                   a DAG plan is invalid after a re-ask
    └── AgentError                  the agent loop cannot go on (e.g. overflow twice)

The classes marked ``store.`` and ``server.`` are raised only by the storage side and the
chat service, so they live there (:mod:`ctxstack.store.errors`,
:mod:`ctxstack.server.errors`, both with the ``server`` extra) and still derive from this
tree; the proxy's own error is :class:`ctxstack.proxy.errors.ProxyError`.

``MessageError`` and ``InputError`` are also ``ValueError`` because invalid input is a value
problem and callers that validate generically (pydantic, FastAPI) already treat it so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ctxstack.protocol._usage import Usage


class CtxstackError(Exception):
    """Base class of every error ctxstack raises deliberately."""


class ConfigError(CtxstackError, ValueError):
    """Configuration or a constructor argument is missing or invalid; names the setting."""


class MessageError(CtxstackError, ValueError):
    """A chat message (or its OpenAI wire form) is malformed; the message names the field."""


class InputError(CtxstackError, ValueError):
    """A value handed to ctxstack (other than a chat message) is invalid; names the field."""



class TokenizerUnavailableError(CtxstackError):
    """An exact tokenizer was requested but its vocabulary is not available offline."""


class LLMError(CtxstackError):
    """A call to a language model failed."""

    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


class AuthenticationError(LLMError):
    """The endpoint rejected the credentials (HTTP 401/403)."""


class RateLimitError(LLMError):
    """The endpoint asked us to slow down (HTTP 429)."""

    def __init__(
        self, message: str, *, status_code: int | None = 429, retry_after: float | None = None
    ) -> None:
        super().__init__(message, status_code=status_code)
        self.retry_after = retry_after


class LLMTimeoutError(LLMError):
    """The call did not finish within its deadline."""


class LLMConnectionError(LLMError):
    """The endpoint could not be reached, or a stream was cut off mid-way."""


class BadRequestError(LLMError):
    """The endpoint refused the request as invalid (HTTP 400/404/422) and retrying won't help."""


class ContextOverflowError(BadRequestError):
    """The prompt does not fit the model's context window."""


class ServerError(LLMError):
    """The endpoint kept failing with 5xx responses after every retry."""


class StructuredOutputError(LLMError):
    """The model did not produce output matching the requested schema, even after a re-ask.

    ``raw`` is the model's last answer; ``usage`` the tokens of every attempt, so a turn's
    total still counts calls whose output was thrown away.
    """

    def __init__(
        self, message: str, *, status_code: int | None = None, raw: str | None = None,
        usage: Usage | None = None,
    ) -> None:
        super().__init__(message, status_code=status_code)
        self.raw = raw
        self.usage = usage






class ToolError(CtxstackError):
    """A tool definition is invalid (bad schema, duplicate name)."""


class ToolArgumentsError(CtxstackError, ValueError):
    """Arguments for a tool call do not validate; the message names each bad field.

    Raised by :meth:`ctxstack.agent.Tool.call`; the agent's registry turns it into a tool
    result the model can read and correct, so it never ends a run.
    """


class PlanError(CtxstackError):
    """A DAG plan stayed invalid after the planner was asked to repair it."""


class AgentError(CtxstackError):
    """The agent loop cannot continue (for example the context overflowed twice)."""
