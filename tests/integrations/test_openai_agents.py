"""The OpenAI Agents SDK adapter driving a real ``Runner`` with the SDK's ``ScriptedModel``.

Every model call is checked as the provider would see it: within budget, every
``function_call`` answered by its ``function_call_output`` (and no output without its
call), no reasoning item left without what it reasoned about, the instructions and the
latest user message intact. Sessions run on SQLite and PostgreSQL.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner, Session, function_tool, trace
from agents.run_config import CallModelData, ModelInputData
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call
from agents.tracing import Span, Trace, TracingProcessor, set_trace_processors
from agents.usage import Usage as AgentsUsage
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.responses import ResponseReasoningItem
from openai.types.responses.response_reasoning_item import Summary
from sqlalchemy.ext.asyncio import AsyncEngine

from ctxstack import CalibratingCounter, ChatMessage, ConfigError, ContextGuard
from ctxstack.errors import InputError
from ctxstack.integrations._responses import PrefixCache, items_to_messages
from ctxstack.integrations.openai_agents import CalibrationHooks, CtxstackSession, input_filter
from ctxstack.store import list_messages, session_factory
from ctxstack.store.db import create_engine_from_url
from tests.integrations import inventory
from tests.integrations.inventory import INSTRUCTIONS, TURNS, question, summariser
from tests.store.dbkit import postgres_backend


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def db_engine(request: pytest.FixtureRequest, tmp_path: Any) -> AsyncIterator[AsyncEngine]:
    """An engine on an empty database, SQLite or PostgreSQL (a schema per test, see
    tests/store/dbkit.py); the session migrates it on first use."""
    if request.param == "sqlite":
        engine = create_engine_from_url(f"sqlite+aiosqlite:///{tmp_path / 'agents.db'}")
        try:
            yield engine
        finally:
            await engine.dispose()
        return
    async for pg in postgres_backend():
        engine = pg.engine()
        try:
            yield engine
        finally:
            await engine.dispose()


CALL_BUDGET = 1_000
SESSION_BUDGET = 1_200


lookup = function_tool(inventory.lookup)


class SpanCollector(TracingProcessor):
    def __init__(self) -> None:
        self.spans: list[Span[Any]] = []

    def on_trace_start(self, trace: Trace) -> None: ...
    def on_trace_end(self, trace: Trace) -> None: ...
    def on_span_start(self, span: Span[Any]) -> None: ...

    def on_span_end(self, span: Span[Any]) -> None:
        self.spans.append(span)

    def shutdown(self) -> None: ...
    def force_flush(self) -> None: ...


@pytest.fixture
def spans() -> Iterator[SpanCollector]:
    collector = SpanCollector()
    set_trace_processors([collector])  # also keeps the default exporter off the network
    try:
        yield collector
    finally:
        set_trace_processors([])


class Inventory:
    """The test model's behaviour: tool calls (with reasoning) first, then an answer."""

    def __init__(self) -> None:
        self.turn = 0
        self.calls: list[ModelCall] = []

    def respond(self, call: ModelCall) -> list[Any]:
        self.calls.append(call)
        items = call.input if isinstance(call.input, list) else []
        last = items[-1] if items else {}
        if isinstance(last, dict) and last.get("type") == "function_call_output":
            return [assistant_message(f"Shelf S-{self.turn:03d} holds the rows listed.",
                                      item_id=f"msg_{self.turn}")]
        self.turn += 1
        n = self.turn
        reasoning = ResponseReasoningItem(
            id=f"rs_{n}", type="reasoning",
            summary=[Summary(text=f"Need to look up shelf {n}.", type="summary_text")])
        calls = [function_call("lookup", {"key": f"S-{n:03d}"}, call_id=f"call_{n}_a")]
        if n % 3 == 0:  # parallel tool calls every third turn
            calls.append(function_call("lookup", {"key": f"S-{n:03d}-b"}, call_id=f"call_{n}_b"))
        return [reasoning, *calls]


def input_tokens(guard: ContextGuard, call: ModelCall) -> int:
    messages = items_to_messages(list(call.input))
    if call.system_instructions:
        messages.insert(0, ChatMessage.system(call.system_instructions))
    return guard.counter.count_messages(messages)


