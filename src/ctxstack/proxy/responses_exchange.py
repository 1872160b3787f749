"""One Responses request through the proxy, shared by the HTTP route and the WebSocket.

1. **Expand** — a ``previous_response_id`` the proxy knows
   (:mod:`ctxstack.proxy.responses_chains`) becomes the whole conversation: the stored
   items, then the request's new ones. Pairing is validated over that (400 before any
   upstream call).
2. **Fit** — the conversation's units (:mod:`ctxstack.proxy.responses_view`) go through
   the proxy's session fitter (:class:`~ctxstack.proxy.session_fit.SessionFitter`, as on
   the Chat wire: within budget → unchanged; else the session's stored view extended
   with the new units, byte-identical to what went before, until that overflows; then
   the view recomputed once with headroom — single flight per session, across workers),
   then rendered back into items. The session is ``x-ctxstack-session`` or derived from
   the conversation's opening units, salted with the wire, the caller and the client's
   key (:mod:`ctxstack.proxy.sessions`). Summaries continue the conversation's own
   prefix (:mod:`ctxstack.proxy.responses_summary`). Once something of the session was
   compacted away, ``tools`` gain ``ctxstack_recall``
   (:mod:`ctxstack.proxy.responses_recall`, answered by
   :mod:`ctxstack.proxy.responses_rounds`). What is forwarded is recounted, the recall
   tool included: it must be within the budget (else one smaller recomputation).
3. **Forward** — unchanged bytes when nothing had to change and no chain was expanded;
   otherwise the body with ``input`` replaced and ``previous_response_id`` removed (every
   other field byte-identical: ``instructions``, ``tools``, unknown fields). An unknown
   chain — or a request naming a ``conversation`` of the upstream's Conversations API,
   whose items the proxy cannot see — is forwarded as sent: the upstream answers for it.
4. **Overflow** — an upstream context-overflow error compacts once more to a smaller
   target and retries once; every other upstream error passes through with its status,
   body and headers (``Retry-After``, rate limits).
5. **Record** — a completed (or incomplete) response is remembered for the requests
   that continue it, and its ``usage`` (summed over the recall rounds) counted per wire
   and model as on the Chat wire (``by_model``: usage, ``cache_read_tokens`` from
   ``input_tokens_details.cached_tokens``, recall rounds; ``by_wire``: requests,
   forwarded, WebSocket requests).

Any failure of steps 1–2 other than a 400 (a bug, an unexpected shape, a database
error) forwards the original request unchanged; it is logged and counted
(``fit_failures``).
"""

from __future__ import annotations

import codecs
import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from ctxstack import LLM
from ctxstack.llm.classify import is_context_overflow
from ctxstack.llm.openai import OpenAICompatibleLLM
from ctxstack.proxy.auth import TokenAuth
from ctxstack.proxy.budgets import ModelBudgets, Summarizers
from ctxstack.proxy.errors import ProxyError, upstream_failed, upstream_timeout
from ctxstack.proxy.fitting import Fit, Fitter
from ctxstack.proxy.forwarding import (
    ERROR_BODY_LIMIT,
    Upstream,
    read_error,
    upstream_timeout_seconds,
)
from ctxstack.proxy.recall import UpstreamUsage
from ctxstack.proxy.request import CompletionRequest
from ctxstack.proxy.responses_chains import ChainStore, owner_key
from ctxstack.proxy.responses_recall import WIRE as RECALL
from ctxstack.proxy.responses_recall import responses_usage
from ctxstack.proxy.responses_request import (
    ResponsesRequest,
    dump,
    validate_items,
    validate_pairs,
)
from ctxstack.proxy.responses_summary import ResponsesPrefixSummarizer
from ctxstack.proxy.responses_view import (
    UNIT_KEY,
    ResponsesConversation,
    count_tokens,
    remembered,
    schema_tokens,
)
from ctxstack.proxy.scales import TokenScales
from ctxstack.proxy.session_fit import SessionFitter
from ctxstack.proxy.sessions import SessionStore, owner_salt, session_key
from ctxstack.proxy.settings import ProxySettings
from ctxstack.proxy.stats import StatsRecorder, fit_headers, log_event
from ctxstack.proxy.unit_memo import Hit, UnitMemo
from ctxstack.tokens import TokenCounter

log = logging.getLogger("ctxstack.proxy")

