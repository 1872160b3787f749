"""Proxy sessions over HTTP: cache-stable views, single flight, recall inside the proxy, do
no harm, cache-token stats.

A real ``ctxstack proxy`` process (and, for the cross-worker cases, two proxy apps sharing
one database) in front of the recording stub. What the tests read is what the upstream
received and what the client got.
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

from ctxstack import ChatMessage
from ctxstack.llm.stub import StubReply, StubRequest, StubServer
from ctxstack.proxy import ProxySettings, parse_compaction_header
from ctxstack.proxy.chat_wire import RECALL_TOOL_SPEC
from ctxstack.proxy.recall import RECALL_TOOL, USAGE_HEADER
from ctxstack.proxy.views import stable_prefix_tokens
from ctxstack.tokens import DEFAULT_COUNTER
from tests.proxy_support import (
    ProxyProcess,
    app_client,
    chat_requests,
    is_summary_request,
    running_proxy,
    tool_sequence_problems,
)
from tests.proxy_support import (
    RecallScript as Upstream,
)
from tests.store.dbkit import Backend

BUDGET = 4_000
SYSTEM = "You are the operations assistant of ACME-7."
TOOLS = [{"type": "function", "function": {
    "name": "read_log", "description": "Read a log file",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                   "required": ["path"]}}}]
LOG_LINE = "2026-03-14 12:00:07 worker-3 shipped order #A-{n} (12 units, invoice INV-{n}) ok\n"
FACT = "The vault combination is 7391-ALPHA."


@pytest.fixture(scope="module")
def proxy(stub_server: StubServer, tmp_path_factory: pytest.TempPathFactory,
          ) -> Iterator[ProxyProcess]:
    env = {"LLM_API_KEY": "k", "LLM_CONTEXT_SIZE": str(BUDGET + 1000),
           "LLM_MAX_OUTPUT_TOKENS": "1000", "CTXSTACK_PROXY_STATS_FLUSH": "0.2"}
    with running_proxy(tmp_path_factory.mktemp("sessions"), stub_server.base_url, env) as p:
        yield p


def _tokens(messages: list[Any]) -> int:
    return DEFAULT_COUNTER.count_messages([ChatMessage.from_openai(m) for m in messages])


def _tools_tokens(tools: Any) -> int:
    return DEFAULT_COUNTER.count_text(json.dumps(tools, ensure_ascii=False,
                                                 separators=(",", ":"))) if tools else 0


def _agent_turns(start: int, count: int, *, fact_at: int | None = None, lines: int = 8,
                 ) -> list[dict[str, Any]]:
    """``count`` agent turns: a question, a log read (a long tool output), an answer."""
    out: list[dict[str, Any]] = []
    for t in range(start, start + count):
        output = "".join(LOG_LINE.format(n=1000 + t * 10 + i) for i in range(lines))
        if t == fact_at:
            output = f"{FACT}\n{output}"
        out += [
            {"role": "user", "content": f"Turn {t}: check the shipping log of day {t}."},
            {"role": "assistant", "content": None, "tool_calls": [{
                "id": f"call_{t}", "type": "function",
                "function": {"name": "read_log", "arguments": json.dumps({"path": f"d{t}"})}}]},
            {"role": "tool", "tool_call_id": f"call_{t}", "content": output},
            {"role": "assistant", "content": f"Day {t}: eight orders shipped, all ok."},
        ]
    return out


def _post(proxy: ProxyProcess, messages: list[dict[str, Any]], **kw: Any) -> httpx.Response:
    body = {"model": "stub-model", "messages": messages, "tools": TOOLS, **kw}
    response = httpx.post(f"{proxy.base_url}/chat/completions", json=body, timeout=60,
                          headers={"authorization": "Bearer client-a"})
    assert response.status_code == 200, response.text
    return response


def _stats(proxy: ProxyProcess) -> dict[str, Any]:
    return dict(httpx.get(f"{proxy.url}/ctxstack/stats", timeout=10).json())


# --------------------------------------------------------------------------- stability
def test_growing_conversation_keeps_a_byte_identical_prefix(proxy: ProxyProcess,
                                                            stub: StubServer) -> None:
    """60 agent turns past the budget: consecutive forwarded requests share ≥ 90% of
    their tokens as a byte-identical prefix (median), each within budget, valid. (A turn
    adds about 4% of the budget here, so the best possible share is about 95%.)"""
    stub.rule = Upstream()
    history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    methods = []
    for turn in range(60):
        history += _agent_turns(turn, 1, lines=3)
        history.append({"role": "user", "content": f"Summarise day {turn} in one line."})
        response = _post(proxy, history)
        methods.append(parse_compaction_header(response.headers["x-ctxstack-compaction"])
                       ["method"])
        history.append({"role": "assistant", "content": response.json()["choices"][0]
                        ["message"]["content"]})
    chats = chat_requests(stub.requests)
    assert len(chats) == 60
    shares = []
    for k, request in enumerate(chats):
        messages = request.body["messages"]
        assert tool_sequence_problems(messages) == [], k
        assert _tokens(messages) + _tools_tokens(request.body["tools"]) <= BUDGET, k
        assert all(t["function"]["name"] != RECALL_TOOL or t == RECALL_TOOL_SPEC
                   for t in request.body["tools"])
        if k and methods[k - 1] != "none":
            counts = [DEFAULT_COUNTER.count_message(ChatMessage.from_openai(m))
                      for m in messages]
            previous = chats[k - 1].body["messages"]
            shares.append(stable_prefix_tokens(previous, messages, counts) / sum(counts))
    assert "none" in methods
    assert methods[-1] != "none"
    assert len(shares) >= 20
    assert statistics.median(shares) >= 0.9, shares
    summaries = [r for r in stub.requests if is_summary_request(r)]
    recomputed = sum(1 for m in methods if m in ("llm", "mask", "truncate"))
    assert len(summaries) <= max(1, recomputed)
    # A summary request continues the conversation's own prefix: the client's system
    # prompt and tools first, the instruction last.
    for summary in summaries:
        assert summary.body["messages"][0] == {"role": "system", "content": SYSTEM}
        assert summary.body["tools"][0] == TOOLS[0]


# --------------------------------------------------------------------------- recall
def _compacted_session(proxy: ProxyProcess, stub: StubServer) -> list[dict[str, Any]]:
    """A conversation whose early part (with the fact) was compacted away."""
    stub.rule = Upstream()
    history = [{"role": "system", "content": SYSTEM}, *_agent_turns(0, 30, fact_at=1),
               {"role": "user", "content": "Carry on."}]
    response = _post(proxy, history)
    assert parse_compaction_header(response.headers["x-ctxstack-compaction"])["method"] \
        != "none"
    history.append({"role": "assistant", "content": "Noted."})
    return history


def test_recall_is_answered_by_the_proxy_and_hidden_from_the_client(
        proxy: ProxyProcess, stub: StubServer) -> None:
    history = _compacted_session(proxy, stub)
    before = _stats(proxy)
    seen = len(stub.requests)
    history.append({"role": "user", "content": "What is the vault combination?"})
    response = _post(proxy, history)
    answer = response.json()
    message = answer["choices"][0]["message"]
    assert "7391-ALPHA" in message["content"]
    assert not message.get("tool_calls")
    assert RECALL_TOOL not in response.text
    calls = chat_requests(stub.requests[seen:])
    assert len(calls) == 2
    assert any(t["function"]["name"] == RECALL_TOOL for t in calls[0].body["tools"])
    for call in calls:  # recall rounds are forwarded requests like any other: in budget
        assert _tokens(call.body["messages"]) + _tools_tokens(call.body["tools"]) <= BUDGET
        assert tool_sequence_problems(call.body["messages"]) == []
    # usage: the sum over both upstream calls, and the header says so.
    assert response.headers[USAGE_HEADER] == "sum; upstream_calls=2"
    assert answer["usage"]["prompt_tokens_details"]["cached_tokens"] == 60
    after = _stats(proxy)
    rounds = lambda s: s["by_model"].get("chat", {}).get("stub-model", {}).get(  # noqa: E731
        "recall_rounds", 0)
    assert rounds(after) - rounds(before) == 1


def test_recall_in_a_stream_is_hidden_and_usage_summed(proxy: ProxyProcess,
                                                       stub: StubServer) -> None:
    history = _compacted_session(proxy, stub)
    seen = len(stub.requests)
    history.append({"role": "user", "content": "Stream it: what is the vault combination?"})
    client = openai.OpenAI(base_url=proxy.base_url, api_key="client-a", max_retries=0)
    stream = client.chat.completions.create(
        model="stub-model", messages=history, tools=TOOLS,  # type: ignore[arg-type]
        stream=True, stream_options={"include_usage": True})
    text, usage, calls = "", None, []
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            text += choice.delta.content or ""
            calls += choice.delta.tool_calls or []
    client.close()
    assert "7391-ALPHA" in text
    assert calls == []
    rounds = chat_requests(stub.requests[seen:])
    assert len(rounds) == 2
    assert usage is not None
    assert usage.prompt_tokens == sum(
        _stub_prompt_tokens(r) for r in rounds)
    assert usage.prompt_tokens_details is not None
    assert usage.prompt_tokens_details.cached_tokens == 60


def _stub_prompt_tokens(request: StubRequest) -> int:
    from ctxstack.llm.stub.replies import stub_usage

    return stub_usage(request.messages, None)[0]


def test_after_three_recall_rounds_one_last_call_without_the_tool(
        proxy: ProxyProcess, stub: StubServer) -> None:
    history = _compacted_session(proxy, stub)
    stub.rule = Upstream(always_recall=True)
    seen = len(stub.requests)
    history.append({"role": "user", "content": "And the vault?"})
    response = _post(proxy, history)
    calls = chat_requests(stub.requests[seen:])
    assert len(calls) == 4
    assert all(RECALL_TOOL in [t["function"]["name"] for t in c.body["tools"]]
               for c in calls[:3])
    assert RECALL_TOOL not in [t["function"]["name"] for t in calls[3].body["tools"]]
    assert response.headers[USAGE_HEADER] == "sum; upstream_calls=4"
    assert RECALL_TOOL not in response.text


def test_a_recall_call_beside_the_clients_own_call_is_removed_and_the_call_delivered(
        proxy: ProxyProcess, stub: StubServer) -> None:
    """The model calls ``ctxstack_recall`` and the client's ``read_log`` at once (JSON):
    the proxy makes no round — the client must run its tool first — removes the recall
    call and delivers the answer with the client's call and ``finish_reason`` intact."""
    history = _compacted_session(proxy, stub)
    stub.rule = lambda r: StubReply.tool_calls_of(
        (RECALL_TOOL, {"query": "vault"}), ("read_log", {"path": "d3"}), content="Both.")
    seen = len(stub.requests)
    history.append({"role": "user", "content": "What is the vault combination?"})
    response = _post(proxy, history)
    choice = response.json()["choices"][0]
    assert [c["function"]["name"] for c in choice["message"]["tool_calls"]] == ["read_log"]
    assert json.loads(choice["message"]["tool_calls"][0]["function"]["arguments"]) == {
        "path": "d3"}
    assert choice["message"]["content"] == "Both."
    assert choice["finish_reason"] == "tool_calls"
    assert RECALL_TOOL not in response.text
    assert len(chat_requests(stub.requests[seen:])) == 1  # no round
    assert response.headers[USAGE_HEADER] == "sum; upstream_calls=1"