def assert_valid_for_provider(items: list[dict[str, Any]]) -> None:
    """The Responses-API pairing rules the provider enforces on an input list."""
    calls: list[str] = []
    outputs: set[str] = set()
    for i, item in enumerate(items):
        kind = item.get("type")
        if kind == "function_call":
            calls.append(item["call_id"])
        elif kind == "function_call_output":
            assert item["call_id"] in calls, f"output {item['call_id']} without its call"
            outputs.add(item["call_id"])
        elif kind == "reasoning":
            nxt = items[i + 1] if i + 1 < len(items) else None
            assert nxt is not None, "reasoning item at the end of the input"
            assert nxt.get("type") == "function_call" or nxt.get("role") == "assistant", (
                "reasoning item left without its output")
    assert set(calls) <= outputs, f"calls without outputs: {set(calls) - outputs}"


async def test_agent_runs_32_tool_turns_within_budget(
    db_engine: AsyncEngine, spans: SpanCollector
) -> None:
    guard = ContextGuard(compact_llm=summariser())
    session = CtxstackSession("user-42", guard, SESSION_BUDGET, db_engine)
    behaviour = Inventory()
    model = ScriptedModel([ModelStep.respond(behaviour.respond) for _ in range(3 * TURNS)])
    agent = Agent(name="inventory", instructions=INSTRUCTIONS, model=model, tools=[lookup])
    filt = input_filter(guard, CALL_BUDGET)
    config = RunConfig(call_model_input_filter=filt, workflow_name="inventory")

    with trace("inventory conversation"):  # session reads happen outside a run's trace
        for turn in range(1, TURNS + 1):
            result = await Runner.run(agent, question(turn), session=session,
                                      run_config=config)
            assert result.final_output == f"Shelf S-{turn:03d} holds the rows listed."

    assert len(behaviour.calls) == 2 * TURNS
    for call in behaviour.calls:
        items = list(call.input)
        assert input_tokens(guard, call) <= CALL_BUDGET
        assert call.system_instructions == INSTRUCTIONS
        assert_valid_for_provider(items)
    for turn, call in enumerate(behaviour.calls[::2], start=1):  # first call of each turn
        users = [i for i in call.input if i.get("role") == "user"]
        assert users[-1]["content"] == question(turn)

    # Compaction happened, by summary, and was reported through the SDK's tracing.
    assert any(e.method == "llm" for e in session.events)
    assert any(e.method == "llm" for e in filt.events)
    assert all(e.tokens_after <= e.budget for e in session.events + filt.events)
    compaction_spans = [s for s in spans.spans
                        if getattr(s.span_data, "name", None) == "ctxstack.compaction"]
    assert len(compaction_spans) == len(session.events) + len(filt.events)
    assert compaction_spans[0].span_data.data["method"] in ("llm", "truncate")

    # The summary is a system message item, and later runs started from the checkpoint.
    history = await session.get_items()
    assert history[0]["role"] == "system"
    assert history[0]["content"].startswith("[Conversation summary]")
    assert any(i.get("content", "").startswith("[Conversation summary]")
               for call in behaviour.calls[-2:] for i in call.input if i.get("role") == "system")

    # Nothing is lost: every item of every turn is stored verbatim.
    stored = await list_messages(session_factory(db_engine), session._store.conversation_id)
    expected = sum(1 + 1 + (2 if t % 3 == 0 else 1) * 2 + 1 for t in range(1, TURNS + 1))
    assert len(stored) == expected
    await session.close()


