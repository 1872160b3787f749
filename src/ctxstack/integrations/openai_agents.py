"""OpenAI Agents SDK adapter: a guarded, database-backed ``Session`` and a per-call filter.

``pip install 'ctxstack[openai-agents]'`` (tested with openai-agents 0.24).

- :class:`CtxstackSession` implements the SDK's ``Session`` protocol (``get_items``,
  ``add_items``, ``pop_item``, ``clear_session``). Items are stored in ctxstack's database
  (SQLite by default, PostgreSQL by URL; see :mod:`._session_store`) and ``get_items``
  returns the history fitted to ``budget`` by the guard. When the guard summarised, the
  summary is saved as a checkpoint, so the next run starts from *summary + newer items*
  (one summarisation per overflow, not one per run); every item stays stored.
- :func:`input_filter` returns a ``RunConfig(call_model_input_filter=...)`` callback that
  fits *every* model call — instructions plus input, tool outputs of the current run
  included — to ``budget``, the instructions and the latest user message kept intact.
- :class:`CalibrationHooks` (``RunHooks``) trains a
  :class:`~ctxstack.CalibratingCounter` from the usage each model call reports.

Conversion (:mod:`._responses`) keeps ``function_call`` / ``function_call_output`` pairs
together, carries reasoning items with their turn, returns untouched items verbatim, and
writes the summary as a ``system`` message item. Each compaction is recorded as a custom
tracing span ``ctxstack.compaction`` (the SDK's own tracing; a no-op outside a trace —
the SDK reads the session before it opens a run's trace, so wrap runs in
``agents.trace(...)`` to see the session's), is logged on
``ctxstack.integrations.openai_agents``, and reaches the guard's ``on_compact``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from ctxstack import (
    CalibratingCounter,
    ChatMessage,
    CompactionEvent,
    ContextGuard,
    CtxstackError,
    Hint,
    ModelBudget,
)
from ctxstack.compaction._prompts import check_hint
from ctxstack.integrations._extra import missing_extra
from ctxstack.integrations._guarding import check_counter, check_guard, guarded, summary_boundary
from ctxstack.integrations._responses import (
    ITEMS_KEY,
    Item,
    PrefixCache,
    as_item,
    items_to_messages,
    messages_to_items,
)
from ctxstack.protocol import ToolSpec
from ctxstack.protocol._llm import FunctionSpec
from ctxstack.tokens._counter import effective_budget

try:
    from agents import Agent, ModelResponse, RunContextWrapper, RunHooks
    from agents.items import TResponseInputItem
    from agents.run_config import CallModelData, ModelInputData
    from agents.tracing import custom_span
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise missing_extra("openai-agents", "openai-agents", exc) from exc
# The session's store (SQLAlchemy, Alembic, aiosqlite) comes with the same extra.
try:
    from ctxstack.integrations._session_store import ItemStore
except ImportError as exc:  # pragma: no cover - exercised by scripts/check-extras
    raise missing_extra("openai-agents", "sqlalchemy", exc) from exc

__all__ = ["CalibrationHooks", "CtxstackSession", "InputFilter", "input_filter"]

log = logging.getLogger(__name__)
NAMESPACE = "openai-agents"


def report(events: Sequence[CompactionEvent], where: str) -> None:
    """Record compactions as ``ctxstack.compaction`` tracing spans and log lines."""
    for event in events:
        data = event.model_dump(mode="json")
        data["where"] = where
        with custom_span("ctxstack.compaction", data=data):
            pass
        log.info("%s: compacted (%s) %d→%d items-as-messages, %d→%d tokens, budget %d",
                 where, event.method, event.messages_before, event.messages_after,
                 event.tokens_before, event.tokens_after, event.budget)


def _role_and_text(item: Item) -> tuple[str, str | None]:
    message = items_to_messages([item])[0]
    return message.role, (message.text or None)


class CtxstackSession:
    """An Agents SDK ``Session`` stored in ctxstack's database, read back guarded.

    Args:
        session_id: the SDK session id (any non-empty string).
        guard: the :class:`~ctxstack.ContextGuard` that fits the history.
        budget: tokens (or a :class:`~ctxstack.ModelBudget`) the history read by a run may
            take. Leave room for the instructions and the new input, or use
            :func:`input_filter` too, which checks every call.
        database_url: a database URL or an ``AsyncEngine`` (default:
            ``CTXSTACK_DATABASE_URL``, else ctxstack's SQLite file). Migrated on first
            use unless ``migrate=False``.
        counter: a :class:`~ctxstack.CalibratingCounter` — must be the guard's.

    ``get_items(limit)`` fits the newest ``limit`` items (the SDK reads short tails to
    verify its own writes; within budget they come back verbatim). Without ``limit`` it
    starts from the latest checkpoint. ``session_settings`` is the SDK's optional setting.

    Raises:
        ConfigError: a bad guard, budget or counter.
        InputError: an empty ``session_id``.
    """

    session_settings: Any = None

    def __init__(
        self,
        session_id: str,
        guard: ContextGuard,
        budget: int | ModelBudget,
        database_url: Any = None,
        *,
        counter: CalibratingCounter | None = None,
        hint: Hint = "general",
        migrate: bool = True,
        session_settings: Any = None,
    ) -> None:
        self.budget = check_guard(guard, budget)
        self.guard = guard
        self.counter = check_counter(guard, counter)
        self.hint = check_hint(hint)
        self._store = ItemStore(NAMESPACE, session_id, database_url, migrate=migrate)
        self.session_id = session_id
        self.session_settings = session_settings
        self.events: list[CompactionEvent] = []

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's history fitted to the budget (the newest ``limit`` items if
        given), in chronological order."""
        stored, checkpoint = await self._store.read(last=limit)
        keys = [s.seq for s in stored]
        originals: dict[object, Item] = {s.seq: s.item for s in stored}
        messages = items_to_messages([s.item for s in stored], keys)
        converted = {tuple(m.metadata[ITEMS_KEY]): m for m in messages}
        if checkpoint is not None:
            messages.insert(0, ChatMessage.system(checkpoint.summary,
                                                  metadata={"kind": "summary"}))
        elif limit is not None and self.guard.counter.count_messages(messages) <= \
                effective_budget(self.budget, self.guard.counter):
            # A tail read (the SDK compares it item for item with what it wrote): verbatim
            # when it fits, even if it starts with outputs whose calls are older — the
            # guard would drop those as orphans of a request, and this is no request.
            return [s.item for s in stored]  # type: ignore[misc]
        outcome = await guarded(self.guard, messages, self.budget, self.hint)
        if outcome.events:
            self.events.extend(outcome.events)
            report(outcome.events, f"session {self.session_id!r}")
            if limit is None and any(e.method == "llm" for e in outcome.events):
                await self._save_checkpoint(outcome.messages)
        if outcome.messages is messages and checkpoint is None:
            return [s.item for s in stored]  # type: ignore[misc]
        return messages_to_items(outcome.messages, originals, converted)  # type: ignore[return-value]

    async def _save_checkpoint(self, result: list[ChatMessage]) -> None:
        found = summary_boundary(result, ITEMS_KEY)
        if found is None:
            return
        summary, first_kept = found
        first_seq = first_kept[0] if isinstance(first_kept, list) and first_kept else None
        if not isinstance(first_seq, int) or first_seq <= 1:
            return
        try:
            await self._store.checkpoint(summary.text, first_seq - 1,
                                         self.guard.counter.count_message(summary))
        except CtxstackError:
            # The history read is complete without it; a lost checkpoint only means the
            # next run summarises again (e.g. items popped concurrently).
            log.warning("session %r: could not save the summary checkpoint", self.session_id,
                        exc_info=True)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Store ``items`` after the existing ones, verbatim."""
        rows = []
        for raw in items:
            item = as_item(raw)
            role, text = _role_and_text(item)
            rows.append((role, text, item))
        await self._store.add(rows)

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the newest item (``None`` when the session is empty)."""
        return await self._store.pop()  # type: ignore[return-value]

    async def clear_session(self) -> None:
        """Delete every item and checkpoint of this session."""
        await self._store.clear()

    async def close(self) -> None:
        """Dispose of the database engine the session created."""
        await self._store.close()


class InputFilter:
    """The ``call_model_input_filter`` built by :func:`input_filter` (see there).

    ``events`` lists the compactions it caused. Within a run the SDK passes the same item
    objects again plus the new ones: their conversion is reused (see
    :class:`~ctxstack.integrations._responses.PrefixCache`).
    """

    def __init__(self, guard: ContextGuard, budget: int | ModelBudget, *,
                 hint: Hint = "react_iteration",
                 counter: CalibratingCounter | None = None) -> None:
        self.budget = check_guard(guard, budget)
        self.guard = guard
        self.hint = check_hint(hint)
        self.counter = check_counter(guard, counter)
        self.events: list[CompactionEvent] = []
        self._cache = PrefixCache()
        self._system: ChatMessage | None = None
        self._pinned: tuple[ChatMessage, ChatMessage] | None = None

    async def __call__(self, data: CallModelData[Any]) -> ModelInputData:
        model_data = data.model_data
        items = [as_item(i) for i in model_data.input]
        messages = self._cache.convert(items)
        converted = list(messages)
        last_user = next((i for i in range(len(messages) - 1, -1, -1)
                          if messages[i].role == "user"), None)
        if last_user is not None:
            messages[last_user] = self._pinned_query(messages[last_user])
        if model_data.instructions:
            if self._system is None or self._system.content != model_data.instructions:
                self._system = ChatMessage.system(model_data.instructions, pinned=True)
            messages.insert(0, self._system)
        outcome = await guarded(self.guard, messages, self.budget, self.hint)
        if outcome.messages is messages:
            return model_data
        self.events.extend(outcome.events)
        report(outcome.events, f"agent {data.agent.name!r}")
        result = list(outcome.messages)
        instructions = model_data.instructions
        if instructions and result and result[0].role == "system" and (
            ITEMS_KEY not in result[0].metadata and result[0].kind != "summary"
        ):
            instructions = result.pop(0).text
        originals: dict[object, Item] = dict(enumerate(items))
        by_refs = {tuple(m.metadata[ITEMS_KEY]): m for m in converted}
        return ModelInputData(
            input=messages_to_items(result, originals, by_refs),  # type: ignore[arg-type]
            instructions=instructions,
        )

    def _pinned_query(self, query: ChatMessage) -> ChatMessage:
        """The latest user message pinned as the query (the copy reused while it is the
        same message, so its token count stays cached)."""
        if self._pinned is None or self._pinned[0] is not query:
            self._pinned = (query, query.replace(
                pinned=True, metadata={**query.metadata, "kind": "query"}))
        return self._pinned[1]


def input_filter(
    guard: ContextGuard,
    budget: int | ModelBudget,
    *,
    hint: Hint = "react_iteration",
    counter: CalibratingCounter | None = None,
) -> InputFilter:
    """A ``call_model_input_filter`` fitting every model call to ``budget`` tokens.

    Counts the instructions (the agent's system prompt) and the input items; pins the
    latest user message; returns the SDK's ``ModelInputData`` unchanged when it fits.
    Use as ``RunConfig(call_model_input_filter=input_filter(guard, budget))``. Tool
    schemas are not counted: leave room for them in ``budget``.

    Not for server-managed conversation state (``previous_response_id`` /
    ``conversation_id``): there the input holds only the new items and the server keeps
    the history, so there is nothing here to fit.

    Raises:
        ConfigError: a bad guard, budget or counter.
    """
    return InputFilter(guard, budget, hint=hint, counter=counter)


class CalibrationHooks(RunHooks[Any]):
    """``RunHooks`` that teach a :class:`~ctxstack.CalibratingCounter` the provider's
    token counts: the estimate of what was sent (instructions, input items and the
    function tools' schemas) against ``usage.input_tokens`` of the answer.

    Pass as ``Runner.run(..., hooks=CalibrationHooks(counter))`` and give the same
    counter to the guard. Calls whose usage is zero (not reported) teach nothing.
    """

    def __init__(self, counter: CalibratingCounter) -> None:
        self.counter = counter
        self._pending: dict[int, int] = {}

    async def on_llm_start(self, context: RunContextWrapper[Any], agent: Agent[Any],
                           system_prompt: str | None,
                           input_items: list[TResponseInputItem]) -> None:
        messages = items_to_messages(list(input_items))
        if system_prompt:
            messages.insert(0, ChatMessage.system(system_prompt))
        specs = [ToolSpec(type="function", function=FunctionSpec(
            name=getattr(t, "name", ""), description=getattr(t, "description", ""),
            parameters=getattr(t, "params_json_schema", {}))) for t in agent.tools]
        estimate = self.counter.base_count(messages) + self.counter.tool_specs_tokens(
            specs)
        self._pending[id(context)] = estimate

    async def on_llm_end(self, context: RunContextWrapper[Any], agent: Agent[Any],
                         response: ModelResponse) -> None:
        estimate = self._pending.pop(id(context), None)
        reported = response.usage.input_tokens
        if estimate is not None and reported > 0:
            self.counter.observe(estimate, reported)
