"""The proxy's FastAPI app: ``/v1/chat/completions`` and ``/v1/responses`` (HTTP and
WebSocket, :mod:`ctxstack.proxy.responses_route`, :mod:`ctxstack.proxy.responses_socket`)
guarded, every other ``/v1/`` route passed through, ``/ctxstack/stats`` and
``/ctxstack/health`` its own.

A chat completion goes: auth → parse and validate (400 before any upstream call) → the
model's budget → fit (:mod:`ctxstack.proxy.fitting`) → forward → relay the answer (streams
as they arrive), with the ``x-ctxstack-*`` headers. An upstream error passes through with its
status and body, except a context-overflow error, which triggers one compaction to a
smaller target and one retry. One structured log line per chat completion.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import httpx
from fastapi import FastAPI, Request, WebSocket
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import WebSocketRoute

from ctxstack import LLM
from ctxstack._http_guard import RequestGuard
from ctxstack.llm.classify import is_context_overflow
from ctxstack.proxy.anthropic import routes as anthropic_routes
from ctxstack.proxy.auth import TokenAuth
from ctxstack.proxy.budgets import ModelBudgets, Summarizers
from ctxstack.proxy.chat_wire import (
    ChatRecallWire,
    PrefixSummarizer,
    RecallRun,
    chat_usage,
    dumps_body,
    stream_with_recall,
)
from ctxstack.proxy.checkpoints import CheckpointStore
from ctxstack.proxy.counting import ModelCounters
from ctxstack.proxy.errors import ProxyError, error_response, upstream_bad_answer
from ctxstack.proxy.fitting import Fit, Fitter
from ctxstack.proxy.forwarding import (
    ERROR_BODY_LIMIT,
    Upstream,
    error_passthrough,
    forwarded_body,
    read_error,
    relay,
    relay_answer,
    response_headers,
)
from ctxstack.proxy.guard import failures_for, refusal, request_policy
from ctxstack.proxy.recall import USAGE_HEADER, UpstreamUsage
from ctxstack.proxy.request import CompletionRequest, parse_request
from ctxstack.proxy.responses_chains import ChainStore
from ctxstack.proxy.responses_route import responses_http
from ctxstack.proxy.responses_socket import responses_socket
from ctxstack.proxy.responses_view import ResponsesConversation
from ctxstack.proxy.scales import TokenScales
from ctxstack.proxy.session_fit import SessionFitter
from ctxstack.proxy.sessions import (
    RedisLease,
    SessionStore,
    SingleFlight,
    owner_salt,
    session_key,
)
from ctxstack.proxy.settings import ProxySettings
from ctxstack.proxy.stats import SharedStats, StatsRecorder, fit_headers, log_event
from ctxstack.proxy.unit_memo import UnitMemo
from ctxstack.store import SessionFactory, create_engine_from_url, session_factory, upgrade
from ctxstack.tokens import TokenCounter
from ctxstack.tokens._counter import effective_budget

logger = logging.getLogger("ctxstack.proxy")
WIRE = "chat"
"""This module's wire in the stats (:attr:`ProxyStats.by_model`)."""
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
        self.scales = TokenScales(self.fitter.counters, enabled=settings.learn_scale)
        """Per model counted by estimate: the upstream's count ÷ the estimate, learnt."""
        self.sessions = SessionStore(factory, ttl_seconds=settings.checkpoint_ttl)
        flight_seconds = settings.summary_timeout * 2 + 10
        self.flight = SingleFlight(
            factory, lease_seconds=flight_seconds, wait_seconds=flight_seconds + 5,
            redis=RedisLease(settings.redis_url) if settings.redis_url else None)
        self.session_fitter = SessionFitter(self.fitter, self.sessions, self.flight)
        self.chat_wire = ChatRecallWire()
        self.chains = ChainStore(factory, ttl_seconds=settings.checkpoint_ttl)
        """The Responses conversations behind ``previous_response_id``."""
        self.responses_units: UnitMemo[ResponsesConversation] = UnitMemo()
        """Recent Responses conversations' units per owner (a resent input read once)."""
        self.anthropic = anthropic_routes.AnthropicWire(settings, factory, transport)

    async def aclose(self) -> None:
        await self.shared_stats.aclose()
        await self.budgets.aclose()
        await self.upstream.aclose()
        await self.anthropic.aclose()
        await self.flight.aclose()
        await self.summarizers.aclose()


