"""ReActAgent over real loopback HTTP: OpenAICompatibleLLM against the stub server."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from ctxstack.agent import ReActAgent, tool
from ctxstack.errors import AgentError
from ctxstack.llm.openai import OpenAICompatibleLLM
from ctxstack.llm.stub import StubReply, StubRequest, StubServer
from ctxstack.tokens import HEURISTIC
from ctxstack.tokens._counter import tool_specs_tokens
from tests.guard_support import SpyGuard


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
def lookup(key: str) -> str:
    """Look up a stored value."""
    return {"rate": "0.92 EUR per USD", "city": "Oslo"}.get(key, "unknown key")


def make_agent(llm: OpenAICompatibleLLM, guard: Any = None, **kw: Any) -> ReActAgent:
    kw.setdefault("tools", [add, lookup])
    return ReActAgent(llm, guard=guard or SpyGuard(), system_prompt="You are a test agent.",
                      **kw)


def prompt_tokens(requests: list[StubRequest]) -> int:
    return sum(HEURISTIC.count_messages(r.messages) for r in requests)


async def test_multi_step_tool_use_over_http(stub: StubServer, stub_client: OpenAICompatibleLLM) -> None:
    stub.push(StubReply.tool_call("lookup", {"key": "rate"}),
              StubReply.tool_call("add", {"a": 40, "b": 2}),
              "42 dollars, at 0.92 EUR per USD.")
    result = await make_agent(stub_client, checklist_threshold=None).run("Convert 42 USD")
    assert result.answer == "42 dollars, at 0.92 EUR per USD."
    assert [(e.tool, e.result_preview) for e in result.trace] == [
        ("lookup", "0.92 EUR per USD"), ("add", "42")]
    reqs = stub.requests
    assert len(reqs) == 3
    # native tool calling on the wire: specs sent, observations returned as tool messages
    assert [t["function"]["name"] for t in reqs[0].tools or []] == ["add", "lookup"]
    assert [m.role for m in reqs[2].messages] == [
        "system", "user", "assistant", "tool", "assistant", "tool"]
    assert reqs[2].messages[3].text == "0.92 EUR per USD"
    assert reqs[2].messages[3].tool_call_id == reqs[2].messages[2].tool_calls[0].id  # type: ignore[index]


async def test_usage_and_streaming_synthesis_over_http(stub: StubServer, stub_client: OpenAICompatibleLLM) -> None:
    stub.push(StubReply.tool_call("add", {"a": 1, "b": 2}), "3",
              StubReply.text("One plus two is three.", chunk_size=3))
    agent = make_agent(stub_client)
    result = await agent.run("1+2?")
    deltas = [d async for d in agent.stream_answer("1+2?", result)]
    assert len(deltas) > 1
    assert "".join(deltas) == "One plus two is three." == result.synthesis
    reqs = stub.requests
    assert reqs[-1].stream
    assert "1+2?" in reqs[-1].messages[-1].text
    # every call counted: two loop calls and the streamed synthesis, as the server reported
    assert result.usage.calls == 3
    assert result.usage.input_tokens == prompt_tokens(reqs)
    assert not result.usage.estimated


async def test_overflow_from_the_server_is_retried_once_at_half_budget(stub: StubServer, stub_client: OpenAICompatibleLLM) -> None:
    guard = SpyGuard()
    stub.push(StubReply.overflow(), "fits now")
    result = await make_agent(stub_client, guard, budget=8_000).run("q")
    assert result.answer == "fits now"
    spent = tool_specs_tokens(stub.requests[0].tools)  # the tool list is billed as input
    assert spent > 0
    assert [b for _, b, _ in guard.calls] == [8_000 - spent, 4_000 - spent]
    stub.push(StubReply.overflow(), StubReply.overflow())
    with pytest.raises(AgentError, match="half the budget"):
        await make_agent(stub_client, budget=8_000).run("q")


async def test_cycle_warning_and_checklist_over_http(stub: StubServer, stub_client: OpenAICompatibleLLM) -> None:
    stub.push(*[StubReply.tool_call("lookup", {"key": "city"})] * 3, "Oslo", "Oslo, checked.")
    result = await make_agent(stub_client).run("Which city?")
    assert result.answer == "Oslo, checked."
    texts = [m.text for m in stub.requests[3].messages]
    assert texts[-1].startswith("[Warning]")
    assert "'lookup'" in texts[-1]
    last = stub.requests[4].messages
    assert last[-2].text == "Oslo"
    assert last[-1].text.startswith("[Checklist]")


async def test_bad_tool_arguments_from_the_wire_become_a_tool_result(stub: StubServer, stub_client: OpenAICompatibleLLM) -> None:
    stub.push(StubReply.tool_call("add", '{"a": 1, "b"'), StubReply.tool_call("add", {"a": "x"}),
              "could not add")
    result = await make_agent(stub_client).run("add")
    assert [e.error for e in result.trace] == ["invalid_arguments", "invalid_arguments"]
    tool_texts = [m.text for m in stub.requests[2].messages if m.role == "tool"]
    assert "not a valid JSON object" in tool_texts[0]
    assert "a: Input should be a valid integer" in tool_texts[1]


async def test_injected_message_reaches_the_model_over_http(stub: StubServer, stub_client: OpenAICompatibleLLM) -> None:
    def rule(request: StubRequest) -> str:
        follow = [m.text for m in request.messages if m.role == "user"][1:]
        return f"answered with: {follow}" if follow else "first draft"

    stub.rule = rule
    stub.delay = 0.1
    agent = make_agent(stub_client)

    async def type_later() -> None:
        await asyncio.sleep(0.03)  # during the first (slow) model call
        agent.inject("and in Celsius")

    result, _ = await asyncio.gather(agent.run("Weather in Oslo?"), type_later())
    assert result.answer == "answered with: ['and in Celsius']"
    assert result.iterations == 2


# ----------------------------------------------------------------- ctxstack chat


def test_chat_cli_once_against_the_stub() -> None:
    from click.testing import CliRunner

    import ctxstack.cli.chat  # noqa: F401  (registers the command)
    from ctxstack.cli import main

    result = CliRunner().invoke(main, ["chat", "--stub", "--once", "What is 6*7?"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert '→ calculator({"expression": "6*7"})' in out
    assert "← 42" in out
    assert "The result is 42." in out  # the streamed synthesis
    assert re.search(r"\d+\.\dk in / \d+\.\dk out · 2 iteration\(s\)", out)


def test_chat_cli_interactive_session_keeps_history() -> None:
    from click.testing import CliRunner

    import ctxstack.cli.chat  # noqa: F401
    from ctxstack.cli import main

    result = CliRunner().invoke(
        main, ["chat", "--stub", "--no-synthesis", "--budget", "4000"],
        input="Count the words: one two three\nhello there\n/exit\n",
    )
    assert result.exit_code == 0, result.output
    out = result.output
    assert "budget 4,000 tokens" in out
    assert "→ word_count" in out
    assert '"words": 3' in out
    assert "(stub) You said: hello there" in out
    assert out.count("k in / ") == 2


def test_chat_cli_shows_compaction_notices() -> None:
    from click.testing import CliRunner

    import ctxstack.cli.chat  # noqa: F401
    from ctxstack.cli import main

    result = CliRunner().invoke(
        # the three tools' specs take ~300 tokens of the budget on every call
        main, ["chat", "--stub", "--no-synthesis", "--budget", "450"],
        input="What is 1+1?\nWhat is 2+2?\nWhat is 3+3?\nWhat is 4+4?\n",
    )
    assert result.exit_code == 0, result.output
    assert re.search(r"⟲ context compacted \((llm|truncate)\): \d+ → \d+ messages", result.output)
    assert "The result is 8." in result.output


def test_chat_cli_reports_missing_configuration() -> None:
    from click.testing import CliRunner

    import ctxstack.cli.chat  # noqa: F401
    from ctxstack.cli import main

    # An endpoint without its key and model is an error naming them (with no endpoint at
    # all, chat uses the offline demo model: tests/test_cli_commands.py).
    result = CliRunner().invoke(main, ["chat", "--once", "hi"], env={
        "LLM_BASE_URL": "http://127.0.0.1:9/v1", "LLM_API_KEY": "", "LLM_MODEL": ""})
    assert result.exit_code != 0
    assert "LLM_API_KEY, LLM_MODEL" in result.output


def test_format_usage() -> None:
    from ctxstack.cli.chat import format_usage
    from ctxstack.llm import Usage

    assert format_usage(Usage(input_tokens=1234, output_tokens=56)) == "1.2k in / 0.1k out"


# ----------------------------------------------------------------- long run, real guard, HTTP


@tool
async def read_page(page: int) -> str:
    """Read one page of the log."""
    row = f"page {page} row: sensor-{page:03d} reading {page * 7}.5 ok; "
    size = 60_000 if page % 6 == 0 else 2_500 + 300 * page
    return (row * (size // len(row) + 1))[:size]


QUERY = "Read pages 1-18 of the sensor log and report anomalies (ticket Q-7731)."


def paging_rule(pages: int) -> Any:
    """Plays both models: the agent reads one page per call; summarisation requests (no
    tools, the guard's compaction prompt) get a summary."""

    def rule(request: StubRequest) -> StubReply | str:
        if request.tools is None:
            return "Pages read so far are normal; page 2 reading 14.5 (Q-7731)."
        last_page = max((int(m.tool_calls[0].arguments["page"]) for m in request.messages
                         if m.role == "assistant" and m.tool_calls), default=0)
        if last_page >= pages:
            return "No anomalies on pages 1-18."
        return StubReply.tool_call("read_page", {"page": last_page + 1})

    return rule


async def test_long_run_over_http_stays_in_budget_and_keeps_query_and_summary(
    stub: StubServer, stub_client: OpenAICompatibleLLM
) -> None:
    budget = 6_000
    stub.rule = paging_rule(18)
    guard = SpyGuard(compact_llm=stub_client)
    result = await make_agent(stub_client, guard, tools=[read_page], budget=budget,
                              max_iterations=40, checklist_threshold=None).run(QUERY)
    assert result.answer == "No anomalies on pages 1-18."
    agent_requests = [r for r in stub.requests if r.tools is not None]
    summary_requests = [r for r in stub.requests if r.tools is None]
    assert len(agent_requests) == result.iterations
    spent = tool_specs_tokens(agent_requests[0].tools)
    assert [(b, h) for _, b, h in guard.calls] == [
        (budget - spent, "react_iteration")] * result.iterations
    for r in agent_requests:
        # what went over the wire (tool list included) fits the budget and still carries
        # the user's question
        assert HEURISTIC.count_messages(r.messages) + tool_specs_tokens(r.tools) <= budget
        assert sum(1 for m in r.messages if m.role == "user" and m.text == QUERY) == 1
    assert summary_requests, "the run must have compacted with the LLM"
    assert any(m.role == "system" and m.text.startswith("[Conversation summary]")
               and "Q-7731" in m.text for r in agent_requests for m in r.messages)
    # usage: every request the server answered, agent and summariser alike
    assert result.usage.calls == len(stub.requests)
    assert result.usage.input_tokens == prompt_tokens(stub.requests)
