"""ctxstack.integrations.langchain: a real LangChain v1 agent (create_agent) under the guard."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain.agents import create_agent
from langchain_core.callbacks import AsyncCallbackHandler, BaseCallbackHandler
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import Field

from ctxstack import (
    CalibratingCounter,
    ChatMessage,
    CompactionEvent,
    ConfigError,
    ContextGuard,
    LLMError,
    ToolCall,
)
from ctxstack.errors import InputError
from ctxstack.integrations.langchain import (
    EVENT_NAME,
    ContextGuardMiddleware,
    LangChainSummarizer,
    from_chat_messages,
    to_chat_messages,
)
from ctxstack.tokens._counter import budget_margin, effective_budget

BUDGET = 4_000
SYSTEM = "You are a careful research agent. Cite every figure you use. " * 4


class ToolCallingFake(GenericFakeChatModel):
    """LangChain's own fake chat model, able to sit in an agent (bind_tools) and recording
    exactly the messages each call received (system prompt included)."""

    seen: list[list[BaseMessage]] = Field(default_factory=list)

    def bind_tools(self, tools: Any, **kwargs: Any) -> ToolCallingFake:
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None,
                  run_manager: Any = None, **kwargs: Any) -> Any:
        self.seen.append(list(messages))
        return super()._generate(messages, stop, run_manager, **kwargs)


def tool_turns(n: int, tag: str = "") -> Iterator[AIMessage]:
    for i in range(n):
        yield AIMessage(f"Step {i}: I will look up item {i}. " + "reasoning " * 25,
                        tool_calls=[{"name": "lookup", "args": {"q": f"item {i}"},
                                     "id": f"call_{tag}{i}"}])
    yield AIMessage(f"Final answer {tag}: all {n} items found.")


@tool
def lookup(q: str) -> str:
    """Look an item up in the catalogue."""
    return f"Catalogue entry for {q}: price 42.50 EUR, stock 17. " + "details " * 180


def summarizer() -> LangChainSummarizer:
    return LangChainSummarizer(GenericFakeChatModel(
        messages=itertools.repeat(AIMessage("Looked up catalogue items; prices 42.50 EUR."))))


def request_tokens(guard: ContextGuard, messages: Sequence[BaseMessage]) -> int:
    return guard.counter.count_messages(to_chat_messages(messages))


def assert_tool_sequence_valid(messages: Sequence[BaseMessage]) -> None:
    """LangChain / OpenAI rule: an AIMessage's tool calls are answered by the ToolMessages
    right after it, and every ToolMessage answers a call of the AIMessage before it."""
    open_ids: set[str] = set()
    for m in messages:
        if isinstance(m, ToolMessage):
            assert m.tool_call_id in open_ids, f"orphan tool result {m.tool_call_id}"
            open_ids.discard(m.tool_call_id)
            continue
        assert not open_ids, f"tool calls left unanswered: {open_ids}"
        if isinstance(m, AIMessage):
            open_ids = {tc["id"] for tc in m.tool_calls if tc["id"]}
    # The last AI message of a request may not have open calls either (the model answers).
    assert not open_ids or isinstance(messages[-1], ToolMessage)


class EventCollector(AsyncCallbackHandler):
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    async def on_custom_event(self, name: str, data: Any, **kwargs: Any) -> None:
        if name == EVENT_NAME:
            self.events.append(data)


class SyncEventCollector(BaseCallbackHandler):
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def on_custom_event(self, name: str, data: Any, **kwargs: Any) -> None:
        if name == EVENT_NAME:
            self.events.append(data)


def check_calls(model: ToolCallingFake, guard: ContextGuard, query: str) -> None:
    assert model.seen, "the model was never called"
    for call in model.seen:
        assert request_tokens(guard, call) <= BUDGET
        assert isinstance(call[0], SystemMessage)
        assert call[0].content == SYSTEM
        humans = [m for m in call if isinstance(m, HumanMessage)]
        assert humans
        assert humans[-1].content == query
        assert_tool_sequence_valid(call)


# ---------------------------------------------------------------------- the agent loop
async def test_agent_runs_32_tool_turns_within_budget_async() -> None:
    model = ToolCallingFake(messages=tool_turns(32))
    guard_events: list[CompactionEvent] = []
    guard = ContextGuard(compact_llm=summarizer(), on_compact=guard_events.append)
    agent = create_agent(model, [lookup], system_prompt=SYSTEM,
                         middleware=[ContextGuardMiddleware(guard, BUDGET)])
    collector = EventCollector()
    query = "Look up items 0 to 31 and report their prices."
    result = await agent.ainvoke({"messages": [HumanMessage(query)]},
                                 {"callbacks": [collector], "recursion_limit": 200})

    assert len(model.seen) == 33  # 32 tool turns and the final answer
    check_calls(model, guard, query)
    # Without the guard the last call would have carried every turn: far over budget.
    assert sum(len(m.content) for m in result["messages"]) // 4 < BUDGET * 2
    assert guard_events
    assert all(e.method in ("mask", "llm") for e in guard_events)  # cheapest stage first
    assert any(e.method == "llm" for e in guard_events)
    assert [e["tokens_after"] for e in collector.events] == [e.tokens_after for e in guard_events]
    # The state keeps one rolling summary, as a SystemMessage in LangChain's own form.
    final = result["messages"]
    summaries = [m for m in final if isinstance(m, SystemMessage)]
    assert len(summaries) == 1
    assert summaries[0].content.startswith("[Conversation summary]")
    assert summaries[0].additional_kwargs["lc_source"] == "ctxstack"
    assert final[-1].content == "Final answer : all 32 items found."
    assert_tool_sequence_valid(final)
    assert len({m.id for m in final}) == len(final)  # ids unique after REMOVE_ALL + re-add


def test_agent_runs_sync_invoke_with_callbacks() -> None:
    model = ToolCallingFake(messages=tool_turns(30, "s"))
    guard = ContextGuard()  # truncation only
    agent = create_agent(model, [lookup], system_prompt=SYSTEM,
                         middleware=[ContextGuardMiddleware(guard, BUDGET)])
    collector = SyncEventCollector()
    query = "Look up thirty items."
    agent.invoke({"messages": [HumanMessage(query)]},
                 {"callbacks": [collector], "recursion_limit": 200})
    assert len(model.seen) == 31
    check_calls(model, guard, query)
    assert collector.events
    methods = {e["method"] for e in collector.events}
    assert "truncate" in methods
    assert methods <= {"mask", "truncate"}  # no summariser: the cheap stages only
    assert guard.totals.compactions == len(collector.events)


async def test_second_turn_keeps_the_new_question_and_one_summary() -> None:
    model = ToolCallingFake(messages=itertools.chain(tool_turns(20, "a"), tool_turns(12, "b")))
    guard = ContextGuard(compact_llm=summarizer())
    agent = create_agent(model, [lookup], system_prompt=SYSTEM, checkpointer=InMemorySaver(),
                         middleware=[ContextGuardMiddleware(guard, BUDGET)])
    config: Any = {"configurable": {"thread_id": "t1"}, "recursion_limit": 200}
    await agent.ainvoke({"messages": [HumanMessage("First question: items 0-19.")]}, config)
    first_calls = len(model.seen)
    out = await agent.ainvoke({"messages": [HumanMessage("Second question: items 0-11.")]},
                              config)
    for call in model.seen[first_calls:]:
        assert request_tokens(guard, call) <= BUDGET
        humans = [m for m in call if isinstance(m, HumanMessage)]
        assert humans[-1].content == "Second question: items 0-11."
        assert_tool_sequence_valid(call)
    assert sum(1 for m in out["messages"] if isinstance(m, SystemMessage)) == 1


async def test_resumed_long_thread_is_fitted_on_the_very_first_call() -> None:
    """The first call's system prompt is unknown to before_model: wrap_model_call fits it."""
    history: list[BaseMessage] = []
    for i in range(60):
        history += [HumanMessage(f"question {i} " + "words " * 40),
                    AIMessage(f"answer {i} " + "words " * 40)]
    model = ToolCallingFake(messages=iter([AIMessage("done")]))
    guard = ContextGuard()
    middleware = ContextGuardMiddleware(guard, BUDGET)
    agent = create_agent(model, [], system_prompt=SYSTEM, middleware=[middleware])
    await agent.ainvoke({"messages": [*history, HumanMessage("latest question")]})
    assert request_tokens(guard, model.seen[0]) <= BUDGET
    assert model.seen[0][-1].content == "latest question"
    assert middleware.system_tokens == guard.counter.count_messages(
        to_chat_messages([SystemMessage(SYSTEM)]))


