"""``POST /v1/messages`` and ``POST /v1/messages/count_tokens``: the Anthropic wire.

A request goes: the proxy's own auth (tokens in ``x-ctxstack-api-key``: the client's
``authorization`` and ``x-api-key`` are its Anthropic credentials and go upstream byte for
byte) → parse and validate (400 in Anthropic's shape, before any upstream call) → the
model's budget → fit with the shared fitter on the request's units
(:mod:`~ctxstack.proxy.anthropic.units`) → render → forward to ``<anthropic
upstream>/v1/messages`` (or ``…/count_tokens``, which so answers for the request as the
proxy forwards it) → relay.

Do no harm: if fitting raises for any reason, the request is forwarded exactly as
received, the failure logged and counted (``fit_failures``). An upstream error passes
through with its status, body and headers, except a context-overflow error, which triggers
one compaction to a smaller target and one retry. A completed answer is always relayed,
never asked for again. Checkpoints are salted with the caller and a digest of the
client's Anthropic key, so no state is shared across keys.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response

from ctxstack import LLM, ModelBudget
from ctxstack.llm.classify import is_context_overflow
from ctxstack.proxy.anthropic.errors import from_proxy_error
from ctxstack.proxy.anthropic.relay import error_passthrough, relay_message
from ctxstack.proxy.anthropic.summarizer import AnthropicSummarizer
from ctxstack.proxy.anthropic.units import (
    UNIT_KEY,
    CountCache,
    RequestUnits,
    render,
    to_units,
)
from ctxstack.proxy.anthropic.wire import MessagesRequest, parse_messages_request
from ctxstack.proxy.auth import TokenAuth
from ctxstack.proxy.errors import ProxyError
from ctxstack.proxy.fitting import Fit, Fitter
from ctxstack.proxy.forwarding import (
    ERROR_BODY_LIMIT,
    Upstream,
    forwarded_body,
    read_error,
    relay,
)
from ctxstack.proxy.request import CompletionRequest
from ctxstack.proxy.settings import ProxySettings
from ctxstack.proxy.stats import fit_headers, log_event
from ctxstack.store import SessionFactory

log = logging.getLogger("ctxstack.proxy")
WIRE = "anthropic"


class AnthropicWire:
    """The Anthropic upstream, and the auth that leaves the client's credentials alone."""

    def __init__(self, settings: ProxySettings, factory: SessionFactory,
                 transport: httpx.AsyncBaseTransport | None) -> None:
        self.settings = settings
        self.upstream = Upstream(f"{settings.anthropic_upstream}/v1", api_key=None,
                                 forward_auth=True, timeout=settings.timeout,
                                 connect_timeout=settings.connect_timeout, transport=transport)
        self.auth = TokenAuth(factory, required=settings.auth == "token", forward_auth=True)
        self.counts = CountCache()

    async def aclose(self) -> None:
        await self.upstream.aclose()


def add_routes(app: Starlette, state: Callable[[], Any]) -> None:
    """Serve the two routes on ``app``; ``state()`` is the app's ``ProxyState`` (built in
    its lifespan). Added before the app's ``/v1/{path}`` passthrough, which they precede."""

    async def messages(request: Request) -> Response:
        return await handle(state(), request, count_only=False)

    async def count_tokens(request: Request) -> Response:
        return await handle(state(), request, count_only=True)

    async def other(request: Request) -> Response:
        return await passthrough(state(), request)

    app.add_route("/v1/messages", messages, methods=["POST"])
    app.add_route("/v1/messages/count_tokens", count_tokens, methods=["POST"])
    app.add_route("/v1/messages/{path:path}", other, methods=PASSTHROUGH_METHODS)


PASSTHROUGH_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