WIRE = "responses"
TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})
REFIT_FILL = 0.8
"""When a rendered view counts over the budget (a kept model turn the guard wanted to
cut), the one refit aims at this share of the budget."""


class ProxyParts(Protocol):
    """The parts of the proxy app (:class:`ctxstack.proxy.app.ProxyParts`) this wire uses."""

    settings: ProxySettings
    stats: StatsRecorder
    upstream: Upstream
    auth: TokenAuth
    budgets: ModelBudgets
    summarizers: Summarizers
    fitter: Fitter
    chains: ChainStore
    sessions: SessionStore
    session_fitter: SessionFitter
    responses_units: UnitMemo[ResponsesConversation]
    scales: TokenScales


class _FitRequest(CompletionRequest):
    """The fitter's request for a Responses conversation: its units' chat views, its
    schemas (``tools``, a ``text.format`` schema) counted as the tool definitions."""

    def __init__(self, request: ResponsesRequest, conv: ResponsesConversation, *,
                 own: bool) -> None:
        # ``raw`` only sizes the request (a byte per token at most): the client's bytes
        # when they are the whole conversation, else nothing (a chain is counted).
        super().__init__(request.raw if own else b"", request.body, request.model,
                         conv.conversation)

    def tools_tokens(self, counter: TokenCounter) -> int:
        return schema_tokens(self.body, counter)


@dataclass
class Exchange:
    """One request on its way: what was asked, what the proxy knows, what it sends."""

    request: ResponsesRequest
    owner: str
    salt: str
    """Salts what the proxy keeps per conversation on this wire (checkpoints, sessions):
    the wire, the caller and the client's key."""
    budget: int
    summarizer: LLM | None
    full: list[dict[str, Any]] | None
    """The whole conversation (stored chain + new items); None when the chain is not
    known here."""
    fit: Fit | None = None
    items: list[dict[str, Any]] | None = None
    """The input to forward; None: forward the request's own body."""
    conv: ResponsesConversation | None = None
    failed: str | None = None
    session: str = ""
    offer_recall: bool = False
    """The forwarded ``tools`` carry ``ctxstack_recall`` (the session has an archive)."""
    own_summarizer: OpenAICompatibleLLM | None = None
    """A per-request summariser (carrying the client's key) to close afterwards."""
    remembered: Hit | None = None
    """The owner's earlier conversation sharing the most leading items with ``full``
    (found once, for validating and then reading it; used by the first fit)."""
    log: dict[str, Any] = field(default_factory=dict)

    def body(self, *, stream: bool) -> bytes:
        """The bytes to forward (``stream``: the upstream must answer with events)."""
        if self.items is None:
            return self.request.forced_stream() if stream else self.request.raw
        if self.offer_recall:
            body = self.forward_body()
            if stream:
                body["stream"] = True
            return dump(body)
        return self.request.with_input(self.items, stream=True if stream else None)

    def forward_body(self) -> dict[str, Any]:
        """The fitted body as an object: ``input`` replaced, no ``previous_response_id``,
        the recall tool added when offered (every other field as the client sent it)."""
        body = {k: v for k, v in self.request.body.items() if k != "previous_response_id"}
        body["input"] = self.items if self.items is not None else self.request.input
        return RECALL.add_tool(body) if self.offer_recall else body

    def headers(self) -> dict[str, str]:
        """The ``x-ctxstack-*`` headers (today's format; counts are input items)."""
        n = len(self.full) if self.full is not None else len(self.request.input)
        fit = self.fit or Fit(None, "none", n, n, 0, 0, 0)
        kept = len(self.items) if self.items is not None else n
        summarized = 0
        if fit.summarized and fit.messages is not None and self.conv is not None:
            # The items of the units not forwarded: all (units partition the items) less
            # those of the units forwarded (a view is much shorter than its history).
            units = self.conv.units
            present = {k for m in fit.messages
                       if isinstance(k := m.get(UNIT_KEY), int) and 0 <= k < len(units)}
            summarized = len(self.conv.items) - sum(len(units[k].items) for k in present)
        return fit_headers(dataclasses.replace(fit, original=n, kept=kept,
                                               summarized=summarized))


