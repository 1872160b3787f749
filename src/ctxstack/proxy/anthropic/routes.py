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
never asked for again.

Sessions (:mod:`~ctxstack.proxy.sessions`): the header ``x-ctxstack-session``, else the
conversation's opening (system prompt and first message), hashed with the caller and the
client's Anthropic credentials — no view, archive or checkpoint is ever shared across
keys. An over-budget request extends the session's stored view (the same bytes as the
last forwarded request, then the new messages) until it overflows; then the view is
recomputed once, single flight across workers (:mod:`~ctxstack.proxy.session_fit`), the
summariser asked as the conversation's continuation (the same ``system``, ``tools`` and
messages, the instruction appended). Once something was compacted away, the forwarded
``tools`` gain ``ctxstack_recall``, answered by the proxy (:mod:`.recall`).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from ctxstack import LLM, ModelBudget
from ctxstack.llm.classify import is_context_overflow
from ctxstack.proxy.anthropic.errors import from_proxy_error
from ctxstack.proxy.anthropic.recall import (
    AnthropicRecallWire,
    answer_with_recall,
    anthropic_usage,
    stream_with_recall,
)
from ctxstack.proxy.anthropic.relay import error_passthrough, relay_message
from ctxstack.proxy.anthropic.summarizer import AnthropicPrefixSummarizer, AnthropicSummarizer
from ctxstack.proxy.anthropic.units import (
    UNIT_KEY,
    CountCache,
    RequestUnits,
    remembered_units,
    render,
)
from ctxstack.proxy.anthropic.wire import (
    MessagesRequest,
    parse_messages_request,
    validate_messages,
)
from ctxstack.proxy.auth import TokenAuth
from ctxstack.proxy.chat_wire import RecallRun, dumps_body
from ctxstack.proxy.errors import ProxyError
from ctxstack.proxy.fitting import Fit
from ctxstack.proxy.forwarding import (
    ERROR_BODY_LIMIT,
    Upstream,
    forwarded_body,
    read_error,
    relay,
    response_headers,
)
from ctxstack.proxy.recall import USAGE_HEADER, UpstreamUsage
from ctxstack.proxy.request import CompletionRequest
from ctxstack.proxy.session_fit import PrefixFactory
from ctxstack.proxy.sessions import owner_salt, session_key
from ctxstack.proxy.settings import ProxySettings
from ctxstack.proxy.stats import fit_headers, log_event
from ctxstack.proxy.unit_memo import Hit, UnitMemo
from ctxstack.store import SessionFactory
from ctxstack.tokens._counter import effective_budget

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
        self.memo: UnitMemo[RequestUnits] = UnitMemo()
        """Recent requests' units per owner: a resent history is converted once."""
        self.recall = AnthropicRecallWire()

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
    """What one request needs across the fit, the retry and the recall rounds."""

    request: MessagesRequest
    headers: Mapping[str, str]
    salt: str
    summarizer: LLM | None
    counts: CountCache | None = None
    units: RequestUnits | None = None
    chat: CompletionRequest | None = None
    recall_body: dict[str, Any] | None = None
    """The body forwarded with ``ctxstack_recall`` added (None: not offered)."""
    remembered: Hit | None = None
    """The owner's earlier request sharing the most leading messages (found once, for
    validating and converting)."""


async def handle(state: Any, request: Request, *, count_only: bool) -> Response:
    """One Messages (or count_tokens) request; ``state`` is the app's ``ProxyState``."""
    wire: AnthropicWire = state.anthropic
    started = time.perf_counter()
    state.stats.bump("requests")
    event = "anthropic_count_tokens" if count_only else "anthropic_messages"
    log_fields: dict[str, Any] = {"wire": WIRE}
    try:
        caller = await wire.auth.caller(request.headers)
        req = parse_messages_request(await request.body(), count_only=count_only,
                                     check_messages=False)
        salt = _salt(caller, request.headers)
        # The messages this owner sent before, equal and validated then, are not checked
        # again (:mod:`ctxstack.proxy.unit_memo`).
        hit = wire.memo.find(salt, req.body.get("system"), req.messages)
        found, same = hit
        validate_messages(req.messages, same, found.units.calls_before(same) if found else None)
        log_fields.update(model=req.model, stream=req.stream, messages=len(req.messages))
        if not count_only:
            state.stats.wire(WIRE, req.model, requests=1)
        model_budget = await state.budgets.get(req.model)
        budget = state.scales.budget(req.model, model_budget.usable_input_tokens)
        summarizer, own = _summarizer(state, wire, req, model_budget, request)
        try:
            plan = _Plan(req, request.headers, salt, summarizer, wire.counts, remembered=hit)
            body, fit = await _fit(state, plan, budget, limit=None)
            state.stats.fitted(fit)
            return await _forward(state, wire, request, plan, body, fit, budget, started,
                                  count_only, event, log_fields)
        finally:
            if own:
                await summarizer.aclose()
    except ProxyError as exc:
        state.stats.failed(exc)
        log_event(event, status=exc.status, error=exc.code or exc.type, **log_fields)
        return from_proxy_error(exc)


