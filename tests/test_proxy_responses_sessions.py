"""Sessions, cache-stable views and recall on the OpenAI Responses wire, as on Chat.

A real ``ctxstack proxy`` process (and, for the single-flight cases, one or two proxy
apps sharing one database) in front of the recording stub, driven by the official
``openai`` SDK (``responses.create``, ``responses.stream``) and a ``websockets`` client
for the WebSocket mode. What the tests read is what the upstream received and what the
client got:

* a growing 80-turn conversation with function calls and reasoning items: every
  forwarded request within budget by the exact count, valid (each call with its output
  and vice versa, every reasoning item byte-identical with its whole turn), consecutive
  forwarded requests sharing a byte-identical prefix once compacted (the session's view
  extended), summaries continuing the conversation's own prefix;
* a fact planted early and asked late is answered through ``ctxstack_recall`` — over
  HTTP, SSE and the WebSocket — while the client never sees the tool, with ``usage``
  summed over the upstream calls; after three rounds one last call without the tool;
* two concurrent over-budget requests of one session make one summary call (one app,
  two apps on one database); two keys never share a session; a fitting failure
  forwards the original request; cache reads, recall rounds and WebSocket requests are
  counted per wire and model.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import statistics
from collections.abc import Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from websockets.sync.client import connect as ws_connect

from ctxstack.llm.stub import StubReply, StubRequest, StubServer, stub_usage
from ctxstack.proxy import parse_compaction_header
from ctxstack.proxy.recall import RECALL_TOOL, USAGE_HEADER
from ctxstack.proxy.responses_recall import RECALL_TOOL_SPEC
from ctxstack.proxy.responses_request import validate_pairs
from ctxstack.proxy.responses_view import ResponsesConversation
from ctxstack.tokens import DEFAULT_COUNTER

# The in-process apps (one, or two on one database) of the Chat wire's session tests.
from tests.proxy_support import (
    SUMMARY_TEXT,
    ProxyProcess,
    app_client,
    check_view_after_change,
    is_summary_request,
    running_proxy,
)
from tests.responses_support import (
    BUDGET,
    MODEL,
    ResendingClient,
    body_tokens,
    check_turns,
    forwarded,
    input_items,
)
from tests.store.dbkit import Backend
from tests.test_proxy_sessions import _settings

JSON = {"content-type": "application/json"}
INSTRUCTIONS = "You are the operations assistant of ACME-7. Quote log lines exactly."
TOOLS = [{"type": "function", "name": "read_log", "description": "Read a log file",
          "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                         "required": ["path"]}}]
LOG_LINE = "2026-03-14 12:00:07 worker-3 shipped order #A-{n} (12 units, invoice INV-{n}) ok\n"
FACT = "The vault combination is 7391-ALPHA."


ENV = {"LLM_API_KEY": "k", "LLM_CONTEXT_SIZE": str(BUDGET + 1000),
       "LLM_MAX_OUTPUT_TOKENS": "1000", "CTXSTACK_PROXY_STATS_FLUSH": "0.2"}
"""The proxy's settings: a budget of BUDGET tokens, stats shared every 0.2 s."""


@pytest.fixture(scope="module")
def proxy(stub_server: StubServer, tmp_path_factory: pytest.TempPathFactory,
          ) -> Iterator[ProxyProcess]:
    workdir = tmp_path_factory.mktemp("resp-sessions")
    with running_proxy(workdir, stub_server.base_url, ENV) as process:
        yield process


class Model:
    """The stub's script on this wire: a summary for compaction calls (optionally slow);
    ``ctxstack_recall`` (after a reasoning item, with a remark) when the tool is offered
    and the user asks about the vault; a ``read_log`` call when asked to check a log;
    after a tool output, an answer quoting it; else a short answer."""

    def __init__(self, *, summary_delay: float = 0.0, always_recall: bool = False) -> None:
        self.summary_delay = summary_delay
        self.always_recall = always_recall

    def __call__(self, request: StubRequest) -> StubReply:
        if request.path.endswith("/chat/completions") or is_summary_request(request):
            return StubReply.text(SUMMARY_TEXT, delay=self.summary_delay, cached_tokens=50)
        items = input_items(request.body)
        last = items[-1] if items else {}
        user = last.get("role") == "user"
        text = json.dumps(last.get("content"))
        if RECALL_TOOL in request.tool_names and (
                self.always_recall or (user and "vault" in text)):
            return StubReply.tool_call(RECALL_TOOL, {"query": "vault combination"},
                                       content="Let me check.", reasoning="look back",
                                       cached_tokens=30)
        if last.get("type") == "function_call_output":
            return StubReply.text(f"From the record: {str(last['output'])[:200]}",
                                  reasoning="quote it", cached_tokens=30)
        if user and "check the log" in text:
            return StubReply.tool_call("read_log", {"path": text[-12:]},
                                       reasoning="need the log " * 4, cached_tokens=30)
        return StubReply.text("Noted.", cached_tokens=30)


