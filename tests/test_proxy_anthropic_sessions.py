"""Sessions, ``ctxstack_recall`` and prefix-reusing summaries on the Anthropic Messages wire.

The official ``anthropic`` SDK against a real ``ctxstack proxy`` process (and, for the
single-flight and do-no-harm cases, proxy apps in process sharing one database) in front
of the recording stub, which speaks ``/v1/messages`` and refuses, as Anthropic does, any
request breaking the sequence rules. Its scripted model reads logs with a
``read_log`` tool, signs its thinking blocks, and calls ``ctxstack_recall`` when it is
offered and asked about the vault (:class:`~tests.proxy_support.RecallScript`, the same
script the Chat Completions tests drive). Budget: 5,000 input tokens.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from ctxstack.llm.stub import StubReply, StubRequest, StubServer
from ctxstack.llm.stub.anthropic import input_tokens, sequence_problems
from ctxstack.proxy import ProxySettings, parse_compaction_header
from ctxstack.proxy.anthropic import count_request
from ctxstack.proxy.recall import RECALL_TOOL, USAGE_HEADER
from ctxstack.tokens import DEFAULT_COUNTER
from tests.proxy_support import (
    SUMMARY_TEXT,
    ProxyProcess,
    RecallScript,
    app_client,
    check_anthropic_forwarded,
    check_view_after_change,
    is_summary_request,
    running_proxy,
)
from tests.store.dbkit import Backend

BUDGET = 5_000
MODEL = "claude-stub-sessions"
"""Its own model name: the per-model stats these tests read are theirs alone."""
KEY = "sk-ant-session-client"
SYSTEM = [{"type": "text", "text": "You are the operations assistant of ACME-7.",
           "cache_control": {"type": "ephemeral"}}]
TOOLS = [{"name": "read_log", "description": "Read a log file.",
          "input_schema": {"type": "object", "properties": {"path": {"type": "string"}},
                           "required": ["path"]}}]
LOG_LINE = "2026-03-14 12:00:07 worker-3 shipped order #A-{n} (12 units, invoice INV-{n}) ok\n"
FACT = "The vault combination is 7391-ALPHA."


def _log(day: int, *, fact: bool = False, lines: int = 6) -> str:
    text = "".join(LOG_LINE.format(n=1000 + day * 10 + i) for i in range(lines))
    return f"{FACT}\n{text}" if fact else text


@pytest.fixture(scope="module")
def proxy(stub_server: StubServer, tmp_path_factory: pytest.TempPathFactory,
          ) -> Iterator[ProxyProcess]:
    env = {"LLM_CONTEXT_SIZE": str(BUDGET + 1000), "LLM_MAX_OUTPUT_TOKENS": "1000",
           "CTXSTACK_PROXY_STATS_FLUSH": "0.2"}
    with running_proxy(tmp_path_factory.mktemp("anthropic-sessions"), stub_server.base_url,
                       env, args=("--anthropic-upstream", stub_server.url)) as p:
        yield p


Connect = Callable[[str], anthropic.Anthropic]


@pytest.fixture
def connect(proxy: ProxyProcess) -> Iterator[Connect]:
    """``connect(session)``: an SDK client of the proxy sending ``x-ctxstack-session``
    (closed after the test)."""
    made: list[anthropic.Anthropic] = []

    def make(session: str) -> anthropic.Anthropic:
        made.append(anthropic.Anthropic(base_url=proxy.url, api_key=KEY, max_retries=0,
                                        timeout=60,
                                        default_headers={"x-ctxstack-session": session}))
        return made[-1]

    yield make
    for client in made:
        client.close()


def forwarded(stub: StubServer, since: int = 0) -> list[StubRequest]:
    """The Messages calls the stub received that are not summary calls."""
    return [r for r in stub.requests[since:]
            if r.path == "/v1/messages" and not is_summary_request(r)]


def _blocks(message: dict[str, Any]) -> list[Any]:
    content = message["content"]
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


def _unmarked(value: Any) -> Any:
    """``value`` without ``cache_control`` markers (which may move on messages)."""
    if isinstance(value, dict):
        return {k: _unmarked(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_unmarked(v) for v in value]
    return value


def _marked(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages as Claude Code sends them: a cache marker on the newest one's last
    block (the earlier ones resent without it)."""
    out = list(messages)
    last = out[-1]
    blocks = [dict(b) for b in _blocks(last)]
    blocks[-1]["cache_control"] = {"type": "ephemeral"}
    out[-1] = {**last, "content": blocks}
    return out


