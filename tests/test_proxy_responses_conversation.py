"""Long Responses conversations through ``ctxstack proxy``: the upstream never sees more
than the budget.

* An 80-turn conversation with function calls and reasoning items, resent whole on
  every call (Codex over HTTP): every forwarded request is within budget by the exact
  count, valid (every call with its output and vice versa), and every reasoning item
  forwarded is byte-identical with its whole turn, contiguous and in order.
* ``previous_response_id`` chains that grow past the budget (the client sends only its
  new items): the proxy expands and fits them, the upstream never gets a
  ``previous_response_id`` nor more than the budget, and ``store: false`` chains are
  never written to the database.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from ctxstack.llm.stub import StubReply, StubRequest, StubServer
from ctxstack.proxy import parse_compaction_header
from ctxstack.proxy.responses_recall import RECALL_TOOL_SPEC
from ctxstack.proxy.responses_request import validate_pairs
from tests import responses_support as support
from tests.proxy_support import SUMMARY_TEXT, ProxyProcess, is_summary_request, running_proxy

BUDGET, MODEL = support.BUDGET, support.MODEL

INSTRUCTIONS = "You are the planning assistant of ACME-7. Cite order numbers."
TOOLS = [{"type": "function", "name": "lookup", "description": "Look up an order",
          "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                         "required": ["query"]}}]
ANSWER = ("Noted. The plan keeps the 3.2% growth target, order #A-1042 ships on 2026-03-14, "
          "and the remaining budget is 41,500 EUR across the three teams.")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("responses-conv")


@pytest.fixture(scope="module")
def proxy(stub_server: StubServer, workdir: Path) -> Iterator[ProxyProcess]:
    env = {"LLM_API_KEY": "k", "LLM_CONTEXT_SIZE": "5000", "LLM_MAX_OUTPUT_TOKENS": "1000"}
    with running_proxy(workdir, stub_server.base_url, env) as p:
        yield p


def _rule(request: StubRequest) -> StubReply:
    """Summaries (the transcript on the chat route, or the conversation continued on
    /v1/responses); otherwise a call when the last user item asks to look something up
    and no output came yet, else a text answer; with reasoning."""
    if request.path.endswith("/chat/completions") or is_summary_request(request):
        return StubReply.text(SUMMARY_TEXT)
    items = request.body.get("input")
    items = items if isinstance(items, list) else []
    last_user = max((i for i, it in enumerate(items) if it.get("role") == "user"), default=-1)
    asked = last_user >= 0 and "look it up" in str(items[last_user].get("content"))
    answered = any(it.get("type") == "function_call_output" for it in items[last_user + 1:])
    if asked and not answered:
        return StubReply.tool_call("lookup", {"query": "order"}, reasoning="need the data " * 8)
    return StubReply.text(ANSWER, reasoning="short thought " * 6)


def test_80_turn_conversation_with_calls_stays_within_budget_and_valid(
        proxy: ProxyProcess, stub: StubServer) -> None:
    stub.rule = _rule
    client = openai.OpenAI(base_url=proxy.base_url, api_key="k", max_retries=0)
    agent = support.ResendingClient(client, model=MODEL, instructions=INSTRUCTIONS,
                                    tools=TOOLS, store=False,
                                    include=["reasoning.encrypted_content"])
    for turn in range(80):
        ask = "please look it up" if turn % 4 == 1 else "what next"
        agent.turn(f"Turn {turn}: {ask} for team {turn % 3}, order #A-{1000 + turn}?",
                   lambda _, t=turn: f"Order #A-{1000 + t}: 12 units, shipped, invoice "
                                     f"INV-{t:04d}, total {t * 37} EUR.")
    client.close()
    sent, methods = agent.sent, agent.methods

    sent_up = support.forwarded(stub.requests)
    assert len(sent_up) == len(sent) > 80
    reasoning = 0
    for k, (request, mine) in enumerate(zip(sent_up, sent, strict=True)):
        body = request.body
        assert support.body_tokens(body) <= BUDGET, k
        validate_pairs([], body["input"])  # raises on a call without its output or vice versa
        assert body["instructions"] == INSTRUCTIONS
        assert body["tools"] in (TOOLS, [*TOOLS, RECALL_TOOL_SPEC])
        assert json.dumps(body["input"][-1]) == json.dumps(mine[-1])
        support.check_turns(body["input"], mine)
        reasoning += sum(1 for item in body["input"] if item.get("type") == "reasoning")
    assert reasoning > len(sent_up)  # reasoning items were forwarded (and checked)
    assert methods.count("none") < len(methods)  # the conversation did overflow
    assert "llm" in methods or "checkpoint" in methods


def test_previous_response_id_chains_are_expanded_and_fitted(
        proxy: ProxyProcess, stub: StubServer, workdir: Path) -> None:
    stub.rule = _rule
    client = openai.OpenAI(base_url=proxy.base_url, api_key="chain-key", max_retries=0)
    filler = "We reviewed the plan, the orders and the invoices in detail. " * 6
    for store in (True, False):
        previous: str | None = None
        before = len(support.forwarded(stub.requests))
        items = 0
        for turn in range(30):
            extra = {"previous_response_id": previous} if previous else {}
            raw = client.responses.with_raw_response.create(
                model=MODEL, instructions=INSTRUCTIONS, store=store,
                input=[{"role": "user", "content": f"Turn {turn}: {filler}"}],
                **extra)  # type: ignore[call-overload]
            response = raw.parse()
            previous = response.id
            items += 1 + len(response.output)
        chain = support.forwarded(stub.requests)[before:]
        assert len(chain) == 30
        # The header counts the conversation's items: all of them, and those forwarded.
        header = parse_compaction_header(raw.headers["x-ctxstack-compaction"])
        assert header["method"] in ("llm", "checkpoint", "truncate")
        assert int(header["original"]) == items - len(response.output)
        assert int(header["kept"]) == len(chain[-1].body["input"])
        for k, request in enumerate(chain):
            assert "previous_response_id" not in request.body, k
            assert support.body_tokens(request.body) <= BUDGET, k
        # The later requests carry more than the new item: the chain, fitted.
        assert len(chain[-1].body["input"]) > 2
    client.close()
    with sqlite3.connect(workdir / "proxy.db") as db:
        stored = db.execute("SELECT items FROM proxy_responses").fetchall()
    # store=true: one row per response; store=false (this chain and the 80-turn one):
    # none, never written anywhere.
    assert len(stored) == 30
    assert sum(1 for (text,) in stored if "Turn 29:" in text) == 1