def test_a_recall_call_beside_the_clients_own_call_in_a_stream_is_removed(
        proxy: ProxyProcess, stub: StubServer) -> None:
    """The same in a stream, through the openai SDK: the held tool-call deltas are
    released without the recall call, and the client's call renumbered to index 0 (the
    SDK assembles calls by index: a gap would make it a second, broken call)."""
    history = _compacted_session(proxy, stub)
    stub.rule = lambda r: StubReply.tool_calls_of(
        (RECALL_TOOL, {"query": "vault"}), ("read_log", {"path": "d3"}))
    seen = len(stub.requests)
    history.append({"role": "user", "content": "Stream it: the vault combination?"})
    client = openai.OpenAI(base_url=proxy.base_url, api_key="client-a", max_retries=0)
    stream = client.chat.completions.create(
        model="stub-model", messages=history, tools=TOOLS,  # type: ignore[arg-type]
        stream=True)
    parts, finish = [], None
    for chunk in stream:
        for choice in chunk.choices:
            parts += choice.delta.tool_calls or []
            finish = choice.finish_reason or finish
    client.close()
    assert {p.index for p in parts} == {0}
    assert [p.function.name for p in parts if p.function and p.function.name] == ["read_log"]
    arguments = "".join(p.function.arguments or "" for p in parts if p.function)
    assert json.loads(arguments) == {"path": "d3"}
    assert finish == "tool_calls"
    assert len(chat_requests(stub.requests[seen:])) == 1


