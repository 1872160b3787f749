"""ScriptedLLM: a deterministic, offline :class:`~ctxstack.protocol.LLM` for tests and demos.

It ships in the library (not in tests/) so that tests, the demo and users' own tests share
one well-behaved fake. Replies come from a queue, from a function of the messages, or both
(the queue first). A reply may be:

* a ``str`` — an assistant text answer;
* a :class:`ChatMessage` — returned as the assistant message (tool calls included);
* an :class:`LLMResult` — returned as is (its usage too);
* an ``Exception`` instance — raised, to inject failures;
* a callable ``(messages, tools) -> any of the above`` — evaluated at call time.

Every call is recorded in :attr:`ScriptedLLM.calls` (the exact messages it received), so
tests can assert what the model saw. Usage is the heuristic estimate of the input and the
output, so totals are deterministic and checkable.
"""

from __future__ import annotations

import asyncio
import itertools
import re
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ctxstack.compaction._prompts import is_summary_instruction
from ctxstack.compaction._summarize import transcript_entries
from ctxstack.errors import LLMError
from ctxstack.messages import ChatMessage, ToolCall
from ctxstack.protocol import ChatStream, LLMResult, ToolSpec, Usage
from ctxstack.tokens import HEURISTIC

Reply = str | ChatMessage | LLMResult | BaseException
ReplyFn = Callable[[Sequence[ChatMessage], Sequence[ToolSpec] | None], "Reply | ReplyFn"]


@dataclass(frozen=True)
class ScriptedCall:
    """One recorded call: what the fake was asked, and how."""

    kind: Literal["chat", "stream"]
    messages: tuple[ChatMessage, ...]
    tools: tuple[ToolSpec, ...] | None
    opts: dict[str, Any] = field(default_factory=dict)


_ids = itertools.count(1)