async def test_session_protocol_and_persistence(db_engine: AsyncEngine) -> None:
    guard = ContextGuard()
    session = CtxstackSession("abc", guard, 10_000, db_engine)
    assert isinstance(session, Session)
    assert await session.get_items() == []
    assert await session.pop_item() is None
    items = [
        {"role": "user", "content": "hello"},
        {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": '{"key":"a"}',
         "id": "fc_1"},
        {"type": "function_call_output", "call_id": "c1", "output": "a=1"},
        {"role": "assistant", "content": [{"type": "output_text", "text": "a is 1",
                                           "annotations": []}],
         "type": "message", "id": "msg_1", "status": "completed"},
    ]
    await session.add_items(items)
    assert await session.get_items() == items
    assert await session.get_items(limit=2) == items[2:]

    # Another instance (another process, say) sees the same session; other ids do not.
    again = CtxstackSession("abc", guard, 10_000, db_engine)
    assert await again.get_items() == items
    other = CtxstackSession("abd", guard, 10_000, db_engine)
    assert await other.get_items() == []

    assert await session.pop_item() == items[-1]
    assert await again.get_items() == items[:-1]
    await session.clear_session()
    assert await again.get_items() == []
    await session.add_items(items[:1])  # a cleared session can be used again
    assert await session.get_items() == items[:1]
    for s in (session, again, other):
        await s.close()


async def test_truncating_session_never_splits_a_tool_pair(tmp_path: Any) -> None:
    guard = ContextGuard()
    session = CtxstackSession("t", guard, 120, f"sqlite+aiosqlite:///{tmp_path / 'x.db'}")
    items: list[dict[str, Any]] = []
    for n in range(20):
        items += [
            {"role": "user", "content": f"question {n} " + "pad " * 20},
            {"type": "reasoning", "id": f"rs_{n}", "summary": []},
            {"type": "function_call", "call_id": f"c{n}", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": f"c{n}", "output": "x " * 40},
        ]
    await session.add_items(items)
    history = await session.get_items()
    assert history
    assert history == items[-len(history):]
    assert history[0]["role"] == "user"
    assert_valid_for_provider(history)
    assert session.events
    assert session.events[0].method == "truncate"
    await session.close()


async def test_a_session_over_budget_reads_a_stable_window_turn_after_turn(
    tmp_path: Any
) -> None:
    """The session reads its whole stored history at every call; over budget, what it
    gives the model keeps its start for several turns (a cached prefix) instead of
    sliding by one turn per call, and always fits."""
    guard = ContextGuard()
    session = CtxstackSession("s", guard, 600, f"sqlite+aiosqlite:///{tmp_path / 's.db'}")
    reads: list[list[Any]] = []
    for n in range(60):
        await session.add_items([
            {"role": "user", "content": f"question {n} " + "pad " * 12},
            {"type": "function_call", "call_id": f"c{n}", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": f"c{n}", "output": f"row {n} " * 8},
            {"role": "assistant", "content": f"answer {n}"},
        ])
        history = await session.get_items()
        assert_valid_for_provider(history)
        assert history[0]["role"] == "user"
        if len(history) < 4 * (n + 1):  # over budget: a window of the stored items
            reads.append(history)
    kept = sum(b[: len(a)] == a for a, b in itertools.pairwise(reads))
    assert len(reads) > 30
    assert kept >= 0.6 * (len(reads) - 1)
    await session.close()


async def test_input_filter_returns_the_input_untouched_within_budget() -> None:
    guard = ContextGuard()
    filt = input_filter(guard, 10_000)
    behaviour = Inventory()
    model = ScriptedModel([ModelStep.respond(behaviour.respond) for _ in range(2)])
    agent = Agent(name="a", instructions=INSTRUCTIONS, model=model, tools=[lookup])
    await Runner.run(agent, question(1),
                     run_config=RunConfig(call_model_input_filter=filt, tracing_disabled=True))
    assert filt.events == []
    assert behaviour.calls[0].input == [{"role": "user", "content": question(1)}]


async def test_calibration_hooks_learn_from_reported_usage() -> None:
    counter = CalibratingCounter()
    guard = ContextGuard(counter=counter)
    filt = input_filter(guard, 10_000)
    assert filt.counter is counter
    behaviour = Inventory()
    model = ScriptedModel([ModelStep.respond(behaviour.respond) for _ in range(2)],
                          default_usage=AgentsUsage(requests=1, input_tokens=900,
                                                    output_tokens=5, total_tokens=905))
    agent = Agent(name="a", instructions=INSTRUCTIONS * 3, model=model, tools=[lookup])
    await Runner.run(agent, question(1), hooks=CalibrationHooks(counter),
                     run_config=RunConfig(call_model_input_filter=filt, tracing_disabled=True))
    # Both calls reach the counter; a fixed fake usage far above a small first call's
    # estimate is rejected as absurd by the counter's own rule, so count both outcomes.
    assert counter.samples() + counter.rejected == 2, (counter.samples(), counter.rejected)
    assert counter.samples() >= 1
    assert counter.factor() > 1.0  # 900 reported is more than the estimate


def test_bad_arguments_are_refused_with_the_argument_named(tmp_path: Any) -> None:
    guard = ContextGuard()
    url = f"sqlite+aiosqlite:///{tmp_path / 'x.db'}"
    with pytest.raises(ConfigError, match="budget"):
        CtxstackSession("s", guard, 0, url)
    with pytest.raises(ConfigError, match="guard"):
        CtxstackSession("s", object(), 100, url)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="counter"):
        input_filter(guard, 100, counter=CalibratingCounter())  # not the guard's counter
    with pytest.raises(ConfigError, match="hint"):
        input_filter(guard, 100, hint="bogus")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="session_id"):
        CtxstackSession("", guard, 100, url)


