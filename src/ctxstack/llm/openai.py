"""OpenAICompatibleLLM: the :class:`~ctxstack.llm.LLM` protocol over any OpenAI-compatible
chat-completions endpoint (OpenAI, Azure-style gateways, vLLM, Ollama, LM Studio,
llama.cpp, DeepSeek, Qwen, OpenRouter, …), built on the official ``openai`` async SDK.

Contract highlights:

* **Errors** are ctxstack's (:mod:`ctxstack.errors`), never the SDK's: the HTTP status and
  body are classified by :func:`ctxstack.llm.classify.classify_status`, which recognises
  context overflow from the providers' real shapes and never mistakes a tokens-per-minute
  rate limit for one.
* **Retries** are ours only (the SDK's are switched off): :mod:`ctxstack.llm.retry`,
  exponential backoff with jitter on 429 / 5xx / connection errors / timeouts, honouring
  ``Retry-After``, bounded in attempts and total time.
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
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Literal

import openai

from ctxstack.budget import ModelBudget, resolve_budget
from ctxstack.errors import ConfigError, LLMConnectionError, LLMError, LLMTimeoutError, MessageError
from ctxstack.llm.base import ChatStream, LLMResult, ToolSpec, Usage
from ctxstack.llm.classify import classify_status, describe_body, is_context_overflow
from ctxstack.llm.config import LLMRole, load_settings
from ctxstack.llm.retry import RetryPolicy, retry_async
from ctxstack.messages import ChatMessage, ToolCall, parse_arguments
from ctxstack.tokens import HEURISTIC

ResponseFormatSupport = Literal["json_schema", "json_object", "none"]

CALL_OPTIONS = frozenset({
    "max_tokens", "max_completion_tokens", "temperature", "top_p", "stop", "seed",
    "response_format", "tool_choice", "parallel_tool_calls", "presence_penalty",
    "frequency_penalty", "logit_bias", "user", "reasoning_effort", "n",
    "extra_body", "extra_headers", "extra_query", "timeout",
})
"""Per-call options ``chat()`` / ``stream_chat()`` accept (``None`` values are dropped)."""

RAW_ARGUMENTS_KEY = "_raw"
"""Key under which unparseable tool-call arguments are kept verbatim."""

_call_ids = itertools.count(1)


class OpenAICompatibleLLM:
    """An OpenAI-compatible chat model.

    Args:
        base_url: the endpoint's base URL including ``/v1`` (``http://localhost:11434/v1``).
        api_key: the bearer key (any non-empty value for servers that ignore it).
        model: the model name sent with every request.
        context_size / max_output_tokens: override the budget's numbers.
        budget: the :class:`~ctxstack.budget.ModelBudget` to expose; default
            ``resolve_budget(role)`` (database-less: env, then defaults).
        timeout: seconds per non-streaming attempt / per stream read.
        max_retries: retries after the first try (0 disables them).
        max_retry_time: total seconds a call may spend retrying.
        role: "main" or "fast" (selects the budget).
        retry_policy: a full :class:`~ctxstack.llm.retry.RetryPolicy` (overrides the two
            retry arguments above).
        response_format_support: what :func:`~ctxstack.llm.structured.structured_call`
            may ask this server for: "json_schema" (OpenAI, vLLM, Ollama, LM Studio),
            "json_object", or "none" (servers that reject ``response_format``).
        max_tokens_param: the wire name a per-call ``max_tokens`` is sent under
            (OpenAI's reasoning models want ``max_completion_tokens``).
        default_options: per-call options applied to every call (``{"temperature": 0}``).
        client: an ``openai.AsyncOpenAI`` to use instead of building one (its own retries
            should be disabled).

    Raises:
        ConfigError: empty ``base_url`` / ``model``, or an unknown default option.
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
        client: openai.AsyncOpenAI | None = None,
    ) -> None:
        if not base_url or not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"base_url: expected an http(s) URL, got {base_url!r}")
        if not model:
            raise ConfigError("model: a model name is required")
        if timeout <= 0:
            raise ConfigError(f"timeout: expected a positive number of seconds, got {timeout!r}")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.role: LLMRole = role
        self.timeout = float(timeout)
        self.response_format_support: ResponseFormatSupport = response_format_support
        self.max_tokens_param = max_tokens_param
        self.default_options = dict(default_options or {})
        _check_options(self.default_options)
        self.retry_policy = retry_policy or RetryPolicy(
            max_attempts=max(0, max_retries) + 1, max_total_time=max_retry_time
        )
        budget = budget or resolve_budget(role)
        self.budget = budget
        self._context_size = context_size or budget.context_size
        self._max_output_tokens = max_output_tokens or budget.max_output_tokens
        self._client = client or openai.AsyncOpenAI(
            base_url=self.base_url, api_key=api_key, timeout=self.timeout, max_retries=0
        )

    @classmethod
    def from_env(
        cls, role: LLMRole = "main", env: Mapping[str, str] | None = None, **kwargs: Any
    ) -> OpenAICompatibleLLM:
        """Build from ``LLM_*`` (main) or ``FAST_LLM_*`` (fast, falling back to ``LLM_*``).

        The budget comes from the same environment (``resolve_budget(role, env=env)``)
        unless ``budget=`` is passed. Extra keyword arguments go to the constructor.

        Raises:
            ConfigError: naming exactly the variables to set.
        """
        env = os.environ if env is None else env
        settings = load_settings(role, env)
        kwargs.setdefault("budget", resolve_budget(role, env=env))
        return cls(base_url=settings.base_url, api_key=settings.api_key, model=settings.model,
                   role=role, **kwargs)

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
        """Close the HTTP connection pool."""
        await self._client.close()

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
        params = self._params(messages, tools, opts)
        timeout = float(params.pop("timeout", self.timeout))

        async def attempt(_: int) -> Any:
            try:
                async with asyncio.timeout(timeout):
                    return await self._client.chat.completions.create(**params, timeout=timeout)
            except Exception as exc:
                raise self._translate(exc, timeout) from exc

        completion = await retry_async(attempt, self.retry_policy)
        return self._result(completion, messages)

    def _result(self, completion: Any, messages: Sequence[ChatMessage]) -> LLMResult:
        choices = getattr(completion, "choices", None) or []
        if not choices:
            raise LLMError(f"{self.base_url}: the response has no choices")
        choice = choices[0]
        raw = getattr(choice, "message", None)
        content = getattr(raw, "content", None)
        calls = [_tool_call(c) for c in (getattr(raw, "tool_calls", None) or [])]
        message = ChatMessage.assistant(content if isinstance(content, str) else None,
                                        tool_calls=calls or None)
        usage = _usage(getattr(completion, "usage", None))
        if usage is None:
            usage = _estimate(messages, HEURISTIC.count_message(message)
                              - HEURISTIC.message_overhead)
        return LLMResult(message=message, usage=usage,
                         finish_reason=getattr(choice, "finish_reason", None),
                         model=getattr(completion, "model", None) or self.model)

    # ------------------------------------------------------------------ streaming
    def stream_chat(self, messages: Sequence[ChatMessage], **opts: Any) -> ChatStream:
        """Text deltas of one answer; ``usage`` is set on the stream once it is exhausted.

        Options are checked now (``TypeError`` for unknown ones); HTTP errors surface
        when iterating. Close early with ``await stream.aclose()``.
        """
        params = self._params(messages, None, opts)
        return ChatStream(self._stream(messages, params))

    async def _stream(
        self, messages: Sequence[ChatMessage], params: dict[str, Any]
    ) -> AsyncIterator[str | Usage]:
        timeout = float(params.pop("timeout", self.timeout))
        params["stream"] = True
        params.setdefault("stream_options", {"include_usage": True})
        state = _StreamState()

        async def open_until_first_text(_: int) -> tuple[Any, Any, bool]:
            # The retried unit: connect and read up to the first text delta. Until then
            # the caller has seen nothing, so a failure can be retried transparently.
            state.reset()
            stream: Any = None
            try:
                stream = await self._client.chat.completions.create(**params, timeout=timeout)
                iterator = stream.__aiter__()
                while True:
                    try:
                        chunk = await anext(iterator)
                    except StopAsyncIteration:
                        state.check_complete(self.base_url)
                        return stream, iterator, True
                    if state.feed(chunk):
                        return stream, iterator, False
            except Exception as exc:
                if stream is not None:
                    await stream.close()
                if isinstance(exc, LLMError):
                    raise
                raise self._translate(exc, timeout) from exc

        stream, iterator, exhausted = await retry_async(open_until_first_text, self.retry_policy)
        try:
            for text in state.take_pending():
                yield text
            while not exhausted:
                try:
                    chunk = await anext(iterator)
                except StopAsyncIteration:
                    break
                except Exception as exc:
                    raise self._translate(exc, timeout, during_stream=state.chars) from exc
                state.feed(chunk)
                for text in state.take_pending():
                    yield text
            state.check_complete(self.base_url)
        finally:
            await stream.close()
        usage = state.usage or _estimate(messages, HEURISTIC.count_text("".join(state.parts)))
        yield usage

    # ------------------------------------------------------------------ helpers
    def _params(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] | None,
        opts: Mapping[str, Any],
    ) -> dict[str, Any]:
        if not messages:
            raise MessageError("messages: at least one message is required")
        merged = {**self.default_options, **opts}
        _check_options(merged)
        params: dict[str, Any] = {
            "model": self.model,
            "messages": [m.to_openai() for m in messages],
        }
        if tools:
            params["tools"] = list(tools)
        for key, value in merged.items():
            if value is None:
                continue
            if key == "max_tokens":
                key = self.max_tokens_param
            params[key] = value
        return params

    def _translate(
        self, exc: BaseException, timeout: float, *, during_stream: int | None = None
    ) -> LLMError:
        """The ctxstack error for whatever the SDK (or the deadline) raised."""
        if isinstance(exc, LLMError):
            return exc
        where = f"{self.base_url} (model {self.model})"
        cut = "" if during_stream is None else \
            f" after {during_stream} characters of the answer had streamed"
        if isinstance(exc, openai.APITimeoutError | TimeoutError):
            return LLMTimeoutError(f"{where}: no answer within {timeout:g}s{cut}")
        if isinstance(exc, openai.APIConnectionError):
            cause = exc.__cause__ or exc.__context__
            detail = f"{type(cause).__name__}: {cause}" if cause else str(exc)
            return LLMConnectionError(f"{where}: connection failed{cut} ({detail})")
        if isinstance(exc, openai.APIStatusError):
            headers = dict(exc.response.headers.items())
            return classify_status(exc.status_code, exc.body, headers, where=where)
        if isinstance(exc, openai.APIError):
            # An error event inside a 200 stream: no status, only a body.
            body = exc.body if exc.body is not None else exc.message
            text, _ = describe_body(body)
            if is_context_overflow(None, body):
                return classify_status(400, body, where=where)
            return LLMError(f"{where}: the server reported an error{cut}: {text or exc}")
        if isinstance(exc, openai.OpenAIError):
            return LLMError(f"{where}: {type(exc).__name__}: {exc}")
        if isinstance(exc, MessageError):
            return LLMError(f"{where}: malformed response: {exc}")
        raise exc


