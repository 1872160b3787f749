"""What the stub answers with (:class:`StubReply`) and what it received (:class:`StubRequest`)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ctxstack.messages import ChatMessage, ToolCall
from ctxstack.tokens import HEURISTIC

DEFAULT_MODEL = "stub-model"
ids = itertools.count(1)
"""Shared counter for generated completion and tool-call ids."""


@dataclass(frozen=True)
class StubToolCall:
    """A tool call the stub answers with. ``arguments`` may be a raw (even invalid) string."""

    name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)
    id: str | None = None

    @property
    def arguments_text(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(dict(self.arguments), ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True)
class StubReply:
    """One scripted answer, or one fault.

    Attributes:
        content: assistant text (``None`` with tool calls only).
        tool_calls: tool calls to answer with.
        finish_reason: defaults to "tool_calls" when there are tool calls, else "stop".
        delay: seconds to wait before answering (added to the server-wide delay).
        status: an HTTP status other than 200 makes this an error reply with ``error``
            as the body's ``error`` object and ``headers`` as extra headers.
        chunk_size: characters per streamed content delta.
        chunk_delay: seconds between streamed chunks.
        pause_after / pause: when streaming, wait ``pause`` seconds once after this many
            SSE events (a stream that stalls mid-answer).
        drop_after: when streaming, stop after this many SSE events (the role chunk
            counts), without ``finish_reason`` or ``[DONE]`` — a dropped stream.
        drop_mode: "abort" closes the connection mid-body (what a crashed server or a
            proxy cut looks like); "clean" ends the HTTP body properly, so only the
            missing ``finish_reason`` / ``[DONE]`` tells the answer is incomplete.
        include_usage: ``False`` leaves usage out (JSON and stream), like servers that
            never report it.
        cached_tokens: reported as ``prompt_tokens_details.cached_tokens`` (Anthropic
            wire: ``cache_read_input_tokens``).
        cache_write_tokens: Anthropic wire: ``cache_creation_input_tokens``.
        thinking: Anthropic wire: a ``thinking`` block (with a signature) before the
            answer.
        raw_body: sent verbatim (with ``status`` and ``content_type``) instead of a
            generated answer — for malformed responses, error events inside a 200,
            hand-written SSE.
        reasoning: on ``/v1/responses`` only, the answer's output starts with a
            ``reasoning`` item whose ``encrypted_content`` is this text, base64-encoded
            (what a reasoning model hands back for the client to resend).
    """

    content: str | None = None
    tool_calls: tuple[StubToolCall, ...] = ()
    finish_reason: str | None = None
    delay: float = 0.0
    status: int = 200
    error: Mapping[str, Any] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    chunk_size: int = 4
    chunk_delay: float = 0.0
    pause_after: int | None = None
    pause: float = 0.0
    drop_after: int | None = None
    drop_mode: Literal["abort", "clean"] = "abort"
    include_usage: bool = True
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    thinking: str | None = None
    raw_body: str | None = None
    content_type: str = "application/json"
    reasoning: str | None = None

    # ------------------------------------------------------------------ answers
    @classmethod
    def text(cls, content: str, **kw: Any) -> StubReply:
        """A plain text answer."""
        return cls(content=content, **kw)

    @classmethod
    def tool_call(cls, name: str, arguments: Mapping[str, Any] | str | None = None, *,
                  call_id: str | None = None, content: str | None = None,
                  **kw: Any) -> StubReply:
        """An answer calling one tool."""
        call = StubToolCall(name, {} if arguments is None else arguments, call_id)
        return cls(content=content, tool_calls=(call,), **kw)

    @classmethod
    def tool_calls_of(cls, *calls: tuple[str, Mapping[str, Any] | str], **kw: Any) -> StubReply:
        """An answer calling several tools at once."""
        return cls(tool_calls=tuple(StubToolCall(n, a) for n, a in calls), **kw)

    @classmethod
    def invalid_json(cls, **kw: Any) -> StubReply:
        """Text that starts like JSON and is cut off (what a model hitting a limit sends)."""
        return cls(content='{"answer": "forty-two", "items": [1, 2', **kw)

    @classmethod
    def dropped(cls, content: str, after: int = 2, *,
                mode: Literal["abort", "clean"] = "abort", **kw: Any) -> StubReply:
        """A streamed answer cut after ``after`` SSE events (see ``drop_mode``)."""
        return cls(content=content, drop_after=after, drop_mode=mode, **kw)

    # ------------------------------------------------------------------ faults
    @classmethod
    def failure(cls, status: int, message: str, *, type: str = "invalid_request_error",
                code: str | None = None, param: str | None = None,
                headers: Mapping[str, str] | None = None, **kw: Any) -> StubReply:
        """An error response with OpenAI's body shape ``{"error": {message, type, …}}``."""
        error = {"message": message, "type": type, "param": param, "code": code}
        return cls(status=status, error=error, headers=dict(headers or {}), **kw)

    @classmethod
    def rate_limited(cls, retry_after: float | str | None = 0.2, *,
                     message: str | None = None, **kw: Any) -> StubReply:
        """429 with OpenAI's tokens-per-minute wording and a ``Retry-After`` header."""
        headers = {} if retry_after is None else {"retry-after": str(retry_after)}
        return cls.failure(
            429,
            message or "Rate limit reached for stub-model in organization org-stub on tokens "
            "per min (TPM): Limit 30000, Used 29500, Requested 1200. Please try again in "
            "1.4s. Visit https://platform.openai.com/account/rate-limits to learn more.",
            type="tokens", code="rate_limit_exceeded", headers=headers, **kw)

    @classmethod
    def server_error(cls, status: int = 500, **kw: Any) -> StubReply:
        """A 5xx with OpenAI's generic server-error body."""
        return cls.failure(
            status, "The server had an error while processing your request. Sorry about that!",
            type="server_error", **kw)

    @classmethod
    def overflow(cls, context_size: int = 8192, requested: int = 9000, **kw: Any) -> StubReply:
        """OpenAI's real context-length 400 (``code: context_length_exceeded``)."""
        return cls.failure(
            400,
            f"This model's maximum context length is {context_size} tokens. However, your "
            f"messages resulted in {requested} tokens. Please reduce the length of the "
            "messages.",
            param="messages", code="context_length_exceeded", **kw)

    @classmethod
    def unauthorized(cls, **kw: Any) -> StubReply:
        """401 as OpenAI sends it for a wrong key."""
        return cls.failure(401, "Incorrect API key provided: sk-stub***. You can find your "
                           "API key at https://platform.openai.com/account/api-keys.",
                           code="invalid_api_key", **kw)

    @classmethod
    def raw(cls, body: str, *, status: int = 200, content_type: str = "application/json",
            **kw: Any) -> StubReply:
        """Exactly ``body`` as the response (malformed JSON, HTML from a proxy, …)."""
        return cls(raw_body=body, status=status, content_type=content_type, **kw)

    @property
    def is_error(self) -> bool:
        return self.status != 200


