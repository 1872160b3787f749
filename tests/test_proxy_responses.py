"""The OpenAI Responses wire through ``ctxstack proxy``, with the official ``openai`` SDK.

A real proxy process in front of the recording stub (which speaks ``/v1/responses``:
JSON, SSE and the WebSocket mode): ``client.responses.create``, ``.stream`` and
``.connect`` (the SDK's WebSocket mode) work unchanged; bad input is a 400 naming the
field before any upstream call (an ``error`` frame over the socket); upstream errors,
``Retry-After`` and usage pass through; a hung upstream is a 504; an overflow error is
compacted and retried once; unknown items pass through; a request the proxy cannot fit
goes out exactly as sent.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from websockets.sync.client import connect as ws_connect

from ctxstack.llm.stub import StubReply, StubServer
from ctxstack.proxy import parse_compaction_header
from tests.proxy_support import ProxyProcess, running_proxy

MODEL = "stub-model"
FILLER = ("We went through the quarterly plan: 3.2% growth, order #A-1042 shipping on "
          "2026-03-14, and a remaining budget of 41,500 EUR for the three teams. ")


@pytest.fixture(scope="module")
def proxy(stub_server: StubServer, tmp_path_factory: pytest.TempPathFactory,
          ) -> Iterator[ProxyProcess]:
    env = {"LLM_API_KEY": "k", "LLM_CONTEXT_SIZE": "5000", "LLM_MAX_OUTPUT_TOKENS": "1000",
           "CTXSTACK_PROXY_TIMEOUT": "3", "CTXSTACK_PROXY_MAX_BODY_BYTES": "200000"}
    with running_proxy(tmp_path_factory.mktemp("responses"), stub_server.base_url, env) as p:
        yield p


@pytest.fixture
def client(proxy: ProxyProcess) -> Iterator[openai.OpenAI]:
    c = openai.OpenAI(base_url=proxy.base_url, api_key="client-key", max_retries=0)
    yield c
    c.close()


def _recorded(stub: StubServer) -> list[dict[str, Any]]:
    """What reached the stub's /v1/responses, raw bodies included (oldest first)."""
    got = httpx.get(stub.base_url.removesuffix("/v1") + "/_stub/requests").json()["requests"]
    return [r for r in got if r["path"] == "/v1/responses"]


def _stats(proxy: ProxyProcess) -> dict[str, Any]:
    stats: dict[str, Any] = httpx.get(f"{proxy.url}/ctxstack/stats").json()
    return stats


def _items(*items: dict[str, Any]) -> Any:
    """Input items as the SDK takes them (some are types its stubs do not know yet)."""
    return list(items)


def _clear(stub: StubServer) -> None:
    httpx.delete(stub.base_url.removesuffix("/v1") + "/_stub/requests")


def test_create_within_budget_goes_out_byte_for_byte(client: openai.OpenAI,
                                                     stub: StubServer) -> None:
    _clear(stub)
    stub.push(StubReply.text("Hello there", reasoning="think first", cached_tokens=3))
    raw = client.responses.with_raw_response.create(
        model=MODEL, instructions="Be brief.", input=_items(
            {"role": "user", "content": "hi"},
            {"type": "additional_tools", "tools": [{"type": "function", "name": "x"}]}),
        extra_body={"some_future_field": {"b": 1, "a": 2}})
    assert parse_compaction_header(raw.headers["x-ctxstack-compaction"])["method"] == "none"
    response = raw.parse()
    assert response.output_text == "Hello there"
    assert [o.type for o in response.output] == ["reasoning", "message"]
    assert response.usage is not None
    assert response.usage.input_tokens_details.cached_tokens == 3
    sent = _recorded(stub)[-1]
    # Unknown items and fields, instructions: what the client sent, as it sent it.
    assert sent["json"]["input"][1]["type"] == "additional_tools"
    assert sent["json"]["some_future_field"] == {"b": 1, "a": 2}
    # Byte for byte: a request within budget is the client's own bytes upstream.
    raw_body = (b'{"zeta": [1, 2], "input": [{"role": "user", "content": "hi \\u00e9"}, '
                b'{"type": "item_reference", "id": "msg_1"}], "model": "stub-model"}')
    stub.push("ok")
    got = httpx.post(f"{client.base_url}responses", content=raw_body,
                     headers={"content-type": "application/json"})
    assert got.status_code == 200, got.text
    assert _recorded(stub)[-1]["body"].encode() == raw_body