def _salt(caller: str, headers: Mapping[str, str]) -> str:
    """What sessions and checkpoints are salted with: the proxy caller and the client's
    Anthropic credentials (:func:`~ctxstack.proxy.sessions.owner_salt`), on this wire."""
    return owner_salt(headers, f"{caller}|{WIRE}")


def _summarizer(state: Any, wire: AnthropicWire, req: MessagesRequest, budget: ModelBudget,
                request: Request) -> tuple[Any, bool]:
    """``FAST_LLM_*`` when configured, else the Anthropic upstream with the client's key
    (and the client's system prompt first)."""
    if state.settings.summarizer_configured:
        found: tuple[Any, bool] = state.summarizers.get(req.model, budget, None)
        return found
    return AnthropicSummarizer(wire.upstream, req.model, budget, request.headers.items(),
                               req.body.get("system")), False


def _prefix_summarizer(plan: _Plan) -> PrefixFactory | None:
    """Summaries asked as the conversation's continuation
    (:class:`~ctxstack.proxy.anthropic.summarizer.AnthropicPrefixSummarizer`), when the
    summariser is the Anthropic upstream itself."""
    req = plan.request

    def build(prefix: list[Any], fallback: LLM) -> LLM:
        if not isinstance(fallback, AnthropicSummarizer) or plan.units is None:
            return fallback
        messages = render(plan.units, prefix, req.body.get("system"), req.body.get("tools"))
        return AnthropicPrefixSummarizer(req.body, messages, fallback)

    return build if isinstance(plan.summarizer, AnthropicSummarizer) else None


async def _fit(state: Any, plan: _Plan, budget: int, limit: int | None,
               fit: Fit | None = None) -> tuple[bytes, Fit]:
    """The body to forward and its fit: the session's cache-stable fit
    (:class:`~ctxstack.proxy.session_fit.SessionFitter`), or with ``limit`` the compaction
    after an upstream overflow. Any failure forwards the original (counted)."""
    req = plan.request
    wire: AnthropicWire = state.anthropic
    n = len(req.messages)
    plan.recall_body = None
    try:
        if plan.units is None or plan.chat is None:
            plan.units, hashes = remembered_units(wire.memo, plan.salt, req.body.get("system"),
                                                  req.messages, len(req.raw), plan.remembered)
            plan.remembered = None
            conversation = plan.units.conversation(plan.counts)
            conversation.hashes = hashes
            plan.chat = CompletionRequest(req.raw, req.body, req.model, conversation)
        counter = await state.fitter.counters.aget(req.model)
        offer = wire.recall.can_offer(req.body)
        if limit is None:
            conv = plan.chat.conversation
            session = session_key(plan.headers, conv.messages, conv.prompt_end, plan.salt)
            fit = await state.session_fitter.fit(
                plan.chat, budget, salt=plan.salt, summarizer=plan.summarizer,
                session=session, prefix_summarizer=_prefix_summarizer(plan),
                extra_tools=(lambda: wire.recall.added_tokens(req.body, counter))
                if offer else 0, recall=offer)
        else:
            extra = wire.recall.added_tokens(req.body, counter) if offer else 0
            fit = await _refit(state, plan, fit, limit, extra, offer)
        if fit.messages is None:
            return req.raw, dataclasses.replace(fit, original=n, kept=n)
        messages = render(plan.units, fit.messages, req.body.get("system"),
                          req.body.get("tools"))
        fitted = dataclasses.replace(
            fit, original=n, kept=len(messages),
            summarized=_summarized_messages(plan.units, fit) if fit.summarized else 0)
        if fit.recall and offer:
            plan.recall_body = wire.recall.add_tool({**req.body, "messages": messages})
            return dumps_body(plan.recall_body), fitted
        return req.with_messages(messages), fitted
    except Exception as exc:  # do no harm: the client's request, as sent
        log.exception("proxy: fitting an Anthropic request failed; forwarding it unchanged")
        state.stats.bump("fit_failures")
        plan.recall_body = None
        return req.raw, Fit(None, "none", n, n, 0, 0, 0,
                            reason=f"fit_error: {type(exc).__name__}")


async def _refit(state: Any, plan: _Plan, fit: Fit | None, limit: int, extra: int,
                 offer: bool) -> Fit:
    """The compaction after an upstream overflow: the session's view recomputed smaller
    (and stored, so the next requests extend a view the upstream accepts), else — no
    session, or that failed — the plain refit."""
    assert plan.chat is not None
    if fit is not None and fit.session:
        try:
            recomputed: Fit = await state.session_fitter.refit(
                plan.chat, limit, salt=plan.salt, summarizer=plan.summarizer,
                session=fit.session, extra_tools=extra, recall=offer)
            return recomputed
        except Exception:
            log.exception("proxy: recomputing the session's view after an overflow failed; "
                          "compacting without it")
            state.stats.bump("fit_failures")
    refit: Fit = await state.fitter.refit(plan.chat, limit, salt=plan.salt,
                                          summarizer=plan.summarizer)
    return refit