def test_an_upstream_stream_that_breaks_in_a_recall_round_ends_in_an_error_event(
        proxy: ProxyProcess, stub: StubServer) -> None:
    """The first stream asks for a recall, the round's stream breaks half-way: the client
    gets what the first stream released, then one error event naming no upstream address,
    and the proxy stays up for the next request."""
    history = _compacted_session(proxy, stub)
    script = Upstream()

    def rule(request: StubRequest) -> StubReply:
        if request.messages[-1].role == "tool":  # the recall round: cut mid-stream
            return StubReply.dropped("From the record: the vault combination is", after=2)
        return script(request)

    stub.rule = rule
    history.append({"role": "user", "content": "Stream it: what is the vault combination?"})
    body = {"model": "stub-model", "messages": history, "tools": TOOLS, "stream": True}
    with httpx.stream("POST", f"{proxy.base_url}/chat/completions", json=body, timeout=60,
                      headers={"authorization": "Bearer client-a"}) as response:
        assert response.status_code == 200
        events = [line[5:].strip() for line in response.iter_lines()
                  if line.startswith("data:")]
    errors = [json.loads(e)["error"] for e in events if e.startswith('{"error"')]
    assert len(errors) == 1, events
    assert errors[0]["message"]
    assert stub.url.split("//", 1)[1] not in json.dumps(errors[0])
    assert RECALL_TOOL not in "".join(events)
    stub.rule = Upstream()
    _post(proxy, [{"role": "user", "content": "Still there?"}])


