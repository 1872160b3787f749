"""pydantic-ai adapter: a guarding history processor and a summariser over any pydantic-ai model.

Install with ``pip install 'ctxstack[pydantic-ai]'`` (pydantic-ai-slim 2.x, tested on
2.2 and 2.68). pydantic-ai 2.x takes a history processor as a capability::

    from pydantic_ai import Agent
    from pydantic_ai.capabilities import ProcessHistory
    from ctxstack import ContextGuard
    from ctxstack.integrations.pydantic_ai import PydanticAISummarizer, history_processor

    guard = ContextGuard(compact_llm=PydanticAISummarizer(cheap_model))
    agent = Agent(model, system_prompt="...",
                  capabilities=[ProcessHistory(history_processor(guard, budget=16_000))])

(pydantic-ai 1.x took the same function as ``Agent(..., history_processors=[...])``; 2.x
removed that argument, and the extra requires 2.x.)

Before every model request the processor converts the history to ctxstack messages (one
per request part, one per response; see :mod:`._pydantic_ai_messages`), lets the guard fit
it to the budget minus the request's ``instructions``, and converts back. The result is
what pydantic-ai keeps as the run's history, so a compaction happens once, not on every
step. What the guard kept comes back as the very ``ModelRequest``/``ModelResponse``
objects; a ``ToolCallPart`` and the return that answers it are kept or dropped together;
requests and responses alternate, the history starts and ends with a request: pydantic-ai's
own repair (``_clean_message_history``, dangling-call repair) finds nothing to change.
A summary is a ``SystemPromptPart`` starting ``[Conversation summary]`` with
``metadata={"ctxstack": "summary"}`` in the first request, after the system prompt.
The latest user prompt is pinned as the current query. Tool schemas are not counted (as
in ctxstack's own agent; a calibrating counter fed provider usage absorbs them).

Each compaction is logged (logger ``ctxstack.integrations.pydantic_ai``), added as an
OpenTelemetry event ``"ctxstack.compaction"`` to the current span (the agent-run span
pydantic-ai's instrumentation and Logfire show), and given to the guard's ``on_compact``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from ctxstack.integrations._extra import missing_extra
from ctxstack.integrations._guarding import ModelWindow, check_guard

try:
    from opentelemetry import trace
    from pydantic_ai.direct import model_request, model_request_stream
    from pydantic_ai.messages import (
        ModelMessage,
        ModelRequest,
        ModelResponse,
        PartDeltaEvent,
        PartStartEvent,
        TextPartDelta,
    )
    from pydantic_ai.messages import TextPart as PaiTextPart
    from pydantic_ai.models import Model, ModelRequestParameters
    from pydantic_ai.tools import ToolDefinition
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise missing_extra("pydantic-ai", "pydantic-ai-slim", exc) from exc

from ctxstack import (
    ChatMessage,
    CompactionEvent,
    CompactUtils,
    ConfigError,
    ContextGuard,
    Hint,
    LLMError,
    LLMResult,
    ModelBudget,
    Usage,
)
from ctxstack.integrations._cache import ConversionCache
from ctxstack.integrations._pydantic_ai_messages import (
    PAI_KEY,
    from_chat_messages,
    to_chat_messages,
)
from ctxstack.protocol import ChatStream

__all__ = [
    "GuardedHistory",
    "PydanticAISummarizer",
    "from_chat_messages",
    "history_processor",
    "to_chat_messages",
]

log = logging.getLogger(__name__)

HistoryProcessor = Callable[[list[ModelMessage]], Awaitable[list[ModelMessage]]]


def history_processor(
    guard: ContextGuard,
    budget: int | ModelBudget | None = None,
    *,
    hint: Hint = "react_iteration",
) -> HistoryProcessor:
    """A pydantic-ai history processor keeping every model request within ``budget``.

    Pass it as ``capabilities=[ProcessHistory(history_processor(guard, budget))]``. The
    returned coroutine function is :meth:`GuardedHistory.process` (its ``__self__`` is the
    :class:`GuardedHistory`). ``budget`` ``None`` uses the guard's ``default_budget``.

    Raises:
        ConfigError: ``guard`` is not a ContextGuard or ``budget`` is not positive.
    """
    return GuardedHistory(guard, budget, hint=hint).process


class GuardedHistory:
    """The state behind :func:`history_processor`: the guard, the budget and a cache.

    Conversions are cached per message object (see :mod:`._cache`): under budget, a call
    costs the guard's check, one identity pass over the history and the new messages'
    conversion.
    """

    def __init__(
        self, guard: ContextGuard, budget: int | ModelBudget | None = None,
        *, hint: Hint = "react_iteration",
    ) -> None:
        self.budget = check_guard(guard, budget, default=True)
        self.guard = guard
        self.hint = hint
        self._cache: ConversionCache[ModelMessage] = ConversionCache(
            lambda m: to_chat_messages([m]), "ctxstack_query_pin")

    async def process(self, messages: list[ModelMessage]) -> list[ModelMessage]:
        """The history fitted to the budget (the same list when nothing had to change)."""
        if not messages:
            return messages
        converted = self._convert(messages)
        limit = max(1, self.budget - self._instructions_tokens(messages))
        fitted, event = await self.guard.check(converted, limit, self.hint)
        if fitted is converted:
            return messages
        if event is not None:
            _report(event)
        return from_chat_messages(fitted)

    def _instructions_tokens(self, messages: Sequence[ModelMessage]) -> int:
        """Cost of the instructions the next request is sent with (not part of history)."""
        for message in reversed(messages):
            if isinstance(message, ModelRequest):
                text = getattr(message, "instructions", None)
                if text:
                    return self.guard.counter.count_message(ChatMessage(role="system",
                                                                        content=text))
                return 0
        return 0

    def _convert(self, messages: Sequence[ModelMessage]) -> list[ChatMessage]:
        return self._cache.convert(messages)


class PydanticAISummarizer(ModelWindow):
    """A pydantic-ai ``Model`` as a ctxstack :class:`~ctxstack.LLM` (e.g. the compact LLM).

    Args:
        model: a pydantic-ai ``Model`` instance (``FunctionModel``, ``OpenAIChatModel``, …).
        context_size: the model's window (default 128,000).
        max_output_tokens: the tokens kept for the answer (default 16,000).

    ``chat`` sends the messages through ``pydantic_ai.direct.model_request`` (tools as
    function tool definitions, ``max_tokens`` as a model setting); usage is the response's
    (estimated and flagged when the model reports none). Failures become
    :class:`~ctxstack.LLMError`.
    """

    def __init__(
        self, model: Model, *, context_size: int = 128_000, max_output_tokens: int = 16_000
    ) -> None:
        if not isinstance(model, Model):
            raise ConfigError(f"model: expected a pydantic-ai Model, got {type(model).__name__}")
        super().__init__(context_size, max_output_tokens)
        self.model = model

    async def chat(
        self,
        messages: Sequence[ChatMessage],
        *,
        tools: Sequence[dict[str, Any]] | None = None,
        **opts: Any,
    ) -> LLMResult:
        try:
            response = await model_request(
                self.model, _history(messages), model_settings=_settings(opts),
                model_request_parameters=_parameters(tools))
        except Exception as exc:
            raise LLMError(f"pydantic-ai model {self.model.model_name!r} failed: "
                           f"{type(exc).__name__}: {exc}") from exc
        answer = to_chat_messages([response])[0]
        answer = answer.replace(metadata={k: v for k, v in answer.metadata.items()
                                          if k != PAI_KEY})
        return LLMResult(message=answer, usage=_usage(response, messages, answer.text),
                         finish_reason=getattr(response, "finish_reason", None),
                         model=response.model_name)

    def stream_chat(self, messages: Sequence[ChatMessage], **opts: Any) -> ChatStream:
        return ChatStream(self._stream(messages, opts))

    async def _stream(
        self, messages: Sequence[ChatMessage], opts: dict[str, Any]
    ) -> AsyncIterator[str | Usage]:
        parts: list[str] = []
        try:
            async with model_request_stream(self.model, _history(messages),
                                            model_settings=_settings(opts)) as stream:
                async for event in stream:
                    text = _delta(event)
                    if text:
                        parts.append(text)
                        yield text
                response = stream.get()
        except Exception as exc:
            raise LLMError(f"pydantic-ai model {self.model.model_name!r} failed while "
                           f"streaming: {type(exc).__name__}: {exc}") from exc
        yield _usage(response, messages, "".join(parts))


# ---------------------------------------------------------------------- helpers
def _report(event: CompactionEvent) -> None:
    log.info("pydantic_ai: guard compacted (%s) %d→%d messages, %d→%d tokens",
             event.method, event.messages_before, event.messages_after,
             event.tokens_before, event.tokens_after)
    attributes = {f"ctxstack.{k}": v for k, v in event.model_dump(mode="json").items()
                  if isinstance(v, str | int | float | bool)}
    trace.get_current_span().add_event("ctxstack.compaction", attributes=attributes)


def _history(messages: Sequence[ChatMessage]) -> list[ModelMessage]:
    plain = [m.replace(metadata={k: v for k, v in m.metadata.items() if k != PAI_KEY})
             if PAI_KEY in m.metadata else m for m in messages]
    history = from_chat_messages(plain)
    if history and isinstance(history[-1], ModelResponse):
        # A model request must end with a request: ask it to continue.
        history.append(ModelRequest.user_text_prompt("Continue."))
    return history


def _settings(opts: dict[str, Any]) -> Any:
    settings = {k: v for k, v in opts.items() if k in ("max_tokens", "temperature", "top_p")}
    return settings or None


def _parameters(tools: Sequence[dict[str, Any]] | None) -> ModelRequestParameters | None:
    if not tools:
        return None
    defs = []
    for spec in tools:
        fn = spec.get("function", spec)
        defs.append(ToolDefinition(name=fn["name"], description=fn.get("description"),
                                   parameters_json_schema=fn.get("parameters") or
                                   {"type": "object", "properties": {}}))
    return ModelRequestParameters(function_tools=defs)


def _delta(event: Any) -> str:
    if isinstance(event, PartStartEvent) and isinstance(event.part, PaiTextPart):
        return event.part.content
    if isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
        return event.delta.content_delta
    return ""


def _usage(response: ModelResponse, messages: Sequence[ChatMessage], output: str) -> Usage:
    reported = response.usage
    if reported.input_tokens or reported.output_tokens:
        return Usage(input_tokens=reported.input_tokens, output_tokens=reported.output_tokens,
                     cached_tokens=getattr(reported, "cache_read_tokens", 0) or 0, calls=1)
    return Usage(input_tokens=CompactUtils.estimate_messages_tokens(list(messages)),
                 output_tokens=CompactUtils.estimate_tokens(output), calls=1, estimated=True)
