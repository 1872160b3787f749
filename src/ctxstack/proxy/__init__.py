"""``ctxstack proxy``: context management for any OpenAI-compatible client.

An OpenAI-compatible server in front of an upstream endpoint. ``POST /v1/chat/completions``
is fitted into the requested model's budget by the guard before it is forwarded (a request
already within budget goes out byte for byte as received); every other ``/v1/`` route
passes through unchanged. ``POST /v1/messages`` and ``/v1/messages/count_tokens``
(Anthropic Messages, what Claude Code speaks) are fitted the same way and forwarded to
the Anthropic upstream (:mod:`ctxstack.proxy.anthropic`). Continuing conversations are
recognised by message-prefix hashes and reuse their checkpoint, so a growing conversation
is summarised once per overflow, not once per request; on the Chat wire, per client
session, the view forwarded last time is extended until it overflows, so the provider's
prompt cache keeps serving it.

Modules: :mod:`~ctxstack.proxy.settings` (environment), :mod:`~ctxstack.proxy.request`
(validation, guard views), :mod:`~ctxstack.proxy.fitting` (the decision),
:mod:`~ctxstack.proxy.checkpoints` (prefix hashes), :mod:`~ctxstack.proxy.counting` (the
token counter per model name), :mod:`~ctxstack.proxy.forwarding`
(httpx, streaming), :mod:`~ctxstack.proxy.budgets` (per-model budgets, summarisers),
:mod:`~ctxstack.proxy.sessions` (session keys, views and archives in the database, single
flight), :mod:`~ctxstack.proxy.views` (a view as a recipe over the client's messages),
:mod:`~ctxstack.proxy.session_fit` (extend or recompute), :mod:`~ctxstack.proxy.recall`
(``ctxstack_recall``, wire-neutral) and :mod:`~ctxstack.proxy.chat_wire` (its Chat
Completions side, prefix-reusing summaries),
:mod:`~ctxstack.proxy.auth` (tokens), :mod:`~ctxstack.proxy.stats` (headers, totals,
logs), :mod:`~ctxstack.proxy.errors` (OpenAI-shaped errors), :mod:`~ctxstack.proxy.app`.

The OpenAI Responses wire (``POST /v1/responses`` and its WebSocket mode) reuses that
fitting through its own small modules: :mod:`~ctxstack.proxy.responses_request`
(validation), :mod:`~ctxstack.proxy.responses_view` (items → units → items),
:mod:`~ctxstack.proxy.responses_chains` (``previous_response_id``),
:mod:`~ctxstack.proxy.responses_exchange` (expand, fit, forward, record),
:mod:`~ctxstack.proxy.responses_route` (HTTP), :mod:`~ctxstack.proxy.responses_socket`
(WebSocket).

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