async def prepare(state: ProxyParts, request: ResponsesRequest, headers: Mapping[str, str],
                  salt: str, *, fit: bool = True) -> Exchange:
    """Steps 1–2 (see the module doc); ``fit=False`` expands and validates only (a
    WebSocket pre-warm, which never reaches the upstream).

    Raises:
        ProxyError: 400 for a conversation the upstream would refuse (pairing).
    """
    owner = owner_key(salt, headers)
    wire_salt = f"{WIRE}\x1f{owner_salt(headers, salt)}"
    chain: list[dict[str, Any]] | None = []
    if request.body.get("conversation") is not None:
        chain = None  # the upstream's Conversations API holds the history: not ours to fit
    elif request.previous_id is not None:
        chain = await state.chains.conversation(owner, request.previous_id)
    full = None if chain is None else [*chain, *request.input]
    # The items this owner sent before, equal and validated then, are not checked again.
    hit = (state.responses_units.find(wire_salt, request.instructions, full)
           if full is not None else (None, 0))
    validate_items(request.input, max(0, hit[1] - len(chain or ())))
    validate_pairs(chain, request.input)
    model_budget = await state.budgets.get(request.model)
    budget = state.scales.budget(request.model, model_budget.usable_input_tokens)
    ex = Exchange(request, owner, wire_salt, budget, None, full, remembered=hit)
    if not fit:
        return ex
    if full is None:
        log.info("proxy: the conversation before this request (previous_response_id %r, "
                 "or a 'conversation') is not known here; forwarded as sent",
                 request.previous_id)
        return ex
    try:
        await _fit(state, ex, budget, headers)
    except Exception as exc:  # do no harm: the request goes out as the client sent it
        _failed(state, ex, exc)
    return ex


def _failed(state: ProxyParts, ex: Exchange, exc: BaseException) -> None:
    log.warning("proxy: fitting a responses request failed, forwarding it unchanged: %s: %s",
                type(exc).__name__, exc, exc_info=not isinstance(exc, ProxyError))
    state.stats.bump("fit_failures")
    ex.failed = type(exc).__name__
    ex.fit = None
    ex.items = None
    ex.offer_recall = False


async def _fit(state: ProxyParts, ex: Exchange, target: int, headers: Mapping[str, str],
               *, refit: bool = False) -> None:
    assert ex.full is not None
    request = ex.request
    if ex.summarizer is None:
        model_budget = await state.budgets.get(request.model)
        summarizer, own = state.summarizers.get(request.model, model_budget,
                                                headers.get("authorization"))
        ex.summarizer = summarizer
        if own:
            ex.own_summarizer = summarizer
    hit, ex.remembered = ex.remembered, None
    conv, _ = remembered(state.responses_units, ex.salt, ex.full, request.instructions,
                         len(request.raw), hit)
    fitting = _FitRequest(request, conv, own=request.previous_id is None)
    chat = conv.conversation
    if not ex.session:
        ex.session = session_key(headers, chat.messages, chat.prompt_end, ex.salt)
    sessions = state.session_fitter
    counter = await state.fitter.counters.aget(request.model)
    if refit:
        fit = await sessions.refit(fitting, target, salt=ex.salt, summarizer=ex.summarizer,
                                   session=ex.session,
                                   extra_tools=RECALL.added_tokens(request.body, counter),
                                   recall=RECALL.can_offer(request.body))
    else:
        prefix = (None if state.settings.summarizer_configured
                  else _prefix_summarizer(state, ex, conv, headers))
        fit = await sessions.fit(
            fitting, target, salt=ex.salt, summarizer=ex.summarizer, session=ex.session,
            extra_tools=lambda: RECALL.added_tokens(request.body, counter),
            prefix_summarizer=prefix, recall=RECALL.can_offer(request.body))
    items = None if fit.messages is None else conv.render(fit.messages)
    offer = fit.recall and items is not None and RECALL.can_offer(request.body)
    if items is not None:
        schemas = schema_tokens(RECALL.add_tool(request.body) if offer else request.body,
                                counter)
        # Read reusing the view forwarded last time (the same items, mostly).
        tokens = count_tokens(items, request.instructions, schemas, counter,
                              state.responses_units, f"{ex.salt}\x1fforwarded",
                              len(request.raw))
        if tokens > ex.budget:
            # A kept model turn the guard wanted cut counts whole: recompute smaller once
            # (stored, so the next requests extend the smaller view).
            again = await sessions.refit(
                fitting, int(min(target, ex.budget) * REFIT_FILL), salt=ex.salt,
                summarizer=ex.summarizer, session=ex.session,
                extra_tools=RECALL.added_tokens(request.body, counter),
                recall=RECALL.can_offer(request.body))
            items = None if again.messages is None else conv.render(again.messages)
            offer = again.recall and items is not None and RECALL.can_offer(request.body)
            schemas = schema_tokens(RECALL.add_tool(request.body) if offer else request.body,
                                    counter)
            tokens = count_tokens(items or ex.full, request.instructions, schemas, counter)
            if tokens > ex.budget:
                raise RuntimeError(f"the fitted input counts {tokens} tokens, over the "
                                   f"budget of {ex.budget}")
            fit = dataclasses.replace(again, summarizer_usage=fit.summarizer_usage
                                      + again.summarizer_usage, tokens=tokens)
        else:
            fit = dataclasses.replace(fit, tokens=tokens)
    elif request.previous_id is not None:
        items = ex.full  # the chain expanded, nothing else changed
    if ex.fit is not None:
        fit = dataclasses.replace(fit, summarizer_usage=ex.fit.summarizer_usage
                                  + fit.summarizer_usage)
    ex.conv, ex.fit, ex.items, ex.offer_recall = conv, fit, items, offer
    ex.log["view"] = fit.view
    ex.log["recall_offered"] = offer
    state.stats.fitted(fit)


