"""The stub's FastAPI app: script state, OpenAI wire format (JSON and SSE), fault replies.

The Anthropic Messages wire is served from the same script by
:mod:`ctxstack.llm.stub.anthropic`."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections import deque
from collections.abc import Iterable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from ctxstack.errors import ConfigError, MessageError
from ctxstack.llm.stub import responses as wire
from ctxstack.llm.stub.anthropic import add_routes as add_anthropic_routes
from ctxstack.llm.stub.recording import DEFAULT_LIMIT, install_recording
from ctxstack.llm.stub.replies import (
    DEFAULT_MODEL,
    ReplyLike,
    Rule,
    StubReply,
    StubRequest,
    ids,
    stub_usage,
)
from ctxstack.llm.stub.scripted import scripted_response
from ctxstack.messages import from_openai_messages


class StubState:
    """The script and the record of requests, shared by the server thread and the test.

    ``max_recorded`` bounds the record (the newest that many requests are kept, in
    :attr:`requests` and at ``GET /_stub/requests``); ``None`` keeps every request, as a
    test that inspects them wants. A long-running stub (the CLI, a benchmark's model)
    must bound it: each request holds its whole parsed history, and an ever-growing heap
    made the stub's own garbage-collection pauses the tail of every measurement behind
    it. ``0`` records nothing (and does not serve ``/_stub/requests``). :attr:`calls`
    counts every chat request received either way.
    """

    def __init__(self, *, model: str = DEFAULT_MODEL, api_key: str | None = None,
                 replies: Iterable[ReplyLike] = (), rule: Rule | None = None,
                 delay: float = 0.0, max_recorded: int | None = None) -> None:
        if max_recorded is not None and max_recorded < 0:
            raise ConfigError(f"max_recorded: must be >= 0 or None, got {max_recorded}")
        self.model = model
        self.api_key = api_key
        self.rule = rule
        self.delay = delay
        self.max_recorded = max_recorded
        self.fault: StubReply | None = None
        self._queue: deque[ReplyLike] = deque(replies)
        self._requests: deque[StubRequest] = deque(maxlen=max_recorded)
        self._calls = 0
        self._lock = threading.Lock()
        self.stopping: asyncio.Event | None = None

    def push(self, *replies: ReplyLike) -> None:
        with self._lock:
            self._queue.extend(replies)

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    @property
    def requests(self) -> list[StubRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def calls(self) -> int:
        """Chat requests received so far (recorded or not; :meth:`reset` zeroes it)."""
        with self._lock:
            return self._calls

    def record(self, request: StubRequest) -> None:
        with self._lock:
            self._calls += 1
            self._requests.append(request)

    def reset(self) -> None:
        with self._lock:
            self._queue.clear()
            self._requests.clear()
            self._calls = 0
        self.rule = None
        self.fault = None
        self.delay = 0.0

    def next_reply(self, request: StubRequest) -> StubReply:
        with self._lock:
            item: ReplyLike | None = self.fault
            if item is None and self._queue:
                item = self._queue.popleft()
        if item is None and self.rule is not None:
            item = self.rule(request)
        if item is None:
            return StubReply.failure(400, "stub: no scripted reply queued and no rule set "
                                     f"(request #{self.calls})", code="stub_empty")
        return StubReply.text(item) if isinstance(item, str) else item

    async def sleep(self, seconds: float) -> None:
        """Sleep, but wake at once when the server stops (fast test teardown)."""
        if seconds <= 0:
            return
        if self.stopping is None:
            await asyncio.sleep(seconds)
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), seconds)


# --------------------------------------------------------------------------- wire format
def _completion_json(state: StubState, request: StubRequest, reply: StubReply) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": c.id or f"call_stub_{next(ids)}", "type": "function",
             "function": {"name": c.name, "arguments": c.arguments_text}}
            for c in reply.tool_calls
        ]
    body: dict[str, Any] = {
        "id": f"chatcmpl-stub-{next(ids)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": str(request.body.get("model") or state.model),
        "system_fingerprint": None,
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": _finish(reply)}],
    }
    if reply.include_usage:
        body["usage"] = _usage_json(request, reply)
    return body


def _finish(reply: StubReply) -> str:
    return reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")


def _usage_json(request: StubRequest, reply: StubReply) -> dict[str, Any]:
    prompt, completion = stub_usage(request.messages, reply.content, reply.tool_calls)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": reply.cached_tokens},
    }


def _sse_events(state: StubState, request: StubRequest, reply: StubReply) -> list[str]:
    """Every ``data:`` payload of a streamed answer, in order (``[DONE]`` last)."""
    include_usage = bool((request.body.get("stream_options") or {}).get("include_usage"))
    base = {"id": f"chatcmpl-stub-{next(ids)}", "object": "chat.completion.chunk",
            "created": int(time.time()), "model": str(request.body.get("model") or state.model),
            "system_fingerprint": None}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        data: dict[str, Any] = {**base, "choices": [
            {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
        if include_usage and reply.include_usage:
            data["usage"] = None
        return json.dumps(data, ensure_ascii=False)

    events = [chunk({"role": "assistant", "content": ""})]
    text = reply.content or ""
    size = max(1, reply.chunk_size)
    events += [chunk({"content": text[i:i + size]}) for i in range(0, len(text), size)]
    for index, call in enumerate(reply.tool_calls):
        events.append(chunk({"tool_calls": [{
            "index": index, "id": call.id or f"call_stub_{next(ids)}", "type": "function",
            "function": {"name": call.name, "arguments": ""}}]}))
        args = call.arguments_text
        events += [
            chunk({"tool_calls": [{"index": index, "function": {"arguments": args[i:i + 16]}}]})
            for i in range(0, len(args), 16)
        ]
    events.append(chunk({}, _finish(reply)))
    if include_usage and reply.include_usage:
        events.append(json.dumps({**base, "choices": [], "usage": _usage_json(request, reply)}))
    events.append("[DONE]")
    return events




# --------------------------------------------------------------------------- app
def create_app(state: StubState) -> FastAPI:
    """The FastAPI app serving ``state``'s script (used by :class:`StubServer` and the CLI)."""
    app = FastAPI(title="ctxstack stub LLM", docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [
            {"id": state.model, "object": "model", "created": 0, "owned_by": "ctxstack-stub"}]}

    async def chat_completions(http: Request) -> Response:
        headers = {k.lower(): v for k, v in http.headers.items()}
        path: str = http.scope["path"]
        raw = await http.body()
        try:
            body = json.loads(raw)
        except json.JSONDecodeError as exc:
            return _error(400, f"request body is not JSON: {exc.msg}")
        if not isinstance(body, dict):
            return _error(400, "request body must be a JSON object")
        try:
            messages = tuple(from_openai_messages(body.get("messages") or []))
        except MessageError as exc:
            state.record(StubRequest(path, body, headers))
            return _error(400, f"invalid messages: {exc}", param="messages")
        request = StubRequest(path, body, headers, messages)
        state.record(request)
        if state.api_key is not None and headers.get("authorization") != f"Bearer {state.api_key}":
            return _reply_error(StubReply.unauthorized())
        if not messages or not body.get("model"):
            return _error(400, "'model' and a non-empty 'messages' are required")
        return await scripted_response(
            state, request, error=_reply_error,
            answer=lambda reply: JSONResponse(_completion_json(state, request, reply)),
            events=lambda reply: _sse_events(state, request, reply),
            frame=lambda data: f"data: {data}\n\n".encode())

    # A plain Starlette route, not a FastAPI one: it takes the raw request and has no
    # parameters to solve or schema to publish, and FastAPI's per-request dependency and
    # endpoint machinery was a share of the stub's CPU per model call (issue 15).
    app.add_route("/v1/chat/completions", chat_completions, methods=["POST"])
    add_anthropic_routes(app, state)  # POST /v1/messages, /v1/messages/count_tokens

    async def responses(http: Request) -> Response:
        headers = {k.lower(): v for k, v in http.headers.items()}
        try:
            body = json.loads(await http.body())
        except json.JSONDecodeError as exc:
            return _error(400, f"request body is not JSON: {exc.msg}")
        if not isinstance(body, dict):
            return _error(400, "request body must be a JSON object")
        request = StubRequest(wire.PATH, body, headers, wire.input_messages(body))
        state.record(request)
        if state.api_key is not None and headers.get("authorization") != f"Bearer {state.api_key}":
            return _reply_error(StubReply.unauthorized())
        if not body.get("model"):
            return _error(400, "'model' is required", param="model")
        return await scripted_response(
            state, request, error=_reply_error,
            answer=lambda reply: JSONResponse(wire.completed_json(state.model, request, reply)),
            events=lambda reply: wire.stream_events(state.model, request, reply),
            frame=wire.sse_frame)

    async def responses_socket(ws: WebSocket) -> None:
        await ws.accept()
        headers = {k.lower(): v for k, v in ws.headers.items()}
        while True:
            try:
                text = await ws.receive_text()
            except (WebSocketDisconnect, RuntimeError):
                return
            if not await _answer_frame(state, ws, headers, text):
                return

    app.add_route(wire.PATH, responses, methods=["POST"])
    app.router.routes.append(WebSocketRoute(wire.PATH, responses_socket))

    if state.max_recorded != 0:  # GET /_stub/requests
        app.state.request_log = install_recording(
            app, DEFAULT_LIMIT if state.max_recorded is None else state.max_recorded)
    return app


async def _answer_frame(state: StubState, ws: WebSocket, headers: dict[str, str],
                        text: str) -> bool:
    """Answer one WebSocket frame; False when the socket was closed (a dropped stream)."""
    try:
        frame = json.loads(text)
    except json.JSONDecodeError as exc:
        frame = None
        problem = f"the frame is not JSON: {exc.msg}"
    else:
        problem = "" if isinstance(frame, dict) and frame.get("type") == "response.create" \
            else "expected a {\"type\": \"response.create\", ...} frame"
    if problem or not isinstance(frame, dict):
        await ws.send_text(json.dumps(wire.error_event(400, {
            "type": "invalid_request_error", "code": "invalid_event", "message": problem,
            "param": None})))
        return True
    body = {k: v for k, v in frame.items() if k != "type"}
    request = StubRequest(wire.PATH, body, headers, wire.input_messages(body),
                          transport="websocket")
    state.record(request)
    if state.api_key is not None and headers.get("authorization") != f"Bearer {state.api_key}":
        reply = StubReply.unauthorized()
    else:
        reply = state.next_reply(request)
        await state.sleep(state.delay + reply.delay)
    if reply.is_error or reply.raw_body is not None:
        error = dict(reply.error or {"message": reply.raw_body or "", "type": "server_error"})
        await ws.send_text(json.dumps(wire.error_event(reply.status, error, reply.headers)))
        return True
    events = wire.stream_events(state.model, request, reply)
    for i, event in enumerate(events):
        if reply.drop_after is not None and i >= reply.drop_after:
            await ws.close(code=1011)
            return False
        if reply.chunk_delay and i:
            await state.sleep(reply.chunk_delay)
        if reply.pause_after is not None and i == reply.pause_after:
            await state.sleep(reply.pause)
        await ws.send_text(json.dumps(event, ensure_ascii=False))
    return True


def _error(status: int, message: str, *, param: str | None = None) -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": {
        "message": message, "type": "invalid_request_error", "param": param, "code": None}})


def _reply_error(reply: StubReply) -> JSONResponse:
    return JSONResponse(status_code=reply.status, content={"error": dict(reply.error or {})},
                        headers=dict(reply.headers))
