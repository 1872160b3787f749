"""One chat turn, from the stored question to the stored answer, as a stream of SSE events.

The flow (the seed's sequence diagram, docs/DESIGN.md §5):

1. the route has already claimed the conversation (a
   :class:`~ctxstack.server.lifecycle.TurnLease`, heartbeating from then on) and stored
   the user's message, so a second turn or an inject can see this one;
2. the budgets are resolved (admin model configs → env → defaults);
3. :class:`~ctxstack.store.memory.DbMemory` loads the history once and compacts it to the
   main budget with the fast model; if it compacted, a ``compact`` event goes out first;
4. the ReAct agent (or the DAG engine) runs; its typed events become ``step``,
   ``inject``, ``compact`` and ``answer`` events as they happen, while a poller forwards
   injects that reach any worker;
5. the lease moves to "saving" (injects are refused from now on; the ones nobody took are
   handed back); the assistant message — answer, usage, the turn's events — the injects
   it consumed or left over, and DbMemory's new checkpoint are written in one
   transaction; only then is the claim released (so no other question can be stored
   between this question and its answer);
6. ``done`` (with the message id) or ``error`` ends the stream.

A turn runs as its own task, not inside the HTTP response: when the client disconnects the
response is gone but the task, cancelled, still stores what was produced (status
"stopped"). A failure anywhere becomes an ``error`` event and an assistant message that
says the turn failed (status "failed", a generic text from
:mod:`ctxstack.server.failures`: no URL or host reaches the user, and the text is never
read back to the model as history); the conversation stays usable.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from ctxstack.agent import ReActAgent
from ctxstack.agent import _events as agent_events
from ctxstack.agent._decisions import context_message
from ctxstack.agent._recall import recall_spec
from ctxstack.budget import ModelBudget
from ctxstack.compaction._summaries import SUMMARY_REF_KEY
from ctxstack.dag import DAGEngine
from ctxstack.dag import _events as dag_events
from ctxstack.errors import CtxstackError
from ctxstack.guard import ContextGuard, GuardCheckEvent
from ctxstack.memory import BaseMemory
from ctxstack.messages import ChatMessage, ImagePart, ImageURL, TextPart
from ctxstack.protocol import LLM, Usage
from ctxstack.server.compactions import (
    FoldTracker,
    PendingSpan,
    Span,
    load_compaction,
    resolve_span,
    run_compaction,
    step_compaction,
)
from ctxstack.server.context_meter import measure
from ctxstack.server.failures import failure_text, turn_failure_text
from ctxstack.server.inject_dispatch import WatchedTurn
from ctxstack.server.lifecycle import LeaseLostError, TurnLease
from ctxstack.server.persist import FinishedTurn, SavedTurn, save_turn, save_turn_in
from ctxstack.server.schemas import MessageStatus, Mode
from ctxstack.server.sse import (
    AnswerData,
    AnswerEvent,
    CompactData,
    CompactEvent,
    ContextEvent,
    DagStepStatus,
    DoneData,
    ErrorData,
    InjectData,
    InjectEvent,
    NoteStep,
    PlanStepData,
    SseDoneEvent,
    SseErrorEvent,
    SSEEvent,
    StepEvent,
    ToolCallStep,
    ToolResultStep,
    UsageData,
)
from ctxstack.server.state import ServiceState
from ctxstack.server.summarising import SummarisingSignal
from ctxstack.server.tools import service_tool_specs, service_tools
from ctxstack.store.archive import ConversationArchive
from ctxstack.store.checkpoints import CheckpointCandidate
from ctxstack.store.files import FileRecord
from ctxstack.store.memory import DbMemory
from ctxstack.store.summaries import PENDING_REF
from ctxstack.tokens import DEFAULT_COUNTER, UsageMeter

log = logging.getLogger(__name__)

SYSTEM_PROMPT = (
    "You are a helpful assistant in a chat. Use the tools when they help; answer in the "
    "language the user writes in. Messages the user sends while you work appear as new user "
    "messages: take them into account."
)
RESULT_PREVIEW_CHARS = 4_000


class TurnFailed(CtxstackError):
    """The engine reported a failure; ``error_type`` is the class name it reported."""

    def __init__(self, message: str, *, error_type: str = "TurnFailed") -> None:
        super().__init__(message)
        self.error_type = error_type


@dataclass
class TurnSpec:
    """What a turn was asked to do (validated by the route)."""

    turn_id: str
    user_id: int
    conversation_id: str
    query: str
    mode: Mode
    images: list[FileRecord] = field(default_factory=list)


class StaticMemory(BaseMemory):
    """A read-only memory over an already-loaded history (DbMemory runs once, in the turn,
    so its compaction flags can be reported before the agent starts)."""

    def __init__(self, messages: Sequence[ChatMessage]) -> None:
        self._messages = list(messages)

    async def add_message(self, message: ChatMessage) -> None:
        return None

    async def get_messages(self) -> list[ChatMessage]:
        return list(self._messages)

    async def clear(self) -> None:
        return None


class Turn:
    """Runs one turn and feeds its events to ``self.queue`` (``None`` ends the stream)."""

    def __init__(self, state: ServiceState, spec: TurnSpec, lease: TurnLease, *,
                 started: float | None = None) -> None:
        """``started``: ``time.perf_counter()`` when the route began handling the request
        (its claim and the stored question are part of the turn's time)."""
        self.state = state
        self.spec = spec
        self.lease = lease
        self.queue: asyncio.Queue[SSEEvent | None] = asyncio.Queue()
        self.events: list[SSEEvent] = []
        self.answer_parts: list[str] = []
        self.final_answer: str | None = None
        self.iterations = 0
        self.meter = UsageMeter()
        self.consumed: list[str] = []
        self.forwarded: list[str] = []
        self.checkpoint: Any = None
        self.archive: ConversationArchive | None = None
        self.started = time.perf_counter() if started is None else started
        self._agent: ReActAgent | None = None
        self._engine: DAGEngine | None = None
        # the stored messages the context's summary covers (pending: counted if needed)
        self.span: Span | PendingSpan = Span()
        self.model_calls = 0
        # compact_start / compact_end around the summariser's runs
        self.summarising = SummarisingSignal(self.push)

    # ------------------------------------------------------------------ events
    async def emit(self, event: SSEEvent) -> None:
        self.push(event)

    def push(self, event: SSEEvent) -> None:
        """Record ``event`` (answer deltas are summed, only the last meter reading kept)
        and send it."""
        if isinstance(event, AnswerEvent):
            self.answer_parts.append(event.data.delta)
        elif isinstance(event, ContextEvent):  # only the last reading is worth storing
            self.events = [e for e in self.events if not isinstance(e, ContextEvent)]
            self.events.append(event)
        else:
            self.events.append(event)
        self.queue.put_nowait(event)

    # ------------------------------------------------------------------ the task
    async def run(self) -> None:
        """The turn task's body. Never raises except CancelledError (after saving)."""
        watched: WatchedTurn | None = None
        try:
            main_budget, fast_budget = await self.state.budgets()
            main_llm, fast_llm = self.state.llms.for_turn(main_budget, fast_budget, self.meter)
            history = await self._load_history(main_budget, fast_llm)
            await self._measure_load(main_budget, history)
            watched = self.state.inject_poller.watch(  # the worker's one poller
                self.spec.conversation_id, self.spec.turn_id, self._deliver)
            if self.spec.mode == "dag":
                await self._run_dag(main_llm, fast_llm, fast_budget, history)
            else:
                await self._run_react(main_llm, fast_llm, main_budget, history)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            await self._stop_poller(watched)
            await self._finish("stopped", "Stopped: the client disconnected.")
            raise
        except Exception as exc:
            log.warning("turn %s failed", self.spec.turn_id)
            await self._stop_poller(watched)
            await self._finish("failed", _failure_text(exc))
        else:
            await self._stop_poller(watched)
            await self._finish("ok", None)
        finally:
            self._release()

    def _release(self) -> None:
        """Drop the finished run: the agent's guard holds a listener that closes over
        this turn (turn → agent → guard → listener → turn), a cycle only the cyclic
        collector could free — so every turn's object graph aged into the oldest
        generation, and collecting thousands of them at once held the event loop for
        40-100 ms under load (issue 15). Without the link it is freed when the turn ends."""
        self._agent = None
        self._engine = None

    async def _stop_poller(self, watched: WatchedTurn | None) -> None:
        """Stop forwarding injects; returns once a take for this turn in flight has
        delivered (cancelled only after the poller's grace, see
        :mod:`ctxstack.server.inject_dispatch`)."""
        if watched is not None:
            await self.state.inject_poller.unwatch(watched)

    async def _deliver(self, text: str) -> None:
        """Hand an inject to the running agent or DAG run. Whether it was consumed is
        known from the engine's ``injected`` event; one the run did not take (a DAG run
        already writing its answer) is stored for the next turn by :meth:`_finish`."""
        self.forwarded.append(text)
        if self._agent is not None:
            self._agent.inject(text)
        elif self._engine is not None:
            self._engine.inject(text)

    # ------------------------------------------------------------------ history
    async def _load_history(self, budget: ModelBudget, fast_llm: LLM) -> list[ChatMessage]:
        memory = DbMemory(
            self.spec.conversation_id,
            session_factory=self.state.factory,
            budget=budget,
            compact_llm=self.summarising.wrap(fast_llm, "load"),
            user_id=self.spec.user_id,
            owner_verified=True,  # the route checked it, and the claim keeps it so
            file_store=self.state.files,
            counter=self.state.llms.counter("main"),
            # what the ReAct call adds to the history: the load leaves room for it, so a
            # history that fits is not summarised a second time at the first model call
            system_prompt=SYSTEM_PROMPT if self.spec.mode == "react" else None,
            tools=service_tool_specs() if self.spec.mode == "react" else None,
            # the ReAct run offers recall once history is archived (after a checkpoint):
            # the summary request's tools are that call's
            archive_tools=[recall_spec()] if self.spec.mode == "react" else None,
            # the previous turn's messages, taken back where their rows are unchanged
            message_cache=self.state.history_cache,
        )
        history = await memory.get_messages()
        self.summarising.end(memory.was_compacted)
        self.checkpoint = memory.checkpoint_candidate
        # The stored messages are the archive (ctxstack.store.archive): what the load
        # summarised or trimmed, and what the run's guard clears, stays recallable.
        query_seq = (memory.trailing_message.metadata.get("seq")
                     if memory.trailing_message is not None else None)
        self.archive = ConversationArchive(
            self.state.factory, self.spec.conversation_id,
            before_seq=query_seq if isinstance(query_seq, int) else None,
            hidden=max(0, memory.original_count
                       - sum(isinstance(m.metadata.get("seq"), int) for m in history)),
            pending=memory.checkpoint_candidate)
        if memory.checkpoint_candidate is not None:
            # the load's new summary is the offered checkpoint: summary c0 for this turn
            # (metadata only), so a summary folding it keeps it as a child
            history = [m.replace(metadata={**m.metadata, SUMMARY_REF_KEY: PENDING_REF})
                       if m.kind == "summary" else m for m in history]
        compacted, self.span = await load_compaction(memory, history, self.state.factory)
        if compacted is not None:
            await self.emit(CompactEvent(data=compacted))
        if self.spec.images:
            history.append(await self._images_message())
        return history

    def _checkpoint_run_summary(self, data: CompactData, folds: FoldTracker) -> None:
        """A mid-turn summary that folded stored messages becomes the turn's checkpoint:
        the next load starts from it (one summarisation per overflow), and what the divider
        shows is what ``GET /compactions`` lists."""
        fold = folds.last_fold
        if data.method != "llm" or fold is None or fold.summary is None \
                or data.last_seq is None or data.last_seq <= 0:
            return
        self.checkpoint = CheckpointCandidate(
            summary=fold.summary.text, last_seq=data.last_seq,
            token_count=(self.state.llms.counter("main") or DEFAULT_COUNTER).count_message(
                fold.summary))

    async def _measure_load(self, budget: ModelBudget, history: list[ChatMessage]) -> None:
        """The meter before the first call: system prompt, history and the question."""
        system = [ChatMessage.system(SYSTEM_PROMPT)] if self.spec.mode == "react" else []
        messages = [*system, *history, ChatMessage.user(self.spec.query)]
        await self.emit(ContextEvent(data=measure(
            messages, budget, counter=self.state.llms.counter("main"), at="load")))

    def _on_check(self, budget: ModelBudget) -> Callable[[GuardCheckEvent], None]:
        """A guard ``on_check`` listener: one meter reading per agent call (the
        conversation's context; the closing synthesis, which sees only the request and the
        trace, is not one)."""
        def listener(event: GuardCheckEvent) -> None:
            if event.hint != "react_iteration":
                return
            self.model_calls += 1
            self.push(ContextEvent(data=measure(
                event.result.messages, budget, counter=self.state.llms.counter("main"),
                model_calls=self.model_calls)))
        return listener

    async def _images_message(self) -> ChatMessage:
        """The current question's images, as a user message just before the question.

        The engines take the question as text; the model still sees its images because
        they enter the context right before it.
        """
        parts: list[TextPart | ImagePart] = [TextPart(text="(Images attached to my next message)")]
        for record in self.spec.images:
            data = await self.state.files.read(record)
            loaded = _data_url(record.mime_type, data)
            parts.append(ImagePart(image_url=ImageURL(url=loaded)))
        return ChatMessage.user(parts, metadata={"images": [
            {"file_id": r.id, "mime_type": r.mime_type} for r in self.spec.images]})

    # ------------------------------------------------------------------ ReAct
    async def _run_react(
        self, llm: LLM, fast_llm: LLM, budget: ModelBudget, history: list[ChatMessage]
    ) -> None:
        folds = FoldTracker()
        guard = ContextGuard(compact_llm=self.summarising.wrap(fast_llm, "run"),
                             default_budget=budget,
                             counter=self.state.llms.counter("main"),
                             on_check=[folds, self._on_check(budget)], archive=self.archive)
        agent = ReActAgent(
            llm, service_tools(), guard,
            system_prompt=SYSTEM_PROMPT,
            memory=StaticMemory(self._context_history(history)),
            budget=budget,
            max_iterations=self.state.settings.max_iterations,
        )
        self._agent = agent
        for text in self.forwarded:  # arrived before the agent existed
            agent.inject(text)
        async for event in agent.run_events(self.spec.query, synthesize=True):
            match event:
                case agent_events.ToolCallEvent():
                    await self.emit(StepEvent(data=ToolCallStep(
                        id=event.call_id, tool=event.tool, arguments=event.arguments,
                        iteration=event.iteration)))
                case agent_events.ToolResultEvent():
                    await self.emit(StepEvent(data=ToolResultStep(
                        id=event.call_id, tool=event.tool,
                        result=_preview(event.result_preview), error=event.error is not None,
                        duration_ms=round(event.duration_s * 1000, 1))))
                case agent_events.CompactionNoticeEvent():
                    self.summarising.end(True)
                    base = await resolve_span(self.span, self.state.factory)
                    data, self.span = run_compaction(event.compaction, folds.last_fold, base)
                    self._checkpoint_run_summary(data, folds)
                    await self.emit(CompactEvent(data=data))
                case agent_events.InjectedEvent():
                    self.consumed.append(event.text)
                    await self.emit(InjectEvent(data=InjectData(text=event.text)))
                case agent_events.WarningEvent():
                    await self.emit(StepEvent(data=NoteStep(
                        kind="warning", text=event.message, iteration=event.iteration)))
                case agent_events.ChecklistEvent():
                    await self.emit(StepEvent(data=NoteStep(
                        kind="checklist", iteration=event.iteration,
                        text=f"Checking the answer after {event.tool_calls} tool calls")))
                case agent_events.AnswerDeltaEvent():
                    await self.emit(AnswerEvent(data=AnswerData(delta=event.text)))
                case agent_events.DoneEvent():
                    self.iterations = event.result.iterations
                    self.final_answer = event.result.final_answer
                case agent_events.ErrorEvent():
                    raise TurnFailed(event.message, error_type=event.error_type)
                case _:
                    pass

    def _context_history(self, history: list[ChatMessage]) -> list[ChatMessage]:
        """The history as the agent puts it in the context (:func:`context_message`: the
        stored questions unpinned, without their kind) — done here so the copies of the
        stored questions are the message cache's, the same objects turn after turn with
        their token figures and guard marks, instead of ~half the history built and
        counted anew by every turn. The agent finds nothing left to change."""
        cache, cid = self.state.history_cache, self.spec.conversation_id
        return [cache.derived(cid, m, context_message) if m.kind == "query" else m
                for m in history]

    # ------------------------------------------------------------------ DAG
    async def _run_dag(
        self, llm: LLM, fast_llm: LLM, fast_budget: ModelBudget, history: list[ChatMessage]
    ) -> None:
        engine = DAGEngine(llm, service_tools(), fast_llm=fast_llm, fast_budget=fast_budget,
                           counter=self.state.llms.counter("main"),
                           step_counter=self.state.llms.counter("fast"))
        self._engine = engine
        for text in self.forwarded:  # arrived before the engine existed: taken at its start
            engine.inject(text)
        async for event in engine.run_events(self.spec.query, history=history):
            match event:
                case dag_events.DAGInjectedEvent():
                    self.consumed.append(event.text)
                    await self.emit(InjectEvent(data=InjectData(text=event.text)))
                case dag_events.QueryEnrichedEvent():
                    if event.summarized:
                        await self.emit(StepEvent(data=NoteStep(
                            kind="note", text=f"History condensed for the planner "
                            f"({event.tokens_before} → {event.tokens_after} tokens)")))
                case dag_events.PlanCreatedEvent():
                    await self.emit(StepEvent(data=PlanStepData(round=event.round, steps=[
                        {"id": s.id, "task": s.task, "dependencies": list(s.dependencies)}
                        for s in event.plan.steps])))
                case dag_events.StepStartedEvent():
                    await self.emit(StepEvent(data=DagStepStatus(
                        id=event.step_id, task=event.task, status="running",
                        round=event.round)))
                case dag_events.StepFinishedEvent():
                    ok = event.status == "done"
                    await self.emit(StepEvent(data=DagStepStatus(
                        id=event.step_id, task=event.task, status=event.status,
                        round=event.round,
                        result=_preview(event.answer if ok else (event.error or event.status)))))
                case dag_events.StepActivityEvent(activity=agent_events.CompactionNoticeEvent()):
                    await self.emit(CompactEvent(data=step_compaction(event)))
                case dag_events.AnalysisEvent():
                    verdict = ("achieved" if event.achieved else "not achieved"
                               if event.achieved is not None else "no verdict")
                    await self.emit(StepEvent(data=NoteStep(
                        kind="analysis", text=f"Analysis (round {event.round}): {verdict}"
                        + (f" — {event.reasoning}" if event.reasoning else ""))))
                case dag_events.ReplanEvent():
                    await self.emit(StepEvent(data=NoteStep(
                        kind="note", text=f"Replanning (round {event.round}): {event.reason}")))
                case dag_events.AnswerDeltaEvent():
                    await self.emit(AnswerEvent(data=AnswerData(delta=event.text)))
                case dag_events.DAGDoneEvent():
                    self.iterations = event.rounds
                    self.final_answer = event.answer
                case dag_events.DAGErrorEvent():
                    raise TurnFailed(event.message, error_type=event.error_type)
                case _:
                    pass

    # ------------------------------------------------------------------ the end
    async def _finish(self, status: MessageStatus, error: str | None) -> None:
        """Stop taking injects, store everything in one transaction, then release the
        conversation and end the stream (the claim outlives the commit: issue 15)."""
        final: SseDoneEvent | None = None
        self.summarising.end(False)  # a summariser run the turn never reported
        try:
            final = await self._save(status, error)
        finally:
            await self.lease.release()
            if final is not None:  # only now may the client ask its next question
                # The live ``elapsed`` covers the commit and the release too (the stored
                # copy was written before them).
                await self.emit(SseDoneEvent(data=final.data.model_copy(update={
                    "elapsed": round(time.perf_counter() - self.started, 3)})))
            self.queue.put_nowait(None)

    async def _save(self, status: MessageStatus, error: str | None) -> SseDoneEvent | None:
        """Finish the lease and write the turn; the ``done`` event to send, if it saved.

        With the database queue the finish, the writes and the release are one
        transaction (:meth:`TurnLease.settle`); the closing events (injects nobody took,
        the error) are stored with it and sent once it committed. Otherwise the lease is
        finished first and released by :meth:`_finish` after the save.
        """
        unconsumed = [t for t in self.forwarded if t not in self.consumed]
        answer = self._answer(status, error)
        done = self._done_data(answer)
        if self.lease.can_settle:
            return await self._settle(status, error, unconsumed, done)
        try:
            leftovers = unconsumed + await self.lease.finish()
        except LeaseLostError:
            await self.emit(_LEASE_LOST)
            return None
        except Exception:  # the store is down: the save below reports it
            log.warning("turn %s: finishing the lease failed", self.spec.turn_id,
                        exc_info=True)
            leftovers = unconsumed
        for event in self._closing_events(leftovers, status, error):
            await self.emit(event)
        try:
            saved = await save_turn(self.state.factory,
                                    self._finished(status, done, self.events, leftovers))
        except Exception as exc:  # not acknowledged: the release re-queues the injects
            await self._save_failed(status, exc)
            return None
        await self.lease.ack()
        return self._done_event(status, done, saved)

    async def _settle(self, status: MessageStatus, error: str | None, unconsumed: list[str],
                      done: DoneData) -> SseDoneEvent | None:
        closing: list[SSEEvent] = []

        async def write(session: AsyncSession, drained: list[str]) -> SavedTurn:
            nonlocal closing
            leftovers = unconsumed + drained
            closing = self._closing_events(leftovers, status, error)
            return await save_turn_in(session, self._finished(
                status, done, [*self.events, *closing], leftovers))

        try:
            saved = await self.lease.settle(write)
        except LeaseLostError:
            await self.emit(_LEASE_LOST)
            return None
        except Exception as exc:  # nothing was written: the drained injects stay queued
            for event in self._closing_events(unconsumed, status, error):
                await self.emit(event)
            await self._save_failed(status, exc)
            return None
        for event in closing:
            await self.emit(event)
        return self._done_event(status, done, saved)

    @staticmethod
    def _closing_events(leftovers: list[str], status: MessageStatus,
                        error: str | None) -> list[SSEEvent]:
        """The events that close a turn before ``done``: the injects it never took (they
        are stored after the answer), then the error, if any."""
        events: list[SSEEvent] = [InjectEvent(data=InjectData(text=text, consumed=False))
                                  for text in leftovers]
        if error is not None:
            events.append(SseErrorEvent(data=ErrorData(
                message=error, kind="stopped" if status == "stopped" else "failed")))
        return events

    def _answer(self, status: MessageStatus, error: str | None) -> str:
        streamed = "".join(self.answer_parts)
        if status == "ok":
            return self.final_answer if self.final_answer is not None else streamed
        if status == "stopped":
            return streamed
        return error or "The turn failed."

    def _done_data(self, answer: str) -> DoneData:
        usage = self.meter.usage
        return DoneData(answer=answer, usage=UsageData(
            input_tokens=usage.input_tokens, output_tokens=usage.output_tokens),
            iterations=self.iterations, elapsed=round(time.perf_counter() - self.started, 3),
            llm_seconds=round(self.meter.llm_seconds, 4))

    def _finished(self, status: MessageStatus, done: DoneData, events: Sequence[SSEEvent],
                  leftovers: list[str]) -> FinishedTurn:
        """What :func:`save_turn` / :func:`save_turn_in` write for this turn."""
        stored = [*events, SseDoneEvent(data=done)] if status == "ok" else list(events)
        return FinishedTurn(
            conversation_id=self.spec.conversation_id, owner_id=self.spec.user_id,
            consumed_injects=self.consumed, answer=done.answer, usage=self.meter.usage,
            events=stored, status=status, mode=self.spec.mode, leftover_injects=leftovers,
            checkpoint=self.checkpoint)

    async def _save_failed(self, status: MessageStatus, exc: Exception) -> None:
        log.error("turn %s: saving the answer failed: %s", self.spec.turn_id, exc)
        if status == "ok":
            await self.emit(SseErrorEvent(data=ErrorData(
                message="The answer could not be saved: the database is unavailable.")))

    @staticmethod
    def _done_event(status: MessageStatus, done: DoneData,
                    saved: SavedTurn) -> SseDoneEvent | None:
        if status != "ok":
            return None
        return SseDoneEvent(data=done.model_copy(
            update={"message_id": saved.assistant_message_id}))


_LEASE_LOST = SseErrorEvent(data=ErrorData(message=(
    "The turn lost its claim on the conversation (the database was unreachable for longer "
    "than the lease); its answer was not saved.")))


def _preview(text: str) -> str:
    if len(text) <= RESULT_PREVIEW_CHARS:
        return text
    return text[:RESULT_PREVIEW_CHARS] + f"… [{len(text) - RESULT_PREVIEW_CHARS} more characters]"


def _failure_text(exc: BaseException) -> str:
    if isinstance(exc, TurnFailed):
        return turn_failure_text(exc.error_type, str(exc))
    return failure_text(exc)


def _data_url(mime_type: str, data: bytes) -> str:
    import base64

    return f"data:{mime_type};base64,{base64.b64encode(data).decode()}"


__all__ = ["StaticMemory", "Turn", "TurnFailed", "TurnSpec", "Usage"]