def create_app(settings: ProxySettings, *, migrate: bool = False,
               counter: TokenCounter | None = None,
               transport: httpx.AsyncBaseTransport | None = None,
               freeze_gc: bool = False) -> FastAPI:
    """The proxy app for ``settings``.

    Args:
        migrate: apply database migrations on start (the CLI does it once before starting
            workers instead).
        freeze_gc: once started, move every object alive into the cyclic garbage
            collector's permanent generation (:func:`gc.freeze`) — what a process that
            serves only this app does (``ctxstack proxy`` workers, :func:`app_from_env`).
            A request of a long conversation allocates tens of thousands of objects (the
            history parsed, then cut into units), so full collections run every few such
            requests, and each one walked every object loaded at start (modules, the
            database and HTTP clients, validators): pauses of about 100 ms on the
            request that triggered it, measured at 2,000 messages on the Anthropic and
            Responses wires (``benchmarks/bench_proxy_cache.py``).
        counter: one token counter for every model (default: per requested model name,
            exact when its tokenizer is known offline — :mod:`ctxstack.proxy.counting`).
        transport: an httpx transport for the upstream (tests; default: the network).
    """
    holder: dict[str, ProxyState] = {}
    failures = failures_for(settings)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        engine = create_engine_from_url(settings.database_url, schema=settings.database_schema)
        if migrate:
            await upgrade(engine)
        state = ProxyState(settings, session_factory(engine), counter, transport)
        holder["state"] = state
        app.state.proxy = state
        state.shared_stats.start()
        if freeze_gc:
            gc.collect()
            gc.freeze()
        try:
            yield
        finally:
            await state.aclose()
            await engine.dispose()
            if failures is not None:
                await failures.close()

    app = FastAPI(title="ctxstack proxy", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)
    # Every route: host/origin in no-auth mode, body size, failed-token throttle.
    app.add_middleware(RequestGuard, policy=request_policy(settings, failures),
                       error=refusal)

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
            headers = state.upstream.request_headers(request.headers.items())
            upstream = await state.upstream.open(
                request.method, path, query=request.url.query, headers=headers,
                content=forwarded_body(request, headers))
            log_event("passthrough", method=request.method, path=f"/v1/{path}",
                      status=upstream.status_code)
            return await relay(upstream)
        except ProxyError as exc:
            state.stats.failed(exc)
            log_event("passthrough", method=request.method, status=exc.status,
                      error=exc.code or exc.type)
            return exc.response()

    app.add_exception_handler(StarletteHTTPException, _not_routed)
    app.add_route("/ctxstack/health", health, methods=["GET"])
    app.add_route("/ctxstack/stats", stats, methods=["GET"])
    app.add_route("/v1/chat/completions", chat_completions, methods=["POST"])
    anthropic_routes.add_routes(app, st)  # /v1/messages, /v1/messages/count_tokens

    async def responses(request: Request) -> Response:
        return await responses_http(st(), request)

    async def responses_ws(websocket: WebSocket) -> None:
        await responses_socket(st(), websocket)

    app.add_route("/v1/responses", responses, methods=["POST"])
    app.router.routes.append(WebSocketRoute("/v1/responses", responses_ws))
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
        # Everything kept per conversation is salted with the caller and the client's key.
        salt = owner_salt(request.headers, await state.auth.caller(request.headers))
        chat = parse_request(await request.body())
        log.update(model=chat.model, stream=chat.stream, messages=len(chat.conversation))
        state.stats.wire(WIRE, chat.model, requests=1)
        model_budget = await state.budgets.get(chat.model)
        budget = state.scales.budget(chat.model, model_budget.usable_input_tokens)
        summarizer, own = state.summarizers.get(chat.model, model_budget,
                                                request.headers.get("authorization"))
        try:
            fit = await _fit(state, request, chat, budget, salt, summarizer)
            state.stats.fitted(fit)
            response = await _forward(state, request, chat, fit, budget, salt, summarizer,
                                      started, log)
        finally:
            if own:
                await summarizer.aclose()
    except ProxyError as exc:
        state.stats.failed(exc)
        log_event("chat_completion", status=exc.status, error=exc.code or exc.type, **log)
        return exc.response()
    return response