def _check_valid(request: StubRequest, client_turns: set[str]) -> None:
    check_anthropic_forwarded(dict(request.body), budget=BUDGET, system=SYSTEM, tools=TOOLS,
                              client_turns=client_turns)


def _ask(client: anthropic.Anthropic, messages: list[dict[str, Any]], *, stream: bool,
         ) -> tuple[anthropic.types.Message, httpx.Headers]:
    if stream:
        with client.messages.stream(model=MODEL, max_tokens=256, system=SYSTEM,
                                    tools=TOOLS, messages=_marked(messages)) as s:
            return s.get_final_message(), s.response.headers
    raw = client.messages.with_raw_response.create(
        model=MODEL, max_tokens=256, system=SYSTEM, tools=TOOLS,
        messages=_marked(messages))
    return raw.parse(), raw.headers


def _stats(proxy: ProxyProcess) -> dict[str, Any]:
    return dict(httpx.get(f"{proxy.url}/ctxstack/stats", timeout=10).json())


def _model_stats(proxy: ProxyProcess) -> dict[str, int]:
    return dict(_stats(proxy)["by_model"].get("anthropic", {}).get(MODEL, {}))


# --------------------------------------------------------------------------- growing
def test_growing_80_turn_conversation_extends_its_view_and_recalls_an_early_fact(
        proxy: ProxyProcess, stub: StubServer,
        connect: Connect) -> None:
    """80 agent turns with tool use past the budget: every forwarded request within budget
    and valid, thinking turns byte-identical; once compacted, each request that extends
    the session's view starts with the previous request's messages byte for byte; a fact
    planted in turn 1 is answered through ``ctxstack_recall`` at the end."""
    stub.rule = RecallScript(thinking=True)
    client = connect("growing")
    messages: list[dict[str, Any]] = []
    client_turns: set[str] = set()
    methods: list[str] = []
    for turn in range(80):
        messages.append({"role": "user", "content": [
            {"type": "text", "text": f"Turn {turn}: check the shipping log of day {turn}."}]})
        while True:
            answer, headers = _ask(client, messages, stream=turn % 4 == 1)
            methods.append(parse_compaction_header(headers["x-ctxstack-compaction"])["method"])
            messages.append({"role": "assistant",
                             "content": [b.model_dump() for b in answer.content]})
            client_turns.add(json.dumps(messages[-1]))
            if answer.stop_reason != "tool_use":
                break
            [call] = [b for b in answer.content if b.type == "tool_use"]
            assert call.name == "read_log"
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": call.id,
                 "content": _log(turn, fact=turn == 1)}]})
    requests = forwarded(stub)
    assert len(requests) == len(methods) == 160
    assert "llm" in methods
    first = next(k for k, m in enumerate(methods) if m != "none")  # the first compaction
    assert first > 0
    extended = 0
    for k, request in enumerate(requests):
        _check_valid(request, client_turns)
        if k > first and methods[k] == "checkpoint":
            previous = _unmarked(requests[k - 1].body["messages"])
            current = _unmarked(request.body["messages"])
            assert current[:len(previous)] == previous, k
            extended += 1
    recomputed = sum(1 for m in methods[first:] if m in ("llm", "mask", "truncate"))
    assert extended >= 3 * recomputed
    summaries = [r for r in stub.requests if is_summary_request(r)]
    assert 0 < len(summaries) <= recomputed + 1
    # A summary continues the conversation's own prefix: the client's system and tools
    # in the same bytes, tools off, the instruction last.
    for summary in summaries:
        assert json.dumps(summary.body["system"]) == json.dumps(SYSTEM)
        assert json.dumps(summary.body["tools"][:len(TOOLS)]) == json.dumps(TOOLS)
        assert summary.body["tool_choice"] == {"type": "none"}
        assert sequence_problems(dict(summary.body)) == []
        assert KEY in (summary.headers.get("x-api-key", "")
                       + summary.headers.get("authorization", ""))  # the client's key
    # Compacted content names the tool the proxy offers.
    text = json.dumps([r.body["messages"] for r in requests[first:]])
    assert f"{RECALL_TOOL} ref r" in text  # a cleared tool output's placeholder
    assert f"`{RECALL_TOOL}`" in text  # the summary's note
    assert "`recall`" not in text
    assert "; recall ref" not in text
    # The early fact, asked at the end.
    seen = len(stub.requests)
    messages.append({"role": "user", "content": "What is the vault combination?"})
    answer, headers = _ask(client, messages, stream=False)
    assert "7391-ALPHA" in answer.content[-1].text
    assert RECALL_TOOL not in answer.model_dump_json()
    assert len(forwarded(stub, seen)) == 2
    assert headers[USAGE_HEADER] == "sum; upstream_calls=2"


