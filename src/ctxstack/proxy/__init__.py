"""``ctxstack proxy``: context management for any OpenAI-compatible client.

An OpenAI-compatible server in front of an upstream endpoint. ``POST /v1/chat/completions``
is fitted into the requested model's budget by the guard before it is forwarded (a request
already within budget goes out byte for byte as received); every other ``/v1/`` route
passes through unchanged. ``POST /v1/messages`` and ``/v1/messages/count_tokens``
(Anthropic Messages, what Claude Code speaks) are fitted the same way and forwarded to
the Anthropic upstream (:mod:`ctxstack.proxy.anthropic`). Continuing conversations are
recognised by message-prefix hashes and reuse their checkpoint, so a growing conversation
is summarised once per overflow, not once per request.

Modules: :mod:`~ctxstack.proxy.settings` (environment), :mod:`~ctxstack.proxy.request`
(validation, guard views), :mod:`~ctxstack.proxy.fitting` (the decision),
:mod:`~ctxstack.proxy.checkpoints` (prefix hashes), :mod:`~ctxstack.proxy.counting` (the
token counter per model name), :mod:`~ctxstack.proxy.forwarding`
(httpx, streaming), :mod:`~ctxstack.proxy.budgets` (per-model budgets, summarisers),
:mod:`~ctxstack.proxy.auth` (tokens), :mod:`~ctxstack.proxy.stats` (headers, totals,
logs), :mod:`~ctxstack.proxy.errors` (OpenAI-shaped errors), :mod:`~ctxstack.proxy.app`.

This is a side layer: it imports the core, :mod:`ctxstack.store` and
:mod:`ctxstack.llm.openai`; nothing in the core imports it.
"""

from ctxstack.proxy.app import app_from_env, create_app
from ctxstack.proxy.settings import ProxySettings, is_loopback
from ctxstack.proxy.stats import (
    COMPACTION_HEADER,
    COUNTER_HEADER,
    SUMMARIZER_HEADER,
    TOKENS_HEADER,
    ProxyStats,
    parse_compaction_header,
)

__all__ = [
    "COMPACTION_HEADER",
    "COUNTER_HEADER",
    "SUMMARIZER_HEADER",
    "TOKENS_HEADER",
    "ProxySettings",
    "ProxyStats",
    "app_from_env",
    "create_app",
    "is_loopback",
    "parse_compaction_header",
]
