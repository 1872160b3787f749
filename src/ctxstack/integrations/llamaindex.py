"""LlamaIndex adapter: :class:`GuardedMemory`, a ``BaseMemory`` whose reads fit a budget.

``pip install 'ctxstack[llamaindex]'`` (tested with llama-index-core 0.14).

The memory keeps every message (``get_all``) and returns from ``get`` / ``aget`` the
history fitted to ``budget`` by a :class:`~ctxstack.ContextGuard`, the latest user message
pinned. When the guard summarised, the summary is kept as a checkpoint: later reads
start from *summary + messages from the first kept one on*, so a long conversation is
summarised once per overflow, not on every read. The summary is a ``system``
``ChatMessage`` (``additional_kwargs["ctxstack_kind"] == "summary"``).

Conversion keeps what the current LlamaIndex represents: text, image blocks (counted as
images), ``ToolCallBlock`` blocks and the older ``additional_kwargs["tool_calls"]`` both
become tool calls, ``tool`` messages pair with them through
``additional_kwargs["tool_call_id"]``, so an assistant turn and its tool results are kept
or dropped together. Thinking blocks ride with their message and are not counted.
An ``AudioBlock`` with its data becomes an audio part and a ``DocumentBlock`` with its data
(or a URL) a file part: counted by size, never cut (a cut message keeps its media blocks
as they were). Audio or a document by file path or audio by URL — content ctxstack does
not hold, so cannot count — raises :class:`~ctxstack.errors.InputError` naming the block.
Untouched messages come back as the very objects that were put.

Each compaction is dispatched as a :class:`CompactionInstrumentEvent` on LlamaIndex's
instrumentation (``llama_index.core.instrumentation``), logged, and reaches the guard's
``on_compact``. :class:`CalibrationHandler` trains a :class:`~ctxstack.CalibratingCounter`
from the prompt tokens LLM responses report.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

from ctxstack import (
    CalibratingCounter,
    ChatMessage,
    CompactionEvent,
    ContentPart,
    ContextGuard,
    ImagePart,
    TextPart,
    ToolCall,
)
from ctxstack.compaction._prompts import check_hint
from ctxstack.errors import InputError
from ctxstack.integrations._extra import missing_extra
from ctxstack.integrations._guarding import check_counter, check_guard, guarded, summary_boundary
from ctxstack.messages import AudioPart, FilePart, ImageURL
from ctxstack.messages._model import parse_arguments

try:
    from llama_index.core.base.llms.types import (
        AudioBlock,
        DocumentBlock,
        ImageBlock,
        MessageRole,
        TextBlock,
        ThinkingBlock,
        ToolCallBlock,
    )
    from llama_index.core.base.llms.types import ChatMessage as LIMessage
    from llama_index.core.bridge.pydantic import ConfigDict, Field, PrivateAttr
    from llama_index.core.instrumentation.event_handlers import BaseEventHandler
    from llama_index.core.instrumentation.events import BaseEvent
    from llama_index.core.instrumentation.events.llm import LLMChatEndEvent
    from llama_index.core.memory import BaseMemory
    from llama_index_instrumentation import get_dispatcher
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise missing_extra("llamaindex", "llama-index-core", exc) from exc

__all__ = ["CalibrationHandler", "CompactionInstrumentEvent", "GuardedMemory"]

log = logging.getLogger(__name__)
dispatcher = get_dispatcher(__name__)
KEY = "li"
SUMMARY_KIND = "ctxstack_kind"
_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant",
          "chatbot": "assistant", "model": "assistant", "tool": "tool", "function": "tool"}
T = TypeVar("T")


class CompactionInstrumentEvent(BaseEvent):
    """A ctxstack compaction, as a LlamaIndex instrumentation event."""

    compaction: CompactionEvent

    @classmethod
    def class_name(cls) -> str:
        return "CtxstackCompactionEvent"


# ---------------------------------------------------------------------- conversion
def _tool_calls(message: LIMessage) -> list[ToolCall]:
    calls: list[tuple[Any, Any, Any]] = []
    for block in message.blocks:
        if isinstance(block, ToolCallBlock):
            calls.append((block.tool_call_id, block.tool_name, block.tool_kwargs))
    for raw in message.additional_kwargs.get("tool_calls") or []:
        data = raw if isinstance(raw, dict) else (
            raw.model_dump() if hasattr(raw, "model_dump") else vars(raw))
        fn = data.get("function") or {}
        calls.append((data.get("id") or data.get("tool_id"),
                      fn.get("name") or data.get("tool_name") or "tool",
                      fn.get("arguments", data.get("tool_kwargs"))))
    out = []
    for i, (call_id, name, kwargs) in enumerate(calls):
        try:
            arguments = parse_arguments(kwargs)
        except ValueError:
            arguments = {"arguments": kwargs}
        out.append(ToolCall(id=str(call_id or f"call-{i}"), name=str(name), arguments=arguments))
    return out


def _content(message: LIMessage) -> str | list[ContentPart] | None:
    parts: list[ContentPart] = []
    for block in message.blocks:
        if isinstance(block, TextBlock):
            parts.append(TextPart(text=block.text))
        elif isinstance(block, ImageBlock):
            url = str(block.url) if block.url else f"data:{block.image_mimetype or 'image'}"
            parts.append(ImagePart(image_url=ImageURL(url=url)))
        elif isinstance(block, AudioBlock | DocumentBlock):
            parts.append(_media(block))
        elif not isinstance(block, ThinkingBlock | ToolCallBlock):
            parts.append(TextPart(text=f"[{getattr(block, 'block_type', 'block')}]"))
    if not parts:
        return None
    if all(isinstance(p, TextPart) for p in parts):
        return "\n".join(p.text for p in parts if isinstance(p, TextPart))
    return parts


def _media(block: AudioBlock | DocumentBlock) -> AudioPart | FilePart:
    """An audio or document block as a part (LlamaIndex keeps inline data base64-encoded)."""
    if isinstance(block, AudioBlock):
        if isinstance(block.audio, bytes) and block.audio:
            return AudioPart.model_validate({"input_audio": {
                "data": block.audio.decode("ascii"), "format": block.format or "wav"}})
        where = f"url {block.url}" if block.url else f"path {block.path}"
        raise InputError(f"LlamaIndex AudioBlock by {where}: ctxstack cannot count audio "
                         "it does not hold; pass the audio bytes")
    if isinstance(block.data, bytes) and block.data:
        mime = block.document_mimetype or "application/pdf"
        return FilePart.model_validate({"file": {
            "file_data": f"data:{mime};base64,{block.data.decode('ascii')}",
            **({"filename": block.title} if block.title else {})}})
    if block.url:
        return FilePart.model_validate({"file": {"file_url": str(block.url)}})
    raise InputError(f"LlamaIndex DocumentBlock by path {block.path}: ctxstack cannot count "
                     "a document it does not hold; pass its bytes or a URL")


def to_ctx(message: LIMessage, key: int) -> ChatMessage:
    """A LlamaIndex message as a guardable message (``metadata["li"] = key``)."""
    role = _ROLES.get(str(getattr(message.role, "value", message.role)), "user")
    meta: dict[str, Any] = {KEY: key}
    if message.additional_kwargs.get(SUMMARY_KIND) == "summary":
        meta["kind"] = "summary"
    if role == "tool":
        call_id = message.additional_kwargs.get("tool_call_id") or f"unknown-{key}"
        return ChatMessage(role="tool", tool_call_id=str(call_id), content=_content(message),
                           metadata=meta)
    calls = _tool_calls(message) if role == "assistant" else []
    return ChatMessage(role=role, content=_content(message),
                       tool_calls=calls or None, metadata=meta)


def from_ctx(message: ChatMessage, original: LIMessage | None) -> LIMessage:
    """A guard-made message (summary) or a changed (cut) one back in LlamaIndex form."""
    if original is None:
        kwargs = {SUMMARY_KIND: "summary"} if message.kind == "summary" else {}
        return LIMessage(role=MessageRole(message.role), content=message.text,
                         additional_kwargs=kwargs)
    kept = [b for b in original.blocks if not isinstance(b, TextBlock | ThinkingBlock)]
    return original.model_copy(update={"blocks": [TextBlock(text=message.text), *kept]})


def summary_message(text: str) -> LIMessage:
    """The summary in LlamaIndex form: a system message tagged as ctxstack's summary."""
    return LIMessage(role=MessageRole.SYSTEM, content=text,
                     additional_kwargs={SUMMARY_KIND: "summary"})


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine from sync code, even when called inside a running event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, name="ctxstack-guarded-memory")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