# --------------------------------------------------------------------------- recall
def _compacted(connect: Connect, stub: StubServer, session: str,
               ) -> tuple[anthropic.Anthropic, list[dict[str, Any]]]:
    """A conversation of ``session`` whose early part (with the fact) was compacted."""
    stub.rule = RecallScript(thinking=True)
    messages: list[dict[str, Any]] = []
    for day in range(24):
        messages += [
            {"role": "user", "content": f"Turn {day}: what happened on day {day}?"},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Reading it."},
                {"type": "tool_use", "id": f"toolu_{day}", "name": "read_log",
                 "input": {"path": f"d{day}"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{day}",
                                          "content": _log(day, fact=day == 1)}]},
            {"role": "assistant", "content": f"Day {day}: all orders shipped."}]
    messages.append({"role": "user", "content": "Carry on."})
    client = connect(session)
    answer, headers = _ask(client, messages, stream=False)
    assert parse_compaction_header(headers["x-ctxstack-compaction"])["method"] != "none"
    messages.append({"role": "assistant", "content": [b.model_dump() for b in answer.content]})
    return client, messages


def _signed(block: dict[str, Any]) -> bool:
    digest = hashlib.sha256(block["thinking"].encode()).hexdigest()
    return bool(block["signature"] == f"sig-{digest}")


def test_recall_is_answered_by_the_proxy_and_hidden_from_the_client(
        proxy: ProxyProcess, stub: StubServer,
        connect: Connect) -> None:
    client, messages = _compacted(connect, stub, "recall-json")
    rounds_before = _model_stats(proxy).get("recall_rounds", 0)
    seen = len(stub.requests)
    messages.append({"role": "user", "content": "What is the vault combination?"})
    raw = client.messages.with_raw_response.create(
        model=MODEL, max_tokens=256, system=SYSTEM, tools=TOOLS,
        messages=messages)
    answer = raw.parse()
    assert "7391-ALPHA" in answer.content[-1].text
    assert answer.stop_reason == "end_turn"
    assert all(b.type != "tool_use" for b in answer.content)
    assert RECALL_TOOL not in raw.http_response.text
    calls = forwarded(stub, seen)
    assert len(calls) == 2
    assert RECALL_TOOL in calls[0].tool_names
    # The round: the model's whole turn (thinking signed, byte-identical), then the
    # proxy's tool_result first in the next user message.
    turn, results = calls[1].body["messages"][-2:]
    assert [b["type"] for b in turn["content"]] == ["thinking", "text", "tool_use"]
    assert _signed(turn["content"][0])
    assert turn["content"][2]["name"] == RECALL_TOOL
    assert results["content"][0]["type"] == "tool_result"
    assert results["content"][0]["tool_use_id"] == turn["content"][2]["id"]
    assert "7391-ALPHA" in results["content"][0]["content"]
    for call in calls:  # recall rounds are forwarded requests like any other
        assert count_request(dict(call.body), DEFAULT_COUNTER) <= BUDGET
        assert sequence_problems(dict(call.body)) == []
        assert json.dumps(call.body["system"]) == json.dumps(SYSTEM)
    # Usage: the sum over both upstream calls, and the header says so.
    assert raw.headers[USAGE_HEADER] == "sum; upstream_calls=2"
    # Anthropic reports the prompt in three parts: uncached, cache reads, cache writes.
    usage = answer.usage
    assert (usage.input_tokens + usage.cache_read_input_tokens
            + usage.cache_creation_input_tokens) == sum(
        input_tokens(c.body, c.messages) for c in calls)
    assert answer.usage.cache_read_input_tokens == 60
    assert answer.usage.cache_creation_input_tokens == 5
    assert _model_stats(proxy)["recall_rounds"] - rounds_before == 1