def _check_valid(body: Any, history: list[dict[str, Any]] | None = None) -> None:
    """Within budget, every call with its output and vice versa, ``instructions`` and
    ``tools`` the client's (plus at most the recall tool), and — given the client's
    history — every model turn one of the client's, whole and byte-identical."""
    assert body_tokens(body) <= BUDGET
    validate_pairs([], input_items(body))
    assert body["instructions"] == INSTRUCTIONS
    assert body["tools"] in (TOOLS, [*TOOLS, RECALL_TOOL_SPEC])
    if history is not None:
        check_turns(input_items(body), history)


def _agent_turns(start: int, count: int, *, fact_at: int | None = None,
                 ) -> list[dict[str, Any]]:
    """``count`` turns as a client resends them: a question, a reasoning item and a
    ``read_log`` call, its (long) output, an answer."""
    out: list[dict[str, Any]] = []
    for t in range(start, start + count):
        output = "".join(LOG_LINE.format(n=1000 + t * 10 + i) for i in range(8))
        if t == fact_at:
            output = f"{FACT}\n{output}"
        out += [
            {"role": "user", "content": f"Turn {t}: check the shipping log of day {t}."},
            {"type": "reasoning", "id": f"rs_{t}", "summary": [],
             "encrypted_content": f"gAAA{t:04d}" + "Zm9v" * 20},
            {"type": "function_call", "id": f"fc_{t}", "call_id": f"call_{t}",
             "name": "read_log", "arguments": json.dumps({"path": f"d{t}"})},
            {"type": "function_call_output", "call_id": f"call_{t}", "output": output},
            {"type": "message", "role": "assistant", "content": [
                {"type": "output_text", "text": f"Day {t}: eight orders shipped, all ok.",
                 "annotations": []}]},
        ]
    return out


def _stats(proxy: ProxyProcess) -> dict[str, Any]:
    return dict(httpx.get(f"{proxy.url}/ctxstack/stats", timeout=10).json())


def _model_stats(stats: dict[str, Any]) -> dict[str, int]:
    return dict(stats["by_model"].get("responses", {}).get(MODEL, {}))


