"""The FastAPI application: API routes, the web page, error mapping, security headers.

``create_app(settings)`` builds an app whose lifespan connects the database, the file
store, the inject queue and the model clients (:mod:`ctxstack.server.state`); the schema
must already be migrated (``ctxstack serve`` does it before starting workers).
``app_from_env()`` is the factory uvicorn workers import.

Errors always answer JSON ``{"detail": "<what was wrong>"}``: request validation → 422
naming the field; ctxstack's errors → their status (not found → 404, bad input → 400,
rejected upload → 415/413, busy conversation or no running turn → 409). A failing
dependency (database, Redis, model) is classified by :mod:`ctxstack.server.failures` and
answered 503 with a generic message naming only the dependency — never a URL, host, user
or key; the details go to the server log. Nothing else leaks: an unexpected exception is
logged and answered 500 with a generic message.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib import resources
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ctxstack import __version__
from ctxstack._http_guard import FailureCounter, GuardPolicy, RequestGuard, failure_counter
from ctxstack.errors import ConfigError, CtxstackError, InputError, MessageError
from ctxstack.server.errors import NoRunningTurnError, TurnBusyError
from ctxstack.server.failures import classify
from ctxstack.server.habit_routes import router as habit_router
from ctxstack.server.health import LoopLagProbe
from ctxstack.server.health import router as health_router
from ctxstack.server.routes import router
from ctxstack.server.settings import Settings
from ctxstack.server.sse import openapi_schema as sse_openapi_schema
from ctxstack.server.state import ServiceState, close_state, open_state
from ctxstack.store.db import SessionFactory
from ctxstack.store.errors import FileRejectedError, NotFoundError, StorageError

log = logging.getLogger(__name__)

STATIC_DIR = Path(str(resources.files("ctxstack.server") / "static"))

_CSP = (
    "default-src 'self'; img-src 'self' blob: data:; style-src 'self'; script-src 'self'; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)


def _status_for(exc: CtxstackError) -> int:
    if isinstance(exc, NotFoundError):
        return 404
    if isinstance(exc, FileRejectedError):
        return {"type": 415, "size": 413}.get(exc.reason, 400)
    if isinstance(exc, TurnBusyError | NoRunningTurnError):
        return 409
    if isinstance(exc, InputError | MessageError):
        return 400
    if isinstance(exc, StorageError):
        return 503
    if isinstance(exc, ConfigError):
        return 500
    return 500


def _field_message(errors: list[dict[str, object]]) -> str:
    parts = []
    for err in errors:
        raw = list(err.get("loc", ()))  # type: ignore[call-overload]
        if raw and raw[0] in ("body", "query", "path", "header", "cookie"):
            raw = raw[1:]  # where the field was sent, not its name
        loc = [str(x) for x in raw]
        msg = str(err.get("msg", "invalid"))
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, "):]
        parts.append(f"{'.'.join(loc)}: {msg}" if loc else msg)
    return "; ".join(dict.fromkeys(parts)) or "invalid request"


class SecurityHeaders:
    """No sniffing, no framing, and a strict CSP (our pages load nothing from elsewhere).

    A plain ASGI middleware (not ``BaseHTTPMiddleware``): it must not buffer or re-wrap the
    SSE stream, or a client disconnect would no longer reach the turn.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers.setdefault("X-Content-Type-Options", "nosniff")
                headers.setdefault("Referrer-Policy", "no-referrer")
                headers.setdefault("Content-Security-Policy", _CSP)
                headers.setdefault("X-Frame-Options", "DENY")
            await send(message)

        await self.app(scope, receive, send_with_headers)


UPLOAD_PATH = "/api/files"
MULTIPART_OVERHEAD = 64 * 1024
"""What an upload's body may hold besides its image (multipart framing, the name)."""


def request_policy(settings: Settings, failures: FailureCounter | None) -> GuardPolicy:
    """The checks every request passes (:mod:`ctxstack._http_guard`): in ``--no-auth``
    mode only loopback hosts and same-site writes; bodies up to ``max_body_bytes`` (an
    upload: its image limit plus the multipart framing); failed tokens throttled."""
    upload_limit = settings.max_upload_bytes + MULTIPART_OVERHEAD

    def body_limit(path: str) -> int:
        return upload_limit if path == UPLOAD_PATH else settings.max_body_bytes

    return GuardPolicy(local_only=settings.auth == "none", body_limit=body_limit,
                       failures=failures, extra_hosts=settings.allowed_hosts)


def _refusal(scope: Scope, status: int, message: str, code: str,
             headers: dict[str, str]) -> JSONResponse:
    """A guard's refusal in the service's error shape (``{"detail": ...}``)."""
    return JSONResponse({"detail": message}, status_code=status, headers=headers or None)