async def _fit(state: ProxyState, request: Request, chat: CompletionRequest, budget: int,
               salt: str, summarizer: LLM) -> Fit:
    """The session's cache-stable fit; on any failure but a bad request (a bug, a shape
    not foreseen, the database), the request unchanged — logged and counted."""
    try:
        conv = chat.conversation
        session = session_key(request.headers, conv.messages, conv.prompt_end, salt)
        counter = await state.fitter.counters.aget(chat.model)
        prefix = None
        if not state.settings.summarizer_configured:
            prefix = _prefix_summarizer(state, request, chat)
        return await state.session_fitter.fit(
            chat, budget, salt=salt, summarizer=summarizer, session=session,
            extra_tools=lambda: state.chat_wire.added_tokens(chat.body, counter),
            prefix_summarizer=prefix, recall=state.chat_wire.can_offer(chat.body))
    except ProxyError:
        raise
    except Exception as exc:
        logger.exception("proxy: fitting failed; forwarding the request unchanged")
        state.stats.bump("fit_failures")
        n = len(chat.conversation)
        return Fit(None, "none", n, n, 0, 0, 0, reason=f"fit_error: {type(exc).__name__}")


def _prefix_summarizer(state: ProxyState, request: Request, chat: CompletionRequest,
                       ) -> Callable[[list[Any], LLM], LLM]:
    """Summaries asked as the conversation's continuation, through the upstream with the
    client's own headers (:class:`~ctxstack.proxy.chat_wire.PrefixSummarizer`)."""
    headers = state.upstream.request_headers(request.headers.items())
    query = request.url.query

    async def send(content: bytes) -> tuple[int, object]:
        upstream = await state.upstream.open("POST", "chat/completions", query=query,
                                             headers=headers, content=content)
        _, data = await read_error(upstream)
        return upstream.status_code, data

    def build(prefix: list[Any], fallback: LLM) -> LLM:
        return PrefixSummarizer(send, chat.body, prefix, fallback)

    return build


async def _forward(state: ProxyState, request: Request, chat: CompletionRequest, fit: Fit,
                   budget: int, salt: str, summarizer: LLM, started: float,
                   log: dict[str, Any]) -> Response:
    """Send the fitted request; on an overflow error compact smaller and retry once."""
    headers = state.upstream.request_headers(request.headers.items())
    query = request.url.query
    retried = False
    while True:
        recall_body: dict[str, Any] | None = None
        if fit.recall and fit.messages is not None and state.chat_wire.can_offer(chat.body):
            recall_body = state.chat_wire.add_tool({**chat.body, "messages": fit.messages})
            body = dumps_body(recall_body)
        else:
            body = chat.raw if fit.messages is None else chat.with_messages(fit.messages)
        added_ms = (time.perf_counter() - started) * 1000
        state.stats.bump("forwarded")
        state.stats.wire(WIRE, chat.model, forwarded=1)
        upstream = await state.upstream.open("POST", "chat/completions", query=query,
                                             headers=headers, content=body)
        extra = fit_headers(fit)
        _log_fit(fit, log, added_ms, retried)
        if upstream.status_code < 400:
            if recall_body is not None:
                answer = await _recall_answer(state, upstream, chat, fit, recall_body,
                                              headers, query, extra, budget, log)
            else:
                is_sse = upstream.headers.get("content-type", "").startswith(
                    "text/event-stream")
                extra[USAGE_HEADER] = "sum" if is_sse else "sum; upstream_calls=1"
                answer = await relay_answer(upstream, extra,
                                            on_answer=_usage_tap(state, chat.model, fit))
            log_event("chat_completion", status=upstream.status_code, **log)
            return answer
        raw, data = await read_error(upstream, limit=ERROR_BODY_LIMIT)
        state.stats.upstream_error(upstream.status_code)
        if retried or not is_context_overflow(upstream.status_code, data):
            log_event("chat_completion", status=upstream.status_code, upstream_error=True, **log)
            return error_passthrough(upstream, raw, extra, data)
        retried = True
        state.stats.bump("overflow_retries")
        target = int(min(budget, fit.tokens) * state.settings.overflow_retry_fill)
        again = await _refit(state, chat, fit, target, salt, summarizer)
        state.stats.fitted(again)
        fit = dataclasses.replace(
            again, summarizer_usage=fit.summarizer_usage + again.summarizer_usage)


async def _refit(state: ProxyState, chat: CompletionRequest, fit: Fit, target: int,
                 salt: str, summarizer: LLM) -> Fit:
    """The compaction after an upstream overflow: the session's view recomputed smaller
    (and stored), else, if that fails, the plain refit."""
    if fit.session:
        try:
            counter = await state.fitter.counters.aget(chat.model)
            return await state.session_fitter.refit(
                chat, target, salt=salt, summarizer=summarizer, session=fit.session,
                extra_tools=state.chat_wire.added_tokens(chat.body, counter),
                recall=state.chat_wire.can_offer(chat.body))
        except ProxyError:
            raise
        except Exception:
            logger.exception("proxy: recomputing the session's view after an overflow "
                             "failed; compacting without it")
            state.stats.bump("fit_failures")
    return await state.fitter.refit(chat, target, salt=salt, summarizer=summarizer)


