"""``POST /v1/responses``: the Responses wire over HTTP, JSON or Server-Sent Events.

auth → parse and validate (400 naming the field, before any upstream call) → expand,
fit, forward, retry once on overflow (:mod:`ctxstack.proxy.responses_exchange`) → the
answer with the ``x-ctxstack-*`` headers. A stream is relayed byte for byte as it
arrives (the proxy only reads along, to remember the response and count its usage); a
JSON answer is read whole and must be JSON (else 502). An upstream error goes back with
its status, body and headers.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator

import httpx
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from ctxstack.proxy.errors import ProxyError, error_body, upstream_bad_answer
from ctxstack.proxy.forwarding import error_passthrough, read_error, response_headers
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
from ctxstack.proxy.responses_request import parse_responses


async def responses_http(state: ProxyParts, request: Request) -> Response:
    """Answer one ``POST /v1/responses``."""
    started = time.perf_counter()
    state.stats.bump("requests")
    ex: Exchange | None = None
    try:
        salt = await state.auth.caller(request.headers)
        parsed = parse_responses(await request.body())
        state.stats.wire(WIRE, parsed.model, requests=1)
        client = {k.lower(): v for k, v in request.headers.items()}
        ex = await prepare(state, parsed, client, salt)
        headers = state.upstream.request_headers(request.headers.items())
        upstream, raw, data = await open_upstream(state, ex, headers, request.url.query,
                                                  stream=False, client_headers=client)
        extra = ex.headers()
        if raw is not None:
            log_done(ex, started, upstream.status_code, upstream_error=True)
            return error_passthrough(upstream, raw, extra, data)
        if upstream.headers.get("content-type", "").startswith("text/event-stream"):
            log_done(ex, started, upstream.status_code)
            return StreamingResponse(
                _relay(state, ex, upstream), status_code=upstream.status_code,
                headers=response_headers(upstream, extra, keep_length=False))
        body, answer = await read_error(upstream)
        if answer is None:
            raise upstream_bad_answer()
        if isinstance(answer, dict):
            await record(state, ex, answer)
        log_done(ex, started, upstream.status_code)
        return Response(body, status_code=upstream.status_code,
                        headers=response_headers(upstream, extra, keep_length=False))
    except ProxyError as exc:
        if exc.status == 400:
            state.stats.bump("bad_requests")
        elif exc.status == 401:
            state.stats.bump("unauthorized")
        elif exc.code == "upstream_unreachable":
            state.stats.bump("unreachable")
        elif exc.code == "upstream_timeout":
            state.stats.bump("timeouts")
        if ex is not None:
            log_done(ex, started, exc.status, error=exc.code or exc.type)
        return exc.response()
    finally:
        if ex is not None:
            await close(ex)


async def _relay(state: ProxyParts, ex: Exchange, upstream: httpx.Response,
                 ) -> AsyncIterator[bytes]:
    try:
        async with contextlib.aclosing(upstream_events(upstream, ex, state)) as stream:
            async for chunk, _ in stream:
                yield chunk
    except ProxyError as exc:
        # The client's SDK raises an ``error`` event; the bytes already sent stay sent.
        event = {"type": "error", "code": exc.code, "message": exc.message, "param": None,
                 **error_body(exc.message, type=exc.type, code=exc.code)}
        yield f"\n\nevent: error\ndata: {json.dumps(event)}\n\n".encode()