# --------------------------------------------------------------------------- stability
def test_a_growing_conversation_extends_its_view_within_budget_and_valid(
        proxy: ProxyProcess, stub: StubServer) -> None:
    """80 turns (every other one with a ``read_log`` call and its reasoning), resent
    whole on every call: within budget and valid throughout; once compacted, the next
    requests extend the forwarded view (the previous request's input is a byte-identical
    prefix of the next one) until it overflows; summaries continue the conversation."""
    stub.rule = Model()
    client = openai.OpenAI(base_url=proxy.base_url, api_key="grow-key", max_retries=0)
    agent = ResendingClient(client, model=MODEL, instructions=INSTRUCTIONS, tools=TOOLS,
                            store=False, include=["reasoning.encrypted_content"])
    for turn in range(80):
        ask = "check the log" if turn % 2 else "what next"
        agent.turn(f"Turn {turn}: {ask} of day {turn}.", lambda _, t=turn: "".join(
            LOG_LINE.format(n=t * 10 + i) for i in range(3)))
    client.close()
    sent, methods = agent.sent, agent.methods
    assert all(RECALL_TOOL not in text for text in agent.texts)

    upstream = forwarded(stub.requests)
    assert len(upstream) == len(sent) == 120
    for k, (request, mine) in enumerate(zip(upstream, sent, strict=True)):
        _check_valid(request.body, mine)
        assert json.dumps(input_items(request.body)[-1]) == json.dumps(mine[-1]), k
    first = next(k for k, m in enumerate(methods) if m != "none")
    extended = shares = 0
    prefix_shares = []
    for k in range(first + 1, len(upstream)):
        before = [json.dumps(i) for i in input_items(upstream[k - 1].body)]
        now = [json.dumps(i) for i in input_items(upstream[k].body)]
        extended += now[:len(before)] == before
        same = next((i for i, (a, b) in enumerate(zip(before, now, strict=False)) if a != b),
                    min(len(before), len(now)))
        conv = ResponsesConversation(input_items(upstream[k].body), None).conversation
        conv.tokens(DEFAULT_COUNTER)
        prefix = ResponsesConversation(input_items(upstream[k].body)[:same], None).conversation
        shares += 1
        prefix_shares.append(prefix.tokens(DEFAULT_COUNTER) / max(1, sum(conv.counts)))
    summaries = [r for r in stub.requests if is_summary_request(r)]
    recomputed = shares - extended
    assert extended >= 0.8 * shares, (extended, shares)
    assert statistics.median(prefix_shares) >= 0.9, prefix_shares
    print(f"extended {extended}/{shares}, median prefix share "
          f"{statistics.median(prefix_shares):.2f}, summaries {len(summaries)}")
    assert 1 <= len(summaries) <= recomputed + 1
    # A summary request continues the conversation as last forwarded: the client's
    # instructions and tools (plus the recall tool), its first items, the instruction last.
    requests = stub.requests
    for summary in summaries:
        body = summary.body
        assert summary.path == "/v1/responses"
        assert body["instructions"] == INSTRUCTIONS
        assert body["tools"][0] == TOOLS[0]
        assert body["tool_choice"] == "none"
        assert body["input"][-1]["role"] == "user"
        at = requests.index(summary)
        last = next((r for r in reversed(forwarded(requests[:at]))), None)
        if last is None:  # the first compaction: the client's own items
            continue
        assert body["tools"] == last.body["tools"]  # the recall tool too, if it was there
        reused = [json.dumps(i) for i in body["input"][:-1]]
        before = [json.dumps(i) for i in input_items(last.body)]
        common = min(len(reused), len(before))
        assert common > 0
        assert reused[:common] == before[:common]


# --------------------------------------------------------------------------- recall
def _compacted(proxy: ProxyProcess, stub: StubServer, session: str,
               ) -> list[dict[str, Any]]:
    """A conversation whose early part (with the fact) was compacted away."""
    stub.rule = Model()
    # Its own opening (a conversation is recognised by it: the tests' sessions stay apart).
    history = [{"role": "user", "content": f"Conversation {session}."},
               *_agent_turns(0, 30, fact_at=1), {"role": "user", "content": "Carry on."}]
    raw = httpx.post(f"{proxy.base_url}/responses", timeout=60, headers=_headers(session),
                     json={"model": MODEL, "instructions": INSTRUCTIONS, "tools": TOOLS,
                           "input": history})
    assert raw.status_code == 200, raw.text
    assert parse_compaction_header(raw.headers["x-ctxstack-compaction"])["method"] != "none"
    history.append({"type": "message", "role": "assistant", "content": [
        {"type": "output_text", "text": "Noted.", "annotations": []}]})
    history.append({"role": "user", "content": "What is the vault combination?"})
    return history


def _headers(session: str) -> dict[str, str]:
    return {"authorization": "Bearer client-a", "x-ctxstack-session": session}


def _check_rounds(stub: StubServer, seen: int, rounds: int,
                  ) -> list[StubRequest]:
    """The upstream calls of one client request: ``rounds`` recall rounds then the
    answer, every one a forwarded request like any other (within budget, valid, without
    the proxy's own session header)."""
    calls = forwarded(stub.requests[seen:])
    assert len(calls) == rounds + 1
    for k, call in enumerate(calls):
        _check_valid(call.body)
        # the session id is the proxy's: it never reaches the upstream, on any round
        assert "x-ctxstack-session" not in {h.lower() for h in call.headers}
        names = call.tool_names
        assert (RECALL_TOOL in names) == (k < 3), k
        if k:  # the round appended: the model's turn, whole, and the proxy's answer
            before = input_items(calls[k - 1].body)
            now = input_items(call.body)
            assert [json.dumps(i) for i in now[:len(before)]] == \
                [json.dumps(i) for i in before]
            added = now[len(before):]
            assert [i.get("type") for i in added] == [
                "reasoning", "function_call", "message", "function_call_output"]
            assert added[1]["name"] == RECALL_TOOL
            assert added[3]["call_id"] == added[1]["call_id"]
    assert [i for i in input_items(calls[0].body) if i.get("content") ==
            "What is the vault combination?"]
    return calls


