"""``ctxstack proxy`` under real-shaped traffic: the requests real SDKs and agents send,
the bodies broken clients send, and the answers broken upstreams give.

A real proxy process in front of the stub (real HTTP on loopback). Budget: 6,000 − 1,000
= 5,000 input tokens; upstream timeout 3 s. Each test checks what the client got and,
through the stub's record, what reached the upstream.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from ctxstack.llm.stub import StubReply, StubRequest, StubServer
from ctxstack.proxy import parse_compaction_header
from tests.proxy_support import (
    ProxyProcess,
    client_tools,
    is_summary_body,
    running_proxy,
    tool_sequence_problems,
)

MODEL = "stub-model"
FILL = ("The quarterly numbers for order #A-1042 grew 3.2% and we shipped on 2026-03-04; "
        "the user wants every figure kept exact. ")


@pytest.fixture(scope="module")
def proxy(stub_server: StubServer, tmp_path_factory: pytest.TempPathFactory,
          ) -> Iterator[ProxyProcess]:
    env = {"LLM_API_KEY": "upstream-key", "LLM_CONTEXT_SIZE": "6000",
           "LLM_MAX_OUTPUT_TOKENS": "1000", "FAST_LLM_TIMEOUT": "10"}
    with running_proxy(tmp_path_factory.mktemp("realtraffic"), stub_server.base_url, env,
                       args=("--timeout", "3")) as p:
        yield p


def forwarded(stub: StubServer) -> list[dict[str, Any]]:
    """The chat-completion bodies that reached the upstream (summariser calls left out)."""
    records = httpx.get(f"{stub.url}/_stub/requests").json()["requests"]
    bodies = [json.loads(r["body"]) for r in records if r["path"].endswith("chat/completions")]
    return [b for b in bodies if not _is_summary_call(b)]


def _is_summary_call(body: dict[str, Any]) -> bool:
    return is_summary_body(body)


def post(proxy: ProxyProcess, body: dict[str, Any] | bytes) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(f"{proxy.base_url}/chat/completions", content=content,
                      headers={"content-type": "application/json"}, timeout=60)


def agent_history(turns: int) -> list[dict[str, Any]]:
    """What an SDK agent resends: parallel tool calls with ``content: null``, ``refusal``
    and ``annotations`` echoed back, multi-part user turns with a name, extra fields."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a planner."}]
    for i in range(turns):
        messages.append({"role": "user", "name": "alice", "x_client_seq": i, "content": [
            {"type": "text", "text": f"Q{i}: {FILL}"},
            {"type": "image_url", "image_url": {"url": "https://example.com/a.png",
                                                "detail": "low"}}]})
        messages.append({"role": "assistant", "content": None, "refusal": None,
                         "tool_calls": [
                             {"id": f"call_{i}_a", "type": "function", "function": {
                                 "name": "lookup", "arguments": json.dumps({"q": f"x{i}"})}},
                             {"id": f"call_{i}_b", "type": "function", "function": {
                                 "name": "search", "arguments": '{"q": "日本語"}'}}]})
        messages.append({"role": "tool", "tool_call_id": f"call_{i}_a",
                         "content": "結果 " + FILL * 6})
        messages.append({"role": "tool", "tool_call_id": f"call_{i}_b",
                         "content": [{"type": "text", "text": "r " + FILL * 3}]})
        messages.append({"role": "assistant", "content": f"A{i}: {FILL}", "refusal": None,
                         "annotations": []})
    messages.append({"role": "user", "content": "So what was the growth?"})
    return messages


TOOLS = [{"type": "function", "function": {
    "name": "lookup", "description": "Look a record up.", "strict": True,
    "parameters": {"type": "object", "additionalProperties": False, "required": ["q", "opts"],
                   "properties": {"q": {"type": "string"}, "opts": {
                       "type": "object", "additionalProperties": False, "required": ["k"],
                       "properties": {"k": {"type": "array", "items": {"type": "integer"}}}}}}}},
    {"type": "function", "function": {"name": "search", "parameters": {
        "type": "object", "properties": {"q": {"type": "string"}}}}}]