async def passthrough(state: Any, request: Request) -> Response:
    """Any other Anthropic request (``/v1/messages/batches…``, or a ``/v1/`` route called
    with an ``anthropic-version`` header, such as ``/v1/models``): forwarded unchanged to
    the Anthropic upstream, the client's credentials included; answered as received."""
    wire: AnthropicWire = state.anthropic
    path = request.url.path.removeprefix("/v1/")
    try:
        await wire.auth.caller(request.headers)
        state.stats.bump("passthrough")
        headers = wire.upstream.request_headers(request.headers.items())
        upstream = await wire.upstream.open(
            request.method, path, query=request.url.query, headers=headers,
            content=forwarded_body(request, headers))
        log_event("passthrough", wire=WIRE, method=request.method, path=f"/v1/{path}",
                  status=upstream.status_code)
        return await relay(upstream)
    except ProxyError as exc:
        log_event("passthrough", wire=WIRE, method=request.method, status=exc.status,
                  error=exc.code or exc.type)
        return from_proxy_error(exc)


@dataclasses.dataclass
class _Plan:
    """What one request needs across the fit and the retry."""

    request: MessagesRequest
    units: RequestUnits | None
    chat: CompletionRequest | None
    salt: str
    summarizer: LLM | None
    counts: CountCache | None = None


async def handle(state: Any, request: Request, *, count_only: bool) -> Response:
    """One Messages (or count_tokens) request; ``state`` is the app's ``ProxyState``."""
    wire: AnthropicWire = state.anthropic
    started = time.perf_counter()
    state.stats.bump("requests")
    event = "anthropic_count_tokens" if count_only else "anthropic_messages"
    log_fields: dict[str, Any] = {"wire": WIRE}
    try:
        caller = await wire.auth.caller(request.headers)
        req = parse_messages_request(await request.body(), count_only=count_only)
        log_fields.update(model=req.model, stream=req.stream, messages=len(req.messages))
        model_budget = await state.budgets.get(req.model)
        budget = model_budget.usable_input_tokens
        summarizer, own = _summarizer(state, wire, req, model_budget, request)
        try:
            plan = _Plan(req, None, None, _salt(caller, request.headers), summarizer,
                         wire.counts)
            body, fit = await _fit(state.fitter, plan, budget, state, limit=None)
            state.stats.fitted(fit)
            return await _forward(state, wire, request, plan, body, fit, budget, started,
                                  count_only, event, log_fields)
        finally:
            if own:
                await summarizer.aclose()
    except ProxyError as exc:
        if exc.status == 400:
            state.stats.bump("bad_requests")
        elif exc.status == 401:
            state.stats.bump("unauthorized")
        elif exc.code == "upstream_unreachable":
            state.stats.bump("unreachable")
        elif exc.code == "upstream_timeout":
            state.stats.bump("timeouts")
        log_event(event, status=exc.status, error=exc.code or exc.type, **log_fields)
        return from_proxy_error(exc)


def _salt(caller: str, headers: Mapping[str, str]) -> str:
    """The checkpoint salt: the proxy caller and a digest of the client's Anthropic key."""
    key = headers.get("x-api-key") or headers.get("authorization") or ""
    return f"{caller}|{WIRE}|{hashlib.sha256(key.encode('utf-8')).hexdigest()[:32]}"


def _summarizer(state: Any, wire: AnthropicWire, req: MessagesRequest, budget: ModelBudget,
                request: Request) -> tuple[Any, bool]:
    """``FAST_LLM_*`` when configured, else the Anthropic upstream with the client's key
    (and the client's system prompt first)."""
    if state.settings.summarizer_configured:
        found: tuple[Any, bool] = state.summarizers.get(req.model, budget, None)
        return found
    return AnthropicSummarizer(wire.upstream, req.model, budget, request.headers.items(),
                               req.body.get("system")), False


