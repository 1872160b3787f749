"""What the proxy tells: response headers per request, running totals, one log line each.

Headers on every guarded chat completion (the client's ``usage`` object stays the
upstream's; the summariser's cost is reported beside it, never mixed in):

* ``x-ctxstack-compaction: method=M; original=N; kept=K; summarized=S`` — ``M`` is
  ``none`` (forwarded unchanged), ``checkpoint`` (an earlier summary reused), ``llm`` (a
  new summary), ``truncate`` (oldest messages dropped); ``N`` messages received, ``K``
  forwarded (a summary counts as one), ``S`` represented by the summary;
* ``x-ctxstack-input-tokens-estimated`` — the count of what was forwarded;
* ``x-ctxstack-token-counter`` — what counted it: ``tiktoken:o200k_base`` (exact, the
  model's own tokenizer), ``bpe-heuristic`` (an estimate; the budget's margin was kept
  free), … (:mod:`ctxstack.proxy.counting`);
* ``x-ctxstack-summarizer-usage: input_tokens=I; output_tokens=O; calls=C``;
* ``x-ctxstack-usage: sum; upstream_calls=N`` (``sum`` on a stream) — the answer's
  ``usage`` is the sum over the upstream calls made for the request (more than one when
  the proxy answered ``ctxstack_recall``, :mod:`ctxstack.proxy.recall`).

**Per wire and model**, one shape: ``by_model[wire][model]`` (:class:`ModelUsage`) —
``requests`` received, ``forwarded`` upstream calls, upstream answers that reported usage
(``responses``), ``input_tokens`` / ``output_tokens``, prompt-cache reads and writes
(``cache_read_tokens`` / ``cache_write_tokens``, from Chat
``prompt_tokens_details.cached_tokens``, Anthropic ``cache_read_input_tokens`` /
``cache_creation_input_tokens``, Responses ``input_tokens_details.cached_tokens``) and the
``recall_rounds``, and on Responses the ``websocket_requests``. The wires are ``chat``,
``anthropic`` and ``responses``. (Counts stored by older proxies under ``by_wire.*`` are
folded in.)

``GET /ctxstack/stats`` returns :class:`ProxyStats` as JSON: the totals of **every worker**
(``--workers N``, and every other proxy process) sharing the database, since the database
was created. Design, the simplest that is correct with any number of processes: each
worker counts in memory (:class:`StatsRecorder`) and adds what it counted to one row per
counter in the database every second (:class:`SharedStats`; an atomic ``value + delta``
upsert, :mod:`ctxstack.store.proxy_stats`), so a busy proxy writes one small transaction
a second per worker, never one per request. A stats request first adds its own worker's
pending counts, then reads the sums (plus whatever of its own could not be written yet):
its own requests are always included, another worker's at most one flush interval
(``CTXSTACK_PROXY_STATS_FLUSH``, 1 s) late. If the database cannot be read, the answer is
this worker's own totals, marked ``"scope": "worker"``; counts not yet written are kept
and written at the next flush (and when the worker stops).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, Field

from ctxstack import Usage
from ctxstack.proxy.errors import ProxyError
from ctxstack.proxy.fitting import Fit
from ctxstack.proxy.recall import UpstreamUsage
from ctxstack.store import SessionFactory
from ctxstack.store.errors import StorageError
from ctxstack.store.proxy_stats import add_proxy_stats, load_proxy_stats

log = logging.getLogger("ctxstack.proxy")

COMPACTION_HEADER = "x-ctxstack-compaction"
TOKENS_HEADER = "x-ctxstack-input-tokens-estimated"
SUMMARIZER_HEADER = "x-ctxstack-summarizer-usage"
COUNTER_HEADER = "x-ctxstack-token-counter"


def fit_headers(fit: Fit) -> dict[str, str]:
    """The ``x-ctxstack-*`` headers for one fitted request."""
    usage = fit.summarizer_usage
    return {
        COMPACTION_HEADER: (f"method={fit.method}; original={fit.original}; kept={fit.kept}; "
                            f"summarized={fit.summarized}"),
        TOKENS_HEADER: str(fit.tokens),
        COUNTER_HEADER: fit.counter,
        SUMMARIZER_HEADER: (f"input_tokens={usage.input_tokens}; "
                            f"output_tokens={usage.output_tokens}; calls={usage.calls}"),
    }


def parse_compaction_header(value: str) -> dict[str, str]:
    """``"method=llm; original=9"`` → ``{"method": "llm", "original": "9"}`` (for clients)."""
    out: dict[str, str] = {}
    for item in value.split(";"):
        key, sep, val = item.strip().partition("=")
        if sep:
            out[key] = val
    return out


class SummarizerTotals(BaseModel):
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0


class ModelUsage(BaseModel):
    """What the upstream reported for one model on one wire, summed (cache figures as the
    provider names them: Chat ``prompt_tokens_details.cached_tokens``, Anthropic
    ``cache_read_input_tokens`` / ``cache_creation_input_tokens``, Responses
    ``input_tokens_details.cached_tokens``)."""

    requests: int = 0
    """Client requests received on this wire for this model (where the wire counts them)."""
    forwarded: int = 0
    """Requests sent upstream (retries and recall rounds included; where counted)."""
    responses: int = 0
    """Upstream answers that reported usage."""
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    recall_rounds: int = 0
    """Rounds in which the proxy answered ``ctxstack_recall`` and called the upstream again."""
    websocket_requests: int = 0
    """Of ``requests``, those that came over a WebSocket (the Responses wire's)."""


BY_MODEL = "by_model"
_SEP = "|"


def usage_keys(wire: str, model: str, usage: UpstreamUsage, rounds: int) -> dict[str, int]:
    """Flat keys of one request's upstream usage (``by_model|chat|gpt-4o|cache_read_tokens``;
    ``|`` because model names contain dots)."""
    return _model_keys(wire, model, {
        "responses": usage.calls, "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens, "cache_read_tokens": usage.cache_read_tokens,
        "cache_write_tokens": usage.cache_write_tokens, "recall_rounds": rounds})


def _model_keys(wire: str, model: str, counts: Mapping[str, int]) -> dict[str, int]:
    """Flat ``by_model`` keys of ``counts`` (each a :class:`ModelUsage` field)."""
    prefix = f"{BY_MODEL}{_SEP}{wire}{_SEP}{model[:60].replace(_SEP, '/')}{_SEP}"
    return {f"{prefix}{metric}": by for metric, by in counts.items()
            if metric in ModelUsage.model_fields}


class ProxyStats(BaseModel):
    """Running totals (the ``/ctxstack/stats`` body; see the module doc for their scope)."""

    scope: Literal["all", "worker"] = "all"
    """``all``: every worker sharing the database; ``worker``: only the one that answered
    (the database could not be read)."""
    requests: int = 0
    """Chat-completion requests received (bad requests included)."""
    forwarded: int = 0
    """Chat-completion requests sent upstream (a retry counts again)."""
    passthrough: int = 0
    """Other ``/v1/`` requests forwarded unchanged."""
    bad_requests: int = 0
    unauthorized: int = 0
    compactions: dict[str, int] = Field(default_factory=lambda: {
        "none": 0, "checkpoint": 0, "llm": 0, "truncate": 0})
    """Requests per fitting method."""
    checkpoints_saved: int = 0
    tokens_before: int = 0
    tokens_forwarded: int = 0
    tokens_saved: int = 0
    """Estimated input tokens not sent thanks to compaction."""
    summarizer: SummarizerTotals = Field(default_factory=SummarizerTotals)
    upstream_errors: dict[str, int] = Field(default_factory=dict)
    """Upstream answers with an error status, by status code."""
    overflow_retries: int = 0
    unreachable: int = 0
    timeouts: int = 0
    fit_failures: int = 0
    """Requests whose fitting failed (a bug, an unknown shape, a database error): forwarded
    unchanged instead (do no harm; logged)."""
    by_model: dict[str, dict[str, ModelUsage]] = Field(default_factory=dict)
    """Per wire (``chat``, ``anthropic``, ``responses``) and model: requests, upstream
    calls, usage, prompt-cache reads and writes, recall rounds, as the upstream reported
    them (see the module doc). WebSocket traffic counts with its wire."""

    @classmethod
    def from_flat(cls, totals: Mapping[str, int], scope: Literal["all", "worker"] = "all",
                  ) -> ProxyStats:
        """Built from flat keys (``requests``, ``compactions.llm``, ``summarizer.calls``,
        ``upstream_errors.429``); unknown keys (a newer proxy's) are ignored."""
        stats = cls(scope=scope)

        def add(wire: str, model: str, metric: str, value: int) -> None:
            entry = stats.by_model.setdefault(wire, {}).setdefault(model, ModelUsage())
            setattr(entry, metric, getattr(entry, metric) + value)

        for key, value in totals.items():
            if key.startswith(BY_MODEL + _SEP):
                parts = key.split(_SEP)
                if len(parts) == 4 and parts[3] in ModelUsage.model_fields:
                    add(parts[1], parts[2], parts[3], value)
                continue
            group, _, name = key.partition(".")
            if not name and group in _INT_FIELDS:
                setattr(stats, group, getattr(stats, group) + value)
            elif group in ("compactions", "upstream_errors") and name:
                counts: dict[str, int] = getattr(stats, group)
                counts[name] = counts.get(name, 0) + value
            elif group == "summarizer" and name in SummarizerTotals.model_fields:
                setattr(stats.summarizer, name, getattr(stats.summarizer, name) + value)
            elif group == "by_wire" and name:  # written by proxies before by_model had it
                wire, _, rest = name.partition(".")
                model, _, metric = rest.rpartition(".")
                if wire and model and metric in ModelUsage.model_fields:
                    add(wire, model, metric, value)
            # ``cache_tokens.*`` keys of older proxies were always written beside the
            # by_model ones: not added twice.
        return stats


_INT_FIELDS = frozenset(name for name, f in ProxyStats.model_fields.items()
                        if f.annotation is int)


class StatsRecorder:
    """This worker's counts: flat keys (see :meth:`ProxyStats.from_flat`), all of them since
    it started and those not yet written to the database. Thread-safe (the app runs on one
    loop, but a test may read from its own thread)."""

    def __init__(self) -> None:
        self._totals: dict[str, int] = {}
        self._pending: dict[str, int] = {}
        self._lock = threading.Lock()

    def snapshot(self) -> ProxyStats:
        """This worker's totals since it started."""
        with self._lock:
            return ProxyStats.from_flat(self._totals, scope="worker")

    def _add(self, items: Mapping[str, int]) -> None:
        with self._lock:
            for key, by in items.items():
                if by:
                    self._totals[key] = self._totals.get(key, 0) + by
                    self._pending[key] = self._pending.get(key, 0) + by

    def bump(self, field: str, by: int = 1) -> None:
        if field not in _INT_FIELDS:
            raise ValueError(f"unknown proxy stats field {field!r}")
        self._add({field: by})

    def fitted(self, fit: Fit) -> None:
        usage: Usage = fit.summarizer_usage
        self._add({
            f"compactions.{fit.method}": 1,
            "tokens_before": fit.tokens_before,
            "tokens_forwarded": fit.tokens,
            "tokens_saved": max(0, fit.tokens_before - fit.tokens),
            "checkpoints_saved": int(fit.checkpoint_saved),
            "summarizer.calls": usage.calls,
            "summarizer.input_tokens": usage.input_tokens,
            "summarizer.output_tokens": usage.output_tokens,
        })

    def usage(self, wire: str, model: str, usage: UpstreamUsage, rounds: int = 0) -> None:
        """What the upstream reported for one client request (summed over its calls)."""
        self._add(usage_keys(wire, model, usage, rounds))

    def wire(self, wire: str, model: str, **counts: int) -> None:
        """Add ``counts`` (``requests=1``, ``input_tokens=N``, … — :class:`ModelUsage`
        fields; others are ignored) to ``wire`` and ``model`` in ``by_model``."""
        self._add(_model_keys(wire, model, counts))

    def failed(self, exc: ProxyError) -> None:
        """A request the proxy answered with its own error: counted by kind (bad request,
        unauthorized, upstream unreachable or silent; other kinds only in the log)."""
        kind = {400: "bad_requests", 401: "unauthorized"}.get(exc.status) or {
            "upstream_unreachable": "unreachable", "upstream_timeout": "timeouts",
        }.get(exc.code or "")
        if kind:
            self.bump(kind)

    def upstream_error(self, status: int) -> None:
        self._add({f"upstream_errors.{status}": 1})

    def take_pending(self) -> dict[str, int]:
        """The counts not yet written, handed over (the caller writes or returns them)."""
        with self._lock:
            pending, self._pending = self._pending, {}
            return pending

    def pending(self) -> dict[str, int]:
        """A copy of the counts not yet written."""
        with self._lock:
            return dict(self._pending)

    def return_pending(self, pending: Mapping[str, int]) -> None:
        """Counts whose write failed: written with the next batch."""
        with self._lock:
            for key, by in pending.items():
                self._pending[key] = self._pending.get(key, 0) + by


DEFAULT_FLUSH_SECONDS = 1.0


class SharedStats:
    """Writes a worker's counts to the database in batches and reads every worker's sums
    (see the module doc). :meth:`start` in the app's lifespan, :meth:`aclose` after it."""

    def __init__(self, recorder: StatsRecorder, factory: SessionFactory, *,
                 interval: float = DEFAULT_FLUSH_SECONDS) -> None:
        self.recorder = recorder
        self.factory = factory
        self.interval = interval
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.flush()
            except Exception:  # never let the timer die: the next tick tries again
                log.exception("proxy: writing stats failed")

    async def flush(self) -> bool:
        """Write the pending counts; False (and kept for the next flush) if that failed."""
        async with self._lock:
            return await self._flush()

    async def _flush(self) -> bool:
        pending = self.recorder.take_pending()
        if not pending:
            return True
        try:
            await add_proxy_stats(self.factory, pending)
        except StorageError as exc:
            self.recorder.return_pending(pending)
            log.warning("proxy: stats not written to the database (kept for later): %s", exc)
            return False
        return True

    async def totals(self) -> ProxyStats:
        """Every worker's totals: the stored sums plus whatever this worker could not write
        yet (a locked database); this worker's own if the database cannot be read."""
        async with self._lock:
            await self._flush()
            try:
                stored = await load_proxy_stats(self.factory)
            except StorageError as exc:
                log.warning("proxy: stats not read from the database: %s", exc)
                return self.recorder.snapshot()
            for key, by in self.recorder.pending().items():
                stored[key] = stored.get(key, 0) + by
            return ProxyStats.from_flat(stored)

    async def aclose(self) -> None:
        """Stop the timer and write what is left."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self.flush()


def log_event(event: str, **fields: Any) -> None:
    """One structured log line: a JSON object with ``event`` first (INFO)."""
    if log.isEnabledFor(logging.INFO):
        log.info("%s", json.dumps({"event": event, **fields}, default=str))