def _prefix_summarizer(state: ProxyParts, ex: Exchange, conv: ResponsesConversation,
                       headers: Mapping[str, str]) -> Callable[[list[Any], LLM], LLM]:
    """Summaries asked as the conversation's continuation, through the upstream with the
    client's own headers (:class:`~ctxstack.proxy.responses_summary.ResponsesPrefixSummarizer`)."""
    upstream_headers = [(k, v) for k, v in state.upstream.request_headers(headers.items())
                        if k.lower() not in ("accept", "content-type")] + [
        ("content-type", "application/json")]
    full = ex.full or []

    async def send(content: bytes) -> tuple[int, object]:
        upstream = await state.upstream.open("POST", "responses", query="",
                                             headers=upstream_headers, content=content)
        _, data = await read_error(upstream)
        return upstream.status_code, data

    def build(prefix: list[Any], fallback: LLM) -> LLM:
        items = conv.render(prefix)
        compacted = len(items) > len(full) or any(
            a is not b for a, b in zip(items, full, strict=False))
        return ResponsesPrefixSummarizer(send, ex.request.body, items, fallback,
                                         recall=compacted)

    return build


async def close(ex: Exchange) -> None:
    """Release what the exchange opened (a per-request summariser)."""
    own, ex.own_summarizer = ex.own_summarizer, None
    if own is not None:
        await own.aclose()


async def open_upstream(state: ProxyParts, ex: Exchange, headers: list[tuple[str, str]],
                        query: str, *, stream: bool, client_headers: Mapping[str, str],
                        ) -> tuple[httpx.Response, bytes | None, object]:
    """Step 3–4: the upstream's response, with its error body read (``raw`` not None)
    when it is an error; an overflow error is retried once after a smaller fit.

    Raises:
        ProxyError: 502/504 when the upstream cannot be reached.
    """
    retried = False
    while True:
        state.stats.bump("forwarded")
        state.stats.wire(WIRE, ex.request.model, forwarded=1)
        upstream = await state.upstream.open("POST", "responses", query=query, headers=headers,
                                             content=ex.body(stream=stream))
        if upstream.status_code < 400:
            return upstream, None, None
        raw, data = await read_error(upstream, limit=ERROR_BODY_LIMIT)
        state.stats.upstream_error(upstream.status_code)
        if retried or ex.full is None or not is_context_overflow(upstream.status_code, data):
            return upstream, raw, data
        retried = True
        ex.log["overflow_retry"] = True
        state.stats.bump("overflow_retries")
        sent = ex.fit.tokens if ex.fit is not None and ex.fit.tokens else ex.budget
        target = int(min(ex.budget, sent) * state.settings.overflow_retry_fill)
        try:
            await _fit(state, ex, target, client_headers, refit=True)
        except Exception as exc:
            log.warning("proxy: compacting after an overflow failed: %s", exc)
            return upstream, raw, data