@pytest.mark.parametrize("run", ["async", "sync"])
async def test_a_system_prompt_past_the_margin_is_fitted_per_request(run: str) -> None:
    """On the first call before_model cannot know the system prompt: a history that
    fits the budget alone passes it untouched, and with a system prompt bigger than the
    counter's margin the request itself is too big — wrap_model_call fits it (this call
    only): the prompt intact and first, the latest question last, within budget."""
    system = "Follow the operations manual: rule " + "; rule ".join(
        f"{i} applies to every order" for i in range(120))
    guard = ContextGuard()
    history: list[BaseMessage] = []
    room = effective_budget(BUDGET, guard.counter) - 100
    for i in itertools.count():
        pair = [HumanMessage(f"question {i} " + "words " * 40),
                AIMessage(f"answer {i} " + "words " * 40)]
        if request_tokens(guard, [*history, *pair]) > room:
            break
        history += pair
    model = ToolCallingFake(messages=iter([AIMessage("done")]))
    middleware = ContextGuardMiddleware(guard, BUDGET)
    system_tokens = guard.counter.count_messages(to_chat_messages([SystemMessage(system)]))
    assert system_tokens > BUDGET * budget_margin(guard.counter)  # past the margin's room
    agent = create_agent(model, [], system_prompt=system, middleware=[middleware])
    state = {"messages": [*history, HumanMessage("latest question")]}
    if run == "async":
        await agent.ainvoke(state)
    else:
        await asyncio.to_thread(agent.invoke, state)
    sent = model.seen[0]
    assert request_tokens(guard, sent) <= BUDGET
    assert isinstance(sent[0], SystemMessage)
    assert sent[0].content == system
    assert sum(1 for m in sent if isinstance(m, SystemMessage)) == 1
    assert sent[-1].content == "latest question"
    assert middleware.system_tokens == system_tokens