def test_recall_in_a_stream_is_hidden_and_usage_summed(
        proxy: ProxyProcess, stub: StubServer, connect: Connect) -> None:
    client, messages = _compacted(connect, stub, "recall-stream")
    seen = len(stub.requests)
    messages.append({"role": "user", "content": "Stream it: what is the vault combination?"})
    events: list[Any] = []
    with client.messages.stream(model=MODEL, max_tokens=256, system=SYSTEM,
                                tools=TOOLS, messages=messages) as stream:
        assert stream.response.headers[USAGE_HEADER] == "sum"
        events.extend(stream)
        final = stream.get_final_message()
    kinds = [e.type for e in events]
    assert kinds.count("message_start") == 1
    assert kinds[-1] == "message_stop"
    starts = [e for e in events if e.type == "content_block_start"]
    assert [e.index for e in starts] == list(range(len(starts)))  # renumbered, no gaps
    assert all(e.content_block.type != "tool_use" for e in starts)
    assert final.stop_reason == "end_turn"
    assert "7391-ALPHA" in final.content[-1].text
    assert RECALL_TOOL not in final.model_dump_json()
    calls = forwarded(stub, seen)
    assert len(calls) == 2
    usage = final.usage
    assert (usage.input_tokens + (usage.cache_read_input_tokens or 0)
            + (usage.cache_creation_input_tokens or 0)) == sum(
        input_tokens(c.body, c.messages) for c in calls)
    assert final.usage.cache_read_input_tokens == 60
    # The stream's round carries the model's turn rebuilt from its deltas, signed.
    turn = calls[1].body["messages"][-2]
    assert _signed(turn["content"][0])
    assert turn["content"][2]["input"] == {"query": "vault combination"}


def test_after_three_recall_rounds_one_last_call_without_the_tool(
        proxy: ProxyProcess, stub: StubServer,
        connect: Connect) -> None:
    client, messages = _compacted(connect, stub, "recall-rounds")
    stub.rule = RecallScript(thinking=True, always_recall=True)
    seen = len(stub.requests)
    messages.append({"role": "user", "content": "And the vault?"})
    raw = client.messages.with_raw_response.create(
        model=MODEL, max_tokens=256, system=SYSTEM, tools=TOOLS,
        messages=messages)
    calls = forwarded(stub, seen)
    assert len(calls) == 4
    assert all(c.body.get("tool_choice") is None for c in calls[:3])
    # The last call cannot call it: tool_choice none (its definition stays, as Anthropic
    # requires for the tool_use blocks of the earlier rounds).
    assert calls[3].body["tool_choice"] == {"type": "none"}
    assert all(sequence_problems(dict(c.body)) == [] for c in calls)
    assert raw.headers[USAGE_HEADER] == "sum; upstream_calls=4"
    assert RECALL_TOOL not in raw.http_response.text


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_a_recall_call_beside_the_clients_own_call_is_removed_and_the_answer_delivered(
        proxy: ProxyProcess, stub: StubServer, connect: Connect, stream: bool) -> None:
    """The model calls ``ctxstack_recall`` and the client's ``read_log`` at once: the proxy
    makes no round (the client must run its tool), removes the recall call and delivers
    the answer; the client's call keeps its place, renumbered in a stream."""
    client, messages = _compacted(connect, stub, f"beside-{stream}")
    stub.rule = lambda r: StubReply.tool_calls_of(
        (RECALL_TOOL, {"query": "vault"}), ("read_log", {"path": "d3"}), thinking="Both.")
    seen = len(stub.requests)
    messages.append({"role": "user", "content": "What is the vault combination?"})
    answer, headers = _ask(client, messages, stream=stream)
    assert [b.type for b in answer.content] == ["thinking", "tool_use"]
    assert answer.content[1].name == "read_log"
    assert answer.stop_reason == "tool_use"
    assert RECALL_TOOL not in answer.model_dump_json()
    assert len(forwarded(stub, seen)) == 1  # no round: a completed answer, delivered
    assert headers[USAGE_HEADER] == ("sum" if stream else "sum; upstream_calls=1")