def test_stream_relays_the_real_event_sequence(client: openai.OpenAI, stub: StubServer) -> None:
    stub.push(StubReply.tool_call("lookup", {"query": "order"}, call_id="call_1"))
    with client.responses.stream(model=MODEL, input="look it up") as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds[:3] == ["response.created", "response.in_progress",
                         "response.output_item.added"]
    assert "response.function_call_arguments.delta" in kinds
    assert kinds[-1] == "response.completed"
    call = final.output[0]
    assert call.type == "function_call"
    assert call.call_id == "call_1"
    assert json.loads(call.arguments) == {"query": "order"}


def test_websocket_mode_through_the_sdk_with_a_store_false_chain(
        client: openai.OpenAI, stub: StubServer) -> None:
    _clear(stub)
    stub.push(StubReply.tool_call("lookup", {"query": "#A-1042"}, call_id="call_ws",
                                  reasoning="need the order"),
              StubReply.text("It ships on 2026-03-14."))
    with client.responses.connect() as conn:
        conn.response.create(model=MODEL, store=False, input=[
            {"role": "user", "content": "When does #A-1042 ship? Look it up."}])
        events = []
        for event in conn:
            events.append(event.type)
            if event.type in ("response.completed", "error"):
                break
        assert events[0] == "response.created"
        assert events[-1] == "response.completed"
        first = event.response  # type: ignore[union-attr]
        # Continue as Codex does: only the new item, with previous_response_id.
        conn.response.create(model=MODEL, store=False, previous_response_id=first.id, input=[
            {"type": "function_call_output", "call_id": "call_ws", "output": "2026-03-14"}])
        for event in conn:
            if event.type in ("response.completed", "error"):
                break
        assert event.type == "response.completed"
        assert event.response.output_text == "It ships on 2026-03-14."
    second = stub.requests[-1]
    assert second.transport == "http"  # the upstream needs no WebSocket
    body = second.body
    assert "previous_response_id" not in body  # expanded by the proxy: store=false upstream
    assert [i.get("type", "message") for i in body["input"]] == [
        "message", "reasoning", "function_call", "function_call_output"]
    reasoning = first.output[0].model_dump(exclude_none=True)
    assert body["input"][1]["encrypted_content"] == reasoning["encrypted_content"]


def test_websocket_errors_are_error_frames_and_the_socket_stays_open(
        proxy: ProxyProcess, stub: StubServer) -> None:
    url = proxy.base_url.replace("http://", "ws://") + "/responses"
    stub.push(StubReply.rate_limited(retry_after=7), StubReply.text("fine"))
    with ws_connect(url, additional_headers={"Authorization": "Bearer k"}) as ws:
        ws.send(json.dumps({"type": "response.cancel"}))
        bad = json.loads(ws.recv(timeout=10))
        assert bad["type"] == "error"
        assert bad["status"] == 400
        assert bad["error"]["param"] == "type"
        calls = stub.state.calls
        ws.send(json.dumps({"type": "response.create", "model": MODEL, "input": [
            {"type": "function_call_output", "call_id": "nope", "output": "x"}]}))
        invalid = json.loads(ws.recv(timeout=10))
        assert invalid["status"] == 400
        assert invalid["error"]["param"] == "input[0].call_id"
        assert stub.state.calls == calls  # refused before any upstream call
        ws.send(json.dumps({"type": "response.create", "model": MODEL, "input": "hi"}))
        limited = json.loads(ws.recv(timeout=10))
        assert limited["status"] == 429
        assert limited["headers"]["retry-after"] == "7"
        assert limited["error"]["code"] == "rate_limit_exceeded"
        ws.send(json.dumps({"type": "response.create", "model": MODEL, "input": "again"}))
        kinds: list[str] = []
        while not kinds or kinds[-1] != "response.completed":
            kinds.append(json.loads(ws.recv(timeout=10))["type"])
    assert kinds[0] == "response.created"