async def test_under_budget_leaves_state_untouched() -> None:
    model = ToolCallingFake(messages=tool_turns(2))
    guard = ContextGuard()
    agent = create_agent(model, [lookup], system_prompt=SYSTEM,
                         middleware=[ContextGuardMiddleware(guard, 100_000)])
    out = await agent.ainvoke({"messages": [HumanMessage("two items")]})
    assert guard.totals.compactions == 0
    assert len(out["messages"]) == 1 + 2 * 2 + 1


async def test_calibrating_counter_is_the_one_that_decides() -> None:
    """A counter that learnt the provider bills 2x makes the guard fit to half the text."""
    counter = CalibratingCounter()
    for _ in range(30):
        counter.observe(1_000, 2_000)
    model = ToolCallingFake(messages=tool_turns(12, "c"))
    guard = ContextGuard(counter=counter)
    agent = create_agent(model, [lookup], system_prompt=SYSTEM,
                         middleware=[ContextGuardMiddleware(guard, BUDGET)])
    await agent.ainvoke({"messages": [HumanMessage("calibrated")]}, {"recursion_limit": 100})
    base = CalibratingCounter().base_count
    for call in model.seen:
        assert counter.count_messages(to_chat_messages(call)) <= BUDGET
        assert base(to_chat_messages(call)) <= BUDGET * 0.55
    assert guard.totals.compactions > 0