def _stub_input_tokens(calls: list[StubRequest]) -> int:
    return sum(stub_usage(c.messages, None)[0] for c in calls)


def test_recall_over_http_is_answered_by_the_proxy_and_hidden(
        proxy: ProxyProcess, stub: StubServer) -> None:
    history = _compacted(proxy, stub, "recall-json")
    before = _model_stats(_stats(proxy))
    seen = len(stub.requests)
    client = openai.OpenAI(base_url=proxy.base_url, api_key="client-a", max_retries=0,
                           default_headers={"x-ctxstack-session": "recall-json"})
    raw = client.responses.with_raw_response.create(
        model=MODEL, instructions=INSTRUCTIONS, tools=TOOLS,  # type: ignore[arg-type]
        input=history)  # type: ignore[arg-type]
    client.close()
    assert RECALL_TOOL not in raw.text  # not in output, not in the echoed tools
    response = raw.parse()
    assert "7391-ALPHA" in response.output_text
    assert [t.model_dump(exclude_none=True) for t in response.tools] == TOOLS
    assert [o.type for o in response.output] == ["reasoning", "message"]
    calls = _check_rounds(stub, seen, 1)
    assert raw.headers[USAGE_HEADER] == "sum; upstream_calls=2"
    assert response.usage is not None
    assert response.usage.input_tokens == _stub_input_tokens(calls)
    assert response.usage.input_tokens_details.cached_tokens == 60
    after = _model_stats(_stats(proxy))
    assert after["recall_rounds"] - before.get("recall_rounds", 0) == 1
    assert after["cache_read_tokens"] - before.get("cache_read_tokens", 0) == 60
    assert after["responses"] - before.get("responses", 0) == 2


def test_recall_in_an_sse_stream_is_hidden_and_usage_summed(
        proxy: ProxyProcess, stub: StubServer) -> None:
    history = _compacted(proxy, stub, "recall-sse")
    seen = len(stub.requests)
    client = openai.OpenAI(base_url=proxy.base_url, api_key="client-a", max_retries=0,
                           default_headers={"x-ctxstack-session": "recall-sse"})
    events = []
    with client.responses.stream(model=MODEL, instructions=INSTRUCTIONS,
                                 tools=TOOLS,  # type: ignore[arg-type]
                                 input=history) as stream:  # type: ignore[arg-type]
        for event in stream:
            events.append(event)
        final = stream.get_final_response()
    client.close()
    for event in events:  # not in any event: output items, calls, echoed tools
        assert RECALL_TOOL not in event.model_dump_json(warnings=False)
    kinds = [e.type for e in events]
    assert kinds.count("response.created") == kinds.count("response.completed") == 1
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "7391-ALPHA" in final.output_text
    assert [o.type for o in final.output] == ["reasoning", "message"]
    assert events[0].response.id == final.id  # type: ignore[union-attr]
    calls = _check_rounds(stub, seen, 1)
    assert final.usage is not None
    assert final.usage.input_tokens == _stub_input_tokens(calls)
    assert final.usage.input_tokens_details.cached_tokens == 60


def test_recall_over_the_websocket_is_hidden_and_counted(
        proxy: ProxyProcess, stub: StubServer) -> None:
    history = _compacted(proxy, stub, "recall-ws")
    before = _stats(proxy)
    seen = len(stub.requests)
    url = proxy.base_url.replace("http://", "ws://") + "/responses"
    frames: list[str] = []
    with ws_connect(url, additional_headers=_headers("recall-ws")) as ws:
        assert ws.response is not None
        assert ws.response.headers[USAGE_HEADER] == "sum"
        ws.send(json.dumps({"type": "response.create", "model": MODEL,
                            "instructions": INSTRUCTIONS, "tools": TOOLS, "input": history}))
        while not frames or json.loads(frames[-1])["type"] not in (
                "response.completed", "error"):
            frames.append(str(ws.recv(timeout=30)))
    assert all(RECALL_TOOL not in f for f in frames)
    events = [json.loads(f) for f in frames]
    done = events[-1]
    assert done["type"] == "response.completed"
    assert events[0]["response"]["id"] == done["response"]["id"]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    added = [e["output_index"] for e in events if e["type"] == "response.output_item.added"]
    assert added == [0, 1]
    text = [p["text"] for o in done["response"]["output"] if o["type"] == "message"
            for p in o["content"]]
    assert "7391-ALPHA" in text[0]
    calls = _check_rounds(stub, seen, 1)
    assert all(c.transport == "http" for c in calls)
    assert done["response"]["usage"]["input_tokens"] == _stub_input_tokens(calls)
    after = _stats(proxy)
    wire = lambda s: s["by_model"].get("responses", {}).get(MODEL, {})  # noqa: E731
    assert wire(after).get("websocket_requests", 0) - wire(before).get(
        "websocket_requests", 0) == 1
    assert _model_stats(after)["recall_rounds"] - _model_stats(before).get(
        "recall_rounds", 0) == 1