# --------------------------------------------------------------------------- request shapes
def test_sdk_agent_request_over_budget_keeps_every_field_and_stays_valid(
        proxy: ProxyProcess, upstream: StubServer) -> None:
    client = openai.OpenAI(base_url=proxy.base_url, api_key="client-key", max_retries=0)
    history = agent_history(30)
    stream = client.chat.completions.create(
        model=MODEL, messages=history, tools=TOOLS,  # type: ignore[arg-type]
        tool_choice="auto", parallel_tool_calls=True, seed=7, max_completion_tokens=200,
        response_format={"type": "json_schema", "json_schema": {
            "name": "answer", "strict": True, "schema": {
                "type": "object", "properties": {"x": {"type": "string"}},
                "required": ["x"], "additionalProperties": False}}},
        stream=True, stream_options={"include_usage": True},
        extra_body={"x_vendor_option": {"keep": [1, 2]}})
    chunks = list(stream)
    assert chunks[-1].usage is not None
    (body,) = forwarded(upstream)
    sent = body["messages"]
    assert len(sent) < len(history)
    assert tool_sequence_problems(sent) == []
    for field in ("tools", "tool_choice", "parallel_tool_calls", "seed",
                  "max_completion_tokens", "response_format", "stream", "stream_options",
                  "x_vendor_option"):
        assert field in body, field
    assert client_tools(body["tools"]) == TOOLS
    assert body["x_vendor_option"] == {"keep": [1, 2]}
    # Every message kept from the client is the client's own dict, extra keys and all.
    originals = [json.dumps(m, sort_keys=True) for m in history]
    kept = [m for m in sent if m.get("role") != "system"]
    assert kept
    for m in kept:
        assert json.dumps(m, sort_keys=True) in originals, m


def test_developer_prompt_stays_first_and_unchanged_when_compacted(
        proxy: ProxyProcess, upstream: StubServer) -> None:
    history = agent_history(30)
    history[0] = {"role": "developer", "content": "Answer in JSON only."}
    post(proxy, {"model": MODEL, "messages": history})
    (body,) = forwarded(upstream)
    assert body["messages"][0] == {"role": "developer", "content": "Answer in JSON only."}
    assert len(body["messages"]) < len(history)
    assert tool_sequence_problems(body["messages"]) == []


def test_response_format_schema_counts_against_the_budget(proxy: ProxyProcess,
                                                          upstream: StubServer) -> None:
    """A json_schema response format is rendered into the prompt like tool definitions:
    a request whose messages alone fit but whose schema pushes it over is compacted."""
    history = agent_history(2)
    schema = {"type": "object", "additionalProperties": False,
              "required": [f"field_{i}" for i in range(90)],
              "properties": {f"field_{i}": {"type": "string", "description": FILL[:60]}
                             for i in range(90)}}
    body = {"model": MODEL, "messages": history, "response_format": {
        "type": "json_schema", "json_schema": {"name": "report", "strict": True,
                                               "schema": schema}}}
    alone = post(proxy, {"model": MODEL, "messages": history})
    assert parse_compaction_header(alone.headers["x-ctxstack-compaction"])["method"] == "none"
    response = post(proxy, body)
    header = parse_compaction_header(response.headers["x-ctxstack-compaction"])
    assert header["method"] != "none"
    assert int(response.headers["x-ctxstack-input-tokens-estimated"]) <= 5_000
    sent = forwarded(upstream)[-1]
    assert sent["response_format"] == body["response_format"]
    assert tool_sequence_problems(sent["messages"]) == []


def summary_calls(stub: StubServer) -> int:
    records = httpx.get(f"{stub.url}/_stub/requests").json()["requests"]
    return sum(1 for r in records if r["path"].endswith("chat/completions")
               and _is_summary_call(json.loads(r["body"])))


