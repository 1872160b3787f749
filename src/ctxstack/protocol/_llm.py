"""The model protocol every engine talks to: ``LLM``, ``LLMResult``, ``ChatStream``, ``ToolSpec``.

This is the core's only view of a language model. Provider clients (``ctxstack.llm.*``)
implement it; the core never imports them (the import contracts in ``pyproject.toml``
enforce the direction).

An :class:`LLM` is anything with an async ``chat()`` (one complete answer, optionally with
native tool calls) and ``stream_chat()`` (a :class:`ChatStream` of text deltas whose
``usage`` is set once the stream is exhausted), plus the two numbers the budget layer needs:
``context_size`` and ``max_output_tokens``. Usage lives on the stream, not on the LLM
object, so concurrent streams through one client never read each other's figures.

Usage is recorded for every call so a chat turn's total can include compaction, summaries
and synthesis, not only the agent's own calls.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any, Literal, Protocol, Required, TypedDict, runtime_checkable

from pydantic import BaseModel, ConfigDict

from ctxstack.messages import ChatMessage
from ctxstack.protocol._usage import Usage

__all__ = [
    "LLM",
    "ChatStream",
    "FinishReason",
    "FunctionSpec",
    "LLMResult",
    "ToolSpec",
    "Usage",
    "finish_reason_of",
]


class LLMResult(BaseModel):
    """One non-streaming answer: the assistant message (text and/or tool calls) and usage."""

    model_config = ConfigDict(frozen=True)

    message: ChatMessage
    usage: Usage = Usage()
    finish_reason: FinishReason | None = None
    model: str | None = None

    @property
    def text(self) -> str:
        return self.message.text


class ChatStream(AsyncIterator[str]):
    """Text deltas of one streamed answer; ``usage`` is final once iteration ends.

    Wraps a source iterator that yields ``str`` deltas and, last, one :class:`Usage`
    (providers report usage in the final chunk). A source that ends without a Usage
    leaves ``usage`` at zero with ``estimated=True`` unless the producer fills it in.
    """

    def __init__(self, source: AsyncIterator[str | Usage]) -> None:
        self._source = source
        self.usage: Usage = Usage(estimated=True)
        self.done = False

    def __aiter__(self) -> ChatStream:
        return self

    async def __anext__(self) -> str:
        while True:
            try:
                item = await self._source.__anext__()
            except StopAsyncIteration:
                self.done = True
                raise
            if isinstance(item, Usage):
                self.usage = item
                continue
            return item

    async def aclose(self) -> None:
        """Stop the underlying stream early (closes the HTTP response, if any)."""
        close = getattr(self._source, "aclose", None)
        if close is not None:
            await close()

    async def text(self) -> str:
        """Drain the stream and return the whole text."""
        return "".join([d async for d in self])


class FunctionSpec(TypedDict, total=False):
    """The ``function`` object of a tool entry: its name, what it does, its JSON Schema."""

    name: Required[str]
    description: str
    parameters: dict[str, Any]
    strict: bool


class ToolSpec(TypedDict):
    """An OpenAI ``tools`` entry: ``{"type": "function", "function": {name, parameters, …}}``."""

    type: Literal["function"]
    function: FunctionSpec


FinishReason = Literal["stop", "length", "tool_calls", "content_filter", "other"]
"""Why the model stopped. Providers' own spellings outside the OpenAI set map to ``"other"``."""

_FINISH_REASONS: frozenset[str] = frozenset(("stop", "length", "tool_calls", "content_filter"))


def finish_reason_of(raw: object) -> FinishReason | None:
    """A provider's ``finish_reason`` as a :data:`FinishReason` (``None`` when absent).

    ``function_call`` (the pre-tools spelling) counts as ``"tool_calls"``.
    """
    if raw is None:
        return None
    if raw == "function_call":
        return "tool_calls"
    if isinstance(raw, str) and raw in _FINISH_REASONS:
        return raw  # type: ignore[return-value]
    return "other"


@runtime_checkable
class LLM(Protocol):
    """What ctxstack needs from a language model.

    ``chat`` raises subclasses of :class:`ctxstack.errors.LLMError` on failure.
    ``stream_chat`` returns a :class:`ChatStream`; after exhaustion its ``usage`` holds the
    stream's usage (provider-reported, or estimated and flagged ``estimated=True``).
    Errors surface from iteration, as :class:`~ctxstack.errors.LLMError` subclasses.
    """

    @property
    def context_size(self) -> int: ...

    @property
    def max_output_tokens(self) -> int: ...

    async def chat(
        self,
        messages: Sequence[ChatMessage],
        *,
        tools: Sequence[ToolSpec] | None = None,
        **opts: Any,
    ) -> LLMResult: ...

    def stream_chat(self, messages: Sequence[ChatMessage], **opts: Any) -> ChatStream: ...
