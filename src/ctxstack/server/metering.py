"""Count every LLM call of one chat turn, whoever makes it.

A turn's model calls come from many places: DbMemory's compaction on load, the guard's
compactions, the agent's iterations, tool selection, the DAG planner, steps and analyzer,
and the streamed synthesis. Rather than trust each of them to report usage, the service
hands them per-turn :class:`MeteredLLM` wrappers around the shared clients; the ``done``
event's usage is the meter's total, so it includes every call by construction.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from ctxstack.llm.base import LLM, ChatStream, LLMResult, ToolSpec, Usage
from ctxstack.messages import ChatMessage


class UsageMeter:
    """The running totals of one turn (single event loop, so no lock is needed).

    ``llm_seconds`` is the time spent waiting on model calls, so the service can tell its
    own overhead (``elapsed - llm_seconds``) from the model's latency. Calls that overlap
    (parallel DAG steps) each count in full.
    """

    def __init__(self) -> None:
        self.total = Usage()
        self.llm_seconds = 0.0

    def add(self, usage: Usage) -> None:
        self.total = self.total + usage


class MeteredLLM:
    """An :class:`~ctxstack.llm.LLM` that adds the usage of each call to a meter.

    A streamed answer counts when its stream ends (usage arrives last); a stream abandoned
    half-way (client gone) counts nothing, because the provider never reported it.
    """

    def __init__(self, inner: LLM, meter: UsageMeter) -> None:
        self.inner = inner
        self.meter = meter

    @property
    def context_size(self) -> int:
        return self.inner.context_size

    @property
    def max_output_tokens(self) -> int:
        return self.inner.max_output_tokens

    def __getattr__(self, name: str) -> Any:
        # Anything beyond the protocol (model name, capability flags) comes from the inner
        # client unchanged.
        return getattr(self.inner, name)

    async def chat(
        self,
        messages: Sequence[ChatMessage],
        *,
        tools: Sequence[ToolSpec] | None = None,
        **opts: Any,
    ) -> LLMResult:
        started = time.perf_counter()
        try:
            result = await self.inner.chat(messages, tools=tools, **opts)
        finally:
            self.meter.llm_seconds += time.perf_counter() - started
        self.meter.add(result.usage)
        return result

    def stream_chat(self, messages: Sequence[ChatMessage], **opts: Any) -> ChatStream:
        inner = self.inner.stream_chat(messages, **opts)
        return ChatStream(self._relay(inner))

    async def _relay(self, inner: ChatStream) -> AsyncIterator[str | Usage]:
        finished = False
        try:
            while True:
                started = time.perf_counter()
                try:
                    delta = await inner.__anext__()
                except StopAsyncIteration:
                    break
                finally:
                    self.meter.llm_seconds += time.perf_counter() - started
                yield delta
            finished = True
        finally:
            if not finished:
                await inner.aclose()
        self.meter.add(inner.usage)
        yield inner.usage
