"""LangChain v1 adapter: a guard middleware for ``create_agent``, a summariser over any chat model.

Install with ``pip install 'ctxstack[langchain]'``. ::

    from langchain.agents import create_agent
    from ctxstack import ContextGuard
    from ctxstack.integrations.langchain import ContextGuardMiddleware, LangChainSummarizer

    guard = ContextGuard(compact_llm=LangChainSummarizer(cheap_model))
    agent = create_agent(model, tools, system_prompt="...",
                         middleware=[ContextGuardMiddleware(guard, budget=16_000)])

:class:`ContextGuardMiddleware` works at two points of the agent loop:

* ``before_model`` / ``abefore_model`` fit the agent state's messages to the budget minus
  the system prompt's cost and, when the guard changed anything, replace the state's
  messages the way LangChain's own summarisation does (``RemoveMessage(REMOVE_ALL_MESSAGES)``
  followed by the new list). Messages the guard kept are the very objects from the state
  (ids and all); a summary is a ``SystemMessage`` starting ``[Conversation summary]``
  (``additional_kwargs={"lc_source": "ctxstack"}``), placed first, so the model sees system
  prompt → summary → recent turns. An ``AIMessage`` with tool calls and its
  ``ToolMessage`` results are kept or dropped together, so no result is ever orphaned.
* ``wrap_model_call`` / ``awrap_model_call`` see the request as the model will (the
  ``system_prompt`` given to ``create_agent`` is not in the state): they learn the system
  prompt's cost for the next ``before_model`` and, if the request is still over budget
  (the first call of a long resumed thread, another middleware adding messages), fit that
  one request too. So every model call's messages fit; tool schemas are not counted (as in
  ctxstack's own agent; a calibrating counter fed provider usage absorbs them).

The latest ``HumanMessage`` is pinned as the current query: never summarised or dropped.
Each compaction is logged (logger ``ctxstack.integrations.langchain``), dispatched as a
LangChain custom event named ``"ctxstack_compaction"`` (``on_custom_event`` of callback
handlers, ``astream_events``) with the :class:`~ctxstack.CompactionEvent` as a dict, and
given to the guard's own ``on_compact``. The guard's ``counter`` (e.g. a
:class:`~ctxstack.CalibratingCounter`) is the one used everywhere.

The hooks are async at heart; the sync ones (``agent.invoke``) run them on a private event
loop, so a compact LLM used from sync code must not be bound to another running loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

from ctxstack.integrations._extra import missing_extra
from ctxstack.integrations._guarding import ModelWindow, check_guard

try:
    from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest
    from langchain.agents.middleware.types import ModelCallResult, ModelResponse
    from langchain_core.callbacks.manager import adispatch_custom_event, dispatch_custom_event
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage, RemoveMessage, SystemMessage
    from langgraph.graph.message import REMOVE_ALL_MESSAGES
    from langgraph.runtime import Runtime
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise missing_extra("langchain", "langchain", exc) from exc

from ctxstack import (
    ChatMessage,
    CompactionEvent,
    ConfigError,
    ContextGuard,
    Hint,
    LLMError,
    LLMResult,
    ModelBudget,
    Usage,
)
from ctxstack.integrations._cache import ConversionCache
from ctxstack.integrations._langchain_messages import (
    LC_KEY,
    content_from_langchain,
    from_chat_message,
    from_chat_messages,
    to_chat_message,
    to_chat_messages,
)
from ctxstack.protocol import ChatStream

__all__ = [
    "EVENT_NAME",
    "ContextGuardMiddleware",
    "LangChainSummarizer",
    "from_chat_messages",
    "to_chat_messages",
]

log = logging.getLogger(__name__)

EVENT_NAME = "ctxstack_compaction"
"""Name of the LangChain custom event carrying each :class:`~ctxstack.CompactionEvent`."""

_PIN = "ctxstack_query_pin"
_HAS_SYSTEM_MESSAGE = "system_message" in getattr(ModelRequest, "__dataclass_fields__", {})
T = TypeVar("T")


class ContextGuardMiddleware(AgentMiddleware):
    """Keeps a LangChain v1 agent's messages within ``budget`` before every model call.

    Args:
        guard: the :class:`~ctxstack.ContextGuard` doing the work (its compact LLM — e.g. a
            :class:`LangChainSummarizer` —, counter and ``on_compact`` apply).
        budget: input tokens per model call (an int or a :class:`~ctxstack.ModelBudget`);
            ``None`` uses the guard's ``default_budget``.
        hint: the guard's compaction hint (default ``"react_iteration"``).

    Raises:
        ConfigError: ``guard`` is not a ContextGuard or ``budget`` is not positive.
    """

    def __init__(
        self,
        guard: ContextGuard,
        budget: int | ModelBudget | None = None,
        *,
        hint: Hint = "react_iteration",
    ) -> None:
        super().__init__()
        self.budget = check_guard(guard, budget, default=True)
        self.guard = guard
        self.hint = hint
        self.system_tokens = 0
        """Cost of the request's system prompt, as last seen by ``wrap_model_call``."""
        self._cache: ConversionCache[BaseMessage] = ConversionCache(
            lambda m: [to_chat_message(m)], _PIN)
        self._system: tuple[object, ChatMessage] | None = None

    # ------------------------------------------------------------------ hooks: state
    def before_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        messages, events = _run_sync(self._fit_state(state["messages"]))
        for event in events:
            _dispatch_sync(event)
        return None if messages is None else {"messages": messages}

    async def abefore_model(
        self, state: AgentState[Any], runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        messages, events = await self._fit_state(state["messages"])
        for event in events:
            await _dispatch_async(event)
        return None if messages is None else {"messages": messages}

    # ------------------------------------------------------------------ hooks: request
    def wrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], ModelResponse[Any]]
    ) -> ModelCallResult[Any]:
        fitted, events = _run_sync(self._fit_request(request))
        for event in events:
            _dispatch_sync(event)
        return handler(fitted)

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelCallResult[Any]:
        fitted, events = await self._fit_request(request)
        for event in events:
            await _dispatch_async(event)
        return await handler(fitted)

    # ------------------------------------------------------------------ work
    async def _fit_state(
        self, messages: Sequence[BaseMessage]
    ) -> tuple[list[BaseMessage] | None, list[CompactionEvent]]:
        """The state update (or None) that fits the state's messages, and the events."""
        converted = self._convert(messages)
        limit = max(1, self.budget - self.system_tokens)
        fitted, event = await self.guard.check(converted, limit, self.hint)
        events = [event] if event is not None else []
        if fitted is converted:
            return None, events
        back = self._back(fitted, converted, messages)
        return [RemoveMessage(id=REMOVE_ALL_MESSAGES), *back], events

    async def _fit_request(
        self, request: ModelRequest[Any]
    ) -> tuple[ModelRequest[Any], list[CompactionEvent]]:
        system_cm = self._system_message(request)
        counter = self.guard.counter
        self.system_tokens = counter.count_message(system_cm) if system_cm is not None else 0
        converted = self._convert(request.messages)
        if self.system_tokens + counter.count_messages(converted) <= self.budget:
            return request, []
        head = [system_cm] if system_cm is not None else []
        # a per-request fit (the state keeps its messages): carried into no later call
        fitted, event = await self.guard.check([*head, *converted], self.budget, self.hint,
                                               carried=False)
        events = [event] if event is not None else []
        new_system: ChatMessage | None = system_cm
        if head:
            first = fitted[0]
            new_system = first if first.role == "system" else None
            fitted = fitted[1:] if first.role == "system" else fitted
        back: list[Any] = self._back(fitted, converted, request.messages)
        if new_system is system_cm:
            return request.override(messages=back), events
        if _HAS_SYSTEM_MESSAGE:
            message = from_chat_message(new_system) if new_system is not None else None
            system = message if isinstance(message, SystemMessage) else None
            return request.override(system_message=system, messages=back), events
        text = new_system.text if new_system is not None else None
        return request.override(system_prompt=text, messages=back), events  # type: ignore[call-arg]

    def _system_message(self, request: ModelRequest[Any]) -> ChatMessage | None:
        """The request's system prompt as a ChatMessage (cached while it is unchanged).

        LangChain 1.0 carries it as ``system_prompt: str``, later versions as
        ``system_message: SystemMessage``.
        """
        source: Any = (request.system_message if _HAS_SYSTEM_MESSAGE
                       else getattr(request, "system_prompt", None))
        if source is None:
            return None
        cached = self._system
        if cached is None or not (cached[0] is source or cached[0] == source):
            message = source if isinstance(source, BaseMessage) else SystemMessage(str(source))
            self._system = cached = (source, to_chat_message(message))
        return cached[1]

    def _convert(self, messages: Sequence[BaseMessage]) -> list[ChatMessage]:
        """ChatMessages for ``messages`` (cached per message), the latest user one pinned."""
        return self._cache.convert(messages)

    @staticmethod
    def _back(
        fitted: Sequence[ChatMessage], converted: Sequence[ChatMessage],
        originals: Sequence[BaseMessage],
    ) -> list[BaseMessage]:
        """LangChain messages for the guard's output: originals where kept, new ones else."""
        source = {id(cm): lc for cm, lc in zip(converted, originals, strict=True)}
        out: list[BaseMessage] = []
        for cm in fitted:
            original = source.get(id(cm))
            if original is not None:
                out.append(original)
                continue
            if cm.metadata.get(_PIN):
                meta = {k: v for k, v in cm.metadata.items() if k not in (_PIN, "kind")}
                cm = cm.replace(pinned=False, metadata=meta)
            lc = from_chat_message(cm)
            if cm.kind == "summary" and LC_KEY not in cm.metadata:
                lc.additional_kwargs.setdefault("lc_source", "ctxstack")
            out.append(lc)
        return out