class _StreamState:
    """What one streamed answer has produced so far."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.parts: list[str] = []
        self.pending: list[str] = []
        self.finish_reason: str | None = None
        self.usage: Usage | None = None
        self.chars = 0

    def feed(self, chunk: Any) -> bool:
        """Take one chunk; True when it carried text (or finished the answer)."""
        usage = _usage(getattr(chunk, "usage", None))
        if usage is not None:
            self.usage = usage
        got_text = False
        for choice in getattr(chunk, "choices", None) or []:
            delta = getattr(choice, "delta", None)
            text = getattr(delta, "content", None)
            if isinstance(text, str) and text:
                self.pending.append(text)
                self.parts.append(text)
                self.chars += len(text)
                got_text = True
            finish = getattr(choice, "finish_reason", None)
            if finish:
                self.finish_reason = finish
        return got_text or self.finish_reason is not None

    def take_pending(self) -> list[str]:
        out, self.pending = self.pending, []
        return out

    def check_complete(self, where: str) -> None:
        if self.finish_reason is None:
            raise LLMConnectionError(
                f"{where}: the stream ended before the model finished (no finish_reason) "
                f"after {self.chars} characters; the answer is incomplete"
            )


def _check_options(opts: Mapping[str, Any]) -> None:
    unknown = sorted(set(opts) - CALL_OPTIONS)
    if unknown:
        raise TypeError(
            f"OpenAICompatibleLLM: unknown option(s) {', '.join(map(repr, unknown))}; "
            f"known: {', '.join(sorted(CALL_OPTIONS))} (pass others in extra_body)"
        )


def _tool_call(raw: Any) -> ToolCall:
    fn = getattr(raw, "function", None)
    name = getattr(fn, "name", None)
    if not isinstance(name, str) or not name:
        raise LLMError(f"malformed response: a tool call without a function name ({raw!r})")
    call_id = getattr(raw, "id", None)
    if not isinstance(call_id, str) or not call_id:
        # Some servers (older Ollama, llama.cpp builds) omit ids; tool results need one.
        call_id = f"call_{next(_call_ids)}"
    arguments = getattr(fn, "arguments", None)
    try:
        parsed = parse_arguments(arguments)
    except MessageError:
        parsed = {RAW_ARGUMENTS_KEY: arguments if isinstance(arguments, str) else repr(arguments)}
    return ToolCall(id=call_id, name=name, arguments=parsed)


def _usage(raw: Any) -> Usage | None:
    if raw is None:
        return None
    prompt = getattr(raw, "prompt_tokens", None)
    completion = getattr(raw, "completion_tokens", None)
    if not isinstance(prompt, int) or not isinstance(completion, int):
        return None
    cached = getattr(getattr(raw, "prompt_tokens_details", None), "cached_tokens", None)
    if not isinstance(cached, int):
        cached = getattr(raw, "prompt_cache_hit_tokens", None)  # DeepSeek's spelling
    return Usage(input_tokens=prompt, output_tokens=completion,
                 cached_tokens=cached if isinstance(cached, int) else 0, calls=1)


def _estimate(messages: Sequence[ChatMessage], output_tokens: int) -> Usage:
    return Usage(input_tokens=HEURISTIC.count_messages(messages),
                 output_tokens=max(0, output_tokens), calls=1, estimated=True)
