"""``POST /v1/responses``: the Responses wire over HTTP, JSON or Server-Sent Events.

auth → parse and validate (400 naming the field, before any upstream call) → expand,
fit, forward, retry once on overflow (:mod:`ctxstack.proxy.responses_exchange`) → the
answer with the ``x-ctxstack-*`` headers. A stream is relayed byte for byte as it
arrives (the proxy only reads along, to remember the response and count its usage); a
JSON answer is read whole and must be JSON (else 502). An upstream error goes back with
its status, body and headers.

When the forwarded ``tools`` carry ``ctxstack_recall``, the answer goes through the
recall rounds (:mod:`ctxstack.proxy.responses_rounds`): the JSON answer, or the stream
re-framed event by event, never shows the tool; ``x-ctxstack-usage`` says the ``usage``
is a sum (``sum; upstream_calls=N`` on JSON, ``sum`` on a stream — the count is not
known when the headers go).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from ctxstack.proxy.chat_wire import RecallRun
from ctxstack.proxy.errors import ProxyError, error_body, upstream_bad_answer
from ctxstack.proxy.forwarding import error_passthrough, read_error, response_headers
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
from ctxstack.proxy.responses_recall import WIRE as RECALL
from ctxstack.proxy.responses_request import dump, parse_responses
from ctxstack.proxy.responses_rounds import (
    ClientStream,
    RoundError,
    answer_json,
    recall_events,
    sse,
)
from ctxstack.tokens._counter import effective_budget


async def responses_http(state: ProxyParts, request: Request) -> Response:
    """Answer one ``POST /v1/responses``."""
    started = time.perf_counter()
    state.stats.bump("requests")
    ex: Exchange | None = None
    try:
        salt = await state.auth.caller(request.headers)
        parsed = parse_responses(await request.body(), check_items=False)
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
        is_sse = upstream.headers.get("content-type", "").startswith("text/event-stream")
        if ex.offer_recall:
            return await _with_recall(state, ex, upstream, headers, request.url.query,
                                      extra, started, is_sse)
        extra[USAGE_HEADER] = "sum" if is_sse else "sum; upstream_calls=1"
        if is_sse:
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
        state.stats.failed(exc)
        if ex is not None:
            log_done(ex, started, exc.status, error=exc.code or exc.type)
        return exc.response()
    finally:
        if ex is not None:
            await close(ex)


async def recall_run(state: ProxyParts, ex: Exchange) -> RecallRun:
    """The recall loop's state for an exchange that offered the tool."""
    assert ex.fit is not None
    counter = await state.fitter.counters.aget(ex.request.model)
    return RecallRun(RECALL, state.sessions.archive(ex.session, 1), counter,
                     ex.forward_body(), fits=effective_budget(ex.budget, counter),
                     tokens=ex.fit.tokens)


async def _with_recall(state: ProxyParts, ex: Exchange, upstream: httpx.Response,
                       headers: list[tuple[str, str]], query: str, extra: dict[str, str],
                       started: float, is_sse: bool) -> Response:
    """The answer of a request that offered ``ctxstack_recall`` (see the module doc)."""
    run = await recall_run(state, ex)

    async def open_next(body: dict[str, Any]) -> httpx.Response:
        state.stats.bump("forwarded")
        state.stats.wire(WIRE, ex.request.model, forwarded=1)
        return await state.upstream.open("POST", "responses", query=query, headers=headers,
                                         content=dump(body))

    if is_sse:
        log_done(ex, started, upstream.status_code)
        return StreamingResponse(
            _relay_rounds(state, ex, upstream, run, open_next),
            status_code=upstream.status_code,
            headers=response_headers(upstream, {**extra, USAGE_HEADER: "sum"},
                                     keep_length=False))
    _, first = await read_error(upstream)
    if not isinstance(first, dict):
        raise upstream_bad_answer()
    try:
        answer, last = await answer_json(first, run, open_next)
    except RoundError as exc:
        state.stats.upstream_error(exc.response.status_code)
        state.stats.usage(WIRE, ex.request.model, run.usage, run.rounds)
        log_done(ex, started, exc.response.status_code, upstream_error=True,
                 recall_rounds=run.rounds)
        if exc.data is None and exc.response.status_code < 400:
            raise upstream_bad_answer() from None
        return error_passthrough(exc.response, exc.raw, extra, exc.data)
    await record(state, ex, answer, usage=run.usage, rounds=run.rounds)
    log_done(ex, started, (last or upstream).status_code, recall_rounds=run.rounds)
    return Response(dump(answer), status_code=(last or upstream).status_code,
                    headers=response_headers(last or upstream, {
                        **extra, USAGE_HEADER: f"sum; upstream_calls={run.usage.calls}"},
                        keep_length=False))


async def _relay_rounds(state: ProxyParts, ex: Exchange, upstream: httpx.Response,
                        run: RecallRun, open_next: Any) -> AsyncIterator[bytes]:
    view = ClientStream()
    try:
        async with contextlib.aclosing(recall_events(upstream, run, open_next, view)) as events:
            async for event in events:
                yield sse(event)
    except ProxyError as exc:
        yield _error_event(exc)
    finally:
        if view.final is not None:
            await record(state, ex, view.final, usage=run.usage, rounds=run.rounds)
        elif run.usage.calls:
            state.stats.usage(WIRE, ex.request.model, run.usage, run.rounds)


def _error_event(exc: ProxyError) -> bytes:
    # The client's SDK raises an ``error`` event; the bytes already sent stay sent.
    event = {"type": "error", "code": exc.code, "message": exc.message, "param": None,
             **error_body(exc.message, type=exc.type, code=exc.code)}
    return f"\n\nevent: error\ndata: {json.dumps(event)}\n\n".encode()


async def _relay(state: ProxyParts, ex: Exchange, upstream: httpx.Response,
                 ) -> AsyncIterator[bytes]:
    try:
        async with contextlib.aclosing(upstream_events(upstream, ex, state)) as stream:
            async for chunk, _ in stream:
                yield chunk
    except ProxyError as exc:
        yield _error_event(exc)