def _document_sse(app: FastAPI) -> None:
    """Put the SSE event payload schemas (``POST /api/chat``) in the OpenAPI document."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            spec = build()
            _, defs = sse_openapi_schema()
            spec.setdefault("components", {}).setdefault("schemas", {}).update(defs)
            # The turn answers with an event stream only (FastAPI adds a JSON default).
            chat_ok = spec["paths"]["/api/chat"]["post"]["responses"]["200"]["content"]
            chat_ok.pop("application/json", None)
        return app.openapi_schema or {}

    app.openapi = openapi  # type: ignore[method-assign]


def _freeze_long_lived() -> None:
    """Move every object alive once the app started (modules, settings, clients, pools:
    they live as long as the process) to the collector's permanent generation
    (:func:`gc.freeze`), so full collections stop walking them — under load those walks
    were the event loop's longest stalls (100-300 ms, issue 15). Not for a process that
    builds many apps (tests): what they drop later would never be collected."""
    gc.collect()
    gc.freeze()


def _started(app: FastAPI, state: ServiceState, *, freeze_gc: bool) -> LoopLagProbe:
    """Attach the opened state and a running loop-lag probe to ``app``."""
    app.state.ctxstack = state
    if freeze_gc:
        _freeze_long_lived()
    probe = LoopLagProbe()
    app.state.loop_lag = probe
    probe.start()
    log.info("ctxstack service ready (model %s, auth %s)", state.llms.model_name,
             state.settings.auth)
    return probe


def create_app(settings: Settings | None = None, *,
               session_factory: SessionFactory | None = None,
               freeze_gc: bool = False) -> FastAPI:
    """Build the service (see the module docstring). ``settings`` default to the env;
    ``freeze_gc``: see :func:`_freeze_long_lived` (for a process serving only this app)."""
    settings = settings or Settings.from_env()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state = await open_state(settings, factory=session_factory)
        probe = _started(app, state, freeze_gc=freeze_gc)
        try:
            yield
        finally:
            await probe.stop()
            await close_state(state)
            if failures is not None:
                await failures.close()

    app = FastAPI(
        title="ctxstack chat service",
        version=__version__,
        summary="Chat with an agent whose context is kept inside the model's window.",
        lifespan=lifespan,
        # FastAPI's own /docs loads Swagger UI from a CDN; the service must work offline,
        # so /docs is a small page of ours that reads /openapi.json.
        docs_url=None,
        redoc_url=None,
    )
    failures = (failure_counter(settings.redis_url, limit=settings.auth_failure_limit,
                                window=settings.auth_failure_window)
                if settings.auth == "token" else None)
    app.add_middleware(RequestGuard, policy=request_policy(settings, failures),
                       error=_refusal)
    app.add_middleware(SecurityHeaders)
    app.include_router(router)
    app.include_router(habit_router)
    app.include_router(health_router)
    _document_sse(app)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [dict(e) for e in exc.errors()]
        safe = [{"loc": list(e.get("loc", ())), "msg": str(e.get("msg", "")),
                 "type": str(e.get("type", ""))} for e in errors]
        return JSONResponse({"detail": _field_message(errors), "errors": safe}, status_code=422)

    @app.exception_handler(CtxstackError)
    async def _ctxstack_error(request: Request, exc: CtxstackError) -> JSONResponse:
        failure = classify(exc)
        if failure is not None:
            log.error("%s %s: %s unavailable: %s: %s", request.method, request.url.path,
                      failure.dependency, type(exc).__name__, getattr(exc, "detail", exc))
            return JSONResponse({"detail": failure.message}, status_code=failure.status)
        status = _status_for(exc)
        if status >= 500:
            log.error("%s %s failed: %s: %s", request.method, request.url.path,
                      type(exc).__name__, exc)
        return JSONResponse({"detail": str(exc)}, status_code=status)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse({"detail": str(exc.detail)}, status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        failure = classify(exc)
        if failure is not None:
            log.error("%s %s: %s unavailable: %s: %s", request.method, request.url.path,
                      failure.dependency, type(exc).__name__, exc)
            return JSONResponse({"detail": failure.message}, status_code=failure.status)
        log.exception("%s %s: unexpected error", request.method, request.url.path)
        return JSONResponse({"detail": "internal error (see the server log)"}, status_code=500)

    @app.get("/", include_in_schema=False)
    async def index() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html", headers={"Cache-Control": "no-cache"})

    @app.get("/docs", include_in_schema=False)
    async def docs() -> FileResponse:
        return FileResponse(STATIC_DIR / "docs.html", headers={"Cache-Control": "no-cache"})

    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    return app


def app_from_env() -> FastAPI:
    """The app configured from the environment (uvicorn's ``--factory`` entry point)."""
    return create_app(Settings.from_env(), freeze_gc=True)
