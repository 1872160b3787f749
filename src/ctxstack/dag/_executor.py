"""Phase 4: run a plan's steps, each as a fresh ReAct agent, as parallel as the graph allows.

Scheduling: a step starts as soon as every step it depends on has finished — not when its
whole topological layer has — so the wall time approaches the plan's critical path.
``max_concurrency`` (a semaphore) bounds how many step agents run at once.

Isolation: every step gets a new :class:`~ctxstack.agent.ReActAgent` with **no memory** and
its **own** :class:`~ctxstack.guard.ContextGuard` on the **fast** budget. It starts from its
task and its dependencies' results only (:func:`_build_step_context`), cut so the message
fits the guard's ``max_message_chars`` (50,000). A step is a self-contained unit of work;
nothing leaks between steps except declared results.

Failure: an exception from a step agent (or an empty answer) makes the step ``failed`` with
the error recorded; every step that depends on it, directly or not, is ``skipped`` with the
reason. Other branches of the plan carry on.

Injects: given a :class:`~ctxstack.dag._injects.RunInbox`, every step agent is attached to
it before it runs (so it starts with the injects taken so far, pinned, and gets those
arriving while it works) and detached when it ends.

Dependencies over their cut: a dependency result longer than its share of the starting
message is first summarised by the compact model with the ``step_dependency`` hint
(:mod:`ctxstack.dag._dependencies`), the character cut being the fallback; each attempt is
relayed as a compaction of the step (``CompactionNoticeEvent`` at iteration 0). The
summariser is asked with the producing step's context (kept per run until it ends) and its
tools first, the prefix the provider cached for that step's last call.

Usage: each step's LLM (and its guard's compaction LLM) is metered, so a step's usage
includes its compactions and the calls it made before failing.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from functools import partial
from typing import Any

from ctxstack.agent import (
    AgentEvent,
    CompactionNoticeEvent,
    ReActAgent,
    Tool,
    ToolCallEvent,
    ToolResultEvent,
    WarningEvent,
)
from ctxstack.budget import ModelBudget, resolve_budget
from ctxstack.compaction import HistoryArchive
from ctxstack.dag._context import STEP_CONTEXT_MAX_CHARS, build_step_context
from ctxstack.dag._dependencies import StepConversation, condense_dependencies
from ctxstack.dag._events import StepActivityEvent, StepFinishedEvent, StepStartedEvent
from ctxstack.dag._injects import RunInbox
from ctxstack.dag._plan import Plan, PlanStep
from ctxstack.dag._prompts import STEP_SYSTEM_PROMPT
from ctxstack.dag._results import ExecutionResult, StepResult
from ctxstack.errors import ConfigError
from ctxstack.guard import CompactionEvent, ContextGuard
from ctxstack.protocol import LLM
from ctxstack.tokens import DEFAULT_COUNTER, TokenCounter, UsageMeter

_build_step_context = build_step_context
"""The seed's name for the function that builds a step's starting message."""

GuardFactory = Callable[[LLM | None, ModelBudget, int], ContextGuard]
"""``(compact_llm, budget, max_message_chars) -> ContextGuard`` for one step.

``compact_llm`` is already metered for the step: build the guard with it, so compaction
usage is counted in the step's usage."""

ExecutorEvent = StepStartedEvent | StepActivityEvent | StepFinishedEvent
AgentCallback = Callable[[AgentEvent], None]


def default_guard(
    compact_llm: LLM | None,
    budget: ModelBudget,
    max_chars: int,
    counter: TokenCounter | None = None,
) -> ContextGuard:
    """A ContextGuard on ``budget`` that compacts with ``compact_llm`` (truncates if None).

    Each step gets its own :class:`~ctxstack.compaction.HistoryArchive`: whatever the step's
    guard masks, summarises or drops stays readable through the step agent's ``recall``
    tool (offered as soon as something was archived).
    """
    return ContextGuard(
        compact_llm=compact_llm, default_budget=budget, max_message_chars=max_chars,
        counter=counter, archive=HistoryArchive(),
    )


