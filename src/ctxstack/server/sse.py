"""Server-Sent Events for a chat turn: the closed set of events, their wire form, the stream.

One ``POST /api/chat`` answers with one ``text/event-stream``. Every frame is::

    event: <name>
    data: <one line of JSON>

with ``<name>`` one of ``step``, ``inject``, ``compact``, ``compact_start``,
``compact_end``, ``context``, ``answer``, ``done``, ``error`` (docs/DESIGN.md §5;
``context`` is the context meter; ``compact_start``/``compact_end`` bracket a
summariser run). Each frame also carries ``id: <turn id>.<n>`` so a client can resume
the stream with ``Last-Event-ID`` (:mod:`ctxstack.server.streams`). JSON never contains a raw
newline, so each frame has exactly one ``data:`` line. Comment frames (``: keep-alive``)
are sent every ``CTXSTACK_SSE_KEEPALIVE`` seconds so proxies and browsers do not drop a
long-running connection; clients ignore them.

The wire format and the response are sse-starlette's (``ServerSentEvent``,
``EventSourceResponse``: framing, keep-alive pings, disconnect detection, the graceful end
of open streams when the server shuts down); this module only says what is sent.

The same event objects are what the service stores on the assistant message (all but the
``answer`` deltas, whose sum is the message content), so the page redraws history with
the code that draws a live turn.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter
from sse_starlette import EventSourceResponse, ServerSentEvent

_SEP = "\n"


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
    """A DAG step changed state (steps of a plan not yet reported are "waiting")."""

    kind: Literal["dag_step"] = "dag_step"
    id: str
    task: str = ""
    status: Literal["running", "done", "failed", "skipped"]
    result: str | None = None
    round: int | None = None


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
    """The context was compacted. ``scope`` "load": DbMemory compacted the stored history
    before the turn; "run": the guard did mid-turn; "step": a DAG step's input was (a
    dependency result over its cut, or the step agent's own context).

    Every ``*_messages`` count is over the conversation's **stored history** (its user and
    assistant rows before the current question) — never the system prompt, the current
    question or this turn's own tool messages, so ``summarized_messages + kept_messages``
    never exceeds ``original_messages`` (the rest were dropped by truncation):

    * ``original_messages``: stored messages the context stood for;
    * ``summarized_messages``: stored messages the rolling summary now covers (folded in
      this time or by an earlier compaction), ``first_seq``..``last_seq`` — the divider
      goes right after message ``last_seq``;
    * ``kept_messages``: stored messages still in the context verbatim;
    * ``cleared_tool_outputs``: tool results whose content was cleared (masked) instead of
      summarised; 0 unless a mask stage ran (``method`` "mask");
    * ``turn_messages``: this turn's own messages (tool calls and results) folded (scope
      "run"/"step").

    ``summary`` and ``facts`` are what the model keeps from the folded span (the summary
    prose and its "Facts kept verbatim" list); both are empty for truncation.
    """

    original_messages: int
    kept_messages: int
    summarized_messages: int = 0
    cleared_tool_outputs: int = 0
    method: Literal["llm", "truncate", "mask"]
    scope: Literal["load", "run", "step"] = "load"
    first_seq: int | None = None
    last_seq: int | None = None
    turn_messages: int = 0
    summary: str | None = None
    facts: list[str] = Field(default_factory=list)
    step: str | None = None
    hint: str | None = None


class CompactEvent(_Data):
    event: Literal["compact"] = "compact"
    data: CompactData


class CompactStartData(_Data):
    """The summariser started (the page shows a "Summarising…" state until the matching
    ``compact_end``). ``scope`` as in :class:`CompactData`."""

    scope: Literal["load", "run"] = "load"


class CompactStartEvent(_Data):
    event: Literal["compact_start"] = "compact_start"
    data: CompactStartData


class CompactEndData(_Data):
    """The summarising that ``compact_start`` announced is over: ``seconds`` it took;
    ``compacted`` whether it changed the context (the ``compact`` event, when there is
    one, says how)."""

    scope: Literal["load", "run"] = "load"
    seconds: float = 0.0
    compacted: bool = True


class CompactEndEvent(_Data):
    event: Literal["compact_end"] = "compact_end"
    data: CompactEndData


class ContextParts(_Data):
    """Tokens of each part of the context sent to the model."""

    system: int = 0
    summary: int = 0
    history: int = 0
    tools: int = 0
    question: int = 0


class ContextData(_Data):
    """How full the context was at the last model call (a fuel gauge).

    ``used`` is the sum of ``parts`` (the guard's counter); ``budget`` the usable input
    tokens (``context_size - max_output_tokens``). ``at`` is "load" for the estimate made
    before the first call (the history and the question), "call" for a measured call.
    """

    budget: int
    context_size: int
    used: int
    parts: ContextParts
    model_calls: int = 0
    at: Literal["load", "call"] = "call"


class ContextEvent(_Data):
    event: Literal["context"] = "context"
    data: ContextData


class AnswerData(_Data):
    delta: str


class AnswerEvent(_Data):
    event: Literal["answer"] = "answer"
    data: AnswerData


class DoneData(_Data):
    """``elapsed`` is the turn's wall time in seconds, from the moment the route began
    handling the request (before the claim and the stored question) to the moment the
    answer was committed and the conversation released (the copy stored on the message
    stops just before the save); ``llm_seconds`` the part of it spent waiting on the model
    (so ``elapsed - llm_seconds`` is the service's own overhead)."""

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
    StepEvent | InjectEvent | CompactEvent | CompactStartEvent | CompactEndEvent
    | ContextEvent | AnswerEvent | SseDoneEvent | SseErrorEvent,
    Field(discriminator="event"),
]
EVENT_ADAPTER: TypeAdapter[SSEEvent] = TypeAdapter(SSEEvent)
EVENT_NAMES = ("step", "inject", "compact", "compact_start", "compact_end", "context",
               "answer", "done", "error")


def openapi_schema() -> tuple[dict[str, Any], dict[str, Any]]:
    """(the schema of one SSE frame, the component schemas it refers to) for the API
    reference: a union of ``{"event": name, "data": payload}`` discriminated by ``event``
    (on the wire ``event`` is the frame's ``event:`` line and ``data`` its ``data:`` line).
    """
    schema = EVENT_ADAPTER.json_schema(ref_template="#/components/schemas/{model}",
                                       mode="serialization")
    defs = schema.pop("$defs", {})
    return schema, defs


def encode(event: SSEEvent) -> bytes:
    """One SSE frame for ``event``."""
    payload = json.dumps(event.data.model_dump(mode="json"), ensure_ascii=False,
                         separators=(",", ":"))
    return ServerSentEvent(payload, event=event.event, sep=_SEP).encode()


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


async def frames(queue: asyncio.Queue[SSEEvent | None]) -> AsyncIterator[bytes]:
    """Encode events from ``queue`` until ``None``.

    The events already queued when one arrives go out in the same chunk (one socket
    write instead of one per event: a streamed answer's deltas often arrive several at
    once, and under load a write per frame was a tenth of a worker's time, issue 15).
    """
    while True:
        item = await queue.get()
        if item is None:
            return
        chunk = [encode(item)]
        ended = False
        while not queue.empty():
            more = queue.get_nowait()
            if more is None:
                ended = True
                break
            chunk.append(encode(more))
        yield b"".join(chunk)
        if ended:
            return


def event_stream(
    content: AsyncIterator[bytes],
    *,
    keepalive_seconds: float,
    on_disconnect: Callable[[], None] | None = None,
) -> EventSourceResponse:
    """The ``text/event-stream`` response of a chat turn.

    sse-starlette always listens for the client's ``http.disconnect`` (Starlette's own
    streaming response does only on some ASGI spec versions): a chat turn must stop, and
    save what it produced, as soon as the reader goes away, not at the next write.
    ``on_disconnect`` runs when the client left before the stream ended.
    """

    async def disconnected(_message: object) -> None:
        if on_disconnect is not None:
            on_disconnect()

    return EventSourceResponse(
        content, sep=_SEP, ping=keepalive_seconds, ping_message_factory=_keepalive,
        headers={"Cache-Control": "no-cache"}, client_close_handler_callable=disconnected)


def _keepalive() -> ServerSentEvent:
    return ServerSentEvent(comment="keep-alive", sep=_SEP)
