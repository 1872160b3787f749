"""The DAG engine: plan a request as a graph of steps, run them in parallel, check, answer.

``from ctxstack.dag import DAGEngine`` runs the whole pipeline (see
:mod:`ctxstack.dag._engine` for the six phases and how rounds are counted); the parts are
usable on their own: :class:`DAGPlanner`, :class:`DAGExecutor`, :class:`PlanAnalyzer`,
:func:`build_enriched_query`, :func:`stream_synthesize`.
"""

from ctxstack.dag._analyzer import Analysis, AnalysisResult, PlanAnalyzer
from ctxstack.dag._engine import DAGEngine, DAGResult
from ctxstack.dag._enrich import EnrichedQuery, build_enriched_query
from ctxstack.dag._events import (
    DAG_EVENT_ADAPTER,
    AnalysisEvent,
    AnswerDeltaEvent,
    DAGDoneEvent,
    DAGErrorEvent,
    DAGEvent,
    DAGInjectedEvent,
    PlanCreatedEvent,
    QueryEnrichedEvent,
    ReplanEvent,
    ReplanFailedEvent,
    StepActivityEvent,
    StepFinishedEvent,
    StepStartedEvent,
)
from ctxstack.dag._executor import DAGExecutor
from ctxstack.dag._plan import Plan, PlanDraft, PlanStep
from ctxstack.dag._planner import DAGPlanner, PlanResult, ReplanContext
from ctxstack.dag._results import ExecutionResult, StepResult, StepStatus
from ctxstack.dag._synthesis import stream_synthesize

__all__ = [
    "DAG_EVENT_ADAPTER",
    "Analysis",
    "AnalysisEvent",
    "AnalysisResult",
    "AnswerDeltaEvent",
    "DAGDoneEvent",
    "DAGEngine",
    "DAGErrorEvent",
    "DAGEvent",
    "DAGExecutor",
    "DAGInjectedEvent",
    "DAGPlanner",
    "DAGResult",
    "EnrichedQuery",
    "ExecutionResult",
    "Plan",
    "PlanAnalyzer",
    "PlanCreatedEvent",
    "PlanDraft",
    "PlanResult",
    "PlanStep",
    "QueryEnrichedEvent",
    "ReplanContext",
    "ReplanEvent",
    "ReplanFailedEvent",
    "StepActivityEvent",
    "StepFinishedEvent",
    "StepResult",
    "StepStartedEvent",
    "StepStatus",
    "build_enriched_query",
    "stream_synthesize",
]