def test_bad_input_is_a_400_naming_the_field_before_any_upstream_call(
        client: openai.OpenAI, stub: StubServer, proxy: ProxyProcess) -> None:
    calls = stub.state.calls
    refused = _stats(proxy)["bad_requests"]
    cases: list[tuple[dict[str, Any], str]] = [
        ({"input": [{"type": "function_call", "call_id": "c1", "name": "f",
                     "arguments": "{}"}]}, "input[0]"),
        ({"input": [{"type": "function_call_output", "call_id": "c9", "output": "x"}]},
         "input[0].call_id"),
        ({"input": [{"role": "robot", "content": "hi"}]}, "input[0].role"),
        ({"input": 5}, "input"),
        ({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]},
         "input[0].call_id"),
    ]
    for extra, param in cases:
        with pytest.raises(openai.BadRequestError) as caught:
            client.responses.create(model=MODEL, **extra)
        assert caught.value.status_code == 400
        assert caught.value.param == param, extra
    with pytest.raises(openai.BadRequestError) as missing:
        client.post("/responses", body={"input": "hi"}, cast_to=httpx.Response)
    assert missing.value.param == "model"
    assert stub.state.calls == calls
    assert _stats(proxy)["bad_requests"] - refused == len(cases) + 1  # counted, by kind


def test_upstream_errors_pass_through_exactly(client: openai.OpenAI, stub: StubServer) -> None:
    stub.push(StubReply.rate_limited(retry_after=2), StubReply.server_error())
    with pytest.raises(openai.RateLimitError) as limited:
        client.responses.create(model=MODEL, input="hi")
    assert limited.value.status_code == 429
    assert limited.value.response.headers["retry-after"] == "2"
    assert limited.value.code == "rate_limit_exceeded"
    with pytest.raises(openai.InternalServerError) as failed:
        client.responses.create(model=MODEL, input="hi")
    assert failed.value.status_code == 500
    assert failed.value.body["message"].startswith("The server had an error")  # type: ignore[index]


def test_a_hung_upstream_is_a_504(client: openai.OpenAI, stub: StubServer) -> None:
    stub.push(StubReply.text("too late", delay=8))
    with pytest.raises(openai.APIStatusError) as hung:
        client.responses.create(model=MODEL, input="hi")
    assert hung.value.status_code == 504


def test_an_overflow_error_is_compacted_and_retried_once(
        client: openai.OpenAI, stub: StubServer, proxy: ProxyProcess) -> None:
    _clear(stub)
    history: list[dict[str, Any]] = []
    for i in range(6):
        history += [{"role": "user", "content": f"Turn {i}: {FILLER * 3}"},
                    {"role": "assistant", "content": f"Noted {i}. {FILLER}"}]
    history.append({"role": "user", "content": "What is the remaining budget?"})
    stub.rule = lambda r: StubReply.text("Summary: budget 41,500 EUR.") \
        if r.path.endswith("chat/completions") else StubReply.text("41,500 EUR.")
    stub.push(StubReply.overflow())
    before = _stats(proxy)["overflow_retries"]
    answer = client.responses.create(model=MODEL, input=history)  # type: ignore[arg-type]
    assert answer.output_text == "41,500 EUR."
    sent = _recorded(stub)
    assert len(sent) == 2
    assert len(sent[1]["body"]) < len(sent[0]["body"])  # compacted before the retry
    assert sent[1]["json"]["input"][-1] == history[-1]
    assert _stats(proxy)["overflow_retries"] == before + 1


def test_a_request_the_proxy_cannot_fit_goes_out_as_sent(
        client: openai.OpenAI, stub: StubServer, proxy: ProxyProcess) -> None:
    _clear(stub)
    stub.push("ok")
    before = _stats(proxy)["fit_failures"]
    body = {"model": MODEL, "input": [
        {"role": "user", "content": "q"},
        {"type": "function_call", "call_id": "c1", "name": "", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "x"}]}
    raw = json.dumps(body).encode()
    answer = httpx.post(f"{proxy.base_url}/responses", content=raw,
                        headers={"content-type": "application/json"})
    assert answer.status_code == 200
    assert _recorded(stub)[-1]["body"].encode() == raw
    assert _stats(proxy)["fit_failures"] == before + 1


