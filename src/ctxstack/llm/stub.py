"""A small OpenAI-compatible HTTP server that answers from a script, with fault injection.

It is what ctxstack's client tests run against over real loopback HTTP, and what the demo
and browser tests use when no real endpoint is configured (``ctxstack stub-llm``). It
speaks the real wire format — ``POST /v1/chat/completions`` (JSON, or Server-Sent Events
in OpenAI's chunk format with ``[DONE]``, tool-call deltas and the final usage chunk when
``stream_options.include_usage`` is set) and ``GET /v1/models`` — so a client that works
against it works against OpenAI, vLLM or Ollama for the same features.

Answers come, per request, from the first of: a global fault (:attr:`StubServer.fault`),
the reply queue (:meth:`StubServer.push`), the rule (a function of the request), else a
400 saying the script ran out (400, not 500, so a client's retries do not hide it).
A reply is a :class:`StubReply`; the classmethods build the common ones and the faults
(429 with ``Retry-After``, 500, OpenAI's context-overflow 400, 401, a stream cut after N
chunks, truncated JSON text).

Usage is deterministic: prompt tokens are ctxstack's heuristic count of the request's
messages, completion tokens the heuristic count of the answer (as
:class:`~ctxstack.llm.ScriptedLLM` counts), so tests can check sums exactly
(:func:`stub_usage`).

Typical use::

    with StubServer() as stub:
        stub.push("Hello!", StubReply.rate_limited(retry_after=0.2))
        llm = stub.client()
        ...
        assert stub.requests[0].messages[-1].text == "hi"
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import socket
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from ctxstack.errors import MessageError
from ctxstack.messages import ChatMessage, ToolCall, from_openai_messages
from ctxstack.tokens import HEURISTIC

if TYPE_CHECKING:
    from ctxstack.llm.openai import OpenAICompatibleLLM

DEFAULT_MODEL = "stub-model"
_ids = itertools.count(1)


# --------------------------------------------------------------------------- replies
@dataclass(frozen=True)
class StubToolCall:
    """A tool call the stub answers with. ``arguments`` may be a raw (even invalid) string."""

    name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)
    id: str | None = None

    @property
    def arguments_text(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(dict(self.arguments), ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True)
class StubReply:
    """One scripted answer, or one fault.

    Attributes:
        content: assistant text (``None`` with tool calls only).
        tool_calls: tool calls to answer with.
        finish_reason: defaults to "tool_calls" when there are tool calls, else "stop".
        delay: seconds to wait before answering (added to the server-wide delay).
        status: an HTTP status other than 200 makes this an error reply with ``error``
            as the body's ``error`` object and ``headers`` as extra headers.
        chunk_size: characters per streamed content delta.
        chunk_delay: seconds between streamed chunks.
        pause_after / pause: when streaming, wait ``pause`` seconds once after this many
            SSE events (a stream that stalls mid-answer).
        drop_after: when streaming, stop after this many SSE events (the role chunk
            counts), without ``finish_reason`` or ``[DONE]`` — a dropped stream.
        drop_mode: "abort" closes the connection mid-body (what a crashed server or a
            proxy cut looks like); "clean" ends the HTTP body properly, so only the
            missing ``finish_reason`` / ``[DONE]`` tells the answer is incomplete.
        include_usage: ``False`` leaves usage out (JSON and stream), like servers that
            never report it.
        cached_tokens: reported as ``prompt_tokens_details.cached_tokens``.
        raw_body: sent verbatim (with ``status`` and ``content_type``) instead of a
            generated answer — for malformed responses, error events inside a 200,
            hand-written SSE.
    """

    content: str | None = None
    tool_calls: tuple[StubToolCall, ...] = ()
    finish_reason: str | None = None
    delay: float = 0.0
    status: int = 200
    error: Mapping[str, Any] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    chunk_size: int = 4
    chunk_delay: float = 0.0
    pause_after: int | None = None
    pause: float = 0.0
    drop_after: int | None = None
    drop_mode: Literal["abort", "clean"] = "abort"
    include_usage: bool = True
    cached_tokens: int = 0
    raw_body: str | None = None
    content_type: str = "application/json"

    # ------------------------------------------------------------------ answers
    @classmethod
    def text(cls, content: str, **kw: Any) -> StubReply:
        """A plain text answer."""
        return cls(content=content, **kw)

    @classmethod
    def tool_call(cls, name: str, arguments: Mapping[str, Any] | str | None = None, *,
                  call_id: str | None = None, content: str | None = None,
                  **kw: Any) -> StubReply:
        """An answer calling one tool."""
        call = StubToolCall(name, {} if arguments is None else arguments, call_id)
        return cls(content=content, tool_calls=(call,), **kw)

    @classmethod
    def tool_calls_of(cls, *calls: tuple[str, Mapping[str, Any] | str], **kw: Any) -> StubReply:
        """An answer calling several tools at once."""
        return cls(tool_calls=tuple(StubToolCall(n, a) for n, a in calls), **kw)

    @classmethod
    def invalid_json(cls, **kw: Any) -> StubReply:
        """Text that starts like JSON and is cut off (what a model hitting a limit sends)."""
        return cls(content='{"answer": "forty-two", "items": [1, 2', **kw)

    @classmethod
    def dropped(cls, content: str, after: int = 2, *,
                mode: Literal["abort", "clean"] = "abort", **kw: Any) -> StubReply:
        """A streamed answer cut after ``after`` SSE events (see ``drop_mode``)."""
        return cls(content=content, drop_after=after, drop_mode=mode, **kw)

    # ------------------------------------------------------------------ faults
    @classmethod
    def failure(cls, status: int, message: str, *, type: str = "invalid_request_error",
                code: str | None = None, param: str | None = None,
                headers: Mapping[str, str] | None = None, **kw: Any) -> StubReply:
        """An error response with OpenAI's body shape ``{"error": {message, type, …}}``."""
        error = {"message": message, "type": type, "param": param, "code": code}
        return cls(status=status, error=error, headers=dict(headers or {}), **kw)

    @classmethod
    def rate_limited(cls, retry_after: float | str | None = 0.2, *,
                     message: str | None = None, **kw: Any) -> StubReply:
        """429 with OpenAI's tokens-per-minute wording and a ``Retry-After`` header."""
        headers = {} if retry_after is None else {"retry-after": str(retry_after)}
        return cls.failure(
            429,
            message or "Rate limit reached for stub-model in organization org-stub on tokens "
            "per min (TPM): Limit 30000, Used 29500, Requested 1200. Please try again in "
            "1.4s. Visit https://platform.openai.com/account/rate-limits to learn more.",
            type="tokens", code="rate_limit_exceeded", headers=headers, **kw)

    @classmethod
    def server_error(cls, status: int = 500, **kw: Any) -> StubReply:
        """A 5xx with OpenAI's generic server-error body."""
        return cls.failure(
            status, "The server had an error while processing your request. Sorry about that!",
            type="server_error", **kw)

    @classmethod
    def overflow(cls, context_size: int = 8192, requested: int = 9000, **kw: Any) -> StubReply:
        """OpenAI's real context-length 400 (``code: context_length_exceeded``)."""
        return cls.failure(
            400,
            f"This model's maximum context length is {context_size} tokens. However, your "
            f"messages resulted in {requested} tokens. Please reduce the length of the "
            "messages.",
            param="messages", code="context_length_exceeded", **kw)

    @classmethod
    def unauthorized(cls, **kw: Any) -> StubReply:
        """401 as OpenAI sends it for a wrong key."""
        return cls.failure(401, "Incorrect API key provided: sk-stub***. You can find your "
                           "API key at https://platform.openai.com/account/api-keys.",
                           code="invalid_api_key", **kw)

    @classmethod
    def raw(cls, body: str, *, status: int = 200, content_type: str = "application/json",
            **kw: Any) -> StubReply:
        """Exactly ``body`` as the response (malformed JSON, HTML from a proxy, …)."""
        return cls(raw_body=body, status=status, content_type=content_type, **kw)

    @property
    def is_error(self) -> bool:
        return self.status != 200


