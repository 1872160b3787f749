"""The token counter of each requested model: exact when its tokenizer is known offline.

:class:`ModelCounters` gives, per model name in a request, what
:func:`ctxstack.tokens.counter_for_model` picks for it: tiktoken's ``o200k_base``
for ``gpt-4o`` / ``gpt-4.1`` / ``o3`` …, ``cl100k_base`` for ``gpt-4`` / ``gpt-3.5``, when
the vocabulary is on disk (nothing is downloaded); otherwise the default heuristic with
the matching weights and its safety margin. The proxy then fits to
``effective_budget(budget, counter)`` (:func:`ctxstack.tokens._counter.effective_budget`): the
whole budget with an exact counter (margin 0), the budget less the heuristic's margin
otherwise. A vocabulary that is not available offline is an explicit fallback: logged
once per model name, and the log line of each request names the counter it used.

Bounded on purpose: model names come from clients, so the proxy asks
``counter_for_model`` only with one canonical name per tokenizer family (at most three
counters are ever built) and keeps at most :data:`MAX_CACHED` names → counter entries.
One more is built when the operator names a tokenizer (``LLM_MODEL`` + ``LLM_TOKENIZER``):
requests naming exactly that model count with its ``tokenizer.json``; a missing or
unreadable file logs a warning and those requests count with the heuristic.

**Memoised counts.** Clients resend the whole history on every call, so the proxy counts
the same texts again and again. An exact counter encodes each one (≈ 22 ms for a
500-message history by ``o200k_base``, 23× the heuristic). :class:`MemoCounter` remembers
the count of each text by content (least recently used dropped beyond
:data:`MEMO_MAX_CHARS` characters), so a resent history costs one dictionary lookup per
message — exact or heuristic alike (≈ 0.35 ms for those 500 messages either way, measured
in ``benchmarks/bench_proxy.py``'s exact-count rows).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import OrderedDict

from ctxstack.tokens import BaseCounter, HeuristicCounter, TokenCounter
from ctxstack.tokens import counter_for_model as _counter_for_model
from ctxstack.tokens._counter import budget_margin
from ctxstack.tokens._exact import family_for_model

log = logging.getLogger("ctxstack.proxy")

MAX_CACHED = 1024
"""Model names remembered (then the map is cleared: rebuilding an entry is a lookup)."""
MEMO_MAX_CHARS = 16_000_000
"""Characters of text whose count is remembered per counter (16–64 MB; least recent
dropped): some sixty 2,000-message conversations."""
MEMO_MIN_CHARS = 16
"""Shorter texts are counted directly: encoding them is as cheap as a lookup."""
_CANONICAL = {"o200k": "gpt-4o", "cl100k": "gpt-4"}


class MemoCounter(BaseCounter):
    """A counter whose text counts are remembered by content (thread-safe).

    Same ``cache_key`` and ``margin`` as the counter it wraps, so per-message caches and
    budgets treat it exactly as that counter.
    """

    def __init__(self, inner: BaseCounter, *, max_chars: int = MEMO_MAX_CHARS) -> None:
        self.inner = inner
        self.margin: float = budget_margin(inner)
        self.image_tokens = inner.image_tokens
        self.message_overhead = inner.message_overhead
        self.max_chars = max_chars
        self._texts: OrderedDict[str, int] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()

    @property
    def cache_key(self) -> str:
        return self.inner.cache_key

    def count_text(self, text: str) -> int:
        if len(text) < MEMO_MIN_CHARS:
            return self.inner.count_text(text)
        memo = self._texts
        with self._lock:
            hit = memo.get(text)
            if hit is not None:
                memo.move_to_end(text)
                return hit
        tokens = self.inner.count_text(text)
        if len(text) > self.max_chars // 4:
            return tokens  # too big to keep
        with self._lock:
            if text not in memo:
                memo[text] = tokens
                self._chars += len(text)
                while self._chars > self.max_chars:
                    old, _ = memo.popitem(last=False)
                    self._chars -= len(old)
        return tokens

    def __repr__(self) -> str:
        return f"MemoCounter({self.inner!r})"


class ModelCounters:
    """``counters.get(model)`` → the counter for that model name (see the module doc).

    Args:
        fixed: one counter for every model (a test's or an embedding application's);
            when given, no per-model choice is made.
        tokenizer: (model name, ``tokenizer.json`` path): requests naming exactly that
            model count with that file (built on first use).
    """

    def __init__(self, fixed: TokenCounter | None = None, *,
                 tokenizer: tuple[str, str] | None = None) -> None:
        self.fixed = fixed
        self.tokenizer = tokenizer
        self._by_name: dict[str, TokenCounter] = {}
        self._by_family: dict[str | None, TokenCounter] = {}
        self._lock = threading.Lock()

    async def aget(self, model: str) -> TokenCounter:
        """:meth:`get` without blocking the event loop: the first request of a tokenizer
        family loads its vocabulary (up to a second for ``o200k_base``) in a thread, so
        the requests in flight meanwhile are not held up."""
        if self.fixed is not None:
            return self.fixed
        hit = self._by_name.get(model)
        if hit is not None:
            return hit
        if family_for_model(model) in self._by_family and not self._is_configured(model):
            return self.get(model)
        return await asyncio.to_thread(self.get, model)

    def get(self, model: str) -> TokenCounter:
        if self.fixed is not None:
            return self.fixed
        hit = self._by_name.get(model)
        if hit is not None:
            return hit
        if self._is_configured(model):
            return self._configured(model)
        family = family_for_model(model)
        with self._lock:
            counter = self._by_family.get(family)
            if counter is None:
                counter = self._build(family)
                self._by_family[family] = counter
            if len(self._by_name) >= MAX_CACHED:
                self._by_name.clear()
            self._by_name[model] = counter
        inner = counter.inner if isinstance(counter, MemoCounter) else counter
        if family is not None and isinstance(inner, HeuristicCounter):
            log.warning("proxy: the %s vocabulary for %r is not available offline; counting "
                        "with the heuristic and its %.0f%% margin", family, model,
                        inner.margin * 100)
        return counter

    def _is_configured(self, model: str) -> bool:
        return self.tokenizer is not None and model == self.tokenizer[0]

    def _configured(self, model: str) -> TokenCounter:
        assert self.tokenizer is not None
        base = _counter_for_model(model, self.tokenizer[1])  # warns and falls back if absent
        counter = MemoCounter(base) if isinstance(base, BaseCounter) else base
        with self._lock:
            self._by_name[model] = counter
        return counter

    @staticmethod
    def _build(family: str | None) -> TokenCounter:
        base = _counter_for_model(_CANONICAL.get(family or ""))
        return MemoCounter(base) if isinstance(base, BaseCounter) else base
