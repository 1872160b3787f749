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

from collections.abc import Mapping, Sequence
from typing import Any

from ctxstack import LLM
from ctxstack.proxy.chat_wire import SUMMARY_INTRO, PrefixSummarizer, Send
from ctxstack.proxy.recall import UpstreamUsage
from ctxstack.proxy.responses_recall import WIRE, responses_usage

DROPPED = ("stream", "stream_options", "previous_response_id", "conversation", "background",
           "text", "max_tool_calls", "generate", "tool_choice")
"""Body fields a summary request does not carry over (streaming, chaining, a structured
output format, the client's tool choice)."""


class ResponsesPrefixSummarizer(PrefixSummarizer):
    """An :class:`~ctxstack.LLM` for the guard's summary calls (see the module doc): the
    Chat wire's :class:`~ctxstack.proxy.chat_wire.PrefixSummarizer` with the Responses
    request and answer.

    ``base``: the client's body; ``prefix``: the input items to reuse (the view as last
    forwarded, cut to the budget); ``recall``: that view offered ``ctxstack_recall``.
    """

    def __init__(self, send: Send, base: Mapping[str, Any], prefix: Sequence[Any],
                 fallback: LLM, *, recall: bool) -> None:
        super().__init__(send, base, prefix, fallback)
        self.recall = recall

    def request_body(self, instruction: str, max_tokens: int | None) -> dict[str, Any]:
        body = {k: v for k, v in self.base.items() if k not in DROPPED}
        if self.recall and WIRE.can_offer(self.base):
            body = WIRE.add_tool(body)
        body["input"] = [*self.prefix, {"type": "message", "role": "user",
                                        "content": f"{SUMMARY_INTRO}\n\n{instruction}"}]
        if body.get("tools"):
            body["tool_choice"] = "none"
        body["store"] = False
        if max_tokens:
            body["max_output_tokens"] = max(16, max_tokens)
        return body

    def answer_text(self, data: object) -> str | None:
        return answer_text(data)

    def answer_usage(self, data: Mapping[str, Any]) -> UpstreamUsage:
        return responses_usage(data)


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
