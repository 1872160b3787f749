"""The summarisers of an Anthropic conversation when no ``FAST_LLM_*`` one is configured:
the Anthropic upstream itself, asked with the request's model and the client's own
credentials (``x-api-key`` / ``authorization``, ``anthropic-version``, ``anthropic-beta``):
the client's key is the only key there is on this wire.

It implements the part of :class:`~ctxstack.LLM` the guard's summariser uses (``chat``
and the two size properties); a failure raises, which the guard turns into its fallback
(truncation), never into a failed client request.

The client's own ``system`` goes first in the summariser's ``system``, the summariser's
instructions after it: the provider's prompt cache then serves that prefix, and a
credential that only accepts requests carrying its client's system prompt (a Claude Code
subscription login) is accepted for summaries too.

:class:`AnthropicPrefixSummarizer` asks first as the conversation's own continuation: the
body as last forwarded (``system``, ``tools`` and the messages of the session's view, in
the same bytes), with the instruction appended as the last user text and ``tool_choice``
``none`` — so the provider's prompt cache serves all but the instruction. Any failure
falls back to :class:`AnthropicSummarizer`'s transcript request.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ctxstack import ChatMessage, LLMResult, ModelBudget, Usage
from ctxstack.errors import LLMError
from ctxstack.protocol import ChatStream
from ctxstack.proxy.anthropic.recall import anthropic_usage
from ctxstack.proxy.chat_wire import SUMMARY_INTRO, PrefixSummarizer
from ctxstack.proxy.forwarding import Upstream, read_error
from ctxstack.proxy.recall import UpstreamUsage

CREDENTIAL_HEADERS = ("x-api-key", "authorization", "anthropic-version", "anthropic-beta")
DEFAULT_VERSION = "2023-06-01"


class AnthropicSummarizer:
    """``chat`` through ``POST <anthropic upstream>/v1/messages`` (see the module doc)."""

    def __init__(self, upstream: Upstream, model: str, budget: ModelBudget,
                 headers: Sequence[tuple[str, str]], client_system: object = None) -> None:
        self.upstream = upstream
        self.model = model
        self.budget = budget
        self.client_system: list[Any] = (
            [{"type": "text", "text": client_system}] if isinstance(client_system, str)
            and client_system else list(client_system) if isinstance(client_system, list)
            else [])
        wanted = {k.lower(): v for k, v in headers if k.lower() in CREDENTIAL_HEADERS}
        wanted.setdefault("anthropic-version", DEFAULT_VERSION)
        self.headers = [*wanted.items(), ("content-type", "application/json")]

    @property
    def context_size(self) -> int:
        return self.budget.context_size

    @property
    def max_output_tokens(self) -> int:
        return self.budget.max_output_tokens

    async def chat(self, messages: Sequence[ChatMessage], *, tools: Any = None,
                   **opts: Any) -> LLMResult:
        system = "\n\n".join(m.text for m in messages if m.role == "system")
        turns: list[dict[str, Any]] = []
        for m in messages:
            if m.role == "system":
                continue
            role = "assistant" if m.role == "assistant" else "user"
            if turns and turns[-1]["role"] == role:
                turns[-1]["content"] += "\n\n" + m.text
            else:
                turns.append({"role": role, "content": m.text})
        if not turns or turns[0]["role"] != "user":
            turns.insert(0, {"role": "user", "content": "Summarise the conversation."})
        body: dict[str, Any] = {"model": self.model,
                                "max_tokens": int(opts.get("max_tokens") or 1024),
                                "messages": turns}
        blocks = [*self.client_system, *([{"type": "text", "text": system}] if system else [])]
        if blocks:
            body["system"] = blocks
        response = await self.upstream.open(
            "POST", "messages", query="", headers=self.headers,
            content=json.dumps(body, ensure_ascii=False).encode("utf-8"))
        try:
            raw = await response.aread()
        finally:
            await response.aclose()
        if response.status_code >= 400:
            raise LLMError(f"summary request failed with HTTP {response.status_code}")
        try:
            data = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise LLMError("summary answer is not JSON") from exc
        text = "".join(b.get("text", "") for b in data.get("content") or []
                       if isinstance(b, dict) and b.get("type") == "text")
        usage = data.get("usage") or {}
        return LLMResult(message=ChatMessage.assistant(text), usage=Usage(
            input_tokens=int(usage.get("input_tokens") or 0),
            output_tokens=int(usage.get("output_tokens") or 0), calls=1))

    def stream_chat(self, messages: Sequence[ChatMessage], **opts: Any) -> ChatStream:
        raise NotImplementedError("the proxy's summariser is never streamed")

    async def aclose(self) -> None:
        """Nothing to close: the upstream's pooled client belongs to the app."""


class AnthropicPrefixSummarizer(PrefixSummarizer):
    """The summary asked as the conversation's continuation (see the module doc).

    ``base``: the client's body; ``prefix``: the Anthropic messages to reuse (the session's
    view as last forwarded, valid by Anthropic's rules, cut to leave room for the
    instruction); ``fallback``: the transcript summariser, whose upstream and credentials
    this one uses too.
    """

    def __init__(self, base: Mapping[str, Any], prefix: Sequence[Any],
                 fallback: AnthropicSummarizer) -> None:
        async def send(content: bytes) -> tuple[int, object]:
            if not self.prefix:  # nothing to continue: the transcript request
                return 599, None
            response = await fallback.upstream.open("POST", "messages", query="",
                                                    headers=fallback.headers, content=content)
            _, data = await read_error(response)
            return response.status_code, data

        super().__init__(send, base, prefix, fallback)

    def request_body(self, instruction: str, max_tokens: int | None) -> dict[str, Any]:
        body = dict(self.base)
        for key in ("stream", "tool_choice", "output_format"):
            body.pop(key, None)
        text = {"type": "text", "text": f"{SUMMARY_INTRO}\n\n{instruction}"}
        messages = list(self.prefix)
        last = messages[-1] if messages else None
        if isinstance(last, Mapping) and last.get("role") == "user":
            content = last.get("content")
            blocks = ([{"type": "text", "text": content}] if isinstance(content, str)
                      else list(content or []))
            messages[-1] = {**last, "content": [*blocks, text]}
        else:
            messages.append({"role": "user", "content": [text]})
        body["messages"] = messages
        if body.get("tools"):
            body["tool_choice"] = {"type": "none"}
        out = max_tokens or 1024
        thinking = body.get("thinking")
        if isinstance(thinking, Mapping) and isinstance(thinking.get("budget_tokens"), int):
            out += thinking["budget_tokens"]  # max_tokens must exceed the thinking budget
        body["max_tokens"] = out
        return body

    def answer_text(self, data: object) -> str | None:
        if not isinstance(data, Mapping) or data.get("stop_reason") == "tool_use":
            return None
        text = "".join(str(b.get("text", "")) for b in data.get("content") or []
                       if isinstance(b, Mapping) and b.get("type") == "text")
        return text if text.strip() else None

    def answer_usage(self, data: Mapping[str, Any]) -> UpstreamUsage:
        return anthropic_usage(data.get("usage"))

    async def aclose(self) -> None:
        """Nothing to close (the upstream's pooled client belongs to the app)."""
