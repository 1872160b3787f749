"""The proxy's FastAPI app: ``/v1/chat/completions`` guarded, every other ``/v1/`` route
passed through, ``/ctxstack/stats`` and ``/ctxstack/health`` its own.

A chat completion goes: auth → parse and validate (400 before any upstream call) → the
model's budget → fit (:mod:`ctxstack.proxy.fitting`) → forward → relay the answer (streams
as they arrive), with the ``x-ctxstack-*`` headers. An upstream error passes through with its
status and body, except a context-overflow error, which triggers one compaction to a
smaller target and one retry. One structured log line per chat completion.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import httpx
from fastapi import FastAPI, Request
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse, Response

from ctxstack import LLM
from ctxstack.llm.classify import is_context_overflow
from ctxstack.proxy.anthropic import routes as anthropic_routes
from ctxstack.proxy.auth import TokenAuth
from ctxstack.proxy.budgets import ModelBudgets, Summarizers
from ctxstack.proxy.checkpoints import CheckpointStore
from ctxstack.proxy.counting import ModelCounters
from ctxstack.proxy.errors import ProxyError, error_response
from ctxstack.proxy.fitting import Fit, Fitter
from ctxstack.proxy.forwarding import Upstream, error_passthrough, read_error, relay, relay_answer
from ctxstack.proxy.request import CompletionRequest, parse_request
from ctxstack.proxy.settings import ProxySettings
from ctxstack.proxy.stats import SharedStats, StatsRecorder, fit_headers, log_event
from ctxstack.store import SessionFactory, create_engine_from_url, session_factory, upgrade
from ctxstack.tokens import TokenCounter

PASSTHROUGH_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


class ProxyState:
    """Everything one proxy app holds (built in the lifespan, closed after it)."""

    def __init__(self, settings: ProxySettings, factory: SessionFactory,
                 counter: TokenCounter | None, transport: httpx.AsyncBaseTransport | None,
                 ) -> None:
        self.settings = settings
        self.factory = factory
        self.stats = StatsRecorder()
        self.shared_stats = SharedStats(self.stats, factory,
                                        interval=settings.stats_flush_interval)
        self.upstream = Upstream(settings.upstream, api_key=settings.upstream_api_key,
                                 forward_auth=settings.forward_auth, timeout=settings.timeout,
                                 connect_timeout=settings.connect_timeout, transport=transport)
        self.auth = TokenAuth(factory, required=settings.auth == "token",
                              forward_auth=settings.forward_auth)
        self.budgets = ModelBudgets(factory, settings.budget_env)
        self.summarizers = Summarizers(settings)
        store = CheckpointStore(factory, max_rows=settings.max_checkpoints,
                                ttl_seconds=settings.checkpoint_ttl)
        tokenizer = ((settings.tokenizer_model, settings.tokenizer_path)
                     if settings.tokenizer_model and settings.tokenizer_path else None)
        self.fitter = Fitter(ModelCounters(fixed=counter, tokenizer=tokenizer), store,
                             summary_timeout=settings.summary_timeout)
        self.anthropic = anthropic_routes.AnthropicWire(settings, factory, transport)

    async def aclose(self) -> None:
        await self.shared_stats.aclose()
        await self.budgets.aclose()
        await self.upstream.aclose()
        await self.anthropic.aclose()
        await self.summarizers.aclose()


def create_app(settings: ProxySettings, *, migrate: bool = False,
               counter: TokenCounter | None = None,
               transport: httpx.AsyncBaseTransport | None = None) -> FastAPI:
    """The proxy app for ``settings``.

    Args:
        migrate: apply database migrations on start (the CLI does it once before starting
            workers instead).
        counter: one token counter for every model (default: per requested model name,
            exact when its tokenizer is known offline — :mod:`ctxstack.proxy.counting`).
        transport: an httpx transport for the upstream (tests; default: the network).
    """
    holder: dict[str, ProxyState] = {}

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        engine = create_engine_from_url(settings.database_url, schema=settings.database_schema)
        if migrate:
            await upgrade(engine)
        state = ProxyState(settings, session_factory(engine), counter, transport)
        holder["state"] = state
        app.state.proxy = state
        state.shared_stats.start()
        try:
            yield
        finally:
            await state.aclose()
            await engine.dispose()

    app = FastAPI(title="ctxstack proxy", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)

    def st() -> ProxyState:
        return holder["state"]

    # Plain Starlette routes (``add_route``): no dependency injection or body validation
    # to pay for on every request; the handlers read what they need themselves.
    async def health(_: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def stats(request: Request) -> Response:
        try:
            await st().auth.caller(request.headers)
        except ProxyError as exc:
            return exc.response()
        return JSONResponse((await st().shared_stats.totals()).model_dump())

    async def chat_completions(request: Request) -> Response:
        return await _chat(st(), request)

    async def passthrough(request: Request) -> Response:
        state = st()
        if "anthropic-version" in request.headers:  # an Anthropic client's other routes
            return await anthropic_routes.passthrough(state, request)
        try:
            await state.auth.caller(request.headers)
            state.stats.bump("passthrough")
            path = request.path_params["path"]
            upstream = await state.upstream.open(
                request.method, path, query=request.url.query,
                headers=state.upstream.request_headers(request.headers.items()),
                content=await request.body())
            log_event("passthrough", method=request.method, path=f"/v1/{path}",
                      status=upstream.status_code)
            return await relay(upstream)
        except ProxyError as exc:
            _count_error(state, exc)
            log_event("passthrough", method=request.method, status=exc.status,
                      error=exc.code or exc.type)
            return exc.response()

    app.add_exception_handler(StarletteHTTPException, _not_routed)
    app.add_route("/ctxstack/health", health, methods=["GET"])
    app.add_route("/ctxstack/stats", stats, methods=["GET"])
    app.add_route("/v1/chat/completions", chat_completions, methods=["POST"])
    anthropic_routes.add_routes(app, st)  # /v1/messages, /v1/messages/count_tokens
    app.add_route("/v1/{path:path}", passthrough, methods=PASSTHROUGH_METHODS)
    return app


async def _not_routed(_: Request, exc: Exception) -> Response:
    # The proxy's own 404 / 405 (a path outside /v1/, GET on chat completions) in the
    # error shape every OpenAI SDK reads, not Starlette's {"detail": ...}.
    status = exc.status_code if isinstance(exc, StarletteHTTPException) else 500
    detail = exc.detail if isinstance(exc, StarletteHTTPException) else "internal error"
    message = {404: "no such route on this proxy (it serves /v1/…, /ctxstack/health "
                    "and /ctxstack/stats)",
               405: "method not allowed on this route"
               }.get(status, str(detail))
    return error_response(status, message, code="not_found" if status == 404 else None)


async def _chat(state: ProxyState, request: Request) -> Response:
    started = time.perf_counter()
    state.stats.bump("requests")
    log: dict[str, Any] = {}
    try:
        salt = await state.auth.caller(request.headers)
        chat = parse_request(await request.body())
        log.update(model=chat.model, stream=chat.stream, messages=len(chat.conversation))
        model_budget = await state.budgets.get(chat.model)
        budget = model_budget.usable_input_tokens
        summarizer, own = state.summarizers.get(chat.model, model_budget,
                                                request.headers.get("authorization"))
        try:
            fit = await state.fitter.fit(chat, budget, salt=salt, summarizer=summarizer)
            state.stats.fitted(fit)
            response = await _forward(state, request, chat, fit, budget, salt, summarizer,
                                      started, log)
        finally:
            if own:
                await summarizer.aclose()
    except ProxyError as exc:
        _count_error(state, exc)
        log_event("chat_completion", status=exc.status, error=exc.code or exc.type, **log)
        return exc.response()
    return response


async def _forward(state: ProxyState, request: Request, chat: CompletionRequest, fit: Fit,
                   budget: int, salt: str, summarizer: LLM, started: float,
                   log: dict[str, Any]) -> Response:
    """Send the fitted request; on an overflow error compact smaller and retry once."""
    headers = state.upstream.request_headers(request.headers.items())
    query = request.url.query
    retried = False
    while True:
        body = chat.raw if fit.messages is None else chat.with_messages(fit.messages)
        added_ms = (time.perf_counter() - started) * 1000
        state.stats.bump("forwarded")
        upstream = await state.upstream.open("POST", "chat/completions", query=query,
                                             headers=headers, content=body)
        extra = fit_headers(fit)
        _log_fit(fit, log, added_ms, retried)
        if upstream.status_code < 400:
            answer = await relay_answer(upstream, extra)
            log_event("chat_completion", status=upstream.status_code, **log)
            return answer
        raw, data = await read_error(upstream)
        state.stats.upstream_error(upstream.status_code)
        if retried or not is_context_overflow(upstream.status_code, data):
            log_event("chat_completion", status=upstream.status_code, upstream_error=True, **log)
            return error_passthrough(upstream, raw, extra, data)
        retried = True
        state.stats.bump("overflow_retries")
        target = int(min(budget, fit.tokens) * state.settings.overflow_retry_fill)
        again = await state.fitter.refit(chat, target, salt=salt, summarizer=summarizer)
        state.stats.fitted(again)
        fit = dataclasses.replace(
            again, summarizer_usage=fit.summarizer_usage + again.summarizer_usage)


def _log_fit(fit: Fit, log: dict[str, Any], added_ms: float, retried: bool) -> None:
    log.update(method=fit.method, original=fit.original, kept=fit.kept,
               summarized=fit.summarized, tokens_estimated=fit.tokens, counter=fit.counter,
               tokens_before=fit.tokens_before, summarizer_calls=fit.summarizer_usage.calls,
               summarizer_tokens=fit.summarizer_usage.total_tokens,
               checkpoint_saved=fit.checkpoint_saved, overflow_retry=retried,
               proxy_ms=round(added_ms, 2))
    if fit.reason:
        log["fallback"] = fit.reason.split(":")[0]


def _count_error(state: ProxyState, exc: ProxyError) -> None:
    if exc.status == 400:
        state.stats.bump("bad_requests")
    elif exc.status == 401:
        state.stats.bump("unauthorized")
    elif exc.code == "upstream_unreachable":
        state.stats.bump("unreachable")
    elif exc.code == "upstream_timeout":
        state.stats.bump("timeouts")


def app_from_env(env: Mapping[str, str] | None = None) -> FastAPI:
    """The app configured from the environment (what ``ctxstack proxy`` workers run).

    ``CTXSTACK_PROXY_LOG_LEVEL`` sets the ``ctxstack.proxy`` logger's level; a worker
    process started by uvicorn has no logging set up, so a handler is added there.

    Raises:
        ConfigError: the settings are incomplete or invalid (the message says which).
    """
    env = os.environ if env is None else env
    level = env.get("CTXSTACK_PROXY_LOG_LEVEL", "").strip().upper()
    if level in ("CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG"):
        logger = logging.getLogger("ctxstack.proxy")
        logger.setLevel(level)
        if not logging.getLogger().handlers and not logger.handlers:
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
            logger.addHandler(handler)
    return create_app(ProxySettings.from_env(env))
