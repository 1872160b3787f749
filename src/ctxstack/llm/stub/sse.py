"""Server-Sent Events written straight to ASGI (shared by the stub's wires)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from fastapi.responses import Response
from starlette.types import Receive, Scope, Send


class SSEResponse(Response):
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