ReplyLike = StubReply | str
Rule = Callable[["StubRequest"], ReplyLike]


@dataclass(frozen=True)
class StubRequest:
    """What the stub received: the raw JSON body and its parsed messages."""

    path: str
    body: Mapping[str, Any]
    headers: Mapping[str, str]
    messages: tuple[ChatMessage, ...] = ()

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))

    @property
    def tools(self) -> list[dict[str, Any]] | None:
        tools = self.body.get("tools")
        return list(tools) if isinstance(tools, list) else None

    @property
    def last_user_text(self) -> str:
        for m in reversed(self.messages):
            if m.role == "user":
                return m.text
        return ""


def stub_usage(messages: Sequence[ChatMessage], content: str | None,
               tool_calls: Sequence[StubToolCall] = ()) -> tuple[int, int]:
    """The (prompt_tokens, completion_tokens) the stub reports for an answer."""
    calls = [
        ToolCall(id="x", name=c.name, arguments=dict(c.arguments))
        for c in tool_calls if not isinstance(c.arguments, str)
    ]
    answer = ChatMessage.assistant(content, tool_calls=calls or None)
    raw = " ".join(c.arguments for c in tool_calls if isinstance(c.arguments, str))
    completion = HEURISTIC.count_message(answer) - HEURISTIC.message_overhead
    return HEURISTIC.count_messages(messages), completion + HEURISTIC.count_text(raw)