_KINDS = {
    "user": lambda n: {"role": "user", "content": f"u{n}"},
    "reasoning": lambda n: {"type": "reasoning", "id": f"rs{n}", "summary": []},
    "call": lambda n: {"type": "function_call", "call_id": f"c{n}", "name": "f",
                       "arguments": "{}"},
    "output": lambda n: {"type": "function_call_output", "call_id": f"c{n}", "output": "o"},
    "assistant": lambda n: {"role": "assistant", "content": f"a{n}"},
}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.sampled_from(sorted(_KINDS)), min_size=1, max_size=4),
                min_size=1, max_size=8))
def test_prefix_cache_converts_a_growing_input_like_a_fresh_conversion(
    steps: list[list[str]],
) -> None:
    cache = PrefixCache()
    items: list[dict[str, Any]] = []
    for step in steps:
        items = [*items, *(_KINDS[k](len(items) + j) for j, k in enumerate(step))]
        cached = cache.convert(items)
        fresh = items_to_messages(items)
        assert [m.model_dump() for m in cached] == [m.model_dump() for m in fresh]


async def test_oversized_items_are_cut_and_rebuilt_around_their_calls() -> None:
    guard = ContextGuard(max_message_chars=1_000)
    filt = input_filter(guard, 50_000)
    items: list[dict[str, Any]] = [
        {"role": "user", "content": "Summarise the log."},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "message", "role": "assistant", "id": "msg_1",
         "content": [{"type": "output_text", "text": "thinking aloud " * 200,
                      "annotations": []}]},
        {"type": "function_call", "call_id": "c1", "name": "read_log", "arguments": "{}",
         "id": "fc_1"},
        {"type": "function_call_output", "call_id": "c1", "output": "log line\n" * 1_000},
    ]
    agent = Agent(name="a", instructions="Be brief.")
    out = await filt(CallModelData(model_data=ModelInputData(input=list(items),  # type: ignore[arg-type]
                                                             instructions="Be brief."),
                                   agent=agent, context=None))
    got = list(out.input)
    assert_valid_for_provider(got)  # type: ignore[arg-type]
    assert got[0] is items[0]  # untouched items come back as the very objects
    assert [i.get("type") for i in got[1:]] == ["message", "function_call",
                                                "function_call_output"]
    assert "[Truncated" in got[1]["content"]
    assert got[2]["call_id"] == "c1"
    assert "id" not in got[2]  # rebuilt without its reasoning: no server identity
    assert "[Truncated" in got[3]["output"]
    assert got[3]["call_id"] == "c1"
    assert len(got[3]["output"]) <= 1_000
    assert out.instructions == "Be brief."


