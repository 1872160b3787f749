"""The stub's Anthropic Messages wire: ``POST /v1/messages`` and ``…/count_tokens``.

Same script as the Chat Completions route (the reply queue, the rule, the faults): a
request is recorded as a :class:`~ctxstack.llm.stub.StubRequest` whose ``messages`` are
its Chat-shaped view (``system`` → a system message, ``tool_result`` blocks → tool
messages, ``tool_use`` blocks → tool calls, ``thinking`` ignored, other blocks as their
JSON text), so one rule can answer both wires. Answers use Anthropic's real shapes:

* JSON: ``{"type": "message", "content": [thinking?, text?, tool_use…], "stop_reason",
  "usage": {input_tokens, output_tokens, cache_creation_input_tokens,
  cache_read_input_tokens}}``;
* SSE: ``message_start``, ``ping``, per block ``content_block_start`` / ``_delta``
  (``thinking_delta`` then ``signature_delta``, ``text_delta``, ``input_json_delta``) /
  ``_stop``, ``message_delta`` (stop reason, cumulative usage), ``message_stop``;
* errors: ``{"type": "error", "error": {"type", "message"}}`` with Anthropic's error type
  for the status (an overflow says ``prompt is too long: N tokens > M maximum``);
* count_tokens: ``{"input_tokens": N}``, N the heuristic count of the view and tools.

Like the real API, the stub refuses (400) a request that breaks the sequence rules
(:func:`sequence_problems`): the first message not the user's, a ``tool_use`` not
answered in the next message, a ``tool_result`` without its ``tool_use``, an empty text
block, more than 4 ``cache_control`` markers — so a test in front of it sees any invalid
request a proxy forwards.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any, Protocol

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from ctxstack.errors import MessageError
from ctxstack.llm.stub.replies import StubReply, StubRequest, ids, stub_usage
from ctxstack.llm.stub.scripted import scripted_response
from ctxstack.messages import ChatMessage
from ctxstack.tokens import HEURISTIC


class ScriptState(Protocol):
    """What the routes use of the stub's :class:`~ctxstack.llm.stub.app.StubState` (a
    protocol, so this module does not import the app that imports it)."""

    model: str
    api_key: str | None
    delay: float

    def record(self, request: StubRequest) -> None: ...

    def next_reply(self, request: StubRequest) -> StubReply: ...

    async def sleep(self, seconds: float) -> None: ...

_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                403: "permission_error", 404: "not_found_error", 413: "request_too_large",
                429: "rate_limit_error", 500: "api_error", 529: "overloaded_error"}
MAX_CACHE_MARKERS = 4


def chat_view(body: Mapping[str, Any]) -> tuple[ChatMessage, ...]:
    """The Chat-shaped view of an Anthropic request (see the module doc).

    Raises:
        MessageError: a message the view cannot be built from.
    """
    out: list[ChatMessage] = []
    system = body.get("system")
    text = system if isinstance(system, str) else "\n".join(
        _text(b) for b in system or [] if isinstance(b, Mapping))
    if text:
        out.append(ChatMessage.from_openai({"role": "system", "content": text}))
    for m in body.get("messages") or []:
        if not isinstance(m, Mapping):
            raise MessageError("messages[]: expected an object")
        content = m.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(
            content or [])
        if m.get("role") == "assistant":
            calls = [{"id": b.get("id"), "type": "function", "function": {
                "name": b.get("name"), "arguments": json.dumps(b.get("input") or {})}}
                for b in blocks if b.get("type") == "tool_use"]
            texts = [_text(b) for b in blocks if b.get("type") not in ("tool_use", "thinking",
                                                                       "redacted_thinking")]
            data: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts) or None}
            if calls:
                data["tool_calls"] = calls
            out.append(ChatMessage.from_openai(data))
            continue
        for b in blocks:
            if b.get("type") == "tool_result":
                result = b.get("content")
                body_text = result if isinstance(result, str) else "\n".join(
                    _text(x) for x in result or [] if isinstance(x, Mapping))
                out.append(ChatMessage.from_openai({
                    "role": "tool", "tool_call_id": b.get("tool_use_id"),
                    "content": body_text}))
        rest = [_text(b) for b in blocks if b.get("type") != "tool_result"]
        if rest:
            out.append(ChatMessage.from_openai({"role": "user", "content": "\n".join(rest)}))
    return tuple(out)


def _text(block: Mapping[str, Any]) -> str:
    if block.get("type") == "text" and isinstance(block.get("text"), str):
        return str(block["text"])
    return json.dumps(block, ensure_ascii=False)


def _blocks(message: Mapping[str, Any]) -> list[Any]:
    content = message.get("content")
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(
        content or [])


def count_markers(value: object) -> int:
    """``cache_control`` markers in a JSON value (nested ``content`` lists included)."""
    if isinstance(value, Mapping):
        return int("cache_control" in value) + count_markers(value.get("content"))
    if isinstance(value, list):
        return sum(count_markers(v) for v in value)
    return 0


def sequence_problems(body: Mapping[str, Any]) -> list[str]:
    """Every way ``body`` breaks Anthropic's sequence rules (empty when valid)."""
    problems: list[str] = []
    messages = [m for m in body.get("messages") or [] if isinstance(m, Mapping)]
    if messages and messages[0].get("role") != "user":
        problems.append("messages.0: the first message must use the user role")
    for i, m in enumerate(messages):
        blocks = _blocks(m)
        if i and messages[i - 1].get("role") == m.get("role"):
            problems.append(f"messages.{i}: same role as the message before (not merged)")
        for j, b in enumerate(blocks):
            if (isinstance(b, Mapping) and b.get("type") == "text"
                    and not str(b.get("text", "")).strip()):
                problems.append(f"messages.{i}.content.{j}: empty text block")
        prev = messages[i - 1] if i else None
        calls = {b.get("id") for b in _blocks(prev) if b.get("type") == "tool_use"} if (
            prev is not None and prev.get("role") == "assistant") else set()
        if m.get("role") == "user":
            results = [b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"]
            for r in results:
                if r not in calls:
                    problems.append(f"messages.{i}: tool_result {r!r} without its tool_use "
                                    "in the previous message")
            kinds = [b.get("type") for b in blocks]
            if results and kinds[:len(results)] != ["tool_result"] * len(results):
                problems.append(f"messages.{i}: tool_result blocks must come first")
        if m.get("role") == "assistant" and i + 1 < len(messages):
            mine = {b.get("id") for b in blocks if b.get("type") == "tool_use"}
            answered = {b.get("tool_use_id") for b in _blocks(messages[i + 1])
                        if b.get("type") == "tool_result"}
            if mine - answered:
                problems.append(f"messages.{i}: tool_use {sorted(mine - answered)} not "
                                "answered in the next message")
    markers = (count_markers(body.get("system")) + count_markers(body.get("tools"))
               + count_markers(messages))
    if markers > MAX_CACHE_MARKERS:
        problems.append(f"{markers} cache_control blocks (at most {MAX_CACHE_MARKERS})")
    return problems


def input_tokens(body: Mapping[str, Any], messages: tuple[ChatMessage, ...]) -> int:
    """What the stub reports as a request's input tokens (view and tools, heuristic)."""
    tools = body.get("tools")
    return HEURISTIC.count_messages(messages) + (
        HEURISTIC.count_text(json.dumps(tools, ensure_ascii=False)) if tools else 0)


def error_json(status: int, message: str) -> dict[str, Any]:
    kind = _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def _reply_error(reply: StubReply) -> JSONResponse:
    error = dict(reply.error or {})
    message = str(error.get("message") or "error")
    if error.get("code") == "context_length_exceeded":
        numbers = re.findall(r"\d+", message)
        limit, asked = (numbers[0], numbers[1]) if len(numbers) >= 2 else (
            "200000", "210000")
        message = f"prompt is too long: {asked} tokens > {limit} maximum"
    return JSONResponse(error_json(reply.status, message), status_code=reply.status,
                        headers=dict(reply.headers))


def _signature(thinking: str) -> str:
    return "sig-" + hashlib.sha256(thinking.encode("utf-8")).hexdigest()


def _content(reply: StubReply) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if reply.thinking is not None:
        out.append({"type": "thinking", "thinking": reply.thinking,
                    "signature": _signature(reply.thinking)})
    if reply.content:
        out.append({"type": "text", "text": reply.content})
    for call in reply.tool_calls:
        args = call.arguments if not isinstance(call.arguments, str) else {
            "_raw": call.arguments}
        out.append({"type": "tool_use", "id": call.id or f"toolu_stub_{next(ids)}",
                    "name": call.name, "input": dict(args)})
    return out


def _stop_reason(reply: StubReply) -> str:
    if reply.finish_reason == "length":
        return "max_tokens"
    return "tool_use" if reply.tool_calls else "end_turn"


def _usage(request: StubRequest, reply: StubReply) -> dict[str, Any]:
    """As Anthropic reports it: ``input_tokens`` is the prompt less the cache reads and
    writes, which are reported apart (the three add up to the whole prompt)."""
    _, completion = stub_usage(request.messages, reply.content, reply.tool_calls)
    whole = input_tokens(request.body, request.messages)
    return {"input_tokens": max(0, whole - reply.cached_tokens - reply.cache_write_tokens),
            "cache_creation_input_tokens": reply.cache_write_tokens,
            "cache_read_input_tokens": reply.cached_tokens,
            "output_tokens": completion}


def message_json(state: ScriptState, request: StubRequest, reply: StubReply) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": f"msg_stub_{next(ids)}", "type": "message", "role": "assistant",
        "model": str(request.body.get("model") or state.model),
        "content": _content(reply), "stop_reason": _stop_reason(reply),
        "stop_sequence": None}
    if reply.include_usage:
        body["usage"] = _usage(request, reply)
    return body