def test_stats_count_usage_and_cache_reads_per_wire_and_model(
        client: openai.OpenAI, stub: StubServer, proxy: ProxyProcess) -> None:
    stats = _stats(proxy)
    before = stats["by_model"].get("responses", {}).get(MODEL, {})
    stub.push(StubReply.text("a", cached_tokens=11), StubReply.text("b", cached_tokens=5))
    first = client.responses.create(model=MODEL, input="one")
    with client.responses.connect() as conn:
        conn.response.create(model=MODEL, input="two")
        for event in conn:
            if event.type == "response.completed":
                second = event.response
                break
    stats = _stats(proxy)
    after = stats["by_model"]["responses"][MODEL]
    assert after["cache_read_tokens"] - before.get("cache_read_tokens", 0) == 16
    assert after["requests"] - before.get("requests", 0) == 2
    # counted once each, exactly what the client was told
    assert first.usage is not None
    assert second.usage is not None
    assert after["input_tokens"] - before.get("input_tokens", 0) == (
        first.usage.input_tokens + second.usage.input_tokens)
    assert after["output_tokens"] - before.get("output_tokens", 0) == (
        first.usage.output_tokens + second.usage.output_tokens)


def test_a_websocket_prewarm_is_answered_by_the_proxy_and_continued(
        proxy: ProxyProcess, stub: StubServer) -> None:
    url = proxy.base_url.replace("http://", "ws://") + "/responses"
    stub.push(StubReply.text("warm answer"))
    calls = stub.state.calls
    with ws_connect(url, additional_headers={
            "Authorization": "Bearer k", "OpenAI-Beta": "responses_websockets=2026-02-06"}) as ws:
        ws.send(json.dumps({"type": "response.create", "model": MODEL, "store": False,
                            "generate": False, "instructions": "Be brief.",
                            "input": [{"role": "user", "content": "context first"}]}))
        created = json.loads(ws.recv(timeout=10))
        done = json.loads(ws.recv(timeout=10))
        assert created["type"] == "response.created"
        assert done["type"] == "response.completed"
        assert done["response"]["output"] == []
        assert stub.state.calls == calls  # nothing to generate: no upstream call
        ws.send(json.dumps({"type": "response.create", "model": MODEL, "store": False,
                            "previous_response_id": done["response"]["id"],
                            "instructions": "Be brief.",
                            "input": [{"role": "user", "content": "now answer"}]}))
        kinds: list[str] = []
        while not kinds or kinds[-1] != "response.completed":
            kinds.append(json.loads(ws.recv(timeout=10))["type"])
    sent = stub.requests[-1]
    assert "previous_response_id" not in sent.body
    assert [i["content"] for i in sent.body["input"]] == ["context first", "now answer"]
    assert "openai-beta" not in sent.headers  # the WebSocket flag is not sent over HTTP


def test_upstream_answers_the_websocket_cannot_stream_are_framed_and_the_socket_stays_open(
        proxy: ProxyProcess, stub: StubServer) -> None:
    """What a gateway or a non-conforming server sends instead of an event stream: an
    error page that is not JSON (an error frame with its status and the page's start),
    a 200 whose body is not JSON (a 502 frame saying so), and a whole response object as
    JSON (relayed as ``response.completed``). The socket serves the next frame each time."""
    url = proxy.base_url.replace("http://", "ws://") + "/responses"
    page = "<html><body><h1>502 Bad Gateway</h1>" + "x" * 1000 + "</body></html>"
    whole = {"id": "resp_whole", "object": "response", "status": "completed", "model": MODEL,
             "output": [{"type": "message", "id": "msg_1", "role": "assistant",
                         "status": "completed",
                         "content": [{"type": "output_text", "text": "whole", "annotations": []}]}],
             "usage": {"input_tokens": 5, "output_tokens": 1, "total_tokens": 6}}
    stub.push(StubReply.raw(page, status=502, content_type="text/html"),
              StubReply.raw('{"id": "resp_cut", "output": [', status=200),
              StubReply.raw(json.dumps(whole), status=200),
              StubReply.text("fine"))
    with ws_connect(url, additional_headers={"Authorization": "Bearer k"}) as ws:
        frames = []
        for ask in ("one", "two", "three"):
            ws.send(json.dumps({"type": "response.create", "model": MODEL, "input": ask}))
            frames.append(json.loads(ws.recv(timeout=10)))
        ws.send(json.dumps({"type": "response.create", "model": MODEL, "input": "four"}))
        kinds: list[str] = []
        while not kinds or kinds[-1] != "response.completed":
            kinds.append(json.loads(ws.recv(timeout=10))["type"])
    gateway, cut, relayed = frames
    assert gateway["type"] == "error"
    assert gateway["status"] == 502
    assert gateway["error"]["message"].startswith("<html><body><h1>502 Bad Gateway")
    assert len(gateway["error"]["message"]) <= 300
    assert cut["type"] == "error"
    assert cut["status"] == 502
    assert cut["error"]["code"] == "upstream_bad_response"
    assert relayed == {"type": "response.completed", "response": whole}
    assert kinds[0] == "response.created"
    for frame in (gateway, cut):
        assert stub.url.split("//", 1)[1] not in json.dumps(frame)