async def _fit(fitter: Fitter, plan: _Plan, budget: int, state: Any,
               limit: int | None) -> tuple[bytes, Fit]:
    """The body to forward and its fit; any failure forwards the original (counted)."""
    req = plan.request
    n = len(req.messages)
    try:
        if plan.units is None or plan.chat is None:
            plan.units = to_units(req.body.get("system"), req.messages)
            plan.chat = CompletionRequest(req.raw, req.body, req.model,
                                          plan.units.conversation(plan.counts))
        if limit is None:
            fit = await fitter.fit(plan.chat, budget, salt=plan.salt,
                                   summarizer=plan.summarizer)
        else:
            fit = await fitter.refit(plan.chat, limit, salt=plan.salt,
                                     summarizer=plan.summarizer)
        if fit.messages is None:
            return req.raw, dataclasses.replace(fit, original=n, kept=n)
        messages = render(plan.units, fit.messages, req.body.get("system"),
                          req.body.get("tools"))
        return req.with_messages(messages), dataclasses.replace(
            fit, original=n, kept=len(messages),
            summarized=_summarized_messages(plan.units, fit) if fit.summarized else 0)
    except Exception as exc:  # do no harm: the client's request, as sent
        log.exception("proxy: fitting an Anthropic request failed; forwarding it unchanged")
        state.stats.bump("fit_failures")
        return req.raw, Fit(None, "none", n, n, 0, 0, 0,
                            reason=f"fit_error: {type(exc).__name__}")


def _summarized_messages(units: RequestUnits, fit: Fit) -> int:
    """The client's messages a summary stands for: those none of whose units were
    forwarded (the header counts messages, as the client sent them, not units)."""
    present = {units.units[d[UNIT_KEY]].msg for d in fit.messages or []
               if isinstance(d.get(UNIT_KEY), int)}
    return sum(1 for i, k in enumerate(units.per_message) if k and i not in present)


async def _forward(state: Any, wire: AnthropicWire, request: Request, plan: _Plan,
                   body: bytes, fit: Fit, budget: int, started: float, count_only: bool,
                   event: str, log_fields: dict[str, Any]) -> Response:
    headers = wire.upstream.request_headers(request.headers.items())
    path = "messages/count_tokens" if count_only else "messages"
    model = plan.request.model
    retried = False

    def on_usage(usage: Mapping[str, object]) -> None:
        read = usage.get("cache_read_input_tokens")
        write = usage.get("cache_creation_input_tokens")
        state.stats.cache_usage(WIRE, model, read=read if isinstance(read, int) else 0,
                                write=write if isinstance(write, int) else 0)

    while True:
        state.stats.bump("forwarded")
        added_ms = (time.perf_counter() - started) * 1000
        upstream = await wire.upstream.open("POST", path, query=request.url.query,
                                            headers=headers, content=body)
        extra = fit_headers(fit)
        log_fields.update(method=fit.method, original=fit.original, kept=fit.kept,
                          summarized=fit.summarized, tokens_estimated=fit.tokens,
                          counter=fit.counter, summarizer_calls=fit.summarizer_usage.calls,
                          overflow_retry=retried, proxy_ms=round(added_ms, 2))
        if fit.reason:
            log_fields["fallback"] = fit.reason.split(":")[0]
        if upstream.status_code < 400:
            answer = await relay_message(upstream, extra,
                                         on_usage if not count_only else lambda _: None)
            log_event(event, status=upstream.status_code, **log_fields)
            return answer
        raw, data = await read_error(upstream, limit=ERROR_BODY_LIMIT)
        state.stats.upstream_error(upstream.status_code)
        if (retried or count_only or plan.chat is None
                or not is_context_overflow(upstream.status_code, data)):
            log_event(event, status=upstream.status_code, upstream_error=True, **log_fields)
            return error_passthrough(upstream, raw, data, extra)
        retried = True
        state.stats.bump("overflow_retries")
        target = int(min(budget, fit.tokens or budget) * state.settings.overflow_retry_fill)
        before = fit.summarizer_usage
        body, fit = await _fit(state.fitter, plan, budget, state, limit=target)
        state.stats.fitted(fit)
        fit = dataclasses.replace(fit, summarizer_usage=before + fit.summarizer_usage)