def _summarized_messages(units: RequestUnits, fit: Fit) -> int:
    """The client's messages a summary stands for: those none of whose units were
    forwarded (the header counts messages, as the client sent them, not units)."""
    present = {units.units[d[UNIT_KEY]].msg for d in fit.messages or []
               if isinstance(d.get(UNIT_KEY), int)}
    present.discard(-1)  # the system prompt's unit: not a message
    # Every message a forwarded unit stands for has units: those with units, less them
    # (counted over the view, not the whole history).
    return len(units.per_message) - units.per_message.count(0) - len(present)


async def _forward(state: Any, wire: AnthropicWire, request: Request, plan: _Plan,
                   body: bytes, fit: Fit, budget: int, started: float, count_only: bool,
                   event: str, log_fields: dict[str, Any]) -> Response:
    headers = wire.upstream.request_headers(request.headers.items())
    path = "messages/count_tokens" if count_only else "messages"
    model = plan.request.model
    retried = False

    def on_usage(usage: Mapping[str, object]) -> None:
        counted = anthropic_usage(usage)
        state.stats.usage(WIRE, model, counted)
        state.scales.observe(WIRE, model, fit, counted)

    while True:
        state.stats.bump("forwarded")
        if not count_only:
            state.stats.wire(WIRE, model, forwarded=1)
        added_ms = (time.perf_counter() - started) * 1000
        upstream = await wire.upstream.open("POST", path, query=request.url.query,
                                            headers=headers, content=body)
        extra = fit_headers(fit)
        log_fields.update(method=fit.method, original=fit.original, kept=fit.kept,
                          summarized=fit.summarized, tokens_estimated=fit.tokens,
                          counter=fit.counter, summarizer_calls=fit.summarizer_usage.calls,
                          overflow_retry=retried, view=fit.view,
                          recall_offered=plan.recall_body is not None,
                          proxy_ms=round(added_ms, 2))
        if fit.reason:
            log_fields["fallback"] = fit.reason.split(":")[0]
        if upstream.status_code < 400:
            if count_only:
                answer = await relay_message(upstream, extra, lambda _: None)
            elif plan.recall_body is not None:
                answer = await _recall_answer(state, wire, upstream, plan, fit, budget,
                                              headers, request.url.query, extra, log_fields)
            else:
                is_sse = upstream.headers.get("content-type", "").startswith(
                    "text/event-stream")
                extra[USAGE_HEADER] = "sum" if is_sse else "sum; upstream_calls=1"
                answer = await relay_message(upstream, extra, on_usage)
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
        body, fit = await _fit(state, plan, budget, limit=target, fit=fit)
        state.stats.fitted(fit)
        fit = dataclasses.replace(fit, summarizer_usage=before + fit.summarizer_usage)


async def _recall_answer(state: Any, wire: AnthropicWire, upstream: httpx.Response,
                         plan: _Plan, fit: Fit, budget: int, headers: list[tuple[str, str]],
                         query: str, extra: dict[str, str], log_fields: dict[str, Any],
                         ) -> Response:
    """The answer of a request offered ``ctxstack_recall``: the proxy answers the calls
    from the session's archive and calls the upstream again (:mod:`.recall`); the client
    never sees the tool; ``usage`` is the sum over the upstream calls."""
    assert plan.recall_body is not None
    model = plan.request.model
    counter = await state.fitter.counters.aget(model)
    run = RecallRun(wire.recall, state.sessions.archive(fit.session, 1), counter,
                    plan.recall_body, fits=effective_budget(budget, counter),
                    tokens=fit.tokens)

    async def open_next(content: bytes) -> httpx.Response:
        state.stats.bump("forwarded")
        state.stats.wire(WIRE, model, forwarded=1)
        answer: httpx.Response = await wire.upstream.open(
            "POST", "messages", query=query, headers=headers, content=content)
        if answer.status_code >= 400:
            state.stats.upstream_error(answer.status_code)
        return answer

    def done(usage: UpstreamUsage, rounds: int) -> None:
        state.stats.usage(WIRE, model, usage, rounds)
        state.scales.observe(WIRE, model, fit, usage, rounds)
        log_fields.update(recall_rounds=rounds)

    if upstream.headers.get("content-type", "").startswith("text/event-stream"):
        return StreamingResponse(
            stream_with_recall(upstream, run, open_next, done),
            status_code=upstream.status_code,
            headers=response_headers(upstream, {**extra, USAGE_HEADER: "sum"},
                                     keep_length=False),
            background=BackgroundTask(upstream.aclose))
    return await answer_with_recall(upstream, run, open_next, extra, done)