# --------------------------------------------------------------------------- state
class StubState:
    """The script and the record of requests, shared by the server thread and the test."""

    def __init__(self, *, model: str = DEFAULT_MODEL, api_key: str | None = None,
                 replies: Iterable[ReplyLike] = (), rule: Rule | None = None,
                 delay: float = 0.0) -> None:
        self.model = model
        self.api_key = api_key
        self.rule = rule
        self.delay = delay
        self.fault: StubReply | None = None
        self._queue: deque[ReplyLike] = deque(replies)
        self._requests: list[StubRequest] = []
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

    def record(self, request: StubRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def reset(self) -> None:
        with self._lock:
            self._queue.clear()
            self._requests.clear()
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
                                     f"(request #{len(self.requests)})", code="stub_empty")
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
            {"id": c.id or f"call_stub_{next(_ids)}", "type": "function",
             "function": {"name": c.name, "arguments": c.arguments_text}}
            for c in reply.tool_calls
        ]
    body: dict[str, Any] = {
        "id": f"chatcmpl-stub-{next(_ids)}",
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
    base = {"id": f"chatcmpl-stub-{next(_ids)}", "object": "chat.completion.chunk",
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
            "index": index, "id": call.id or f"call_stub_{next(_ids)}", "type": "function",
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


class _SSEResponse(Response):
    """Server-Sent Events written straight to ASGI, so a stream can be cut mid-way.

    A cut returns without the final empty body message: uvicorn then closes the socket
    and the client sees an incomplete chunked body, as with a real dropped connection.
    """

    def __init__(self, events: AsyncIterator[bytes], *, complete: bool) -> None:
        super().__init__(media_type="text/event-stream")
        self._events = events
        self._complete = complete

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache")]})
        async for data in self._events:
            await send({"type": "http.response.body", "body": data, "more_body": True})
        if self._complete:
            await send({"type": "http.response.body", "body": b"", "more_body": False})


# --------------------------------------------------------------------------- app
def create_app(state: StubState) -> FastAPI:
    """The FastAPI app serving ``state``'s script (used by :class:`StubServer` and the CLI)."""
    app = FastAPI(title="ctxstack stub LLM", docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [
            {"id": state.model, "object": "model", "created": 0, "owned_by": "ctxstack-stub"}]}

    @app.post("/v1/chat/completions")
    async def chat_completions(http: Request) -> Response:
        headers = {k.lower(): v for k, v in http.headers.items()}
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
            state.record(StubRequest(http.url.path, body, headers))
            return _error(400, f"invalid messages: {exc}", param="messages")
        request = StubRequest(http.url.path, body, headers, messages)
        state.record(request)
        if state.api_key is not None and headers.get("authorization") != f"Bearer {state.api_key}":
            return _reply_error(StubReply.unauthorized())
        if not messages or not body.get("model"):
            return _error(400, "'model' and a non-empty 'messages' are required")
        reply = state.next_reply(request)
        await state.sleep(state.delay + reply.delay)
        if reply.raw_body is not None:
            return Response(reply.raw_body, status_code=reply.status,
                            media_type=reply.content_type, headers=dict(reply.headers))
        if reply.is_error:
            return _reply_error(reply)
        if not request.stream:
            return JSONResponse(_completion_json(state, request, reply))
        events = _sse_events(state, request, reply)
        if reply.drop_after is not None:
            events = events[: max(0, reply.drop_after)]
        return _SSEResponse(_paced(state, events, reply),
                            complete=reply.drop_after is None or reply.drop_mode == "clean")

    return app


async def _paced(state: StubState, events: list[str], reply: StubReply) -> AsyncIterator[bytes]:
    for i, data in enumerate(events):
        if reply.chunk_delay and i:
            await state.sleep(reply.chunk_delay)
        if reply.pause_after is not None and i == reply.pause_after:
            await state.sleep(reply.pause)
        yield f"data: {data}\n\n".encode()


def _error(status: int, message: str, *, param: str | None = None) -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": {
        "message": message, "type": "invalid_request_error", "param": param, "code": None}})


def _reply_error(reply: StubReply) -> JSONResponse:
    return JSONResponse(status_code=reply.status, content={"error": dict(reply.error or {})},
                        headers=dict(reply.headers))


