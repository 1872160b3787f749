"""The stub's request recorder, readable over HTTP: what exactly did the stub receive?

Tests of a process in front of the stub (``ctxstack proxy``) need to see what reached
it — every route, the headers, the body *bytes* — when the stub runs as a separate
``ctxstack stub-llm`` process. :func:`install_recording` wraps the app in an ASGI layer
that keeps the last ``limit`` requests and adds two routes:

* ``GET /_stub/requests`` → ``{"requests": [{"method", "path", "query", "headers",
  "body", "json"}, …]}`` oldest first; ``body`` is the raw body decoded as UTF-8
  (``json`` its parsed value, or null when it is not JSON); header names are lower case;
* ``DELETE /_stub/requests`` → forget them.

Requests to ``/_stub/`` itself are not recorded.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from typing import Any

from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ctxstack.messages._model import scrub_surrogates

DEFAULT_LIMIT = 1000
PREFIX = "/_stub/"


class RequestLog:
    """The recorded requests (thread-safe; bounded)."""

    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        self._items: deque[dict[str, Any]] = deque(maxlen=limit)
        self._lock = threading.Lock()

    def add(self, item: dict[str, Any]) -> None:
        with self._lock:
            self._items.append(item)

    def items(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._items)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


class _Recorder:
    def __init__(self, app: ASGIApp, log: RequestLog) -> None:
        self.app = app
        self.log = log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith(PREFIX):
            await self.app(scope, receive, send)
            return
        # Read the whole body first (the stub's bodies are small): a route that never
        # reads it (a GET, a 404) must still be recorded with it, and after the response
        # the server would only answer "disconnected".
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        raw = b"".join(chunks)
        try:
            # JSON may escape a lone surrogate (``"\ud800"``), which no JSON answer can
            # carry: recorded as U+FFFD, so reading the record never fails.
            parsed = scrub_surrogates(json.loads(raw)) if raw else None
        except (ValueError, RecursionError):
            parsed = None
        self.log.add({
            "method": scope["method"], "path": scope["path"],
            "query": scope.get("query_string", b"").decode("latin-1"),
            "headers": {k.decode("latin-1").lower(): v.decode("latin-1")
                        for k, v in scope["headers"]},
            "body": raw.decode("utf-8", "replace"), "json": parsed,
        })
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": raw, "more_body": False}

        await self.app(scope, replay, send)


def install_recording(app: FastAPI, limit: int = DEFAULT_LIMIT) -> RequestLog:
    """Record ``app``'s requests and serve them at ``/_stub/requests`` (see module doc)."""
    log = RequestLog(limit)

    @app.get("/_stub/requests")
    async def recorded() -> dict[str, Any]:
        return {"requests": log.items()}

    @app.delete("/_stub/requests")
    async def forget() -> dict[str, Any]:
        log.clear()
        return {"requests": []}

    app.add_middleware(_Recorder, log=log)
    return log
