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

**Calibration.** A wrapper may also feed a
:class:`~ctxstack.tokens.CalibratingCounter` (``calibrate=``): after every call whose
usage the provider reported (not ``estimated``), the counter learns from the base estimate
of what was sent and the provider's ``input_tokens``. Hand the same counter to the guard
(``ContextGuard(counter=...)``) and to the memory, and their estimates follow the
provider's tokenizer. Details of what is compared:

* the provider bills the tool specs sent with ``tools=`` as input too, so the estimated
  side is the messages' base estimate **plus** the base estimate of the specs' JSON
  (:meth:`~ctxstack.tokens._calibration.CalibratingCounter.tool_specs_tokens`): the factor then
  corrects the text estimate, not the size of the tool list (which the guard does not
  count against the budget either);
* the sample trains the factor the counter *applies* (the view's own model name), not a
  factor keyed by the provider's model string (``gpt-4o-2024-08-06`` would train a factor a
  counter built for ``gpt-4o`` never reads);
* a stream is observed once it ends, if its usage was reported; an abandoned or
  unreported stream teaches nothing; a call that raised teaches nothing;
* nested wrappers each observe if each was given a counter: give it to one of them.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

from ctxstack.messages import ChatMessage
from ctxstack.protocol import LLM, ChatStream, LLMResult, ToolSpec, Usage

if TYPE_CHECKING:  # calibration imports ctxstack.llm: a runtime import would be circular
    from ctxstack.tokens._calibration import CalibratingCounter


class UsageMeter:
    """Sum of the usage of every call made through the wrappers attached to it."""

    def __init__(self) -> None:
        self.usage = Usage()
        self.llm_seconds = 0.0

    def add(self, usage: Usage) -> None:
        self.usage = self.usage + usage

    def wrap(self, llm: LLM, *, calibrate: CalibratingCounter | None = None) -> MeteredLLM:
        """``llm`` with every call's usage added to this meter (and fed to ``calibrate``)."""
        return MeteredLLM(llm, self, calibrate=calibrate)


class MeteredLLM:
    """An :class:`~ctxstack.protocol.LLM` that adds each call's usage to a meter.

    ``chat`` adds the result's usage; a stream adds its usage once it is exhausted (or
    closed). Anything else (``context_size``, a client's ``model`` …) is the inner LLM's.
    With ``calibrate``, each call with reported usage also trains that counter (see the
    module docstring).
    """

    def __init__(
        self, inner: LLM, meter: UsageMeter, *, calibrate: CalibratingCounter | None = None
    ) -> None:
        self.inner = inner
        self.meter = meter
        self.calibrate = calibrate

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
        if self.calibrate is not None:
            self.calibrate.observe_call(messages, result.usage, tools)
        return result

    def stream_chat(self, messages: Sequence[ChatMessage], **opts: Any) -> ChatStream:
        return _MeteredStream(self.inner.stream_chat(messages, **opts), self.meter,
                              messages=messages, calibrate=self.calibrate)


class _MeteredStream(ChatStream):
    """Forwards the inner stream's deltas; reports its usage to the meter once it ends."""

    def __init__(
        self,
        inner: ChatStream,
        meter: UsageMeter,
        *,
        messages: Sequence[ChatMessage] = (),
        calibrate: CalibratingCounter | None = None,
    ) -> None:
        super().__init__(_deltas(inner))
        self._inner = inner
        self._meter = meter
        self._messages = list(messages) if calibrate is not None else []
        self._calibrate = calibrate
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
            if self._calibrate is not None:
                self._calibrate.observe_call(self._messages, self.usage)


async def _deltas(inner: ChatStream) -> AsyncIterator[str | Usage]:
    async for delta in inner:
        yield delta