# --------------------------------------------------------------------------- stats
def test_cache_tokens_are_summed_per_model_and_wire(proxy: ProxyProcess,
                                                    stub: StubServer) -> None:
    stub.rule = lambda r: StubReply.text("ok", cached_tokens=123)
    before = _stats(proxy)["by_model"].get("chat", {}).get("cache-model", {})
    for stream in (False, True):
        body: dict[str, Any] = {"model": "cache-model",
                                "messages": [{"role": "user", "content": "hi"}]}
        if stream:
            body.update(stream=True, stream_options={"include_usage": True})
        r = httpx.post(f"{proxy.base_url}/chat/completions", json=body, timeout=30)
        assert r.status_code == 200
    stats = _stats(proxy)["by_model"]["chat"]["cache-model"]
    assert stats["cache_read_tokens"] - before.get("cache_read_tokens", 0) == 246
    assert stats["responses"] - before.get("responses", 0) == 2
    assert stats["requests"] - before.get("requests", 0) == 2
    assert stats["forwarded"] - before.get("forwarded", 0) == 2
    assert stats["cache_write_tokens"] == 0


# --------------------------------------------------------------------------- do no harm
def _settings(db_url: str | Backend, upstream: str) -> ProxySettings:
    url, schema = (db_url, None) if isinstance(db_url, str) else (db_url.url, db_url.schema)
    return ProxySettings(upstream=upstream, database_url=url, database_schema=schema,
                         budget_env={"LLM_CONTEXT_SIZE": str(BUDGET + 1000),
                                     "LLM_MAX_OUTPUT_TOKENS": "1000"})


async def test_a_fitting_failure_forwards_the_original_request(
        proxy_db_url: str, tmp_path: Path, stub: StubServer) -> None:
    stub.rule = Upstream()
    with sqlite3.connect(tmp_path / "proxy.db") as db:  # the session store is broken
        db.execute("DROP TABLE proxy_sessions")
    history = [{"role": "system", "content": SYSTEM}, *_agent_turns(0, 30),
               {"role": "user", "content": "Carry on."}]
    raw = json.dumps({"model": "stub-model", "messages": history}).encode()
    async with AsyncExitStack() as stack:
        client = await app_client(stack, _settings(proxy_db_url, stub.base_url))
        response = await client.post("/v1/chat/completions", content=raw,
                                      headers={"content-type": "application/json"})
        assert response.status_code == 200, response.text
        assert parse_compaction_header(response.headers["x-ctxstack-compaction"])[
            "method"] == "none"
        stats = (await client.get("/ctxstack/stats")).json()
    [forwarded] = chat_requests(stub.requests)
    assert forwarded.body == json.loads(raw)  # the client's request, unchanged
    assert stats["fit_failures"] == 1