def test_a_websocket_chain_continues_after_a_recall_without_its_rounds(
        proxy: ProxyProcess, stub: StubServer) -> None:
    """Codex's way: ``store: false`` and ``previous_response_id`` over the socket. The
    response answered through a recall round continues like any other: the proxy's
    chain holds what the client was shown, never the recall turn."""
    stub.rule = Model()
    url = proxy.base_url.replace("http://", "ws://") + "/responses"
    opening = [{"role": "user", "content": "Conversation ws-chain."},
               *_agent_turns(0, 30, fact_at=1), {"role": "user", "content": "Carry on."}]

    def create(ws: Any, previous: str | None, items: list[dict[str, Any]]) -> dict[str, Any]:
        ws.send(json.dumps({"type": "response.create", "model": MODEL, "store": False,
                            "instructions": INSTRUCTIONS, "tools": TOOLS, "input": items,
                            **({"previous_response_id": previous} if previous else {})}))
        while True:
            event = json.loads(ws.recv(timeout=30))
            assert RECALL_TOOL not in json.dumps(event)
            if event["type"] in ("response.completed", "error"):
                assert event["type"] == "response.completed", event
                return dict(event["response"])

    with ws_connect(url, additional_headers={"authorization": "Bearer chain"}) as ws:
        first = create(ws, None, opening)
        seen = len(stub.requests)
        asked = create(ws, first["id"], [{"role": "user",
                                          "content": "What is the vault combination?"}])
        rounds = forwarded(stub.requests[seen:])
        assert [RECALL_TOOL in r.tool_names for r in rounds] == [True, True]
        assert "7391-ALPHA" in json.dumps(asked["output"])
        seen = len(stub.requests)
        create(ws, asked["id"], [{"role": "user", "content": "Thanks, what next?"}])
    [after] = forwarded(stub.requests[seen:])
    assert "previous_response_id" not in after.body
    _check_valid(after.body)
    items = input_items(after.body)
    assert not [i for i in items if i.get("name") == RECALL_TOOL]
    assert json.dumps(items[-1]) == json.dumps(
        {"role": "user", "content": "Thanks, what next?"})
    shown = [json.dumps(o) for o in asked["output"]]
    assert [json.dumps(i) for i in items[-1 - len(shown):-1]] == shown


def test_a_recall_beside_the_clients_own_call_is_dropped_and_the_call_delivered(
        proxy: ProxyProcess, stub: StubServer) -> None:
    """The model calls ``ctxstack_recall`` and the client's tool at once: no round (the
    client must act first), the recall call removed, the client's call delivered — in
    JSON and in a stream, whose output indexes close the gap."""
    history = _compacted(proxy, stub, "recall-mixed")
    both = StubReply.tool_calls_of((RECALL_TOOL, {"query": "vault"}), ("read_log", {"path": "d1"}),
                                   reasoning="both at once")
    stub.push(both, both)
    seen = len(stub.requests)
    client = openai.OpenAI(base_url=proxy.base_url, api_key="client-a", max_retries=0,
                           default_headers={"x-ctxstack-session": "recall-mixed"})
    fields: dict[str, Any] = {"model": MODEL, "instructions": INSTRUCTIONS, "tools": TOOLS,
                              "input": history}
    raw = client.responses.with_raw_response.create(**fields)
    assert RECALL_TOOL not in raw.text
    assert raw.headers[USAGE_HEADER] == "sum; upstream_calls=1"
    answer = raw.parse()
    with client.responses.stream(**fields) as stream:
        events = list(stream)
        final = stream.get_final_response()
    client.close()
    for response in (answer, final):
        assert [o.type for o in response.output] == ["reasoning", "function_call"]
        assert response.output[1].name == "read_log"  # type: ignore[union-attr]
    added = [e.output_index for e in events  # type: ignore[union-attr]
             if e.type == "response.output_item.added"]
    assert added == [0, 1]
    assert all(RECALL_TOOL not in e.model_dump_json(warnings=False) for e in events)
    assert len(forwarded(stub.requests[seen:])) == 2  # one upstream call each, no round


