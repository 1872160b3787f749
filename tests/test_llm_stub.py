"""The stub server itself, checked with a bare HTTP client (not ctxstack's)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from ctxstack.errors import ConfigError
from ctxstack.llm.stub import StubReply, StubRequest, StubServer, stub_usage
from ctxstack.messages import ChatMessage

SRC = Path(__file__).resolve().parents[1] / "src"
BODY = {"model": "stub-model", "messages": [{"role": "user", "content": "ping"}]}


def sse_payloads(text: str) -> list[str]:
    return [line[len("data: "):] for line in text.splitlines() if line.startswith("data: ")]


def post(stub: StubServer, body: dict[str, Any] | None = None, **kw: Any) -> httpx.Response:
    return httpx.post(f"{stub.base_url}/chat/completions", json=body or BODY, timeout=10, **kw)


def read_stream(stub: StubServer, into: list[bytes]) -> None:
    with httpx.stream("POST", f"{stub.base_url}/chat/completions",
                      json={**BODY, "stream": True}, timeout=10) as response:
        into.extend(response.iter_bytes())


def test_models_endpoint_lists_the_model(stub: StubServer) -> None:
    response = httpx.get(f"{stub.base_url}/models", timeout=10)
    assert response.status_code == 200
    assert [m["id"] for m in response.json()["data"]] == ["stub-model"]


def test_non_streaming_answer_has_the_openai_shape_and_deterministic_usage(
    stub: StubServer,
) -> None:
    stub.push(StubReply.text("pong", cached_tokens=2))
    data = post(stub).json()
    assert data["object"] == "chat.completion"
    assert data["model"] == "stub-model"
    choice = data["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": "pong"}
    assert choice["finish_reason"] == "stop"
    prompt, completion = stub_usage([ChatMessage.user("ping")], "pong")
    assert data["usage"] == {"prompt_tokens": prompt, "completion_tokens": completion,
                             "total_tokens": prompt + completion,
                             "prompt_tokens_details": {"cached_tokens": 2}}


def test_streaming_answer_uses_the_openai_chunk_format(stub: StubServer) -> None:
    stub.push(StubReply.text("hello world", chunk_size=4))
    response = post(stub, {**BODY, "stream": True, "stream_options": {"include_usage": True}})
    assert response.headers["content-type"].startswith("text/event-stream")
    payloads = sse_payloads(response.text)
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == "hello world"
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "stop"
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] == stub_usage([], "hello world")[1]
    assert all(c["usage"] is None for c in chunks[:-1])


def test_streaming_without_include_usage_sends_no_usage(stub: StubServer) -> None:
    stub.push("hello")
    payloads = sse_payloads(post(stub, {**BODY, "stream": True}).text)
    assert all("usage" not in json.loads(p) for p in payloads[:-1])


def test_streamed_tool_calls_arrive_as_indexed_deltas(stub: StubServer) -> None:
    stub.push(StubReply.tool_calls_of(("lookup", {"q": "x" * 40}), ("other", {})))
    chunks = [json.loads(p) for p in sse_payloads(post(stub, {**BODY, "stream": True}).text)[:-1]]
    calls: dict[int, dict[str, str]] = {}
    for chunk in chunks:
        for delta in chunk["choices"][0]["delta"].get("tool_calls", []):
            entry = calls.setdefault(delta["index"], {"name": "", "arguments": ""})
            entry["name"] += delta.get("function", {}).get("name") or ""
            entry["arguments"] += delta["function"].get("arguments") or ""
    assert calls[0]["name"] == "lookup"
    assert json.loads(calls[0]["arguments"]) == {"q": "x" * 40}
    assert calls[1] == {"name": "other", "arguments": "{}"}
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_requests_are_recorded_with_parsed_messages(stub: StubServer) -> None:
    stub.push("one", "two")
    post(stub)
    post(stub, {**BODY, "messages": [{"role": "system", "content": "s"},
                                      {"role": "user", "content": "second"}],
                "temperature": 0.5})
    first, second = stub.requests
    assert first.last_user_text == "ping"
    assert [m.role for m in second.messages] == ["system", "user"]
    assert second.body["temperature"] == 0.5
    assert stub.last_request is second
    assert stub.pending == 0


def test_rule_answers_when_the_queue_is_empty(stub: StubServer) -> None:
    def rule(request: StubRequest) -> str:
        return f"echo: {request.last_user_text}"

    stub.rule = rule
    stub.push("queued first")
    assert post(stub).json()["choices"][0]["message"]["content"] == "queued first"
    assert post(stub).json()["choices"][0]["message"]["content"] == "echo: ping"


def test_empty_script_answers_400_not_500(stub: StubServer) -> None:
    response = post(stub)
    assert response.status_code == 400
    assert "no scripted reply" in response.json()["error"]["message"]


def test_global_fault_and_delay(stub: StubServer) -> None:
    stub.push("kept for later")
    stub.fault = StubReply.rate_limited(retry_after=1.5)
    response = post(stub)
    assert response.status_code == 429
    assert response.headers["retry-after"] == "1.5"
    assert response.json()["error"]["code"] == "rate_limit_exceeded"
    stub.fault = None
    stub.delay = 0.15
    started = time.monotonic()
    assert post(stub).json()["choices"][0]["message"]["content"] == "kept for later"
    assert time.monotonic() - started >= 0.15


def test_fault_replies_carry_openai_error_bodies(stub: StubServer) -> None:
    stub.push(StubReply.overflow(context_size=4096, requested=5000), StubReply.server_error(),
              StubReply.unauthorized())
    overflow = post(stub)
    assert overflow.status_code == 400
    assert overflow.json()["error"]["code"] == "context_length_exceeded"
    assert "maximum context length is 4096 tokens" in overflow.json()["error"]["message"]
    assert post(stub).status_code == 500
    assert post(stub).status_code == 401


def test_invalid_messages_are_a_400_naming_the_field(stub: StubServer) -> None:
    response = post(stub, {"model": "m", "messages": [{"role": "robot", "content": "x"}]})
    assert response.status_code == 400
    assert "role" in response.json()["error"]["message"]
    assert post(stub, {"model": "m", "messages": []}).status_code == 400


def test_dropped_stream_cuts_the_connection(stub: StubServer) -> None:
    stub.push(StubReply.dropped("abcdefghijklmnop", after=3))
    received: list[bytes] = []
    with pytest.raises(httpx.RemoteProtocolError):
        read_stream(stub, received)
    payloads = sse_payloads(b"".join(received).decode())
    assert len(payloads) == 3
    assert "[DONE]" not in payloads


def test_clean_drop_ends_the_body_without_done(stub: StubServer) -> None:
    stub.push(StubReply.dropped("abcdefghijklmnop", after=2, mode="clean"))
    payloads = sse_payloads(post(stub, {**BODY, "stream": True}).text)
    assert len(payloads) == 2
    assert all(json.loads(p)["choices"][0]["finish_reason"] is None for p in payloads)


async def test_async_context_manager_and_fast_stop_with_pending_delay() -> None:
    server = StubServer([StubReply.text("late", delay=30)])
    async with server:
        url = server.base_url
        async with httpx.AsyncClient(timeout=0.3) as client:
            with pytest.raises(httpx.ReadTimeout):
                await client.post(f"{url}/chat/completions", json=BODY)
        started = time.monotonic()
    assert time.monotonic() - started < 5  # the 30 s delay did not hold up shutdown
    async with httpx.AsyncClient(timeout=1) as client:
        with pytest.raises(httpx.ConnectError):
            await client.get(f"{url}/models")


async def test_connections_accepted_on_the_listening_socket_have_nagle_off() -> None:
    """uvicorn serves the stub on ``listening_socket``; asyncio disables Nagle only on
    sockets whose proto is TCP. With Nagle on, every answer's body waited ~40 ms for the
    client's delayed ACK (all model calls in tests and benchmarks ran 40 ms slow)."""
    import asyncio

    from ctxstack.llm.stub.server import listening_socket

    sock = listening_socket("127.0.0.1", 0)
    seen: list[int] = []

    def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted = writer.get_extra_info("socket")
        seen.append(accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        writer.close()

    server = await asyncio.start_server(connected, sock=sock)
    async with server:
        _, writer = await asyncio.open_connection(*sock.getsockname()[:2])
        for _ in range(100):
            if seen:
                break
            await asyncio.sleep(0.01)
        writer.close()
    assert seen
    assert seen[0] != 0


def test_a_bounded_record_keeps_the_newest_requests_and_counts_them_all() -> None:
    with StubServer(rule=lambda r: r.messages[-1].text, max_recorded=2) as stub:
        for word in ("one", "two", "three"):
            post(stub, {"model": "m", "messages": [{"role": "user", "content": word}]})
        assert [r.messages[-1].text for r in stub.requests] == ["two", "three"]
        assert stub.state.calls == 3
        logged = httpx.get(f"{stub.url}/_stub/requests").json()["requests"]
        assert [item["json"]["messages"][0]["content"] for item in logged] == ["two", "three"]
        stub.reset()
        assert stub.state.calls == 0


def test_recording_nothing_still_counts_and_answers() -> None:
    with StubServer(rule=lambda r: "ok", max_recorded=0) as stub:
        assert post(stub).json()["choices"][0]["message"]["content"] == "ok"
        assert stub.requests == []
        assert stub.state.calls == 1
        assert httpx.get(f"{stub.url}/_stub/requests").status_code == 404


def test_the_request_record_survives_an_escaped_lone_surrogate(stub: StubServer) -> None:
    stub.push("ok")
    body = '{"model": "m", "messages": [{"role": "user", "content": "lone \\ud800 half"}]}'
    assert httpx.post(f"{stub.base_url}/chat/completions", content=body,
                      headers={"content-type": "application/json"}).status_code == 200
    logged = httpx.get(f"{stub.url}/_stub/requests")
    assert logged.status_code == 200
    assert logged.json()["requests"][-1]["json"]["messages"][0]["content"] == "lone \ufffd half"


def test_a_negative_record_bound_is_refused() -> None:
    with pytest.raises(ConfigError, match="max_recorded"):
        StubServer(max_recorded=-1)


def test_two_servers_get_distinct_free_ports() -> None:
    with StubServer(["a"]) as a, StubServer(["b"]) as b:
        assert a.port != b.port
        assert a.port > 0
        assert post(a).json()["choices"][0]["message"]["content"] == "a"
        assert post(b).json()["choices"][0]["message"]["content"] == "b"


# --------------------------------------------------------------------------- CLI
def test_cli_help_lists_the_options() -> None:
    import ctxstack.cli.stub  # noqa: F401  (registers the command until the lead wires it)
    from ctxstack.cli import main

    result = CliRunner().invoke(main, ["stub-llm", "--help"])
    assert result.exit_code == 0
    for option in ("--port", "--host", "--delay", "--reply"):
        assert option in result.output


def test_cli_serves_over_http() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    code = "import ctxstack.cli.stub; from ctxstack.cli import main; main()"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "stub-llm", "--port", str(port), "--reply", "fixed"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"},
    )
    try:
        base = f"http://127.0.0.1:{port}/v1"
        deadline = time.monotonic() + 20
        while True:
            try:
                httpx.get(f"{base}/models", timeout=1)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.05)
        response = httpx.post(f"{base}/chat/completions", json=BODY, timeout=5)
        assert response.json()["choices"][0]["message"]["content"] == "fixed"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        assert proc.stdout is not None
        proc.stdout.close()