def test_agent_tool_loop_under_one_user_turn_is_summarised_once(
        proxy: ProxyProcess, upstream: StubServer) -> None:
    """An agent's loop resends [system, task, call, result, call, result, …] with the task
    as the only user message. The first overflow is summarised and checkpointed; the
    next iterations reuse it, the task always forwarded verbatim."""
    task = {"role": "user", "content": "Audit every order and report the totals."}
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are an auditor."},
                                      task]

    def step(i: int) -> list[dict[str, Any]]:
        return [{"role": "assistant", "content": f"step {i}", "tool_calls": [
                    {"id": f"c{i}a", "type": "function",
                     "function": {"name": "orders", "arguments": json.dumps({"page": i})}},
                    {"id": f"c{i}b", "type": "function",
                     "function": {"name": "totals", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": f"c{i}a", "content": FILL * 4},
                {"role": "tool", "tool_call_id": f"c{i}b", "content": FILL * 4}]

    for i in range(50):
        messages += step(i)
    methods = []
    for i in range(50, 54):
        messages += step(i)
        response = post(proxy, {"model": MODEL, "messages": messages})
        assert response.status_code == 200, response.text
        methods.append(parse_compaction_header(
            response.headers["x-ctxstack-compaction"])["method"])
        sent = forwarded(upstream)[-1]["messages"]
        assert sent[0] == messages[0]
        assert task in sent
        assert sent[-3:] == messages[-3:]
        assert tool_sequence_problems(sent) == []
        assert int(response.headers["x-ctxstack-input-tokens-estimated"]) <= 5_000
    assert methods[0] == "llm"
    assert methods[1:] == ["checkpoint"] * 3
    assert summary_calls(upstream) == 1


# --------------------------------------------------------------------------- broken bodies
def test_deeply_nested_body_is_a_400_not_a_500(proxy: ProxyProcess,
                                               upstream: StubServer) -> None:
    depth = 100_000
    body = (b'{"model":"m","messages":[{"role":"user","content":"x"}],"x":'
            + b"[" * depth + b"]" * depth + b"}")
    response = post(proxy, body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert "nested too deeply" in error["message"]
    assert forwarded(upstream) == []


def test_lone_surrogate_survives_compaction_escaped(proxy: ProxyProcess,
                                                    upstream: StubServer) -> None:
    """``"\\ud800"`` is valid JSON without a UTF-8 form: a compacted request carrying one
    is forwarded (escaped, as the client sent it), not answered with a 500."""
    messages = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "go \ud800 here"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "x" * 100_000},
        {"role": "user", "content": "next \udfff one"},
    ]
    seen: list[dict[str, Any]] = []

    def answer(request: StubRequest) -> str:
        seen.append(dict(request.body))  # the stub's HTTP record cannot show a surrogate
        return "Noted."

    upstream.rule = answer
    raw = json.dumps({"model": MODEL, "messages": messages}).encode("ascii")
    response = post(proxy, raw)
    assert response.status_code == 200, response.text
    assert parse_compaction_header(response.headers["x-ctxstack-compaction"])["method"] != "none"
    (body,) = [b for b in seen if not _is_summary_call(b)]
    assert body["messages"][-1]["content"] == "next \udfff one"
    assert tool_sequence_problems(body["messages"]) == []


def test_the_proxys_own_404_and_405_are_openai_shaped(proxy: ProxyProcess) -> None:
    missing = httpx.get(f"{proxy.url}/v2/models")
    assert missing.status_code == 404
    assert set(missing.json()["error"]) == {"message", "type", "param", "code"}
    assert "no such route" in missing.json()["error"]["message"]
    wrong = httpx.put(f"{proxy.url}/ctxstack/health")
    assert wrong.status_code == 405
    assert wrong.json()["error"]["type"] == "invalid_request_error"


# --------------------------------------------------------------------------- content parts
def test_audio_and_file_parts_are_never_forwarded_as_cut_text(
        proxy: ProxyProcess, upstream: StubServer) -> None:
    """Audio and file parts are counted by size, never cut: their message goes out as the
    client sent it or not at all; the upstream never receives half a base64 blob dressed
    up as a text part (more in test_proxy_parts.py)."""
    blob = base64.b64encode(bytes(range(256)) * 300).decode()
    messages = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": [
            {"type": "text", "text": "Here is the contract and my recording."},
            {"type": "file", "file": {"filename": "c.pdf",
                                      "file_data": f"data:application/pdf;base64,{blob}"}},
            {"type": "input_audio", "input_audio": {"data": blob, "format": "wav"}}]},
        {"role": "assistant", "content": "I read both."},
        {"role": "user", "content": "Summarise the contract."},
    ]
    response = post(proxy, {"model": MODEL, "messages": messages})
    assert response.status_code == 200, response.text
    (body,) = forwarded(upstream)
    for m in body["messages"]:
        content = m.get("content")
        if not isinstance(content, list):
            assert blob not in json.dumps(m)
            continue
        texts = " ".join(p.get("text", "") for p in content)
        assert '"file_data"' not in texts
        assert '"input_audio"' not in texts
        assert m == messages[1]  # whole, as sent
    assert body["messages"][-1] == messages[-1]