# --------------------------------------------------------------------------- single flight
async def _two_at_once(first: httpx.AsyncClient, second: httpx.AsyncClient,
                       headers: dict[str, str]) -> list[httpx.Response]:
    history = [{"role": "system", "content": SYSTEM}, *_agent_turns(0, 30),
               {"role": "user", "content": "Carry on."}]
    body = {"model": "stub-model", "messages": history}
    return list(await asyncio.gather(
        first.post("/v1/chat/completions", json=body, headers=headers),
        second.post("/v1/chat/completions", json=body, headers=headers)))


@pytest.mark.parametrize("apps", [1, 2], ids=["one-app", "two-apps-one-database"])
async def test_two_concurrent_over_budget_requests_make_one_summary_call(
        apps: int, proxy_backend: Backend, stub: StubServer) -> None:
    stub.rule = Upstream(summary_delay=1.0)
    async with AsyncExitStack() as stack:
        clients = [await app_client(stack, _settings(proxy_backend, stub.base_url))
                   for _ in range(apps)]
        a, b = await _two_at_once(clients[0], clients[-1],
                                  {"x-ctxstack-session": "s-1", "authorization": "Bearer k1"})
    assert a.status_code == b.status_code == 200, (a.text, b.text)
    summaries = [r for r in stub.requests if is_summary_request(r)]
    assert len(summaries) == 1
    # Both forwarded the same view: the second extended what the first computed.
    first, second = chat_requests(stub.requests)
    assert first.body["messages"] == second.body["messages"]


async def test_sessions_are_never_shared_across_keys(proxy_db_url: str,
                                                     stub: StubServer) -> None:
    stub.rule = Upstream()
    history = [{"role": "system", "content": SYSTEM}, *_agent_turns(0, 30),
               {"role": "user", "content": "Carry on."}]
    async with AsyncExitStack() as stack:
        client = await app_client(stack, _settings(proxy_db_url, stub.base_url))
        for key in ("Bearer k1", "Bearer k2"):
            r = await client.post("/v1/chat/completions",
                                  json={"model": "stub-model", "messages": history},
                                  headers={"x-ctxstack-session": "same", "authorization": key})
            assert r.status_code == 200
            # Neither the other key's view nor its summary is reused.
            assert parse_compaction_header(r.headers["x-ctxstack-compaction"])["method"] \
                == "llm"
    assert len([r for r in stub.requests if is_summary_request(r)]) == 2
    # The session id is the proxy's: it never reaches the upstream.
    assert stub.requests
    assert all("x-ctxstack-session" not in {k.lower() for k in r.headers}
               for r in stub.requests)



async def test_a_session_starting_from_another_sessions_checkpoint_can_recall_it(
        proxy_db_url: str, stub: StubServer) -> None:
    """Same key, two session ids: the second session's first fit reuses the checkpoint the
    first one wrote (no second summary) — and what that summary stands for is in the
    second session's archive too, so the vault fact is still reachable through recall."""
    stub.rule = Upstream()
    history = [{"role": "system", "content": SYSTEM}, *_agent_turns(0, 30, fact_at=1),
               {"role": "user", "content": "Carry on."}]
    async with AsyncExitStack() as stack:
        client = await app_client(stack, _settings(proxy_db_url, stub.base_url))
        first = await client.post(
            "/v1/chat/completions", json={"model": "stub-model", "messages": history},
            headers={"x-ctxstack-session": "one", "authorization": "Bearer k1"})
        assert parse_compaction_header(first.headers["x-ctxstack-compaction"])["method"] \
            == "llm"
        seen = len(stub.requests)
        asked = [*history, {"role": "assistant", "content": "Noted."},
                 {"role": "user", "content": "What is the vault combination?"}]
        second = await client.post(
            "/v1/chat/completions", json={"model": "stub-model", "messages": asked},
            headers={"x-ctxstack-session": "two", "authorization": "Bearer k1"})
        assert second.status_code == 200, second.text
    assert not [r for r in stub.requests[seen:] if is_summary_request(r)]
    calls = chat_requests(stub.requests[seen:])
    assert any(t["function"]["name"] == RECALL_TOOL for t in calls[0].body["tools"])
    assert "7391-ALPHA" in second.json()["choices"][0]["message"]["content"]


