"""``ctxstack proxy`` as a real process in front of the stub upstream, driven by real clients.

Budget: LLM_CONTEXT_SIZE 6,000 - LLM_MAX_OUTPUT_TOKENS 1,000 = 5,000 input tokens for every
model; upstream timeout 2 s. The stub records what reached it, so every test checks both
what the client got and what the upstream received.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from ctxstack.llm.stub import StubReply, StubServer
from ctxstack.proxy import parse_compaction_header
from ctxstack.tokens import DEFAULT_COUNTER
from tests.proxy_support import (
    SUMMARY_TEXT,
    ConversationRule,
    ProxyProcess,
    chat_requests,
    client_tools,
    is_summary_request,
    running_proxy,
)
from tests.service_support import free_port

BUDGET = 5_000
UPSTREAM_KEY = "upstream-secret-key"
MODEL = "stub-model"
FILLER = ("We compared the quarterly figures, the 3.2% growth, order #A-1042 and the shipping "
          "dates; the user wants the plan kept under budget and the numbers exact. ")


@pytest.fixture(scope="module")
def proxy(stub_server: StubServer, tmp_path_factory: pytest.TempPathFactory,
          ) -> Iterator[ProxyProcess]:
    workdir = tmp_path_factory.mktemp("proxy")
    env = {"LLM_API_KEY": UPSTREAM_KEY, "LLM_CONTEXT_SIZE": "6000",
           "LLM_MAX_OUTPUT_TOKENS": "1000", "FAST_LLM_TIMEOUT": "10"}
    with running_proxy(workdir, stub_server.base_url, env, args=("--timeout", "2")) as p:
        yield p


@pytest.fixture
def upstream(stub: StubServer) -> StubServer:
    """The stub, echoing by default, with its HTTP request record cleared."""
    stub.rule = lambda r: f"You said: {r.last_user_text}"
    httpx.delete(f"{stub.url}/_stub/requests")
    return stub


def recorded(stub: StubServer) -> list[dict[str, Any]]:
    """What the stub received, read over HTTP as a separate process would be read."""
    return list(httpx.get(f"{stub.url}/_stub/requests").json()["requests"])


def long_history(turns: int, *, system: str = "You are a planning assistant.") -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for i in range(turns):
        messages.append({"role": "user", "content": f"Turn {i}: {FILLER * 3}"})
        messages.append({"role": "assistant", "content": f"Answer {i}: {FILLER * 3}"})
    return messages


def heuristic_tokens(messages: list[Any]) -> int:
    return DEFAULT_COUNTER.count_messages(messages)


# --------------------------------------------------------------------------- passthrough
def test_request_within_budget_reaches_upstream_byte_for_byte(proxy: ProxyProcess,
                                                              upstream: StubServer) -> None:
    body = (b'{"messages": [{"content": "hi there", "role": "user", "x_extra": [1, 2]}],'
            b'  "temperature":0.5, "model":"stub-model", "zz_custom": {"b": 1, "a": 2}}')
    response = httpx.post(f"{proxy.base_url}/chat/completions", content=body,
                          headers={"Authorization": "Bearer client-key",
                                   "content-type": "application/json"})
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "You said: hi there"
    header = parse_compaction_header(response.headers["x-ctxstack-compaction"])
    assert header == {"method": "none", "original": "1", "kept": "1", "summarized": "0"}
    assert int(response.headers["x-ctxstack-input-tokens-estimated"]) > 0
    [seen] = recorded(upstream)
    assert seen["body"] == body.decode()
    # The client's key is replaced by the upstream key from the environment.
    assert seen["headers"]["authorization"] == f"Bearer {UPSTREAM_KEY}"
    assert UPSTREAM_KEY not in response.text
    assert UPSTREAM_KEY not in str(response.headers)


def test_other_v1_routes_pass_through_unchanged(proxy: ProxyProcess, upstream: StubServer) -> None:
    direct = httpx.get(f"{upstream.base_url}/models").json()
    via = httpx.get(f"{proxy.base_url}/models?limit=5")
    assert via.status_code == 200
    assert via.json() == direct
    missing = httpx.post(f"{proxy.base_url}/embeddings", json={"input": "x", "model": MODEL})
    assert missing.status_code == 404  # the upstream's own answer, passed through
    seen = recorded(upstream)
    assert [(s["method"], s["path"], s["query"]) for s in seen] == [
        ("GET", "/v1/models", ""), ("GET", "/v1/models", "limit=5"),
        ("POST", "/v1/embeddings", "")]
    assert json.loads(seen[2]["body"]) == {"input": "x", "model": MODEL}


# --------------------------------------------------------------------------- real clients
def test_openai_sdk_sync_and_streaming(proxy: ProxyProcess, upstream: StubServer) -> None:
    client = openai.OpenAI(base_url=proxy.base_url, api_key="client-key", max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "sync hello"}])
    assert raw.headers["x-ctxstack-compaction"].startswith("method=none")
    assert raw.parse().choices[0].message.content == "You said: sync hello"

    stream = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "stream hello"}], stream=True,
        stream_options={"include_usage": True})
    text, usage = "", None
    for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
        if chunk.usage is not None:
            usage = chunk.usage
    assert text == "You said: stream hello"
    assert usage is not None
    assert usage.prompt_tokens > 0
    client.close()


async def test_openai_sdk_async_with_tools(proxy: ProxyProcess, upstream: StubServer) -> None:
    upstream.push(StubReply.tool_call("get_weather", {"city": "Paris"}, call_id="call_1"))
    tools = [{"type": "function", "function": {
        "name": "get_weather", "description": "Weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
    async with openai.AsyncOpenAI(base_url=proxy.base_url, api_key="k", max_retries=0) as client:
        messages: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]
        first = await client.chat.completions.create(model=MODEL, messages=messages,
                                                     tools=tools)
        call = first.choices[0].message.tool_calls[0]
        assert call.function.name == "get_weather"
        assert json.loads(call.function.arguments) == {"city": "Paris"}
        messages += [first.choices[0].message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": "18°C, sunny"}]
        second = await client.chat.completions.create(model=MODEL, messages=messages,
                                                      tools=tools)
    assert second.choices[0].message.content == "You said: Weather in Paris?"
    last = upstream.requests[-1]
    assert client_tools(last.body["tools"]) == tools
    assert [m.role for m in last.messages] == ["user", "assistant", "tool"]


def test_langchain_chat_openai(proxy: ProxyProcess, upstream: StubServer) -> None:
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(base_url=proxy.base_url, api_key="client-key", model=MODEL, max_retries=0)
    assert llm.invoke("hello from langchain").content == "You said: hello from langchain"
    streamed = "".join(str(c.content) for c in llm.stream("streamed langchain"))
    assert streamed == "You said: streamed langchain"


# --------------------------------------------------------------------------- compaction
def test_over_budget_is_summarised_once_then_the_checkpoint_is_reused(
        proxy: ProxyProcess, upstream: StubServer) -> None:
    upstream.rule = ConversationRule()
    messages = long_history(40, system="You are a planning assistant for ACME-7.")
    messages.append({"role": "user", "content": "What was the growth figure again?"})
    client = openai.OpenAI(base_url=proxy.base_url, api_key="k", max_retries=0)
    first = client.chat.completions.with_raw_response.create(model=MODEL, messages=messages)
    header = parse_compaction_header(first.headers["x-ctxstack-compaction"])
    assert header["method"] == "llm"
    assert int(header["summarized"]) > 0
    assert int(header["original"]) == len(messages) > int(header["kept"])
    assert "calls=1" in first.headers["x-ctxstack-summarizer-usage"]
    summaries = [r for r in upstream.requests if is_summary_request(r)]
    assert len(summaries) == 1
    [sent] = chat_requests(upstream.requests)
    assert heuristic_tokens(list(sent.messages)) <= BUDGET
    assert sent.body["messages"][0] == messages[0]
    assert sent.body["messages"][-1] == messages[-1]
    assert SUMMARY_TEXT in sent.messages[1].text

    # The conversation goes on: the same prefix plus one turn reuses the checkpoint.
    messages += [{"role": "assistant", "content": "It was 3.2%."},
                 {"role": "user", "content": "And the order number?"}]
    second = client.chat.completions.with_raw_response.create(model=MODEL, messages=messages)
    header2 = parse_compaction_header(second.headers["x-ctxstack-compaction"])
    assert header2["method"] == "checkpoint"
    assert header2["summarized"] == header["summarized"]
    assert "calls=0" in second.headers["x-ctxstack-summarizer-usage"]
    assert len([r for r in upstream.requests if is_summary_request(r)]) == 1
    sent2 = chat_requests(upstream.requests)[-1]
    assert sent2.body["messages"][-1] == messages[-1]
    assert heuristic_tokens(list(sent2.messages)) <= BUDGET
    client.close()


def test_huge_last_user_message_is_never_cut(proxy: ProxyProcess, upstream: StubServer) -> None:
    question = "Please check this log: " + "line ok\n" * 8_000 + "END-OF-LOG"
    messages = [{"role": "system", "content": "Be brief."}, *long_history(5)[1:],
                {"role": "user", "content": question}]
    response = httpx.post(f"{proxy.base_url}/chat/completions", timeout=30,
                          json={"model": MODEL, "messages": messages})
    assert response.status_code == 200
    sent = upstream.last_request.body["messages"]
    assert sent[0] == messages[0]
    assert sent[-1] == messages[-1]


# --------------------------------------------------------------------------- bad requests
@pytest.mark.parametrize(("body", "fragment"), [
    (b"this is not json", "not valid JSON"),
    (b"[1, 2]", "JSON object"),
    (b'{"model": "stub-model"}', "'messages' is required"),
    (b'{"model": "stub-model", "messages": []}', "'messages' is required"),
    (b'{"messages": [{"role": "user", "content": "x"}]}', "'model' is required"),
    (b'{"model": "m", "messages": [{"role": "wizard", "content": "x"}]}', "unknown role"),
    (b'{"model": "m", "messages": [{"role": "user", "content": "x"}, '
     b'{"role": "tool", "tool_call_id": "call_9", "content": "42"}]}', "no preceding"),
    (b'{"model": "m", "messages": [{"role": "user", "content": 42}]}', "content"),
])
def test_bad_requests_are_400_before_any_upstream_call(
        proxy: ProxyProcess, upstream: StubServer, body: bytes, fragment: str) -> None:
    response = httpx.post(f"{proxy.base_url}/chat/completions", content=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert fragment in error["message"]
    assert set(error) == {"message", "type", "param", "code"}
    assert recorded(upstream) == []


# --------------------------------------------------------------------------- upstream faults
@pytest.mark.parametrize("fault", [
    StubReply.rate_limited(retry_after=7),
    StubReply.server_error(500),
    StubReply.unauthorized(),
])
def test_upstream_errors_pass_through_with_status_and_body(
        proxy: ProxyProcess, upstream: StubServer, fault: StubReply) -> None:
    upstream.fault = fault
    direct = httpx.post(f"{upstream.base_url}/chat/completions",
                        json={"model": MODEL, "messages": [{"role": "user", "content": "x"}]})
    via = httpx.post(f"{proxy.base_url}/chat/completions",
                     json={"model": MODEL, "messages": [{"role": "user", "content": "x"}]})
    assert via.status_code == direct.status_code == fault.status
    assert via.json() == direct.json()
    if "retry-after" in direct.headers:
        assert via.headers["retry-after"] == direct.headers["retry-after"]
    client = openai.OpenAI(base_url=proxy.base_url, api_key="k", max_retries=0)
    with pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}])
    assert info.value.status_code == fault.status
    client.close()


def test_upstream_hang_ends_in_504_after_the_timeout(proxy: ProxyProcess,
                                                     upstream: StubServer) -> None:
    upstream.delay = 30.0
    response = httpx.post(f"{proxy.base_url}/chat/completions", timeout=60,
                          json={"model": MODEL, "messages": [{"role": "user", "content": "x"}]})
    assert response.status_code == 504
    error = response.json()["error"]
    assert error["code"] == "upstream_timeout"
    assert "2s" in error["message"]
    assert str(upstream.port) not in response.text


def test_streaming_hang_mid_answer_ends_with_an_error_event(proxy: ProxyProcess,
                                                            upstream: StubServer) -> None:
    upstream.push(StubReply.text("a long answer " * 10, pause_after=2, pause=30.0))
    client = openai.OpenAI(base_url=proxy.base_url, api_key="k", max_retries=0)
    stream = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "x"}], stream=True)
    with pytest.raises(openai.APIError, match="did not answer within"):
        for _ in stream:
            pass
    client.close()


def test_upstream_overflow_triggers_one_smaller_compaction_and_one_retry(
        proxy: ProxyProcess, upstream: StubServer) -> None:
    upstream.rule = ConversationRule(answer="fits now")
    upstream.push(StubReply.overflow(context_size=3000, requested=4200))
    messages = [*long_history(14), {"role": "user", "content": "the question"}]
    response = httpx.post(f"{proxy.base_url}/chat/completions", timeout=30,
                          json={"model": MODEL, "messages": messages})
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "fits now"
    chats = chat_requests(upstream.requests)
    assert len(chats) == 2
    assert chats[0].body["messages"] == messages  # within budget: sent as is first
    first, retry = (heuristic_tokens(list(c.messages)) for c in chats)
    assert retry <= first * 0.5 + 10  # compacted to half of what overflowed
    assert chats[1].body["messages"][-1] == messages[-1]
    assert parse_compaction_header(response.headers["x-ctxstack-compaction"])["method"] in (
        "llm", "truncate")


def test_a_second_overflow_is_passed_through(proxy: ProxyProcess, upstream: StubServer) -> None:
    summaries = ConversationRule()
    upstream.rule = lambda r: summaries(r) if is_summary_request(r) else StubReply.overflow()
    messages = [*long_history(4), {"role": "user", "content": "q"}]
    response = httpx.post(f"{proxy.base_url}/chat/completions", timeout=30,
                          json={"model": MODEL, "messages": messages})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "context_length_exceeded"
    assert len(chat_requests(upstream.requests)) == 2


def test_unreachable_upstream_is_502_without_its_address(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    with running_proxy(tmp_path, f"http://127.0.0.1:{port}/v1",
                       {"LLM_API_KEY": UPSTREAM_KEY}) as dead:
        for response in (
            httpx.post(f"{dead.base_url}/chat/completions", timeout=30,
                       json={"model": MODEL, "messages": [{"role": "user", "content": "x"}]}),
            httpx.get(f"{dead.base_url}/models", timeout=30),
        ):
            assert response.status_code == 502
            error = response.json()["error"]
            assert error["code"] == "upstream_unreachable"
            assert str(port) not in response.text
            assert UPSTREAM_KEY not in response.text
        client = openai.OpenAI(base_url=dead.base_url, api_key="k", max_retries=0)
        with pytest.raises(openai.APIStatusError) as info:
            client.chat.completions.create(model=MODEL,
                                           messages=[{"role": "user", "content": "x"}])
        assert info.value.status_code == 502
        client.close()


# --------------------------------------------------------------------------- stats
def test_stats_count_requests_and_compactions(proxy: ProxyProcess, upstream: StubServer) -> None:
    before = httpx.get(f"{proxy.url}/ctxstack/stats").json()
    httpx.post(f"{proxy.base_url}/chat/completions",
               json={"model": MODEL, "messages": [{"role": "user", "content": "x"}]})
    httpx.post(f"{proxy.base_url}/chat/completions", content=b"{")
    after = httpx.get(f"{proxy.url}/ctxstack/stats").json()
    assert after["requests"] == before["requests"] + 2
    assert after["bad_requests"] == before["bad_requests"] + 1
    assert after["compactions"]["none"] == before["compactions"]["none"] + 1
    assert set(after) >= {"tokens_saved", "summarizer", "upstream_errors", "overflow_retries"}


def test_two_workers_summarise_a_conversation_once_whichever_answers(
        stub_server: StubServer, upstream: StubServer, tmp_path: Path) -> None:
    upstream.rule = ConversationRule()
    env = {"LLM_API_KEY": UPSTREAM_KEY, "LLM_CONTEXT_SIZE": "6000",
           "LLM_MAX_OUTPUT_TOKENS": "1000", "CTXSTACK_PROXY_LOG_LEVEL": "info",
           "CTXSTACK_PROXY_STATS_FLUSH": "0.2"}
    with running_proxy(tmp_path, stub_server.base_url, env, args=("--workers", "2")) as proxy:
        messages = [*long_history(40), {"role": "user", "content": "first question"}]
        methods = []
        with httpx.Client(timeout=60) as client:  # one connection per request: any worker
            for i in range(4):
                response = client.post(f"{proxy.base_url}/chat/completions",
                                       headers={"connection": "close"},
                                       json={"model": MODEL, "messages": messages})
                assert response.status_code == 200, response.text
                methods.append(parse_compaction_header(
                    response.headers["x-ctxstack-compaction"])["method"])
                messages += [{"role": "assistant", "content": f"answer {i}"},
                             {"role": "user", "content": f"follow-up {i}"}]
            # Whichever worker answers, the stats count both workers' requests (each adds
            # its counts to the database every 0.2 s here: wait for that, then compare).
            deadline = time.monotonic() + 30
            stats = client.get(f"{proxy.url}/ctxstack/stats").json()
            # a worker's request count and its compaction may reach the database in
            # different flushes (another worker's counts are up to one flush late)
            while (stats["requests"] < 4 or stats["compactions"]["llm"]
                   + stats["compactions"]["checkpoint"] < 4) and time.monotonic() < deadline:
                time.sleep(0.2)
                stats = client.get(f"{proxy.url}/ctxstack/stats",
                                   headers={"connection": "close"}).json()
    assert stats["scope"] == "all"
    assert stats["requests"] == 4
    assert stats["compactions"]["llm"] == 1
    assert stats["compactions"]["checkpoint"] == 3
    assert methods == ["llm", "checkpoint", "checkpoint", "checkpoint"]
    assert len([r for r in upstream.requests if is_summary_request(r)]) == 1