@pytest.mark.parametrize("part", [
    {"type": "text", "text": "Cached context.", "cache_control": {"type": "ephemeral"}},
    {"type": "image_url", "image_url": {"url": "https://example.com/a.png", "detail": "auto",
                                        "uuid": "img-1"}},
    {"type": "image_url", "image_url": {"url": "https://example.com/a.png",
                                        "detail": "original"}},
])
def test_parts_with_provider_fields_are_forwarded_not_refused(
        proxy: ProxyProcess, upstream: StubServer, part: dict[str, Any]) -> None:
    """Prompt-caching ``cache_control`` (LiteLLM, OpenRouter), extra image fields and a
    newer ``detail`` are the upstream's business: within budget the bytes go as sent.
    (Whether the upstream takes them is its own answer: the stub is strict about parts.)"""
    raw = json.dumps({"model": MODEL, "messages": [
        {"role": "user", "content": [part, {"type": "text", "text": "What is it?"}]}]}).encode()
    post(proxy, raw)
    records = httpx.get(f"{upstream.url}/_stub/requests").json()["requests"]
    assert [r["body"] for r in records] == [raw.decode()]


def test_provider_fields_on_parts_survive_compaction(proxy: ProxyProcess,
                                                     upstream: StubServer) -> None:
    history = agent_history(30)
    cached = {"type": "text", "text": "Cached context.", "cache_control": {"type": "ephemeral"}}
    history[-1] = {"role": "user", "content": [cached, {"type": "text", "text": "And?"}]}
    response = post(proxy, {"model": MODEL, "messages": history})
    assert parse_compaction_header(response.headers["x-ctxstack-compaction"])["method"] != "none"
    (body,) = forwarded(upstream)
    assert len(body["messages"]) < len(history)
    assert body["messages"][-1] == history[-1]


def test_custom_tool_calls_are_accepted_and_forwarded_as_sent(
        proxy: ProxyProcess, upstream: StubServer) -> None:
    """GPT-5 custom tools: ``{"type": "custom", "custom": {"name", "input"}}`` calls."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "sys"}]
    for i in range(40):
        messages += [
            {"role": "user", "content": f"Q{i}: {FILL * 3}"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": f"ct{i}", "type": "custom",
                 "custom": {"name": "run_sql", "input": f"SELECT * FROM t{i} WHERE x > 3"}}]},
            {"role": "tool", "tool_call_id": f"ct{i}", "content": FILL * 4},
        ]
    messages.append({"role": "user", "content": "Which table grew?"})
    response = post(proxy, {"model": MODEL, "messages": messages})
    assert parse_compaction_header(response.headers["x-ctxstack-compaction"])["method"] != "none"
    (body,) = forwarded(upstream)
    sent = body["messages"]
    assert len(sent) < len(messages)
    assert tool_sequence_problems(sent) == []
    calls = [m for m in sent if m.get("tool_calls")]
    assert calls
    for m in calls:
        assert m in messages  # the client's own custom call, not a function-call view


def test_cut_assistant_keeps_its_raw_tool_arguments(proxy: ProxyProcess,
                                                    upstream: StubServer) -> None:
    """Arguments that are not a JSON object are counted as ``{"_raw": ...}``; when the
    guard cuts that assistant's long text, the call still goes out as the client wrote it."""
    call = {"id": "c1", "type": "function",
            "function": {"name": "shell", "arguments": "ls -la /tmp"}}
    messages = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "list it"},
        {"role": "assistant", "content": "Thinking aloud. " * 6_000, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "a b c"},
        {"role": "user", "content": "and now?"},
    ]
    post(proxy, {"model": MODEL, "messages": messages})
    (body,) = forwarded(upstream)
    (assistant,) = [m for m in body["messages"] if m.get("tool_calls")]
    assert len(assistant["content"]) < len(messages[2]["content"])
    assert assistant["tool_calls"] == [call]


# --------------------------------------------------------------------------- broken answers
@pytest.mark.parametrize("stream", [False, True])
def test_upstream_200_that_is_not_json_becomes_an_openai_shaped_502(
        proxy: ProxyProcess, upstream: StubServer, stream: bool) -> None:
    upstream.rule = lambda r: StubReply.raw("<html><h1>502 Bad Gateway</h1></html>",
                                            content_type="text/html")
    client = openai.OpenAI(base_url=proxy.base_url, api_key="k", max_retries=0)

    def ask() -> None:
        answer = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], stream=stream)
        if stream:
            list(answer)  # type: ignore[call-overload]

    with pytest.raises(openai.APIStatusError) as caught:
        ask()
    assert caught.value.status_code == 502
    error = caught.value.body
    assert isinstance(error, dict)
    assert error["code"] == "upstream_bad_response"
    assert "127.0.0.1" not in str(error)