# ---------------------------------------------------------------------- conversion
def test_conversion_maps_tool_calls_images_and_system() -> None:
    lc = [
        SystemMessage("sys", id="s1"),
        HumanMessage([{"type": "text", "text": "look"},
                      {"type": "image", "base64": "iVBORw0KGgo=", "mime_type": "image/png"},
                      {"type": "image_url", "image_url": {"url": "https://x/y.png",
                                                          "detail": "low"}}], id="h1"),
        AIMessage("", tool_calls=[{"name": "lookup", "args": {"q": "a"}, "id": "c1"}], id="a1"),
        ToolMessage("result", tool_call_id="c1", id="t1", artifact={"raw": 1}, status="error"),
    ]
    cms = to_chat_messages(lc)
    assert [m.role for m in cms] == ["system", "user", "assistant", "tool"]
    assert [p.image_url.url for p in cms[1].images] == ["data:image/png;base64,iVBORw0KGgo=",
                                                        "https://x/y.png"]
    assert cms[2].content is None
    assert cms[2].tool_calls == [ToolCall(id="c1", name="lookup", arguments={"q": "a"})]
    assert cms[3].tool_call_id == "c1"
    assert from_chat_messages(cms) == lc
    assert [m.id for m in from_chat_messages(cms)] == ["s1", "h1", "a1", "t1"]


def test_cut_message_comes_back_with_new_content_and_same_id() -> None:
    original = HumanMessage([{"type": "text", "text": "x" * 10}], id="h9")
    cm = to_chat_messages([original])[0]
    back = from_chat_messages([cm.replace(content="cut")])[0]
    assert back.content == "cut"
    assert back.id == "h9"


def test_unconvertible_message_is_an_input_error_naming_it() -> None:
    with pytest.raises(InputError, match=r"messages\[1\]: FunctionMessage"):
        to_chat_messages([HumanMessage("a"), FunctionMessage("x", name="f")])


