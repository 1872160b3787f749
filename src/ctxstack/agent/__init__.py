"""The ReAct agent: tools, the guarded tool loop, injections, checklist and streamed synthesis.

``from ctxstack.agent import ReActAgent, AgentResult, Tool, tool`` is the public surface;
events are in :mod:`ctxstack.agent._events`, the pure decisions in
:mod:`ctxstack.agent._decisions`.
"""

from ctxstack.agent._events import (
    AGENT_EVENT_ADAPTER,
    AgentEvent,
    AnswerDeltaEvent,
    ChecklistEvent,
    CompactionNoticeEvent,
    DoneEvent,
    ErrorEvent,
    InjectedEvent,
    IterationStartedEvent,
    ToolCallEvent,
    ToolResultEvent,
    WarningEvent,
)
from ctxstack.agent._react import ReActAgent
from ctxstack.agent._result import AgentResult, ToolTraceEntry
from ctxstack.agent._tools import Tool, ToolOutcome, ToolRegistry, tool

__all__ = [
    "AGENT_EVENT_ADAPTER",
    "AgentEvent",
    "AgentResult",
    "AnswerDeltaEvent",
    "ChecklistEvent",
    "CompactionNoticeEvent",
    "DoneEvent",
    "ErrorEvent",
    "InjectedEvent",
    "IterationStartedEvent",
    "ReActAgent",
    "Tool",
    "ToolCallEvent",
    "ToolOutcome",
    "ToolRegistry",
    "ToolResultEvent",
    "ToolTraceEntry",
    "WarningEvent",
    "tool",
]