def test_cli_recall_on_lets_the_proxys_recall_be_tried_offline(tmp_path: Path) -> None:
    """``ctxstack stub-llm --recall-on vault`` behind a real ``ctxstack proxy``: a fact
    compacted away early in the conversation comes back through ``ctxstack_recall`` — the
    stub calls it, the proxy answers it from the session's archive, the client gets only
    the answer."""
    from ctxstack.cli.stub import RECALL_TOOL
    from ctxstack.proxy.recall import RECALL_TOOL as PROXY_RECALL_TOOL
    from tests.proxy_support import running_proxy
    from tests.service_support import ChildProcess, clean_env, free_port

    assert RECALL_TOOL == PROXY_RECALL_TOOL
    port = free_port()
    code = "import ctxstack.cli.stub; from ctxstack.cli import main; main()"
    log = tmp_path / "stub.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", code, "stub-llm", "--port", str(port), "--recall-on",
             "vault"], stdout=out, stderr=subprocess.STDOUT, env=clean_env({}))
    stub = ChildProcess(f"http://127.0.0.1:{port}", proc, log)
    try:
        stub.wait_until_ready("/v1/models", 20, "ctxstack stub-llm")
        history: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
        for day in range(30):
            text = "".join(f"day {day} line {i}: shipped order #A-{day}{i} ok\n"
                           for i in range(12))
            if day == 1:
                text = "The vault combination is 7391-ALPHA.\n" + text
            history += [{"role": "user", "content": f"Log of day {day}:\n{text}"},
                        {"role": "assistant", "content": f"Day {day} noted."}]
        env = {"LLM_API_KEY": "k", "LLM_CONTEXT_SIZE": "5000", "LLM_MAX_OUTPUT_TOKENS": "1000"}
        with running_proxy(tmp_path, f"{stub.url}/v1", env) as proxy:
            def ask(messages: list[dict[str, Any]]) -> httpx.Response:
                response = httpx.post(f"{proxy.base_url}/chat/completions", timeout=60,
                                      json={"model": "stub-model", "messages": messages},
                                      headers={"authorization": "Bearer k"})
                assert response.status_code == 200, response.text
                return response

            first = ask([*history, {"role": "user", "content": "Carry on."}])
            assert "method=none" not in first.headers["x-ctxstack-compaction"]
            history += [{"role": "user", "content": "Carry on."},
                        {"role": "assistant", "content": "Noted."},
                        {"role": "user", "content": "What was the vault combination?"}]
            answer = ask(history)
        text = answer.json()["choices"][0]["message"]["content"]
        assert "7391-ALPHA" in text
        assert RECALL_TOOL not in answer.text
        recorded = httpx.get(f"{stub.url}/_stub/requests", timeout=10).json()["requests"]
        bodies = [r["json"] for r in recorded if r["path"].endswith("/chat/completions")]
        assert any(RECALL_TOOL in json.dumps(b.get("tools", [])) for b in bodies)
        # Without the trigger the stub behaves as before (it echoes the user).
        plain = httpx.post(f"{stub.url}/v1/chat/completions", timeout=10, json={
            "model": "stub-model", "messages": [{"role": "user", "content": "hello"}],
            "tools": [{"type": "function", "function": {"name": RECALL_TOOL}}]})
        assert plain.json()["choices"][0]["message"]["content"] == "You said: hello"
    finally:
        stub.stop()
