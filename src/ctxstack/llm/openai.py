"""OpenAICompatibleLLM: the :class:`~ctxstack.llm.LLM` protocol over any OpenAI-compatible
chat-completions endpoint (OpenAI, Azure-style gateways, vLLM, Ollama, LM Studio,
llama.cpp, DeepSeek, Qwen, OpenRouter, …), spoken over one ``httpx.AsyncClient``.

Contract highlights:

* **Errors** are ctxstack's (:mod:`ctxstack.errors`), never the SDK's: the HTTP status and
  body are classified by :func:`ctxstack.llm.classify.classify_status`, which recognises
  context overflow from the providers' real shapes and never mistakes a tokens-per-minute
  rate limit for one.
* **Retries**: :mod:`ctxstack.llm.retry`, exponential backoff with jitter on 429 / 5xx /
  connection errors / timeouts, honouring ``Retry-After``, bounded in attempts and total
  time; a stream is retried until its first text delta.
* **Timeouts**: ``timeout`` bounds each non-streaming attempt as a whole, and each wait for
  the next bytes of a stream (a long answer may stream for minutes; a silent one may not).
* **Streams** yield text deltas and end with the usage. A stream that stops before the
  model's ``finish_reason`` arrived — cut connection, or a body that just ends — raises
  :class:`~ctxstack.errors.LLMConnectionError`: a partial answer is never passed off as
  complete. It is retried only if no delta was yielded yet (the caller has seen nothing).
* **Usage** is the provider's (``cached_tokens`` from ``prompt_tokens_details`` or
  DeepSeek's ``prompt_cache_hit_tokens``), or, when the server reports none, ctxstack's
  heuristic estimate flagged ``estimated=True``.
* **Tool-call arguments** that are not a JSON object (models do emit broken JSON) do not
  fail the call: the :class:`~ctxstack.messages.ToolCall` gets ``{"_raw": "<the text>"}``
  so the agent can hand the model a readable tool error instead of crashing the turn.

Why httpx and not the ``openai`` SDK: of the SDK this client used authentication headers,
base URLs and the status-error classes — a request builder's worth — while it kept its own
retries (the SDK's cannot bound a call's total time, refuse a ``Retry-After`` beyond a
limit, or retry a stream until its first text), its own error classification
(:mod:`ctxstack.llm.classify`, which knows the providers' overflow and rate-limit shapes)
and its own JSON reading (:mod:`ctxstack.llm.wire`: the typed models the SDK builds for
every response and stream chunk cost more CPU than the HTTP exchange against a local
server, ``benchmarks/bench_llm.py``). httpx is also the proxy's client, so the project has
one HTTP client stack for model calls; streams are read with ``httpx-sse``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
from httpx_sse import EventSource, SSEError

from ctxstack.budget import ModelBudget, resolve_budget
from ctxstack.errors import (
    ConfigError,
    CtxstackError,
    InputError,
    LLMConnectionError,
    LLMError,
    LLMTimeoutError,
    MessageError,
)
from ctxstack.llm.classify import classify_status
from ctxstack.llm.config import LLMRole, load_settings
from ctxstack.llm.retry import RetryPolicy, retry_async
from ctxstack.llm.wire import StreamAccumulator, estimate_usage, parse_completion
from ctxstack.messages import ChatMessage
from ctxstack.messages._model import RAW_ARGUMENTS_KEY
from ctxstack.protocol import ChatStream, LLMResult, ToolSpec, Usage
from ctxstack.tokens import HEURISTIC

ResponseFormatSupport = Literal["json_schema", "json_object", "none"]

CALL_OPTIONS = frozenset({
    "max_tokens", "max_completion_tokens", "temperature", "top_p", "stop", "seed",
    "response_format", "tool_choice", "parallel_tool_calls", "presence_penalty",
    "frequency_penalty", "logit_bias", "user", "reasoning_effort", "n",
    "extra_body", "extra_headers", "extra_query", "timeout",
})
"""Per-call options ``chat()`` / ``stream_chat()`` accept (``None`` values are dropped)."""

_PATH = "/chat/completions"

__all__ = ["CALL_OPTIONS", "RAW_ARGUMENTS_KEY", "OpenAICompatibleLLM", "ResponseFormatSupport"]


class OpenAICompatibleLLM:
    """An OpenAI-compatible chat model.

    Args:
        base_url: the endpoint's base URL including ``/v1`` (``http://localhost:11434/v1``).
        api_key: the bearer key (any non-empty value for servers that ignore it).
        model: the model name sent with every request.
        context_size: overrides the budget's context window.
        max_output_tokens: overrides the budget's reserved output.
        budget: the :class:`~ctxstack.budget.ModelBudget` to expose; default
            ``resolve_budget(role)`` (database-less: env, then defaults).
        timeout: seconds per non-streaming attempt / per stream read.
        max_retries: retries after the first try (0 disables them).
        max_retry_time: total seconds a call may spend retrying.
        role: "main" or "fast" (selects the budget).
        retry_policy: a full :class:`~ctxstack.llm.retry.RetryPolicy` (overrides the two
            retry arguments above).
        response_format_support: what :func:`~ctxstack.dag._structured.structured_call`
            may ask this server for: "json_schema" (OpenAI, vLLM, Ollama, LM Studio),
            "json_object", or "none" (servers that reject ``response_format``).
        max_tokens_param: the wire name a per-call ``max_tokens`` is sent under
            (OpenAI's reasoning models want ``max_completion_tokens``).
        default_options: per-call options applied to every call (``{"temperature": 0}``).
        client: an ``httpx.AsyncClient`` to send through instead of building one (a test's
            transport, a proxy, custom TLS); the URL, the key and the timeouts are still
            this object's. Closed by :meth:`aclose` only when built here.

    Raises:
        ConfigError: an empty or non-http(s) ``base_url``, empty ``api_key`` / ``model``,
            or a non-positive ``timeout``.
        TypeError: an unknown key in ``default_options``.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        model: str,
        *,
        context_size: int | None = None,
        max_output_tokens: int | None = None,
        budget: ModelBudget | None = None,
        timeout: float = 60.0,
        max_retries: int = 3,
        max_retry_time: float = 120.0,
        role: LLMRole = "main",
        retry_policy: RetryPolicy | None = None,
        response_format_support: ResponseFormatSupport = "json_schema",
        max_tokens_param: Literal["max_tokens", "max_completion_tokens"] = "max_tokens",
        default_options: Mapping[str, Any] | None = None,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        if not base_url or not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"base_url: expected an http(s) URL, got {base_url!r}")
        if not model:
            raise ConfigError("model: a model name is required")
        if not api_key:
            # The SDK would silently fall back to OPENAI_API_KEY; be explicit instead.
            raise ConfigError("api_key: required (any non-empty value for servers that "
                              "ignore keys)")
        if timeout <= 0:
            raise ConfigError(f"timeout: expected a positive number of seconds, got {timeout!r}")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.role: LLMRole = role
        self.timeout = float(timeout)
        self.response_format_support: ResponseFormatSupport = response_format_support
        self.max_tokens_param = max_tokens_param
        self.default_options = dict(default_options or {})
        _check_options(self.default_options, ConfigError)
        self.retry_policy = retry_policy or RetryPolicy(
            max_attempts=max(0, max_retries) + 1, max_total_time=max_retry_time
        )
        if budget is None:
            budget = resolve_budget(role)
        self.budget = budget
        self._context_size = context_size or budget.context_size
        self._max_output_tokens = max_output_tokens or budget.max_output_tokens
        self._url = f"{self.base_url}{_PATH}"
        self._headers = {"Authorization": f"Bearer {api_key}", "Accept": "application/json"}
        self._owns_client = client is None
        self._client = client or httpx.AsyncClient(timeout=self.timeout)

    @classmethod
    def from_env(
        cls, role: LLMRole = "main", env: Mapping[str, str] | None = None, **kwargs: Any
    ) -> OpenAICompatibleLLM:
        """Build from ``LLM_*`` (main) or ``FAST_LLM_*`` (fast, falling back to ``LLM_*``).

        The timeout is ``LLM_TIMEOUT`` / ``FAST_LLM_TIMEOUT`` unless ``timeout=`` is passed;
        the budget comes from the same environment (``resolve_budget(role, env=env)``)
        unless ``budget=`` is passed. Extra keyword arguments go to the constructor.

        Raises:
            ConfigError: naming exactly the variables to set.
        """
        settings = load_settings(role, env)
        kwargs.setdefault("budget", resolve_budget(role, env=env))
        kwargs.setdefault("timeout", settings.timeout)
        return cls(base_url=settings.base_url or "", api_key=settings.api_key or "",
                   model=settings.model or "", role=role, **kwargs)

    def __repr__(self) -> str:
        return f"OpenAICompatibleLLM(base_url={self.base_url!r}, model={self.model!r}, " \
               f"role={self.role!r})"

    # ------------------------------------------------------------------ budget
    @property
    def context_size(self) -> int:
        return self._context_size

    @property
    def max_output_tokens(self) -> int:
        return self._max_output_tokens

    # ------------------------------------------------------------------ lifecycle
    async def aclose(self) -> None:
        """Close the HTTP connection pool (unless the client was passed in)."""
        if self._owns_client:
            await self._client.aclose()

    async def __aenter__(self) -> OpenAICompatibleLLM:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # ------------------------------------------------------------------ chat
    async def chat(
        self,
        messages: Sequence[ChatMessage],
        *,
        tools: Sequence[ToolSpec] | None = None,
        **opts: Any,
    ) -> LLMResult:
        """One complete answer (text and/or tool calls) with its usage.

        Raises:
            LLMError: a subclass saying what failed, after retries where they apply.
            TypeError: an option this client does not know.
        """
        request = self._request(messages, tools, opts)

        async def attempt(_: int) -> Any:
            try:
                async with asyncio.timeout(request.timeout):
                    response = await self._client.send(self._build(request))
                    if response.status_code >= 400:
                        raise self._status_error(response)
                    return response.json()
            except json.JSONDecodeError as exc:
                raise LLMError(f"{self._where}: malformed response: the body is not JSON "
                               f"({exc.msg})") from exc
            except Exception as exc:
                raise self._translate(exc, request.timeout) from exc

        data = await retry_async(attempt, self.retry_policy)
        message, usage, finish, model = parse_completion(data, self._where)
        if usage is None:
            usage = estimate_usage(messages, HEURISTIC.count_message(message)
                                   - HEURISTIC.message_overhead)
        return LLMResult(message=message, usage=usage, finish_reason=finish,
                         model=model or self.model)

    # ------------------------------------------------------------------ streaming
    def stream_chat(self, messages: Sequence[ChatMessage], **opts: Any) -> ChatStream:
        """Text deltas of one answer; ``usage`` is set on the stream once it is exhausted.

        Options are checked now (``TypeError`` for unknown ones); HTTP errors surface
        when iterating. Close early with ``await stream.aclose()``.
        """
        request = self._request(messages, None, opts)
        request.body["stream"] = True
        request.body.setdefault("stream_options", {"include_usage": True})
        return ChatStream(self._stream(messages, request))

    async def _stream(
        self, messages: Sequence[ChatMessage], request: _Request
    ) -> AsyncIterator[str | Usage]:
        state = StreamAccumulator(self._where)
        timeout = request.timeout

        async def open_until_first_text(_: int) -> tuple[Any, AsyncIterator[str]]:
            # The retried unit: connect and read up to the first text delta. Until then
            # the caller has seen nothing, so a failure can be retried transparently.
            state.reset()
            response: httpx.Response | None = None
            try:
                response = await self._client.send(self._build(request), stream=True)
                if response.status_code >= 400:
                    await response.aread()
                    raise self._status_error(response)
                events = _sse_data(response)
                async for data in events:
                    if state.feed(data):
                        return response, events
                state.check_complete()
                return response, events
            except Exception as exc:
                if response is not None:
                    await response.aclose()
                if isinstance(exc, LLMError):
                    raise
                raise self._translate(exc, timeout) from exc

        response, events = await retry_async(open_until_first_text, self.retry_policy)
        try:
            for text in state.take_pending():
                yield text
            try:
                async for data in events:
                    if state.done:
                        continue  # drain after [DONE] so the connection can be reused
                    state.feed(data)
                    for text in state.take_pending():
                        yield text
            except LLMError:
                raise
            except Exception as exc:
                raise self._translate(exc, timeout, during_stream=state.chars) from exc
            state.check_complete()
        finally:
            await response.aclose()
        yield state.final_usage(messages)

    # ------------------------------------------------------------------ helpers
    @property
    def _where(self) -> str:
        return f"{self.base_url} (model {self.model})"

    def _request(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] | None,
        opts: Mapping[str, Any],
    ) -> _Request:
        """The JSON body, extra headers and query of one call (options checked here)."""
        if not messages:
            raise MessageError("messages: at least one message is required")
        merged = {**self.default_options, **opts} if self.default_options else opts
        _check_options(merged, InputError)
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [m.to_openai() for m in messages],
        }
        if tools:
            body["tools"] = list(tools)
        timeout = self.timeout
        headers: dict[str, str] = {}
        params: dict[str, Any] = {}
        for key, value in merged.items():
            if value is None:
                continue
            if key == "timeout":
                timeout = float(value)
            elif key == "extra_body":
                body.update(value)
            elif key == "extra_headers":
                headers.update(value)
            elif key == "extra_query":
                params.update(value)
            else:
                body[self.max_tokens_param if key == "max_tokens" else key] = value
        return _Request(body=body, headers=headers, params=params, timeout=timeout)

    def _build(self, request: _Request) -> httpx.Request:
        headers = {**self._headers, **request.headers} if request.headers else self._headers
        return self._client.build_request(
            "POST", self._url, json=request.body, headers=headers,
            params=request.params or None, timeout=request.timeout)

    def _status_error(self, response: httpx.Response) -> LLMError:
        """The classified error of an HTTP error response (body read)."""
        try:
            body: object = response.json()
        except ValueError:
            body = response.text
        return classify_status(response.status_code, body, dict(response.headers.items()),
                               where=self._where)

    def _translate(
        self, exc: BaseException, timeout: float, *, during_stream: int | None = None
    ) -> LLMError:
        """The ctxstack error for whatever the transport, the stream or the deadline raised."""
        if isinstance(exc, LLMError):
            return exc
        where = self._where
        cut = "" if during_stream is None else \
            f" after {during_stream} characters of the answer had streamed"
        if isinstance(exc, TimeoutError | httpx.TimeoutException):
            return LLMTimeoutError(f"{where}: no answer within {timeout:g}s{cut}")
        if isinstance(exc, SSEError):
            return LLMConnectionError(f"{where}: not an event stream{cut} ({exc})")
        if isinstance(exc, httpx.HTTPError):
            cause = exc.__cause__ or exc.__context__
            detail = f"{type(exc).__name__}: {exc}" if str(exc) or cause is None else \
                f"{type(cause).__name__}: {cause}"
            return LLMConnectionError(f"{where}: connection failed{cut} ({detail})")
        raise exc


async def _sse_data(response: httpx.Response) -> AsyncIterator[str]:
    """The ``data`` of each event of a streamed answer (httpx-sse: comments such as
    OpenRouter's ``: OPENROUTER PROCESSING``, ids and retry fields are skipped).

    An event without data is not one (the SSE standard's dispatch rule, which httpx-sse
    does not apply once an ``id`` was seen: it yields an empty event for a blank line).
    """
    async for event in EventSource(response).aiter_sse():
        if event.data:
            yield event.data


@dataclass
class _Request:
    body: dict[str, Any]
    timeout: float
    headers: dict[str, str] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)


def _check_options(opts: Mapping[str, Any], error: type[CtxstackError]) -> None:
    """Unknown options are a ``ConfigError`` in the constructor, an ``InputError`` per call."""
    unknown = sorted(set(opts) - CALL_OPTIONS)
    if unknown:
        raise error(
            f"OpenAICompatibleLLM: unknown option(s) {', '.join(map(repr, unknown))}; "
            f"known: {', '.join(sorted(CALL_OPTIONS))} (pass others in extra_body)"
        )