async def test_session_summarises_once_per_overflow_and_pop_drops_stale_checkpoints(
    tmp_path: Any,
) -> None:
    llm = summariser()
    guard = ContextGuard(compact_llm=llm)
    url = f"sqlite+aiosqlite:///{tmp_path / 'x.db'}"
    session = CtxstackSession("s", guard, 400, url)
    for n in range(12):
        await session.add_items([{"role": "user", "content": f"question {n} " + "pad " * 30},
                                 {"role": "assistant", "content": f"answer {n} " + "pad " * 30}])
    first = await session.get_items()
    assert first[0]["content"].startswith("[Conversation summary]")
    calls = len(llm.calls)
    again = CtxstackSession("s", guard, 400, url)  # a later run, another instance
    assert await again.get_items() == first  # started from the checkpoint: no new summary
    assert len(llm.calls) == calls
    while await again.pop_item() is not None:
        pass
    assert await again.get_items() == []  # no checkpoint outlives the items it covered
    for s in (session, again):
        await s.close()


@st.composite
def tool_turns(draw: st.DrawFn) -> list[dict[str, Any]]:
    """A valid history: turns of user → (reasoning, calls, outputs)* → answer."""
    items: list[dict[str, Any]] = []
    for t in range(draw(st.integers(1, 8))):
        items.append({"role": "user", "content": f"q{t} " + "w " * draw(st.integers(0, 80))})
        for s in range(draw(st.integers(0, 2))):
            ids = [f"c{t}_{s}_{k}" for k in range(draw(st.integers(1, 2)))]
            if draw(st.booleans()):
                items.append({"type": "reasoning", "id": f"rs{t}_{s}", "summary": []})
            items += [{"type": "function_call", "call_id": i, "name": "f", "arguments": "{}"}
                      for i in ids]
            items += [{"type": "function_call_output", "call_id": i,
                       "output": "o " * draw(st.integers(0, 120))} for i in ids]
        items.append({"role": "assistant", "content": f"a{t}"})
    return items


@settings(max_examples=80, deadline=None)
@given(tool_turns(), st.integers(60, 1_500))
async def test_filter_output_is_always_a_valid_verbatim_suffix(
    items: list[dict[str, Any]], budget: int
) -> None:
    filt = input_filter(ContextGuard(), budget)
    agent = Agent(name="a")
    out = await filt(CallModelData(model_data=ModelInputData(input=list(items),  # type: ignore[arg-type]
                                                             instructions=None),
                                   agent=agent, context=None))
    got = list(out.input)
    assert_valid_for_provider(got)  # type: ignore[arg-type]
    assert filt.guard.counter.count_messages(items_to_messages(got)) <= budget
    last_user = max(i for i, item in enumerate(items) if item.get("role") == "user")
    query = items[last_user]["content"]
    users = [i["content"] for i in got if i.get("role") == "user"]
    # The latest user message is never dropped; only one that alone exceeds the guard's
    # pinned cap (half the budget) is cut head+tail.
    assert users[-1] == query or (users[-1].startswith(query[:3]) and "[Truncated" in users[-1])
    # Kept items are the originals, except outputs the mask stage cleared (placeholders
    # that name the call) and messages cut head+tail: by the guard's stage 1 or pinned cap
    # ("[Truncated: …]") or by the truncation filling the budget ("[… removed …]").
    kept = [i for i in got
            if "[Truncated" not in str(i) and "[tool output cleared:" not in str(i)
            and "characters removed ...]" not in str(i)]
    assert all(any(k is i for i in items) for k in kept)


async def test_streamed_runs_use_the_session_and_the_filter(tmp_path: Any) -> None:
    guard = ContextGuard()
    session = CtxstackSession("stream", guard, 500, f"sqlite+aiosqlite:///{tmp_path / 's.db'}")
    behaviour = Inventory()
    model = ScriptedModel([ModelStep.respond(behaviour.respond) for _ in range(24)])
    agent = Agent(name="inventory", instructions=INSTRUCTIONS, model=model, tools=[lookup])
    filt = input_filter(guard, 700)
    config = RunConfig(call_model_input_filter=filt, tracing_disabled=True)
    for turn in range(1, 9):
        result = Runner.run_streamed(agent, question(turn), session=session, run_config=config)
        async for _ in result.stream_events():
            pass
        assert result.final_output == f"Shelf S-{turn:03d} holds the rows listed."
    assert all(call.streamed for call in behaviour.calls)
    for call in behaviour.calls:
        assert input_tokens(guard, call) <= 700
        assert_valid_for_provider(list(call.input))
    assert session.events or filt.events
    await session.close()
