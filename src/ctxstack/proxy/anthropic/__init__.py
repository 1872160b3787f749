"""The Anthropic Messages wire of ``ctxstack proxy`` (what Claude Code speaks).

``POST /v1/messages`` (JSON or SSE) and ``POST /v1/messages/count_tokens``, fitted by the
shared fitter and forwarded to ``--anthropic-upstream`` (``<url>/v1/messages``).

Modules: :mod:`~ctxstack.proxy.anthropic.wire` (parse, validate: 400 naming the field),
:mod:`~ctxstack.proxy.anthropic.units` (the request as the fitter's units, and the fitted
units rendered back as valid Anthropic messages with the client's blocks untouched),
:mod:`~ctxstack.proxy.anthropic.routes` (the two routes: fit, forward, retry),
:mod:`~ctxstack.proxy.anthropic.relay` (answers, streams, usage, error passthrough),
:mod:`~ctxstack.proxy.anthropic.summarizer` (the upstream as summariser),
:mod:`~ctxstack.proxy.anthropic.errors` (Anthropic's error shape).
"""

from ctxstack.proxy.anthropic.units import count_request, render, to_units
from ctxstack.proxy.anthropic.wire import MessagesRequest, parse_messages_request

__all__ = ["MessagesRequest", "count_request", "parse_messages_request", "render",
           "to_units"]