def _usage_tap(state: ProxyState, model: str, fit: Fit) -> Callable[[object], None]:
    def tap(data: object) -> None:
        if isinstance(data, dict):
            usage = chat_usage(data)
            state.stats.usage(WIRE, model, usage)
            state.scales.observe(WIRE, model, fit, usage)
    return tap


async def _recall_answer(state: ProxyState, upstream: httpx.Response, chat: CompletionRequest,
                         fit: Fit, body: dict[str, Any], headers: list[tuple[str, str]],
                         query: str, extra: dict[str, str], budget: int,
                         log: dict[str, Any]) -> Response:
    """The answer of a request that offered ``ctxstack_recall``: recall calls answered from
    the session's archive and the upstream called again (at most MAX_ROUNDS rounds, then
    once without the tool), the calls hidden, the usage summed (:mod:`ctxstack.proxy.recall`).
    A completed answer is delivered, never requested again; a later round's error status
    passes through as the upstream sent it."""
    wire = state.chat_wire
    counter = await state.fitter.counters.aget(chat.model)
    run = RecallRun(wire, state.sessions.archive(fit.session, 1), counter, body,
                    fits=effective_budget(budget, counter), tokens=fit.tokens)
    model = chat.model

    async def open_next(content: bytes) -> httpx.Response:
        state.stats.bump("forwarded")
        state.stats.wire(WIRE, model, forwarded=1)
        return await state.upstream.open("POST", "chat/completions", query=query,
                                         headers=headers, content=content)

    def done(usage: UpstreamUsage, rounds: int) -> None:
        state.stats.usage(WIRE, model, usage, rounds)
        state.scales.observe(WIRE, model, fit, usage, rounds)
        log.update(recall_rounds=rounds)

    if upstream.headers.get("content-type", "").startswith("text/event-stream"):
        extra = {**extra, USAGE_HEADER: "sum"}
        return StreamingResponse(
            stream_with_recall(upstream, run, open_next, done),
            status_code=upstream.status_code,
            headers=response_headers(upstream, extra, keep_length=False),
            background=BackgroundTask(upstream.aclose))
    outcome = await run.answer(upstream, open_next)
    last, raw, data, stripped = outcome.last, outcome.raw, outcome.data, outcome.stripped
    done(run.usage, run.rounds)
    if outcome.failed:
        state.stats.upstream_error(last.status_code)
        return error_passthrough(last, raw, extra, data)
    if data is None:
        raise upstream_bad_answer()
    headers_out = response_headers(last, {**extra, USAGE_HEADER:
                                          f"sum; upstream_calls={run.usage.calls}"},
                                   keep_length=False)
    if run.rounds == 0 and not stripped:
        return Response(raw, status_code=last.status_code, headers=headers_out)
    final = wire.with_usage(data, run.usage) if isinstance(data, dict) and run.rounds else data
    return Response(dumps_body(final), status_code=last.status_code, headers=headers_out)


def _log_fit(fit: Fit, log: dict[str, Any], added_ms: float, retried: bool) -> None:
    log.update(method=fit.method, original=fit.original, kept=fit.kept,
               summarized=fit.summarized, tokens_estimated=fit.tokens, counter=fit.counter,
               tokens_before=fit.tokens_before, summarizer_calls=fit.summarizer_usage.calls,
               summarizer_tokens=fit.summarizer_usage.total_tokens,
               checkpoint_saved=fit.checkpoint_saved, overflow_retry=retried,
               view=fit.view, recall_offered=fit.recall,
               proxy_ms=round(added_ms, 2))
    if fit.reason:
        log["fallback"] = fit.reason.split(":")[0]


def app_from_env(env: Mapping[str, str] | None = None) -> FastAPI:
    """The app configured from the environment (what ``ctxstack proxy`` workers run).

    ``CTXSTACK_PROXY_LOG_LEVEL`` sets the ``ctxstack.proxy`` logger's level; a worker
    process started by uvicorn has no logging set up, so a handler is added there.

    Raises:
        ConfigError: the settings are incomplete or invalid (the message says which).
    """
    settings = ProxySettings.from_env(env)
    level = (settings.log_level or "").upper()
    if level in ("CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG"):
        logger = logging.getLogger("ctxstack.proxy")
        logger.setLevel(level)
        if not logging.getLogger().handlers and not logger.handlers:
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
            logger.addHandler(handler)
    return create_app(settings, freeze_gc=True)
