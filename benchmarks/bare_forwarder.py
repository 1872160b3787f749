"""A bare forwarder: the least an HTTP proxy can do, the baseline ``ctxstack proxy``'s added
latency is measured against (any wire: it forwards every ``/v1/`` path as is).

It reads the request body, sends it to the upstream with the same method, path, query
and content type over a pooled httpx client, and relays the answer (a JSON body in one
piece, a stream chunk by chunk). No parsing, no fitting, no database.

``--fixed`` serves instead a fixed upstream: every ``POST /v1/chat/completions``,
``/v1/messages`` (Anthropic) and ``/v1/responses`` gets the same small answer of its wire
without its body being parsed, so what a latency comparison measures is the proxies in
front of it, not how long the upstream takes to read a bigger or smaller request.

Run: ``python -m benchmarks.bare_forwarder --upstream http://127.0.0.1:8001/v1 --port N``
(or ``--fixed --port N``).
"""

from __future__ import annotations

import argparse
import contextlib
import socket
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

FORWARDED_HEADERS = ("content-type", "authorization", "accept", "x-api-key",
                     "anthropic-version", "anthropic-beta")
"""The request headers relayed (the credentials and versions of every wire)."""


def create_app(upstream: str) -> Starlette:
    # TCP_NODELAY as in ctxstack proxy: without it the body written after the headers
    # waits for the peer's delayed ACK (tens of ms), which no competent forwarder pays.
    transport = httpx.AsyncHTTPTransport(
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=200),
        socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])
    client = httpx.AsyncClient(timeout=600, transport=transport)
    base = upstream.rstrip("/")

    async def forward(request: Request) -> Response:
        headers = {k: v for k, v in request.headers.items()
                   if k.lower() in FORWARDED_HEADERS}
        url = f"{base}/{request.path_params['path']}"
        if request.url.query:
            url += f"?{request.url.query}"
        sent = client.build_request(request.method, url, headers=headers,
                                    content=await request.body())
        answer = await client.send(sent, stream=True)
        kept = {k: v for k, v in answer.headers.items()
                if k.lower() in ("content-type", "retry-after")}
        if not kept.get("content-type", "").startswith("text/event-stream"):
            # One write, as ctxstack proxy does for a small body of known length.
            try:
                raw = await answer.aread()
            finally:
                await answer.aclose()
            return Response(raw, status_code=answer.status_code, headers=kept)

        async def body() -> AsyncIterator[bytes]:
            async for chunk in answer.aiter_raw():
                yield chunk

        return StreamingResponse(body(), status_code=answer.status_code, headers=kept,
                                 background=BackgroundTask(answer.aclose))

    async def health(_: Request) -> Response:
        return JSONResponse({"status": "ok"})

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        yield
        await client.aclose()

    return Starlette(routes=[
        Route("/health", health),
        Route("/v1/{path:path}", forward, methods=["GET", "POST", "DELETE"]),
    ], lifespan=lifespan)


FIXED_ANSWER = {
    "id": "chatcmpl-fixed", "object": "chat.completion", "created": 0, "model": "fixed",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Noted: 3.2%."},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13},
}


FIXED_MESSAGE = {
    "id": "msg_fixed", "type": "message", "role": "assistant", "model": "fixed",
    "content": [{"type": "text", "text": "Noted: 3.2%."}], "stop_reason": "end_turn",
    "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 3},
}
FIXED_RESPONSE = {
    "id": "resp_fixed", "object": "response", "created_at": 0, "status": "completed",
    "model": "fixed", "output": [{
        "id": "msg_fixed", "type": "message", "status": "completed", "role": "assistant",
        "content": [{"type": "output_text", "text": "Noted: 3.2%.", "annotations": []}]}],
    "usage": {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
              "output_tokens": 3, "output_tokens_details": {"reasoning_tokens": 0},
              "total_tokens": 13},
}


def create_fixed_app() -> Starlette:
    def fixed(answer: dict[str, object]) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            await request.body()
            return JSONResponse(answer)

        return endpoint

    async def health(_: Request) -> Response:
        return JSONResponse({"status": "ok"})

    return Starlette(routes=[Route("/health", health),
                             Route("/v1/chat/completions", fixed(FIXED_ANSWER), methods=["POST"]),
                             Route("/v1/messages", fixed(FIXED_MESSAGE), methods=["POST"]),
                             Route("/v1/responses", fixed(FIXED_RESPONSE), methods=["POST"])])


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--upstream")
    parser.add_argument("--fixed", action="store_true")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    if not args.fixed and not args.upstream:
        parser.error("--upstream URL (or --fixed)")
    app = create_fixed_app() if args.fixed else create_app(args.upstream)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
