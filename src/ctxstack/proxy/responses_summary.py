"""The summariser of a Responses conversation as the conversation's own continuation.

When the proxy must summarise (a session's view is recomputed,
:mod:`ctxstack.proxy.session_fit`) and no separate summariser is configured, the summary
is asked of the upstream's ``/responses`` with the body the conversation was last
forwarded with — the same ``instructions``, the same ``tools`` (with ``ctxstack_recall``
when the view being continued offered it), the same leading ``input`` items — and the
summary instruction appended as a last user item. The provider's prompt cache then
serves everything but the instruction. ``tool_choice`` is ``"none"`` (the model must
answer in text), the answer is not streamed and not stored (``store: false``).

Any failure — an error status, a transport error, an answer without text, a call
instead of text — falls back to the guard's own transcript request (the wrapped
summariser), so a summary is never lost to this optimisation.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from ctxstack import LLM, ChatMessage, LLMResult, Usage
from ctxstack.protocol import ChatStream
from ctxstack.proxy.chat_wire import SUMMARY_INTRO
from ctxstack.proxy.responses_recall import WIRE, responses_usage
from ctxstack.proxy.responses_request import dump

log = logging.getLogger("ctxstack.proxy")

Send = Callable[[bytes], Awaitable[tuple[int, object]]]
"""Posts a Responses body upstream: ``(status, decoded JSON or None)``."""
DROPPED = ("stream", "stream_options", "previous_response_id", "conversation", "background",
           "text", "max_tool_calls", "generate", "tool_choice")
"""Body fields a summary request does not carry over (streaming, chaining, a structured
output format, the client's tool choice)."""


class ResponsesPrefixSummarizer:
    """An :class:`~ctxstack.LLM` for the guard's summary calls (see the module doc).

    ``base``: the client's body; ``items``: the input items to reuse (the view as last
    forwarded, cut to the budget); ``recall``: that view offered ``ctxstack_recall``.
    """

    def __init__(self, send: Send, base: Mapping[str, Any], items: Sequence[dict[str, Any]],
                 fallback: LLM, *, recall: bool) -> None:
        self.send = send
        self.base = base
        self.items = list(items)
        self.fallback = fallback
        self.recall = recall
        self.used_prefix = False

    @property
    def context_size(self) -> int:
        return self.fallback.context_size

    @property
    def max_output_tokens(self) -> int:
        return self.fallback.max_output_tokens

    def request_body(self, instruction: str, max_tokens: int | None) -> dict[str, Any]:
        body = {k: v for k, v in self.base.items() if k not in DROPPED}
        if self.recall and WIRE.can_offer(self.base):
            body = WIRE.add_tool(body)
        body["input"] = [*self.items, {"type": "message", "role": "user",
                                       "content": f"{SUMMARY_INTRO}\n\n{instruction}"}]
        if body.get("tools"):
            body["tool_choice"] = "none"
        body["store"] = False
        if max_tokens:
            body["max_output_tokens"] = max(16, max_tokens)
        return body

    async def chat(self, messages: Sequence[ChatMessage], *, tools: Any = None,
                   **opts: Any) -> LLMResult:
        instruction = messages[0].text if messages else ""
        max_tokens = opts.get("max_tokens")
        try:
            status, data = await self.send(dump(self.request_body(
                instruction, max_tokens if isinstance(max_tokens, int) else None)))
            text = answer_text(data) if status < 400 else None
        except Exception as exc:  # the summary falls back; the request goes on
            log.warning("proxy: prefix summary call failed (%s); summarising a transcript",
                        type(exc).__name__)
            text, data = None, None
        if not text:
            return await self.fallback.chat(messages, tools=tools, **opts)
        self.used_prefix = True
        usage = responses_usage(data if isinstance(data, Mapping) else {})
        return LLMResult(message=ChatMessage.assistant(text), usage=Usage(
            input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
            cached_tokens=usage.cache_read_tokens, calls=1))

    def stream_chat(self, messages: Sequence[ChatMessage], **opts: Any) -> ChatStream:
        return self.fallback.stream_chat(messages, **opts)


def answer_text(data: object) -> str | None:
    """The text of a completed response's message items; None when it has none or calls
    a tool."""
    if not isinstance(data, Mapping) or data.get("status") not in (None, "completed"):
        return None
    output = data.get("output")
    if not isinstance(output, list):
        return None
    texts: list[str] = []
    for item in output:
        if not isinstance(item, Mapping):
            continue
        kind = item.get("type")
        if kind != "message" and isinstance(kind, str) and kind.endswith("call"):
            return None
        if kind == "message" and isinstance(item.get("content"), list):
            texts += [p["text"] for p in item["content"] if isinstance(p, Mapping)
                      and p.get("type") == "output_text" and isinstance(p.get("text"), str)]
    text = "".join(texts)
    return text if text.strip() else None