class DAGExecutor:
    """Runs plans. One executor may run many plans, also concurrently.

    Args:
        llm: the model every step agent uses (normally the fast model).
        tools: the tools every step agent gets.
        budget: the steps' input budget; ``resolve_budget("fast")`` when omitted.
        compact_llm: the model the step guards summarise with; defaults to ``llm``.
            Pass ``compact_with_llm=False`` to have the guards truncate instead.
        guard_factory: builds each step's guard (see :data:`GuardFactory`).
        counter: the token counter of the default step guards (e.g. a calibrating
            counter for the fast model); ignored when ``guard_factory`` is given.
        max_concurrency: at most this many steps run at once.
        max_message_chars: the guard's per-message cap; a step's starting message (task +
            dependency results) is cut to fit it.
        system_prompt: the step agents' system prompt.
        max_iterations: ReAct iteration cap per step.
        agent_options: extra keyword arguments for every ``ReActAgent``.
        clock: monotonic seconds (tests and benchmarks may pass their own).
    """

    def __init__(
        self,
        llm: LLM,
        tools: Sequence[Tool] = (),
        *,
        budget: ModelBudget | None = None,
        compact_llm: LLM | None = None,
        compact_with_llm: bool = True,
        guard_factory: GuardFactory | None = None,
        counter: TokenCounter | None = None,
        max_concurrency: int = 4,
        max_message_chars: int = STEP_CONTEXT_MAX_CHARS,
        system_prompt: str = STEP_SYSTEM_PROMPT,
        max_iterations: int = 20,
        agent_options: Mapping[str, Any] | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        if max_concurrency < 1:
            raise ConfigError(f"max_concurrency: must be at least 1, got {max_concurrency}")
        if max_message_chars < 1_000:
            raise ConfigError(f"max_message_chars: must be at least 1000, got {max_message_chars}")
        self.llm = llm
        self.tools = list(tools)
        self.budget = budget or resolve_budget("fast")
        self.compact_llm: LLM | None = (compact_llm or llm) if compact_with_llm else None
        self.guard_factory: GuardFactory = guard_factory or partial(
            default_guard, counter=counter
        )
        self.counter: TokenCounter = counter or DEFAULT_COUNTER
        self.max_concurrency = max_concurrency
        self.max_message_chars = max_message_chars
        self.system_prompt = system_prompt
        self.max_iterations = max_iterations
        self.agent_options = dict(agent_options or {})
        if "memory" in self.agent_options:
            raise ConfigError("agent_options: step agents have no memory by design; "
                             "remove 'memory'")
        self.clock = clock

    async def run(self, plan: Plan) -> ExecutionResult:
        """Run ``plan`` and return every step's result, in plan order."""
        start = self.clock()
        results: dict[str, StepResult] = {}
        async with contextlib.aclosing(self.run_events(plan)) as events:
            async for event in events:
                if isinstance(event, StepFinishedEvent):
                    results[event.step_id] = event.to_result()
        return ExecutionResult(
            results=[results[s.id] for s in plan.steps], elapsed=self.clock() - start
        )

    async def run_events(
        self, plan: Plan, *, round_number: int = 1, inbox: RunInbox | None = None
    ) -> AsyncGenerator[ExecutorEvent, None]:
        """Run ``plan``, yielding ``step_started`` / ``step_finished`` as they happen.

        Every step gets exactly one ``step_finished``; skipped steps get no
        ``step_started``. Between the two, ``step_activity`` events relay what the step
        agent does (tool calls and results, compactions, warnings). Closing the iterator
        early cancels the running steps. ``inbox`` (optional) delivers the user's
        mid-run messages to the step agents (see the module docstring).
        """
        t0 = self.clock()
        queue: asyncio.Queue[ExecutorEvent | None] = asyncio.Queue()
        results: dict[str, StepResult] = {}
        # each finished step's context, for the summaries of its result (their cached prefix)
        conversations: dict[str, StepConversation] = {}
        finished = {s.id: asyncio.Event() for s in plan.steps}
        slots = asyncio.Semaphore(self.max_concurrency)

        async def run_one(step: PlanStep) -> None:
            for dep in step.dependencies:
                await finished[dep].wait()
            blocked = [results[d] for d in step.dependencies if not results[d].ok]
            if blocked:
                result = _skipped(step, blocked)
            else:
                async with slots:
                    started = self.clock() - t0
                    queue.put_nowait(StepStartedEvent(
                        round=round_number, step_id=step.id, task=step.task,
                        dependencies=step.dependencies, at=started,
                    ))

                    def relay(event: AgentEvent, step_id: str = step.id) -> None:
                        if isinstance(event, _RELAYED):
                            queue.put_nowait(StepActivityEvent(
                                round=round_number, step_id=step_id, activity=event
                            ))

                    result = await self._run_step(
                        step, results, started, t0, relay, inbox, conversations
                    )
            results[step.id] = result
            queue.put_nowait(StepFinishedEvent.from_result(round_number, result))
            finished[step.id].set()

        async def run_all() -> None:
            try:
                async with asyncio.TaskGroup() as group:
                    for step in plan.steps:
                        group.create_task(run_one(step))
            finally:
                queue.put_nowait(None)

        runner = asyncio.create_task(run_all())
        try:
            while (event := await queue.get()) is not None:
                yield event
            await runner  # surfaces a bug in the scheduler itself, if any
        finally:
            if not runner.done():
                runner.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await runner

    def make_agent(
        self, llm: LLM, guard: ContextGuard, on_event: AgentCallback | None = None
    ) -> ReActAgent:
        """A fresh step agent: no memory, its own guard, the fast budget."""
        options: dict[str, Any] = {
            "system_prompt": self.system_prompt,
            "budget": self.budget,
            "max_iterations": self.max_iterations,
            **self.agent_options,
        }
        user_callback = options.get("on_event")
        if on_event is not None and user_callback is not None:
            def both(event: AgentEvent) -> Any:
                on_event(event)
                return user_callback(event)

            options["on_event"] = both
        elif on_event is not None:
            options["on_event"] = on_event
        return ReActAgent(llm, self.tools, guard, memory=None, **options)

    async def _run_step(
        self,
        step: PlanStep,
        results: dict[str, StepResult],
        started: float,
        t0: float,
        relay: AgentCallback | None = None,
        inbox: RunInbox | None = None,
        conversations: dict[str, StepConversation] | None = None,
    ) -> StepResult:
        meter = UsageMeter()
        compact = meter.wrap(self.compact_llm) if self.compact_llm is not None else None

        def report(event: CompactionEvent) -> None:
            if relay is not None:
                relay(CompactionNoticeEvent(iteration=0, compaction=event))

        inputs = await condense_dependencies(step, results, self.max_message_chars, compact,
                                             counter=self.counter, report=report,
                                             conversations=conversations)
        query = _build_step_context(step, inputs, self.max_message_chars)
        try:
            guard = self.guard_factory(compact, self.budget, self.max_message_chars)
            agent = self.make_agent(meter.wrap(self.llm), guard, relay)
            if inbox is not None:
                inbox.attach(step.id, agent)
            try:
                outcome = await agent.run(query)
            finally:
                if inbox is not None:
                    inbox.detach(step.id)
        except Exception as exc:  # a step's failure is data, not the run's failure
            return _finished(step, started, self.clock() - t0, meter, status="failed",
                             error=f"{type(exc).__name__}: {exc}")
        answer = outcome.answer.strip()
        if conversations is not None:
            conversations[step.id] = StepConversation.of(outcome.messages, outcome.tools)
        common: dict[str, Any] = {
            "iterations": outcome.iterations,
            "compactions": _count(outcome.compactions),
            "stopped_reason": outcome.stopped_reason,
        }
        if not answer:
            return _finished(step, started, self.clock() - t0, meter, status="failed",
                             error="the step agent gave an empty answer", **common)
        return _finished(step, started, self.clock() - t0, meter, status="done",
                         answer=answer, **common)


_RELAYED = (ToolCallEvent, ToolResultEvent, CompactionNoticeEvent, WarningEvent)


def _count(compactions: object) -> int:
    if isinstance(compactions, int):
        return compactions
    if isinstance(compactions, Sequence):
        return len(compactions)
    return 0


def _finished(
    step: PlanStep, started: float, ended: float, meter: UsageMeter, **fields: Any
) -> StepResult:
    return StepResult(
        step_id=step.id, task=step.task, started_at=started, finished_at=ended,
        duration=ended - started, usage=meter.usage, **fields,
    )


def _skipped(step: PlanStep, blocked: list[StepResult]) -> StepResult:
    reasons = [
        f"dependency {r.step_id!r} {'failed' if r.status == 'failed' else 'was skipped'}"
        for r in blocked
    ]
    return StepResult(
        step_id=step.id, task=step.task, status="skipped", error="; ".join(reasons)
    )
