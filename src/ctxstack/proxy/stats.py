"""What the proxy tells: response headers per request, running totals, one log line each.

Headers on every guarded chat completion (the client's ``usage`` object stays the
upstream's; the summariser's cost is reported beside it, never mixed in):

* ``x-ctxstack-compaction: method=M; original=N; kept=K; summarized=S`` — ``M`` is
  ``none`` (forwarded unchanged), ``checkpoint`` (an earlier summary reused), ``llm`` (a
  new summary), ``truncate`` (oldest messages dropped); ``N`` messages received, ``K``
  forwarded (a summary counts as one), ``S`` represented by the summary;
* ``x-ctxstack-input-tokens-estimated`` — the estimate of what was forwarded;
* ``x-ctxstack-summarizer-usage: input_tokens=I; output_tokens=O; calls=C``.

``GET /ctxstack/stats`` returns :class:`ProxyStats` as JSON: totals of this worker process
since it started (each worker counts its own; the checkpoints they share are in the
database).
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

from pydantic import BaseModel, Field

from ctxstack import Usage
from ctxstack.proxy.fitting import Fit

log = logging.getLogger("ctxstack.proxy")

COMPACTION_HEADER = "x-ctxstack-compaction"
TOKENS_HEADER = "x-ctxstack-input-tokens-estimated"
SUMMARIZER_HEADER = "x-ctxstack-summarizer-usage"


def fit_headers(fit: Fit) -> dict[str, str]:
    """The three ``x-ctxstack-*`` headers for one fitted request."""
    usage = fit.summarizer_usage
    return {
        COMPACTION_HEADER: (f"method={fit.method}; original={fit.original}; kept={fit.kept}; "
                            f"summarized={fit.summarized}"),
        TOKENS_HEADER: str(fit.tokens),
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


class ProxyStats(BaseModel):
    """Running totals of one proxy worker (the ``/ctxstack/stats`` body)."""

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


class StatsRecorder:
    """Thread-safe updates of :class:`ProxyStats` (the app runs on one loop, but the
    recorder may be read from a test's thread)."""

    def __init__(self) -> None:
        self._stats = ProxyStats()
        self._lock = threading.Lock()

    def snapshot(self) -> ProxyStats:
        with self._lock:
            return self._stats.model_copy(deep=True)

    def bump(self, field: str, by: int = 1) -> None:
        with self._lock:
            setattr(self._stats, field, getattr(self._stats, field) + by)

    def fitted(self, fit: Fit) -> None:
        with self._lock:
            s = self._stats
            s.compactions[fit.method] = s.compactions.get(fit.method, 0) + 1
            s.tokens_before += fit.tokens_before
            s.tokens_forwarded += fit.tokens
            s.tokens_saved += max(0, fit.tokens_before - fit.tokens)
            s.checkpoints_saved += fit.checkpoint_saved
            self._add_usage(fit.summarizer_usage)

    def _add_usage(self, usage: Usage) -> None:
        t = self._stats.summarizer
        t.calls += usage.calls
        t.input_tokens += usage.input_tokens
        t.output_tokens += usage.output_tokens

    def upstream_error(self, status: int) -> None:
        with self._lock:
            key = str(status)
            self._stats.upstream_errors[key] = self._stats.upstream_errors.get(key, 0) + 1


def log_event(event: str, **fields: Any) -> None:
    """One structured log line: a JSON object with ``event`` first (INFO)."""
    if log.isEnabledFor(logging.INFO):
        log.info("%s", json.dumps({"event": event, **fields}, default=str))
