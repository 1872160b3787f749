"""``ctxstack proxy`` on the Anthropic Messages wire, driven by the official ``anthropic`` SDK.

A real proxy process (the CLI) in front of the stub (real HTTP on loopback), which speaks
``/v1/messages`` and records every request it receives — body and headers — and refuses,
as Anthropic does, any request breaking the sequence rules. Budget: LLM_CONTEXT_SIZE 6,000
- LLM_MAX_OUTPUT_TOKENS 1,000 = 5,000 input tokens; upstream timeout 2 s.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from ctxstack.llm.stub import StubReply, StubRequest, StubServer
from ctxstack.llm.stub.anthropic import count_markers, sequence_problems
from ctxstack.proxy import parse_compaction_header
from ctxstack.proxy.anthropic import count_request
from ctxstack.tokens import DEFAULT_COUNTER
from tests.proxy_support import (
    SUMMARY_TEXT,
    ProxyProcess,
    check_anthropic_forwarded,
    is_summary_request,
    running_proxy,
)

BUDGET = 5_000
MODEL = "claude-stub-4"
KEY = "sk-ant-client-key"
FILLER = ("We compared the quarterly figures, the 3.2% growth, order #A-1042 and the shipping "
          "dates; the user wants the plan kept under budget and the numbers exact. ")
SYSTEM = [{"type": "text", "text": "You are a planning assistant for ACME-7.",
           "cache_control": {"type": "ephemeral"}}]
TOOLS = [{"name": "lookup", "description": "Look a record up.",
          "input_schema": {"type": "object", "properties": {"query": {"type": "string"}},
                           "required": ["query"]}}]


@pytest.fixture(scope="module")
def proxy(stub_server: StubServer, tmp_path_factory: pytest.TempPathFactory,
          ) -> Iterator[ProxyProcess]:
    workdir = tmp_path_factory.mktemp("proxy-anthropic")
    env = {"LLM_CONTEXT_SIZE": "6000", "LLM_MAX_OUTPUT_TOKENS": "1000",
           "FAST_LLM_TIMEOUT": "10"}
    with running_proxy(workdir, stub_server.base_url, env,
                       args=("--timeout", "2", "--anthropic-upstream", stub_server.url)) as p:
        yield p


@pytest.fixture
def upstream(stub: StubServer) -> StubServer:
    stub.rule = AnthropicRule()
    httpx.delete(f"{stub.url}/_stub/requests")
    return stub


@pytest.fixture
def client(proxy: ProxyProcess) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=proxy.url, api_key=KEY, max_retries=0) as c:
        yield c


class AnthropicRule:
    """Summaries for compaction calls; a ``lookup`` call when the last user text asks
    to look something up and no result came yet; else a text answer with a thinking
    block (signed), as a model with extended thinking answers."""

    def __call__(self, request: StubRequest) -> StubReply:
        if is_summary_request(request):
            return StubReply.text(SUMMARY_TEXT)
        messages = request.messages
        last_user = max(i for i, m in enumerate(messages) if m.role == "user")
        answered = any(m.role == "tool" for m in messages[last_user:])
        if "look it up" in messages[last_user].text and not answered:
            return StubReply.tool_call("lookup", {"query": messages[last_user].text[:30]},
                                       thinking=f"I need the record ({len(messages)}).")
        return StubReply.text(f"Answer to: {messages[last_user].text[:60]}",
                              thinking=f"Thinking about message {len(messages)}.")


def recorded(stub: StubServer) -> list[dict[str, Any]]:
    """What the stub received, as a separate process would read it (raw bodies)."""
    return list(httpx.get(f"{stub.url}/_stub/requests").json()["requests"])


def forwarded(stub: StubServer) -> list[StubRequest]:
    return [r for r in stub.requests
            if r.path == "/v1/messages" and not is_summary_request(r)]


def blocks_of(message: dict[str, Any]) -> list[Any]:
    content = message["content"]
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


# --------------------------------------------------------------------------- basics
def test_create_within_budget_reaches_upstream_byte_for_byte_with_its_headers(
        proxy: ProxyProcess, upstream: StubServer) -> None:
    body = (b'{"model": "' + MODEL.encode() + b'", "max_tokens": 64,  "messages": '
            b'[{"role": "user", "content": "hi \\u00e9"}], "context_management": {"edits": []}}')
    headers = {"x-api-key": KEY, "authorization": "Bearer oauth-token-1",
               "anthropic-version": "2023-06-01",
               "anthropic-beta": "context-management-2025-06-27,interleaved-thinking-2025-05-14",
               "content-type": "application/json"}
    response = httpx.post(f"{proxy.url}/v1/messages", content=body, headers=headers)
    assert response.status_code == 200, response.text
    assert response.json()["content"][-1]["text"].startswith("Answer to: hi")
    [sent] = recorded(upstream)
    assert sent["path"] == "/v1/messages"
    assert sent["body"].encode() == body
    for name in ("x-api-key", "authorization", "anthropic-version", "anthropic-beta"):
        assert sent["headers"][name] == headers[name]
    header = parse_compaction_header(response.headers["x-ctxstack-compaction"])
    assert header == {"method": "none", "original": "1", "kept": "1", "summarized": "0"}


def test_sdk_create_stream_and_thinking_signatures(client: anthropic.Anthropic,
                                                   upstream: StubServer) -> None:
    made = client.messages.create(model=MODEL, max_tokens=64, system=SYSTEM,
                                  messages=[{"role": "user", "content": "hello"}])
    assert [b.type for b in made.content] == ["thinking", "text"]
    thinking = made.content[0]
    assert thinking.type == "thinking"
    assert thinking.signature.startswith("sig-")
    events: list[str] = []
    with client.messages.stream(model=MODEL, max_tokens=64, system=SYSTEM, messages=[
            {"role": "user", "content": "hello"},
            {"role": "assistant", "content": [b.model_dump() for b in made.content]},
            {"role": "user", "content": "and again"}]) as stream:
        events.extend(event.type for event in stream)
        final = stream.get_final_message()
    assert events[0] == "message_start"
    assert events[-1] == "message_stop"
    assert "content_block_delta" in events
    assert "message_delta" in events
    assert final.content[-1].type == "text"
    assert final.content[-1].text.startswith("Answer to: and again")
    # The earlier thinking block went upstream with its signature, byte-identical.
    sent = recorded(upstream)[-1]["json"]
    assert sent["messages"][1]["content"] == [b.model_dump() for b in made.content]
    assert sent["system"] == SYSTEM


def test_count_tokens_within_budget_is_the_upstreams_count(client: anthropic.Anthropic,
                                                           upstream: StubServer) -> None:
    messages = [{"role": "user", "content": "How many tokens is this?"}]
    counted = client.messages.count_tokens(model=MODEL, messages=messages, tools=TOOLS)
    direct = httpx.post(f"{upstream.url}/v1/messages/count_tokens",
                        json={"model": MODEL, "messages": messages, "tools": TOOLS})
    assert counted.input_tokens == direct.json()["input_tokens"] > 0
    assert recorded(upstream)[0]["path"] == "/v1/messages/count_tokens"


def test_count_tokens_answers_for_the_request_as_forwarded(client: anthropic.Anthropic,
                                                           upstream: StubServer) -> None:
    messages = [*long_history(40), {"role": "user", "content": "What was the growth?"}]
    full = httpx.post(f"{upstream.url}/v1/messages/count_tokens",
                      json={"model": MODEL, "messages": messages}).json()["input_tokens"]
    httpx.delete(f"{upstream.url}/_stub/requests")
    counted = client.messages.count_tokens(model=MODEL, messages=messages)
    assert counted.input_tokens < full
    [sent] = [r for r in recorded(upstream) if r["path"] == "/v1/messages/count_tokens"]
    assert count_request(sent["json"], DEFAULT_COUNTER) <= BUDGET
    # The same request then goes out as counted (the checkpoint is reused).
    made = client.messages.with_raw_response.create(model=MODEL, max_tokens=64,
                                                    messages=messages)
    assert made.parse().usage.input_tokens == counted.input_tokens
    assert parse_compaction_header(made.headers["x-ctxstack-compaction"])["method"] == (
        "checkpoint")


def test_tools_round_trip(client: anthropic.Anthropic, upstream: StubServer) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Please look it up: A-1042"}]
    first = client.messages.create(model=MODEL, max_tokens=64, tools=TOOLS, messages=messages)
    assert first.stop_reason == "tool_use"
    call = next(b for b in first.content if b.type == "tool_use")
    messages += [{"role": "assistant", "content": [b.model_dump() for b in first.content]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                               "content": "shipped on May 3"}]}]
    second = client.messages.create(model=MODEL, max_tokens=64, tools=TOOLS, messages=messages)
    assert second.stop_reason == "end_turn"
    sent = recorded(upstream)
    assert sent[-1]["json"]["tools"] == TOOLS
    assert sent[-1]["json"]["messages"] == messages


# --------------------------------------------------------------------------- fitting
def long_history(turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for i in range(turns):
        messages.append({"role": "user", "content": f"Turn {i}: {FILLER * 3}"})
        messages.append({"role": "assistant", "content": f"Answer {i}: {FILLER * 3}"})
    return messages


def test_growing_80_turn_conversation_stays_within_budget_and_valid(
        client: anthropic.Anthropic, upstream: StubServer) -> None:
    messages: list[dict[str, Any]] = []
    sent_assistants: set[str] = set()
    methods: list[str] = []
    for turn in range(80):
        ask = f"Turn {turn}: {FILLER}" + (" Please look it up." if turn % 3 == 0 else "")
        messages.append({"role": "user", "content": ask})
        while True:
            if turn % 4 == 1:  # some turns streamed: the same fitting, relayed as SSE
                with client.messages.stream(model=MODEL, max_tokens=256, system=SYSTEM,
                                            tools=TOOLS, messages=messages) as stream:
                    header = stream.response.headers["x-ctxstack-compaction"]
                    answer = stream.get_final_message()
            else:
                raw = client.messages.with_raw_response.create(
                    model=MODEL, max_tokens=256, system=SYSTEM, tools=TOOLS, messages=messages)
                header = raw.headers["x-ctxstack-compaction"]
                answer = raw.parse()
            methods.append(parse_compaction_header(header)["method"])
            content = [b.model_dump() for b in answer.content]
            messages.append({"role": "assistant", "content": content})
            sent_assistants.add(json.dumps(messages[-1]))
            if answer.stop_reason != "tool_use":
                break
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": b.id, "content": f"Record: {FILLER}"}
                for b in answer.content if b.type == "tool_use"]})
    requests = forwarded(upstream)
    assert len(requests) == len(methods) > 80
    assert {"llm", "checkpoint"} <= set(methods)
    summaries = [r for r in upstream.requests if is_summary_request(r)]
    assert 0 < len(summaries) < len(requests) / 4
    for summary in summaries:  # asked of the Anthropic upstream, with the client's key
        assert summary.path == "/v1/messages"
        assert summary.body["system"][:len(SYSTEM)] == SYSTEM  # the client's prompt first
        assert KEY in (summary.headers.get("x-api-key", "")
                       + summary.headers.get("authorization", ""))
    for request in requests:
        body = dict(request.body)
        # Thinking turns kept byte-identical, whole (or not sent at all).
        check_anthropic_forwarded(body, budget=BUDGET, system=SYSTEM, tools=TOOLS,
                                  client_turns=sent_assistants)
        assert count_markers(body["messages"]) + 1 <= 4
    last = requests[-1].body["messages"]
    assert SUMMARY_TEXT in json.dumps(last[0])


def test_unknown_block_types_and_fields_pass_through(client: anthropic.Anthropic,
                                                     upstream: StubServer) -> None:
    opaque = {"role": "assistant", "content": [
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
         "input": {"query": "acme"}},
        {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1",
         "content": [{"type": "web_search_result", "url": "https://x", "title": "x",
                      "encrypted_content": "abc"}]},
        {"type": "compaction", "content": "earlier context", "future_field": [1, 2]},
        {"type": "text", "text": "Found it."}]}
    small = [{"role": "user", "content": "search acme"}, opaque,
             {"role": "user", "content": "thanks"}]
    body = {"model": MODEL, "max_tokens": 64, "messages": small,
            "context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]}}
    response = httpx.post(f"{upstream_proxy(client)}/v1/messages", json=body,
                          headers={"x-api-key": KEY})
    assert response.status_code == 200, response.text
    assert recorded(upstream)[-1]["json"] == body
    # Over budget: the opaque turn is byte-identical or gone, never edited.
    big = [*long_history(30), *small]
    response = httpx.post(f"{upstream_proxy(client)}/v1/messages", timeout=30,
                          json={**body, "messages": big}, headers={"x-api-key": KEY})
    assert response.status_code == 200, response.text
    sent = recorded(upstream)[-1]["json"]
    assert sent["context_management"] == body["context_management"]
    kept = [m for m in sent["messages"] if "srvtoolu_1" in json.dumps(m)]
    assert kept in ([], [opaque])


def upstream_proxy(client: anthropic.Anthropic) -> str:
    return str(client.base_url).rstrip("/")


def test_cache_tokens_are_counted_once_per_answer(client: anthropic.Anthropic,
                                                  upstream: StubServer, proxy: ProxyProcess,
                                                  ) -> None:
    def totals() -> dict[str, int]:
        stats = httpx.get(f"{proxy.url}/ctxstack/stats").json()
        usage = stats["by_model"].get("anthropic", {}).get(MODEL, {})
        return {k: usage.get(k, 0) for k in ("cache_read_tokens", "cache_write_tokens")}

    before = totals()
    upstream.push(StubReply.text("cached", cached_tokens=70, cache_write_tokens=30),
                  StubReply.text("cached stream", cached_tokens=70, cache_write_tokens=30))
    messages = [{"role": "user", "content": "hi"}]
    client.messages.create(model=MODEL, max_tokens=64, messages=messages)
    with client.messages.stream(model=MODEL, max_tokens=64, messages=messages) as stream:
        assert stream.get_final_message().usage.cache_read_input_tokens == 70
    after = totals()
    assert after["cache_read_tokens"] - before["cache_read_tokens"] == 140
    assert after["cache_write_tokens"] - before["cache_write_tokens"] == 60


# --------------------------------------------------------------------------- errors
@pytest.mark.parametrize(("body", "field"), [
    (b"{", "JSON"),
    (b'{"model": "m", "messages": [{"role": "user", "content": "x"}]}', "max_tokens"),
    (b'{"model": "m", "max_tokens": 5, "messages": [{"role": "system", "content": "x"}]}',
     "messages.0.role"),
    (b'{"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": '
     b'"tool_result", "tool_use_id": "t1", "content": "x"}]}]}', "tool_use_id"),
])
def test_bad_input_is_an_anthropic_400_before_any_upstream_call(
        proxy: ProxyProcess, upstream: StubServer, body: bytes, field: str) -> None:
    response = httpx.post(f"{proxy.url}/v1/messages", content=body,
                          headers={"x-api-key": KEY})
    assert response.status_code == 400
    data = response.json()
    assert data["type"] == "error"
    assert data["error"]["type"] == "invalid_request_error"
    assert field in data["error"]["message"]
    assert recorded(upstream) == []


@pytest.mark.parametrize("fault", [
    StubReply.rate_limited(retry_after=7),
    StubReply.server_error(500),
    StubReply.server_error(529),
])
def test_upstream_errors_pass_through_exactly(client: anthropic.Anthropic, proxy: ProxyProcess,
                                              upstream: StubServer, fault: StubReply) -> None:
    upstream.fault = fault
    body = {"model": MODEL, "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}
    direct = httpx.post(f"{upstream.url}/v1/messages", json=body)
    via = httpx.post(f"{proxy.url}/v1/messages", json=body)
    assert via.status_code == direct.status_code == fault.status
    assert via.content == direct.content
    assert via.headers.get("retry-after") == direct.headers.get("retry-after")
    with pytest.raises(anthropic.APIStatusError) as info:
        client.messages.create(**body)
    assert info.value.status_code == fault.status


def test_upstream_answers_that_are_not_json_get_anthropics_error_shape(
        client: anthropic.Anthropic, upstream: StubServer) -> None:
    """A gateway's HTML error page keeps its status and becomes Anthropic's error shape
    carrying the page's text without markup; a 200 whose body is not JSON is a 502 that
    says so. The SDK reads both as status errors; neither names the upstream's address."""
    page = ("<html><head><title>503</title></head><body><h1>Service Unavailable</h1>"
            "<p>The model pool is overloaded.</p></body></html>")
    upstream.push(StubReply.raw(page, status=503, content_type="text/html"),
                  StubReply.raw('{"id": "msg_cut", "content": [', status=200))
    body = {"model": MODEL, "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}
    with pytest.raises(anthropic.APIStatusError) as gateway:
        client.messages.create(**body)  # type: ignore[call-overload]
    assert gateway.value.status_code == 503
    error = gateway.value.response.json()
    assert error["type"] == "error"
    assert "Service Unavailable" in error["error"]["message"]
    assert "The model pool is overloaded." in error["error"]["message"]
    assert "<" not in error["error"]["message"]
    with pytest.raises(anthropic.APIStatusError) as cut:
        client.messages.create(**body)  # type: ignore[call-overload]
    assert cut.value.status_code == 502
    assert "not valid JSON" in cut.value.response.json()["error"]["message"]
    for info in (gateway, cut):
        assert str(upstream.port) not in info.value.response.text


def test_upstream_hang_is_a_504_in_anthropics_shape(proxy: ProxyProcess,
                                                    upstream: StubServer) -> None:
    upstream.delay = 30.0
    response = httpx.post(f"{proxy.url}/v1/messages", timeout=60, json={
        "model": MODEL, "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]})
    assert response.status_code == 504
    assert response.json()["type"] == "error"
    assert response.json()["error"]["type"] == "timeout_error"
    assert str(upstream.port) not in response.text


def test_stream_hang_mid_answer_ends_with_an_error_event(client: anthropic.Anthropic,
                                                         upstream: StubServer) -> None:
    upstream.push(StubReply.text("a long answer " * 10, pause_after=4, pause=30.0))
    with pytest.raises(anthropic.APIError), client.messages.stream(
            model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "x"}]) as stream:
        for _ in stream:
            pass


def test_overflow_triggers_one_compaction_and_one_retry(client: anthropic.Anthropic,
                                                        upstream: StubServer) -> None:
    upstream.push(StubReply.overflow(context_size=3000, requested=4200))
    messages = [*long_history(14), {"role": "user", "content": "the question"}]
    made = client.messages.with_raw_response.create(model=MODEL, max_tokens=64,
                                                    messages=messages)
    assert made.parse().content[-1].text.startswith("Answer to: the question")
    sent = forwarded(upstream)
    assert len(sent) == 2
    assert sent[0].body["messages"] == messages  # within budget: as is first
    first, retry = (count_request(dict(r.body), DEFAULT_COUNTER) for r in sent)
    assert retry <= first * 0.5 + 10
    assert sequence_problems(dict(sent[1].body)) == []
    assert parse_compaction_header(made.headers["x-ctxstack-compaction"])["method"] in (
        "llm", "truncate")


def test_a_second_overflow_passes_through(client: anthropic.Anthropic,
                                          upstream: StubServer) -> None:
    rule = AnthropicRule()
    upstream.rule = lambda r: rule(r) if is_summary_request(r) else StubReply.overflow()
    with pytest.raises(anthropic.BadRequestError, match="prompt is too long"):
        client.messages.create(model=MODEL, max_tokens=64, messages=[
            *long_history(4), {"role": "user", "content": "q"}])
    assert len(forwarded(upstream)) == 2


def test_checkpoints_are_never_shared_across_keys(proxy: ProxyProcess,
                                                  upstream: StubServer) -> None:
    messages = [*long_history(40), {"role": "user", "content": "What was the growth?"}]

    def send(key: str, history: list[dict[str, Any]]) -> str:
        response = httpx.post(f"{proxy.url}/v1/messages", timeout=30, headers={"x-api-key": key},
                              json={"model": MODEL, "max_tokens": 64, "messages": history})
        assert response.status_code == 200, response.text
        header = parse_compaction_header(response.headers["x-ctxstack-compaction"])
        # Counted in the client's messages: the summary stands for some, the rest is kept.
        assert int(header["original"]) == len(history)
        assert 0 < int(header["summarized"]) < int(header["original"])
        assert int(header["summarized"]) + int(header["kept"]) <= int(header["original"])
        return header["method"]

    assert send("sk-ant-alice", messages) == "llm"
    longer = [*messages, {"role": "assistant", "content": "3.2%"},
              {"role": "user", "content": "And the order?"}]
    assert send("sk-ant-bob", longer) == "llm"  # Bob's key: Alice's summary is not his
    assert send("sk-ant-alice", longer) == "checkpoint"