def test_after_three_recall_rounds_one_last_call_without_the_tool(
        proxy: ProxyProcess, stub: StubServer) -> None:
    history = _compacted(proxy, stub, "recall-max")
    stub.rule = Model(always_recall=True)
    seen = len(stub.requests)
    raw = httpx.post(f"{proxy.base_url}/responses", timeout=60, headers=_headers("recall-max"),
                     json={"model": MODEL, "instructions": INSTRUCTIONS, "tools": TOOLS,
                           "input": history})
    assert raw.status_code == 200, raw.text
    calls = _check_rounds(stub, seen, 3)
    assert RECALL_TOOL not in calls[3].tool_names
    assert calls[3].body["tools"] == TOOLS
    assert raw.headers[USAGE_HEADER] == "sum; upstream_calls=4"
    assert RECALL_TOOL not in raw.text
    assert "From the record" in raw.text


# --------------------------------------------------------------------------- in-process apps
def _over_budget() -> dict[str, Any]:
    return {"model": MODEL, "instructions": INSTRUCTIONS, "tools": TOOLS,
            "input": [*_agent_turns(0, 30), {"role": "user", "content": "Carry on."}]}


@pytest.mark.parametrize("apps", [1, 2], ids=["one-app", "two-apps-one-database"])
async def test_two_concurrent_over_budget_requests_make_one_summary_call(
        apps: int, proxy_backend: Backend, stub: StubServer) -> None:
    stub.rule = Model(summary_delay=1.0)
    headers = {"x-ctxstack-session": "s-1", "authorization": "Bearer k1"}
    async with AsyncExitStack() as stack:
        clients = [await app_client(stack, _settings(proxy_backend, stub.base_url))
                   for _ in range(apps)]
        a, b = await asyncio.gather(
            clients[0].post("/v1/responses", json=_over_budget(), headers=headers),
            clients[-1].post("/v1/responses", json=_over_budget(), headers=headers))
    assert a.status_code == b.status_code == 200, (a.text, b.text)
    assert len([r for r in stub.requests if is_summary_request(r)]) == 1
    first, second = forwarded(stub.requests)
    # The second request extended the view the first computed: the same input.
    assert first.body["input"] == second.body["input"]
    _check_valid(first.body, _over_budget()["input"])


async def test_a_failed_prefix_summary_falls_back_to_the_transcript_request(
        proxy_db_url: str, stub: StubServer) -> None:
    model = Model()

    def upstream(request: StubRequest) -> StubReply:
        if request.path == "/v1/responses" and is_summary_request(request):
            return StubReply.server_error()
        return model(request)

    stub.rule = upstream
    async with AsyncExitStack() as stack:
        client = await app_client(stack, _settings(proxy_db_url, stub.base_url))
        r = await client.post("/v1/responses", json=_over_budget())
    assert r.status_code == 200, r.text
    assert parse_compaction_header(r.headers["x-ctxstack-compaction"])["method"] == "llm"
    summaries = [x.path for x in stub.requests if is_summary_request(x)]
    assert summaries == ["/v1/responses", "/v1/chat/completions"]
    [sent] = forwarded(stub.requests)
    assert SUMMARY_TEXT in json.dumps(sent.body["input"])
    _check_valid(sent.body, _over_budget()["input"])


async def test_sessions_are_never_shared_across_keys(proxy_db_url: str, stub: StubServer) -> None:
    stub.rule = Model()
    async with AsyncExitStack() as stack:
        client = await app_client(stack, _settings(proxy_db_url, stub.base_url))
        for key in ("Bearer k1", "Bearer k2"):
            r = await client.post("/v1/responses", json=_over_budget(), headers={
                "x-ctxstack-session": "same", "authorization": key})
            assert r.status_code == 200, r.text
            # Neither the other key's view nor its summary is reused.
            assert parse_compaction_header(r.headers["x-ctxstack-compaction"])[
                "method"] == "llm"
    assert len([r for r in stub.requests if is_summary_request(r)]) == 2