def test_upstream_answer_cut_mid_body_becomes_a_502(proxy: ProxyProcess,
                                                   upstream: StubServer) -> None:
    upstream.rule = lambda r: StubReply.raw('{"id": "chatcmpl-1", "choices": [{"message": '
                                            '{"content": "cut')
    response = post(proxy, {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]})
    assert response.status_code == 502
    assert response.json()["error"]["type"] == "upstream_error"


def test_upstream_rate_limit_keeps_retry_after_for_the_sdk(proxy: ProxyProcess,
                                                          upstream: StubServer) -> None:
    upstream.rule = lambda r: StubReply.rate_limited(retry_after=7)
    client = openai.OpenAI(base_url=proxy.base_url, api_key="k", max_retries=0)
    with pytest.raises(openai.RateLimitError) as caught:
        client.chat.completions.create(model=MODEL,
                                       messages=[{"role": "user", "content": "hi"}])
    assert caught.value.response.headers["retry-after"] == "7"
    assert caught.value.code == "rate_limit_exceeded"


@pytest.mark.parametrize(("status", "kind"), [(502, "upstream_error"), (503, "upstream_error"),
                                             (429, "invalid_request_error")])
def test_upstream_error_page_that_is_not_json_is_wrapped_in_openai_shape(
        proxy: ProxyProcess, upstream: StubServer, status: int, kind: str) -> None:
    """A gateway's HTML error page keeps its status and Retry-After, and the SDK gets a
    readable message instead of markup."""
    upstream.rule = lambda r: StubReply.raw(
        "<html><body><h1>Bad Gateway</h1><p>nginx upstream down</p></body></html>",
        status=status, content_type="text/html", headers={"retry-after": "3"})
    client = openai.OpenAI(base_url=proxy.base_url, api_key="k", max_retries=0)
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model=MODEL,
                                       messages=[{"role": "user", "content": "hi"}])
    assert caught.value.status_code == status
    assert caught.value.response.headers["retry-after"] == "3"
    assert caught.value.response.headers["content-type"] == "application/json"
    body = caught.value.body
    assert isinstance(body, dict)
    assert body["type"] == kind
    assert "Bad Gateway nginx upstream down" in body["message"]
    assert "<" not in body["message"]


def test_upstream_json_error_body_goes_through_byte_for_byte(
        proxy: ProxyProcess, upstream: StubServer) -> None:
    """vLLM-style error JSON (not OpenAI's shape) is the upstream's to word: unchanged."""
    raw = '{"object": "error", "message": "model not loaded", "code": 40401}'
    upstream.rule = lambda r: StubReply.raw(raw, status=404)
    response = post(proxy, {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]})
    assert response.status_code == 404
    assert response.text == raw


# --------------------------------------------------------------------------- legacy roles
def test_legacy_function_role_history_is_compacted_not_refused(
        proxy: ProxyProcess, upstream: StubServer) -> None:
    """``function_call`` + ``role: "function"`` (OpenAI's pre-tools format, still
    accepted): compacted with each result kept or dropped with its call."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "sys"}]
    for i in range(40):
        messages.append({"role": "user", "content": f"Q{i}: {FILL * 3}"})
        messages.append({"role": "assistant", "content": None,
                         "function_call": {"name": "lookup", "arguments": '{"q": "a"}'}})
        messages.append({"role": "function", "name": "lookup", "content": FILL * 3})
    messages.append({"role": "user", "content": "And now?"})
    response = post(proxy, {"model": MODEL, "messages": messages})
    assert parse_compaction_header(response.headers["x-ctxstack-compaction"])["method"] != "none"
    (body,) = forwarded(upstream)
    kept = body["messages"]
    assert len(kept) < len(messages)
    assert kept[-1] == messages[-1]
    assert any(m["role"] == "function" for m in kept)
    for i, m in enumerate(kept):
        assert "tool_calls" not in m  # the view's ids never leave the proxy
        if m["role"] == "function":
            assert kept[i - 1].get("function_call"), "a function result lost its call"
            assert m["name"] == "lookup"  # masked or not, still the function's answer