async def test_a_request_that_cannot_be_offered_recall_is_not_told_to_use_it(
        proxy_db_url: str, stub: StubServer) -> None:
    """``tool_choice: "none"`` (and legacy ``functions``): the proxy may not add its tool,
    so nothing it forwards names ``ctxstack_recall`` — not the cleared outputs'
    placeholders, not the summary's note."""
    stub.rule = Upstream()
    history = [{"role": "system", "content": SYSTEM}, *_agent_turns(0, 30),
               {"role": "user", "content": "Carry on."}]
    async with AsyncExitStack() as stack:
        client = await app_client(stack, _settings(proxy_db_url, stub.base_url))
        for session, extra in (("no-tools", {"tools": TOOLS, "tool_choice": "none"}),
                               ("legacy", {"functions": [TOOLS[0]["function"]]})):
            r = await client.post(
                "/v1/chat/completions",
                json={"model": "stub-model", "messages": history, **extra},
                headers={"x-ctxstack-session": session, "authorization": "Bearer k1"})
            assert r.status_code == 200, r.text
            assert parse_compaction_header(r.headers["x-ctxstack-compaction"])["method"] \
                != "none"
    forwarded = chat_requests(stub.requests)
    assert len(forwarded) == 2
    for request in forwarded:
        assert RECALL_TOOL not in json.dumps(request.body)
        assert len(request.body["messages"]) < len(history)


async def test_recall_expands_the_summary_in_the_view_into_the_messages_it_covers(
        proxy_db_url: str, stub: StubServer) -> None:
    """The summary the proxy forwards names its ref (``s<id>``); ``ctxstack_recall`` with
    that ref lists what it summarised, in order — the early fact among it — and the
    expansion survives into a new app on the same database (another worker)."""
    import re

    asked_ref: list[str] = []

    def script(request: StubRequest) -> StubReply:
        if is_summary_request(request):
            return StubReply.text("Summary: thirty days of shipping logs were checked.")
        last = request.messages[-1]
        if last.role == "tool":
            return StubReply.text(f"Expanded: {last.text[:4000]}")
        if "ctxstack_recall" in request.tool_names and "vault" in request.last_user_text:
            found = re.search(r"Summary ref (s\d+)",
                              " ".join(m.text for m in request.messages))
            assert found is not None, "the forwarded summary names its ref"
            asked_ref.append(found.group(1))
            return StubReply.tool_call("ctxstack_recall", {"query": found.group(1)})
        return StubReply.text("Noted.")

    stub.rule = script
    history = [{"role": "system", "content": SYSTEM},
               *[m for t in range(30) for m in [
                   {"role": "user", "content": f"Day {t}: " + LOG_LINE.format(n=t) * 6
                    + (FACT if t == 1 else "")},
                   {"role": "assistant", "content": f"Day {t} noted."}]],
               {"role": "user", "content": "Carry on."}]
    headers = {"x-ctxstack-session": "expand", "authorization": "Bearer k1"}
    async with AsyncExitStack() as stack:
        client = await app_client(stack, _settings(proxy_db_url, stub.base_url))
        first = await client.post("/v1/chat/completions", headers=headers,
                                  json={"model": "stub-model", "messages": history})
        assert parse_compaction_header(first.headers["x-ctxstack-compaction"])["method"] \
            == "llm"
    history += [{"role": "assistant", "content": "Noted."},
                {"role": "user", "content": "What was the vault combination again?"}]
    seen = len(stub.requests)
    async with AsyncExitStack() as stack:  # another worker: nothing but the database shared
        client = await app_client(stack, _settings(proxy_db_url, stub.base_url))
        second = await client.post("/v1/chat/completions", headers=headers,
                                   json={"model": "stub-model", "messages": history})
    assert second.status_code == 200, second.text
    assert asked_ref
    text = second.json()["choices"][0]["message"]["content"]
    assert "7391-ALPHA" in text
    assert "Day 0:" in text
    assert text.index("Day 0:") < text.index("Day 1:")
    assert not second.json()["choices"][0]["message"].get("tool_calls")
    recall_round = chat_requests(stub.requests[seen:])
    assert len(recall_round) == 2
    assert recall_round[1].body["messages"][-1]["role"] == "tool"  # the expansion