class LangChainSummarizer(ModelWindow):
    """Any LangChain chat model as a ctxstack :class:`~ctxstack.LLM` (e.g. the compact LLM).

    Args:
        chat_model: a LangChain ``BaseChatModel``.
        context_size: the model's window; by default read from the model's ``profile``
            (``max_input_tokens`` + ``max_output_tokens``), else 128,000.
        max_output_tokens: the tokens kept for the answer; by default the profile's
            ``max_output_tokens``, else 16,000.

    ``chat`` passes ``tools`` through ``bind_tools`` and other options (``max_tokens``…) to
    the model's call; usage comes from the answer's ``usage_metadata`` (estimated and
    flagged when the model reports none). Every model failure becomes an
    :class:`~ctxstack.LLMError` (the guard then falls back to truncation).
    """

    def __init__(
        self,
        chat_model: BaseChatModel,
        *,
        context_size: int | None = None,
        max_output_tokens: int | None = None,
    ) -> None:
        if not isinstance(chat_model, BaseChatModel):
            raise ConfigError(
                f"chat_model: expected a LangChain BaseChatModel, got {type(chat_model).__name__}")
        profile = getattr(chat_model, "profile", None) or {}
        out = max_output_tokens or profile.get("max_output_tokens") or 16_000
        size = context_size or (profile.get("max_input_tokens", 0) + out
                                if profile.get("max_input_tokens") else 128_000)
        super().__init__(size, out)
        self.chat_model = chat_model

    async def chat(
        self,
        messages: Sequence[ChatMessage],
        *,
        tools: Sequence[dict[str, Any]] | None = None,
        **opts: Any,
    ) -> LLMResult:
        model: Any = self.chat_model.bind_tools(list(tools)) if tools else self.chat_model
        try:
            answer = await model.ainvoke(from_chat_messages(messages), **opts)
        except Exception as exc:
            raise LLMError(f"LangChain model {type(self.chat_model).__name__} failed: "
                           f"{type(exc).__name__}: {exc}") from exc
        if not isinstance(answer, AIMessage):
            raise LLMError(f"LangChain model returned {type(answer).__name__}, not an AIMessage")
        message = to_chat_message(answer)
        message = message.replace(metadata={k: v for k, v in message.metadata.items()
                                            if k != LC_KEY})
        usage = _usage(answer.usage_metadata, messages, message.text)
        finish = answer.response_metadata.get("finish_reason")
        return LLMResult(message=message, usage=usage,
                         finish_reason=finish if isinstance(finish, str) else None)

    def stream_chat(self, messages: Sequence[ChatMessage], **opts: Any) -> ChatStream:
        return ChatStream(self._stream(messages, opts))

    async def _stream(
        self, messages: Sequence[ChatMessage], opts: dict[str, Any]
    ) -> AsyncIterator[str | Usage]:
        reported: dict[str, Any] | None = None
        parts: list[str] = []
        try:
            async for chunk in self.chat_model.astream(from_chat_messages(messages), **opts):
                text = _text(chunk.content)
                if text:
                    parts.append(text)
                    yield text
                meta = getattr(chunk, "usage_metadata", None)
                if meta:
                    reported = _add_usage(reported, dict(meta))
        except Exception as exc:
            raise LLMError(f"LangChain model {type(self.chat_model).__name__} failed while "
                           f"streaming: {type(exc).__name__}: {exc}") from exc
        yield _usage(reported, messages, "".join(parts))


