"""The DAG engine: a small driver over the six phases, yielding typed events.

::

    1–2  build_enriched_query     history + query, bounded to 16K tokens (fast LLM summary)
    3    DAGPlanner.plan          two messages → validated Plan (main LLM)
    4    DAGExecutor.run_events   parallel step agents, fast LLM and budget
    5    PlanAnalyzer.analyze     achieved / confidence / reasoning (main LLM)
    6    replan?                  back to 3 with 500-char step summaries
         stream_synthesize        final answer streamed (main LLM)

How rounds are counted (this is the contract the tests pin down):

* a *round* is one plan → execute → analyze pass; round 1 always runs;
* after round ``r`` is analysed, the engine replans — starts round ``r + 1`` — only if the
  analysis succeeded, ``achieved`` is false, ``confidence < confidence_threshold``
  (default 0.8) **and** ``r <= max_replans`` (default 2);
* so a run has ``1 + replans`` rounds with ``replans <= max_replans``: at most 3 plans,
  3 executions and 3 analyses by default; ``max_replans=0`` means exactly one round. The
  last round is analysed too (its verdict is reported in ``done.achieved``) even when no
  replan could follow;
* the final answer is synthesised from the **last** round's step results.

If the analyzer call fails, the run reports it in the ``analysis`` event and goes on to
synthesis without replanning. If a *re*plan fails (``PlanError`` or a provider error), a
``replan_failed`` event says so and the answer is synthesised from the round that did run
(``done.rounds`` counts only rounds that ran). A first-round planner failure
(:class:`~ctxstack.errors.PlanError`, ``StructuredOutputError``) or a provider error
outside the steps ends the run with an ``error`` event (:meth:`DAGEngine.run_events`)
or the exception (:meth:`DAGEngine.run`). A step's failure is not a run failure: it is
recorded and its dependants are skipped.

Injects: :meth:`DAGEngine.inject` gives a running run a message the user sent meanwhile.
Until the synthesis starts it is taken — handed to the running step agents, and given to
every later step, planner request, analyzer request and the synthesis prompt — and a
``injected`` event reports it; once the answer is being written it is refused (the method
returns False) so the caller can keep it for the next turn. The routing is
:func:`ctxstack.dag._injects.route_inject`.

Usage: every LLM handed to a phase is metered by the run, so ``done.usage`` is the sum of
every call — the memory's compaction on load (as ``DbMemory.usage`` reports it), the
enrichment summary, the planner and its re-asks, every step with its guard's compactions
(failed steps too), the analyzer and the synthesis.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict

from ctxstack.agent import Tool
from ctxstack.budget import ModelBudget, resolve_budget
from ctxstack.dag._analyzer import Analysis, PlanAnalyzer
from ctxstack.dag._context import STEP_CONTEXT_MAX_CHARS, SYNTHESIS_MAX_CHARS
from ctxstack.dag._enrich import PLANNER_INPUT_THRESHOLD_TOKENS, EnrichedQuery, build_enriched_query
from ctxstack.dag._events import (
    AnalysisEvent,
    AnswerDeltaEvent,
    DAGDoneEvent,
    DAGErrorEvent,
    DAGEvent,
    PlanCreatedEvent,
    QueryEnrichedEvent,
    ReplanEvent,
    ReplanFailedEvent,
    StepFinishedEvent,
)
from ctxstack.dag._executor import DAGExecutor
from ctxstack.dag._injects import RunInbox
from ctxstack.dag._plan import Plan
from ctxstack.dag._planner import DEFAULT_MAX_STEPS, DAGPlanner, ReplanContext
from ctxstack.dag._prompts import (
    ANALYZER_SYSTEM_PROMPT,
    PLANNER_SYSTEM_PROMPT,
    STEP_SYSTEM_PROMPT,
    SYNTHESIS_SYSTEM_PROMPT,
)
from ctxstack.dag._results import StepResult
from ctxstack.dag._synthesis import stream_synthesize
from ctxstack.errors import ConfigError, CtxstackError, InputError, LLMError, PlanError
from ctxstack.memory import BaseMemory
from ctxstack.messages import ChatMessage
from ctxstack.protocol import LLM, ChatStream, Usage
from ctxstack.tokens import TokenCounter, UsageMeter

log = logging.getLogger(__name__)


class DAGResult(BaseModel):
    """What :meth:`DAGEngine.run` returns: the answer and how it was reached."""

    model_config = ConfigDict(frozen=True)

    answer: str
    usage: Usage
    rounds: int
    elapsed: float
    achieved: bool | None
    enriched: EnrichedQuery
    plan: Plan
    results: list[StepResult]
    analyses: list[Analysis]


@dataclass
class _Run:
    """One run's inputs and mutable bookkeeping (kept out of the engine so runs can
    overlap)."""

    meter: UsageMeter
    t0: float
    query: str
    memory: BaseMemory | None = None
    history: Sequence[ChatMessage] | None = None
    round: int = 0
    enriched: EnrichedQuery | None = None
    plan: Plan | None = None
    results: list[StepResult] = field(default_factory=list)
    analyses: list[Analysis] = field(default_factory=list)
    achieved: bool | None = None
    inbox: RunInbox = field(default_factory=RunInbox)


@dataclass
class _RoundOutcome:
    """What one round decided: the context of the next round, if the analyzer asked for one."""

    replan: ReplanContext | None = None


class DAGEngine:
    """Plan, run in parallel, analyse, replan if needed, stream the answer.

    Args:
        llm: the main model (planner, analyzer, synthesis).
        tools: the tools every step agent gets (also listed to the planner).
        fast_llm: the model of the step agents and of the enrichment summary; ``llm``
            if omitted.
        fast_budget: the step agents' budget; ``resolve_budget("fast")`` if omitted.
        max_replans: at most this many replans (see the module docstring).
        confidence_threshold: replan only below this confidence.
        max_concurrency: steps running at once.
        summary_threshold_tokens: the planner-input bound (16,000).
        max_message_chars: the step guards' per-message cap (50,000).
        synthesis_max_chars: room for step results in the synthesis prompt.
        max_steps: a larger plan is invalid (re-ask, then ``PlanError``).
        step_max_iterations: ReAct iteration cap per step.
        compact_steps_with_llm: step guards summarise with ``fast_llm`` (else truncate).
        agent_options: extra keyword arguments for every step ``ReActAgent``.
        planner_prompt: the planner's system prompt.
        step_prompt: each step agent's system prompt.
        analyzer_prompt: the result analyzer's system prompt.
        synthesis_prompt: the final answer's system prompt.
        counter: token counter for the planner-input bound.
        step_counter: token counter of the step guards (they run on the fast model's
            budget, so e.g. the fast model's calibrating counter).
        clock: monotonic seconds.
    """

    def __init__(
        self,
        llm: LLM,
        tools: Sequence[Tool] = (),
        *,
        fast_llm: LLM | None = None,
        fast_budget: ModelBudget | None = None,
        max_replans: int = 2,
        confidence_threshold: float = 0.8,
        max_concurrency: int = 4,
        summary_threshold_tokens: int = PLANNER_INPUT_THRESHOLD_TOKENS,
        max_message_chars: int = STEP_CONTEXT_MAX_CHARS,
        synthesis_max_chars: int = SYNTHESIS_MAX_CHARS,
        max_steps: int = DEFAULT_MAX_STEPS,
        step_max_iterations: int = 20,
        compact_steps_with_llm: bool = True,
        agent_options: Mapping[str, Any] | None = None,
        planner_prompt: str = PLANNER_SYSTEM_PROMPT,
        step_prompt: str = STEP_SYSTEM_PROMPT,
        analyzer_prompt: str = ANALYZER_SYSTEM_PROMPT,
        synthesis_prompt: str = SYNTHESIS_SYSTEM_PROMPT,
        counter: TokenCounter | None = None,
        step_counter: TokenCounter | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        if max_replans < 0:
            raise ConfigError(f"max_replans: must be >= 0, got {max_replans}")
        if not 0.0 <= confidence_threshold <= 1.0:
            raise ConfigError(
                f"confidence_threshold: must be within 0..1, got {confidence_threshold}"
            )
        self.llm = llm
        self.tools = list(tools)
        self.fast_llm = fast_llm or llm
        self.fast_budget = fast_budget or resolve_budget("fast")
        self.max_replans = max_replans
        self.confidence_threshold = confidence_threshold
        self.max_concurrency = max_concurrency
        self.summary_threshold_tokens = summary_threshold_tokens
        self.max_message_chars = max_message_chars
        self.synthesis_max_chars = synthesis_max_chars
        self.max_steps = max_steps
        self.step_max_iterations = step_max_iterations
        self.compact_steps_with_llm = compact_steps_with_llm
        self.agent_options = dict(agent_options or {})
        self.planner_prompt = planner_prompt
        self.step_prompt = step_prompt
        self.analyzer_prompt = analyzer_prompt
        self.synthesis_prompt = synthesis_prompt
        self.counter = counter
        self.step_counter = step_counter
        self.clock = clock
        self._inboxes: list[RunInbox] = []
        self._waiting: list[str] = []

    # ------------------------------------------------------------------ injects
    def inject(self, text: str) -> bool:
        """Give the running run a message the user sent meanwhile (safe from another task).

        Returns True when it was taken: before the synthesis starts it reaches the step
        agents running now (at their next iteration) and every later step, planner
        request, analyzer request and the synthesis prompt, and the run yields an
        ``injected`` event (:class:`~ctxstack.dag.DAGInjectedEvent`). Returns False
        when the run is already writing its answer: the message was *not* consumed, and the
        caller should keep it (the chat service stores it for the next turn). A message
        injected while no run is active waits for the next run (True), as with
        :meth:`ctxstack.agent.ReActAgent.inject`; with several runs at once every run that
        can take it does.

        Raises:
            InputError: ``text`` is empty.
        """
        if not isinstance(text, str) or not text.strip():
            raise InputError("inject: expected a non-empty message text")
        if not self._inboxes:
            self._waiting.append(text)
            return True
        taken = [inbox.offer(text) for inbox in self._inboxes]
        return any(taken)

    # ------------------------------------------------------------------ decisions
    def should_replan(self, analysis: Analysis, round_number: int) -> bool:
        """Phase 6's rule (pure): not achieved, low confidence, replans left."""
        return (
            not analysis.achieved
            and analysis.confidence < self.confidence_threshold
            and round_number <= self.max_replans
        )

    # ------------------------------------------------------------------ components
    def make_planner(self, llm: LLM) -> DAGPlanner:
        return DAGPlanner(
            llm, system_prompt=self.planner_prompt, tools=self.tools, max_steps=self.max_steps
        )

    def make_executor(self, fast_llm: LLM) -> DAGExecutor:
        return DAGExecutor(
            fast_llm,
            self.tools,
            budget=self.fast_budget,
            compact_with_llm=self.compact_steps_with_llm,
            counter=self.step_counter,
            max_concurrency=self.max_concurrency,
            max_message_chars=self.max_message_chars,
            system_prompt=self.step_prompt,
            max_iterations=self.step_max_iterations,
            agent_options=self.agent_options,
            clock=self.clock,
        )

    def make_analyzer(self, llm: LLM) -> PlanAnalyzer:
        return PlanAnalyzer(llm, system_prompt=self.analyzer_prompt)

    def stream_synthesize(
        self, query: str, results: Sequence[StepResult], *, llm: LLM | None = None
    ) -> ChatStream:
        """Stream the final answer to ``query`` from ``results`` (main LLM by default)."""
        return stream_synthesize(
            llm or self.llm, query, results,
            system_prompt=self.synthesis_prompt, max_chars=self.synthesis_max_chars,
        )

    # ------------------------------------------------------------------ driving
    async def run_events(
        self,
        query: str,
        *,
        memory: BaseMemory | None = None,
        history: Sequence[ChatMessage] | None = None,
    ) -> AsyncGenerator[DAGEvent, None]:
        """Run the pipeline for ``query``, yielding events (see :mod:`ctxstack.dag._events`).

        Never raises for a run failure: the last event is then ``error``. Closing the
        iterator early cancels running steps.
        """
        run = _Run(meter=UsageMeter(), t0=self.clock(), query=query, memory=memory,
                   history=history)
        try:
            # aclosing: closing this iterator early must close the inner ones *now* (and so
            # cancel running steps), not whenever the garbage collector gets to them.
            async with aclosing(
                self._with_injects(run)
            ) as events:
                async for event in events:
                    yield event
        except Exception as exc:
            log.warning("DAG run failed in round %d: %s: %s", run.round, type(exc).__name__, exc)
            for notice in run.inbox.drain():  # taken before the failure: still reported
                yield notice
            yield DAGErrorEvent(
                message=str(exc) or type(exc).__name__, error_type=type(exc).__name__,
                round=run.round, usage=run.meter.usage, elapsed=self.clock() - run.t0,
            )

    async def run(
        self,
        query: str,
        *,
        memory: BaseMemory | None = None,
        history: Sequence[ChatMessage] | None = None,
    ) -> DAGResult:
        """Run the pipeline to the end and return the result.

        Raises:
            PlanError, StructuredOutputError, LLMError: as described in the module docstring.
        """
        run = _Run(meter=UsageMeter(), t0=self.clock(), query=query, memory=memory,
                   history=history)
        done: DAGDoneEvent | None = None
        events = self._with_injects(run)
        async with aclosing(events):
            async for event in events:
                if isinstance(event, DAGDoneEvent):
                    done = event
        if done is None or run.enriched is None or run.plan is None:  # pragma: no cover
            raise CtxstackError("the DAG run ended without a done event")
        return DAGResult(
            answer=done.answer, usage=done.usage, rounds=done.rounds, elapsed=done.elapsed,
            achieved=done.achieved, enriched=run.enriched, plan=run.plan,
            results=run.results, analyses=run.analyses,
        )

    async def _with_injects(self, run: _Run) -> AsyncGenerator[DAGEvent, None]:
        """The run's events with ``injected`` events slipped in as injects are taken.

        An inject is reported before the next event of the run after it was taken; the
        inbox refuses injects once the synthesis starts, so every taken inject is
        reported before ``done``.
        """
        inbox = run.inbox
        self._inboxes.append(inbox)
        waiting, self._waiting = self._waiting, []
        for text in waiting:
            inbox.offer(text)
        try:
            async with aclosing(self._events(run)) as events:
                async for event in events:
                    for notice in inbox.drain():
                        yield notice
                    yield event
        finally:
            inbox.phase = "synthesis"  # a run that ended takes nothing any more
            self._inboxes.remove(inbox)

    async def _events(self, run: _Run) -> AsyncGenerator[DAGEvent, None]:
        main = run.meter.wrap(self.llm)
        fast = run.meter.wrap(self.fast_llm)
        async for event in self._enrich_events(run, fast):
            yield event
        planner = self.make_planner(main)
        executor = self.make_executor(fast)
        analyzer = self.make_analyzer(main)
        outcome = _RoundOutcome()
        while True:
            previous, outcome = outcome.replan, _RoundOutcome()
            async for event in self._round_events(
                run, planner, executor, analyzer, previous, outcome
            ):
                yield event
            if outcome.replan is None:
                break
        async for event in self._synthesis_events(run, main):
            yield event

    async def _enrich_events(self, run: _Run, fast: LLM) -> AsyncGenerator[DAGEvent, None]:
        before = run.meter.usage
        enriched = await build_enriched_query(
            run.query, memory=run.memory, history=run.history, fast_llm=fast,
            threshold_tokens=self.summary_threshold_tokens, counter=self.counter,
        )
        run.enriched = enriched
        # A memory's own calls (DbMemory compacting on load) bypass the run's wrappers.
        run.meter.add(enriched.load_usage)
        yield QueryEnrichedEvent(
            summarized=enriched.summarized, method=enriched.method,
            history_messages=enriched.history_messages, tokens_before=enriched.tokens_before,
            tokens_after=enriched.tokens_after, usage=run.meter.usage - before,
        )

    async def _round_events(
        self,
        run: _Run,
        planner: DAGPlanner,
        executor: DAGExecutor,
        analyzer: PlanAnalyzer,
        previous: ReplanContext | None,
        outcome: _RoundOutcome,
    ) -> AsyncGenerator[DAGEvent, None]:
        """One round: plan (or replan), run the steps, judge them.

        Sets ``outcome.replan`` when the analyzer asks for another round.
        """
        assert run.enriched is not None
        inbox = run.inbox
        run.round += 1
        inbox.round = run.round
        inbox.phase = "prepare"
        before = run.meter.usage
        try:
            planned = await planner.plan(inbox.query(run.enriched.text), previous=previous)
        except (PlanError, LLMError) as exc:
            if previous is None:
                raise  # no plan at all: the run cannot go on
            # A failed *re*plan must not throw away the round that did run: answer from
            # it, and say so.
            log.warning("replan for round %d failed (%s: %s); answering from round %d",
                        run.round, type(exc).__name__, exc, previous.round)
            yield ReplanFailedEvent(
                round=run.round, error_type=type(exc).__name__, message=str(exc),
                usage=run.meter.usage - before,
            )
            run.round -= 1
            return
        plan = run.plan = planned.plan
        yield PlanCreatedEvent(
            round=run.round, plan=plan, attempts=planned.attempts,
            usage=run.meter.usage - before,
        )

        results: dict[str, StepResult] = {}
        inbox.phase = "execute"
        steps = executor.run_events(plan, round_number=run.round, inbox=inbox)
        async with aclosing(steps):
            async for step_event in steps:
                if isinstance(step_event, StepFinishedEvent):
                    results[step_event.step_id] = step_event.to_result()
                yield step_event
        run.results = [results[s.id] for s in plan.steps]

        before = run.meter.usage
        inbox.phase = "analyze"
        try:
            verdict = (
                await analyzer.analyze(inbox.query(run.enriched.text), plan, results)
            ).analysis
        except LLMError as exc:
            run.achieved = None
            yield AnalysisEvent(
                round=run.round, achieved=None, confidence=None, reasoning="",
                usage=run.meter.usage - before, error=f"{type(exc).__name__}: {exc}",
            )
            return
        run.analyses.append(verdict)
        run.achieved = verdict.achieved
        yield AnalysisEvent(
            round=run.round, achieved=verdict.achieved, confidence=verdict.confidence,
            reasoning=verdict.reasoning, usage=run.meter.usage - before,
        )
        if self.should_replan(verdict, run.round):
            outcome.replan = ReplanContext(
                round=run.round, plan=plan, results=results, reasoning=verdict.reasoning
            )
            yield ReplanEvent(
                round=run.round + 1, reason=verdict.reasoning, confidence=verdict.confidence
            )

    async def _synthesis_events(self, run: _Run, main: LLM) -> AsyncGenerator[DAGEvent, None]:
        assert run.enriched is not None
        run.inbox.phase = "synthesis"  # from here on injects are refused (kept for next turn)
        stream = self.stream_synthesize(run.inbox.query(run.enriched.text), run.results, llm=main)
        parts: list[str] = []
        try:
            async for delta in stream:
                parts.append(delta)
                yield AnswerDeltaEvent(text=delta)
        finally:
            await stream.aclose()
        yield DAGDoneEvent(
            answer="".join(parts), usage=run.meter.usage, rounds=run.round,
            elapsed=self.clock() - run.t0, achieved=run.achieved,
        )