async def test_after_an_upstream_overflow_the_smaller_view_is_extended(
        proxy_db_url: str, stub: StubServer) -> None:
    """The upstream counts more than the proxy: one overflow, one smaller retry — and the
    next request extends that smaller view instead of overflowing again."""
    rule = Upstream()
    overflowed: list[int] = []

    def upstream(request: StubRequest) -> StubReply:
        if not is_summary_request(request) and not overflowed:
            overflowed.append(len(request.messages))
            return StubReply.overflow()
        return rule(request)

    stub.rule = upstream
    history = [{"role": "system", "content": SYSTEM}, *_agent_turns(0, 30),
               {"role": "user", "content": "Carry on."}]
    async with AsyncExitStack() as stack:
        client = await app_client(stack, _settings(proxy_db_url, stub.base_url))
        first = await client.post("/v1/chat/completions",
                                  json={"model": "stub-model", "messages": history})
        assert first.status_code == 200, first.text
        history += [{"role": "assistant", "content": "Noted."},
                    {"role": "user", "content": "And next?"}]
        second = await client.post("/v1/chat/completions",
                                   json={"model": "stub-model", "messages": history})
        assert second.status_code == 200, second.text
        stats = (await client.get("/ctxstack/stats")).json()
    assert parse_compaction_header(second.headers["x-ctxstack-compaction"])["method"] \
        == "checkpoint"
    assert stats["overflow_retries"] == 1
    rejected, retried, extended = chat_requests(stub.requests)
    assert len(retried.messages) < len(rejected.messages)
    assert extended.body["messages"][:len(retried.body["messages"])] == \
        retried.body["messages"]


async def test_a_session_archive_is_searched_and_read_by_ref_and_kept_per_session(
        proxy_db_url: str) -> None:
    from ctxstack.proxy.recall import recall_text
    from ctxstack.proxy.sessions import SessionArchive
    from ctxstack.store import create_engine_from_url, session_factory

    engine = create_engine_from_url(proxy_db_url)
    try:
        factory = session_factory(engine)
        mine, other = SessionArchive(factory, "a" * 64), SessionArchive(factory, "b" * 64)
        refs = await mine.add([ChatMessage.tool("call_1", FACT, name="read_log"),
                               ChatMessage.user("Ship order #A-1042 on Friday.")])
        assert await mine.add([ChatMessage.tool("call_1", FACT, name="read_log")]) \
            == refs[:1]  # archiving it again keeps its ref
        assert len(mine) == 2
        found = await recall_text(mine, "vault combination", 200, DEFAULT_COUNTER)
        assert "7391-ALPHA" in found
        assert refs[0] in found
        by_ref = await recall_text(mine, refs[1], 200, DEFAULT_COUNTER)
        assert "#A-1042" in by_ref
        assert "7391" not in await recall_text(other, "vault combination", 200,
                                               DEFAULT_COUNTER)
    finally:
        await engine.dispose()