# ---------------------------------------------------------------------- helpers
def _run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` from sync code: on a private loop here, or in a worker thread when this
    thread already runs a loop (a sync ``invoke`` called from async code)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _run_on_new_loop(coro)
    ctx = contextvars.copy_context()
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(ctx.run, _run_on_new_loop, coro).result()


def _run_on_new_loop(coro: Coroutine[Any, Any, T]) -> T:
    # Not asyncio.run: on the main thread it installs a SIGINT handler whose bookkeeping
    # formats the task's repr — hundreds of milliseconds with a long history in its frame.
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


def _payload(event: CompactionEvent) -> dict[str, Any]:
    log.info("langchain: guard compacted (%s) %d→%d messages, %d→%d tokens",
             event.method, event.messages_before, event.messages_after,
             event.tokens_before, event.tokens_after)
    return event.model_dump(mode="json")


def _dispatch_sync(event: CompactionEvent) -> None:
    try:
        dispatch_custom_event(EVENT_NAME, _payload(event))
    except RuntimeError:  # no parent run (hook called outside a runnable): logged only
        log.debug("langchain: no run to dispatch %s to", EVENT_NAME)


async def _dispatch_async(event: CompactionEvent) -> None:
    try:
        await adispatch_custom_event(EVENT_NAME, _payload(event))
    except RuntimeError:
        log.debug("langchain: no run to dispatch %s to", EVENT_NAME)


def _text(content: str | list[str | dict[Any, Any]]) -> str:
    converted = content_from_langchain(content)
    if isinstance(converted, str):
        return converted
    return "".join(getattr(p, "text", "") for p in converted)


def _add_usage(total: dict[str, Any] | None, meta: dict[str, Any]) -> dict[str, Any]:
    if total is None:
        return meta
    return {k: total.get(k, 0) + meta.get(k, 0)
            for k in ("input_tokens", "output_tokens", "total_tokens")}


def _usage(meta: Any, messages: Sequence[ChatMessage], output: str) -> Usage:
    if meta:
        details = meta.get("input_token_details") or {}
        return Usage(input_tokens=int(meta.get("input_tokens", 0)),
                     output_tokens=int(meta.get("output_tokens", 0)),
                     cached_tokens=int(details.get("cache_read", 0) or 0), calls=1)
    from ctxstack import CompactUtils

    return Usage(input_tokens=CompactUtils.estimate_messages_tokens(list(messages)),
                 output_tokens=CompactUtils.estimate_tokens(output), calls=1, estimated=True)