# --------------------------------------------------------------------------- server
class StubServer:
    """The stub on 127.0.0.1 and a free port, served by uvicorn in a background thread.

    Use as a context manager (``with`` or ``async with``) or call :meth:`start` /
    :meth:`stop`. The script can be changed at any time from the test's thread; the
    server has its own event loop, so one server can outlive many test event loops.

    Args:
        replies: initial reply queue (strings are text answers).
        rule: answers when the queue is empty: ``rule(request) -> StubReply | str``.
        delay: seconds added before every answer.
        model: the model name ``/v1/models`` lists.
        api_key: when set, requests must send ``Authorization: Bearer <api_key>``
            (else 401); when ``None`` any key is accepted.
    """

    def __init__(self, replies: Iterable[ReplyLike] = (), *, rule: Rule | None = None,
                 delay: float = 0.0, model: str = DEFAULT_MODEL, api_key: str | None = None,
                 host: str = "127.0.0.1", port: int = 0) -> None:
        self.state = StubState(model=model, api_key=api_key, replies=replies, rule=rule,
                               delay=delay)
        self.host = host
        self._port = port
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self, timeout: float = 10.0) -> StubServer:
        """Bind, start serving, and return once the server accepts connections."""
        if self._thread is not None:
            return self
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self._port))
        self._port = sock.getsockname()[1]
        config = uvicorn.Config(create_app(self.state), log_level="warning", log_config=None,
                                lifespan="off", timeout_graceful_shutdown=1)
        server = uvicorn.Server(config)
        self._server = server

        def run() -> None:
            async def serve() -> None:
                self._loop = asyncio.get_running_loop()
                self.state.stopping = asyncio.Event()
                await server.serve(sockets=[sock])

            asyncio.run(serve())
            sock.close()

        self._thread = threading.Thread(target=run, name=f"stub-llm-{self._port}", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"stub LLM server did not start on {self.base_url}")
            time.sleep(0.005)
        return self

    def stop(self) -> None:
        """Stop serving; pending delayed answers are cut short."""
        if self._server is None or self._thread is None:
            return
        loop, stopping = self._loop, self.state.stopping
        if loop is not None and stopping is not None and not loop.is_closed():
            loop.call_soon_threadsafe(stopping.set)
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._server = self._thread = self._loop = None
        self.state.stopping = None

    def __enter__(self) -> StubServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> StubServer:
        return await asyncio.to_thread(self.start)

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.stop)

    # ------------------------------------------------------------------ addresses
    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (no path)."""
        return f"http://{self.host}:{self._port}"

    @property
    def base_url(self) -> str:
        """The OpenAI base URL, ``http://127.0.0.1:PORT/v1``."""
        return f"{self.url}/v1"

    # ------------------------------------------------------------------ script
    def push(self, *replies: ReplyLike) -> StubServer:
        """Queue replies (strings are text answers), consumed one per request."""
        self.state.push(*replies)
        return self

    @property
    def rule(self) -> Rule | None:
        return self.state.rule

    @rule.setter
    def rule(self, rule: Rule | None) -> None:
        self.state.rule = rule

    @property
    def fault(self) -> StubReply | None:
        """When set, every request gets this reply (queue and rule are bypassed)."""
        return self.state.fault

    @fault.setter
    def fault(self, reply: StubReply | None) -> None:
        self.state.fault = reply

    @property
    def delay(self) -> float:
        return self.state.delay

    @delay.setter
    def delay(self, seconds: float) -> None:
        self.state.delay = seconds

    @property
    def pending(self) -> int:
        """Replies still queued."""
        return self.state.pending

    @property
    def requests(self) -> list[StubRequest]:
        """Every chat request received so far, oldest first (a copy)."""
        return self.state.requests

    @property
    def last_request(self) -> StubRequest:
        requests = self.state.requests
        if not requests:
            raise LookupError("the stub has not received any request yet")
        return requests[-1]

    def reset(self) -> None:
        """Forget the queue, rule, fault, delay and recorded requests."""
        self.state.reset()

    def client(self, **kwargs: Any) -> OpenAICompatibleLLM:
        """An :class:`~ctxstack.llm.openai.OpenAICompatibleLLM` pointed at this stub."""
        from ctxstack.llm.openai import OpenAICompatibleLLM

        kwargs.setdefault("api_key", self.state.api_key or "stub-key")
        kwargs.setdefault("model", self.state.model)
        return OpenAICompatibleLLM(base_url=self.base_url, **kwargs)