_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30)
_ids = st.text("abcdef0123456789", min_size=1, max_size=8)
_blocks = st.lists(st.one_of(
    _text, st.builds(lambda t: {"type": "text", "text": t}, _text),
    st.builds(lambda u: {"type": "image", "url": f"https://img/{u}.png"}, _ids),
    st.builds(lambda d: {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{d}"}},
              _ids)), max_size=4)
_content = st.one_of(_text, _blocks)
_call = st.builds(lambda i, n, a: {"name": n, "args": {"a": a}, "id": i, "type": "tool_call"},
                  _ids, st.sampled_from(["f", "g"]), st.integers())
_lc_message = st.one_of(
    st.builds(SystemMessage, content=_content, id=st.none() | _ids),
    st.builds(HumanMessage, content=_content, id=st.none() | _ids, name=st.none() | _ids),
    st.builds(lambda c, calls, i: AIMessage(content=c, tool_calls=calls, id=i),
              _content, st.lists(_call, max_size=2), st.none() | _ids),
    st.builds(lambda c, t, i, s: ToolMessage(content=c, tool_call_id=t, id=i, status=s),
              _content, _ids, st.none() | _ids, st.sampled_from(["success", "error"])),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(_lc_message, max_size=6))
def test_langchain_round_trip_is_lossless(messages: list[BaseMessage]) -> None:
    assert from_chat_messages(to_chat_messages(messages)) == messages


_cm = st.one_of(
    st.builds(lambda t, p: ChatMessage(role="system", content=t, pinned=p), _text, st.booleans()),
    st.builds(lambda t, k: ChatMessage(role="user", content=t, metadata=k), _text,
              st.sampled_from([{}, {"kind": "query"}, {"kind": "inject", "x": [1]}])),
    st.builds(lambda t, i: ChatMessage(role="assistant", content=t or None,
                                       tool_calls=[ToolCall(id=i, name="f", arguments={"a": 1})]),
              _text, _ids),
    st.builds(lambda t, i, n: ChatMessage(role="tool", content=t, tool_call_id=i, name=n),
              _text, _ids, st.none() | _ids),
    st.builds(lambda t: ChatMessage(role="system", content=t, metadata={"kind": "summary"}),
              _text),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(_cm, max_size=6))
def test_ctxstack_round_trip_is_lossless(messages: list[ChatMessage]) -> None:
    assert to_chat_messages(from_chat_messages(messages)) == messages


# ---------------------------------------------------------------------- summariser
async def test_summarizer_is_a_ctxstack_llm_with_reported_usage() -> None:
    model = GenericFakeChatModel(messages=iter([AIMessage(
        "the summary", usage_metadata={"input_tokens": 11, "output_tokens": 3,
                                       "total_tokens": 14})]))
    llm = LangChainSummarizer(model, context_size=32_000, max_output_tokens=4_000)
    result = await llm.chat([ChatMessage.system("s"), ChatMessage.user("u")], max_tokens=50)
    assert result.text == "the summary"
    assert (result.usage.input_tokens, result.usage.output_tokens) == (11, 3)
    assert not result.usage.estimated
    assert (llm.context_size, llm.max_output_tokens) == (32_000, 4_000)
    assert "langchain" not in result.message.metadata


async def test_summarizer_streams_text_with_estimated_usage() -> None:
    llm = LangChainSummarizer(GenericFakeChatModel(messages=iter(["one two three"])))
    stream = llm.stream_chat([ChatMessage.user("go")])
    assert await stream.text() == "one two three"
    assert stream.usage.estimated
    assert stream.usage.output_tokens > 0


async def test_summarizer_failure_is_an_llm_error_and_the_guard_falls_back() -> None:
    llm = LangChainSummarizer(GenericFakeChatModel(messages=iter([])))
    with pytest.raises(LLMError, match="GenericFakeChatModel failed"):
        await llm.chat([ChatMessage.user("x")])
    with pytest.raises(LLMError, match="failed while streaming"):
        await llm.stream_chat([ChatMessage.user("x")]).text()
    events: list[CompactionEvent] = []
    guard = ContextGuard(compact_llm=llm, on_compact=events.append)
    long = [ChatMessage.user("q " * 3000), ChatMessage.assistant("a " * 3000),
            ChatMessage.user("now")]
    fitted = await guard.check_and_compact(long, 1_000)
    assert events[0].method == "truncate"
    assert events[0].fell_back
    assert fitted[-1].text == "now"


async def test_summarizer_tools_go_through_bind_tools() -> None:
    class Binding(GenericFakeChatModel):
        bound: list[Any] = Field(default_factory=list)

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            self.bound.append(tools)
            return self

    model = Binding(messages=iter([AIMessage("", tool_calls=[
        {"name": "f", "args": {"x": 1}, "id": "c9"}])]))
    spec = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    result = await LangChainSummarizer(model).chat([ChatMessage.user("x")], tools=[spec])
    assert model.bound == [[spec]]
    assert result.message.tool_calls == [ToolCall(id="c9", name="f", arguments={"x": 1})]


def test_bad_arguments_are_config_errors() -> None:
    guard = ContextGuard()
    with pytest.raises(ConfigError, match="budget"):
        ContextGuardMiddleware(guard, 0)
    with pytest.raises(ConfigError, match="guard"):
        ContextGuardMiddleware("guard", 100)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="chat_model"):
        LangChainSummarizer("gpt")  # type: ignore[arg-type]
    assert ContextGuardMiddleware(guard).budget == guard.default_budget