# ---------------------------------------------------------------------- the memory
class GuardedMemory(BaseMemory):
    """A LlamaIndex ``BaseMemory`` whose ``get`` returns the history fitted to ``budget``.

    Build with ``GuardedMemory.from_defaults(guard=..., budget=...)`` (or the
    constructor). ``budget`` is what the history may take: leave room for what the agent
    adds after reading memory (its system prompt, the current run's tool calls).
    ``events`` lists the compactions so far.

    Raises:
        ConfigError: a bad guard, budget or counter.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    guard: ContextGuard = Field(exclude=True)
    budget: int
    hint: str = "general"
    counter: CalibratingCounter | None = Field(default=None, exclude=True)
    messages: list[LIMessage] = Field(default_factory=list)
    _summary: LIMessage | None = PrivateAttr(default=None)
    _start: int = PrivateAttr(default=0)
    _events: list[CompactionEvent] = PrivateAttr(default_factory=list)
    _converted: list[tuple[LIMessage, ChatMessage]] = PrivateAttr(default_factory=list)
    _pinned: tuple[ChatMessage, ChatMessage] | None = PrivateAttr(default=None)

    def __init__(self, **data: Any) -> None:
        guard = data.get("guard")
        data["budget"] = check_guard(guard, data.get("budget"))
        data["counter"] = check_counter(guard, data.get("counter"))  # type: ignore[arg-type]
        data["hint"] = check_hint(data.get("hint", "general"))
        super().__init__(**data)

    @classmethod
    def class_name(cls) -> str:
        return "GuardedMemory"

    @classmethod
    def from_defaults(
        cls,
        guard: ContextGuard | None = None,
        budget: int | None = None,
        chat_history: Sequence[LIMessage] | None = None,
        **kwargs: Any,
    ) -> GuardedMemory:
        """A memory on ``guard`` (default: a truncating one) with ``budget`` tokens
        (default: the guard's default budget), holding ``chat_history``."""
        guard = guard if guard is not None else ContextGuard()
        budget = budget if budget is not None else getattr(guard, "default_budget", None)
        return cls(guard=guard, budget=budget, messages=list(chat_history or []), **kwargs)

    @property
    def events(self) -> list[CompactionEvent]:
        return list(self._events)

    # ------------------------------------------------------------------ writes
    def put(self, message: LIMessage) -> None:
        self.messages.append(message)

    async def aput(self, message: LIMessage) -> None:
        self.put(message)

    def put_messages(self, messages: list[LIMessage]) -> None:
        self.messages.extend(messages)

    async def aput_messages(self, messages: list[LIMessage]) -> None:
        self.put_messages(messages)

    def set(self, messages: list[LIMessage]) -> None:
        self.messages = list(messages)
        self._summary, self._start = None, 0

    async def aset(self, messages: list[LIMessage]) -> None:
        self.set(messages)

    def reset(self) -> None:
        self.set([])

    async def areset(self) -> None:
        self.reset()

    # ------------------------------------------------------------------ reads
    def get_all(self) -> list[LIMessage]:
        """Every message put, in order (nothing summarised away)."""
        return list(self.messages)

    async def aget_all(self) -> list[LIMessage]:
        return self.get_all()

    def get(self, input: str | None = None, **kwargs: Any) -> list[LIMessage]:
        """The history fitted to the budget (sync; see :meth:`aget`)."""
        return _run(self.aget(input, **kwargs))

    async def aget(self, input: str | None = None, **kwargs: Any) -> list[LIMessage]:
        """The history fitted to the budget: system messages, the summary if any, the
        newest messages verbatim; the latest user message is always kept."""
        history = self.messages
        all_converted = self._convert_all()
        start = self._start if self._summary is not None and self._start <= len(history) else 0
        keys = [i for i, m in enumerate(history[:start]) if m.role == MessageRole.SYSTEM]
        keys += range(start, len(history))
        converted = {k: all_converted[k] for k in keys}
        messages = list(converted.values())
        sources: list[LIMessage] = [history[k] for k in keys]
        if start and self._summary is not None:
            at = sum(1 for k in keys if k < start)
            messages.insert(at, to_ctx(self._summary, -1).replace(metadata={"kind": "summary"}))
            sources.insert(at, self._summary)
        last_user = next((i for i in range(len(messages) - 1, -1, -1)
                          if messages[i].role == "user"), None)
        if last_user is not None:
            messages[last_user] = self._pinned_query(messages[last_user])
        outcome = await guarded(self.guard, messages, self.budget, self.hint)  # type: ignore[arg-type]
        if outcome.messages is messages:
            return sources
        if outcome.events:
            self._record(outcome.events, outcome.messages)
        out: list[LIMessage] = []
        for m in outcome.messages:
            key = m.metadata.get(KEY)
            before = converted.get(key) if isinstance(key, int) else None
            if before is None:
                out.append(from_ctx(m, None))
            elif before.content == m.content and before.tool_calls == m.tool_calls:
                out.append(history[key])  # type: ignore[index]
            else:
                out.append(from_ctx(m, history[key]))  # type: ignore[index]
        return out

    def _convert_all(self) -> list[ChatMessage]:
        """Every stored message converted, reusing earlier conversions (and with them
        their cached token counts) for messages that are still the same objects."""
        cache = self._converted
        history = self.messages
        del cache[len(history):]
        for i, message in enumerate(history):
            if i == len(cache):
                cache.append((message, to_ctx(message, i)))
            elif cache[i][0] is not message:
                cache[i] = (message, to_ctx(message, i))
        return [c for _, c in cache]

    def _pinned_query(self, query: ChatMessage) -> ChatMessage:
        if self._pinned is None or self._pinned[0] is not query:
            self._pinned = (query, query.replace(
                pinned=True, metadata={**query.metadata, "kind": "query"}))
        return self._pinned[1]

    def _record(self, events: Sequence[CompactionEvent], result: list[ChatMessage]) -> None:
        self._events.extend(events)
        for event in events:
            dispatcher.event(CompactionInstrumentEvent(compaction=event))
            log.info("GuardedMemory: compacted (%s) %d→%d messages, %d→%d tokens, budget %d",
                     event.method, event.messages_before, event.messages_after,
                     event.tokens_before, event.tokens_after, event.budget)
        if any(e.method == "llm" for e in events):
            found = summary_boundary(result, KEY)
            if found is not None and isinstance(found[1], int) and found[1] >= 0:
                self._summary, self._start = summary_message(found[0].text), found[1]


class CalibrationHandler(BaseEventHandler):
    """An instrumentation handler teaching a :class:`~ctxstack.CalibratingCounter` the
    prompt tokens LLM responses report (``prompt_tokens`` / ``input_tokens`` in the
    response's ``additional_kwargs`` or its raw ``usage``); responses without usage teach
    nothing. Register with ``get_dispatcher().add_event_handler(CalibrationHandler(c))``.
    """

    counter: CalibratingCounter

    @classmethod
    def class_name(cls) -> str:
        return "CtxstackCalibrationHandler"

    def handle(self, event: BaseEvent, **kwargs: Any) -> None:
        if not isinstance(event, LLMChatEndEvent) or event.response is None:
            return
        reported = _reported_input_tokens(event.response.additional_kwargs, event.response.raw)
        if reported:
            sent = [to_ctx(m, i) for i, m in enumerate(event.messages)]
            self.counter.observe(self.counter.base_count(sent), reported)


def _reported_input_tokens(extra: dict[str, Any], raw: Any) -> int:
    usage = raw.get("usage") if isinstance(raw, dict) else getattr(raw, "usage", None)
    if usage is not None and not isinstance(usage, dict):
        usage = usage.model_dump() if hasattr(usage, "model_dump") else vars(usage)
    for source in (extra, usage or {}):
        for name in ("prompt_tokens", "input_tokens"):
            value = source.get(name)
            if isinstance(value, int) and value > 0:
                return value
    return 0

