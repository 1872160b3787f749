"""A 200-turn growing conversation through ``ctxstack proxy`` with the openai SDK.

The client behaves like any agent: it resends the whole history on every call, with tool
definitions, and runs a tool whenever the model asks for one. The proxy (budget 4,000
input tokens) must keep every upstream request within budget, keep tool sequences valid,
never touch the system prompt or the last user message, and summarise at most once per
overflow — an overflow being a request whose history, *starting from what the proxy
forwarded last time*, no longer fits (computed here from what the upstream received, not
from the proxy's headers). Once something was compacted away the proxy offers its own
``ctxstack_recall`` tool too (never shown to the client), whose definition counts.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from ctxstack import ChatMessage
from ctxstack.llm.stub import StubServer
from ctxstack.proxy import parse_compaction_header
from ctxstack.proxy.chat_wire import RECALL_TOOL_SPEC
from ctxstack.tokens import DEFAULT_COUNTER
from ctxstack.tokens._counter import effective_budget
from tests.proxy_support import (
    ConversationRule,
    ProxyProcess,
    chat_requests,
    is_summary_request,
    running_proxy,
    tool_sequence_problems,
)

BUDGET = 4_000
TURNS = 200
MODEL = "stub-model"
SYSTEM = "You are the planning assistant of ACME-7. Keep the budget; cite order numbers."
TOOLS = [{"type": "function", "function": {
    "name": "lookup", "description": "Look something up in the order database",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                   "required": ["query"]}}}]
ANSWER = ("Noted. The plan keeps the 3.2% growth target, order #A-1042 ships on 2026-03-14, "
          "and the remaining budget is 41,500 EUR across the three teams. Next, the teams "
          "review the shipping dates and confirm the invoice totals with finance.")


@pytest.fixture(scope="module")
def proxy(stub_server: StubServer, tmp_path_factory: pytest.TempPathFactory,
          ) -> Iterator[ProxyProcess]:
    env = {"LLM_API_KEY": "k", "LLM_CONTEXT_SIZE": "5000", "LLM_MAX_OUTPUT_TOKENS": "1000"}
    with running_proxy(tmp_path_factory.mktemp("conv"), stub_server.base_url, env) as p:
        yield p


def _tokens(messages: list[Any]) -> int:
    return DEFAULT_COUNTER.count_messages(messages)


def _tools_tokens(tools: Any = TOOLS) -> int:
    return DEFAULT_COUNTER.count_text(
        json.dumps(tools, ensure_ascii=False, separators=(",", ":")))


def _over_budget_tools_tokens() -> int:
    """What the proxy reserves for tools once a request is over budget: the client's and
    ``ctxstack_recall``, which it offers once something was compacted away."""
    return _tools_tokens() + DEFAULT_COUNTER.count_text(
        json.dumps(RECALL_TOOL_SPEC, separators=(",", ":")))


def test_200_turn_conversation_stays_in_budget_and_summarises_once_per_overflow(
        proxy: ProxyProcess, stub: StubServer) -> None:
    stub.rule = ConversationRule(answer=ANSWER)
    client = openai.OpenAI(base_url=proxy.base_url, api_key="k", max_retries=0)
    history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    sent: list[list[dict[str, Any]]] = []
    methods: list[str] = []

    def call() -> Any:
        sent.append([dict(m) for m in history])
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=history, tools=TOOLS)  # type: ignore[arg-type]
        methods.append(parse_compaction_header(raw.headers["x-ctxstack-compaction"])["method"])
        return raw.parse().choices[0].message

    for turn in range(TURNS):
        ask = "please look it up" if turn % 7 == 3 else "what next"
        history.append({"role": "user", "content": f"Turn {turn}: {ask} for team {turn % 3}, "
                                                   f"order #A-{1000 + turn}?"})
        message = call()
        while message.tool_calls:
            history.append(message.model_dump(exclude_none=True))
            for tool_call in message.tool_calls:
                history.append({"role": "tool", "tool_call_id": tool_call.id,
                                "content": f"Order #A-{1000 + turn}: 12 units, shipped, "
                                           f"invoice INV-{turn:04d}, total {turn * 37} EUR."})
            message = call()
        history.append({"role": "assistant", "content": message.content})
    client.close()

    requests = stub.requests
    chats = chat_requests(requests)
    summaries = [r for r in requests if is_summary_request(r)]
    assert len(chats) == len(sent) > TURNS

    overflows = 0
    for k, (request, mine) in enumerate(zip(chats, sent, strict=True)):
        received = request.body["messages"]
        # Within budget by count, tool definitions included.
        assert _tokens(list(request.messages)) + _tools_tokens(request.body["tools"]) \
            <= BUDGET, k
        assert request.body["tools"][0] == TOOLS[0]  # the client's own, first and intact
        assert tool_sequence_problems(received) == [], k
        assert received[0] == mine[0]  # the system prompt, intact
        last_user = max(i for i, m in enumerate(mine) if m["role"] == "user")
        assert mine[last_user] in received  # the last user message, intact
        assert received[-1] == mine[-1]
        # Overflow: what was forwarded last time plus what the client added since no longer
        # fits what the proxy fills (the budget less the tools, less the counter's margin:
        # the model name has no known tokenizer, so it is counted by the heuristic).
        if k == 0:
            grown = _tokens(list(request.messages))
        else:
            added = [ChatMessage.from_openai(m) for m in mine[len(sent[k - 1]):]]
            grown = _tokens(list(chats[k - 1].messages)) + _tokens(added)
        if grown > effective_budget(BUDGET - _over_budget_tools_tokens(), DEFAULT_COUNTER):
            overflows += 1

    assert overflows >= 5  # the test exercises many overflows
    assert 1 <= len(summaries) <= 1.2 * overflows
    assert methods.count("llm") == len(summaries)
    assert methods.count("checkpoint") > len(sent) // 2  # most requests reuse a summary
