"""Server-Sent Events for a chat turn: the closed set of events, their wire form, the stream.

One ``POST /api/chat`` answers with one ``text/event-stream``. Every frame is::

    event: <name>
    data: <one line of JSON>

with ``<name>`` one of ``step``, ``inject``, ``compact``, ``answer``, ``done``, ``error``
(DESIGN §5). JSON never contains a raw newline, so each frame has exactly one ``data:``
line. Comment frames (``: keep-alive``) are sent while a turn is quiet so proxies and
browsers do not drop a long-running connection; clients ignore them.

The same event objects are what the service stores on the assistant message (all but the
``answer`` deltas, whose sum is the message content), so the page redraws history with
the code that draws a live turn.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import suppress
from typing import Annotated, Any, Literal

import anyio
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

KEEPALIVE = b": keep-alive\n\n"


class _Data(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# ---------------------------------------------------------------------------- step payloads
class ToolCallStep(_Data):
    """The agent asked for a tool."""

    kind: Literal["tool_call"] = "tool_call"
    id: str
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    iteration: int | None = None
    dag_step: str | None = None


class ToolResultStep(_Data):
    """A tool finished; ``result`` is a preview (long outputs are cut)."""

    kind: Literal["tool_result"] = "tool_result"
    id: str
    tool: str
    result: str
    error: bool = False
    duration_ms: float | None = None
    dag_step: str | None = None


class PlanStepData(_Data):
    """A DAG plan (or a replan, ``round`` > 1)."""

    kind: Literal["plan"] = "plan"
    round: int = 1
    steps: list[dict[str, Any]] = Field(default_factory=list)


class DagStepStatus(_Data):
    """A DAG step changed state."""

    kind: Literal["dag_step"] = "dag_step"
    id: str
    task: str = ""
    status: Literal["running", "done", "failed"]
    result: str | None = None


class NoteStep(_Data):
    """Anything else worth showing among the steps (warnings, checklist, analysis)."""

    kind: Literal["iteration", "warning", "checklist", "analysis", "note"] = "note"
    text: str = ""
    iteration: int | None = None


StepData = Annotated[
    ToolCallStep | ToolResultStep | PlanStepData | DagStepStatus | NoteStep,
    Field(discriminator="kind"),
]


# ---------------------------------------------------------------------------- events
class UsageData(_Data):
    input_tokens: int = 0
    output_tokens: int = 0


class StepEvent(_Data):
    event: Literal["step"] = "step"
    data: StepData


class InjectData(_Data):
    text: str
    consumed: bool = True


class InjectEvent(_Data):
    event: Literal["inject"] = "inject"
    data: InjectData


class CompactData(_Data):
    """``scope`` "load": DbMemory compacted the history; "run": the guard did mid-turn."""

    original_messages: int
    kept_messages: int
    method: Literal["mask", "llm", "truncate"]
    scope: Literal["load", "run"] = "load"


class CompactEvent(_Data):
    event: Literal["compact"] = "compact"
    data: CompactData


class AnswerData(_Data):
    delta: str


class AnswerEvent(_Data):
    event: Literal["answer"] = "answer"
    data: AnswerData


class DoneData(_Data):
    """``elapsed`` is the turn's wall time in seconds; ``llm_seconds`` the part of it spent
    waiting on the model (so ``elapsed - llm_seconds`` is the service's own overhead)."""

    answer: str
    usage: UsageData
    iterations: int
    elapsed: float
    llm_seconds: float = 0.0
    message_id: int | None = None


class SseDoneEvent(_Data):
    event: Literal["done"] = "done"
    data: DoneData


class ErrorData(_Data):
    message: str
    kind: Literal["failed", "stopped"] = "failed"


class SseErrorEvent(_Data):
    event: Literal["error"] = "error"
    data: ErrorData


SSEEvent = Annotated[
    StepEvent | InjectEvent | CompactEvent | AnswerEvent | SseDoneEvent | SseErrorEvent,
    Field(discriminator="event"),
]
EVENT_ADAPTER: TypeAdapter[SSEEvent] = TypeAdapter(SSEEvent)


def encode(event: SSEEvent) -> bytes:
    """One SSE frame for ``event``."""
    payload = json.dumps(event.data.model_dump(mode="json"), ensure_ascii=False,
                         separators=(",", ":"))
    return f"event: {event.event}\ndata: {payload}\n\n".encode()


def stored_form(event: SSEEvent) -> dict[str, Any]:
    """The JSON kept on the assistant message: ``{"event": name, "data": {...}}``."""
    return event.model_dump(mode="json")


def parse_stored(value: object) -> SSEEvent | None:
    """A stored event back as a model; ``None`` for anything that does not validate."""
    try:
        return EVENT_ADAPTER.validate_python(value)
    except ValueError:
        return None


Emit = Callable[[SSEEvent], Awaitable[None]]


async def frames(
    queue: asyncio.Queue[SSEEvent | None], keepalive_seconds: float
) -> AsyncIterator[bytes]:
    """Encode events from ``queue`` until ``None``, with keep-alive comments when idle."""
    while True:
        try:
            item = await asyncio.wait_for(queue.get(), timeout=keepalive_seconds)
        except TimeoutError:
            yield KEEPALIVE
            continue
        if item is None:
            return
        yield encode(item)


class EventStreamResponse(StreamingResponse):
    """A ``text/event-stream`` response that notices a client disconnect at once.

    Starlette only watches for ``http.disconnect`` on some ASGI spec versions; a chat turn
    must stop (and save what it produced) as soon as the reader goes away, not at the next
    write, so this response always listens. ``on_disconnect`` runs when the client left
    before the stream ended.
    """

    def __init__(
        self,
        content: AsyncIterator[bytes],
        *,
        on_disconnect: Callable[[], None] | None = None,
        status_code: int = 200,
    ) -> None:
        super().__init__(
            content,
            status_code=status_code,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
        self._on_disconnect = on_disconnect

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        finished = False

        async def stream(cancel: anyio.CancelScope) -> None:
            nonlocal finished
            with suppress(OSError):
                await self.stream_response(send)
                finished = True
            cancel.cancel()

        async with anyio.create_task_group() as group:
            group.start_soon(stream, group.cancel_scope)
            await self.listen_for_disconnect(receive)
            group.cancel_scope.cancel()
        if not finished and self._on_disconnect is not None:
            self._on_disconnect()