async def test_a_session_keeps_its_summaries_with_their_sources(
        proxy_backend: Backend) -> None:
    """``SessionArchive`` as a summary store, on SQLite and PostgreSQL: a node round-trips
    under ``s<id>``, ``summary`` names the newest, another session reads none of them, and
    a ref that names nothing (huge, malformed, NUL) is None, not an error; expansion lists
    the covered messages in order, across a fresh engine."""
    from ctxstack.compaction import SummaryNode, expand
    from ctxstack.proxy.sessions import SessionArchive
    from ctxstack.store import session_factory

    engine = proxy_backend.engine()
    try:
        factory = session_factory(engine)
        mine, other = SessionArchive(factory, "c" * 64), SessionArchive(factory, "d" * 64)
        refs = await mine.add([ChatMessage.user(f"Day {i}: {FACT if i == 1 else 'ok'}")
                               for i in range(3)])
        first = await mine.add_summary(SummaryNode(text="days 0-2", messages=tuple(refs),
                                                   first=refs[0], last=refs[-1], count=3))
        second = await mine.add_summary(SummaryNode(text="all", children=(first,),
                                                    first=refs[0], last=refs[-1], count=3))
        assert first.startswith("s")
        assert second != first
        node = await mine.get_summary(first)
        assert node is not None
        assert (node.ref, node.text, node.messages) == (first, "days 0-2", tuple(refs))
        latest = await mine.get_summary("summary")
        assert latest is not None
        assert latest.ref == second
        assert await other.get_summary(first) is None
        assert await other.get_summary("summary") is None
        for bad in ("s" + "9" * 40, "s1\x00", "r1", "", "summary2"):
            assert await mine.get_summary(bad) is None
    finally:
        await engine.dispose()
    engine = proxy_backend.engine()
    try:
        again = SessionArchive(session_factory(engine), "c" * 64)
        top = await expand(again, second)
        assert top is not None
        assert [c.ref for c in top.children] == [first]
        child = await expand(again, first)
        assert child is not None
        texts = [m.message.text for m in child.messages if m.message is not None]
        assert texts == ["Day 0: ok", f"Day 1: {FACT}", "Day 2: ok"]
    finally:
        await engine.dispose()


async def test_single_flight_through_redis_when_configured(proxy_db_url: str,
                                                           stub: StubServer) -> None:
    """With ``CTXSTACK_REDIS_URL`` the lease is Redis's: still one summary call for two
    concurrent requests on two apps, and the lease is gone afterwards."""
    import redis

    from tests.service_support import redis_url_or_skip

    url = redis_url_or_skip()
    stub.rule = Upstream(summary_delay=1.0)
    settings = _settings(proxy_db_url, stub.base_url).model_copy(update={"redis_url": url})
    async with AsyncExitStack() as stack:
        clients = [await app_client(stack, settings) for _ in range(2)]
        a, b = await _two_at_once(clients[0], clients[1],
                                  {"x-ctxstack-session": "s-redis", "authorization": "Bearer r"})
    assert a.status_code == b.status_code == 200
    assert len([r for r in stub.requests if is_summary_request(r)]) == 1
    leases = redis.Redis.from_url(url).keys("ctxstack:proxy:lease:*")
    assert leases == []


def test_an_over_long_message_within_budget_is_cut_on_every_wire(
        stub_server: StubServer, stub: StubServer, tmp_path: Path) -> None:
    """A request that fits the budget but holds one message past the cut length (a pasted
    dump): every wire forwards it with that message cut head+tail — the tail, the rest and
    the question as sent — and reports ``truncate``; the fit does not fail (it used to
    trip an assertion and go out uncut, counted as a fit failure)."""
    dump = "BEGIN " + "0123456789 abcdefghij " * 3_000 + " END"
    turns = [{"role": "user", "content": dump}, {"role": "assistant", "content": "Read."},
             {"role": "user", "content": "What failed?"}]
    stub.rule = lambda r: StubReply.text("ok")
    env = {"LLM_API_KEY": "k", "LLM_CONTEXT_SIZE": "60000", "LLM_MAX_OUTPUT_TOKENS": "1000"}
    with running_proxy(tmp_path, stub_server.base_url, env,
                       args=("--anthropic-upstream", stub_server.url)) as proc:
        headers = {"authorization": "Bearer k", "x-api-key": "k"}
        asked = [
            (proc.base_url + "/chat/completions", {"model": "m", "messages": turns}, "messages"),
            (proc.base_url + "/responses", {"model": "m", "input": turns}, "input"),
            (proc.url + "/v1/messages", {"model": "m", "max_tokens": 64, "messages": turns},
             "messages"),
        ]
        for url, body, field in asked:
            seen = len(stub.requests)
            response = httpx.post(url, json=body, headers=headers, timeout=60)
            assert response.status_code == 200, (url, response.text)
            assert "method=truncate" in response.headers["x-ctxstack-compaction"], url
            sent = stub.requests[seen:][-1].body[field]
            first = json.dumps(sent[0])
            assert "BEGIN" in first, url
            assert "END" in first, url
            assert len(first) < len(dump), url
            assert sent[1:] == turns[1:], url
        assert _stats(proc)["fit_failures"] == 0
