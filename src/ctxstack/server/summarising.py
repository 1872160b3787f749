"""The "summarising" state of a turn: ``compact_start`` / ``compact_end`` events.

A summariser call can take seconds; the page shows that it runs (LibreChat shows a
summarising state the same way). The turn hands its compaction code a model wrapped by
:meth:`SummarisingSignal.wrap`: the first call through it sends ``compact_start``, and
the turn sends ``compact_end`` when the load finished or the guard reported its
compaction (:meth:`SummarisingSignal.end`). A run that never called the summariser sends
neither. Only the summariser model is wrapped — the main model's calls never start one.
"""

from __future__ import annotations

import inspect
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Literal

from ctxstack.messages import ChatMessage
from ctxstack.protocol import LLM, ChatStream, LLMResult, ToolSpec
from ctxstack.server.sse import (
    CompactEndData,
    CompactEndEvent,
    CompactStartData,
    CompactStartEvent,
    SSEEvent,
)

Scope = Literal["load", "run"]


class SummarisingSignal:
    """Brackets summariser runs with events sent through ``push``."""

    def __init__(self, push: Callable[[SSEEvent], None]) -> None:
        # A weak reference to a bound method: the turn holds this signal, and a strong
        # reference back would make every finished turn wait for the cycle collector.
        self._push: Callable[[], Callable[[SSEEvent], None] | None] = (
            weakref.WeakMethod(push) if inspect.ismethod(push) else (lambda: push))
        self.scope: Scope | None = None
        self._started = 0.0

    def _send(self, event: SSEEvent) -> None:
        push = self._push()
        if push is not None:
            push(event)

    @property
    def running(self) -> bool:
        return self.scope is not None

    def begin(self, scope: Scope) -> None:
        if self.scope is not None:
            return
        self.scope = scope
        self._started = time.perf_counter()
        self._send(CompactStartEvent(data=CompactStartData(scope=scope)))

    def end(self, compacted: bool = True) -> None:
        if self.scope is None:
            return
        seconds = round(time.perf_counter() - self._started, 3)
        self._send(CompactEndEvent(data=CompactEndData(scope=self.scope, seconds=seconds,
                                                      compacted=compacted)))
        self.scope = None

    def wrap(self, llm: LLM, scope: Scope) -> LLM:
        """``llm`` sending ``compact_start`` (for ``scope``) at its first call."""
        return _SignallingLLM(llm, self, scope)


class _SignallingLLM:
    def __init__(self, inner: LLM, signal: SummarisingSignal, scope: Scope) -> None:
        self.inner = inner
        self.signal = signal
        self.scope = scope

    @property
    def context_size(self) -> int:
        return self.inner.context_size

    @property
    def max_output_tokens(self) -> int:
        return self.inner.max_output_tokens

    def __getattr__(self, name: str) -> Any:
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    async def chat(self, messages: Sequence[ChatMessage], *,
                   tools: Sequence[ToolSpec] | None = None, **opts: Any) -> LLMResult:
        self.signal.begin(self.scope)
        return await self.inner.chat(messages, tools=tools, **opts)

    def stream_chat(self, messages: Sequence[ChatMessage], **opts: Any) -> ChatStream:
        self.signal.begin(self.scope)
        return self.inner.stream_chat(messages, **opts)


__all__ = ["SummarisingSignal"]
