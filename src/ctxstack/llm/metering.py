"""Count every call that goes through an LLM, whoever makes it.

A DAG run's or a chat turn's usage must include every call — planner re-asks, a step's
guard compactions, DbMemory's compaction on load, calls made by a component that then
failed, the streamed synthesis — and some of those happen inside components that report
no usage when they raise (a structured call that gave up, an agent that crashed). Wrapping
the LLM handed to each component in a :class:`MeteredLLM` makes the total exact by
construction instead of relying on every component's bookkeeping.

The meter also adds up ``llm_seconds``, the time spent waiting on the model, so a service
can tell its own overhead (``elapsed - llm_seconds``) from the model's latency. Calls that
overlap (parallel DAG steps) each count in full. A stream abandoned half-way adds nothing:
the provider never reported its usage.

A :class:`UsageMeter` is a plain accumulator; several wrappers may feed one meter (a step's
chat LLM and its guard's compaction LLM), and one LLM may be wrapped by several meters
(the run's and the step's) by nesting wrappers.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from ctxstack.llm.base import LLM, ChatStream, LLMResult, ToolSpec, Usage
from ctxstack.messages import ChatMessage


class UsageMeter:
    """Sum of the usage of every call made through the wrappers attached to it."""

    def __init__(self) -> None:
        self.usage = Usage()
        self.llm_seconds = 0.0

    def add(self, usage: Usage) -> None:
        self.usage = self.usage + usage

    def wrap(self, llm: LLM) -> MeteredLLM:
        """``llm`` with every call's usage added to this meter."""
        return MeteredLLM(llm, self)


class MeteredLLM:
    """An :class:`~ctxstack.llm.base.LLM` that adds each call's usage to a meter.

    ``chat`` adds the result's usage; a stream adds its usage once it is exhausted (or
    closed). Anything else (``context_size``, a client's ``model`` …) is the inner LLM's.
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
        if name == "inner":  # not set yet (copy/pickle): avoid recursing
            raise AttributeError(name)
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
        return _MeteredStream(self.inner.stream_chat(messages, **opts), self.meter)


class _MeteredStream(ChatStream):
    """Forwards the inner stream's deltas; reports its usage to the meter once it ends."""

    def __init__(self, inner: ChatStream, meter: UsageMeter) -> None:
        super().__init__(_deltas(inner))
        self._inner = inner
        self._meter = meter
        self._reported = False

    async def __anext__(self) -> str:
        started = time.perf_counter()
        try:
            return await super().__anext__()
        except StopAsyncIteration:
            self._report()
            raise
        finally:
            self._meter.llm_seconds += time.perf_counter() - started

    async def aclose(self) -> None:
        await self._inner.aclose()
        if self._inner.done:
            self._report()

    def _report(self) -> None:
        if not self._reported:
            self._reported = True
            self.usage = self._inner.usage
            self._meter.add(self._inner.usage)


async def _deltas(inner: ChatStream) -> AsyncIterator[str | Usage]:
    async for delta in inner:
        yield delta