def test_a_hung_upstream_over_the_websocket_is_a_504_error_frame(
        proxy: ProxyProcess, stub: StubServer) -> None:
    url = proxy.base_url.replace("http://", "ws://") + "/responses"
    stub.push(StubReply.text("too late", delay=8), StubReply.text("in time"))
    with ws_connect(url) as ws:
        ws.send(json.dumps({"type": "response.create", "model": MODEL, "input": "hi"}))
        hung = json.loads(ws.recv(timeout=15))
        assert hung["type"] == "error"
        assert hung["status"] == 504
        ws.send(json.dumps({"type": "response.create", "model": MODEL, "input": "again"}))
        kinds: list[str] = []
        while not kinds or kinds[-1] != "response.completed":
            kinds.append(json.loads(ws.recv(timeout=15))["type"])


def test_a_conversation_of_the_upstream_is_forwarded_as_sent(
        client: openai.OpenAI, stub: StubServer, proxy: ProxyProcess) -> None:
    _clear(stub)
    stub.push("ok")
    raw = json.dumps({"model": MODEL, "conversation": "conv_1", "input": [
        {"type": "function_call_output", "call_id": "c_in_conv", "output": "x"}]}).encode()
    answer = httpx.post(f"{proxy.base_url}/responses", content=raw,
                        headers={"content-type": "application/json"})
    assert answer.status_code == 200, answer.text  # its call is in the conversation
    assert _recorded(stub)[-1]["body"].encode() == raw