ReplyLike = StubReply | str
Rule = Callable[["StubRequest"], ReplyLike]


@dataclass(frozen=True)
class StubRequest:
    """What the stub received: the raw JSON body and its parsed messages."""

    path: str
    body: Mapping[str, Any]
    headers: Mapping[str, str]
    messages: tuple[ChatMessage, ...] = ()
    transport: Literal["http", "websocket"] = "http"
    """How it arrived: ``websocket`` for a ``response.create`` frame on ``/v1/responses``
    (``body`` is then the frame without its ``type``)."""

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))

    @property
    def tools(self) -> list[dict[str, Any]] | None:
        tools = self.body.get("tools")
        return list(tools) if isinstance(tools, list) else None

    @property
    def tool_names(self) -> list[str]:
        """The names of the tools offered, whatever the wire: Chat's
        ``{"type": "function", "function": {"name"}}``, Anthropic's and Responses'
        ``{"name"}`` (a rule answers every wire by name: a ``ctxstack_recall`` call when
        the proxy offers it)."""
        names: list[str] = []
        for tool in self.tools or ():
            if not isinstance(tool, Mapping):
                continue
            fn = tool.get("function")
            name = fn.get("name") if isinstance(fn, Mapping) else tool.get("name")
            if isinstance(name, str):
                names.append(name)
        return names

    @property
    def last_user_text(self) -> str:
        for m in reversed(self.messages):
            if m.role == "user":
                return m.text
        return ""


def stub_usage(messages: Sequence[ChatMessage], content: str | None,
               tool_calls: Sequence[StubToolCall] = ()) -> tuple[int, int]:
    """The (prompt_tokens, completion_tokens) the stub reports for an answer."""
    calls = [
        ToolCall(id="x", name=c.name, arguments=dict(c.arguments))
        for c in tool_calls if not isinstance(c.arguments, str)
    ]
    answer = ChatMessage.assistant(content, tool_calls=calls or None)
    raw = " ".join(c.arguments for c in tool_calls if isinstance(c.arguments, str))
    completion = HEURISTIC.count_message(answer) - HEURISTIC.message_overhead
    return HEURISTIC.count_messages(messages), completion + HEURISTIC.count_text(raw)