async def test_a_fitting_failure_forwards_the_original_request(
        proxy_db_url: str, tmp_path: Path, stub: StubServer) -> None:
    stub.rule = Model()
    with sqlite3.connect(tmp_path / "proxy.db") as db:  # the session store is broken
        db.execute("DROP TABLE proxy_sessions")
    raw = json.dumps(_over_budget()).encode()
    log = stub.base_url.removesuffix("/v1") + "/_stub/requests"
    async with AsyncExitStack() as stack:
        client = await app_client(stack, _settings(proxy_db_url, stub.base_url))
        plain = await stack.enter_async_context(httpx.AsyncClient())
        await plain.delete(log)
        response = await client.post("/v1/responses", content=raw, headers=JSON)
        stats, recorded = [(await c.get(u)).json() for c, u in (
            (client, "/ctxstack/stats"), (plain, log))]
    assert response.status_code == 200, response.text
    assert parse_compaction_header(response.headers["x-ctxstack-compaction"])["method"] \
        == "none"  # the request went out as the client sent it
    [sent] = [r for r in recorded["requests"] if r["path"] == "/v1/responses"]
    assert sent["body"].encode() == raw  # the client's bytes, unchanged
    assert stats["fit_failures"] == 1


def _changed(items: list[dict[str, Any]], change: str) -> list[dict[str, Any]]:
    """``items`` with an early tool output edited, a turn inserted or removed (all in the
    part a stored view covers), or left as they are."""
    out = [dict(it) for it in items]
    if change == "edited":
        out[3]["output"] = "Edited: " + out[3]["output"]
    elif change == "inserted":
        out[5:5] = [{"role": "user", "content": "An aside (inserted)."},
                    {"type": "message", "role": "assistant", "content": [
                        {"type": "output_text", "text": "Noted.", "annotations": []}]}]
    elif change == "removed":
        del out[5:10]  # turn 1, whole
    return out


@pytest.mark.parametrize("change", ["unchanged", "edited", "inserted", "removed"])
async def test_a_history_changed_before_the_view_s_end_is_recomputed_not_extended(
        proxy_db_url: str, stub: StubServer, change: str) -> None:
    """One app: the second request reuses the first's units in process
    (:mod:`ctxstack.proxy.unit_memo`), and still must not extend a view whose items the
    client changed."""
    stub.rule = Model()
    headers = {"x-ctxstack-session": f"changed-{change}", "authorization": "Bearer k1"}
    first = _over_budget()
    grown = {**first, "input": [*first["input"], *_agent_turns(30, 1),
                                {"role": "user", "content": "And now?"}]}
    then = {**grown, "input": _changed(grown["input"], change)}
    methods = []
    async with AsyncExitStack() as stack:
        client = await app_client(stack, _settings(proxy_db_url, stub.base_url))
        for body in (first, grown, then):
            r = await client.post("/v1/responses", json=body, headers=headers)
            assert r.status_code == 200, r.text
            methods.append(parse_compaction_header(r.headers["x-ctxstack-compaction"])[
                "method"])
    sent = forwarded(stub.requests)
    assert methods[:2] == ["llm", "checkpoint"]  # computed, then extended
    assert sent[1].body["input"][:len(sent[0].body["input"])] == sent[0].body["input"]
    for request, body in zip(sent, (first, grown, then), strict=True):
        _check_valid(request.body, body["input"])
    summaries = [r for r in stub.requests if is_summary_request(r)]
    check_view_after_change(change, methods, [r.body["input"] for r in sent], summaries,
                            {"edited": "Edited: ",
                             "inserted": "An aside (inserted)."}.get(change),
                            "Turn 1:")


async def test_a_bad_item_after_a_history_read_before_is_still_refused(
        proxy_db_url: str, stub: StubServer) -> None:
    """Items equal to ones validated before are not checked again; a new one still is."""
    stub.rule = Model()
    headers = {"authorization": "Bearer k1"}
    body = _over_budget()
    bad = {**body, "input": [*body["input"], {"type": "function_call", "name": "read_log",
                                              "arguments": "{}"}]}
    async with AsyncExitStack() as stack:
        client = await app_client(stack, _settings(proxy_db_url, stub.base_url))
        assert (await client.post("/v1/responses", json=body, headers=headers)
                ).status_code == 200
        seen = len(stub.requests)
        refused = await client.post("/v1/responses", json=bad, headers=headers)
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["param"] == f"input[{len(body['input'])}].call_id"
    assert len(stub.requests) == seen  # before any upstream call