def sse_events(state: ScriptState, request: StubRequest, reply: StubReply) -> list[str]:
    """Every event of a streamed answer, in order, each ``event: …\\ndata: …\\n\\n``."""
    def event(data: dict[str, Any]) -> str:
        return f"event: {data['type']}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"

    usage = _usage(request, reply) if reply.include_usage else {
        "input_tokens": 0, "output_tokens": 0}
    start = message_json(state, request, reply)
    start.update(content=[], stop_reason=None,
                 usage={**usage, "output_tokens": min(1, usage["output_tokens"])})
    events = [event({"type": "message_start", "message": start}), event({"type": "ping"})]
    size = max(1, reply.chunk_size)
    for index, block in enumerate(_content(reply)):
        kind = block["type"]
        if kind == "thinking":
            events.append(event({"type": "content_block_start", "index": index,
                                 "content_block": {"type": "thinking", "thinking": "",
                                                   "signature": ""}}))
            text = block["thinking"]
            events += [event({"type": "content_block_delta", "index": index, "delta": {
                "type": "thinking_delta", "thinking": text[i:i + size]}})
                for i in range(0, len(text), size)]
            events.append(event({"type": "content_block_delta", "index": index, "delta": {
                "type": "signature_delta", "signature": block["signature"]}}))
        elif kind == "text":
            events.append(event({"type": "content_block_start", "index": index,
                                 "content_block": {"type": "text", "text": ""}}))
            text = block["text"]
            events += [event({"type": "content_block_delta", "index": index, "delta": {
                "type": "text_delta", "text": text[i:i + size]}})
                for i in range(0, len(text), size)]
        else:
            events.append(event({"type": "content_block_start", "index": index,
                                 "content_block": {**block, "input": {}}}))
            args = json.dumps(block["input"], ensure_ascii=False)
            events += [event({"type": "content_block_delta", "index": index, "delta": {
                "type": "input_json_delta", "partial_json": args[i:i + 16]}})
                for i in range(0, len(args), 16)]
        events.append(event({"type": "content_block_stop", "index": index}))
    events.append(event({"type": "message_delta", "delta": {
        "stop_reason": _stop_reason(reply), "stop_sequence": None}, "usage": usage}))
    events.append(event({"type": "message_stop"}))
    return events