class ScriptedLLM:
    """A fake LLM answering from a script. See the module docstring for reply forms.

    Args:
        replies: queued replies, consumed one per call (``chat`` or ``stream_chat``).
        handler: used when the queue is empty; without one an empty queue is an error.
        delay: seconds to sleep before every answer (to test timeouts and concurrency).
        stream_chunk: characters per streamed delta.
        chunk_delay: seconds to sleep after each streamed delta (a readable pace).
        context_size: the context window the budget layer reads.
        max_output_tokens: the reserved output the budget layer reads.
    """

    def __init__(
        self,
        replies: Iterable[Reply | ReplyFn] = (),
        *,
        handler: ReplyFn | None = None,
        delay: float = 0.0,
        stream_chunk: int = 8,
        chunk_delay: float = 0.0,
        context_size: int = 128_000,
        max_output_tokens: int = 64_000,
        name: str = "scripted",
    ) -> None:
        self._queue: deque[Reply | ReplyFn] = deque(replies)
        self.handler = handler
        self.delay = delay
        self.stream_chunk = max(1, stream_chunk)
        self.chunk_delay = chunk_delay
        self.context_size = context_size
        self.max_output_tokens = max_output_tokens
        self.name = name
        self.calls: list[ScriptedCall] = []
        self._answered: list[tuple[ScriptedCall, LLMResult]] = []

    # ------------------------------------------------------------------ script control
    def push(self, *replies: Reply | ReplyFn) -> None:
        """Queue more replies."""
        self._queue.extend(replies)

    @property
    def pending(self) -> int:
        """Replies still queued."""
        return len(self._queue)

    @property
    def total_usage(self) -> Usage:
        """Sum of the usage of every answered call so far."""
        return sum((result.usage for _, result in self._answered), Usage())

    @staticmethod
    def tool_call(name: str, arguments: dict[str, Any] | None = None, *,
                  call_id: str | None = None, content: str | None = None) -> ChatMessage:
        """An assistant message calling one tool (for scripting agent runs)."""
        call = ToolCall(id=call_id or f"call_{next(_ids)}", name=name, arguments=arguments or {})
        return ChatMessage.assistant(content, tool_calls=[call])

    @staticmethod
    def tool_calls(*calls: tuple[str, dict[str, Any]]) -> ChatMessage:
        """An assistant message calling several tools at once (parallel tool calls)."""
        return ChatMessage.assistant(
            None,
            tool_calls=[ToolCall(id=f"call_{next(_ids)}", name=n, arguments=a) for n, a in calls],
        )

    # ------------------------------------------------------------------ LLM protocol
    async def chat(
        self,
        messages: Sequence[ChatMessage],
        *,
        tools: Sequence[ToolSpec] | None = None,
        **opts: Any,
    ) -> LLMResult:
        call = ScriptedCall("chat", tuple(messages), tuple(tools) if tools else None, dict(opts))
        self.calls.append(call)
        result = await self._answer(call)
        self._answered.append((call, result))
        return result

    def stream_chat(self, messages: Sequence[ChatMessage], **opts: Any) -> ChatStream:
        call = ScriptedCall("stream", tuple(messages), None, dict(opts))
        self.calls.append(call)
        return ChatStream(self._stream(call))

    async def _stream(self, call: ScriptedCall) -> AsyncIterator[str | Usage]:
        result = await self._answer(call)
        self._answered.append((call, result))
        text = result.message.text
        for i in range(0, len(text), self.stream_chunk):
            yield text[i : i + self.stream_chunk]
            await asyncio.sleep(self.chunk_delay)
        yield result.usage

    # ------------------------------------------------------------------ internals
    def _next_reply(self, call: ScriptedCall) -> Reply:
        item: Reply | ReplyFn
        if self._queue:
            item = self._queue.popleft()
        elif self.handler is not None:
            item = self.handler
        else:
            raise LLMError(
                f"ScriptedLLM {self.name!r}: no scripted reply left for call #{len(self.calls)}"
            )
        # A callable may return another callable only once; guard against loops.
        for _ in range(3):
            if not callable(item) or isinstance(item, BaseException):
                break
            item = item(call.messages, call.tools)
        return item  # type: ignore[return-value]

    async def _answer(self, call: ScriptedCall) -> LLMResult:
        if self.delay:
            await asyncio.sleep(self.delay)
        reply = self._next_reply(call)
        if isinstance(reply, BaseException):
            raise reply
        if isinstance(reply, LLMResult):
            return reply
        message = reply if isinstance(reply, ChatMessage) else ChatMessage.assistant(str(reply))
        usage = Usage(
            input_tokens=HEURISTIC.count_messages(call.messages),
            output_tokens=HEURISTIC.count_message(message) - HEURISTIC.message_overhead,
            calls=1,
        )
        finish = "tool_calls" if message.tool_calls else "stop"
        return LLMResult(message=message, usage=usage, finish_reason=finish, model=self.name)


_SENTENCE_END = re.compile(r"(?<=[.!?])\s|(?<=[。！？])")
_ENTRY = re.compile(r"^\[(user|assistant|system note|tool result[^\]]*|assistant -> tool call)\]")


def first_sentence(text: str, limit: int = 200) -> str:
    """The first sentence of ``text`` (Latin or CJK punctuation), at most ``limit`` chars."""
    text = " ".join(text.split())
    head = _SENTENCE_END.split(text, maxsplit=1)[0]
    return head[:limit].rstrip()


def first_sentence_summarizer(
    messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] | None = None
) -> str:
    """A deliberately lossy, deterministic summariser (a :class:`ScriptedLLM` handler).

    Keeps only the first sentence of each transcript entry the compaction request carries
    (lines starting ``[user]``, ``[assistant]``, ``[tool result: …]``). A cache-aligned
    request (the conversation's messages, then the summary instruction) is read the same
    way: its non-system messages as transcript entries. What survives beyond that is what
    the library itself preserves (facts re-attached verbatim, pinned messages, recent
    turns) — which is exactly what the demo and the fidelity benchmark want to show.
    """
    request = messages[-1].text if messages else ""
    if is_summary_instruction(request):
        request = "\n".join(transcript_entries([m for m in messages[:-1] if m.role != "system"]))
    kept = [
        f"- {first_sentence(line)}"
        for line in request.splitlines()
        if _ENTRY.match(line) and len(line) > 2
    ]
    return "\n".join(kept) or "- (nothing to summarise)"