def test_stats_count_anthropic_usage_cache_tokens_once_and_requests(
        proxy: ProxyProcess, stub: StubServer,
        connect: Connect) -> None:
    before = _model_stats(proxy)
    stub.rule = lambda r: StubReply.text("ok", cached_tokens=70, cache_write_tokens=30)
    client = connect("stats")
    # A prompt larger than the cache figures the stub reports for it (they are part of it).
    prompt = "Please summarise the incident report of last night. " * 20
    client.messages.create(model=MODEL, max_tokens=64,
                           messages=[{"role": "user", "content": prompt}])
    with client.messages.stream(model=MODEL, max_tokens=64,
                                messages=[{"role": "user", "content": prompt}]) as stream:
        stream.get_final_message()
    after = _model_stats(proxy)
    for field, delta in (("requests", 2), ("forwarded", 2), ("responses", 2),
                         ("cache_read_tokens", 140), ("cache_write_tokens", 60)):
        assert after[field] - before.get(field, 0) == delta, field
    assert after["input_tokens"] > before.get("input_tokens", 0)


# --------------------------------------------------------------------------- in process
def _settings(db: str | Backend, stub: StubServer) -> ProxySettings:
    url, schema = (db, None) if isinstance(db, str) else (db.url, db.schema)
    return ProxySettings(upstream=stub.base_url, anthropic_upstream=stub.url,
                         database_url=url, database_schema=schema,
                         budget_env={"LLM_CONTEXT_SIZE": str(BUDGET + 1000),
                                     "LLM_MAX_OUTPUT_TOKENS": "1000"})


def _over_budget() -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    for day in range(24):
        messages += [{"role": "user", "content": f"Day {day}: " + _log(day)},
                     {"role": "assistant", "content": f"Day {day}: noted."}]
    messages.append({"role": "user", "content": "Carry on."})
    return {"model": MODEL, "max_tokens": 64, "system": SYSTEM, "messages": messages}


@pytest.mark.parametrize(("apps", "redis"), [(1, False), (2, False), (2, True)],
                         ids=["one-app", "two-apps-one-database", "two-apps-redis-lease"])
async def test_two_concurrent_over_budget_requests_make_one_summary_call(
        apps: int, redis: bool, proxy_backend: Backend, stub: StubServer) -> None:
    settings = _settings(proxy_backend, stub)
    if redis:  # the lease in Redis (CTXSTACK_PROXY_REDIS_URL) instead of the database
        from tests.service_support import redis_url_or_skip

        settings = settings.model_copy(update={"redis_url": redis_url_or_skip()})
    stub.rule = RecallScript(thinking=True, summary_delay=1.0)
    headers = {"x-ctxstack-session": "s-1", "x-api-key": KEY,
               "anthropic-version": "2023-06-01"}
    async with AsyncExitStack() as stack:
        clients = [await app_client(stack, settings) for _ in range(apps)]
        a, b = await asyncio.gather(*(
            c.post("/v1/messages", json=_over_budget(), headers=headers)
            for c in (clients[0], clients[-1])))
    assert a.status_code == b.status_code == 200, (a.text, b.text)
    assert len([r for r in stub.requests if is_summary_request(r)]) == 1
    # Both forwarded the same view: the second extended what the first computed.
    first, second = forwarded(stub)
    assert first.body["messages"] == second.body["messages"]


