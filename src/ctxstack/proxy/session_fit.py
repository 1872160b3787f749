"""Cache-stable fitting per session: extend the view forwarded last time, recompute it
only when that overflows, one recomputation per session at a time.

The decision for a request over budget (one within budget goes out unchanged before any
of this, :class:`~ctxstack.proxy.fitting.Fitter`):

1. **Extend.** The session has a stored view (:mod:`ctxstack.proxy.views`) whose first
   ``covered`` client messages match this request's → that view plus the new messages,
   if within budget (method ``checkpoint``, ``view=extended``). Byte-identical to the
   previous forwarded request up to its end: the provider's prompt cache serves it.
   No database write.
2. **Recompute, single flight.** Otherwise, holding the session's flight
   (:class:`~ctxstack.proxy.sessions.SingleFlight`): if another request just recomputed
   the view, extend that one; else run the checkpoint-or-guard fit on the client's whole
   history with the session's archive (what is cleared, summarised or dropped becomes
   recallable), skipping the bare checkpoint reuse so the guard compacts *with headroom*
   (its own low watermarks ``mask_fill`` / ``target_fill``, chosen by measurement in the
   agent loop), and store the result as the session's new view.
3. **Waited too long** for another worker's recomputation → the guard without a
   summariser (truncation or masks), not stored.

Errors (the database, anything unexpected) propagate: the route forwards the original
request then (do no harm).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from ctxstack import LLM, TokenCounter
from ctxstack.proxy.chat_wire import summary_prefix
from ctxstack.proxy.fitting import DEFAULT_CUT_CHARS, MIN_LIMIT, Fit, Fitter
from ctxstack.proxy.request import CompletionRequest, guard_view
from ctxstack.proxy.sessions import (
    FlightTimeout,
    SessionStore,
    SingleFlight,
    conversation_hash,
    prefix_hash,
)
from ctxstack.proxy.views import ViewRecipe
from ctxstack.store.proxy_sessions import SessionViewRecord
from ctxstack.tokens._counter import effective_budget

log = logging.getLogger("ctxstack.proxy")

PrefixFactory = Callable[[list[Any], LLM], LLM]
"""``(prefix, fallback summariser) -> summariser`` continuing that prefix."""
INSTRUCTION_ROOM = 1024
"""Tokens kept free in a prefix-reusing summary request for the instruction."""


class SessionFitter:
    """:meth:`fit` as described in the module doc."""

    def __init__(self, fitter: Fitter, store: SessionStore, flight: SingleFlight) -> None:
        self.fitter = fitter
        self.store = store
        self.flight = flight

    async def fit(self, request: CompletionRequest, budget: int, *, salt: str,
                  summarizer: LLM | None, session: str,
                  extra_tools: int | Callable[[], int] = 0,
                  prefix_summarizer: PrefixFactory | None = None,
                  recall: bool = True) -> Fit:
        """Fit ``request`` of ``session`` into ``budget`` (``extra_tools``: tokens of a
        tool the proxy adds when the session has an archive — ``ctxstack_recall``;
        ``prefix_summarizer``: builds the summariser that continues a given prefix).
        ``extra_tools`` may be a function: it is called only for a request that may be
        over budget (a request within budget pays nothing for it). ``recall=False``: this
        request cannot be offered the tool (the client turned tools off, …), so a view
        recomputed for it neither archives nor names the tool; the next request that can
        be offered it archives from the client's full history when it recomputes."""
        extra = extra_tools if isinstance(extra_tools, int) else None

        def reserve() -> int:
            nonlocal extra
            if extra is None:
                extra = extra_tools() if callable(extra_tools) else extra_tools
            return extra

        counter = await self.fitter.counters.aget(request.model)
        conv = request.conversation
        tools = request.tools_tokens(counter)
        n = len(conv)
        record = None
        if len(request.raw) > budget:
            # Possibly over budget (a token is at least a byte): the session's view first,
            # counting only the messages after it, not the whole history again.
            record = await self.store.load(session)
            extended = self._extend(request, counter, record, max(
                MIN_LIMIT, budget - tools - reserve()), tools + reserve(), session,
                reserve())
            if extended is not None:
                return extended
        total = conv.tokens(counter)
        if (total <= effective_budget(max(MIN_LIMIT, budget - tools), counter)
                and conv.longest_text() <= DEFAULT_CUT_CHARS):
            return Fit(None, "none", n, n, 0, total + tools, total + tools,
                       counter=counter.cache_key, session=session)
        extra_tokens = reserve()
        tools += extra_tokens
        limit = max(MIN_LIMIT, budget - tools)
        if record is None:
            record = await self.store.load(session)
            extended = self._extend(request, counter, record, limit, tools, session,
                                    extra_tokens)
            if extended is not None:
                return extended
        try:
            async with self.flight.hold(session) as waited:
                if waited:
                    record = await self.store.load(session)
                    extended = self._extend(request, counter, record, limit, tools,
                                            session, extra_tokens)
                    if extended is not None:
                        return extended
                if summarizer is not None and prefix_summarizer is not None:
                    prefix = self._summary_prefix(request, counter, record, limit, session)
                    summarizer = prefix_summarizer(prefix, summarizer)
                return await self._recompute(request, counter, record, limit, tools, total,
                                             salt=salt, summarizer=summarizer,
                                             session=session, extra_tools=extra_tokens,
                                             recall=recall)
        except FlightTimeout:
            log.warning("proxy: session busy for too long; fitting without a summariser")
            fit = await self.fitter.compact(request, counter, limit, tools, total,
                                             salt=salt, summarizer=None)
            return dataclasses.replace(fit, session=session)

    def _extend(self, request: CompletionRequest, counter: TokenCounter,
                record: SessionViewRecord | None, limit: int, tools: int,
                session: str, extra_tools: int) -> Fit | None:
        conv = request.conversation
        n = len(conv)
        if (record is None or record.covered <= 0 or record.covered > n
                or record.counter != counter.cache_key
                or record.model != request.model[:200]
                or conv.longest_text(record.covered) > DEFAULT_CUT_CHARS):
            return None
        tail = conv.tail_tokens(counter, record.covered)
        tokens = record.view_tokens + tail
        if tokens > effective_budget(limit, counter):
            return None
        if conversation_hash(conv, session, record.covered) != record.prefix_hash:
            return None
        try:
            recipe = ViewRecipe.from_json(record.recipe, record.covered)
        except ValueError as exc:
            log.warning("proxy: a stored session view is unreadable (%s); recomputing", exc)
            return None
        view = recipe.apply(conv.messages)
        recall = record.archived > 0
        sent = tokens + tools - (0 if recall else extra_tools)
        return Fit(view, "checkpoint", n, len(view), record.summarized, sent,
                   record.covered_tokens + tail + tools - extra_tools,
                   counter=counter.cache_key, view="extended", recall=recall,
                   session=session)

    async def refit(self, request: CompletionRequest, limit: int, *, salt: str,
                    summarizer: LLM | None, session: str, extra_tools: int = 0,
                    recall: bool = True) -> Fit:
        """Compact to an explicit, smaller ``limit`` (after the upstream said the request
        overflowed) and store the result as the session's view, so the next requests
        extend a view the upstream accepts instead of overflowing again (``recall``: as
        in :meth:`fit`)."""
        counter = await self.fitter.counters.aget(request.model)
        tools = request.tools_tokens(counter) + extra_tools
        total = request.conversation.tokens(counter)
        async with self.flight.hold(session):
            record = await self.store.load(session)
            return await self._recompute(
                request, counter, record, max(MIN_LIMIT, limit - tools), tools, total,
                salt=salt, summarizer=summarizer, session=session, extra_tools=extra_tools,
                recall=recall)

    def _summary_prefix(self, request: CompletionRequest, counter: TokenCounter,
                        record: SessionViewRecord | None, limit: int, session: str,
                        ) -> list[Any]:
        """What the summariser's request starts with: the session's view extended (what
        was forwarded last time, then the new messages) — or the client's messages when
        there is no view yet —, cut to fit the budget less room for the instruction."""
        conv = request.conversation
        view: list[Any] = conv.messages
        counts = list(conv.counts)
        if (record is not None and record.covered > 0 and record.covered <= len(conv)
                and conversation_hash(conv, session, record.covered) == record.prefix_hash):
            try:
                recipe = ViewRecipe.from_json(record.recipe, record.covered)
            except ValueError:
                recipe = None
            if recipe is not None:
                view = recipe.apply(conv.messages)
                counts = [conv.counts[e] if isinstance(e, int)
                          else counter.count_message(guard_view(e["m"], 0))
                          for e in recipe.entries] + counts[record.covered:]
        room = effective_budget(limit, counter) - INSTRUCTION_ROOM
        return summary_prefix(view, counts, room)

    async def _recompute(self, request: CompletionRequest, counter: TokenCounter,
                         record: SessionViewRecord | None, limit: int, tools: int,
                         total: int, *, salt: str, summarizer: LLM | None,
                         session: str, extra_tools: int, recall: bool) -> Fit:
        conv = request.conversation
        archive = self.store.archive(session, record.archived if record else 0) \
            if recall else None
        fit = await self.fitter.compact(request, counter, limit, tools, total, salt=salt,
                                         summarizer=summarizer, archive=archive, reuse=False)
        recall = archive is not None and len(archive) > 0
        fit = dataclasses.replace(
            fit, session=session, recall=recall, tokens_before=fit.tokens_before - extra_tools,
            tokens=fit.tokens - (0 if recall else extra_tools))
        if fit.messages is None:
            return fit
        recipe = ViewRecipe.of(conv.messages, fit.messages)
        await self.store.save(SessionViewRecord(
            session_key=session, model=request.model[:200], covered=len(conv),
            prefix_hash=prefix_hash(conv.messages, session, len(conv)),
            recipe=recipe.to_json(),
            view_tokens=fit.tokens - tools + (0 if recall else extra_tools),
            covered_tokens=total,
            counter=counter.cache_key, summarized=fit.summarized, method=fit.method))
        return dataclasses.replace(fit, view="recomputed")
