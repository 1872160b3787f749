"""The ReAct agent: a small driver around the guard, the model and the tools.

One run (seed: "how context flows through ReAct")::

    messages = system prompt + history (memory, summaries included) + query (pinned)
    each iteration:
        inject queued user messages (pinned, kind "inject")
        messages = guard.check_and_compact(messages, budget, hint="react_iteration")
        reply = llm.chat(messages, tools=…)            # non-streaming: fast tool loop
        tool calls  → run them concurrently, append the call + results (call order)
                      same call repeated cycle_threshold times → warning message
        final answer → injected meanwhile? answer again with it in view
                      ≥ checklist_threshold tool calls, no checklist yet → checklist, loop
                      else done
    iteration limit → an honest partial answer (never an exception)

then, optionally, :meth:`ReActAgent.stream_answer` streams a synthesis with ``stream_chat()``.

Every decision lives in :mod:`ctxstack.agent._decisions` as a pure function; this module
does the I/O and emits :mod:`~ctxstack.agent._events`. :meth:`ReActAgent.run_events` is the
one code path: :meth:`ReActAgent.run` consumes it, and the optional ``on_event`` callback
sees every event either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable
from typing import Protocol

from ctxstack.agent import _decisions as decisions
from ctxstack.agent._events import (
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
from ctxstack.agent._prompts import DEFAULT_SYSTEM_PROMPT
from ctxstack.agent._recall import RECALL_TOOL_NAME, recall_tool
from ctxstack.agent._result import AgentResult, StopReason, ToolTraceEntry
from ctxstack.agent._tools import Tool, ToolFunction, ToolRegistry, as_registry
from ctxstack.budget import ModelBudget
from ctxstack.compaction import Archive, Hint
from ctxstack.compaction._prompts import strip_scratchpad
from ctxstack.errors import AgentError, ConfigError, ContextOverflowError, InputError, LLMError
from ctxstack.guard import CompactionEvent, GuardCheck
from ctxstack.memory import BaseMemory
from ctxstack.messages import ChatMessage, ToolCall
from ctxstack.protocol import LLM, LLMResult, ToolSpec, Usage
from ctxstack.tokens import HEURISTIC, TokenCounter
from ctxstack.tokens._counter import tool_specs_tokens

log = logging.getLogger(__name__)

EventCallback = Callable[[AgentEvent], Awaitable[None] | None]


class _Totals(Protocol):
    @property
    def usage(self) -> Usage: ...


class GuardLike(Protocol):
    """What the agent needs from :class:`ctxstack.guard.ContextGuard`.

    ``check`` may also take a keyword ``tools`` (the tools the coming model call carries,
    so a summary can reuse the conversation's cached prefix); a guard whose ``check`` does
    not is called without it.
    """

    async def check(
        self, messages: list[ChatMessage], budget: int | None = None, hint: Hint = "general"
    ) -> GuardCheck: ...

    @property
    def totals(self) -> _Totals: ...


def _offer(
    specs: list[ToolSpec] | None, recall: tuple[Tool, Archive] | None
) -> list[ToolSpec] | None:
    """The tools offered on this call: ``recall`` joins once something was archived."""
    if recall is None or not len(recall[1]):
        return specs
    return [*(specs or []), recall[0].spec()]


def _takes_tools(guard: object) -> bool:
    """Whether ``guard.check`` accepts a ``tools`` keyword (see :class:`GuardLike`)."""
    try:
        params = inspect.signature(guard.check).parameters  # type: ignore[attr-defined]
    except (AttributeError, TypeError, ValueError):
        return False
    return "tools" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def resolve_agent_budget(budget: int | ModelBudget | None, llm: LLM) -> int:
    """The input budget in tokens: explicit, from a :class:`ModelBudget`, or the model's
    own window (``context_size - max_output_tokens``, floored like every budget)."""
    if isinstance(budget, ModelBudget):
        return budget.usable_input_tokens
    if isinstance(budget, int) and not isinstance(budget, bool):
        if budget <= 0:
            raise ConfigError(f"budget: expected a positive number of tokens, got {budget}")
        return budget
    if budget is not None:
        raise ConfigError(f"budget: expected an int or ModelBudget, got {type(budget).__name__}")
    return ModelBudget(
        context_size=llm.context_size, max_output_tokens=llm.max_output_tokens
    ).usable_input_tokens


class _Run:
    """Mutable state of one run (kept off the agent so the agent object stays reusable)."""

    def __init__(self, query: str, guard_usage_start: Usage) -> None:
        self.query = query
        self.started = time.perf_counter()
        self.iteration = 0
        self.usage = Usage()
        self.guard_usage_start = guard_usage_start
        self.trace: list[ToolTraceEntry] = []
        self.calls: list[ToolCall] = []
        self.compactions: list[CompactionEvent] = []
        self.compactions_reported = 0
        self.injected: list[str] = []
        self.checklist_done = False
        self.tools: list[ToolSpec] | None = None
        """The tools the last model call carried."""


class ReActAgent:
    """A tool-using agent whose context the guard keeps within budget on every iteration.

    Args:
        llm: the main model (native tool calling).
        tools: :class:`Tool` objects, typed functions (wrapped with ``@tool``) or a
            :class:`ToolRegistry`.
        guard: a :class:`~ctxstack.guard.ContextGuard` (its compaction usage is counted in
            the result; its ``on_compact`` listeners keep working).
        system_prompt: the first message of every run.
        memory: where history comes from. After a run the query and the answer (the
            synthesis when ``run_events(synthesize=True)`` made one) are added to it; a
            read-only memory such as ``DbMemory`` ignores that.
        budget: input tokens per call — an int, a :class:`ModelBudget` (ReAct uses the
            main budget), or ``None`` for the model's own window.
        max_iterations: model calls in the loop before the honest partial answer.
        checklist_threshold: tool calls after which a final answer is checked once
            (``None`` disables the checklist).
        cycle_threshold: identical consecutive calls that trigger a warning (``None``
            disables it).
        fast_llm: optional cheaper model used to pick the relevant tools when there are
            more than ``tool_selection_threshold`` of them (failures fall back to all).
        tool_timeout: default seconds per tool call (a tool's own ``timeout`` wins).
        on_event: called (sync or async) with every :data:`AgentEvent`.
    """

    def __init__(
        self,
        llm: LLM,
        tools: ToolRegistry | Iterable[Tool | ToolFunction],
        guard: GuardLike,
        *,
        system_prompt: str = DEFAULT_SYSTEM_PROMPT,
        memory: BaseMemory | None = None,
        budget: int | ModelBudget | None = None,
        max_iterations: int = 20,
        checklist_threshold: int | None = 3,
        cycle_threshold: int | None = 3,
        fast_llm: LLM | None = None,
        tool_selection_threshold: int = 12,
        tool_timeout: float | None = 30.0,
        on_event: EventCallback | None = None,
    ) -> None:
        if max_iterations < 1:
            raise ConfigError(f"max_iterations: expected at least 1, got {max_iterations}")
        self.llm = llm
        self.tools = as_registry(tools)
        self.guard = guard
        self.system_prompt = system_prompt
        self.memory = memory
        self.budget = resolve_agent_budget(budget, llm)
        self.max_iterations = max_iterations
        self.checklist_threshold = checklist_threshold
        self.cycle_threshold = cycle_threshold
        self.fast_llm = fast_llm
        self.tool_selection_threshold = tool_selection_threshold
        self.tool_timeout = tool_timeout
        self.on_event = on_event
        self._guard_takes_tools = _takes_tools(guard)
        # deque.append / popleft are atomic, so inject() is safe from any task or thread.
        self._inbox: deque[str] = deque()
        self._running = False

    # ------------------------------------------------------------------ public API
    def inject(self, text: str) -> None:
        """Queue a user message for the running agent (safe from another task or thread).

        It enters the context at the start of the next iteration, pinned with kind
        "inject". If the model is producing its final answer meanwhile, that answer is set
        aside and the model answers again with the message in view. A message injected
        while no run is active waits for the next run's first iteration.
        """
        if not isinstance(text, str) or not text.strip():
            raise InputError("inject: expected a non-empty message text")
        self._inbox.append(text)

    async def run(self, query: str) -> AgentResult:
        """Run to an answer. Raises what the run raised (``AgentError``, ``LLMError``, …).

        The event stream is closed before returning, so the run's end (the agent no longer
        running) is settled at once: the same agent may run the next query right away.
        """
        async with contextlib.aclosing(self.run_events(query)) as events:
            async for event in events:
                if isinstance(event, DoneEvent):
                    return event.result
                if isinstance(event, ErrorEvent):
                    raise event.exception or AgentError(event.message)
        raise AgentError("the agent's event stream ended without a result")  # pragma: no cover

    async def run_events(
        self, query: str, *, synthesize: bool = False
    ) -> AsyncGenerator[AgentEvent, None]:
        """Run and yield every event, ending with exactly one ``done`` or ``error``.

        Failures are reported as an :class:`ErrorEvent` (never raised from here) so a
        streaming consumer always gets a clean end. With ``synthesize`` the final answer is
        also streamed (``answer_delta`` events) before ``done``, and ``done.result``
        carries the synthesis and its usage.
        """
        run: _Run | None = None
        try:
            if self._running:
                raise AgentError("this agent is already running a query; create another agent")
            if not isinstance(query, str) or not query.strip():
                raise InputError("query: expected a non-empty text")
            self._running = True
            run = _Run(query, self._guard_usage())
            result: AgentResult | None = None
            async for event in self._drive(run):
                if isinstance(event, DoneEvent):
                    result = event.result
                    continue
                await self._emit(event)
                yield event
            if result is None:  # pragma: no cover - _drive always ends with DoneEvent
                raise AgentError("the agent loop ended without a result")
            if synthesize:
                async for event in self._synthesize(run.query, result):
                    await self._emit(event)
                    yield event
            if self.memory is not None:
                await self.memory.add_message(ChatMessage.user(run.query))
                await self.memory.add_message(ChatMessage.assistant(result.final_answer))
            done = DoneEvent(result=result)
            await self._emit(done)
            yield done
        except Exception as exc:
            error = ErrorEvent.from_exception(exc, run.iteration if run else 0)
            log.warning("agent run failed: %s: %s", type(exc).__name__, exc)
            await self._emit(error)
            yield error
        finally:
            if run is not None:
                self._running = False

    async def stream_answer(self, query: str, result: AgentResult) -> AsyncIterator[str]:
        """Stream the final answer, synthesised from the query, the trace and the brief answer.

        The prompt goes through the guard (hint "general", the agent's budget) and then
        ``stream_chat()``. Afterwards ``result.usage`` includes the synthesis (and any
        compaction it needed) and ``result.synthesis`` holds the text. Events (answer
        deltas, a compaction) still reach ``on_event``.
        """
        async for event in self._synthesize(query, result):
            await self._emit(event)
            if isinstance(event, AnswerDeltaEvent):
                yield event.text

    # ------------------------------------------------------------------ the loop
    async def _drive(self, run: _Run) -> AsyncIterator[AgentEvent]:
        history = await self.memory.get_messages() if self.memory is not None else []
        messages = decisions.initial_messages(self.system_prompt, history, run.query)
        specs = await self._select_tools(run)
        tools, recall = self._recall_tools()
        # The tool list is billed as input on every call: the messages get what it leaves
        # (recall's spec included whenever it may be offered).
        budget = self._message_budget(
            self.budget, [*(specs or []), recall[0].spec()] if recall is not None else specs)
        answer: str | None = None
        last_note: str | None = None
        stopped: StopReason = "answer"

        for iteration in range(1, self.max_iterations + 1):
            run.iteration = iteration
            for text in self._drain_inbox():
                messages.append(decisions.inject_message(text))
                run.injected.append(text)
                yield InjectedEvent(iteration=iteration, text=text)

            # The tools the previous call carried (recall's spec joins once something was
            # archived, and nothing was archived since): a summary reuses them with the
            # messages, as the prefix the provider cached.
            messages = await self._check(run.compactions, messages, budget, "react_iteration",
                                         tools=_offer(specs, recall) or [])
            for event in self._new_compactions(run, recovery=False):
                yield event
            yield IterationStartedEvent(
                iteration=iteration, messages=len(messages),
                tokens=HEURISTIC.count_messages(messages),
            )
            reply, messages = await self._chat(run, messages, _offer(specs, recall))
            for event in self._new_compactions(run, recovery=True):
                yield event
            message = reply.message

            if message.tool_calls:
                last_note = message.text or last_note
                async for step in self._run_tools(run, tools, message, messages):
                    yield step
                continue

            action = decisions.on_final_answer(
                pending_injections=bool(self._inbox),
                tool_calls_run=len(run.trace),
                checklist_threshold=self.checklist_threshold,
                checklist_done=run.checklist_done,
                iterations_left=self.max_iterations - iteration,
            )
            if action == "defer_for_inject":
                # Drop the draft: the next answer must cover query and new message together.
                continue
            messages.append(message)
            if action == "checklist":
                run.checklist_done = True
                messages.append(decisions.checklist_message())
                yield ChecklistEvent(iteration=iteration, tool_calls=len(run.trace))
                continue
            answer = strip_scratchpad(message.text)
            break
        else:
            stopped = "max_iterations"
            answer = decisions.partial_answer(self.max_iterations, run.trace, last_note)

        yield DoneEvent(result=self._result(run, answer, messages, stopped))

    async def _run_tools(
        self, run: _Run, tools: ToolRegistry, message: ChatMessage, messages: list[ChatMessage]
    ) -> AsyncIterator[AgentEvent]:
        """Run the tool calls of ``message`` (in parallel), append the tool turn to
        ``messages``, and warn the model when the same call keeps repeating."""
        iteration = run.iteration
        calls = message.tool_calls or []
        for call in calls:
            yield ToolCallEvent(iteration=iteration, call_id=call.id, tool=call.name,
                                arguments=call.arguments)
        outcomes = await asyncio.gather(*(
            tools.execute(call, default_timeout=self.tool_timeout) for call in calls
        ))
        messages.extend(decisions.tool_turn_messages(message, outcomes))
        entries = decisions.trace_entries(iteration, outcomes)
        run.trace.extend(entries)
        run.calls.extend(calls)
        for entry in entries:
            yield ToolResultEvent(**dict(entry))
        hit = decisions.detect_cycle(run.calls, len(calls), self.cycle_threshold)
        if hit is not None:
            warning = decisions.cycle_warning_message(hit)
            messages.append(warning)
            yield WarningEvent(iteration=iteration, tool=hit.tool, arguments=hit.arguments,
                               repeats=hit.repeats, message=warning.text)

    def _message_budget(self, budget: int, specs: list[ToolSpec] | None) -> int:
        """``budget`` less the tool specs' tokens (by the guard's counter), at least 1."""
        counter = getattr(self.guard, "counter", None)
        spent = tool_specs_tokens(specs, counter if isinstance(counter, TokenCounter) else None)
        return max(1, budget - spent)

    # ------------------------------------------------------------------ I/O helpers
    async def _check(
        self, sink: list[CompactionEvent], messages: list[ChatMessage], budget: int, hint: Hint,
        tools: list[ToolSpec] | None = None,
    ) -> list[ChatMessage]:
        """One guard call; its compaction event, if any, is appended to ``sink``.

        ``tools``: what the model call that follows carries (``[]`` for none), passed to a
        guard that takes them (see :class:`GuardLike`); ``None``: not passed."""
        if self._guard_takes_tools and tools is not None:
            checked = await self.guard.check(messages, budget=budget, hint=hint,  # type: ignore[call-arg]
                                             tools=tools)
        else:
            checked = await self.guard.check(messages, budget=budget, hint=hint)
        if checked.event is not None:
            sink.append(checked.event)
        return list(checked.messages)

    @staticmethod
    def _new_compactions(run: _Run, *, recovery: bool) -> list[CompactionNoticeEvent]:
        new = run.compactions[run.compactions_reported:]
        run.compactions_reported = len(run.compactions)
        return [CompactionNoticeEvent(iteration=run.iteration, compaction=c, recovery=recovery)
                for c in new]

    async def _chat(
        self, run: _Run, messages: list[ChatMessage], specs: list[ToolSpec] | None
    ) -> tuple[LLMResult, list[ChatMessage]]:
        """``llm.chat`` with one overflow recovery: compact to half the budget, retry once."""
        run.tools = specs
        try:
            reply = await self.llm.chat(messages, tools=specs)
        except ContextOverflowError as first:
            half = self._message_budget(max(1, self.budget // 2), specs)
            log.warning("context overflow at %d budget; compacting to %d and retrying: %s",
                        self.budget, half, first)
            messages = await self._check(run.compactions, messages, half, "react_iteration",
                                         tools=specs or [])
            try:
                reply = await self.llm.chat(messages, tools=specs)
            except ContextOverflowError as second:
                raise AgentError(
                    f"the model still reported a context overflow after the context was "
                    f"compacted to half the budget ({half} tokens): {second}"
                ) from second
        run.usage += reply.usage
        return reply, messages

    def _recall_tools(self) -> tuple[ToolRegistry, tuple[Tool, Archive] | None]:
        """The run's tools plus ``recall`` when the guard archives (see
        :mod:`ctxstack.agent._recall`); a user tool already named ``recall`` wins."""
        archive = getattr(self.guard, "archive", None)
        if not isinstance(archive, Archive) or RECALL_TOOL_NAME in self.tools:
            return self.tools, None
        recall = recall_tool(archive)
        return ToolRegistry([*self.tools, recall]), (recall, archive)

    async def _select_tools(self, run: _Run) -> list[ToolSpec] | None:
        if not len(self.tools):
            return None
        if self.fast_llm is None or len(self.tools) <= self.tool_selection_threshold:
            return self.tools.specs()
        listing = [(t.name, t.description) for t in self.tools]
        try:
            reply = await self.fast_llm.chat(decisions.tool_selection_messages(run.query, listing))
        except LLMError as exc:
            log.info("tool selection failed (%s); offering every tool", exc)
            return self.tools.specs()
        run.usage += reply.usage
        chosen = decisions.parse_tool_selection(reply.message.text, self.tools.names)
        return self.tools.specs(chosen)

    async def _synthesize(self, query: str, result: AgentResult) -> AsyncIterator[AgentEvent]:
        """The synthesis as events: a compaction notice if the guard had to cut, then deltas.

        Usage (the stream's and the guard's) is added to ``result`` even when the consumer
        stops early, so a cancelled stream is still accounted for.
        """
        messages = decisions.synthesis_messages(
            query, result.injected, result.trace, result.answer,
            partial=result.stopped_reason == "max_iterations",
        )
        guard_start = self._guard_usage()
        sink: list[CompactionEvent] = []
        messages = await self._check(sink, messages, self.budget, "general")
        result.compactions.extend(sink)
        for compaction in sink:
            yield CompactionNoticeEvent(iteration=result.iterations, compaction=compaction)
        stream = self.llm.stream_chat(messages)
        parts: list[str] = []
        try:
            async for delta in stream:
                parts.append(delta)
                yield AnswerDeltaEvent(text=delta)
        finally:
            if not stream.done:
                await stream.aclose()
            result.usage = (
                result.usage + stream.usage + (self._guard_usage() - guard_start)
            )
            result.synthesis = "".join(parts)

    def _drain_inbox(self) -> list[str]:
        out = []
        while True:
            try:
                out.append(self._inbox.popleft())
            except IndexError:
                return out

    def _guard_usage(self) -> Usage:
        totals = getattr(self.guard, "totals", None)
        usage = getattr(totals, "usage", None)
        return usage if isinstance(usage, Usage) else Usage()

    async def _emit(self, event: AgentEvent) -> None:
        if self.on_event is None:
            return
        outcome = self.on_event(event)
        if inspect.isawaitable(outcome):
            await outcome

    def _result(
        self, run: _Run, answer: str, messages: list[ChatMessage], stopped: StopReason
    ) -> AgentResult:
        guard_usage = self._guard_usage() - run.guard_usage_start
        final = [*messages]
        if stopped == "max_iterations" or not final or final[-1].role != "assistant":
            final.append(ChatMessage.assistant(answer))
        return AgentResult(
            answer=answer, trace=list(run.trace), iterations=run.iteration,
            usage=run.usage + guard_usage, compactions=list(run.compactions),
            messages=final, stopped_reason=stopped, injected=list(run.injected),
            elapsed_s=time.perf_counter() - run.started, query=run.query,
            tools=[dict(t) for t in run.tools] if run.tools else None,
        )