@pytest.mark.parametrize("session", [{"x-ctxstack-session": "same"}, {}],
                         ids=["same-session-header", "derived-session"])
async def test_sessions_are_never_shared_across_keys(proxy_db_url: str, stub: StubServer,
                                                     session: dict[str, str]) -> None:
    stub.rule = RecallScript(thinking=True)
    async with AsyncExitStack() as stack:
        client = await app_client(stack, _settings(proxy_db_url, stub))
        for key in ("sk-ant-alice", "sk-ant-bob"):
            r = await client.post("/v1/messages", json=_over_budget(),
                                  headers={**session, "x-api-key": key})
            assert r.status_code == 200, r.text
            # Neither the other key's view nor its summary is reused.
            assert parse_compaction_header(r.headers["x-ctxstack-compaction"])["method"] \
                == "llm"
        again = await client.post("/v1/messages", json=_over_budget(),
                                  headers={**session, "x-api-key": "sk-ant-alice"})
        assert parse_compaction_header(again.headers["x-ctxstack-compaction"])["method"] \
            == "checkpoint"  # Alice's own view, extended
    summaries = [r for r in stub.requests if is_summary_request(r)]
    assert [s.headers["x-api-key"] for s in summaries] == ["sk-ant-alice", "sk-ant-bob"]


@pytest.mark.parametrize("choice", [{"type": "none"}, {"type": "tool", "name": "read_log"}],
                         ids=["tools-off", "one-tool-forced"])
async def test_a_request_that_cannot_be_offered_recall_is_not_told_to_use_it(
        proxy_db_url: str, stub: StubServer, choice: dict[str, str]) -> None:
    """The proxy may not add ``ctxstack_recall`` here, so nothing forwarded names it."""
    stub.rule = RecallScript()
    async with AsyncExitStack() as stack:
        client = await app_client(stack, _settings(proxy_db_url, stub))
        r = await client.post("/v1/messages",
                              json={**_over_budget(), "tools": TOOLS, "tool_choice": choice},
                              headers={"x-api-key": KEY})
        assert r.status_code == 200, r.text
        assert parse_compaction_header(r.headers["x-ctxstack-compaction"])["method"] == "llm"
    [request] = forwarded(stub)
    assert "ctxstack_recall" not in json.dumps(request.body)
    assert request.body["tools"] == TOOLS


async def test_a_fitting_failure_forwards_the_original_request(
        proxy_db_url: str, tmp_path: Path, stub: StubServer) -> None:
    stub.rule = RecallScript(thinking=True)
    with sqlite3.connect(tmp_path / "proxy.db") as db:  # the session store is broken
        db.execute("DROP TABLE proxy_sessions")
    raw = json.dumps(_over_budget()).encode()
    async with AsyncExitStack() as stack:
        client = await app_client(stack, _settings(proxy_db_url, stub))
        response = await client.post("/v1/messages", content=raw, headers={
            "content-type": "application/json", "x-api-key": KEY})
        assert response.status_code == 200, response.text
        assert parse_compaction_header(response.headers["x-ctxstack-compaction"])[
            "method"] == "none"
        stats = (await client.get("/ctxstack/stats")).json()
    [sent] = forwarded(stub)
    assert sent.body == json.loads(raw)  # the client's request, unchanged
    assert stats["fit_failures"] == 1


async def test_a_failed_prefix_summary_falls_back_to_the_transcript_request(
        proxy_db_url: str, stub: StubServer) -> None:
    model = RecallScript(thinking=True)

    def rule(request: StubRequest) -> StubReply:
        if is_summary_request(request) and request.body.get("tool_choice") is not None:
            return StubReply.server_error(500)  # the prefix-reusing summary request
        return model(request)

    stub.rule = rule
    body = {**_over_budget(), "tools": TOOLS}
    async with AsyncExitStack() as stack:
        client = await app_client(stack, _settings(proxy_db_url, stub))
        r = await client.post("/v1/messages", json=body, headers={"x-api-key": KEY})
    assert r.status_code == 200, r.text
    assert parse_compaction_header(r.headers["x-ctxstack-compaction"])["method"] == "llm"
    prefix, transcript = [s for s in stub.requests if is_summary_request(s)]
    assert prefix.body["messages"][0] == body["messages"][0]  # the conversation itself
    assert "tools" not in transcript.body  # the guard's own transcript request
    [sent] = forwarded(stub)
    assert SUMMARY_TEXT in json.dumps(sent.body["messages"])


