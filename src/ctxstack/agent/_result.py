"""What an agent run produces: the answer, the tool trace, usage and the context it ended with."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ctxstack.guard import CompactionEvent
from ctxstack.messages import ChatMessage
from ctxstack.protocol import Usage

StopReason = Literal["answer", "max_iterations"]


class ToolTraceEntry(BaseModel):
    """One tool call of a run, as the user (and the synthesis step) sees it.

    ``result_preview`` is the start of the result (the model saw all of it); ``error`` is
    ``None`` on success, else a short reason (``"timeout"``, ``"invalid_arguments"``,
    ``"unknown_tool"``, ``"exception: ValueError"``).
    """

    model_config = ConfigDict(frozen=True)

    iteration: int
    call_id: str
    tool: str
    arguments: dict[str, Any]
    result_preview: str
    duration_s: float
    error: str | None = None


class AgentResult(BaseModel):
    """The outcome of :meth:`ReActAgent.run`.

    ``usage`` covers every LLM call the run caused: the agent's own calls, the guard's
    compaction calls (read from the guard's totals), tool selection, and — once
    :meth:`ReActAgent.stream_answer` has run — the synthesis. ``answer`` is the agent's
    brief answer; ``synthesis`` the streamed final answer, when one was made.
    ``stopped_reason`` is ``"max_iterations"`` when the answer is the honest partial one
    written at the iteration limit. ``messages`` is the context as the model last saw it
    plus the final answer (after any compaction: summaries included, dropped turns gone);
    ``tools`` the tools that last call carried (``None``: none) — with ``messages``, the
    prefix a later summary of the run can reuse from the provider's cache.

    Not frozen: :meth:`ReActAgent.stream_answer` adds the synthesis usage to it.
    """

    answer: str
    query: str = ""
    trace: list[ToolTraceEntry] = Field(default_factory=list)
    iterations: int = 0
    usage: Usage = Usage()
    compactions: list[CompactionEvent] = Field(default_factory=list)
    messages: list[ChatMessage] = Field(default_factory=list)
    stopped_reason: StopReason = "answer"
    injected: list[str] = Field(default_factory=list)
    elapsed_s: float = 0.0
    synthesis: str | None = None
    tools: list[dict[str, Any]] | None = None
    """:class:`~ctxstack.protocol.ToolSpec` entries (plain dicts: pydantic cannot check
    ``typing.TypedDict`` on Python 3.11)."""

    @property
    def tool_calls(self) -> int:
        """How many tool calls ran."""
        return len(self.trace)

    @property
    def final_answer(self) -> str:
        """The synthesised answer if one was streamed, else the brief answer."""
        return self.synthesis if self.synthesis is not None else self.answer
