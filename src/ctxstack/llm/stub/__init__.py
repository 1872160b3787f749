"""A small OpenAI-compatible HTTP server that answers from a script, with fault injection.

It is what ctxstack's client tests run against over real loopback HTTP, and what the demo
and browser tests use when no real endpoint is configured (``ctxstack stub-llm``). It
speaks the real wire format — ``POST /v1/chat/completions`` (JSON, or Server-Sent Events
in OpenAI's chunk format with ``[DONE]``, tool-call deltas and the final usage chunk when
``stream_options.include_usage`` is set) and ``GET /v1/models`` — so a client that works
against it works against OpenAI, vLLM or Ollama for the same features.

Answers come, per request, from the first of: a global fault (:attr:`StubServer.fault`),
the reply queue (:meth:`StubServer.push`), the rule (a function of the request), else a
400 saying the script ran out (400, not 500, so a client's retries do not hide it).
A reply is a :class:`StubReply`; the classmethods build the common ones and the faults
(429 with ``Retry-After``, 500, OpenAI's context-overflow 400, 401, a stream cut after N
chunks, truncated JSON text).

It also speaks the OpenAI Responses wire — ``POST /v1/responses`` (JSON, or SSE with
the real event sequence) and its WebSocket mode — from the same replies
(:mod:`ctxstack.llm.stub.responses`).

Usage is deterministic: prompt tokens are ctxstack's heuristic count of the request's
messages, completion tokens the heuristic count of the answer (as
:class:`~ctxstack.llm.ScriptedLLM` counts), so tests can check sums exactly
(:func:`stub_usage`).

Typical use::

    with StubServer() as stub:
        stub.push("Hello!", StubReply.rate_limited(retry_after=0.2))
        llm = stub.client()
        ...
        assert stub.requests[0].messages[-1].text == "hi"
"""

from typing import TYPE_CHECKING

from ctxstack._lazy import lazy_exports
from ctxstack.llm.stub.replies import (
    DEFAULT_MODEL,
    ReplyLike,
    Rule,
    StubReply,
    StubRequest,
    StubToolCall,
    stub_usage,
)

if TYPE_CHECKING:
    from ctxstack.llm.stub.app import StubState, create_app
    from ctxstack.llm.stub.server import StubServer

__all__ = [
    "DEFAULT_MODEL",
    "ReplyLike",
    "Rule",
    "StubReply",
    "StubRequest",
    "StubServer",
    "StubState",
    "StubToolCall",
    "create_app",
    "stub_usage",
]


# The server half needs FastAPI and uvicorn (the ``server`` extra); the replies do not,
# so ``ctxstack chat`` can script the stub's answers with the core install alone.
__getattr__ = lazy_exports(globals(), {
    "StubState": "ctxstack.llm.stub.app",
    "create_app": "ctxstack.llm.stub.app",
    "StubServer": "ctxstack.llm.stub.server",
})
