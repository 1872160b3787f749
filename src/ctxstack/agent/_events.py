"""The closed set of events an agent run emits, for the chat service (SSE) and the CLI.

Every event is a frozen pydantic model tagged by ``type``; :data:`AgentEvent` is their
discriminated union, so a consumer can ``match`` on the class (or on ``ev.type``) and a
type checker knows the list is complete. The service maps them to SSE events:

============================  ===========================================================
agent event                   SSE
============================  ===========================================================
``iteration_started``         (progress only)
``tool_call``/``tool_result`` ``step``
``injected``                  ``inject``
``compaction``                ``compact`` ``{original_messages, kept_messages, method}``
``warning``/``checklist``     ``step`` (agent notices)
``answer_delta``              ``answer``
``done``                      ``done`` ``{answer, usage, iterations, elapsed}``
``error``                     ``error``
============================  ===========================================================

A run's event stream always ends with exactly one ``done`` or ``error``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, TypeAdapter

from ctxstack.agent._result import AgentResult, ToolTraceEntry
from ctxstack.guard import CompactionEvent


class _Event(BaseModel):
    model_config = ConfigDict(frozen=True)


class IterationStartedEvent(_Event):
    """A new iteration begins: the context (after the guard) about to be sent."""

    type: Literal["iteration_started"] = "iteration_started"
    iteration: int
    messages: int
    tokens: int


class ToolCallEvent(_Event):
    """The model asked for a tool call; it is about to run."""

    type: Literal["tool_call"] = "tool_call"
    iteration: int
    call_id: str
    tool: str
    arguments: dict[str, Any]


class ToolResultEvent(_Event, ToolTraceEntry):
    """A tool call finished: its trace entry (``error`` set when it failed, timed out or
    was invalid)."""

    type: Literal["tool_result"] = "tool_result"


class CompactionNoticeEvent(_Event):
    """The guard compacted the context; ``recovery`` when it was the overflow retry."""

    type: Literal["compaction"] = "compaction"
    iteration: int
    compaction: CompactionEvent
    recovery: bool = False

    @property
    def original_messages(self) -> int:
        return self.compaction.messages_before

    @property
    def kept_messages(self) -> int:
        return self.compaction.messages_after

    @property
    def method(self) -> str:
        return self.compaction.method


class InjectedEvent(_Event):
    """A message sent while the agent ran entered the context (pinned, kind "inject")."""

    type: Literal["injected"] = "injected"
    iteration: int
    text: str


class WarningEvent(_Event):
    """The agent injected a warning (today: the same call repeated ``repeats`` times)."""

    type: Literal["warning"] = "warning"
    iteration: int
    kind: Literal["cycle"] = "cycle"
    tool: str
    arguments: dict[str, Any]
    repeats: int
    message: str


class ChecklistEvent(_Event):
    """The agent held back a final answer to run the self-check checklist once."""

    type: Literal["checklist"] = "checklist"
    iteration: int
    tool_calls: int


class AnswerDeltaEvent(_Event):
    """A piece of the streamed final answer."""

    type: Literal["answer_delta"] = "answer_delta"
    text: str


class DoneEvent(_Event):
    """The run finished; ``result`` is the complete :class:`AgentResult`."""

    type: Literal["done"] = "done"
    result: AgentResult

    @property
    def answer(self) -> str:
        return self.result.final_answer


class ErrorEvent(_Event):
    """The run failed. ``error_type`` is the exception class name; the exception itself is
    kept (not serialised) so :meth:`ReActAgent.run` can re-raise it unchanged."""

    type: Literal["error"] = "error"
    message: str
    error_type: str
    iteration: int = 0
    _exception: BaseException | None = PrivateAttr(default=None)

    @classmethod
    def from_exception(cls, exc: BaseException, iteration: int) -> ErrorEvent:
        event = cls(message=str(exc) or type(exc).__name__, error_type=type(exc).__name__,
                    iteration=iteration)
        event._exception = exc
        return event

    @property
    def exception(self) -> BaseException | None:
        return self._exception


AgentEvent = Annotated[
    IterationStartedEvent
    | ToolCallEvent
    | ToolResultEvent
    | CompactionNoticeEvent
    | InjectedEvent
    | WarningEvent
    | ChecklistEvent
    | AnswerDeltaEvent
    | DoneEvent
    | ErrorEvent,
    Field(discriminator="type"),
]
"""Any agent event; parse a serialised one with :data:`AGENT_EVENT_ADAPTER`."""

AGENT_EVENT_ADAPTER: TypeAdapter[AgentEvent] = TypeAdapter(AgentEvent)