async def record(state: ProxyParts, ex: Exchange, response: Mapping[str, Any], *,
                 usage: UpstreamUsage | None = None, rounds: int = 0) -> None:
    """Step 5 for one finished response object (``usage``: the sum over the upstream
    calls made for it, when the proxy answered ``ctxstack_recall``; else its own)."""
    model = ex.request.model
    if usage is None and isinstance(response.get("usage"), Mapping):
        usage = responses_usage(response)
    if usage is not None:
        state.stats.usage(WIRE, model, usage, rounds)
        state.scales.observe(WIRE, model, ex.fit, usage, rounds)
    rid = response.get("id")
    output = response.get("output")
    if (not isinstance(rid, str) or not rid or not isinstance(output, list)
            or response.get("status") not in ("completed", "incomplete")):
        return
    # The body's length bounds its input's JSON (no serialising of a resent history just
    # to size what is kept in memory; a stored response is serialised anyway).
    size = len(ex.request.raw) + len(json.dumps(output, ensure_ascii=False,
                                                separators=(",", ":")))
    await state.chains.remember(ex.owner, rid, ex.request.previous_id, model,
                                [*ex.request.input, *output], persist=ex.request.store,
                                size=size)


def log_done(ex: Exchange, started: float, status: int, **extra: Any) -> None:
    fit = ex.fit
    fields: dict[str, Any] = {"model": ex.request.model, "stream": ex.request.stream,
                              "items": len(ex.request.input), "status": status,
                              "proxy_ms": round((time.perf_counter() - started) * 1000, 2)}
    if ex.request.previous_id is not None:
        fields["chain"] = "known" if ex.full is not None else "unknown"
    if fit is not None:
        fields.update(method=fit.method, kept=len(ex.items) if ex.items is not None else None,
                      tokens_estimated=fit.tokens, counter=fit.counter,
                      summarizer_calls=fit.summarizer_usage.calls)
    if ex.failed:
        fields["fit_failed"] = ex.failed
    fields.update(ex.log)
    log_event("responses", **fields, **extra)


class EventReader:
    """Server-Sent Events from decoded bytes: ``(event name or None, data text)`` pairs."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buffer = ""

    def feed(self, chunk: bytes) -> list[tuple[str | None, str]]:
        self._buffer += self._decoder.decode(chunk).replace("\r\n", "\n")
        events: list[tuple[str | None, str]] = []
        while "\n\n" in self._buffer:
            block, self._buffer = self._buffer.split("\n\n", 1)
            name: str | None = None
            data: list[str] = []
            for line in block.split("\n"):
                if line.startswith("event:"):
                    name = line[6:].strip()
                elif line.startswith("data:"):
                    data.append(line[5:].removeprefix(" "))
            if data:
                events.append((name, "\n".join(data)))
        return events


def terminal_response(name: str | None, data: str) -> dict[str, Any] | None:
    """The response object of a terminal event (``response.completed`` …), else None."""
    if name is not None and name not in TERMINAL:
        return None
    if name is None and not any(t in data for t in TERMINAL):
        return None
    try:
        event = json.loads(data)
    except json.JSONDecodeError:
        return None
    if not isinstance(event, dict) or event.get("type") not in TERMINAL:
        return None
    response = event.get("response")
    return response if isinstance(response, dict) else None


async def read_events(upstream: httpx.Response,
                      ) -> AsyncGenerator[tuple[bytes, list[tuple[str | None, str]]], None]:
    """The upstream's SSE body: each chunk with the events it completed. A stall or a
    broken connection ends it with :class:`ProxyError` (504/502); the response is closed
    at the end either way."""
    reader = EventReader()
    try:
        async for chunk in upstream.aiter_bytes():
            yield chunk, reader.feed(chunk)
    except httpx.HTTPError as exc:
        timed_out = isinstance(exc, httpx.TimeoutException)
        log.warning("proxy: upstream responses stream %s (%s)",
                    "stalled" if timed_out else "broke", type(exc).__name__)
        raise (upstream_timeout(upstream_timeout_seconds(upstream)) if timed_out
               else upstream_failed()) from None
    finally:
        await upstream.aclose()


async def upstream_events(upstream: httpx.Response, ex: Exchange, state: ProxyParts,
                          ) -> AsyncGenerator[tuple[bytes, list[tuple[str | None, str]]], None]:
    """:func:`read_events`, the terminal response recorded as it passes."""
    async with contextlib.aclosing(read_events(upstream)) as chunks:
        async for chunk, events in chunks:
            yield chunk, events  # the client first, then the bookkeeping
            for name, data in events:
                response = terminal_response(name, data)
                if response is not None:
                    await record(state, ex, response)
