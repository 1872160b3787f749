"""The Responses WebSocket mode at ``/v1/responses`` (what Codex opens first).

The client sends text frames ``{"type": "response.create", …request fields…}``, one
response at a time, and receives the response's events as JSON text frames — the very
``data`` of the events an SSE stream carries, in order, unchanged. Each frame goes
through the same expand / fit / forward as an HTTP request
(:mod:`ctxstack.proxy.responses_exchange`) and is forwarded to the upstream as an HTTP
request with ``stream: true``: the upstream needs no WebSocket support, and a
``previous_response_id`` — how WebSocket clients continue, sending only their new items,
usually with ``store: false`` — is expanded from the proxy's own memory of the chain.

Errors are one frame ``{"type": "error", "status": N, "error": {…}, "headers": {…}}``
(the shape Codex reads; ``headers`` carries ``retry-after`` and the rate-limit headers):
a frame that is not a ``response.create`` or a request that is invalid (400, before any
upstream call), an upstream error (its status, its body's ``error`` object, its
headers), an upstream that fails mid-stream (502/504). The socket stays open after an
error. A missing proxy token closes the socket after an error frame (401); a frame
larger than the proxy's body limit is a 413 error frame. Without tokens, a handshake to a
host that is not loopback (or allowed), or from another origin, is refused (403).

When the forwarded ``tools`` carry ``ctxstack_recall`` (:mod:`ctxstack.proxy.responses_rounds`),
the events are re-framed as on the SSE stream: the client never sees the tool, and the
``usage`` of ``response.completed`` is the sum over the upstream calls. A socket has no
per-response headers, so the handshake's response says it once for every response on
the socket: ``x-ctxstack-usage: sum`` (as on an SSE stream). WebSocket requests count in
the stats with their wire and model (``by_model.responses.<model>.websocket_requests``
beside ``requests``).

``generate: false`` (Codex's pre-warm: "remember this input, generate nothing") is
answered by the proxy itself when it knows the chain: a ``response.created`` and a
``response.completed`` with no output, remembered like any response, so the next
request continues it without an upstream call that a plain HTTP upstream would refuse.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
import uuid
from collections.abc import Mapping
from typing import Any

import httpx
from starlette.websockets import WebSocket, WebSocketDisconnect

from ctxstack._net import host_name, is_local_host, origin_host
from ctxstack.proxy.errors import ProxyError
from ctxstack.proxy.forwarding import read_error, response_headers
from ctxstack.proxy.recall import USAGE_HEADER
from ctxstack.proxy.responses_exchange import (
    WIRE,
    Exchange,
    ProxyParts,
    close,
    log_done,
    open_upstream,
    prepare,
    record,
    upstream_events,
)
from ctxstack.proxy.responses_request import dump, parse_responses
from ctxstack.proxy.responses_rounds import ClientStream, RoundError, answer_json, recall_events
from ctxstack.proxy.responses_route import recall_run

log = logging.getLogger("ctxstack.proxy")

_HANDSHAKE = ("sec-websocket-", "upgrade", "connection")


def _beta(value: str) -> str:
    """``OpenAI-Beta`` without the WebSocket-mode flag (the upstream is asked over HTTP)."""
    return ",".join(v for v in value.split(",") if v.strip()
                    and not v.strip().startswith("responses_websockets"))


def error_frame(status: int, error: Mapping[str, Any],
                headers: Mapping[str, str] | None = None) -> str:
    return json.dumps({"type": "error", "status": status, "error": dict(error),
                       "headers": dict(headers or {})}, ensure_ascii=False)


def _proxy_error(exc: ProxyError) -> str:
    return error_frame(exc.status, {"type": exc.type, "code": exc.code,
                                    "message": exc.message, "param": exc.param})


def handshake_refusal(state: ProxyParts, ws: WebSocket) -> str | None:
    """Why a handshake is refused, if it is: without tokens (``auth`` none) the proxy
    answers only sockets addressed to a loopback (or allowed) host and opened from no
    origin or a local one — a WebSocket is not subject to CORS, so a page of another
    site could otherwise spend the upstream key through a proxy on the user's machine
    (what the request guard refuses for HTTP, :mod:`ctxstack.proxy.guard`)."""
    settings = state.settings
    if settings.auth != "none":
        return None
    allowed = settings.allowed_hosts
    if not is_local_host(host_name(ws.headers.get("host", "")), allowed):
        return "not a loopback host"
    origin = ws.headers.get("origin")
    if origin is not None and not is_local_host(origin_host(origin) or "", allowed):
        return "another origin"
    return None


async def responses_socket(state: ProxyParts, ws: WebSocket) -> None:
    """Serve one WebSocket connection until the client closes it."""
    refused = handshake_refusal(state, ws)
    if refused is not None:
        log.warning("proxy: responses WebSocket refused (%s)", refused)
        await ws.close(code=1008)  # before accepting: the handshake is answered 403
        return
    await ws.accept(headers=[(USAGE_HEADER.encode(), b"sum")])
    try:
        salt = await state.auth.caller(ws.headers)
    except ProxyError as exc:
        await ws.send_text(_proxy_error(exc))
        await ws.close(code=1008)
        return
    incoming = [(k, _beta(v) if k.lower() == "openai-beta" else v)
                for k, v in ws.headers.items() if not k.lower().startswith(_HANDSHAKE)]
    incoming = [(k, v) for k, v in incoming if v or k.lower() != "openai-beta"]
    client = {k.lower(): v for k, v in incoming}
    upstream_headers = [(k, v) for k, v in state.upstream.request_headers(incoming)
                        if k.lower() not in ("accept", "content-type")] + [
        ("accept", "text/event-stream"), ("content-type", "application/json")]
    while True:
        try:
            text = await ws.receive_text()
        except (WebSocketDisconnect, RuntimeError):
            return
        try:
            await _one(state, ws, text, salt, client, upstream_headers)
        except WebSocketDisconnect:
            return
        except Exception:  # a bug must not end the client's session silently
            log.exception("proxy: a responses WebSocket frame failed")
            with contextlib.suppress(Exception):
                await ws.send_text(error_frame(500, {
                    "type": "server_error", "code": "proxy_error", "param": None,
                    "message": "the proxy failed to relay this response (see its log)"}))


async def _one(state: ProxyParts, ws: WebSocket, text: str, salt: str,
               client: Mapping[str, str], upstream_headers: list[tuple[str, str]]) -> None:
    started = time.perf_counter()
    state.stats.bump("requests")
    limit = state.settings.max_body_bytes
    if len(text) > limit and len(text.encode("utf-8")) > limit:
        state.stats.bump("bad_requests")
        await ws.send_text(error_frame(413, {
            "type": "invalid_request_error", "code": "request_too_large", "param": None,
            "message": f"the frame is larger than the proxy accepts ({limit} bytes)"}))
        return
    try:
        frame = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        frame = None
    if not isinstance(frame, dict) or frame.get("type") != "response.create":
        state.stats.bump("bad_requests")
        await ws.send_text(error_frame(400, {
            "type": "invalid_request_error", "code": "invalid_event", "param": "type",
            "message": "expected a JSON text frame {\"type\": \"response.create\", ...}"}))
        return
    body = {k: v for k, v in frame.items() if k != "type"}
    ex: Exchange | None = None
    try:
        request = parse_responses(dump(body), body, check_items=False)
        state.stats.wire(WIRE, request.model, requests=1, websocket_requests=1)
        prewarm = body.get("generate") is False
        ex = await prepare(state, request, client, salt, fit=not prewarm)
        if prewarm and ex.full is not None:
            await _prewarm(state, ws, ex)
            log_done(ex, started, 200, prewarm=True, transport="websocket")
            return
        upstream, raw, data = await open_upstream(state, ex, upstream_headers, "",
                                                  stream=True, client_headers=client)
        if raw is not None:
            error = data.get("error") if isinstance(data, dict) else None
            if not isinstance(error, dict):
                error = {"type": "upstream_error", "code": "upstream_error",
                         "message": raw.decode("utf-8", "replace")[:300]}
            await ws.send_text(error_frame(upstream.status_code, error,
                                           response_headers(upstream, keep_length=False)))
            log_done(ex, started, upstream.status_code, upstream_error=True,
                     transport="websocket")
            return
        if ex.offer_recall:
            await _with_recall(state, ws, ex, upstream, upstream_headers)
        elif not upstream.headers.get("content-type", "").startswith("text/event-stream"):
            answer = json.loads(await upstream.aread())
            await upstream.aclose()
            if isinstance(answer, dict):
                await ws.send_text(json.dumps({"type": "response.completed",
                                               "response": answer}, ensure_ascii=False))
                await record(state, ex, answer)
        else:
            async with contextlib.aclosing(upstream_events(upstream, ex, state)) as stream:
                async for _, events in stream:
                    for _, data_text in events:
                        await ws.send_text(data_text)
        log_done(ex, started, upstream.status_code, transport="websocket")
    except ProxyError as exc:
        if exc.status == 400:
            state.stats.bump("bad_requests")
        await ws.send_text(_proxy_error(exc))
        if ex is not None:
            log_done(ex, started, exc.status, error=exc.code or exc.type, transport="websocket")
    except (json.JSONDecodeError, UnicodeDecodeError):
        await ws.send_text(error_frame(502, {
            "type": "upstream_error", "code": "upstream_bad_response",
            "message": "the upstream model server sent an answer that is not valid JSON"}))
    finally:
        if ex is not None:
            await close(ex)


async def _with_recall(state: ProxyParts, ws: WebSocket, ex: Exchange,
                       upstream: httpx.Response, headers: list[tuple[str, str]]) -> None:
    """Relay a response whose request offered ``ctxstack_recall`` (see the module doc)."""
    run = await recall_run(state, ex)

    async def open_next(body: dict[str, Any]) -> httpx.Response:
        state.stats.bump("forwarded")
        state.stats.wire(WIRE, ex.request.model, forwarded=1)
        return await state.upstream.open("POST", "responses", query="", headers=headers,
                                         content=dump(body))

    if not upstream.headers.get("content-type", "").startswith("text/event-stream"):
        _, first = await read_error(upstream)
        if not isinstance(first, dict):
            raise json.JSONDecodeError("not a response object", "", 0)
        try:
            answer, _ = await answer_json(first, run, open_next)
        except RoundError as exc:
            error = exc.data.get("error") if isinstance(exc.data, dict) else None
            await ws.send_text(error_frame(exc.response.status_code, error if isinstance(
                error, dict) else {"type": "upstream_error", "code": "upstream_error",
                                   "message": exc.raw.decode("utf-8", "replace")[:300]},
                response_headers(exc.response, keep_length=False)))
            state.stats.usage(WIRE, ex.request.model, run.usage, run.rounds)
            return
        await ws.send_text(json.dumps({"type": "response.completed", "response": answer},
                                      ensure_ascii=False))
        await record(state, ex, answer, usage=run.usage, rounds=run.rounds)
        return
    view = ClientStream()
    try:
        async with contextlib.aclosing(recall_events(upstream, run, open_next, view)) as events:
            async for event in events:
                await ws.send_text(json.dumps(event, ensure_ascii=False))
    finally:
        if view.final is not None:
            await record(state, ex, view.final, usage=run.usage, rounds=run.rounds)
        elif run.usage.calls:
            state.stats.usage(WIRE, ex.request.model, run.usage, run.rounds)
    ex.log["recall_rounds"] = run.rounds


async def _prewarm(state: ProxyParts, ws: WebSocket, ex: Exchange) -> None:
    body = ex.request.body
    response: dict[str, Any] = {
        "id": f"resp_ctxstack_{uuid.uuid4().hex}", "object": "response",
        "created_at": int(time.time()), "status": "in_progress", "error": None,
        "incomplete_details": None, "instructions": body.get("instructions"),
        "model": ex.request.model, "output": [], "parallel_tool_calls": True,
        "previous_response_id": ex.request.previous_id, "store": ex.request.store,
        "tool_choice": body.get("tool_choice", "auto"), "tools": body.get("tools") or [],
        "usage": None, "metadata": body.get("metadata") or {},
    }
    await ws.send_text(json.dumps({"type": "response.created", "sequence_number": 0,
                                   "response": response}, ensure_ascii=False))
    done = {**response, "status": "completed"}
    await ws.send_text(json.dumps({"type": "response.completed", "sequence_number": 1,
                                   "response": done}, ensure_ascii=False))
    await record(state, ex, done)