def add_routes(app: FastAPI, state: ScriptState) -> None:
    """Serve ``POST /v1/messages`` and ``POST /v1/messages/count_tokens`` from ``state``."""
    async def parse(http: Request) -> tuple[StubRequest | None, Response | None]:
        headers = {k.lower(): v for k, v in http.headers.items()}
        path: str = http.scope["path"]
        try:
            body = json.loads(await http.body())
        except json.JSONDecodeError as exc:
            return None, JSONResponse(error_json(400, f"body is not JSON: {exc.msg}"), 400)
        if not isinstance(body, dict):
            return None, JSONResponse(error_json(400, "body must be a JSON object"), 400)
        try:
            messages = chat_view(body)
        except (MessageError, AttributeError, TypeError) as exc:
            state.record(StubRequest(path, body, headers))
            return None, JSONResponse(error_json(400, f"invalid messages: {exc}"), 400)
        request = StubRequest(path, body, headers, messages)
        state.record(request)
        key = headers.get("x-api-key") or headers.get("authorization", "").removeprefix(
            "Bearer ")
        if state.api_key is not None and key != state.api_key:
            return None, JSONResponse(error_json(401, "invalid x-api-key"), 401)
        problems = sequence_problems(body)
        if not body.get("model") or not body.get("messages") or problems:
            return None, JSONResponse(error_json(400, "; ".join(problems) or
                                                 "model and messages are required"), 400)
        return request, None

    async def messages(http: Request) -> Response:
        request, refused = await parse(http)
        if request is None:
            assert refused is not None
            return refused
        return await scripted_response(
            state, request, error=_reply_error,
            answer=lambda reply: JSONResponse(message_json(state, request, reply),
                                              headers=dict(reply.headers)),
            events=lambda reply: sse_events(state, request, reply),
            frame=str.encode)

    async def count_tokens(http: Request) -> Response:
        request, refused = await parse(http)
        if request is None:
            assert refused is not None
            return refused
        return JSONResponse({"input_tokens": input_tokens(request.body, request.messages)})

    app.add_route("/v1/messages", messages, methods=["POST"])
    app.add_route("/v1/messages/count_tokens", count_tokens, methods=["POST"])
