"""The typed events of a DAG run, in the order a consumer sees them.

A run of :meth:`ctxstack.dag.DAGEngine.run_events` yields::

    query_enriched
    ( plan_created  (step_started | step_activity | step_finished)*  analysis  [replan] )+
    [replan_failed]  answer_delta*  done

or, when the run cannot go on, ``error`` as its last event. ``injected`` (a message the
user sent while the run worked, see :meth:`ctxstack.dag.DAGEngine.inject`) may come
before any event; every one comes before ``done``/``error``. Every event is a frozen
pydantic model with a ``type`` Literal tag; :data:`DAGEvent` is their discriminated union,
so a consumer ``match``-es on the class (or on ``type`` after a JSON round trip through
:data:`DAG_EVENT_ADAPTER`). The design is the ReAct agent's (:mod:`ctxstack.agent._events`):
``answer_delta`` *is* the agent's :class:`~ctxstack.agent.AnswerDeltaEvent`, and a
step agent's tool calls, results, compactions and warnings arrive wrapped in
``step_activity`` so the service can show them as it shows a ReAct run's.

``round`` numbers start at 1; see :class:`ctxstack.dag.DAGEngine` for how rounds and
replans are counted. Times are seconds since the run started.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from ctxstack.agent import (
    AnswerDeltaEvent,
    CompactionNoticeEvent,
    ToolCallEvent,
    ToolResultEvent,
    WarningEvent,
)
from ctxstack.dag._plan import Plan
from ctxstack.dag._results import StepResult
from ctxstack.protocol import Usage

__all__ = [
    "DAG_EVENT_ADAPTER",
    "AnalysisEvent",
    "AnswerDeltaEvent",
    "DAGDoneEvent",
    "DAGErrorEvent",
    "DAGEvent",
    "DAGInjectedEvent",
    "EnrichMethod",
    "InjectPhase",
    "PlanCreatedEvent",
    "QueryEnrichedEvent",
    "ReplanEvent",
    "ReplanFailedEvent",
    "StepActivity",
    "StepActivityEvent",
    "StepFinishedEvent",
    "StepStartedEvent",
]

EnrichMethod = Literal["none", "llm", "truncate"]

InjectPhase = Literal["prepare", "execute", "analyze", "synthesis"]
"""Where a DAG run is: enriching/planning, running steps, analysing, writing the answer."""


class _Event(BaseModel):
    model_config = ConfigDict(frozen=True)


class QueryEnrichedEvent(_Event):
    """Phase 1–2 done: history and query combined; ``method`` says how it was bounded.

    ``none``: it fitted the threshold; ``llm``: the history was summarised (``usage`` is
    that call); ``truncate``: summarising failed and older history was dropped instead.
    ``history_messages`` is how many history messages were loaded.
    """

    type: Literal["query_enriched"] = "query_enriched"
    summarized: bool
    method: EnrichMethod
    history_messages: int
    tokens_before: int
    tokens_after: int
    usage: Usage = Usage()


class PlanCreatedEvent(_Event):
    """A valid plan for ``round``; ``attempts`` is 2 when the planner had to be re-asked."""

    type: Literal["plan_created"] = "plan_created"
    round: int
    plan: Plan
    attempts: int = 1
    usage: Usage = Usage()


class StepStartedEvent(_Event):
    """A step's agent started (its dependencies are all done)."""

    type: Literal["step_started"] = "step_started"
    round: int
    step_id: str
    task: str
    dependencies: list[str] = []
    at: float


class StepFinishedEvent(StepResult):
    """A step ended: done, failed (with ``error``) or skipped (``error`` says why).

    It carries the step's whole :class:`StepResult` (its fields, flat on the wire) plus
    the round. A skipped step has no ``step_started`` event before it.
    """

    type: Literal["step_finished"] = "step_finished"
    round: int

    @classmethod
    def from_result(cls, round_number: int, result: StepResult) -> StepFinishedEvent:
        return cls(round=round_number, **dict(result))

    def to_result(self) -> StepResult:
        """The :class:`StepResult` this event reports."""
        return StepResult(**self.model_dump(exclude={"type", "round"}))


StepActivity = Annotated[
    ToolCallEvent | ToolResultEvent | CompactionNoticeEvent | WarningEvent,
    Field(discriminator="type"),
]
"""What a step agent reports while it works (its own agent events)."""


class StepActivityEvent(_Event):
    """Something a running step agent did: a tool call, a tool result, a compaction of
    its context, a repeated-call warning. ``activity`` is the agent's own event."""

    type: Literal["step_activity"] = "step_activity"
    round: int
    step_id: str
    activity: StepActivity


class AnalysisEvent(_Event):
    """The analyzer's verdict on a round. ``error`` is set (and the verdict fields are
    ``None``) when the analyzer call itself failed; the run then goes on to synthesis."""

    type: Literal["analysis"] = "analysis"
    round: int
    achieved: bool | None
    confidence: float | None
    reasoning: str
    usage: Usage = Usage()
    error: str | None = None


class ReplanEvent(_Event):
    """The previous round was judged not achieved with low confidence; ``round`` is the
    new round about to be planned."""

    type: Literal["replan"] = "replan"
    round: int
    reason: str
    confidence: float


class ReplanFailedEvent(_Event):
    """Planning round ``round`` failed; the answer comes from the previous round."""

    type: Literal["replan_failed"] = "replan_failed"
    round: int
    error_type: str
    message: str
    usage: Usage = Usage()


class DAGInjectedEvent(_Event):
    """A message the user sent while the run worked was taken by the run.

    From now on it is in every step agent's context (pinned, kind "inject"), in the
    planner's and the analyzer's request and in the synthesis prompt. ``steps`` are the
    step agents that were running when it arrived and got it mid-work (the agent's own
    inject: it enters at their next iteration); ``phase`` is where the run was; ``round``
    is the round under way (0 before the first plan was asked for).
    """

    type: Literal["injected"] = "injected"
    text: str
    round: int
    phase: InjectPhase
    steps: list[str] = []


class DAGDoneEvent(_Event):
    """The run finished. ``usage`` sums every LLM call of the run (enrichment summary,
    planner incl. re-asks, every step incl. its compactions, analyzer, synthesis);
    ``rounds`` is how many plan→execute→analyze rounds ran (1 + replans)."""

    type: Literal["done"] = "done"
    answer: str
    usage: Usage
    rounds: int
    elapsed: float
    achieved: bool | None = None


class DAGErrorEvent(_Event):
    """The run stopped: ``error_type`` is the exception class (e.g. ``PlanError``).
    ``usage`` is what the run had consumed until then."""

    type: Literal["error"] = "error"
    message: str
    error_type: str
    round: int
    usage: Usage = Usage()
    elapsed: float = 0.0


DAGEvent = Annotated[
    QueryEnrichedEvent
    | PlanCreatedEvent
    | StepStartedEvent
    | StepFinishedEvent
    | StepActivityEvent
    | AnalysisEvent
    | ReplanEvent
    | ReplanFailedEvent
    | DAGInjectedEvent
    | AnswerDeltaEvent
    | DAGDoneEvent
    | DAGErrorEvent,
    Field(discriminator="type"),
]
"""Any event of a DAG run, discriminated by ``type``."""

DAG_EVENT_ADAPTER: TypeAdapter[DAGEvent] = TypeAdapter(DAGEvent)
"""Validates a JSON/dict event back into its class: ``DAG_EVENT_ADAPTER.validate_json(s)``."""