def _codex_input(turns: int) -> list[dict[str, Any]]:
    """A conversation shaped like Codex's requests: a developer message, the environment,
    then turns of reasoning, an apply_patch custom call, a shell function call, their
    outputs and an answer."""
    items: list[dict[str, Any]] = [
        {"type": "message", "role": "developer", "content": [
            {"type": "input_text", "text": "<permissions instructions>sandbox: workspace-write;"
                                           " approvals: on-request</permissions instructions>"}]},
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "<environment_context><cwd>/repo</cwd>"
                                           "</environment_context>"}]}]
    for t in range(turns):
        items += [
            {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": f"Task {t}: fix the failing test {t}."}]},
            {"type": "reasoning", "id": f"rs_{t}", "summary": [
                {"type": "summary_text", "text": f"**Planning {t}**"}],
             "content": None, "encrypted_content": f"gAAAAB{t:04d}" + "Zm9v" * 60},
            {"type": "function_call", "id": f"fc_{t}", "name": "shell",
             "arguments": json.dumps({"command": ["bash", "-lc", f"pytest -k t{t}"]}),
             "call_id": f"call_sh_{t}"},
            {"type": "function_call_output", "call_id": f"call_sh_{t}",
             "output": json.dumps({"output": FILLER * 4, "metadata": {"exit_code": 1}})},
            {"type": "custom_tool_call", "id": f"ctc_{t}", "status": "completed",
             "call_id": f"call_ap_{t}", "name": "apply_patch",
             "input": f"*** Begin Patch\n*** Update File: t{t}.py\n@@\n-bad\n+good\n"
                      "*** End Patch\n"},
            {"type": "custom_tool_call_output", "call_id": f"call_ap_{t}",
             "output": "Success. Updated the following files:\nM t.py\n"},
            {"type": "message", "role": "assistant", "id": f"msg_{t}", "content": [
                {"type": "output_text", "text": f"Fixed test {t}.", "annotations": []}]}]
    items.append({"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "Now run the whole suite."}]})
    return items


def test_a_codex_shaped_request_over_budget_is_fitted_validly(
        proxy: ProxyProcess, stub: StubServer) -> None:
    from ctxstack.proxy.responses_request import validate_pairs
    from ctxstack.proxy.responses_view import count_tokens, schema_tokens, side
    from ctxstack.tokens import DEFAULT_COUNTER

    _clear(stub)
    stub.rule = lambda r: StubReply.text("Summary: tests 0-20 fixed.") \
        if r.path.endswith("chat/completions") else StubReply.text("Running it.")
    tools = [{"type": "function", "name": "shell", "description": "Run a command",
              "strict": False, "parameters": {"type": "object", "properties": {
                  "command": {"type": "array", "items": {"type": "string"}}},
                  "required": ["command"]}},
             {"type": "custom", "name": "apply_patch", "description": "Apply a patch",
              "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}}]
    items = _codex_input(24)
    body = {"model": MODEL, "instructions": "You are Codex. " * 40, "input": items,
            "tools": tools, "tool_choice": "auto", "parallel_tool_calls": False,
            "reasoning": {"effort": "medium", "summary": "auto"}, "store": False,
            "stream": True, "include": ["reasoning.encrypted_content"],
            "prompt_cache_key": "0199-session"}
    with httpx.stream("POST", f"{proxy.base_url}/responses", json=body, timeout=60) as got:
        assert got.status_code == 200
        method = parse_compaction_header(got.headers["x-ctxstack-compaction"])["method"]
        text = got.read().decode()
    assert method != "none"
    assert "response.completed" in text
    sent = _recorded(stub)[-1]["json"]
    assert json.dumps(sent["instructions"]) == json.dumps(body["instructions"])
    # tools: the client's own, byte-identical, plus at most the proxy's recall tool.
    from ctxstack.proxy.responses_recall import RECALL_TOOL_SPEC

    assert json.dumps(sent["tools"][:len(tools)]) == json.dumps(tools)
    assert sent["tools"][len(tools):] in ([], [RECALL_TOOL_SPEC])
    assert "ctxstack_recall" not in text  # the client never sees it
    assert sent["prompt_cache_key"] == "0199-session"
    forwarded = sent["input"]
    assert json.dumps(forwarded[0]) == json.dumps(items[0])  # the developer prompt
    assert json.dumps(forwarded[-1]) == json.dumps(items[-1])  # the current request
    validate_pairs([], forwarded)
    assert count_tokens(forwarded, sent["instructions"], schema_tokens(sent, DEFAULT_COUNTER),
                        DEFAULT_COUNTER) <= 4_000
    own = {json.dumps(i) for i in items}
    for i, item in enumerate(forwarded):
        if side(item) == "assistant":  # the model's turns: the client's own, whole
            assert json.dumps(item) in own, i


def test_websocket_handshakes_from_another_origin_are_refused_and_frames_bounded(
        proxy: ProxyProcess, stub: StubServer) -> None:
    from websockets.exceptions import InvalidStatus

    url = proxy.base_url.replace("http://", "ws://") + "/responses"
    calls = stub.state.calls
    # No tokens on loopback: a page of another site must not drive the proxy.
    with pytest.raises(InvalidStatus) as refused:
        ws_connect(url, origin="https://evil.example")  # type: ignore[arg-type]
    assert refused.value.response.status_code == 403
    with ws_connect(url, origin="http://localhost:3000") as ws:  # type: ignore[arg-type]
        ws.send(json.dumps({"type": "response.create", "model": MODEL,
                            "input": "x" * 300_000}))
        too_large = json.loads(ws.recv(timeout=10))
        assert too_large["status"] == 413
    assert stub.state.calls == calls