def _changed(messages: list[dict[str, Any]], change: str) -> list[dict[str, Any]]:
    """``messages`` with an early message edited, a turn inserted or removed (all in the
    part a stored view covers), or left as they are."""
    out = [dict(m) for m in messages]
    if change == "edited":
        out[2]["content"] = out[2]["content"].replace("Day 1:", "Day one (edited):")
    elif change == "inserted":
        out[2:2] = [{"role": "user", "content": "An aside (inserted)."},
                    {"role": "assistant", "content": "Noted the aside."}]
    elif change == "removed":
        del out[2:4]
    return out


@pytest.mark.parametrize("change", ["unchanged", "edited", "inserted", "removed"])
async def test_a_history_changed_before_the_view_s_end_is_recomputed_not_extended(
        proxy_db_url: str, stub: StubServer, change: str) -> None:
    """One app: the second request reuses the first's units in process
    (:mod:`ctxstack.proxy.unit_memo`), and still must not extend a view whose messages
    the client changed."""
    stub.rule = RecallScript(thinking=True)
    headers = {"x-ctxstack-session": f"changed-{change}", "x-api-key": KEY,
               "anthropic-version": "2023-06-01"}
    first = _over_budget()
    grown = {**first, "messages": [*first["messages"],
                                   {"role": "assistant", "content": "Carrying on."},
                                   {"role": "user", "content": "And day 24?"}]}
    then = {**grown, "messages": _changed(grown["messages"], change)}
    methods = []
    async with AsyncExitStack() as stack:
        client = await app_client(stack, _settings(proxy_db_url, stub))
        for body in (first, grown, then):
            r = await client.post("/v1/messages", json=body, headers=headers)
            assert r.status_code == 200, r.text
            methods.append(parse_compaction_header(r.headers["x-ctxstack-compaction"])[
                "method"])
    sent = forwarded(stub)
    assert methods[:2] == ["llm", "checkpoint"]  # computed, then extended
    assert sent[1].body["messages"][:len(sent[0].body["messages"])] == sent[0].body[
        "messages"]
    summaries = [r for r in stub.requests if is_summary_request(r)]
    for body in (b.body for b in sent):
        assert count_request(body, DEFAULT_COUNTER) <= BUDGET
    check_view_after_change(change, methods, [r.body["messages"] for r in sent], summaries,
                            {"edited": "Day one (edited):",
                             "inserted": "An aside (inserted)."}.get(change),
                            "Day 1: ")


async def test_a_bad_message_after_a_history_read_before_is_still_refused(
        proxy_db_url: str, stub: StubServer) -> None:
    """Messages equal to ones validated before are not checked again; a new one still is
    — a result answering no earlier call included."""
    stub.rule = RecallScript(thinking=True)
    headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
    body = _over_budget()
    n = len(body["messages"])
    bad = {**body, "messages": [*body["messages"],
                                {"role": "assistant", "content": "Reading."},
                                {"role": "user", "content": [
                                    {"type": "tool_result", "tool_use_id": "toolu_nope",
                                     "content": "x"}]}]}
    async with AsyncExitStack() as stack:
        client = await app_client(stack, _settings(proxy_db_url, stub))
        assert (await client.post("/v1/messages", json=body, headers=headers)
                ).status_code == 200
        seen = len(stub.requests)
        refused = await client.post("/v1/messages", json=bad, headers=headers)
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["type"] == "invalid_request_error"
    assert f"messages.{n + 1}.content.0.tool_use_id" in refused.text
    assert len(stub.requests) == seen  # before any upstream call
